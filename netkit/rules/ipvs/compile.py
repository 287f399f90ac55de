"""compile(state, config, family) → Ruleset: kube-proxy's IPVS layout, as a pure function.

- Every service IP (clusterIP, externalIPs, LB IPs) goes on the dummy `kube-ipvs0` as a /32 (/128):
  the kernel then treats it as local and IPVS takes the traffic on INPUT (or OUTPUT for the node).
- One virtual server per (IP, port, protocol), and per node IP for a NodePort; real servers in NAT
  mode, weight 1. Internal traffic policy picks the clusterIP's endpoints, external traffic policy
  those of external IPs, LB IPs and NodePorts. The scheduler is `config.ipvs_scheduler` unless the
  service carries the annotation `SCHEDULER_ANNOTATION` (kube-router's) naming a valid one.
- ClientIP affinity is IPVS persistence with the affinity timeout.
- A service without usable endpoints keeps its virtual server with no real server: IPVS itself
  answers ICMP port-unreachable (ip_vs_leave), so clients are rejected at once, and nothing else
  on the node can answer in its place.
- eTP=Local and kubernetes#75262: with only local endpoints on an external address, pods and the
  node itself would be black-holed on a node without a local endpoint (the address is local here,
  so their traffic never reaches the real load balancer). kube-proxy's iptables mode sends such
  in-cluster traffic to all cluster endpoints; we do the same with a firewall-mark virtual server
  holding the cluster endpoints, marked in mangle for pod-sourced (local-traffic detector) and
  node-sourced packets. IPVS looks fwmark services up before address services.
- The iptables payload and ipsets follow kube-proxy's IPVS mode: masquerade via KUBE-CLUSTER-IP /
  KUBE-NODE-PORT-* / KUBE-LOAD-BALANCER, hairpin via KUBE-LOOP-BACK, LB source ranges in filter,
  KUBE-IPVS-FILTER rejecting ports of service IPs that no virtual server serves.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Sequence

from netkit.config import Config
from netkit.model import EndpointAddr, IPFamily, NodeState, Protocol, ServicePortState
from netkit.model.types import IPAddress
from netkit.rules.ipvs import names as n
from netkit.rules.ipvs.ruleset import (
    SCHEDULERS,
    IPSet,
    RealServer,
    Ruleset,
    VirtualServer,
    hostport,
    sort_services,
)

SCHEDULER_ANNOTATION = "kube-router.io/service.scheduler"
DIGEST_PREFIX = "netkit ipvs payload sha256:"


def compile(state: NodeState, config: Config, family: IPFamily) -> Ruleset:  # noqa: A001 (the stage name)
    ports = state.family(family)
    node_ips = node_port_ips(state.node.ips, config, family)
    marks = fwmarks(ports)
    services: list[VirtualServer] = []
    entries: dict[str, set[str]] = defaultdict(set)
    for sp in ports:
        mine = virtual_servers(sp, config, node_ips, marks.get(sp.key, 0))
        services += mine
        add_set_entries(entries, sp, mine, family)
    addresses = frozenset(ip for sp in ports for ip in (sp.cluster_ip, *sp.external_ips, *sp.load_balancer_ips))
    entries[n.IPVS_IPS] |= {str(a) for a in addresses}
    sets = tuple(IPSet(n.set_name(base, family), typ, family, frozenset(entries.get(base, ())), comment)
                 for base, (typ, comment) in sorted(n.SET_TYPES.items()))
    payload = iptables_payload(config, family, internal_mark_rules(ports, marks, node_ips, config, family))
    return Ruleset(family, sort_services(services), addresses, tuple(sorted(sets, key=lambda s: s.name)),
                   payload)


def node_port_ips(ips: Sequence[IPAddress], config: Config, family: IPFamily) -> tuple[IPAddress, ...]:
    """The node's addresses of this family, narrowed to nodePortAddresses when set."""
    mine = [ip for ip in ips if IPFamily.of(ip) is family]
    if config.node_port_addresses:
        mine = [ip for ip in mine if any(ip in net for net in config.node_port_addresses
                                         if IPFamily.of(net) is family)]
    return tuple(mine)


