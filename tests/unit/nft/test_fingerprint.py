"""fingerprint.py's pure parts: taking netlink messages apart, and accounting for netkit's own
element writes (the kernel side is tests/netns/test_nft_fingerprint.py)."""

from __future__ import annotations

import socket
import struct

import pytest

from netkit.nft import fingerprint as fp
from netkit.nft import netlink
from netkit.nft.ruleset import Chain, Element, NamedSet
from netkit.nft.transaction import Transaction

SERVICES = NamedSet("service-ips", ("ipv4_addr", "inet_proto", "inet_service"), "verdict")


def test_unnested_drops_only_the_nested_flag() -> None:
    blob = netlink.element(netlink.SetType.of(SERVICES), "10.96.0.1 . tcp . 80", "goto svc-a", keys_only=False)
    flat = fp.unnested(blob)
    assert len(flat) == len(blob) and flat != blob
    assert [k for k, _, _ in fp.attributes(flat)] == [k for k, _, _ in fp.attributes(blob)]
    assert fp.unnested(flat) == flat


def test_a_truncated_attribute_is_unreadable() -> None:
    with pytest.raises(fp.Unreadable):
        list(fp.attributes(struct.pack("=HH", 12, 1) + b"\0\0\0\0"))


def _message(kind: int, flags: int, seq: int, body: bytes) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), kind, flags, seq, 0) + body


def test_an_error_or_an_interrupted_dump_is_unreadable_and_other_requests_are_skipped() -> None:
    other = _message(fp.NFNL_SUBSYS_NFTABLES << 8 | 3, 0, 6, b"\0" * 8)
    assert list(fp.replies(other, 7)) == []
    with pytest.raises(fp.Unreadable):
        list(fp.replies(_message(fp.NLMSG_ERROR, 0, 7, struct.pack("=i", -2) + b"\0" * 16), 7))
    with pytest.raises(fp.Unreadable):
        list(fp.replies(_message(fp.NFNL_SUBSYS_NFTABLES << 8 | 3, fp.NLM_F_DUMP_INTR, 7, b"\0" * 8), 7))
    done = _message(fp.NLMSG_DONE, 0, 7, struct.pack("=i", 0))
    assert [kind for kind, _, _ in fp.replies(done, 7)] == [fp.NLMSG_DONE]


def test_elements_added_then_deleted_leave_the_fingerprint_as_it_was() -> None:
    name = fp.kernel_name(SERVICES.name)
    start = fp.Fingerprint(sets={name: 1}, elements={name: (3, 12345)}, content={name})
    e = Element("10.96.0.1 . tcp . 80", "goto svc-a")
    added = start.copy()
    rest = fp.account(added, Transaction("ip", add_elements=((SERVICES.name, e),), element_sets=(SERVICES,)))
    assert rest == fp.Rewritten({}, frozenset(), False, {}, frozenset())
    assert added.elements[name][0] == 4 and added != start
    fp.account(added, Transaction("ip", delete_elements=((SERVICES.name, e),), element_sets=(SERVICES,)))
    assert added == start


def test_what_cannot_be_accounted_for_is_left_to_read_back() -> None:
    name = fp.kernel_name("nodeport-ips")
    interval = NamedSet("nodeport-ips", ("ipv4_addr",), flags=("interval",))
    start = fp.Fingerprint(chains={b"gone\0": 1, b"kept\0": 2}, rules={b"gone\0": 3}, sets={name: 1},
                           elements={name: (1, 1)}, content={name})
    tx = Transaction("ip", flush_chains=("kept", "emptied"), delete_chains=("gone",),
                     add_elements=(("nodeport-ips", Element("192.0.2.0/24")),), element_sets=(interval,),
                     rules=(Chain("kept", ("accept", "drop")),))
    rest = fp.account(start, tx)
    assert b"gone\0" not in start.chains and b"gone\0" not in start.rules
    assert rest.chains == {b"kept\0": 2, b"emptied\0": 0} and rest.elements == {name}
    assert not rest.sets_changed and not rest.plain


def test_a_plain_chains_definition_is_its_table_and_name() -> None:
    body = b"".join(netlink.strz(k, v) for k, v in ((1, "netkit"), (3, "svc-a-long-name-x"))) \
        + struct.pack("=HHQ", 12, 2, 7) + struct.pack("=HHI", 8, 6, 1)
    found = fp.Fingerprint()
    fp.add_chain(found, body, b"netkit\0")
    assert found.chains == {b"svc-a-long-name-x\0": fp.plain_chain(b"netkit\0", b"svc-a-long-name-x\0")}


def test_an_answer_not_read_to_its_end_closes_the_socket() -> None:
    """What is left of a dump must never be read as the answer to the next request."""
    ours, kernel = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    chain = _message(fp.NFNL_SUBSYS_NFTABLES << 8 | 3, 0x2, 1, b"\0" * 4 + netlink.strz(1, "netkit"))
    kernel.send(chain + chain + _message(fp.NLMSG_DONE, 0x2, 1, struct.pack("=i", 0)))
    reader = fp.Reader(lambda: ours, "ip", "netkit")
    answer = reader.messages(fp.GETCHAIN, b"")
    assert next(answer) == netlink.strz(1, "netkit")
    answer.close()
    assert ours.fileno() == -1
    kernel.close()
