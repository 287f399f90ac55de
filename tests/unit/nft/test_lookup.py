"""Asking whether an nftables table or chain exists, by name (netkit/nft/lookup.py): the
requests' bytes and the reading of the answers."""

from __future__ import annotations

import errno
import socket
import struct

import pytest

from netkit.nft import lookup
from netkit.nft import netlink as nl


def test_a_table_is_asked_for_by_name_and_the_answer_read() -> None:
    """NFT_MSG_GETTABLE of one table (not a dump) with an acknowledgement; its table message says
    it exists, ENOENT that it does not, another error is raised, and an unrelated reply is skipped."""
    req = lookup.table_request("ip6", "netkit", 7)
    length, kind, flags, seq, _ = struct.unpack_from("=IHHII", req)
    assert (length, kind, flags, seq) == (len(req), 10 << 8 | 1, 0x1 | 0x4, 7)
    assert req[16] == socket.AF_INET6 and req[20:] == nl.strz(1, "netkit")

    def reply(kind: int, seq: int, body: bytes) -> bytes:
        return struct.pack("=IHHII", 16 + len(body), kind, 0, seq, 0) + body

    def error(seq: int, code: int) -> bytes:
        return reply(2, seq, struct.pack("=i", code) + bytes(16))

    table = reply(10 << 8, 7, bytes(4) + nl.strz(1, "netkit"))
    assert lookup.answer(table + error(7, 0), 7) is True
    assert lookup.answer(error(6, -errno.ENOENT) + error(7, -errno.ENOENT), 7) is False
    assert lookup.answer(error(7, 0), 7) is None  # an acknowledgement alone: the table comes first
    assert lookup.answer(table, 7, lookup.NFT_MSG_NEWCHAIN) is None  # not the kind asked about
    with pytest.raises(OSError):
        lookup.answer(error(7, -errno.EPERM), 7)
    req = lookup.chain_request("ip", "mangle", "KUBE-IPTABLES-HINT", 3)
    length, kind, flags, seq, _ = struct.unpack_from("=IHHII", req)
    assert (length, kind, flags, seq) == (len(req), 10 << 8 | 4, 0x1 | 0x4, 3)
    assert req[20:] == nl.strz(1, "mangle") + nl.strz(3, "KUBE-IPTABLES-HINT")
