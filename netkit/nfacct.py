"""nfacct counter objects over netlink (NETLINK_NETFILTER, subsystem NFNL_SUBSYS_ACCT), for
kube-proxy's two optional counters in iptables mode (pkg/util/nfacct): `ensure` creates one if it
is missing, `packets` reads one. The `nfacct` tool is not needed; each call opens its own socket in
the calling thread's network namespace (wrap it in netkit.netns.in_netns for another one).
"""

from __future__ import annotations

import errno
import os
import socket
import struct

from netkit.netns import in_netns
from netkit.rules.iptables.names import NFACCT_COUNTERS as COUNTERS

NETLINK_NETFILTER = 12
NFNL_SUBSYS_ACCT = 7
MSG_NEW, MSG_GET = 0, 1
NFACCT_NAME, NFACCT_PKTS, NFACCT_BYTES = 1, 2, 3
NAME_MAX = 32  # NFACCT_NAME_MAX, with the terminating NUL
NLM_F_REQUEST, NLM_F_ACK, NLM_F_CREATE = 0x1, 0x4, 0x400
NLMSG_ERROR, NLMSG_DONE = 2, 3


class NfacctError(OSError):
    pass


def _attr(kind: int, payload: bytes) -> bytes:
    data = struct.pack("=HH", 4 + len(payload), kind) + payload
    return data + b"\0" * (-len(data) % 4)


def _message(msg: int, flags: int, name: str, seq: int) -> bytes:
    raw = name.encode()
    if not raw or len(raw) >= NAME_MAX:
        raise NfacctError(errno.EINVAL, f"nfacct name {name!r}: 1 to {NAME_MAX - 1} bytes")
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, 0) + _attr(NFACCT_NAME, raw + b"\0")
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_ACCT << 8) | msg, flags, seq, 0) + body


def _attrs(payload: bytes) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    at = 4  # after struct nfgenmsg
    while at + 4 <= len(payload):
        length, kind = struct.unpack_from("=HH", payload, at)
        if length < 4:
            break
        out[kind & 0x3FFF] = payload[at + 4:at + length]
        at += (length + 3) & ~3
    return out


def _request(msg: int, flags: int, name: str) -> dict[int, bytes]:
    """Send one request and read until its ACK: the attributes of the reply (if any); an error as NfacctError."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER) as s:
        s.settimeout(2.0)
        s.bind((0, 0))
        seq = 1
        s.send(_message(msg, flags | NLM_F_REQUEST | NLM_F_ACK, name, seq))
        found: dict[int, bytes] = {}
        while True:
            data = s.recv(65536)
            at = 0
            while at + 16 <= len(data):
                length, kind, _, rseq, _ = struct.unpack_from("=IHHII", data, at)
                body = data[at + 16:at + length]
                at += (length + 3) & ~3
                if rseq != seq:
                    continue
                if kind == NLMSG_ERROR:
                    (code,) = struct.unpack_from("=i", body)
                    if code:
                        raise NfacctError(-code, f"nfacct {name}: {os.strerror(-code)}")
                    return found
                if kind == NLMSG_DONE:
                    return found
                found = _attrs(body)
            if length == 0:
                raise NfacctError(errno.EPROTO, "nfacct: empty netlink message")


def packets(name: str) -> int | None:
    """The packet count of counter `name`, None when there is no such counter."""
    try:
        attrs = _request(MSG_GET, 0, name)
    except NfacctError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise
    raw = attrs.get(NFACCT_PKTS)
    return struct.unpack(">Q", raw[:8])[0] if raw else 0


def ensure(name: str) -> None:
    """Create counter `name` unless it exists (kube-proxy's Ensure: an existing one keeps its count)."""
    if packets(name) is not None:
        return
    try:
        _request(MSG_NEW, NLM_F_CREATE, name)
    except NfacctError as exc:
        if exc.errno not in (errno.EBUSY, errno.EEXIST):  # created meanwhile
            raise


def ensure_counters(netns: str | None = None,
                    names: tuple[str, ...] = COUNTERS) -> tuple[tuple[str, ...], dict[str, str]]:
    """Create each counter (in `netns`): (the names that exist now, {name: why not} for the others)."""
    made: list[str] = []
    failed: dict[str, str] = {}
    for name in names:
        try:
            if netns:
                in_netns(netns, lambda n=name: ensure(n))  # type: ignore[misc]
            else:
                ensure(name)
            made.append(name)
        except OSError as exc:
            failed[name] = str(exc)
    return tuple(made), failed


def read(name: str, netns: str | None = None) -> int | None:
    """packets(name), in `netns` when given; None also when netlink fails."""
    try:
        return in_netns(netns, lambda: packets(name)) if netns else packets(name)
    except OSError:
        return None


def existing(netns: str | None = None, names: tuple[str, ...] = COUNTERS) -> tuple[str, ...]:
    """The counters of `names` that exist (in `netns`), created by nobody here: for the one-shot
    commands, whose rules count into them as `netkit run`'s (or kube-proxy's) do."""
    return tuple(n for n in names if read(n, netns) is not None)
