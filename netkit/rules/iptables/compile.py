"""compile(state, config, family) → Ruleset: kube-proxy's iptables layout, in iptables-save's spelling.

Traffic flow (nat table; the filter table rejects or drops what has no usable endpoint):

    PREROUTING/OUTPUT → KUBE-SERVICES ─┬─ clusterIP:port ──────────────→ KUBE-SVC-h (or KUBE-SVL-h, iTP=Local)
                                       ├─ externalIP:port ─────────────→ KUBE-EXT-h
                                       ├─ LB IP:port ─→ [KUBE-FW-h: -s range] → KUBE-EXT-h
                                       └─ dst LOCAL (last rule) → KUBE-NODEPORTS ─ nodePort → KUBE-EXT-h
    KUBE-EXT-h: eTP=Cluster → mark for masquerade, → KUBE-SVC-h
                eTP=Local   → pod traffic → KUBE-SVC-h; node traffic → masquerade, KUBE-SVC-h; rest → KUBE-SVL-h
    KUBE-SVC/SVL-h: [masquerade off-cluster sources], affinity checks (`recent`), then one rule per
                endpoint with probability 1/(n-i), the last unconditional → KUBE-SEP-e
    KUBE-SEP-e: hairpin (source = the endpoint) → masquerade; [recent --set]; DNAT to IP:port
    POSTROUTING → KUBE-POSTROUTING: masquerade what carries the mark bit.

Every rule is emitted in its canonical (iptables-save) form (see ruleset.py) so a live dump compares
with it as plain strings. The decisions per service port follow kube-proxy's `syncProxyRules`; the
endpoint lists (cluster / local / has any) come ready-made from NodeState. Above
`config.large_cluster_endpoints` endpoints, per-endpoint comments are left out ("large cluster mode").
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator
from dataclasses import replace
from ipaddress import IPv4Network, IPv6Network
from typing import NamedTuple

from netkit.change import Since
from netkit.config import Config
from netkit.model import IPFamily, NodeInfo, NodeState, ServicePortState, Verdict
from netkit.model.types import IPAddress, IPNetwork
from netkit.rules.iptables import names as n
from netkit.rules.iptables.names import CT_STATE_INVALID_DROPPED, LOCALHOST_NODEPORTS_ACCEPTED
from netkit.rules.iptables.ruleset import Ruleset, probability_of, quote_comment
from netkit.rules.memo import PortMemo
from netkit.rules.nodeports import localhost_nodeports, nodeport_ips

NODEPORTS_COMMENT = '"kubernetes service nodeports; NOTE: this must be the last rule in this chain"'

# CVE-2020-8558 (kubernetes#90259): localhost NodePorts need route_localnet=1, which lets packets from
# other hosts addressed to 127.0.0.0/8 in; this drops them unless conntrack knows them (replies, or
# DNATed NodePort traffic). kube-proxy writes it (and kubelet a copy of it) in filter KUBE-FIREWALL,
# jumped to first from INPUT and OUTPUT with no comment; iptables-save's spelling.
LOCALNET_GUARD = ('! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" '
                  "-m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP")
FIREWALL_JUMP = f"-j {n.FIREWALL}"


def host(ip: IPAddress | IPNetwork) -> str:
    """An address as iptables-save prints it: always with a prefix length."""
    if isinstance(ip, (IPv4Network, IPv6Network)):
        return str(ip)
    return f"{ip}/{ip.max_prefixlen}"


def compile(state: NodeState, config: Config, family: IPFamily) -> Ruleset:
    return Compiler(config, family).compile(state)


class _Chunk(NamedTuple):
    """What one service port contributes (rules per shared chain, and its own chains)."""

    nat: dict[str, tuple[str, ...]]
    filter: dict[str, tuple[str, ...]]
    chains: dict[str, tuple[str, ...]]


class Compiler:
    """`compile` with a memory, for the daemon: a ServicePortState that is the very same object as at
    the last compile (StateBuilder hands unchanged services back as they were) reuses the chunk made
    from it (the shared netkit.rules.memo.PortMemo, as the other backends), so a sync after one
    EndpointSlice change renders one service port, not 10,000. The reused chains are the very same
    tuples as in the committed ruleset, which also makes the planner's
    comparison of unchanged chains an identity check. The result equals `compile`'s."""

    def __init__(self, config: Config, family: IPFamily) -> None:
        self.config, self.family = config, family
        self._memo: PortMemo[_Chunk] = PortMemo()
        self._context: tuple[NodeInfo, bool] | None = None
        self._last: Ruleset | None = None
        self._state: NodeState | None = None  # the state the last result was compiled from
        self._endpoints = 0  # of that state's ports of this family (large-cluster mode counts them)
        self._chains: dict[str, tuple[str, ...]] = {}

    def compile(self, state: NodeState) -> Ruleset:
        previous, self._state = self._state, state
        changes = state.changes
        if changes is not None and changes.applies_to(previous) and self._last is not None:
            followed = self._follow(state, changes.gone, changes.came, self._last)
            if followed is not None:
                self._last = followed
                return followed
        ports = state.family(self.family)
        self._endpoints = sum(len(p.endpoints) for p in ports)
        large = self._endpoints > self.config.large_cluster_endpoints
        if self._context != (state.node, large):
            self._memo.reset()
            self._context, self._chains = (state.node, large), {}
        b = _Builder(self.config, self.family, state.node, large)
        walk = self._memo.run(ports, b.service_port)  # netkit.rules.memo: unchanged ports keep their chunks
        self._swap(walk.came, walk.gone)
        for chunk in walk.parts:
            b.add_shared(chunk)
        b.service_chains = self._chains
        result = b.finish()
        if not walk.fresh and self._last is not None:
            result = self._since(result, walk.came, walk.gone, self._last)
        self._last = result
        return result

    def _follow(self, state: NodeState, gone_ports: tuple[ServicePortState, ...],
                came_ports: tuple[ServicePortState, ...], last: Ruleset) -> Ruleset | None:
        """The result from the previous one when NodeState.changes says which ports went and came and
        each came port puts the very rules its gone one did in the shared chains (an endpoint
        change): only those ports' own chains differ, so the 10,000 others are not even visited.
        None when that does not hold: the caller walks every port."""
        gone = [p for p in gone_ports if p.family is self.family]
        came = [p for p in came_ports if p.family is self.family]
        endpoints = self._endpoints + sum(len(p.endpoints) for p in came) - sum(len(p.endpoints) for p in gone)
        large = endpoints > self.config.large_cluster_endpoints
        if self._context != (state.node, large) or len(gone) != len(came) \
                or any(g.key != c.key for g, c in zip(gone, came, strict=True)):
            return None
        before = [self._memo.previous(p) for p in gone]
        b = _Builder(self.config, self.family, state.node, large)
        chunks = [b.service_port(p) for p in came]
        if any(old is None or old.nat != new.nat or old.filter != new.filter
               for old, new in zip(before, chunks, strict=True)):
            return None
        compiled = iter(chunks)
        came_chunks, gone_chunks = self._memo.update(gone, came, lambda _: next(compiled))
        self._endpoints = endpoints
        nat = dict(last.chains("nat"))
        self._swap(came_chunks, gone_chunks, nat)
        result = Ruleset(self.family, {**last.tables, "nat": nat})
        return self._since(result, came_chunks, gone_chunks, last)

    def _swap(self, came: list[_Chunk], gone: list[_Chunk], nat: dict[str, tuple[str, ...]] | None = None) -> None:
        """Every service port's own chains (and `nat`, a copy of the previous result's table) with
        `came`'s chains in and `gone`'s out, unless a came chunk replaced them."""
        for chains in (self._chains, nat) if nat is not None else (self._chains,):
            for chunk in came:
                chains.update(chunk.chains)
            for chunk in gone:  # service ports that changed or went away
                for name, rules in chunk.chains.items():
                    if chains.get(name) is rules:
                        del chains[name]

    @staticmethod
    def _since(result: Ruleset, came: list[_Chunk], gone: list[_Chunk], last: Ruleset) -> Ruleset:
        """Which chains (by name, any table) can differ from the previous result: the planner
        compares only those when it plans against that very ruleset."""
        touched = set(_SHARED_CHAINS)
        for chunk in (*came, *gone):
            touched.update(chunk.chains)
        return replace(result, since=Since(weakref.ref(last), frozenset(touched)))


