"""The hand-made IPVS netlink codec (netkit.rules.ipvs.netlink): what it encodes decodes back as the
kernel's dump does, and a batch stops before the removals when an addition failed. The real kernel
answers in tests/vm/test_ipvs_kernel.py."""

from __future__ import annotations

import socket
import struct
from ipaddress import ip_address

import pytest

from netkit.rules.ipvs import netlink as nlk

V4, V6 = socket.AF_INET, socket.AF_INET6


def nested(kind: int, body: bytes) -> bytes:
    return nlk.nla(kind | nlk.NLA_F_NESTED, body)  # a dump message after its genl header


@pytest.mark.parametrize(("af", "addr", "port", "fwmark", "persistent"), [
    (V4, "10.96.0.10", 80, 0, None), (V6, "fd00::10", 443, 0, 10800), (V4, None, 0, 0x4E4B0001, 30)])
def test_a_service_decodes_as_it_was_encoded(af: int, addr: str | None, port: int, fwmark: int,
                                             persistent: int | None) -> None:
    ip = ip_address(addr) if addr else None
    body = nlk.service_full(nlk.service_key(af, 6, ip, port, fwmark), af, "wrr", persistent)
    svc = nlk.decode_service(nested(nlk.CMD_ATTR_SERVICE, body))
    assert (svc.af, svc.addr, svc.port, svc.fwmark, svc.scheduler) == (af, ip, port, fwmark, "wrr")
    assert (svc.timeout if svc.flags & nlk.PERSISTENT else None) == persistent


def test_the_netmask_is_all_ones_for_ipv4_and_the_prefix_length_for_ipv6() -> None:
    for af, want in ((V4, 0xFFFFFFFF), (V6, 128)):
        a = nlk.attrs(nlk.service_full(nlk.service_key(af, 6, ip_address("10.0.0.1" if af == V4 else "::1"), 1, 0),
                                       af, "rr", None))
        assert struct.unpack("=I", a[nlk.SVC_NETMASK])[0] == want
        assert struct.unpack("!H", a[nlk.SVC_PORT])[0] == 1  # ports big-endian


def test_a_real_server_decodes_with_its_weight_and_connection_counts() -> None:
    body = nlk.dest_attrs(ip_address("fd00:1::5"), 8443, 0) + nlk.nla(nlk.DEST_ACTIVE, struct.pack("=I", 3))
    d = nlk.decode_dest(nested(nlk.CMD_ATTR_DEST, body), V4)  # the dest's own family wins
    assert (d.addr, d.port, d.weight, d.active, d.inactive) == (ip_address("fd00:1::5"), 8443, 0, 3, 0)
    assert nlk.DEST_WEIGHT not in nlk.attrs(nlk.dest_attrs(ip_address("10.0.0.1"), 80, None))  # a delete: key only


class FakeSocket:
    """Acknowledges every request; those whose sequence number is in `refuse` with EEXIST."""

    def __init__(self, refuse: set[int]) -> None:
        self.refuse, self.sent, self.acks = refuse, [], []

    def send(self, data: bytes) -> int:
        for _, _, seq, _ in nlk.messages(data):
            self.sent.append(seq)
            err = -17 if seq in self.refuse else 0
            header = struct.pack("=IHHII", 36, nlk.NLMSG_ERROR, 0, seq, 0)
            self.acks.append(header + struct.pack("=i", err) + b"\0" * 16)
        return len(data)

    def recv(self, size: int) -> bytes:
        return self.acks.pop(0)


def netlink(refuse: set[int]) -> tuple[nlk.IPVSNetlink, FakeSocket]:
    nl = nlk.IPVSNetlink.__new__(nlk.IPVSNetlink)
    fake = FakeSocket(refuse)
    nl.sock, nl._seq, nl.family = fake, 0, 42  # type: ignore[assignment]
    return nl, fake


def step(i: int) -> nlk.Step:
    return (lambda: f"step {i}"), nlk.request(nlk.CMD_NEW_DEST, b"")


def test_removals_are_not_sent_when_an_addition_failed() -> None:
    nl, fake = netlink(refuse={2})
    with pytest.raises(nlk.NetlinkError, match="step 1: File exists"):
        nl.write([[step(0), step(1), step(2)], [step(3)]])
    assert fake.sent == [1, 2, 3]  # the first group went out whole (one batch); the second never


def test_groups_go_out_in_batches_and_all_of_them_when_nothing_fails() -> None:
    nl, fake = netlink(refuse=set())
    nl.write([[step(i) for i in range(nlk.BATCH + 5)], [step(-1)]])
    assert fake.sent == list(range(1, nlk.BATCH + 7))
