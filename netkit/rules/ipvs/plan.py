"""plan(committed, desired) → Plan: the smallest change, and graceful termination of real servers.

- Virtual servers are matched by key (protocol, IP, port or fwmark). A new one is added with its real
  servers; a changed scheduler or persistence is `set` in place (IPVS keeps its connections); a
  removed one is deleted.
- Real servers of a kept virtual server are matched by (IP, port). New ones are added, changed
  weights set. A removed one is drained when it is TCP and still has active connections: its weight
  goes to 0 (new connections avoid it, established ones go on) and a later plan, made from a fresh
  kernel dump, deletes it once ActiveConn is 0. We do not wait for InActConn: IPVS keeps TIME_WAIT
  entries for a fixed 2 minutes and counts them as inactive, and dropping them harms nobody.
  UDP and SCTP real servers are deleted at once (with vs/expire_nodest_conn=1 their flows move on).
- Set entries and kube-ipvs0 addresses are diffed as sets. The iptables payload is planned by the
  iptables backend's planner: only chains whose rules differ are written, missing entry jumps
  inserted (and applied by the iptables kernel edge: backend choice, `--wait`, batching).
- `only` (a ruleset.Changes, from a compiled Ruleset's `since`) names what can differ; everything else
  is not even compared, and the plan is the one a full comparison gives (a property test checks).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields, replace

from netkit.change import PlanStats
from netkit.model import IPFamily, Protocol
from netkit.model.types import IPAddress
from netkit.rules.iptables import plan as ipt_plan
from netkit.rules.ipvs import names as n
from netkit.rules.ipvs.ruleset import (
    Changes,
    IPSet,
    RealServer,
    Ruleset,
    VirtualServer,
    VSKey,
    _real_line,
    _service_line,
    render_addresses,
    sort_services,
)


@dataclass(frozen=True, slots=True)
class Plan:
    family: IPFamily
    add_addresses: tuple[IPAddress, ...] = ()
    del_addresses: tuple[IPAddress, ...] = ()
    create_sets: tuple[IPSet, ...] = ()  # with their entries
    add_entries: tuple[tuple[str, str], ...] = ()  # (set, entry)
    del_entries: tuple[tuple[str, str], ...] = ()
    destroy_sets: tuple[str, ...] = ()
    add_services: tuple[VirtualServer, ...] = ()  # with their real servers
    set_services: tuple[VirtualServer, ...] = ()
    del_services: tuple[VirtualServer, ...] = ()
    add_reals: tuple[tuple[VirtualServer, RealServer], ...] = ()
    set_reals: tuple[tuple[VirtualServer, RealServer], ...] = ()  # new weight (0 = draining)
    del_reals: tuple[tuple[VirtualServer, RealServer], ...] = ()
    iptables: ipt_plan.Plan | None = None  # the payload's chains to write and jumps to insert; None = unchanged
    draining: int = 0  # real servers left at weight 0 with live connections after this plan

    @property
    def empty(self) -> bool:
        return not any(getattr(self, f.name) for f in fields(self) if f.name not in ("family", "draining"))

    def stats(self) -> PlanStats:
        counts = self.counts()
        deleted = sum(v for k, v in counts.items() if k.endswith(("_deleted", "_destroyed")))
        written = self.changes - deleted
        text = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items() if v) or "nothing"
        return PlanStats(written, deleted, text)

    def counts(self) -> dict[str, int]:
        """How much the plan changes, by kind of object (what a sync reports)."""
        chains = self.iptables.chains_written if self.iptables else 0
        return {"virtual_servers_added": len(self.add_services), "virtual_servers_changed": len(self.set_services),
                "virtual_servers_deleted": len(self.del_services), "real_servers_added": len(self.add_reals),
                "real_servers_changed": len(self.set_reals), "real_servers_deleted": len(self.del_reals),
                "set_entries_added": len(self.add_entries) + sum(len(s.entries) for s in self.create_sets),
                "set_entries_deleted": len(self.del_entries),
                "sets_created": len(self.create_sets), "sets_destroyed": len(self.destroy_sets),
                "addresses_added": len(self.add_addresses), "addresses_deleted": len(self.del_addresses),
                "iptables_chains_written": chains, "draining": self.draining}

    @property
    def changes(self) -> int:
        """The number of objects written (virtual and real servers, set entries, addresses, chains)."""
        return sum(v for k, v in self.counts().items() if k != "draining")


def plan(committed: Ruleset, desired: Ruleset, *, only: Changes | None = None) -> Plan:
    addr_now, addr_want = committed.addresses, desired.addresses
    if only is not None and not only.addresses:
        added: frozenset[IPAddress] = frozenset()
        gone: frozenset[IPAddress] = frozenset()
    else:
        added, gone = addr_want - addr_now, addr_now - addr_want
    payload = ipt_plan.plan(committed.iptables, desired.iptables, only=None if only is None else only.chains)
    base = Plan(desired.family, add_addresses=_sorted_ips(added), del_addresses=_sorted_ips(gone),
                iptables=None if payload.empty else payload)
    sets = _plan_sets(committed.sets, desired.sets, base, only)
    return _plan_services(committed, desired, sets, None if only is None else only.services)


def _sorted_ips(ips: frozenset[IPAddress]) -> tuple[IPAddress, ...]:
    return tuple(sorted(ips, key=lambda a: (a.version, int(a))))


def _plan_sets(now: tuple[IPSet, ...], want: tuple[IPSet, ...], p: Plan, only: Changes | None) -> Plan:
    old = {s.name: s for s in now}
    new = {s.name: s for s in want}
    add: list[tuple[str, str]] = []
    delete: list[tuple[str, str]] = []
    for name in sorted(old.keys() & new.keys()):
        if old[name] is new[name] or (only is not None and name not in only.sets):
            continue
        came, went = only.entries[name] if only is not None and name in only.entries else (
            new[name].entries - old[name].entries, old[name].entries - new[name].entries)
        add += [(name, e) for e in sorted(came)]
        delete += [(name, e) for e in sorted(went)]
    return replace(p, create_sets=tuple(new[k] for k in sorted(new.keys() - old.keys())), add_entries=tuple(add),
                   del_entries=tuple(delete), destroy_sets=tuple(sorted(old.keys() - new.keys())))


Pairs = list[tuple[VirtualServer, RealServer]]


def _plan_services(committed: Ruleset, desired: Ruleset, p: Plan, only: frozenset[VSKey] | None) -> Plan:
    old, new = committed.index, desired.index
    keys: Iterable[VSKey] = old.keys() | new.keys() if only is None else only
    add_r: Pairs = []
    set_r: Pairs = []
    del_r: Pairs = []
    changed: list[VirtualServer] = []
    added: list[VirtualServer] = []
    gone: list[VirtualServer] = []
    draining = 0
    for key in sorted(keys, key=lambda k: k.sort_key):
        have, want = old.get(key), new.get(key)
        if have is want:
            continue
        if have is None:
            assert want is not None
            added.append(want)
        elif want is None:
            if not desired.kept(have):
                gone.append(have)
        elif have != want:  # equality ignores connection counts and comments
            if have.spec != want.spec:
                changed.append(want)
            draining += _plan_reals(have, want, add_r, set_r, del_r)
    return replace(p, add_services=tuple(added), del_services=tuple(gone), set_services=tuple(changed),
                   add_reals=tuple(add_r), set_reals=tuple(set_r), del_reals=tuple(del_r), draining=draining)


def _plan_reals(have: VirtualServer, want: VirtualServer, add_r: Pairs, set_r: Pairs, del_r: Pairs) -> int:
    """Real-server changes of one kept virtual server; returns how many are left draining."""
    old = {r.key: r for r in have.reals}
    new = {r.key: r for r in want.reals}
    draining = 0
    for key in sorted(new):
        if key not in old:
            add_r.append((want, new[key]))
        elif old[key].weight != new[key].weight:
            set_r.append((want, new[key]))
    for key in sorted(old.keys() - new.keys()):
        rs = old[key]
        if want.protocol is Protocol.TCP and rs.active > 0:
            draining += 1
            if rs.weight != 0:
                set_r.append((want, replace(rs, weight=0)))
        else:
            del_r.append((want, rs))
    return draining


def apply_to(committed: Ruleset, p: Plan) -> Ruleset:
    """What the kernel holds after `p` is applied to `committed` (the fake kernel's model, and what
    the daemon keeps in memory as the new committed state)."""
    services = {s.key: s for s in committed.services}
    for s in p.del_services:
        services.pop(s.key, None)
    for s in p.add_services:
        services[s.key] = s
    for s in p.set_services:
        services[s.key] = replace(services[s.key], scheduler=s.scheduler, persistent=s.persistent)
    for vs, rs in p.add_reals + p.set_reals:
        cur = services[vs.key]
        others = tuple(r for r in cur.reals if r.key != rs.key)
        old = next((r for r in cur.reals if r.key == rs.key), None)
        rs = replace(rs, active=old.active, inactive=old.inactive) if old else rs
        services[vs.key] = replace(cur, reals=tuple(sorted((*others, rs))))
    for vs, rs in p.del_reals:
        cur = services[vs.key]
        services[vs.key] = replace(cur, reals=tuple(r for r in cur.reals if r.key != rs.key))
    sets = {s.name: s for s in committed.sets if s.name not in p.destroy_sets}
    sets.update({s.name: s for s in p.create_sets})
    for name, entry in p.add_entries:
        sets[name] = replace(sets[name], entries=sets[name].entries | {entry})
    for name, entry in p.del_entries:
        sets[name] = replace(sets[name], entries=sets[name].entries - {entry})
    addresses = (committed.addresses | set(p.add_addresses)) - set(p.del_addresses)
    payload = ipt_plan.apply_to(committed.iptables, p.iptables) if p.iptables else committed.iptables
    return Ruleset(committed.family, sort_services(list(services.values())), frozenset(addresses),
                   tuple(sorted(sets.values(), key=lambda s: s.name)), payload)


def owned(services: tuple[VirtualServer, ...], addresses: frozenset[IPAddress],
          sets: tuple[IPSet, ...]) -> tuple[VirtualServer, ...]:
    """The virtual servers netkit created, among all those in the kernel (see the package doc)."""
    node_ports: dict[Protocol, set[int | None]] = {p: set() for p in Protocol}
    for p in Protocol:
        base = n.NODE_PORT.format(proto=p.value)
        for s in sets:
            if s.name in (base, n.set_name(base, IPFamily.IPV6)):
                node_ports[p].update(e.port for e in s.typed())

    def mine(s: VirtualServer) -> bool:
        if s.fwmark:
            return s.fwmark & n.FWMARK_HIGH == n.FWMARK_BASE
        return s.ip in addresses or s.port in node_ports[s.protocol]

    return tuple(s for s in services if mine(s))


def render_plan(p: Plan) -> str:
    """The plan as readable commands, in the order the kernel applies them."""
    lines = [f"# netkit ipvs plan ({p.family.value})"]
    lines += [f"ipset create {s.create_line().removeprefix('create ')}" for s in p.create_sets]
    lines += [f"ipset add {s.name} {e}" for s in p.create_sets for e in sorted(s.entries)]
    lines += [f"ipset add {name} {e}" for name, e in p.add_entries]
    lines += [line for a in p.add_addresses for line in render_addresses(frozenset({a})).splitlines()[1:]]
    if p.iptables:
        lines += _render_iptables(p.iptables)
    for s in p.add_services:
        lines += ["ipvsadm " + _service_line(s)] + ["ipvsadm " + _real_line(s, r) for r in s.reals]
    lines += ["ipvsadm " + _service_line(s).replace("-A ", "-E ", 1) for s in p.set_services]
    lines += ["ipvsadm " + _real_line(s, r) for s, r in p.add_reals]
    lines += ["ipvsadm " + _real_line(s, r).replace("-a ", "-e ", 1)
              + ("  # draining" if r.weight == 0 else "") for s, r in p.set_reals]
    lines += [f"ipvsadm -d {s.address()} -r {_real_line(s, r).split(' -r ')[1].split()[0]}" for s, r in p.del_reals]
    lines += [f"ipvsadm -D {s.address()}" for s in p.del_services]
    lines += [f"ipset del {name} {e}" for name, e in p.del_entries]
    lines += [f"ipset destroy {name}" for name in p.destroy_sets]
    lines += [f"ip addr del {a}/{a.max_prefixlen} dev {n.INTERFACE}" for a in p.del_addresses]
    if p.draining:
        lines.append(f"# {p.draining} real server(s) draining (weight 0, live connections): deleted by a later sync")
    return "\n".join(lines) + "\n"


def _render_iptables(p: ipt_plan.Plan) -> list[str]:
    tool = "iptables" if p.family is IPFamily.IPV4 else "ip6tables"
    payload = ipt_plan.render_plan(p).rstrip("\n")
    lines = [f"{tool}-restore --noflush <<EOF", payload, "EOF"] if payload else []
    return lines + [f"{tool} -t {j.table} -I {j.chain} {j.position} {j.rule}" for j in p.jumps]


def describe(p: Plan) -> str:
    """The plan for people: the commands, with the iptables chains as unified diffs (live → desired)."""
    if p.iptables is None:
        return render_plan(p)
    text = render_plan(replace(p, iptables=None))
    return text + ipt_plan.describe(p.iptables)