_SHARED_CHAINS = frozenset({n.SERVICES, n.EXTERNAL_SERVICES, n.NODEPORTS, n.PROXY_FIREWALL, n.POSTROUTING,
                            n.MARK_MASQ, n.FORWARD, n.CANARY, n.FIREWALL})


class _Builder:
    """Accumulates chains while walking the service ports; `finish` adds the fixed chains."""

    def __init__(self, config: Config, family: IPFamily, node: NodeInfo, large: bool) -> None:
        self.config, self.family, self.node, self.large = config, family, node, large
        self.reject_icmp = "REJECT --reject-with " + (
            "icmp-port-unreachable" if family is IPFamily.IPV4 else "icmp6-port-unreachable")
        self.mask = "255.255.255.255" if family is IPFamily.IPV4 else "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
        self.local_src = config.local_match(family)
        self.nonlocal_src = config.local_match(family, negate=True)
        self.nat: dict[str, list[str]] = {n.SERVICES: [], n.NODEPORTS: []}
        self.filter: dict[str, list[str]] = {n.SERVICES: [], n.EXTERNAL_SERVICES: [], n.NODEPORTS: [],
                                             n.PROXY_FIREWALL: []}
        self.service_chains: dict[str, tuple[str, ...]] = {}
        self.count_localhost = (LOCALHOST_NODEPORTS_ACCEPTED in config.nfacct_counters
                                and localhost_nodeports(config, family))

    def reject(self, proto: str) -> str:
        """TCP is refused with a TCP reset, which the kernel never rate-limits; an ICMP
        port-unreachable is limited per peer (icmp_ratelimit), so past a burst clients of a Service
        without endpoints waited for SYN retries (kubernetes#90810). UDP and SCTP keep ICMP."""
        return "REJECT --reject-with tcp-reset" if proto == "tcp" else self.reject_icmp

    # --- one service port ------------------------------------------------------------------------

    def service_port(self, p: ServicePortState) -> _Chunk:
        """Everything one service port contributes: its rules in the shared chains, and its own chains."""
        nat: dict[str, list[str]] = {n.SERVICES: [], n.NODEPORTS: []}
        filt: dict[str, list[str]] = {n.SERVICES: [], n.EXTERNAL_SERVICES: [], n.NODEPORTS: [],
                                      n.PROXY_FIREWALL: []}
        chains: dict[str, list[str]] = {}
        name = str(p.name)
        proto = p.protocol.lower
        port_hash = n.port_hash(name, proto)  # n.service_chain's, made once for the four names
        svc, svl, ext, fw = "KUBE-SVC-" + port_hash, "KUBE-SVL-" + port_hash, "KUBE-EXT-" + port_hash, \
            "KUBE-FW-" + port_hash

        # The model decided where each kind of traffic goes (ServicePortState.internal / .external).
        internal, external = p.internal, p.external
        has_any = internal.verdict is not Verdict.REJECT
        internal_chain, has_internal = (svl if internal.local else svc), internal.verdict is None
        external_policy_chain, has_external = (svl if external.local else svc), external.verdict is None
        uses_ext = has_any and p.externally_accessible
        uses_fw = has_any and bool(p.load_balancer_ips) and bool(p.source_ranges)
        lb_target = fw if uses_fw else ext
        if not has_any:
            int_verdict = ext_verdict = self.reject(proto)
            int_comment = ext_comment = quote_comment(f"{name} has no endpoints")
        else:
            int_verdict = ext_verdict = "DROP"
            int_comment = ext_comment = quote_comment(f"{name} has no local endpoints")

        dport = f"-m {proto} --dport {p.port}"
        cip = host(p.cluster_ip)
        if has_internal:
            nat[n.SERVICES].append(
                f"-d {cip} -p {proto} -m comment --comment {quote_comment(name + ' cluster IP')} {dport} "
                f"-j {internal_chain}")
        else:
            filt[n.SERVICES].append(
                f"-d {cip} -p {proto} -m comment --comment {int_comment} {dport} -j {int_verdict}")

        # External IPs, then load-balancer IPs: the same three rules each, in this order in every chain.
        for ips, what, target, firewall in ((p.external_ips, "external IP", ext, False),
                                            (p.load_balancer_ips, "loadbalancer IP", lb_target, uses_fw)):
            for ip in ips:
                match = f"-d {host(ip)} -p {proto} -m comment --comment"
                if has_any:
                    nat[n.SERVICES].append(f"{match} {quote_comment(f'{name} {what}')} {dport} -j {target}")
                if firewall:
                    filt[n.PROXY_FIREWALL].append(
                        f"{match} {quote_comment(f'{name} traffic not accepted by {fw}')} {dport} -j DROP")
                if not has_external:
                    filt[n.EXTERNAL_SERVICES].append(f"{match} {ext_comment} {dport} -j {ext_verdict}")
        if p.node_port:
            self._node_port(p, name, ext if has_any else None, None if has_external else (ext_comment, ext_verdict),
                            nat, filt)

        if p.health_check_node_port:
            filt[n.NODEPORTS].append(
                f"-p tcp -m comment --comment {quote_comment(name + ' health check node port')} "
                f"-m tcp --dport {p.health_check_node_port} -j ACCEPT")

        masq = self._clusterip_masq(p, name, cip, dport) if has_internal else None
        if uses_ext:
            chains[ext] = self._ext_chain(p, svc, external_policy_chain, has_external)
        if uses_fw:
            chains[fw] = self._fw_chain(p, ext)
        eps = _endpoints(p, name, proto)
        if p.cluster_endpoints and p.uses_cluster_endpoints:
            rules = [masq] if masq and internal_chain == svc else []
            chains[svc] = rules + self._lb_rules(p, name, [eps[id(e)] for e in p.cluster_endpoints])
        if p.local_endpoints and p.uses_local_endpoints:
            rules = [masq] if masq and internal_chain == svl else []
            chains[svl] = rules + self._lb_rules(p, name, [eps[id(e)] for e in p.local_endpoints])
        chains.update(self._sep_chains(p, name, proto, eps.values()))
        return _Chunk({c: tuple(r) for c, r in nat.items() if r}, {c: tuple(r) for c, r in filt.items() if r},
                      {c: tuple(r) for c, r in chains.items()})

    def _node_port(self, p: ServicePortState, name: str, ext: str | None, refuse: tuple[str, str] | None,
                   nat: dict[str, list[str]], filt: dict[str, list[str]]) -> None:
        """A NodePort's rules: to `ext` (None: no endpoints at all), and `refuse` (comment, verdict)
        when external traffic has no endpoint to go to."""
        proto = p.protocol.lower
        if ext is not None:
            if self.count_localhost:  # kube-proxy: counted, then the normal rule below takes the rest
                nat[n.NODEPORTS].append(
                    f"-d 127.0.0.0/8 -p {proto} -m comment --comment {quote_comment(name)} -m {proto} "
                    f"--dport {p.node_port} {nfacct_match(LOCALHOST_NODEPORTS_ACCEPTED)}-j {ext}")
            nat[n.NODEPORTS].append(
                f"-p {proto} -m comment --comment {quote_comment(name)} -m {proto} --dport {p.node_port} -j {ext}")
        if refuse is not None:
            comment, verdict = refuse
            filt[n.EXTERNAL_SERVICES].append(
                f"-p {proto} -m comment --comment {comment} -m addrtype --dst-type LOCAL "
                f"-m {proto} --dport {p.node_port} -j {verdict}")

    def add_shared(self, chunk: _Chunk) -> None:
        """Append a chunk's rules in the shared chains (its own chains are kept by the Compiler)."""
        nat, filter_ = self.nat, self.filter
        for c, rules in chunk.nat.items():
            nat[c] += rules
        for c, rules in chunk.filter.items():
            filter_[c] += rules

    def _clusterip_masq(self, p: ServicePortState, name: str, cip: str, dport: str) -> str | None:
        """Masquerade off-cluster traffic to the clusterIP (it may have been routed here from
        outside and must return through this node), or everything with masqueradeAll."""
        tail = f"-p {p.protocol.lower} -m comment --comment {quote_comment(name + ' cluster IP')} " \
               f"{dport} -j {n.MARK_MASQ}"
        if self.config.masquerade_all:
            return f"-d {cip} {tail}"
        if self.nonlocal_src is None:
            return None
        return _generic(self.nonlocal_src, f"-d {cip}") + " " + tail

    def _ext_chain(self, p: ServicePortState, svc: str, policy_chain: str, has_external: bool) -> list[str]:
        name = str(p.name)
        rules: list[str] = []
        if not p.external_policy_local:
            rules.append(f"-m comment --comment {quote_comment(f'masquerade traffic for {name} external destinations')}"
                         f" -j {n.MARK_MASQ}")
        else:
            if self.local_src is not None:
                rules.append(_generic(self.local_src) + " -m comment --comment "
                             + quote_comment(f"pod traffic for {name} external destinations") + f" -j {svc}")
            masq = quote_comment(f"masquerade LOCAL traffic for {name} external destinations")
            route = quote_comment(f"route LOCAL traffic for {name} external destinations")
            rules.append(f"-m comment --comment {masq} -m addrtype --src-type LOCAL -j {n.MARK_MASQ}")
            rules.append(f"-m comment --comment {route} -m addrtype --src-type LOCAL -j {svc}")
        if has_external:
            rules.append(f"-j {policy_chain}")
        return rules

    def _fw_chain(self, p: ServicePortState, ext: str) -> list[str]:
        comment = quote_comment(f"{p.name} loadbalancer IP")
        rules = [f"-s {host(cidr)} -m comment --comment {comment} -j {ext}" for cidr in p.source_ranges]
        # A request from this node to the LB IP may loop back with the LB IP as its source; let it
        # through when a source range admits the node itself.
        node_ips = [ip for ip in self.node.ips if ip.version == p.cluster_ip.version]
        if any(ip in cidr for cidr in p.source_ranges for ip in node_ips):
            rules += [f"-s {host(ip)} -m comment --comment {comment} -j {ext}" for ip in p.load_balancer_ips]
        return rules

    def _lb_rules(self, p: ServicePortState, name: str, eps: list[_Ep]) -> list[str]:
        comments = [""] * len(eps) if self.large else [
            f"-m comment --comment {quote_comment(f'{name} -> {ep.text}')} " for ep in eps]
        rules: list[str] = []
        if p.affinity_timeout is not None:
            for c, ep in zip(comments, eps, strict=True):
                rules.append(f"{c}-m recent --rcheck --seconds {p.affinity_timeout} --reap --name {ep.chain} "
                             f"--mask {self.mask} --rsource -j {ep.chain}")
        count = len(eps)
        for i, (c, ep) in enumerate(zip(comments, eps, strict=True)):
            if i < count - 1:
                rules.append(f"{c}-m statistic --mode random --probability {probability_of(count - i)} -j {ep.chain}")
            else:
                rules.append(f"{c}-j {ep.chain}")
        return rules

    def _sep_chains(self, p: ServicePortState, name: str, proto: str,
                    eps: Iterable[_Ep]) -> Iterator[tuple[str, list[str]]]:
        """Each endpoint's KUBE-SEP chain: hairpin masquerade, [recent --set], DNAT. What is the same
        for every endpoint of the port is rendered once (100,000 endpoints at 10k services)."""
        comment = "" if self.large else f" -m comment --comment {quote_comment(name)}"
        hairpin = f"{comment} -j {n.MARK_MASQ}"
        dnat = f" -m {proto} -j DNAT --to-destination "
        head = f"-p {proto}{comment}"
        if p.affinity_timeout is None:
            for ep in eps:
                yield ep.chain, [f"-s {ep.source}{hairpin}", f"{head}{dnat}{ep.text}"]
            return
        mask = self.mask
        for ep in eps:
            yield ep.chain, [f"-s {ep.source}{hairpin}",
                             f"{head} -m recent --set --name {ep.chain} --mask {mask} --rsource{dnat}{ep.text}"]

    # --- fixed chains and entry jumps ------------------------------------------------------------

    def finish(self) -> Ruleset:
        mark = self.config.masquerade_mark
        self.nat[n.SERVICES].extend(self._nodeport_tail())
        masquerade = "-j MASQUERADE --random-fully" if self.config.masquerade_random_fully else "-j MASQUERADE"
        nat: dict[str, tuple[str, ...]] = {
            **ENTRY_JUMPS["nat"],
            n.CANARY: (),
            n.SERVICES: tuple(self.nat[n.SERVICES]),
            n.NODEPORTS: tuple(self.nat[n.NODEPORTS]),
            n.POSTROUTING: (
                f"-m mark ! --mark {mark}/{mark} -j RETURN",
                f"-j MARK --set-xmark {mark}/0x0",
                f'-m comment --comment "kubernetes service traffic requiring SNAT" {masquerade}',
            ),
            n.MARK_MASQ: (f"-j MARK --set-xmark {mark}/{mark}",),
            **self.service_chains,
        }
        counted = CT_STATE_INVALID_DROPPED in self.config.nfacct_counters
        invalid = f"-m conntrack --ctstate INVALID {nfacct_match(CT_STATE_INVALID_DROPPED) if counted else ''}-j DROP"
        forward = [] if self.config.conntrack_tcp_be_liberal else [invalid]
        forward += [
            f'-m comment --comment "kubernetes forwarding rules" -m mark --mark {mark}/{mark} -j ACCEPT',
            '-m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED '
            "-j ACCEPT",
        ]
        filter_ = {n.CANARY: [], **self.filter, n.FORWARD: forward}
        entry = ENTRY_JUMPS["filter"]
        if localhost_nodeports(self.config, self.family):
            filter_[n.FIREWALL] = [LOCALNET_GUARD]
            entry = {c: (FIREWALL_JUMP, *rules) if c in ("INPUT", "OUTPUT") else rules for c, rules in entry.items()}
        tables: dict[str, dict[str, tuple[str, ...]]] = {
            "mangle": {n.CANARY: ()},
            "filter": {**_tuples(filter_), **entry},
            "nat": nat,  # one dict of 100k+ chains at 10k services: built once, never copied
        }
        return Ruleset(self.family, tables)

    def _nodeport_tail(self) -> list[str]:
        """The last rule(s) of nat KUBE-SERVICES: every local address, or one per address
        nodePortAddresses selects (see netkit.rules.nodeports); loopback only with localhost NodePorts."""
        localhost = localhost_nodeports(self.config, self.family)
        ips = nodeport_ips(self.config, self.node.ips, self.family)
        if ips is None:
            if self.family is IPFamily.IPV6:
                dest = "! -d ::1/128 "
            else:
                dest = "" if localhost else "! -d 127.0.0.0/8 "
            return [f"{dest}-m comment --comment {NODEPORTS_COMMENT} -m addrtype --dst-type LOCAL -j {n.NODEPORTS}"]
        return [f"-d {host(ip)} -m comment --comment {NODEPORTS_COMMENT} -j {n.NODEPORTS}"
                for ip in ips if not ip.is_loopback or localhost]


