"""Reading nft's text listing (netkit.nft.parse_listing): its normalisations, its refusals
(each makes the kernel read the JSON listing instead), and properties over compiled rulesets printed
the way nft 1.0.6 prints them. Against the real kernel: tests/netns/test_nft_listing.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from ipaddress import ip_network

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netkit.config import Config
from netkit.model import IPFamily
from netkit.nft.parse import FOREIGN
from netkit.nft.parse_listing import Rules, Unrecognised, canonical_rule, parse_listing, shape
from netkit.nft.render import INTEGER_KEY, TYPEOF_ADDRESS
from netkit.nft.ruleset import Chain, Element, Hook, NamedSet, Ruleset
from netkit.rules.nftables.compile import compile
from netkit.rules.nftables.kernel import NftKernel
from tests.unit.nft_states import node_states

CONFIG = Config(cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:244::/48")))

LISTING = """table ip netkit {
	set aff-x {
		type ipv4_addr
		size 65535
		flags dynamic,timeout
		timeout 600s
		elements = { 203.0.113.9 timeout 600s expires 599s }
	}

	map endpoints-tcp-00 {
		typeof numgen random mod 1 : ip daddr . tcp dport
		elements = { 7 : 10.244.1.5 . 8080, 8 : 10.244.1.6 . 8080,
\t\t\t     9 : 10.244.1.7 . 8080 }
	}

	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.96.0.10 . tcp . 80 : goto svc-x }
	}

	chain nat-prerouting {
		type nat hook prerouting priority -100; policy accept;
		jump services
	}

	chain masquerading {
		meta mark & 0x00004000 == 0x00000000 return
		meta mark set meta mark ^ 0x00004000
		masquerade fully-random
	}

	chain svc-x {
		ip saddr != { 10.0.0.0-10.0.0.191, 198.51.100.7 } drop
		meta l4proto tcp dnat to 10.244.1.5:8080
		meta l4proto tcp dnat ip to numgen random mod 3 offset 7 map @endpoints-tcp-00
	}
}
"""


def test_a_listing_reads_into_the_canonical_ruleset() -> None:
    rs = parse_listing(LISTING.splitlines(), "ip", "netkit")
    assert rs is not None
    sets, chains = rs.set_map(), rs.chain_map()
    assert sets["aff-x"] == NamedSet("aff-x", ("ipv4_addr",), None, ("dynamic", "timeout"), 600, 65535), \
        "a dynamic set's remembered clients are runtime state"
    assert sets["endpoints-tcp-00"].key_type == ("integer",)
    assert sets["endpoints-tcp-00"].value_type == "ipv4_addr . inet_service"
    assert sets["endpoints-tcp-00"].elements == {Element(str(k), f"10.244.1.{k - 2} . 8080") for k in (7, 8, 9)}
    assert sets["service-ips"].elements == {Element("10.96.0.10 . tcp . 80", "goto svc-x")}
    assert chains["nat-prerouting"].hook == Hook("nat", "prerouting", -100, "accept")
    assert chains["masquerading"].rules == ("meta mark & 0x4000 == 0x0 return", "meta mark set meta mark ^ 0x4000",
                                            "masquerade fully-random")
    assert chains["svc-x"].rules == (
        "ip saddr != { 10.0.0.0/25, 10.0.0.128/26, 198.51.100.7 } drop",
        "meta l4proto tcp dnat ip to 10.244.1.5:8080",
        "meta l4proto tcp dnat ip to numgen random mod 3 offset 7 map @endpoints-tcp-00")


@pytest.mark.parametrize(("listed", "canonical"), [
    ("meta mark set meta mark | 0x00004000", "meta mark set meta mark | 0x4000"),
    ("meta mark & 0x00000001 == 0x00000000 return", "meta mark & 0x1 == 0x0 return"),
    ("meta l4proto udp dnat to [fd00::5]:53", "meta l4proto udp dnat ip6 to [fd00::5]:53"),
    ("ip6 saddr != { 2001:db8::-2001:db8::1:ffff } drop", "ip6 saddr != 2001:db8::/111 drop"),
    ("th dport { 80, 443 } accept", "th dport { 80, 443 } accept"),
    ('iifname "veth*" accept', 'iifname "veth*" accept'),
])
def test_what_nft_prints_its_own_way_is_normalised(listed: str, canonical: str) -> None:
    family = "ip6" if "ip6" in canonical else "ip"
    assert canonical_rule(listed, family) == canonical


@pytest.mark.parametrize("rule", [
    "counter packets 0 bytes 0",
    "counter",
    "ip daddr 10.96.9.9 drop comment \"x\"",
    "log prefix \"x \"",
    "ip daddr 10.96.9.1-10.96.9.9 drop",
    "reject with icmp host-unreachable",
    "tcp dport < 1024 accept",
    "meta mark 0x00004000 accept",
    "ip daddr == 10.96.0.1 accept",
    "iifname \"a b\" accept",
    "tcp dport vmap { 80 : drop }",
    "meta l4proto tcp dnat to 10.244.1.5",
    "meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 10.0.0.1 . 80, 1 : 10.0.0.2 . 80 }",
    "ip daddr 10.96.0.1  accept",
    "limit rate 10/second accept",
    "ct state established,related accept",
    "meta oifname \"eth0\" accept",
])
def test_a_rule_netkit_does_not_write_is_refused(rule: str) -> None:
    with pytest.raises(Unrecognised):
        canonical_rule(rule, "ip")


def _with(line: str, where: str) -> list[str]:
    """LISTING with `line` inserted after the first line that starts with `where`."""
    lines = LISTING.splitlines()
    at = next(i for i, x in enumerate(lines) if x.strip().startswith(where))
    return [*lines[:at + 1], line, *lines[at + 1:]]


@pytest.mark.parametrize(("line", "where"), [
    ("\t\tflags interval", "map service-ips"),
    ("\t\tcounter", "map service-ips"),
    ("\t\tcomment \"x\"", "map service-ips"),
    ("\t\tgc-interval 10s", "map service-ips"),
    ("\t\tpolicy memory", "map service-ips"),
    ("\t\tauto-merge", "map service-ips"),
    ("\t\telements = { 10.96.0.11 . tcp . 80 counter packets 0 bytes 0 : goto svc-x }", "map service-ips"),
    ("\t\telements = { 10.96.0.11 . tcp . 80 : goto svc-x comment \"x\" }", "map service-ips"),
    ("\t\telements = { 10.96.0.1-10.96.0.9 . tcp . 80 : goto svc-x }", "map service-ips"),
    ("\t\tsize 10", "elements = { 10.96.0.10"),
    ("\t\tcomment \"x\"", "chain masquerading"),
    ("\tflags dormant", "table ip netkit"),
    ("\tcomment \"x\"", "table ip netkit"),
    ("\tflowtable f {", "table ip netkit"),
    ("\tcounter c {", "table ip netkit"),
    ("\t\ttype filter hook ingress device \"eth0\" priority 0; policy accept;", "chain svc-x"),
    ("}\ntable ip netkit {", "}"),
])
def test_a_listing_holding_anything_else_is_refused(line: str, where: str) -> None:
    with pytest.raises(Unrecognised):
        parse_listing(_with(line, where), "ip", "netkit")


@pytest.mark.parametrize("cut", [3, 12, 30, -2])
def test_a_listing_cut_short_is_refused(cut: int) -> None:
    with pytest.raises(Unrecognised):
        parse_listing(LISTING.splitlines()[:cut], "ip", "netkit")


def test_an_empty_listing_is_no_table_and_another_table_is_refused() -> None:
    assert parse_listing([], "ip", "netkit") is None
    with pytest.raises(Unrecognised):
        parse_listing(LISTING.replace("table ip netkit", "table ip other").splitlines(), "ip", "netkit")


def test_sets_and_chains_equal_to_the_committed_ones_are_shared() -> None:
    committed = parse_listing(LISTING.splitlines(), "ip", "netkit")
    assert committed is not None
    again = parse_listing(LISTING.replace("10.244.1.7", "10.244.1.8").splitlines(), "ip", "netkit", like=committed)
    assert again is not None and again != committed
    old = committed.set_map()
    assert [s is old[s.name] for s in again.sets] == [True, False, True]
    assert all(c is d for c, d in zip(again.chains, committed.chains, strict=True))


# ── the kernel falls back to the JSON listing ────────────────────────────────────────────────────

FOREIGN_JSON = json.dumps({"nftables": [
    {"table": {"family": "ip", "name": "netkit", "handle": 1}},
    {"chain": {"family": "ip", "table": "netkit", "name": "services", "handle": 2}},
    {"rule": {"family": "ip", "table": "netkit", "chain": "services", "handle": 3,
              "expr": [{"counter": {"packets": 0, "bytes": 0}}]}},
]})


class Listings(NftKernel):
    """NftKernel whose listings are canned: `text` for the text listing, FOREIGN_JSON for the JSON."""

    def __init__(self, text: str) -> None:
        super().__init__("ip", None, transport="cli")
        self.text = text
        self.read: list[str] = []

    @contextmanager
    def _listed(self, command: str, text: bool) -> Iterator[tuple[int, list[str], str]]:
        self.read.append("text" if text else "json")
        yield 0, (self.text.splitlines() if text else [FOREIGN_JSON]), ""


def test_the_kernel_reads_the_text_listing_when_it_knows_every_line() -> None:
    k = Listings(LISTING)
    assert k.dump() == parse_listing(LISTING.splitlines(), "ip", "netkit")
    assert k.read == ["text"]


def test_the_kernel_reads_the_json_listing_when_the_text_holds_something_unknown() -> None:
    k = Listings("table ip netkit {\n\tchain services {\n\t\tcounter packets 0 bytes 0\n\t}\n}\n")
    live = k.dump()
    assert k.read == ["text", "json"]
    assert live == Ruleset.of("ip", [], [Chain("services", (f"{FOREIGN} counter",))])


# ── properties over compiled rulesets, printed as nft 1.0.6 lists them ──────────────────────────

def nft_listing(rs: Ruleset, per_line: int) -> str:
    """What `nft -y -T list table` prints for `rs` (the differences parse_listing normalises)."""
    out = [f"table {rs.family} {rs.table} {{"]
    for s in rs.sets:
        out += [f"\t{'map' if s.is_map else 'set'} {s.name} {{", f"\t\t{_type(s)}"]
        out += [f"\t\tsize {s.size}"] * (s.size is not None)
        out += [f"\t\tflags {','.join(s.flags)}"] * bool(s.flags)
        out += [f"\t\ttimeout {s.timeout}s"] * (s.timeout is not None)
        items = [e.text() for e in s.elements]
        if items:
            rows = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
            out.append("\t\telements = { " + ",\n\t\t\t     ".join(rows) + " }")
        out += ["\t}", ""]
    for c in rs.chains:
        out.append(f"\tchain {c.name} {{")
        if c.hook:
            out.append(f"\t\ttype {c.hook.type} hook {c.hook.hook} priority {c.hook.priority}; policy {c.hook.policy};")
        out += [f"\t\t{_listed_rule(r, rs.family)}" for r in c.rules]
        out += ["\t}", ""]
    return "\n".join([*out[:-1], "}"]) + "\n"


def _type(s: NamedSet) -> str:
    if s.key_type == ("integer",) and s.value_type in TYPEOF_ADDRESS:
        proto = "tcp" if "tcp" in s.name else "udp" if "udp" in s.name else "sctp"
        return f"typeof {INTEGER_KEY} : {TYPEOF_ADDRESS[s.value_type]} daddr . {proto} dport"
    key = " . ".join(s.key_type)
    return f"type {key} : {s.value_type}" if s.value_type else f"type {key}"


def _listed_rule(rule: str, family: str) -> str:
    words = [f"0x{int(w, 16):08x}" if w.startswith("0x") else w for w in rule.split(" ")]
    text = " ".join(words)
    if " map " not in text:
        text = text.replace(f"dnat {family} to ", "dnat to ")
    return text


@settings(max_examples=60, deadline=None)
@given(data=st.data(), family=st.sampled_from(list(IPFamily)), per_line=st.integers(1, 4))
def test_a_compiled_ruleset_as_nft_lists_it_reads_back_equal(data: st.DataObject, family: IPFamily,
                                                             per_line: int) -> None:
    desired = compile(data.draw(node_states(family, max_services=6)), CONFIG, family)
    assert parse_listing(nft_listing(desired, per_line).splitlines(), desired.family, "netkit") == desired


FOREIGN_STATEMENTS = ("counter packets 1 bytes 60", 'comment "x"', 'log prefix "x "', "limit rate 1/second",
                      "notrack", "meta nftrace set 1", "ip dscp cs1")


@settings(max_examples=60, deadline=None)
@given(data=st.data(), family=st.sampled_from(list(IPFamily)), foreign=st.sampled_from(FOREIGN_STATEMENTS))
def test_a_foreign_statement_anywhere_in_any_rule_is_refused(data: st.DataObject, family: IPFamily,
                                                             foreign: str) -> None:
    desired = compile(data.draw(node_states(family, max_services=3)), CONFIG, family)
    lines = nft_listing(desired, 2).splitlines()
    rules = [i for i, x in enumerate(lines) if x.startswith("\t\t") and not x.startswith(("\t\ttype", "\t\tsize",
                                                                                          "\t\tflags", "\t\ttimeout",
                                                                                          "\t\telements"))
             and not x.startswith("\t\t\t")]
    at = data.draw(st.sampled_from(rules))
    words = lines[at].split(" ")
    cut = data.draw(st.integers(0, len(words)))
    lines[at] = " ".join([*words[:cut], foreign, *words[cut:]])
    with pytest.raises(Unrecognised):
        parse_listing(lines, desired.family, "netkit")


@settings(max_examples=40, deadline=None)
@given(data=st.data(), family=st.sampled_from(list(IPFamily)))
def test_rules_of_one_shape_read_alike_with_and_without_the_shape_cache(data: st.DataObject, family: IPFamily) -> None:
    desired = compile(data.draw(node_states(family, max_services=6)), CONFIG, family)
    listed = [_listed_rule(r, desired.family) for c in desired.chains for r in c.rules]
    shared = Rules(desired.family)
    assert [shared.canonical(x) for x in listed] == [canonical_rule(x, desired.family) for x in listed]
    assert len({shape(x) for x in listed}) <= len(listed)


def test_the_shape_of_a_rule_keeps_its_words_and_classes_its_values() -> None:
    assert shape("ip daddr 10.96.0.10 th dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade") == \
        "ip daddr <A4> th dport <N> ip saddr != <A4> jump <C>"
    assert shape("meta l4proto tcp dnat ip6 to [fd00::1]:8080") == "meta l4proto tcp dnat ip6 to <T6>"
    assert shape("tcp dport 080 accept") == "tcp dport 080 accept", "a number as nft never prints it stays a word"
