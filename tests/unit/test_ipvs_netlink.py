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


def kernel_dest(ip: str, port: int, weight: int, active: int, inactive: int, *, family: bool = True,
                swap: bool = False) -> bytes:
    """A real server as ip_vs_genl_fill_dest lays it out (stats nests included; `swap`: two fields
    in the other order, the same length)."""
    addr = ip_address(ip)

    def u32(kind: int, v: int) -> bytes:
        return nlk.nla(kind, struct.pack("=I", v))

    fields = [nlk.nla(nlk.DEST_ADDR, addr.packed.ljust(16, b"\0")), nlk.nla(nlk.DEST_PORT, struct.pack("!H", port)),
              u32(nlk.DEST_FWD, 0), nlk.nla(nlk.DEST_WEIGHT, struct.pack("=i", weight)), u32(nlk.DEST_U_THRESH, 0),
              u32(nlk.DEST_L_THRESH, 0), u32(nlk.DEST_ACTIVE, active), u32(nlk.DEST_INACT, inactive),
              nested(10, b"".join(u32(k, 0) for k in range(1, 11)))]
    if swap:
        fields[6], fields[7] = u32(nlk.DEST_INACT, inactive), u32(nlk.DEST_ACTIVE, active)
    if family:
        fields.append(nlk.nla(nlk.DEST_ADDR_FAMILY, struct.pack("=H", V4 if addr.version == 4 else V6)))
    return nested(nlk.CMD_ATTR_DEST, b"".join(fields))


def generic(payload: bytes, af: int) -> tuple[object, ...]:
    d = nlk.decode_dest(payload, af)
    return (d.addr, d.port, d.weight, d.active, d.inactive)


def test_the_fast_real_server_reader_reads_what_the_generic_decoder_does() -> None:
    reader = nlk.DestReader()
    cases = [kernel_dest("10.244.1.5", 8080, 1, 0, 0), kernel_dest("10.244.1.6", 53, 0, 7, 2),
             kernel_dest("10.244.1.6", 53, 3, 2, 7, swap=True),  # same length, another layout: learnt again
             kernel_dest("fd00:1::5", 8443, 5, 1, 0), kernel_dest("10.244.1.7", 80, 1, 4, 0, family=False),
             kernel_dest("10.244.1.5", 9090, 2, 65535, 1)]
    for payload in cases:
        assert reader.read(payload, V4) == generic(payload, V4)
    a, b = (reader.read(kernel_dest("10.244.1.5", p, 1, 0, 0), V4)[0] for p in (1, 2))
    assert a is b  # one address object per address


def test_the_reader_shares_the_addresses_it_is_told_of() -> None:
    mine = ip_address("10.244.1.5")
    reader = nlk.DestReader()
    reader.know([mine])
    assert reader.read(kernel_dest("10.244.1.5", 80, 1, 0, 0), V4)[0] is mine


class DumpSocket:
    """Answers a dump with `parts`: lists of (sequence offset, message type, genl payload) per recv."""

    def __init__(self, parts: list[list[tuple[int, int, bytes]]]) -> None:
        self.parts, self.seq = parts, 0

    def send(self, data: bytes) -> int:
        self.seq = next(nlk.messages(data))[2]
        return len(data)

    def recv(self, size: int) -> bytes:
        out = b""
        for delta, kind, body in self.parts.pop(0):
            msg = struct.pack("=BBH", nlk.CMD_NEW_DEST, 1, 0) + body
            out += struct.pack("=IHHII", 16 + len(msg), kind, nlk.NLM_F_MULTI, self.seq + delta, 0) + msg
        return out


def test_the_real_servers_of_a_dump_come_sorted_and_other_answers_are_skipped() -> None:
    nl = nlk.IPVSNetlink.__new__(nlk.IPVSNetlink)
    a, b, c = (kernel_dest(ip, 80, 1, n, 0) for n, ip in enumerate(("10.244.1.9", "10.244.1.5", "10.244.1.7")))
    done = struct.pack("=i", 0)
    nl.sock = DumpSocket([[(0, 42, a), (-1, 42, c), (0, 42, b)], [(0, 42, c), (0, nlk.NLMSG_DONE, done)]])  # type: ignore[assignment]
    nl._seq, nl.family = 5, 42
    rows = nl.dest_fields(b"", V4, nlk.DestReader())
    assert [(str(r[0]), r[3]) for r in rows] == [("10.244.1.5", 1), ("10.244.1.7", 2), ("10.244.1.9", 0)]