def scheduler(sp: ServicePortState, config: Config) -> str:
    wanted = dict(sp.annotations).get(SCHEDULER_ANNOTATION)
    return wanted if wanted in SCHEDULERS else config.ipvs_scheduler


def fwmarks(ports: Sequence[ServicePortState]) -> dict[object, int]:
    """A stable firewall mark per service port that needs the anti-#75262 fwmark service: hashed
    from its name (so marks do not move when other services come and go), linear probing on a clash."""
    taken: set[int] = set()
    out: dict[object, int] = {}
    for sp in sorted((p for p in ports if _needs_fwmark(p)), key=lambda p: (str(p.name), p.protocol.value)):
        slot = int.from_bytes(hashlib.sha256(f"{sp.name}/{sp.protocol.lower}".encode()).digest()[:4]) % n.FWMARK_SLOTS
        while slot in taken:
            slot = (slot + 1) % n.FWMARK_SLOTS
        taken.add(slot)
        out[sp.key] = n.FWMARK_BASE | slot
    return out


def _needs_fwmark(sp: ServicePortState) -> bool:
    return sp.external_policy_local and sp.externally_accessible and bool(sp.cluster_endpoints)


def virtual_servers(sp: ServicePortState, config: Config, node_ips: Sequence[IPAddress],
                    mark: int) -> list[VirtualServer]:
    internal = sp.local_endpoints if sp.internal_policy_local else sp.cluster_endpoints
    external = sp.local_endpoints if sp.external_policy_local else sp.cluster_endpoints
    sched = scheduler(sp, config)

    def vs(ip: IPAddress | None, port: int, eps: Iterable[EndpointAddr], what: str, fw: int = 0) -> VirtualServer:
        reals = tuple(sorted(RealServer(e.ip, e.port) for e in eps))
        return VirtualServer(sp.protocol, ip, port, sched, sp.affinity_timeout, fw, sp.family, reals,
                             f"{sp.name} {what}")

    out = [vs(sp.cluster_ip, sp.port, internal, "cluster IP")]
    out += [vs(ip, sp.port, external, "external IP") for ip in sp.external_ips]
    out += [vs(ip, sp.port, external, "loadbalancer IP") for ip in sp.load_balancer_ips]
    if sp.node_port:
        out += [vs(ip, sp.node_port, external, "nodePort") for ip in node_ips]
    if mark:
        out.append(vs(None, 0, sp.cluster_endpoints, "in-cluster traffic to external addresses", mark))
    return out


def add_set_entries(entries: dict[str, set[str]], sp: ServicePortState, mine: Sequence[VirtualServer],
                    family: IPFamily) -> None:
    proto = sp.protocol.lower

    def ipport(ip: IPAddress, port: int) -> str:
        return f"{ip},{proto}:{port}"

    entries[n.CLUSTER_IP].add(ipport(sp.cluster_ip, sp.port))
    for ip in sp.external_ips:
        entries[n.EXTERNAL_IP].add(ipport(ip, sp.port))
        if sp.external_policy_local:
            entries[n.EXTERNAL_IP_LOCAL].add(ipport(ip, sp.port))
    for ip in sp.load_balancer_ips:
        entries[n.LOAD_BALANCER].add(ipport(ip, sp.port))
        if sp.external_policy_local:
            entries[n.LOAD_BALANCER_LOCAL].add(ipport(ip, sp.port))
        if sp.source_ranges:
            entries[n.LOAD_BALANCER_FW].add(ipport(ip, sp.port))
            entries[n.LOAD_BALANCER_SOURCE_CIDR] |= {f"{ipport(ip, sp.port)},{net}" for net in sp.source_ranges}
    if sp.node_port:
        entries[n.NODE_PORT.format(proto=sp.protocol.value)].add(str(sp.node_port))
        if sp.external_policy_local:
            entries[n.NODE_PORT_LOCAL.format(proto=sp.protocol.value)].add(str(sp.node_port))
    if sp.health_check_node_port:
        entries[n.HEALTH_CHECK_NODE_PORT].add(str(sp.health_check_node_port))
    for rs in {rs for vs in mine for rs in vs.reals}:
        entries[n.LOOP_BACK].add(f"{rs.ip},{proto}:{rs.port},{rs.ip}")