class _Ep(NamedTuple):
    """One reachable endpoint of one service port, rendered once: its chain, `IP:port`, `IP/32`."""

    chain: str
    text: str
    source: str


def _endpoints(p: ServicePortState, name: str, proto: str) -> dict[int, _Ep]:
    """The endpoints that get a KUBE-SEP chain (cluster ∪ local, in NodeState's order), keyed by
    identity: both lists hold the very objects of `p.endpoints`, and identity is much cheaper to hash
    than the frozen dataclass at 100,000 endpoints."""
    wanted = {id(e) for e in p.cluster_endpoints} | {id(e) for e in p.local_endpoints}
    out: dict[int, _Ep] = {}
    for e in p.endpoints:
        if id(e) in wanted:
            ip = str(e.ip)
            if ":" in ip:  # IPv6 (the text says it in C; `.version` is a Python property)
                text, source = f"[{ip}]:{e.port}", ip + "/128"
            else:
                text, source = f"{ip}:{e.port}", ip + "/32"
            out[id(e)] = _Ep(n.endpoint_chain_of(name, proto, text), text, source)
    return out


def nfacct_match(counter: str) -> str:
    """`-m nfacct` as iptables-save prints it (two spaces before the name), with a trailing space."""
    return f"-m nfacct --nfacct-name  {counter} "


