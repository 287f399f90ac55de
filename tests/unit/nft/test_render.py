"""render's declaration of an integer-keyed endpoint map: the set's own typeof when it has one (what a
writer declared, or what nft's text listing showed), else `th dport` (nft's JSON does not say)."""

from __future__ import annotations

from netkit.nft.parse import parse
from netkit.nft.parse_listing import parse_listing
from netkit.nft.render import address_port_typeof, render, type_line
from netkit.nft.ruleset import Element, NamedSet, Ruleset
from netkit.rules.nftables.layout import declared

V4 = "ipv4_addr . inet_service"


def test_a_map_declared_with_typeof_renders_and_reads_back_with_it() -> None:
    m = NamedSet("m", ("integer",), V4, elements=frozenset({Element("0", "10.0.0.1 . 80")}),
                 typeof=address_port_typeof(V4, "sctp"))
    assert type_line(m) == "typeof numgen random mod 1 : ip daddr . sctp dport"
    text = render(Ruleset.of("ip", [m], []))
    back = parse(text)
    assert back is not None and back.sets[0].typeof == m.typeof and back.sets == (m,)
    listed = parse_listing(render(Ruleset.of("ip", [m.definition()], [])).splitlines(), "ip", "netkit")
    assert listed is not None and listed.sets[0].typeof == m.typeof


def test_a_map_without_typeof_is_declared_for_any_transport_header() -> None:
    assert type_line(NamedSet("m", ("integer",), V4)) == "typeof numgen random mod 1 : ip daddr . th dport"
    assert type_line(NamedSet("s", ("ipv4_addr",))) == "type ipv4_addr"


def test_the_nftables_layout_declares_its_endpoint_maps_by_protocol() -> None:
    """The backend, not the library, knows which protocol an endpoint map's name stands for."""
    assert declared(NamedSet("endpoints-udp-0e", ("integer",), V4)).typeof == address_port_typeof(V4, "udp")
    own = declared(NamedSet("svc-4DPLPQZ3-default/web/tcp/80", ("integer",), V4))
    assert own.typeof == address_port_typeof(V4, "tcp")
    plain = NamedSet("service-ips", ("ipv4_addr", "inet_proto", "inet_service"), "verdict")
    assert declared(plain) is plain
