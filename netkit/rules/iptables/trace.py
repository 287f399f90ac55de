"""trace(ruleset, packet) → where a new connection goes, read off the compiled (or dumped) rules.

The tracer is an interpreter of the rules themselves, not a second derivation from the model, so it
also explains a live dump that someone edited by hand. It follows the netfilter hooks a first packet
passes:

    from another host or a pod:  nat PREROUTING → (routing) → filter INPUT or FORWARD → nat POSTROUTING
    from the node itself:        nat OUTPUT → filter OUTPUT → nat POSTROUTING

Where a rule is random (`-m statistic`), the walk splits into weighted branches, so the result lists
every endpoint the packet can reach with its probability. `-m recent --rcheck` (ClientIP affinity)
is taken as "this client has no recent connection" — the first connection, which is the one the
random rules decide. Connection-tracking matches see a NEW connection. `addrtype LOCAL` is judged
against the node's addresses given in the Packet.

Supported matches: -s/-d/-p/-i/-o (negatable), tcp/udp/sctp --dport/--sport, comment, addrtype
--src-type/--dst-type LOCAL, mark, statistic, recent, conntrack --ctstate, and `set --match-set`
when the caller says what the sets hold (the IPVS tracer does, through `hook`). Supported targets: a user
chain (-j/-g), RETURN, ACCEPT, DROP, REJECT, DNAT, MARK --set-xmark, MASQUERADE. A rule using
anything else is reported as not understood and treated as not matching.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from ipaddress import ip_address, ip_network

from netkit.model.types import IPAddress
from netkit.rules.iptables.rule import Rule, read
from netkit.rules.iptables.ruleset import Ruleset, is_builtin
from netkit.rules.tracing import Outcome, Packet, Step, endpoints

__all__ = ["Branch", "Outcome", "Packet", "SetLookup", "Step", "endpoints", "hook", "outcomes", "trace"]

# (set name, its dimensions as written after the name: ("dst", "dst"), packet) → is the packet in it
SetLookup = Callable[[str, tuple[str, ...], Packet], bool]


@dataclass(slots=True)
class _Branch:
    p: float
    pkt: Packet
    steps: list[Step] = field(default_factory=list)
    dnat: str | None = None
    verdict: str | None = None  # None: still walking
    reason: Step | None = None
    unknown: list[str] = field(default_factory=list)
    sets: SetLookup | None = None

    def fork(self, p: float) -> _Branch:
        return _Branch(p, self.pkt, list(self.steps), self.dnat, self.verdict, self.reason, list(self.unknown),
                       self.sets)


def trace(ruleset: Ruleset, pkt: Packet) -> list[Outcome]:
    """Every outcome of a new connection, most likely first; probabilities add up to 1."""
    first_nat = "OUTPUT" if pkt.from_node else "PREROUTING"
    branches = _hook(ruleset, "nat", first_nat, [_Branch(1.0, pkt)])
    done: list[_Branch] = []
    for b in branches:
        if b.verdict in ("drop", "reject"):
            done.append(b)
            continue
        b.verdict = None
        if b.dnat:
            host, port = _split_hostport(b.dnat)
            b.pkt = replace(b.pkt, dst=host, dport=port)
        filter_chain = "OUTPUT" if pkt.from_node else (
            "INPUT" if b.pkt.dst in pkt.local_addresses else "FORWARD")
        for fb in _hook(ruleset, "filter", filter_chain, [b]):
            if fb.verdict in ("drop", "reject"):
                done.append(fb)
                continue
            fb.verdict = None
            done.extend(_hook(ruleset, "nat", "POSTROUTING", [fb]))
    return _collect(done)


def _collect(done: list[_Branch]) -> list[Outcome]:
    merged: dict[tuple[str, str | None, bool, tuple[Step, ...]], Outcome] = {}
    for b in done:
        verdict = b.verdict if b.verdict in ("drop", "reject") else "accept"
        masq = b.verdict == "masquerade"
        key = (verdict, b.dnat, masq, tuple(b.steps))
        old = merged.get(key)
        p = b.p + (old.probability if old else 0.0)
        merged[key] = Outcome(p, verdict, b.dnat, masq, tuple(b.steps), b.reason, tuple(b.unknown))
    return sorted(merged.values(), key=lambda o: (-o.probability, o.destination or ""))


def _hook(rs: Ruleset, table: str, chain: str, branches: list[_Branch]) -> list[_Branch]:
    """Run a built-in chain; a branch that falls off its end takes the policy (ACCEPT)."""
    out = []
    for b in branches:
        for r in _chain(rs, table, chain, b, depth=0):
            if r.verdict == "return":
                r.verdict = None
            out.append(r)
    return out


def _chain(rs: Ruleset, table: str, chain: str, start: _Branch, depth: int) -> list[_Branch]:
    """Walk one chain. Returns branches that ended (verdict set) or returned (verdict "return")."""
    if depth > 32:
        start.verdict, start.unknown = "drop", [*start.unknown, f"{table} {chain}: jumps nested too deep"]
        return [start]
    live = [start]
    finished: list[_Branch] = []
    for index, rule in enumerate(rs.rules(table, chain), 1):
        if not live:
            break
        parsed = read(rule)
        nxt: list[_Branch] = []
        for b in live:
            p = _match(parsed, b, rule)
            if p < 1.0:
                miss = b if p == 0.0 else b.fork(b.p * (1 - p))
                nxt.append(miss)
            if p > 0.0:
                hit = b if p == 1.0 else b.fork(b.p * p)
                hit.steps.append(Step(table, chain, index, rule))
                for r in _target(rs, table, parsed, hit, depth, Step(table, chain, index, rule)):
                    (finished if r.verdict and r.verdict != "continue" else nxt).append(r)
                    if r.verdict == "continue":
                        r.verdict = None
        live = nxt
    for b in live:
        b.verdict = "return" if not is_builtin(table, chain) else None
    finished.extend(live)
    return finished


def _target(rs: Ruleset, table: str, r: Rule, b: _Branch, depth: int, step: Step) -> list[_Branch]:
    t = r.target
    if t in ("", None):
        b.verdict = "continue"
        return [b]
    if t == "RETURN":
        b.verdict = "return"
        return [b]
    if t == "ACCEPT":
        b.verdict = "accept"
        return [b]
    if t in ("DROP", "REJECT"):
        b.verdict, b.reason = t.lower(), step
        return [b]
    if t == "DNAT":
        b.dnat, b.verdict, b.reason = r.target_option("--to-destination"), "accept", step
        return [b]
    if t == "MARK":
        value, _, mask = (r.target_option("--set-xmark") or "0/0").partition("/")
        v, m = int(value, 0), int(mask or "0xffffffff", 0)
        b.pkt = replace(b.pkt, mark=(b.pkt.mark & ~m) ^ v)
        b.verdict = "continue"
        return [b]
    if t == "MASQUERADE":
        b.verdict = "masquerade"
        return [b]
    if t in rs.chains(table):
        out = []
        for sub in _chain(rs, table, t, b, depth + 1):
            if sub.verdict == "return":
                sub.verdict = "return" if r.goto else "continue"
            out.append(sub)
        return out
    b.unknown.append(f"{step.table} {step.chain} #{step.index}: target {t} not understood")
    b.verdict = "continue"
    return [b]


# --- matching ------------------------------------------------------------------------------------


def _match(r: Rule, b: _Branch, rule: str) -> float:
    """Probability that the rule matches this branch's packet: 0, 1, or a statistic's p."""
    pkt = b.pkt
    for neg, opt, value in r.generic:
        if _generic(opt, value, pkt) == neg:
            return 0.0
    p = 1.0
    for name, opts in r.modules:
        result = _module(name, opts, pkt, b.sets)
        if result is None:
            b.unknown.append(f"match -m {name} not understood in: {rule}")
            return 0.0
        p *= result
        if p == 0.0:
            return 0.0
    return p


def _generic(opt: str, value: str, pkt: Packet) -> bool:
    if opt in ("-s", "-d"):
        addr = pkt.src if opt == "-s" else pkt.dst
        net = ip_network(value, strict=False)
        return addr.version == net.version and addr in net
    if opt == "-p":
        return value == pkt.proto
    if opt == "-i":
        return pkt.in_iface is not None and _iface(value, pkt.in_iface)
    return False  # -o: the output interface is not known before routing


def _iface(pattern: str, name: str) -> bool:
    return name.startswith(pattern[:-1]) if pattern.endswith("+") else name == pattern


def _module(name: str, opts: Sequence[tuple[bool, str, str]], pkt: Packet,
            sets: SetLookup | None) -> float | None:
    if name == "comment":
        return 1.0
    if name == "set":
        return _set(opts, pkt, sets)
    if name in ("tcp", "udp", "sctp"):
        if name != pkt.proto:
            return 0.0
        for neg, opt, value in opts:
            port = pkt.dport if opt == "--dport" else pkt.sport if opt == "--sport" else None
            if port is None:
                return None
            lo, _, hi = value.partition(":")
            inside = int(lo) <= port <= int(hi or lo)
            if inside == neg:
                return 0.0
        return 1.0
    if name == "addrtype":
        for neg, opt, value in opts:
            addr = pkt.src if opt == "--src-type" else pkt.dst
            is_local = addr in pkt.local_addresses or addr.is_loopback
            if value != "LOCAL":
                return None
            if is_local == neg:
                return 0.0
        return 1.0
    if name == "mark":
        for neg, _, value in opts:
            v, _, m = value.partition("/")
            hit = (pkt.mark & int(m or "0xffffffff", 0)) == int(v, 0)
            if hit == neg:
                return 0.0
        return 1.0
    if name == "statistic":
        values = {o: v for _, o, v in opts}
        return float(values.get("--probability", "1")) if values.get("--mode") == "random" else None
    if name == "recent":
        actions = {o for _, o, _ in opts}
        return 0.0 if "--rcheck" in actions or "--update" in actions else 1.0
    if name == "conntrack":
        for neg, opt, value in opts:
            if opt != "--ctstate":
                return None
            if ("NEW" in value.split(",")) == neg:
                return 0.0
        return 1.0
    return None


def _set(opts: Sequence[tuple[bool, str, str]], pkt: Packet, sets: SetLookup | None) -> float | None:
    """`-m set [!] --match-set NAME dst,dst[,src]`: parsed as ("--match-set", NAME) then ("dst,dst", "")."""
    if sets is None:
        return None
    for i, (neg, opt, value) in enumerate(opts):
        if opt != "--match-set":
            continue
        if i + 1 >= len(opts):
            return None
        dims = tuple(opts[i + 1][1].split(","))
        if sets(value, dims, pkt) == neg:
            return 0.0
    return 1.0


# --- for tracers of backends that carry an iptables payload (IPVS) --------------------------------

Branch = _Branch


def hook(rs: Ruleset, table: str, chain: str, branches: list[_Branch]) -> list[_Branch]:
    """Run one built-in chain over `branches` (each may carry a SetLookup); see `_chain` for verdicts."""
    return _hook(rs, table, chain, branches)


def outcomes(done: list[_Branch]) -> list[Outcome]:
    """Finished branches as Outcomes, equal walks merged, most likely first."""
    return _collect(done)


def split_hostport(text: str) -> tuple[IPAddress, int]:
    return _split_hostport(text)


def _split_hostport(text: str) -> tuple[IPAddress, int]:
    host, _, port = text.rpartition(":")
    return ip_address(host.strip("[]")), int(port)