def internal_mark_rules(ports: Sequence[ServicePortState], marks: dict[object, int],
                        node_ips: Sequence[IPAddress], config: Config, family: IPFamily) -> list[str]:
    """mangle rules marking in-cluster traffic to eTP=Local external addresses (see module doc)."""
    pods = config.local_match(family)
    rules: list[str] = []
    for sp in ports:
        mark = marks.get(sp.key)
        if not mark:
            continue
        dests = [(ip, sp.port) for ip in (*sp.external_ips, *sp.load_balancer_ips)]
        dests += [(ip, sp.node_port) for ip in node_ips] if sp.node_port else []
        p = sp.protocol.lower
        for ip, port in dests:
            where = f"-d {ip}/{ip.max_prefixlen} -p {p} -m {p} --dport {port}"
            set_mark = f"-j MARK --set-xmark {mark:#x}/0xffffffff"
            comment = f'-m comment --comment "{sp.name} {hostport(ip, port)} in-cluster"'
            if pods:
                rules.append(f"-A {n.INTERNAL_MARK} {pods} {where} {comment} {set_mark}")
            rules.append(f"-A {n.INTERNAL_MARK} {where} {comment} -m addrtype --src-type LOCAL {set_mark}")
    return rules


def iptables_payload(config: Config, family: IPFamily, mangle_rules: Sequence[str]) -> str:
    """The iptables-restore --noflush input: every chain of IPVS mode, declared (hence flushed) and
    written whole. It does not depend on the services, only on the config (services live in the
    ipsets), so it changes rarely; the mangle rules are the exception (eTP=Local services)."""
    body = "\n".join([*_mangle(mangle_rules), *_filter(config, family), *_nat(config, family)]) + "\n"
    digest = hashlib.sha256(body.encode()).hexdigest()[:16]
    # A comment rule with no target (matches, does nothing) at the head of KUBE-IPVS-FILTER lets a
    # kernel dump tell whether the payload in place is this one without parsing iptables-save's
    # normalised text (which rewrites marks and module order).
    first = f"-A {n.IPVS_FILTER} "
    return body.replace(first, f'{first}-m comment --comment "{DIGEST_PREFIX}{digest}"\n{first}', 1)


def payload_digest(payload: str) -> str:
    """The digest embedded in a payload ("" when none)."""
    at = payload.find(DIGEST_PREFIX)
    return payload[at + len(DIGEST_PREFIX):at + len(DIGEST_PREFIX) + 16] if at >= 0 else ""


def _mangle(rules: Sequence[str]) -> list[str]:
    return ["*mangle", f":{n.INTERNAL_MARK} - [0:0]", *rules, "COMMIT"]


def _filter(config: Config, family: IPFamily) -> list[str]:
    def s(base: str) -> str:
        return n.set_name(base, family)

    reject = "icmp-port-unreachable" if family is IPFamily.IPV4 else "icmp6-port-unreachable"
    mark = config.masquerade_mark
    return [
        "*filter",
        *(f":{c} - [0:0]" for c in (n.FORWARD, n.NODE_PORT_CHAIN, n.PROXY_FIREWALL, n.SOURCE_RANGES_FIREWALL,
                                     n.IPVS_FILTER)),
        *([] if config.conntrack_tcp_be_liberal else [f"-A {n.FORWARD} -m conntrack --ctstate INVALID -j DROP"]),
        f'-A {n.FORWARD} -m comment --comment "kubernetes forwarding rules" -m mark --mark {mark}/{mark} -j ACCEPT',
        f'-A {n.FORWARD} -m comment --comment "kubernetes forwarding conntrack rule" '
        "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        f'-A {n.NODE_PORT_CHAIN} -m comment --comment "Kubernetes health check node port" '
        f"-m set --match-set {s(n.HEALTH_CHECK_NODE_PORT)} dst -j ACCEPT",
        f'-A {n.PROXY_FIREWALL} -m comment --comment "Kubernetes service load balancer ip + port for load balancer '
        f'with sourceRange" -m set --match-set {s(n.LOAD_BALANCER_FW)} dst,dst -j {n.SOURCE_RANGES_FIREWALL}',
        f"-A {n.SOURCE_RANGES_FIREWALL} -m set --match-set {s(n.LOAD_BALANCER_SOURCE_CIDR)} dst,dst,src -j RETURN",
        f"-A {n.SOURCE_RANGES_FIREWALL} -j DROP",
        *(f"-A {n.IPVS_FILTER} -m set --match-set {s(base)} {dims} -j RETURN"
          for base, dims in ((n.LOAD_BALANCER, "dst,dst"), (n.CLUSTER_IP, "dst,dst"), (n.EXTERNAL_IP, "dst,dst"),
                             (n.HEALTH_CHECK_NODE_PORT, "dst"))),
        f"-A {n.IPVS_FILTER} -m conntrack --ctstate NEW -m set --match-set {s(n.IPVS_IPS)} dst "
        f"-j REJECT --reject-with {reject}",
        "COMMIT",
    ]


