"""The conntrack edge: list the kernel's UDP entries and delete the stale ones, over one netlink socket.

What is stale is decided by the pure `netkit.model.conntrack` (kube-proxy's rules: an entry sent to a
checked UDP frontend whose reply does not come from a serving endpoint). This module does the IO:

- `ConntrackCleaner.reconcile(frontends)` opens one NETLINK_NETFILTER socket (inside the daemon's
  network namespace when it has one), dumps the UDP entries of each IP version the frontends need
  (filtered in the kernel by protocol), and deletes the stale ones in batches: one `sendmsg` carries
  up to `batch` delete requests, then their acknowledgements are read — instead of a request, an
  event-loop round trip and a wait per entry (~2.5 ms each with pyroute2's synchronous API). Messages
  are encoded and decoded with pyroute2's ctnetlink message classes. An entry already gone (ENOENT)
  is not an error.
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

    def delete(self, flows: Sequence[Flow]) -> int:
        return self._in_ns(lambda nl: nl.delete(flows, self.batch)) if flows else 0

    def _reconcile(self, nl: _Netlink, checked: Frontends) -> Reconciled:
        start = time.perf_counter()
        read = deleted = 0
        for version in sorted(checked.versions):
            flows = list(nl.dump_udp(version))
            read += len(flows)
            deleted += nl.delete(stale(flows, checked), self.batch)
        return Reconciled(read, deleted, time.perf_counter() - start)

    def _in_ns(self, fn: Callable[[_Netlink], T]) -> T:
        def work() -> T:
            with _Netlink() as nl:
                return fn(nl)
        return in_netns(self.netns, work) if self.netns else work()


class _Netlink:
    """One NETLINK_NETFILTER socket speaking ctnetlink."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind((0, 0))
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

    def _dump(self, msg: Any, version: int) -> Iterator[Flow]:
        seq = self._send([self._encode(msg, IPCTNL_MSG_CT_GET, NLM_F_REQUEST | NLM_F_DUMP, version)])[0]
        for kind, data in self._replies({seq}):
            if kind == "error":
                raise OSError(data, f"ctnetlink dump: {errno.errorcode.get(data, data)}")
            if kind == "msg":
                flow = _flow(data, version)
                if flow is not None:
                    yield flow

    def delete(self, flows: Sequence[Flow], batch: int) -> int:
        from pyroute2.netlink.nfnetlink.nfctsocket import NFCTAttrTuple, nfct_msg

        deleted = 0
        for i in range(0, len(flows), batch):
            chunk = flows[i:i + batch]
            messages = []
            for f in chunk:
                tup = NFCTAttrTuple(family=_FAMILY[f.dst.version], saddr=str(f.src), daddr=str(f.dst),
                                    proto=socket.IPPROTO_UDP, sport=f.sport, dport=f.dport)
                msg = nfct_msg.create_from(tuple_orig=tup, zone=f.zone or None)
                messages.append(self._encode(msg, IPCTNL_MSG_CT_DELETE, NLM_F_REQUEST | NLM_F_ACK, f.dst.version))
            seqs = set(self._send(messages))
            for kind, code in self._replies(seqs):
                if kind == "ack":
                    deleted += 1
                elif code != errno.ENOENT:  # ENOENT: gone already (timed out, or deleted by someone else)
                    log.debug("conntrack delete: %s", errno.errorcode.get(code, code))
        return deleted

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


def _flow(data: bytes, version: int) -> Flow | None:
    from pyroute2.netlink.nfnetlink.nfctsocket import nfct_msg

    msg = nfct_msg(data)
    msg.decode()
    orig, reply = msg.get_attr("CTA_TUPLE_ORIG"), msg.get_attr("CTA_TUPLE_REPLY")
    if orig is None or reply is None:
        return None
    suffix = "V4" if version == 4 else "V6"
    o_ip, o_proto = orig.get_attr("CTA_TUPLE_IP"), orig.get_attr("CTA_TUPLE_PROTO")
    r_ip, r_proto = reply.get_attr("CTA_TUPLE_IP"), reply.get_attr("CTA_TUPLE_PROTO")
    if o_proto.get_attr("CTA_PROTO_NUM") != socket.IPPROTO_UDP:
        return None
    return Flow(src=ip_address(o_ip.get_attr(f"CTA_IP_{suffix}_SRC")), sport=o_proto.get_attr("CTA_PROTO_SRC_PORT"),
                dst=ip_address(o_ip.get_attr(f"CTA_IP_{suffix}_DST")), dport=o_proto.get_attr("CTA_PROTO_DST_PORT"),
                reply_src=ip_address(r_ip.get_attr(f"CTA_IP_{suffix}_SRC")),
                reply_sport=r_proto.get_attr("CTA_PROTO_SRC_PORT"), zone=msg.get_attr("CTA_ZONE") or 0)


class CleanupWorker:
    """Runs `cleaner.reconcile` on its own thread, off the sync path.

    `submit(frontends)` merges the frontends into what is pending and returns at once; the thread
    reconciles everything pending in one pass (one dump per IP version), so a burst of syncs costs
    one cleanup. A failed pass keeps its frontends pending and is retried after `retry` seconds.
    `on_done(result)` is called on the worker thread after each pass."""

    def __init__(self, cleaner: ConntrackCleaner, on_done: Callable[[Reconciled], None] | None = None, *,
                 retry: float = 1.0) -> None:
        self.cleaner = cleaner
        self.on_done = on_done
        self.retry = retry
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
                log.warning("conntrack cleanup failed, retrying: %s", exc)
                with self._cond:
                    # newer submissions win: they carry the serving endpoints of a later sync
                    self._pending = {**work.by_address, **self._pending}
                    self._pending_nodeports = {**work.by_node_port, **self._pending_nodeports}
                    self._busy = False
                    self._cond.wait(self.retry)
                continue
            with self._cond:
                self._busy = False
                self.passes += 1
                self.deleted += result.deleted
            if self.on_done is not None:
                self.on_done(result)
