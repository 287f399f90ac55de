"""Reading ipsets over nfnetlink (NFNL_SUBSYS_IPSET), decoded by hand: the dump's transport.

`ipset save` cost ~21–23 s for the ~36,000 entries of 3,000 services in the test VM (TCG), where
the tool's own work is emulated (~60 s at 10,000). Here the kernel's list dump of each of netkit's
sets is read over one socket (0.8 s for the same sets) and each entry decoded into the text
`ipset save` prints for it (the spelling `IPSet.entries` holds and the planner compares: see
netkit.rules.ipvs.entries), so nothing else changes. Only netkit's sets are asked for, by name
(a set that does not exist answers ENOENT).

The layout is include/uapi/linux/netfilter/ipset/ip_set.h and net/netfilter/ipset/ip_set_core.c
(ip_set_dump_do): a dump message carries IPSET_ATTR_SETNAME and, in the first message of a set,
its IPSET_ATTR_TYPENAME and IPSET_ATTR_FAMILY; then IPSET_ATTR_ADT, a list of nested
IPSET_ATTR_DATA, one per entry: IPSET_ATTR_IP (nested IPV4/IPV6 address, network order),
IPSET_ATTR_CIDR, IPSET_ATTR_PORT (network order), IPSET_ATTR_PROTO, IPSET_ATTR_IP2, IPSET_ATTR_CIDR2,
IPSET_ATTR_CADT_FLAGS (nomatch), and extensions (timeout, counters, comment) netkit's sets do not
have. A set larger than one message continues in the next ones, each naming the set again.
"""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from netkit.rules.ipvs.netlink import (
    NLA_TYPE_MASK,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NLMSG_DONE,
    NLMSG_ERROR,
    NetlinkError,
    attrs,
    messages,
    nla,
)

NETLINK_NETFILTER = 12
NFNL_SUBSYS_IPSET = 6
CMD_LIST = 7
MSG_LIST = NFNL_SUBSYS_IPSET << 8 | CMD_LIST
PROTOCOL = 6  # IPSET_PROTOCOL_MIN: every kernel with ipset protocol 7 accepts 6 too
ATTR_PROTOCOL, ATTR_SETNAME, ATTR_TYPENAME, ATTR_REVISION, ATTR_FAMILY, ATTR_FLAGS, ATTR_DATA, ATTR_ADT = range(1, 9)
A_IP, A_IP_TO, A_CIDR, A_PORT, A_PORT_TO, A_TIMEOUT, A_PROTO, A_CADT_FLAGS = range(1, 9)
A_IP2, A_CIDR2 = 20, 21
IPADDR_IPV4, IPADDR_IPV6 = 1, 2
NFPROTO_IPV4, NFPROTO_IPV6 = 2, 10
FLAG_NOMATCH = 1 << 2  # IPSET_FLAG_NOMATCH in IPSET_ATTR_CADT_FLAGS
# what `ipset save` prints for a protocol number (getprotobynumber's names, those kube-proxy uses)
PROTOCOL_NAMES = {6: "tcp", 17: "udp", 132: "sctp", 136: "udplite", 1: "icmp", 58: "icmpv6"}


@dataclass(frozen=True, slots=True)
class SetDump:
    """One set as the kernel lists it: entries in `ipset save`'s spelling."""

    name: str
    type: str
    family: int  # NFPROTO_IPV4, NFPROTO_IPV6 (bitmap sets: NFPROTO_IPV4 or 0)
    entries: frozenset[str]


# ---------------------------------------------------------------- encoding (pure)