def _nat(config: Config, family: IPFamily) -> list[str]:
    def s(base: str) -> str:
        return n.set_name(base, family)

    mark = config.masquerade_mark
    masq = f"-A {n.SERVICES} -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" "
    masq += f"-m set --match-set {s(n.CLUSTER_IP)} dst,dst"
    not_pods = config.local_match(family, negate=True)
    cluster_masq = [f"{masq} -j {n.MARK_MASQ}"] if config.masquerade_all else (
        [f"{masq} {not_pods} -j {n.MARK_MASQ}"] if not_pods else [])
    nodeports = [
        rule for p in Protocol for rule in (
            f"-A {n.NODE_PORT_CHAIN} -p {p.lower} -m comment --comment \"Kubernetes nodeport {p.value} port with "
            f"externalTrafficPolicy=local\" -m set --match-set {s(n.NODE_PORT_LOCAL.format(proto=p.value))} dst "
            "-j RETURN",
            f"-A {n.NODE_PORT_CHAIN} -p {p.lower} -m comment --comment \"Kubernetes nodeport {p.value} port for "
            f"masquerade purpose\" -m set --match-set {s(n.NODE_PORT.format(proto=p.value))} dst -j {n.MARK_MASQ}")]
    random_fully = " --random-fully" if config.masquerade_random_fully else ""
    return [
        "*nat",
        *(f":{c} - [0:0]" for c in (n.SERVICES, n.POSTROUTING, n.NODE_PORT_CHAIN, n.LOAD_BALANCER_CHAIN,
                                     n.MARK_MASQ)),
        *cluster_masq,
        f"-A {n.SERVICES} -m set --match-set {s(n.EXTERNAL_IP_LOCAL)} dst,dst -j RETURN",
        f"-A {n.SERVICES} -m comment --comment \"Kubernetes service external ip + port for masquerade and filter "
        f"purpose\" -m set --match-set {s(n.EXTERNAL_IP)} dst,dst -j {n.MARK_MASQ}",
        f"-A {n.SERVICES} -m comment --comment \"Kubernetes service lb portal\" "
        f"-m set --match-set {s(n.LOAD_BALANCER)} dst,dst -j {n.LOAD_BALANCER_CHAIN}",
        f"-A {n.SERVICES} -m addrtype --dst-type LOCAL -j {n.NODE_PORT_CHAIN}",
        *nodeports,
        f"-A {n.LOAD_BALANCER_CHAIN} -m set --match-set {s(n.LOAD_BALANCER_LOCAL)} dst,dst -j RETURN",
        f"-A {n.LOAD_BALANCER_CHAIN} -j {n.MARK_MASQ}",
        f"-A {n.MARK_MASQ} -j MARK --set-xmark {mark}/{mark}",
        f"-A {n.POSTROUTING} -m comment --comment \"Kubernetes endpoints dst ip:port, source ip for solving hairpin "
        f"purpose\" -m set --match-set {s(n.LOOP_BACK)} dst,dst,src -j MASQUERADE",
        f"-A {n.POSTROUTING} -m mark ! --mark {mark}/{mark} -j RETURN",
        f"-A {n.POSTROUTING} -j MARK --set-xmark {mark}/0x0",
        f"-A {n.POSTROUTING} -m comment --comment \"kubernetes service traffic requiring SNAT\" "
        f"-j MASQUERADE{random_fully}",
        "COMMIT",
    ]
