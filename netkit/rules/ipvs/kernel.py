"""The IPVS backend's IO edge: IPVS through generic netlink (netkit.rules.ipvs.netlink: encoded by
hand, batched), kube-ipvs0 and sysctls through `ip`/`sysctl`, ipsets written with `ipset restore`
and read over nfnetlink (netkit.rules.ipvs.ipset), and the iptables payload through the iptables
backend's own kernel edge (`IptablesKernel`: the `--iptables-backend` choice, legacy or nft, `--wait`
for the xtables lock, batching, entry jumps checked with -C before -I); all optionally inside a
named network namespace.

`dump()` reads each kind of object once, into the typed Ruleset that summarize, trace, keep and the
planner all use: the virtual servers and their real servers (netlink dumps), the kube-ipvs0
addresses (`ip -j addr`), netkit's ipsets (listed over nfnetlink, netkit.rules.ipvs.ipset, in
`ipset save`'s spelling) and the iptables payload (the iptables kernel's dump, IPVS mode's chains and
the built-in ones).

`prepare()` (sysctls, lo up, the kube-ipvs0 dummy) runs once per IPVSKernel, before its first apply;
again only after a cleanup, or when a dump finds kube-ipvs0 gone.

Seen on a real kernel: adding a real server fails with EINVAL while `lo` is down in the namespace
(apply brings lo up); `service set` needs scheduler, flags, timeout and netmask every time (a set
without the persistence flag clears persistence).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from ipaddress import ip_address

from netkit import netns as ns
from netkit.errors import KernelError
from netkit.model import IPFamily, Protocol
from netkit.model.types import IPAddress
from netkit.rules.iptables import ruleset as ipt
from netkit.rules.iptables.kernel import IptablesKernel
from netkit.rules.ipvs import ipset as ipset_nl
from netkit.rules.ipvs import names as n
from netkit.rules.ipvs import netlink as nlk
from netkit.rules.ipvs import ruleset as rs
from netkit.rules.ipvs.plan import Plan, owned
from netkit.rules.ipvs.ruleset import IPSet, RealServer, Ruleset, VirtualServer, sort_services

_PROTO_NUM = {Protocol.TCP: socket.IPPROTO_TCP, Protocol.UDP: socket.IPPROTO_UDP, Protocol.SCTP: 132}
_NUM_PROTO = {v: k for k, v in _PROTO_NUM.items()}
SYSCTLS = (("net.ipv4.vs.conntrack", "1"), ("net.ipv4.vs.expire_nodest_conn", "1"),
           ("net.ipv4.vs.expire_quiescent_template", "1"), ("net.ipv4.ip_forward", "1"))


class IPVSKernel:
    def __init__(self, family: IPFamily = IPFamily.IPV4, netns: str | None = None,
                 iptables_backend: str = "auto", timeouts: tuple[float, float, float] = (0, 0, 0)) -> None:
        self.family = family
        self.timeouts = timeouts  # ipvs.tcpTimeout, tcpFinTimeout, udpTimeout in seconds (0: leave it)
        self.netns = netns
        self.af = socket.AF_INET if family is IPFamily.IPV4 else socket.AF_INET6
        self.iptables = IptablesKernel(family, netns, iptables_backend)
        self._prepared = False

    # ------------------------------------------------------------------ dump

    def dump(self) -> Ruleset:
        return self._dump(None)

    def dump_reusing(self, committed: Ruleset) -> Ruleset:
        """`dump`, holding every object equal to `committed`'s as that object: each set, virtual
        server, real-server tuple, address and iptables chain the kernel has as committed is the
        committed one, so a periodic full sync of an unchanged 10,000-service kernel does not hold a
        second copy of it (and the planner finds them identical at once). A virtual server whose
        real servers have connections is held as read: their counts are what graceful termination
        plans with."""
        return self._dump(committed)

    def _dump(self, reuse: Ruleset | None) -> Ruleset:
        addresses = self._addresses()
        if reuse is not None and addresses == reuse.addresses:
            addresses = reuse.addresses
        sets = self._sets(reuse)
        with self._ipvs() as nl:
            services = sort_services(list(owned(tuple(self._services(nl, reuse)), addresses, sets)))
        payload = self.dump_iptables(None if reuse is None else reuse.iptables)
        if reuse is not None and len(services) == len(reuse.services) and all(
                a is b for a, b in zip(services, reuse.services, strict=True)):
            return rs.with_index(Ruleset(self.family, reuse.services, addresses, sets, payload), reuse.index)
        return Ruleset(self.family, services, addresses, sets, payload)

    @property
    def writes(self) -> frozenset[str]:
        return frozenset({"ipvs", *self.iptables.writes})

    def dump_iptables(self, reuse: ipt.Ruleset | None = None) -> ipt.Ruleset:
        """IPVS mode's chains and the built-in chains (for the entry jumps); nobody else's chains.
        With `reuse`, a chain equal to its chain there is its tuple."""
        live = self.iptables.dump(tuple(n.CHAINS)) if reuse is None else self.iptables.dump_reusing(reuse)
        return ipt.Ruleset(self.family, {
            table: {c: rules for c, rules in live.chains(table).items()
                    if ipt.is_builtin(table, c) or n.is_ipvs_chain(c)}
            for table in n.CHAINS if table in live.tables})

    def _services(self, nl: nlk.IPVSNetlink, reuse: Ruleset | None) -> list[VirtualServer]:
        out: list[VirtualServer] = []
        reader = nlk.DestReader()
        index = reuse.index if reuse is not None else {}
        if reuse is not None:  # the committed addresses, so that the real servers read share them
            reader.know(r.ip for vs in reuse.services for r in vs.reals)
        for svc in nl.services():
            if svc.af != self.af:
                continue
            key = nlk.service_key(svc.af, svc.protocol, svc.addr, svc.port, svc.fwmark)
            proto = _NUM_PROTO.get(svc.protocol, Protocol.TCP)
            was = index.get(rs.VSKey(proto, svc.addr, svc.port, svc.fwmark))
            reals = _reals(nl.dest_fields(key, svc.af, reader), was)
            vs = VirtualServer(proto, svc.addr, svc.port, svc.scheduler,
                               svc.timeout if svc.flags & nlk.PERSISTENT else None, svc.fwmark, self.family, reals)
            out.append(was if was is not None and reals is was.reals and vs == was else vs)
        return out

    def _addresses(self) -> frozenset[IPAddress]:
        proc = ns.run(["ip", "-j", "addr", "show", "dev", n.INTERFACE], self.netns, check=False)
        if proc.returncode != 0:
            self._prepared = False  # kube-ipvs0 is gone: the next apply makes it again
            return frozenset()
        fam = "inet" if self.family is IPFamily.IPV4 else "inet6"
        return frozenset(ip_address(a["local"]) for link in json.loads(proc.stdout or "[]")
                         for a in link.get("addr_info", ()) if a.get("family") == fam)

    def _sets(self, reuse: Ruleset | None = None) -> tuple[IPSet, ...]:
        """netkit's sets of this family, read over nfnetlink (netkit.rules.ipvs.ipset: `ipset save`
        cost ~60 s at 10,000 services in the test VM), sorted by name; a hash set of the other
        family under one of these names is left out (bitmap sets have no family). A set equal to
        its namesake in `reuse` is that set."""
        names = sorted({n.set_name(base, self.family) for base in n.SET_TYPES})
        fam = ipset_nl.NFPROTO_IPV4 if self.family is IPFamily.IPV4 else ipset_nl.NFPROTO_IPV6
        try:
            with ipset_nl.IPSetNetlink(self.netns) as nl:
                dumped = nl.sets(names)
        except OSError as exc:
            raise KernelError(f"ipset: cannot list netkit's sets{self._where()}: {exc.strerror or exc}") from exc
        out = []
        for d in sorted(dumped, key=lambda d: d.name):
            if d.type.startswith("bitmap") or d.family == fam:
                s = IPSet(d.name, d.type, self.family, d.entries)
                was = reuse.set(d.name) if reuse is not None else None
                out.append(was if was is not None and was == s else s)
        return tuple(out)

    # ------------------------------------------------------------------ apply

    def prefetch(self) -> bool:
        """Nothing to read before the dump itself."""
        return False

    def apply(self, plan: Plan, *, stop: Callable[[], bool] | None = None,
              progress: Callable[[str], None] | None = None) -> None:
        self.prepare()
        self._ipset_restore([*(s.create_line() for s in plan.create_sets),
                             *(f"add {s.name} {e}" for s in plan.create_sets for e in sorted(s.entries)),
                             *(f"add {name} {e}" for name, e in plan.add_entries)])
        self._ip_batch([f"addr add {a}/{a.max_prefixlen} dev {n.INTERFACE}" for a in plan.add_addresses])
        if plan.iptables:
            self.iptables.apply(plan.iptables)
        if any((plan.add_services, plan.set_services, plan.del_services, plan.add_reals, plan.set_reals,
                plan.del_reals)):
            with self._ipvs() as nl:
                self._apply_ipvs(nl, plan)
        self._ipset_restore([*(f"del {name} {e}" for name, e in plan.del_entries),
                             *(f"destroy {name}" for name in plan.destroy_sets)])
        self._ip_batch([f"addr del {a}/{a.max_prefixlen} dev {n.INTERFACE}" for a in plan.del_addresses])

    def _apply_ipvs(self, nl: nlk.IPVSNetlink, plan: Plan) -> None:
        """Additions and changes, then (only when all of them succeeded) removals."""
        self._write(nl, self.requests(plan, self._live(nl, (*plan.add_reals, *plan.del_reals))))

    def requests(self, plan: Plan, live: Mapping[tuple[rs.VSKey, tuple[IPAddress, int]], int]) -> list[
            list[nlk.Step]]:
        """The plan's IPVS requests in two groups, additions and changes then removals, given the
        real servers the kernel has in the virtual servers concerned (`_live`). Each step says what
        it is only when it failed (formatting 120,000 descriptions cost more than the requests)."""
        adds: list[nlk.Step] = []
        for vs in plan.add_services:
            key = self._key(vs)
            adds.append((_what("add service", vs), nlk.request(nlk.CMD_NEW_SERVICE, self._spec(vs))))
            adds += [(_what("add real", vs, r),
                      nlk.request(nlk.CMD_NEW_DEST, key, nlk.dest_attrs(r.ip, r.port, r.weight))) for r in vs.reals]
        adds += [(_what("set service", vs), nlk.request(nlk.CMD_SET_SERVICE, self._spec(vs)))
                 for vs in plan.set_services]
        for verb, cmd, pairs in (("add", nlk.CMD_NEW_DEST, plan.add_reals), ("set", nlk.CMD_SET_DEST, plan.set_reals)):
            for vs, r in pairs:
                there = cmd == nlk.CMD_NEW_DEST and (vs.key, r.key) in live  # left draining earlier
                adds.append((_what(f"{'set' if there else verb} real", vs, r),
                             self._dest(nlk.CMD_SET_DEST if there else cmd, vs, r)))
        removals: list[nlk.Step] = []
        for vs, r in plan.del_reals:
            if vs.protocol is Protocol.TCP and live.get((vs.key, r.key), 0) > 0:  # still connected: drain it
                adds.append((_what("drain real", vs, r), self._dest(nlk.CMD_SET_DEST, vs, replace(r, weight=0))))
            else:
                removals.append((_what("delete real", vs, r), self._dest(nlk.CMD_DEL_DEST, vs, r)))
        removals += [(_what("delete service", vs), nlk.request(nlk.CMD_DEL_SERVICE, self._key(vs)))
                     for vs in plan.del_services]
        return [adds, removals]

    def _live(self, nl: nlk.IPVSNetlink, pairs: tuple[tuple[VirtualServer, RealServer], ...]) -> dict[
            tuple[rs.VSKey, tuple[IPAddress, int]], int]:
        """The real servers the kernel has (with their ActiveConn) in the virtual servers whose real
        servers a plan adds or deletes. A plan made against the daemon's memory (a partial sync)
        knows neither the counts nor the real servers left draining: a deleted TCP real server
        still connected is drained (weight 0) as a plan made from a dump would have it, and the
        next full sync deletes it once its connections are gone; one added back while it drains is
        set, not added (the kernel would refuse an add)."""
        out: dict[tuple[rs.VSKey, tuple[IPAddress, int]], int] = {}
        for vs in {vs.key: vs for vs, _ in pairs}.values():
            for d in nl.dests(self._key(vs), self.af):
                out[(vs.key, (d.addr, d.port))] = d.active
        return out

    def _write(self, nl: nlk.IPVSNetlink, groups: list[list[nlk.Step]]) -> None:
        try:
            nl.write(groups)
        except nlk.NetlinkError as exc:
            raise KernelError(f"ipvs: {exc.strerror}{self._where()}") from exc

    def _key(self, vs: VirtualServer) -> bytes:
        return nlk.service_key(self.af, _PROTO_NUM[vs.protocol], vs.ip, vs.port, vs.fwmark)

    def _spec(self, vs: VirtualServer) -> bytes:
        return nlk.service_full(self._key(vs), self.af, vs.scheduler, vs.persistent)

    def _dest(self, cmd: int, vs: VirtualServer, r: RealServer) -> tuple[int, bytes]:
        weight = None if cmd == nlk.CMD_DEL_DEST else r.weight
        return nlk.request(cmd, self._key(vs), nlk.dest_attrs(r.ip, r.port, weight))

    # ------------------------------------------------------------------ setup and cleanup

    def prepare(self) -> None:
        """sysctls IPVS needs and the kube-ipvs0 dummy, in the target namespace only; once per
        kernel object (see the module doc). Few tool runs: each costs ~0.2 s inside the test VM."""
        if self._prepared:
            return
        ns.run(["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in SYSCTLS)], self.netns)
        lines = ["link set lo up"]
        if ns.run(["ip", "link", "show", n.INTERFACE], self.netns, check=False).returncode != 0:
            lines.append(f"link add {n.INTERFACE} type dummy")
        self._ip_batch(lines)
        # ipvs.*Timeout as `ipvsadm --set` (set once, not worth a netlink call of its own): per namespace, both
        # families; 0 leaves a value as it is
        if any(self.timeouts):
            ns.run(["ipvsadm", "--set", *(str(int(t)) for t in self.timeouts)], self.netns)
        self._prepared = True

    def cleanup(self) -> int:
        """Remove netkit's virtual servers, jumps, chains, sets and kube-ipvs0; nothing else. Returns
        how many virtual servers and chains went."""
        mine = self.dump()
        if mine.services:
            with self._ipvs() as nl:
                self._write(nl, [[(_what("delete service", vs), nlk.request(nlk.CMD_DEL_SERVICE, self._key(vs)))
                                  for vs in mine.services]])
        chains = self.iptables.cleanup(owned=n.is_ipvs_chain)
        self._ipset_restore([f"destroy {s.name}" for s in mine.sets])
        ns.run(["ip", "link", "del", n.INTERFACE], self.netns, check=False)
        self._prepared = False
        return len(mine.services) + chains

    # ------------------------------------------------------------------ helpers

    def _ip_batch(self, lines: list[str]) -> None:
        if lines:
            ns.run(["ip", "-batch", "-"], self.netns, input="\n".join(lines) + "\n")

    def _ipset_restore(self, lines: list[str]) -> None:
        if lines:
            ns.run(["ipset", "restore"], self.netns, input="\n".join(lines) + "\n")

    @contextmanager
    def _ipvs(self) -> Iterator[nlk.IPVSNetlink]:
        try:
            nl = nlk.IPVSNetlink(self.netns)
        except OSError as exc:
            raise KernelError(f"ipvs: cannot open the IPVS netlink family{self._where()}: "
                              f"{exc.strerror or exc}") from exc
        try:
            yield nl
        finally:
            nl.close()

    def _where(self) -> str:
        return f" in network namespace {self.netns}" if self.netns else ""


def _reals(rows: list[nlk.DestFields], was: VirtualServer | None) -> tuple[RealServer, ...]:
    """The real servers read (`rows`): `was`'s tuple of them when they are the same, connection
    counts included."""
    if was is not None and len(rows) == len(was.reals) and all(
            r.ip == f[0] and r.port == f[1] and r.weight == f[2] and r.active == f[3] and r.inactive == f[4]
            for r, f in zip(was.reals, rows, strict=True)):
        return was.reals
    return tuple(RealServer(*f) for f in rows)


def _what(verb: str, vs: VirtualServer, r: RealServer | None = None) -> Callable[[], str]:
    """A step's description, made when it is needed (a failure)."""
    if r is None:
        return lambda: f"{verb} {vs.key}"
    return lambda: f"{verb} {rs.hostport(r.ip, r.port)} of {vs.key}"