def list_request(seq: int, name: str) -> bytes:
    """A dump request for one set by name."""
    body = nla(ATTR_PROTOCOL, bytes([PROTOCOL])) + nla(ATTR_SETNAME, name.encode() + b"\0")
    nfgen = struct.pack("=BBH", socket.AF_INET, 0, 0)
    return struct.pack("=IHHII", 16 + 4 + len(body), MSG_LIST, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + nfgen + body


# ---------------------------------------------------------------- decoding (pure)

def decode(payloads: Iterable[bytes]) -> list[SetDump]:
    """The sets a list dump answered (the payloads after the netlink header), in the order met."""
    types: dict[str, tuple[str, int]] = {}
    entries: dict[str, list[str]] = {}
    layouts: dict[int, _EntryLayout] = {}
    for payload in payloads:
        a = attrs(memoryview(payload)[4:])  # after struct nfgenmsg
        name = a.get(ATTR_SETNAME, b"").rstrip(b"\0").decode()
        if ATTR_TYPENAME in a:
            types[name] = (a[ATTR_TYPENAME].rstrip(b"\0").decode(), a.get(ATTR_FAMILY, b"\0")[0])
        into = entries.setdefault(name, [])
        if ATTR_ADT in a:
            into.extend(entry_texts(a[ATTR_ADT], layouts))
    return [SetDump(name, typ, fam, frozenset(entries.get(name, ()))) for name, (typ, fam) in types.items()]


_HDR = struct.Struct("=HH")
# how the entries of one size are laid out: (a struct reading their attributes' headers and values,
# a getter of the headers, what the headers are, the entry's text from the values)
_EntryLayout = tuple[struct.Struct, Callable[[tuple[Any, ...]], tuple[int, ...]], tuple[int, ...],
                     Callable[[tuple[Any, ...]], str]]
_Part = Callable[[tuple[Any, ...]], str]


def entry_texts(adt: bytes, layouts: dict[int, _EntryLayout] | None = None) -> Iterator[str]:
    """The text of each IPSET_ATTR_DATA in an IPSET_ATTR_ADT list. The kernel lays out every entry
    of a set the same way, so the first entry of each size is walked attribute by attribute
    (`entry_text`) and its layout learnt into `layouts`; the next ones are read with one `struct`
    call once their attribute headers are checked (as netlink.DestReader does for real servers)."""
    off, end = 0, len(adt)
    unpack = _HDR.unpack_from
    layouts = {} if layouts is None else layouts
    while off + 4 <= end:
        size, _ = unpack(adt, off)
        if size < 4:
            return
        layout = layouts.get(size)
        if layout is not None:
            vals = layout[0].unpack_from(adt, off + 4)
            if layout[1](vals) == layout[2]:
                yield layout[3](vals)
                off += (size + 3) & ~3
                continue
        learned = _learn(adt, off + 4, off + size)
        if learned is not None:
            layouts[size] = learned
        yield entry_text(adt, off + 4, off + size)
        off += (size + 3) & ~3


def _learn(buf: bytes, off: int, end: int) -> _EntryLayout | None:
    """The layout of the entry in buf[off:end]; None for one with attributes beyond the address,
    port, protocol and prefix lengths (flags, extensions: `entry_text` reads those)."""
    fmt, at, n = "=", off, 0
    headers: list[int] = []
    expected: list[int] = []
    index: dict[int, int] = {}
    widths: dict[int, int] = {}
    while off + 4 <= end:
        size, kind = _HDR.unpack_from(buf, off)
        k = kind & NLA_TYPE_MASK
        if size < 4 or k in index:
            return None
        pad = f"{off - at}x" if off > at else ""
        if k in (A_IP, A_IP2) and size >= 8:
            isize, ikind = _HDR.unpack_from(buf, off + 4)
            width = {IPADDR_IPV4: 4, IPADDR_IPV6: 16}.get(ikind & NLA_TYPE_MASK)
            if width is None or size != 8 + width:
                return None
            fmt += f"{pad}HHHH{width}s"
            headers += range(n, n + 4)
            expected += [size, kind, isize, ikind]
            index[k], widths[k], n, at = n + 4, width, n + 5, off + size
        elif (k == A_PORT and size == 6) or (k in (A_PROTO, A_CIDR, A_CIDR2) and size == 5):
            fmt += f"{pad}HH{'2s' if k == A_PORT else 'B'}"
            headers += (n, n + 1)
            expected += [size, kind]
            index[k], n, at = n + 2, n + 3, off + size
        else:
            return None
        off += (size + 3) & ~3
    if A_IP not in index and A_PORT not in index:
        return None
    return struct.Struct(fmt), itemgetter(*headers), tuple(expected), _formatter(index, widths)


def _formatter(index: dict[int, int], widths: dict[int, int]) -> _Part:
    """An entry's text from its values, as `entry_text` spells it."""
    if set(index) in ({A_IP, A_PORT, A_PROTO}, {A_IP, A_PORT, A_PROTO, A_IP2}):  # most entries: one f-string
        return _ip_port_formatter(index, widths)
    parts: list[_Part] = []
    if A_IP in index:
        parts.append(_ip_part(index[A_IP], widths[A_IP], index.get(A_CIDR)))
    if A_PORT in index:
        parts.append(_port_part(index[A_PORT], index.get(A_PROTO)))
    if A_IP2 in index:
        parts.append(_ip_part(index[A_IP2], widths[A_IP2], index.get(A_CIDR2)))
    if len(parts) == 1:
        return parts[0]
    return lambda v: ",".join([part(v) for part in parts])


def _ip_port_formatter(index: dict[int, int], widths: dict[int, int]) -> _Part:
    """hash:ip,port and hash:ip,port,ip entries (KUBE-LOOP-BACK, KUBE-CLUSTER-IP, …)."""
    ntop, names = socket.inet_ntop, PROTOCOL_NAMES
    a, af = index[A_IP], socket.AF_INET if widths[A_IP] == 4 else socket.AF_INET6
    port, proto = index[A_PORT], index[A_PROTO]
    if A_IP2 not in index:
        return lambda v: f"{ntop(af, v[a])},{names.get(v[proto]) or v[proto]}:{v[port][0] << 8 | v[port][1]}"
    b, af2 = index[A_IP2], socket.AF_INET if widths[A_IP2] == 4 else socket.AF_INET6
    return lambda v: (f"{ntop(af, v[a])},{names.get(v[proto]) or v[proto]}:{v[port][0] << 8 | v[port][1]},"
                      f"{ntop(af2, v[b])}")


def _ip_part(i: int, width: int, cidr: int | None) -> _Part:
    af, host, ntop = (socket.AF_INET, 32, socket.inet_ntop) if width == 4 else (socket.AF_INET6, 128,
                                                                                 socket.inet_ntop)
    if cidr is None:
        return lambda v: ntop(af, v[i])
    return lambda v: ntop(af, v[i]) if v[cidr] == host else f"{ntop(af, v[i])}/{v[cidr]}"


def _port_part(i: int, proto: int | None) -> _Part:
    if proto is None:
        return lambda v: str(v[i][0] << 8 | v[i][1])
    return lambda v: f"{PROTOCOL_NAMES.get(v[proto]) or v[proto]}:{v[i][0] << 8 | v[i][1]}"


def entry_text(buf: bytes, off: int, end: int) -> str:
    """One entry's text as `ipset save` prints it: `ip[/cidr],proto:port,ip2[/cidr2]`, the parts
    its type has (a bitmap:port entry: just the port)."""
    ip = ip2 = port = ""
    cidr = cidr2 = proto = -1
    nomatch = False
    unpack = _HDR.unpack_from
    while off + 4 <= end:
        size, kind = unpack(buf, off)
        if size < 4:
            break
        kind &= NLA_TYPE_MASK
        if kind == A_IP:
            ip = _address(buf, off + 4)
        elif kind == A_PORT:
            port = str(buf[off + 4] << 8 | buf[off + 5])
        elif kind == A_PROTO:
            proto = buf[off + 4]
        elif kind == A_IP2:
            ip2 = _address(buf, off + 4)
        elif kind == A_CIDR:
            cidr = buf[off + 4]
        elif kind == A_CIDR2:
            cidr2 = buf[off + 4]
        elif kind == A_CADT_FLAGS:
            nomatch = bool(struct.unpack_from("!I", buf, off + 4)[0] & FLAG_NOMATCH)
        off += (size + 3) & ~3
    parts = []
    if ip:
        parts.append(_with_cidr(ip, cidr))
    if port:
        parts.append(f"{PROTOCOL_NAMES.get(proto, str(proto))}:{port}" if proto >= 0 else port)
    if ip2:
        parts.append(_with_cidr(ip2, cidr2))
    text = ",".join(parts)
    return f"{text} nomatch" if nomatch else text


def _address(buf: bytes, off: int) -> str:
    """The nested IPSET_ATTR_IPADDR_IPV4/IPV6 at `off`."""
    size, kind = _HDR.unpack_from(buf, off)
    if kind & NLA_TYPE_MASK == IPADDR_IPV4:
        return socket.inet_ntop(socket.AF_INET, buf[off + 4:off + 8])
    return socket.inet_ntop(socket.AF_INET6, buf[off + 4:off + 20])


def _with_cidr(ip: str, cidr: int) -> str:
    host = 128 if ":" in ip else 32
    return ip if cidr < 0 or cidr == host else f"{ip}/{cidr}"


# ---------------------------------------------------------------- the socket (IO)

class IPSetNetlink:
    """A netfilter netlink socket (in `netns`) that lists sets."""

    def __init__(self, netns: str | None = None) -> None:
        from netkit.netns import netlink_socket

        self.sock = netlink_socket(netns or None, NETLINK_NETFILTER, rcvbuf=1 << 20)
        self._seq = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> IPSetNetlink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sets(self, names: Iterable[str]) -> list[SetDump]:
        """The sets of these names that exist, with their entries."""
        out: list[SetDump] = []
        for name in names:
            out += decode(self._dump(name))
        return out

    def _dump(self, name: str) -> list[bytes]:
        self._seq += 1
        seq = self._seq
        self.sock.send(list_request(seq, name))
        out: list[bytes] = []
        while True:
            data = self.sock.recv(1 << 20)
            for kind, _, s, payload in messages(data):
                if s != seq:
                    continue
                if kind == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", payload)[0]
                    if code in (0, errno.ENOENT):  # no such set
                        return out
                    raise NetlinkError(code, f"list ipset {name}: {errno.errorcode.get(code, code)}")
                if kind == NLMSG_DONE:
                    return out
                if kind == MSG_LIST:
                    out.append(payload)

