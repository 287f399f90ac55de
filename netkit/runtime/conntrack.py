"""The conntrack edge: list the kernel's UDP entries and delete the stale ones, over one netlink socket.

What is stale is decided by the pure `netkit.model.conntrack` (kube-proxy's rules: an entry sent to a
checked UDP frontend whose reply does not come from a serving endpoint). This module does the IO:

- `ConntrackCleaner.reconcile(frontends)` opens one NETLINK_NETFILTER socket (inside the daemon's
  network namespace when it has one), dumps the UDP entries of each IP version the frontends need
  (filtered in the kernel by protocol), and deletes the stale ones in batches: one `sendmsg` carries
  up to `batch` delete requests, then their acknowledgements are read — instead of a request, an
  event-loop round trip and a wait per entry (~2.5 ms each with pyroute2's synchronous API). The dump
  request (with its kernel-side filter) is encoded with pyroute2's ctnetlink message class; the
  delete requests and the dump's entries are encoded and parsed by hand — only the tuples and the
  zone are needed, and pyroute2's generic codec costs 0.1–0.5 ms an entry. An entry already gone
  (ENOENT) is not an error.
- `CleanupWorker` runs reconciliations off the sync path: the daemon hands it the frontends to check
  after each sync and goes on; the worker thread merges what arrives while it works and retries what
  failed. A sync's latency therefore does not depend on how many flows it makes stale.

The socket is opened by a helper thread that entered the namespace (`netkit.netns.in_netns`), not
with pyroute2's `netns=` argument: that forks a child later ended with SIGTERM, and a forked child
shares the asyncio loop's signal wake-up fd, so the daemon took the child's SIGTERM for its own.
"""

from __future__ import annotations

import errno
import logging
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Any, TypeVar

from netkit.model.conntrack import Flow, Frontends, stale
from netkit.model.types import Protocol
from netkit.netns import in_netns

log = logging.getLogger(__name__)

NETLINK_NETFILTER = 12
NFNL_SUBSYS_CTNETLINK = 1
IPCTNL_MSG_CT_GET, IPCTNL_MSG_CT_DELETE = 1, 2
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
_HEADER = struct.Struct("=IHHII")
_FAMILY = {4: socket.AF_INET, 6: socket.AF_INET6}
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Reconciled:
    flows: int  # UDP entries read
    deleted: int
    seconds: float
    versions: tuple[VersionPass, ...] = ()  # the same, per IP version read (kube-proxy's per-family metrics)


@dataclass(frozen=True, slots=True)
class VersionPass:
    version: int  # 4 or 6
    deleted: int
    seconds: float


class ConntrackCleaner:
    """Reads and deletes conntrack entries over netlink (pyroute2's message classes, one socket).
    Constructing it does no IO; every method blocks (call it from a worker thread)."""

    def __init__(self, netns: str | None = None, *, batch: int = 256) -> None:
        self.netns = netns
        self.batch = batch

    def reconcile(self, checked: Frontends) -> Reconciled:
        """Delete the UDP entries that `checked` makes stale (every IP version it names)."""
        if not checked:
            return Reconciled(0, 0, 0.0)
        return self._in_ns(lambda nl: self._reconcile(nl, checked))

    def flows(self, version: int = 4) -> list[Flow]:
        """Every UDP entry of one IP version (for tests and tools)."""
        return self._in_ns(lambda nl: list(nl.dump_udp(version)))

    def entries(self, version: int = 4) -> list[tuple[Protocol, Flow]]:
        """Every TCP, UDP and SCTP entry of one IP version, with its protocol (`netkit flows`)."""
        return self._in_ns(lambda nl: list(nl.dump_all(version)))

    def delete(self, flows: Sequence[Flow]) -> int:
        return self._in_ns(lambda nl: nl.delete(flows, self.batch)) if flows else 0

    def _reconcile(self, nl: _Netlink, checked: Frontends) -> Reconciled:
        start = time.perf_counter()
        read = 0
        passes = []
        for version in sorted(checked.versions):
            began = time.perf_counter()
            flows = list(nl.dump_udp(version))
            read += len(flows)
            deleted = nl.delete(stale(flows, checked), self.batch)
            passes.append(VersionPass(version, deleted, time.perf_counter() - began))
        return Reconciled(read, sum(p.deleted for p in passes), time.perf_counter() - start, tuple(passes))

    def _in_ns(self, fn: Callable[[_Netlink], T]) -> T:
        def work() -> T:
            with _Netlink() as nl:
                return fn(nl)
        return in_netns(self.netns, work) if self.netns else work()


