"""The nftables ruleset generation of a network namespace: how a full sync knows, without listing
anything, that the kernel still holds exactly what netkit last wrote or read.

The kernel numbers every committed nftables transaction of a namespace (nf_tables_commit bumps
`base_seq`; netlink NFT_MSG_GETGEN answers it as NFTA_GEN_ID). Reading objects, a refused batch and
a batch that changes nothing (`add table` of an existing table) leave it as it is; any change by
anyone — `nft add rule`, `nft delete element`, iptables-nft, firewalld — moves it. So:

- after netkit's own apply of k transactions, the generation must be exactly k more than before,
  and before them still the one at which netkit last knew the table; then netkit knows the table
  at that generation (it is what it planned). Anything else (someone else committed in between or
  since netkit last knew the table, or one of its batches changed nothing) means "not known" until
  a full sync reads or compares the table (kernel.py, fingerprint.py);
- after a dump read at generation g (the same before and after the listing), the dump is the table
  at g;
- a full sync that finds the generation still at the known one has nothing to read: the table is the
  one the daemon committed. Only then is the 2 s listing of a 10,000-service table skipped.

The count is per namespace, not per table: a write to any other table (iptables-nft's, say) makes
the next full sync look at netkit's table again — by its fingerprint over netlink (fingerprint.py)
when netkit knows it, else by listing it. Reading it costs one netlink round trip
(tens of microseconds). If the socket cannot be opened the generation is "not known" (None) and
every full sync reads the kernel.
"""

from __future__ import annotations

import itertools
import socket
import struct
from collections.abc import Callable

from netkit.netns import KeptSocket, netlink_socket

NETLINK_NETFILTER = 12
NFNL_SUBSYS_NFTABLES = 10
NFT_MSG_NEWGEN = 15
NFT_MSG_GETGEN = 16
NFTA_GEN_ID = 1
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_NFGEN = struct.Struct("=BBH")  # nfgenmsg: family, version, resource id
_ATTR = struct.Struct("=HH")


def request(seq: int) -> bytes:
    """An NFT_MSG_GETGEN request."""
    body = _NFGEN.pack(socket.AF_UNSPEC, 0, 0)
    return _HEADER.pack(_HEADER.size + len(body), NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_GETGEN,
                        NLM_F_REQUEST, seq, 0) + body


def generation_of(reply: bytes, seq: int) -> int | None:
    """NFTA_GEN_ID of an NFT_MSG_NEWGEN reply to request `seq`; None for anything else."""
    if len(reply) < _HEADER.size + _NFGEN.size:
        return None
    length, kind, _, got_seq, _ = _HEADER.unpack_from(reply)
    if kind != (NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWGEN) or got_seq != seq:
        return None
    offset = _HEADER.size + _NFGEN.size
    while offset + _ATTR.size <= min(length, len(reply)):
        size, attr = _ATTR.unpack_from(reply, offset)
        if size < _ATTR.size:
            return None
        if attr & 0x3FFF == NFTA_GEN_ID and size >= _ATTR.size + 4:
            return int(struct.unpack_from(">I", reply, offset + _ATTR.size)[0])
        offset += (size + 3) & ~3
    return None


class Generation:
    """Reads the generation over one netfilter netlink socket, opened on first use by `opener`
    (which creates it inside the right network namespace). `netns_path` (/run/netns/NAME) is
    checked on every read: a namespace deleted and created again under the same name is another
    namespace, whose generation the old socket would never see move; then the read opens a new
    socket (netns.KeptSocket) and says "not known"."""

    def __init__(self, opener: Callable[[], socket.socket], netns_path: str | None = None) -> None:
        self._kept = KeptSocket(opener, netns_path, timeout=5)
        self._failed = False
        self._seq = itertools.count(1)

    def read(self) -> int | None:
        if self._failed:
            return None
        try:
            sock, replaced = self._kept.get()
        except FileNotFoundError:  # the namespace is gone: nothing known, try again next time
            self.close()
            return None
        except OSError:
            self.close()
            self._failed = True
            return None
        if replaced:
            return None  # another namespace: its generation says nothing of what was known
        try:
            return self._ask(sock)
        except (OSError, struct.error):
            self.close()
            self._failed = True
            return None

    def _ask(self, sock: socket.socket) -> int | None:
        seq = next(self._seq)
        sock.send(request(seq))
        while True:
            reply = sock.recv(65536)
            _, kind, _, got_seq, _ = _HEADER.unpack_from(reply)
            if got_seq == seq or kind == NLMSG_ERROR:
                return generation_of(reply, seq)

    def close(self) -> None:
        self._kept.close()


def netfilter_socket(netns: str | None) -> socket.socket:
    """A netfilter netlink socket in `netns` (None: this process's namespace)."""
    return netlink_socket(netns, NETLINK_NETFILTER)
