"""A fake IPVS kernel for host-side tests: the same all-or-nothing apply, and it refuses what the
real kernel refuses (checked against it in tests/vm):

- adding a virtual server, real server, address or set that exists (EEXIST), changing or deleting
  one that does not (ESRCH / ENOENT / EADDRNOTAVAIL);
- an unknown scheduler (ENOENT: the kernel finds no ip_vs_<name> module);
- a real server that is not unicast (EINVAL), or of another family than a NAT virtual server;
- a negative weight; a fwmark service with an address;
- a set entry that does not fit the set's type, to a set that does not exist;
- destroying a set the iptables rules in place still reference ("in use by a kernel component");
- an iptables chain written with a rule naming a set that does not exist.

It holds foreign virtual servers too (`add_foreign`), which `dump()` leaves out exactly as the real
kernel's dump does, and connection counts can be set (`set_connections`) to exercise draining.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from ipaddress import ip_address, ip_network

from netkit.errors import KernelError
from netkit.model import IPFamily
from netkit.rules.iptables import plan as ipt_plan
from netkit.rules.iptables import ruleset as ipt
from netkit.rules.ipvs import names as n
from netkit.rules.ipvs.plan import Plan, apply_to, owned
from netkit.rules.ipvs.ruleset import SCHEDULERS, IPSet, RealServer, Ruleset, VirtualServer, VSKey, sort_services

_ENTRY = {
    "hash:ip": re.compile(r"^(?P<ip>[^,]+)$"),
    "hash:ip,port": re.compile(r"^(?P<ip>[^,]+),(tcp|udp|sctp):\d+$"),
    "hash:ip,port,ip": re.compile(r"^(?P<ip>[^,]+),(tcp|udp|sctp):\d+,(?P<ip2>[^,]+)$"),
    "hash:ip,port,net": re.compile(r"^(?P<ip>[^,]+),(tcp|udp|sctp):\d+,(?P<net>[^,]+)$"),
    "bitmap:port": re.compile(r"^\d+$"),
}


class FakeKernel:
    def __init__(self, family: IPFamily = IPFamily.IPV4) -> None:
        self.state = Ruleset(family)  # everything, including foreign virtual servers
        self.applied: list[Plan] = []

    # -- the Kernel protocol

    def dump(self) -> Ruleset:
        s = self.state
        mine = owned(s.services, s.addresses, s.sets)
        return replace(s, services=mine, sets=tuple(x for x in s.sets if n.is_ours(x.name)))

    writes: frozenset[str] = frozenset()  # a fake writes no kernel

    def dump_reusing(self, committed: Ruleset) -> Ruleset:
        return self.dump()

    def prefetch(self) -> bool:
        """Nothing to read before the dump itself."""
        return False

    def apply(self, plan: Plan, *, stop: Callable[[], bool] | None = None,
              progress: Callable[[str], None] | None = None) -> None:
        before = self.state
        self.check(plan)
        after = apply_to(before, plan)
        self.state = after
        self.applied.append(plan)

    def cleanup(self) -> None:
        s = self.state
        mine = {v.key for v in owned(s.services, s.addresses, s.sets)}
        self.state = Ruleset(s.family, tuple(v for v in s.services if v.key not in mine))

    # -- test helpers

    def add_foreign(self, vs: VirtualServer) -> None:
        self.state = replace(self.state, services=sort_services([*self.state.services, vs]))

    def set_connections(self, key: VSKey, real: tuple[object, int], active: int, inactive: int = 0) -> None:
        def upd(vs: VirtualServer) -> VirtualServer:
            if vs.key != key:
                return vs
            return replace(vs, reals=tuple(replace(r, active=active, inactive=inactive) if r.key == real else r
                                           for r in vs.reals))
        self.state = replace(self.state, services=tuple(upd(v) for v in self.state.services))

    # -- what the kernel refuses

    def check(self, p: Plan) -> None:
        s = self.state
        services = {v.key: v for v in s.services}
        sets = {x.name: x for x in s.sets}
        for a in p.add_addresses:
            _refuse(a in s.addresses, f"ip addr add {a}: RTNETLINK answers: File exists")
        for a in p.del_addresses:
            _refuse(a not in s.addresses, f"ip addr del {a}: RTNETLINK answers: Cannot assign requested address")
        for x in p.create_sets:
            _refuse(x.name in sets, f"ipset create {x.name}: set with the same name already exists")
            sets[x.name] = x
            for e in x.entries:
                _check_entry(x, e)
        for name, e in p.add_entries:
            _refuse(name not in sets, f"ipset add {name}: The set with the given name does not exist")
            _refuse(e in sets[name].entries,
                    f"ipset add {name} {e}: Element cannot be added to the set: it's already added")
            _check_entry(sets[name], e)
        for name, e in p.del_entries:
            _refuse(name not in sets or e not in sets[name].entries,
                    f"ipset del {name} {e}: Element cannot be deleted from the set: it's not added")
        written = p.iptables.write if p.iptables else {}
        for name in {m for chains in written.values() for rules in chains.values() for r in rules
                     for m in _SET_REF.findall(r)}:
            _refuse(name not in sets, f"iptables-restore: Set {name} doesn't exist.")
        rules = ipt_plan.apply_to(s.iptables, p.iptables) if p.iptables else s.iptables
        in_use = _sets_used(rules)
        for name in p.destroy_sets:
            _refuse(name not in sets, f"ipset destroy {name}: The set with the given name does not exist")
            _refuse(name in in_use,
                    f"ipset destroy {name}: Set cannot be destroyed: it is in use by a kernel component")
        for vs in p.add_services:
            _refuse(vs.key in services, f"ipvs add {vs.key}: File exists")
            _check_service(vs)
            services[vs.key] = replace(vs, reals=())
            for rs in vs.reals:
                _check_real(vs, rs)
        for vs in p.set_services:
            _refuse(vs.key not in services, f"ipvs set {vs.key}: No such process (no such service)")
            _check_service(vs)
        for vs, rs in p.add_reals:
            _refuse(vs.key not in services, f"ipvs add real {rs.key} to {vs.key}: No such process")
            _refuse(any(r.key == rs.key for r in services[vs.key].reals), f"ipvs add real {rs.key}: File exists")
            _check_real(vs, rs)
        for vs, rs in p.set_reals + p.del_reals:
            _refuse(vs.key not in services or not any(r.key == rs.key for r in services[vs.key].reals),
                    f"ipvs real {rs.key} of {vs.key}: No such file or directory")
            _check_real(vs, rs)
        for vs in p.del_services:
            _refuse(vs.key not in services, f"ipvs del {vs.key}: No such process (no such service)")


_SET_REF = re.compile(r"--match-set (\S+)")


def _sets_used(rules: ipt.Ruleset) -> set[str]:
    return {m for chains in rules.tables.values() for rs in chains.values() for r in rs for m in _SET_REF.findall(r)}


def _refuse(cond: bool, message: str) -> None:
    if cond:
        raise KernelError(message)


def _check_service(vs: VirtualServer) -> None:
    _refuse(vs.scheduler not in SCHEDULERS, f"ipvs {vs.key}: scheduler {vs.scheduler!r}: No such file or directory")
    _refuse(bool(vs.fwmark) and vs.ip is not None, f"ipvs {vs.key}: a fwmark service has no address: Invalid argument")
    _refuse(not vs.fwmark and vs.ip is None, "ipvs: a service needs an address or a fwmark: Invalid argument")
    _refuse(vs.persistent is not None and vs.persistent <= 0, f"ipvs {vs.key}: persistence timeout: Invalid argument")


def _check_real(vs: VirtualServer, rs: RealServer) -> None:
    bad = rs.ip.is_multicast or rs.ip.is_unspecified or (rs.ip.version == 4 and int(rs.ip) == 0xFFFFFFFF)
    _refuse(bad, f"ipvs real {rs.ip}: address not unicast: Invalid argument")
    _refuse(rs.ip.version != (4 if vs.family is IPFamily.IPV4 else 6),
            f"ipvs real {rs.ip} in {vs.key}: NAT needs the same family: Invalid argument")
    _refuse(rs.weight < 0, f"ipvs real {rs.ip}: weight {rs.weight}: Invalid argument")
    _refuse(not 0 <= rs.port <= 65535, f"ipvs real port {rs.port}: Invalid argument")


def _check_entry(x: IPSet, e: str) -> None:
    m = _ENTRY.get(x.type, re.compile(".*")).match(e)
    _refuse(m is None, f"ipset add {x.name} {e}: Syntax error: the entry does not fit {x.type}")
    assert m is not None
    version = 4 if x.family is IPFamily.IPV4 else 6
    groups = m.groupdict()
    for key in ("ip", "ip2"):
        if groups.get(key):
            try:
                ok = ip_address(groups[key]).version == version
            except ValueError:
                ok = False
            _refuse(not ok, f"ipset add {x.name} {e}: Syntax error: {groups[key]} is not an IPv{version} address")
    if groups.get("net"):
        try:
            ok = ip_network(groups["net"]).version == version
        except ValueError:
            ok = False
        _refuse(not ok, f"ipset add {x.name} {e}: Syntax error: {groups['net']} is not an IPv{version} network")