class _Netlink:
    """One NETLINK_NETFILTER socket speaking ctnetlink."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            self.sock.bind((0, 0))
        except OSError:
            self.sock.close()
            raise
        self.seq = int(time.time()) & 0xFFFF_FFF

    def __enter__(self) -> _Netlink:
        return self

    def __exit__(self, *_: object) -> None:
        self.sock.close()

    def dump_udp(self, version: int) -> Iterator[Flow]:
        """The UDP entries of one IP version, filtered by protocol in the kernel (Linux 5.8 and
        later; an older kernel refuses the filter and the whole table is read instead)."""
        from pyroute2.netlink.nfnetlink.nfctsocket import NFCTAttrTuple, nfct_msg

        filt = NFCTAttrTuple(family=_FAMILY[version], proto=socket.IPPROTO_UDP)
        filt.attrs()  # computes filt.flags
        filtered = nfct_msg.create_from(tuple_orig=filt,
                                        cta_filter={"attrs": [["CTA_FILTER_ORIG_FLAGS", filt.flags]]})
        try:
            yield from self._dump(filtered, version)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            yield from self._dump(nfct_msg(), version)

    def dump_all(self, version: int) -> Iterator[tuple[Protocol, Flow]]:
        from pyroute2.netlink.nfnetlink.nfctsocket import nfct_msg

        for proto, flow in self._dump_any(nfct_msg(), version):
            if proto in _PROTOCOLS:
                yield _PROTOCOLS[proto], flow

    def _dump(self, msg: Any, version: int) -> Iterator[Flow]:
        return (flow for proto, flow in self._dump_any(msg, version) if proto == socket.IPPROTO_UDP)

    def _dump_any(self, msg: Any, version: int) -> Iterator[tuple[int, Flow]]:
        seq = self._send([self._encode(msg, IPCTNL_MSG_CT_GET, NLM_F_REQUEST | NLM_F_DUMP, version)])[0]
        for kind, data in self._replies({seq}):
            if kind == "error":
                raise OSError(data, f"ctnetlink dump: {errno.errorcode.get(data, data)}")
            if kind == "msg":
                entry = _entry(data, version)
                if entry is not None:
                    yield entry

    def delete(self, flows: Sequence[Flow], batch: int) -> int:
        deleted = 0
        for i in range(0, len(flows), batch):
            messages = [self._delete_message(f) for f in flows[i:i + batch]]
            for kind, code in self._replies(set(self._send(messages))):
                if kind == "ack":
                    deleted += 1
                elif code != errno.ENOENT:  # ENOENT: gone already (timed out, or deleted by someone else)
                    log.debug("conntrack delete: %s", errno.errorcode.get(code, code))
        return deleted

    def _delete_message(self, f: Flow) -> bytes:
        """IPCTNL_MSG_CT_DELETE of the entry with `f`'s original tuple (and zone), encoded by hand:
        pyroute2's generic encoder takes ~0.5 ms a message."""
        v = f.dst.version
        src_key, dst_key = _IP_SRC_DST[v]
        ip = _nla(src_key, f.src.packed) + _nla(dst_key, f.dst.packed)
        proto = (_nla(CTA_PROTO_NUM, bytes([socket.IPPROTO_UDP])) + _nla(CTA_PROTO_SRC_PORT, _BE16.pack(f.sport))
                 + _nla(CTA_PROTO_DST_PORT, _BE16.pack(f.dport)))
        orig = _nla(CTA_TUPLE_IP | NLA_F_NESTED, ip) + _nla(CTA_TUPLE_PROTO | NLA_F_NESTED, proto)
        body = _nla(CTA_TUPLE_ORIG | NLA_F_NESTED, orig) + (_nla(CTA_ZONE, _BE16.pack(f.zone)) if f.zone else b"")
        self.seq = (self.seq + 1) & 0xFFFF_FFFF
        header = _HEADER.pack(_HEADER.size + 4 + len(body), (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE,
                              NLM_F_REQUEST | NLM_F_ACK, self.seq, 0)
        return header + struct.pack("=BBH", _FAMILY[v], 0, 0) + body

    # --- wire ------------------------------------------------------------------------------------

    def _encode(self, msg: Any, kind: int, flags: int, version: int) -> bytes:
        self.seq = (self.seq + 1) & 0xFFFF_FFFF
        msg["header"]["type"] = (NFNL_SUBSYS_CTNETLINK << 8) | kind
        msg["header"]["flags"] = flags
        msg["header"]["sequence_number"] = self.seq
        msg["nfgen_family"] = _FAMILY[version]
        msg.encode()
        return bytes(msg.data)

    def _send(self, messages: Sequence[bytes]) -> list[int]:
        self.sock.sendall(b"".join(messages))
        return [_HEADER.unpack_from(m)[3] for m in messages]

    def _replies(self, seqs: set[int]) -> Iterator[tuple[str, Any]]:
        """("msg", bytes) for data, ("ack", 0) / ("error", errno) per request, until every request
        in `seqs` is answered (a dump ends with DONE)."""
        waiting = set(seqs)
        while waiting:
            buf = self.sock.recv(1 << 20)
            off = 0
            while off + _HEADER.size <= len(buf):
                length, kind, _flags, seq, _pid = _HEADER.unpack_from(buf, off)
                if length < _HEADER.size:
                    break
                body = buf[off:off + length]
                off += (length + 3) & ~3
                if seq not in waiting:
                    continue
                if kind == NLMSG_DONE:
                    waiting.discard(seq)
                elif kind == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", body, _HEADER.size)[0]
                    waiting.discard(seq)
                    if code == 0:
                        yield "ack", 0
                    else:
                        if code not in (errno.ENOENT,) and kind == NLMSG_ERROR and len(seqs) == 1:
                            raise OSError(code, f"ctnetlink: {errno.errorcode.get(code, code)}")
                        yield "error", code
                else:
                    yield "msg", body


_NLA = struct.Struct("=HH")
_BE16 = struct.Struct("!H")
NLA_F_NESTED = 0x8000
CTA_TUPLE_ORIG, CTA_TUPLE_REPLY, CTA_ZONE = 1, 2, 18
CTA_TUPLE_IP, CTA_TUPLE_PROTO = 1, 2
CTA_PROTO_NUM, CTA_PROTO_SRC_PORT, CTA_PROTO_DST_PORT = 1, 2, 3
_IP_SRC_DST = {4: (1, 2), 6: (3, 4)}  # CTA_IP_V4_SRC/DST, CTA_IP_V6_SRC/DST


def _nla(kind: int, payload: bytes) -> bytes:
    return _NLA.pack(4 + len(payload), kind) + payload + b"\0" * (-len(payload) % 4)


def _attrs(buf: bytes, off: int, end: int) -> dict[int, tuple[int, int]]:
    """The netlink attributes in buf[off:end]: type → (payload start, payload end)."""
    out = {}
    while off + 4 <= end:
        length, kind = _NLA.unpack_from(buf, off)
        if length < 4:
            break
        out[kind & 0x3FFF] = (off + 4, off + length)  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER
        off += (length + 3) & ~3
    return out


def _tuple(buf: bytes, span: tuple[int, int], version: int) -> tuple[bytes, bytes, int, int, int] | None:
    """(source IP, destination IP, protocol, source port, destination port) of a CTA_TUPLE_*."""
    top = _attrs(buf, *span)
    if CTA_TUPLE_IP not in top or CTA_TUPLE_PROTO not in top:
        return None
    ip, proto = _attrs(buf, *top[CTA_TUPLE_IP]), _attrs(buf, *top[CTA_TUPLE_PROTO])
    src_key, dst_key = _IP_SRC_DST[version]
    if src_key not in ip or dst_key not in ip or CTA_PROTO_NUM not in proto:
        return None
    ports = [_BE16.unpack_from(buf, proto[k][0])[0] if k in proto else 0
             for k in (CTA_PROTO_SRC_PORT, CTA_PROTO_DST_PORT)]
    return (buf[slice(*ip[src_key])], buf[slice(*ip[dst_key])], buf[proto[CTA_PROTO_NUM][0]], ports[0], ports[1])


def _entry(data: bytes, version: int) -> tuple[int, Flow] | None:
    """One ctnetlink entry (a whole netlink message) as (IP protocol number, Flow). Parsed by hand:
    pyroute2's generic decoder takes ~130 µs an entry, which adds up over a large table."""
    top = _attrs(data, _HEADER.size + 4, len(data))  # after nlmsghdr and nfgenmsg
    if CTA_TUPLE_ORIG not in top or CTA_TUPLE_REPLY not in top:
        return None
    orig, reply = _tuple(data, top[CTA_TUPLE_ORIG], version), _tuple(data, top[CTA_TUPLE_REPLY], version)
    if orig is None or reply is None:
        return None
    zone = _BE16.unpack_from(data, top[CTA_ZONE][0])[0] if CTA_ZONE in top else 0
    return orig[2], Flow(src=ip_address(orig[0]), sport=orig[3], dst=ip_address(orig[1]), dport=orig[4],
                         reply_src=ip_address(reply[0]), reply_sport=reply[3], zone=zone)


_PROTOCOLS = {socket.IPPROTO_TCP: Protocol.TCP, socket.IPPROTO_UDP: Protocol.UDP, 132: Protocol.SCTP}


class CleanupWorker:
    """Runs `cleaner.reconcile` on its own thread, off the sync path.

    `submit(frontends)` merges the frontends into what is pending and returns at once; the thread
    reconciles everything pending in one pass (one dump per IP version), so a burst of syncs costs
    one cleanup. A failed pass keeps its frontends pending and is retried after `retry` seconds,
    doubling up to `max_retry` while it keeps failing.
    `on_done(result)` is called on the worker thread after each pass."""

    def __init__(self, cleaner: ConntrackCleaner, on_done: Callable[[Reconciled], None] | None = None, *,
                 retry: float = 1.0, max_retry: float = 60.0) -> None:
        self.cleaner = cleaner
        self.on_done = on_done
        self.retry, self.max_retry = retry, max_retry
        self._backoff = retry
        self._pending: dict[Any, Any] = {}
        self._pending_nodeports: dict[Any, Any] = {}
        self._cond = threading.Condition()
        self._busy = False
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.deleted = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="conntrack-cleanup", daemon=True)
        self._thread.start()

    def submit(self, checked: Frontends) -> None:
        if not checked:
            return
        with self._cond:
            self._pending.update(checked.by_address)
            self._pending_nodeports.update(checked.by_node_port)
            self._cond.notify()

    def idle(self) -> bool:
        """Nothing pending and no pass running (tests wait for this)."""
        with self._cond:
            return not self._busy and not self._pending and not self._pending_nodeports

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _take(self) -> Frontends | None:
        with self._cond:
            while not (self._pending or self._pending_nodeports) and not self._stopped:
                self._cond.wait()
            if self._stopped:
                return None
            work = Frontends(self._pending, self._pending_nodeports)
            self._pending, self._pending_nodeports = {}, {}
            self._busy = True
            return work

    def _loop(self) -> None:
        while (work := self._take()) is not None:
            try:
                result = self.cleaner.reconcile(work)
            except OSError as exc:  # never stop over conntrack; kube-proxy logs and goes on
                log.warning("conntrack cleanup failed, retrying in %.0f s: %s", self._backoff, exc)
                with self._cond:
                    # newer submissions win: they carry the serving endpoints of a later sync
                    self._pending = {**work.by_address, **self._pending}
                    self._pending_nodeports = {**work.by_node_port, **self._pending_nodeports}
                    self._busy = False
                    self._cond.wait(self._backoff)
                self._backoff = min(self._backoff * 2, self.max_retry)
                continue
            self._backoff = self.retry
            with self._cond:
                self._busy = False
                self.passes += 1
                self.deleted += result.deleted
            if self.on_done is not None:
                self.on_done(result)