def _generic(*parts: str) -> str:
    """Join generic matches (-s, -d, -i, -o, each maybe negated) in iptables-save's order."""
    order = {"-s": 0, "-d": 1, "-i": 2, "-o": 3}
    return " ".join(sorted(parts, key=lambda s: order.get(s.removeprefix("! ").split(" ", 1)[0], 9)))


def _tuples(chains: dict[str, list[str]]) -> dict[str, tuple[str, ...]]:
    return {c: tuple(r) for c, r in chains.items()}


def _jump(target: str, comment: str, new_only: bool) -> str:
    extra = "-m conntrack --ctstate NEW " if new_only else ""
    return f'{extra}-m comment --comment "{comment}" -j {target}'


# Entry jumps from the built-in chains, in the order they end up in (each is inserted at the top,
# so they are inserted in reverse). kube-proxy's list; filter jumps match only NEW connections.
ENTRY_JUMPS: dict[str, dict[str, tuple[str, ...]]] = {
    "filter": {
        "INPUT": (
            _jump(n.PROXY_FIREWALL, "kubernetes load balancer firewall", True),
            _jump(n.NODEPORTS, "kubernetes health check service ports", False),
            _jump(n.EXTERNAL_SERVICES, "kubernetes externally-visible service portals", True),
        ),
        "FORWARD": (
            _jump(n.PROXY_FIREWALL, "kubernetes load balancer firewall", True),
            _jump(n.FORWARD, "kubernetes forwarding rules", False),
            _jump(n.SERVICES, "kubernetes service portals", True),
            _jump(n.EXTERNAL_SERVICES, "kubernetes externally-visible service portals", True),
        ),
        "OUTPUT": (
            _jump(n.PROXY_FIREWALL, "kubernetes load balancer firewall", True),
            _jump(n.SERVICES, "kubernetes service portals", True),
        ),
    },
    "nat": {
        "PREROUTING": (_jump(n.SERVICES, "kubernetes service portals", False),),
        "OUTPUT": (_jump(n.SERVICES, "kubernetes service portals", False),),
        "POSTROUTING": (_jump(n.POSTROUTING, "kubernetes postrouting rules", False),),
    },
}
