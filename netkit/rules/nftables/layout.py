"""netkit's nftables layout for one IP family: what each service port and the fixed part contribute.

Theory of operation. One table per family (`ip netkit`, `ip6 netkit`) that nobody else writes, so
cleanup is deleting it. Per-packet work is a constant number of hash lookups whatever the number of
services, and the kernel work of a sync is proportional to what changed:

    prerouting ─ filter -110 ─ firewall-check ─ vmap @firewall-ips ─► fw-… (saddr not allowed: drop)
               └ nat -100 ──── services ─┬ vmap @service-ips ─────────► svc-… / local-… / ext-…
    output ──── filter -110 ─ firewall-check                      │
               └ nat -100 ──── services ─┴ fib daddr local: vmap @service-nodeports ─► ext-…
    input ───── filter 0 ──── nodeport-endpoints-check, service-endpoints-check (vmap @no-endpoint-…:
                               drop, or goto reject-chain — reject is not a verdict), health checks
    forward ─── filter 0 ──── service-endpoints-check, cluster-ips-check (undefined port: reject)
    output ──── filter 0 ──── service-endpoints-check, cluster-ips-check
    postrouting nat 100 ───── masquerading: mark 0x4000 set → masquerade; hairpin (saddr == daddr
                               after DNAT, looked up in @hairpin-endpoints) → masquerade

- Dispatch: `ip daddr . meta l4proto . th dport vmap @service-ips` is one hash lookup; a new service
  is one element, a removed one is one element delete.
- Endpoint choice without a chain per endpoint: `dnat ip to numgen random mod N offset O map
  @endpoints-tcp-3f` — one rule per service port; its endpoints are the elements O … O+N-1 of one of
  a fixed number of shared endpoint maps (SHARDS per protocol). kube-proxy's layout (a chain per
  endpoint) made a full load of 10k services × 10 endpoints take 148 s here against 10.4 s without
  endpoint chains (docs/nftables.md). Why shared and sharded (docs/nftables.md has the measurements):
  the kernel finds a set by name with a linear walk of the table's sets, and names each anonymous set
  by another such walk, so one map per service (named or anonymous) makes a load quadratic in the
  number of services; one map for all is quadratic too, because binding a map to a rule walks the
  map's other bindings (and, for a map, its elements). A few dozen maps per protocol keep all of
  those walks short. O = slot × STRIDE, where each endpoint chain's slot is a hash of its name,
  collisions settled in name order (`endpoint_slots`), so a service keeps its keys from sync to
  sync and an endpoint change is a one-rule rewrite plus element updates that create no set. A port
  with more than STRIDE endpoints gets a map of its own, named like its chain.
- ClientIP affinity (the only place with per-endpoint rules, never per-endpoint chains): a dynamic
  set with a timeout per endpoint; a client found in one is sent to that endpoint again and its entry
  refreshed; a new client takes the random cascade `numgen random mod (N-i) 0` (1/N each overall, as
  kube-proxy's probabilities) and is recorded.
- Masquerade like kube-proxy: the `mark-for-masquerade` chain sets bit 0x4000 (masqueradeBit), the
  postrouting chain clears it and masquerades. Hairpin (a pod reaching itself through its service)
  needs no per-endpoint rule: after DNAT its source equals its destination, matched against a set of
  `ep . ep` pairs.
- Policies, as kube-proxy's iptables mode: internal traffic to the internal policy's chain;
  external traffic enters `ext-…`, which masquerades for Cluster, or for Local keeps the client
  address but short-circuits pod and node traffic to the cluster endpoints. A service without
  endpoints is rejected; a Local policy without local endpoints drops (clients retry while the load
  balancer's health check catches up).

Everything is a pure function of (NodeState, Config, family): no IO. compile.py assembles the
table from these parts (`compile`, and the daemon's `Compiler`, which remembers parts between calls).
"""

from __future__ import annotations

import ipaddress
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import replace

from netkit.config import Config
from netkit.errors import NetkitError
from netkit.model import EndpointAddr, IPFamily, NodeState, ServicePortState, Traffic, Verdict
from netkit.model.types import IPAddress, IPNetwork
from netkit.nft.render import TYPEOF_ADDRESS, address_port_typeof
from netkit.nft.ruleset import (
    Chain,
    Element,
    Hook,
    NamedSet,
    Part,
    Ruleset,
    anonymous_set,
    prefixes,
)
from netkit.rules.nftables import names as n
from netkit.rules.nodeports import nodeport_ips

SHARDS = 64  # shared endpoint maps per protocol (only those in use are declared)
STRIDE = 4096  # keys per endpoint chain in a shared map: its endpoints are O … O+N-1, O = slot × STRIDE
SLOTS = 1 << 20  # STRIDE × SLOTS = 2³², the range of `numgen … offset` and of the map's 32-bit key
AFFINITY_SET_SIZE = 65535  # what the kernel reports once a rule binds a dynamic set; never sent (plan.py: prelude)
_IFNAME_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


class Ctx:
    """The per-family constants every rule builder needs (not a dataclass: never compared)."""

    __slots__ = ("_text", "addr_type", "config", "family", "ip", "local", "node_ips", "not_local", "slots")

    def __init__(self, family: IPFamily, config: Config, node_ips: Sequence[IPAddress] = (),
                 slots: dict[str, int] | None = None) -> None:
        self.family = family
        self.slots = slots or {}
        self.node_ips = tuple(node_ips)
        self.ip = "ip" if family is IPFamily.IPV4 else "ip6"
        self.addr_type = "ipv4_addr" if family is IPFamily.IPV4 else "ipv6_addr"
        self.config = config
        self.local, self.not_local = local_detector(config, family, self.ip)
        self._text: dict[IPAddress, str] = {}

    def text(self, ip: IPAddress) -> str:
        """str(ip), memoised: ipaddress's __str__ was half of compile's time at 100k endpoints."""
        found = self._text.get(ip)
        if found is None:
            found = "{}.{}.{}.{}".format(*ip.packed) if ip.version == 4 else str(ip)
            self._text[ip] = found
        return found


def compile_port(ctx: Ctx, p: ServicePortState) -> Part:
    """Everything one service port contributes, as a Part (its chains, own sets, shared-set elements)."""
    elements, chains, sets = service_port(ctx, p)
    return Part.of(chains, sets, elements)


def fixed_part(ctx: Ctx, shared: Sequence[NamedSet]) -> Part:
    """The fixed chains and the shared sets' definitions (`shared`: the fixed sets and the shards in use)."""
    return Part.of(fixed_chains(ctx, restricted_nodeports(ctx)), shared, ())


def unindexed(ctx: Ctx, state: NodeState, ports: Sequence[ServicePortState]) -> Ruleset:
    """The table without a part index, for a state where two ports share a label (not a valid state:
    plan then compares everything)."""
    shared = fixed_sets(ctx, state)
    chains = fixed_chains(ctx, restricted_nodeports(ctx))
    own: list[NamedSet] = []
    added: dict[str, list[Element]] = {s.name: [] for s in shared}
    for p in ports:
        elements, port_chains, port_sets = service_port(ctx, p)
        chains.extend(port_chains)
        own.extend(port_sets)
        for set_name, element in elements:
            added.setdefault(set_name, []).append(element)
    shared.extend(shard_map(ctx, name) for name in sorted(added.keys() - {s.name for s in shared}))
    full = [replace(s, elements=s.elements | frozenset(
        one_per_key(added[s.name]) if s.name in ONE_PER_KEY else added[s.name])) for s in shared]
    return Ruleset.of(ctx.ip, [*full, *own], chains)


# Maps that take one value per key. Kubernetes lets two Services claim one address and port (a
# shared externalIP or load-balancer IP, kubernetes#69599; an externalIP may even be another
# Service's clusterIP): two elements with one key, which the kernel refuses ("File exists"), and
# every sync after would fail. One claim takes the key, the first port in namespace/name/port order,
# which is the Service whose KUBE-SERVICES rule comes first in iptables mode.
ONE_PER_KEY = frozenset({n.SERVICE_IPS, n.SERVICE_NODEPORTS, n.NO_ENDPOINT_SERVICES,
                         n.NO_ENDPOINT_NODEPORTS, n.FIREWALL_IPS})


def claim_rank(e: Element) -> tuple[tuple[str, ...], str]:
    """Where a claim of a one-value-per-key map stands: its port's (namespace, name, protocol, port)
    read from the chain it goes to, then its verdict's text (a verdict without a chain: text only)."""
    target = e.target
    if target is None:
        return (), e.value or ""
    label = target.partition("-")[2].partition("-")[2]
    return tuple(label.split("__")[0].split("/")), e.value or ""


def one_per_key(elements: Iterable[Element]) -> list[Element]:
    """The winning claim of each key (`claim_rank`)."""
    best: dict[str, Element] = {}
    for e in elements:
        had = best.get(e.key)
        if had is None or claim_rank(e) < claim_rank(had):
            best[e.key] = e
    return list(best.values())


def slotted_names(p: ServicePortState) -> list[str]:
    """A port's endpoint chains that take a slot in the shared endpoint maps (more than one endpoint)."""
    names: list[str] = []
    if p.cluster_endpoints and len(p.cluster_endpoints) > 1:
        names.append(n.service_object("svc", p))
    if p.local_endpoints and len(p.local_endpoints) > 1:
        names.append(n.service_object("local", p))
    return names


def endpoint_slots(ports: Iterable[ServicePortState]) -> dict[str, int]:
    """Endpoint chain name → its slot in the shared endpoint maps (see `slots_of`)."""
    return slots_of(name for p in ports for name in slotted_names(p))


def slots_of(names: Iterable[str]) -> dict[str, int]:
    """Endpoint chain name → its slot: a hash of the name, the next free slot on a collision, names
    taken in sorted order. A pure function of the set of names, so a service keeps its slot from
    sync to sync (only a new name sorting before it with the same hash can move it, which costs that
    one service a rule rewrite)."""
    taken: set[int] = set()
    out: dict[str, int] = {}
    for name in sorted(set(names)):
        slot = slot_hash(name)
        while slot in taken:
            slot = (slot + 1) % SLOTS
        taken.add(slot)
        out[name] = slot
    return out


def slot_hash(name: str) -> int:
    """The slot an endpoint chain's name asks for first (`slots_of` probes on from there)."""
    return (zlib.crc32(name.encode()) >> 12) % SLOTS


def shard_map(ctx: Ctx, name: str) -> NamedSet:
    """A shared endpoint map (`endpoints-<proto>-<shard>`): key slot × STRIDE + i, value ip . port."""
    return declared(NamedSet(name, ("integer",), f"{ctx.addr_type} . inet_service"))


def shard_of(ctx: Ctx, p: ServicePortState, chain: str, eps: Sequence[EndpointAddr]) -> tuple[str, int] | None:
    """(shared map, offset) holding an endpoint chain's endpoints, or None when it needs its own map."""
    slot = ctx.slots.get(chain)
    if slot is None or len(eps) > STRIDE:
        return None
    return n.endpoint_shard(p.protocol.lower, slot % SHARDS), slot * STRIDE


def local_detector(config: Config, family: IPFamily, ip: str) -> tuple[str | None, str | None]:
    """(match for "from a pod of this cluster", its negation) in nft syntax, or (None, None)."""
    mode = config.detect_local_mode
    if mode in ("ClusterCIDR", "NodeCIDR"):
        cidrs = config.cluster_cidrs if mode == "ClusterCIDR" else config.node_cidrs
        mine = [c for c in cidrs if IPFamily.of(c) is family]
        if mine:
            return f"{ip} saddr {net(mine[0])}", f"{ip} saddr != {net(mine[0])}"
    if mode in ("BridgeInterface", "InterfaceNamePrefix"):
        name = config.bridge_interface if mode == "BridgeInterface" else config.interface_name_prefix
        if name:
            if not set(name) <= _IFNAME_OK or len(name) > 15:
                raise NetkitError(f"detectLocal: {name!r} is not a valid interface name")
            value = f'"{name}"' if mode == "BridgeInterface" else f'"{name}*"'
            return f"iifname {value}", f"iifname != {value}"
    return None, None


def net(network: IPNetwork) -> str:
    """A prefix as nft prints it back: a full-length prefix is a bare address."""
    if network.prefixlen == network.max_prefixlen:
        return str(network.network_address)
    return str(network)


def endpoint(ctx: Ctx, ep: EndpointAddr) -> str:
    """`ip:port` as nft writes a dnat target (`[v6]:port` for IPv6)."""
    ip = ctx.text(ep.ip)
    return f"[{ip}]:{ep.port}" if ep.ip.version == 6 else f"{ip}:{ep.port}"


# ── the fixed layer ──────────────────────────────────────────────────────────────────────────────

def fixed_sets(ctx: Ctx, state: NodeState) -> list[NamedSet]:
    addr, verdict = ctx.addr_type, "verdict"
    by_ip = (addr, "inet_proto", "inet_service")
    by_port = ("inet_proto", "inet_service")
    sets = [
        NamedSet(n.SERVICE_IPS, by_ip, verdict),
        NamedSet(n.SERVICE_NODEPORTS, by_port, verdict),
        NamedSet(n.NO_ENDPOINT_SERVICES, by_ip, verdict),
        NamedSet(n.NO_ENDPOINT_NODEPORTS, by_port, verdict),
        NamedSet(n.FIREWALL_IPS, by_ip, verdict),
        NamedSet(n.CLUSTER_IPS, (addr,)),
        NamedSet(n.HAIRPIN, (addr, addr)),
        NamedSet(n.HEALTH_CHECK_NODEPORTS, ("inet_service",)),
    ]
    if restricted_nodeports(ctx):
        ips = sorted(nodeport_ips(ctx.config, ctx.node_ips, ctx.family) or (), key=lambda a: a.packed)
        # No localhost NodePorts in nftables mode (kube-proxy's neither): loopback never joins the set.
        sets.append(NamedSet(n.NODEPORT_IPS, (addr,),
                             elements=frozenset(Element(str(i)) for i in ips if not i.is_loopback)))
    return sets


def restricted_nodeports(ctx: Ctx) -> bool:
    """nodePortAddresses (or `primary`, the default) narrow this family's NodePorts to @nodeport-ips."""
    return nodeport_ips(ctx.config, ctx.node_ips, ctx.family) is not None


def fixed_chains(ctx: Ctx, nodeport_set: bool) -> list[Chain]:
    ip, cfg = ctx.ip, ctx.config
    new = "ct state new jump"
    loopback = "127.0.0.0/8" if ip == "ip" else "::1"
    if nodeport_set:
        to_node = f"{ip} daddr @{n.NODEPORT_IPS}"
    else:
        # No localhost NodePorts in this mode (kube-proxy's nftables mode dropped them too:
        # CVE-2020-8558 needed route_localnet and a martian filter to make them safe).
        to_node = f"{ip} daddr != {loopback} fib daddr type local"
    mark = cfg.masquerade_mark
    masquerade = "masquerade fully-random" if cfg.masquerade_random_fully else "masquerade"
    # No `ct state invalid drop` in filter-forward, whatever tcpBeLiberal says: dropping what conntrack
    # finds INVALID (kubernetes#74839) is kube-proxy's iptables and IPVS workaround; its nftables mode
    # installs none since kubernetes#122663 and leaves the fix to nf_conntrack_tcp_be_liberal=1.
    return [
        Chain("nat-prerouting", (f"jump {n.SERVICES}",), Hook("nat", "prerouting", -100)),
        Chain("nat-output", (f"jump {n.SERVICES}",), Hook("nat", "output", -100)),
        Chain("nat-postrouting", (f"jump {n.MASQUERADING}",), Hook("nat", "postrouting", 100)),
        Chain("filter-prerouting", (f"{new} {n.FIREWALL_CHECK}",), Hook("filter", "prerouting", -110)),
        Chain("filter-output-pre-dnat", (f"{new} {n.FIREWALL_CHECK}",), Hook("filter", "output", -110)),
        Chain("filter-input", (f"{new} {n.NODEPORT_ENDPOINTS_CHECK}", f"{new} {n.SERVICE_ENDPOINTS_CHECK}",
                               f"tcp dport @{n.HEALTH_CHECK_NODEPORTS} accept"), Hook("filter", "input", 0)),
        Chain("filter-forward", (f"{new} {n.SERVICE_ENDPOINTS_CHECK}", f"{new} {n.CLUSTER_IPS_CHECK}"),
              Hook("filter", "forward", 0)),
        Chain("filter-output", (f"{new} {n.SERVICE_ENDPOINTS_CHECK}", f"{new} {n.CLUSTER_IPS_CHECK}"),
              Hook("filter", "output", 0)),
        Chain(n.SERVICES, (f"{ip} daddr . meta l4proto . th dport vmap @{n.SERVICE_IPS}",
                           f"{to_node} meta l4proto . th dport vmap @{n.SERVICE_NODEPORTS}")),
        Chain(n.MASQUERADING, (f"ct status dnat {ip} saddr . {ip} daddr @{n.HAIRPIN} {masquerade}",
                               f"meta mark & {mark} == 0x0 return",
                               f"meta mark set meta mark ^ {mark}",
                               masquerade)),
        Chain(n.MARK_FOR_MASQUERADE, (f"meta mark set meta mark | {mark}",)),
        Chain(n.FIREWALL_CHECK, (f"{ip} daddr . meta l4proto . th dport vmap @{n.FIREWALL_IPS}",)),
        Chain(n.SERVICE_ENDPOINTS_CHECK, (f"{ip} daddr . meta l4proto . th dport vmap @{n.NO_ENDPOINT_SERVICES}",)),
        Chain(n.NODEPORT_ENDPOINTS_CHECK, (f"{to_node} meta l4proto . th dport vmap @{n.NO_ENDPOINT_NODEPORTS}",)),
        Chain(n.CLUSTER_IPS_CHECK, (f"{ip} daddr @{n.CLUSTER_IPS} goto {n.REJECT_CHAIN}",)),
        # TCP gets a reset: ICMP errors are rate-limited per peer, so past a burst clients would wait
        # for SYN retries instead of failing fast (kubernetes#90810). nft adds `meta l4proto tcp`.
        Chain(n.REJECT_CHAIN, ("reject with tcp reset", "reject")),
    ]


# ── one service port ─────────────────────────────────────────────────────────────────────────────

Elements = list[tuple[str, Element]]


def service_port(ctx: Ctx, p: ServicePortState) -> tuple[Elements, list[Chain], list[NamedSet]]:
    """The elements, chains and affinity sets one service port contributes."""
    cluster = n.service_object("svc", p) if p.uses_cluster_endpoints and p.cluster_endpoints else None
    local = n.service_object("local", p) if p.uses_local_endpoints and p.local_endpoints else None
    # The model decided where each kind of traffic goes (ServicePortState.internal / .external).
    internal, external = chain_for(p.internal, cluster, local), chain_for(p.external, cluster, local)
    rejects = p.internal.verdict is Verdict.REJECT
    ext = n.service_object("ext", p) if not rejects and p.externally_accessible else None
    chains: list[Chain] = []
    maps: list[NamedSet] = []
    chosen: Elements = []
    for name, eps in ((cluster, p.cluster_endpoints), (local, p.local_endpoints)):
        if name:
            chains.append(Chain(name, endpoint_rules(ctx, p, eps, internal == name, name)))
            if len(eps) > 1 and not p.affinity_timeout:
                shard = shard_of(ctx, p, name, eps)
                if shard:
                    chosen.extend((shard[0], Element(str(shard[1] + i), f"{ctx.text(e.ip)} . {e.port}"))
                                  for i, e in enumerate(eps))
                else:
                    maps.append(endpoint_map(ctx, name, eps))
    if ext:
        chains.append(Chain(ext, ext_rules(ctx, p, cluster or local, external)))
    elements = internal_elements(ctx, p, internal) + external_elements(ctx, p, ext, external) + chosen
    fw = firewall(ctx, p)
    if fw:
        chains.append(fw[0])
        elements.extend(fw[1])
    elements.extend(hairpin_elements(ctx, p, cluster, local))
    if p.health_check_node_port:
        elements.append((n.HEALTH_CHECK_NODEPORTS, Element(str(p.health_check_node_port))))
    return elements, chains, maps + affinity_sets(p, cluster, local)


def ip_key(p: ServicePortState, ip: IPAddress) -> str:
    return f"{ip} . {p.protocol.lower} . {p.port}"  # at most a few per service: no memo needed


def chain_for(traffic: Traffic, cluster: str | None, local: str | None) -> str | None:
    """The endpoint chain one kind of traffic goes to, None when it has a verdict instead."""
    if traffic.verdict is not None:
        return None
    return local if traffic.local else cluster


def no_endpoints_verdict(p: ServicePortState) -> str:
    """The verdict of traffic without endpoints: reject is not a verdict in nft, hence the goto."""
    return "drop" if p.internal.verdict is not Verdict.REJECT else f"goto {n.REJECT_CHAIN}"


def internal_elements(ctx: Ctx, p: ServicePortState, internal: str | None) -> Elements:
    key = ip_key(p, p.cluster_ip)
    out: Elements = [(n.CLUSTER_IPS, Element(str(p.cluster_ip)))]
    if internal:
        out.append((n.SERVICE_IPS, Element(key, f"goto {internal}")))
    else:
        out.append((n.NO_ENDPOINT_SERVICES, Element(key, no_endpoints_verdict(p))))
    return out


def external_elements(ctx: Ctx, p: ServicePortState, ext: str | None, external: str | None) -> Elements:
    out: Elements = []
    for ip in (*p.external_ips, *p.load_balancer_ips):
        if ext:
            out.append((n.SERVICE_IPS, Element(ip_key(p, ip), f"goto {ext}")))
        if not external:
            out.append((n.NO_ENDPOINT_SERVICES, Element(ip_key(p, ip), no_endpoints_verdict(p))))
    if p.node_port:
        key = f"{p.protocol.lower} . {p.node_port}"
        if ext:
            out.append((n.SERVICE_NODEPORTS, Element(key, f"goto {ext}")))
        if not external:
            out.append((n.NO_ENDPOINT_NODEPORTS, Element(key, no_endpoints_verdict(p))))
    return out


def ext_rules(ctx: Ctx, p: ServicePortState, short_circuit: str | None, external: str | None) -> tuple[str, ...]:
    """kube-proxy's KUBE-EXT: masquerade for Cluster; for Local keep the client's address, except for
    pods and the node itself, which go to the cluster endpoints as if they came back in from an LB."""
    mark = f"jump {n.MARK_FOR_MASQUERADE}"
    if not p.external_policy_local:
        return (mark, f"goto {external}") if external else (mark,)
    rules: list[str] = []
    if short_circuit and ctx.local:
        rules.append(f"{ctx.local} goto {short_circuit}")
    rules.append(f"fib saddr type local {mark}")
    if short_circuit:
        rules.append(f"fib saddr type local goto {short_circuit}")
    if external:
        rules.append(f"goto {external}")
    return tuple(rules)


def masquerade_rule(ctx: Ctx, p: ServicePortState) -> str | None:
    """Off-cluster traffic to the clusterIP is masqueraded (it may be bridged to another node)."""
    match = f"{ctx.ip} daddr {p.cluster_ip} th dport {p.port}"
    if ctx.config.masquerade_all:
        return f"{match} jump {n.MARK_FOR_MASQUERADE}"
    if ctx.not_local:
        return f"{match} {ctx.not_local} jump {n.MARK_FOR_MASQUERADE}"
    return None


def endpoint_rules(ctx: Ctx, p: ServicePortState, eps: Sequence[EndpointAddr], internal: bool,
                   chain: str) -> tuple[str, ...]:
    rules: list[str] = []
    masq = masquerade_rule(ctx, p) if internal else None
    if masq:
        rules.append(masq)
    if p.affinity_timeout:
        rules.extend(affinity_rules(ctx, p, eps))
        return tuple(rules)
    dnat = f"meta l4proto {p.protocol.lower} dnat {ctx.ip} to"
    if len(eps) == 1:
        rules.append(f"{dnat} {endpoint(ctx, eps[0])}")
        return tuple(rules)
    shard = shard_of(ctx, p, chain, eps)
    if shard:
        offset = f" offset {shard[1]}" if shard[1] else ""
        rules.append(f"{dnat} numgen random mod {len(eps)}{offset} map @{shard[0]}")
    else:
        rules.append(f"{dnat} numgen random mod {len(eps)} map @{chain}")
    return tuple(rules)


def endpoint_map(ctx: Ctx, chain: str, eps: Sequence[EndpointAddr]) -> NamedSet:
    """The endpoints of an endpoint chain with more than STRIDE of them, by index: its own map.
    Named like its chain (sets and chains are separate namespaces). Key type `integer` is declared
    `typeof numgen random mod 1` (nft has no plain integer type for a map key): see `declared`."""
    elements = frozenset(Element(str(i), f"{ctx.text(e.ip)} . {e.port}") for i, e in enumerate(eps))
    return declared(NamedSet(chain, ("integer",), f"{ctx.addr_type} . inet_service", elements=elements))


def declared(s: NamedSet) -> NamedSet:
    """An endpoint map with its typeof declaration: the port's protocol is the one its dnat rule
    matches (`meta l4proto tcp dnat … map @m` is refused against `th dport` or another protocol),
    read from the map's name (`endpoints-<proto>-<shard>`, `svc-…/<ns>/<svc>/<proto>/<port>`).
    Also for endpoint maps read from nft's JSON (keep.py), which does not show the declaration.
    Any other set is returned as it is."""
    if s.typeof is not None or s.key_type != ("integer",) or s.value_type not in TYPEOF_ADDRESS:
        return s
    split = n.split(s.name)
    proto = split[1].rsplit("/", 1)[1] if split else n.shard_protocol(s.name) or "th"
    return replace(s, typeof=address_port_typeof(s.value_type, proto))


def affinity_rules(ctx: Ctx, p: ServicePortState, eps: Sequence[EndpointAddr]) -> list[str]:
    """Sticky clients first (and refresh their entry), then a random cascade that records the choice."""
    saddr = f"{ctx.ip} saddr"
    dnat = f"meta l4proto {p.protocol.lower} dnat {ctx.ip} to"
    sticky, fresh = [], []
    for i, ep in enumerate(eps):
        aff = n.affinity_set(p, ep)
        record = f"update @{aff} {{ {saddr} }} {dnat} {endpoint(ctx, ep)}"
        sticky.append(f"{saddr} @{aff} {record}")
        left = len(eps) - i
        fresh.append(f"numgen random mod {left} 0 {record}" if left > 1 else record)
    return sticky + fresh


def affinity_sets(p: ServicePortState, cluster: str | None, local: str | None) -> list[NamedSet]:
    if not p.affinity_timeout:
        return []
    eps = set(p.cluster_endpoints if cluster else ()) | set(p.local_endpoints if local else ())
    addr = "ipv4_addr" if p.family is IPFamily.IPV4 else "ipv6_addr"
    return [NamedSet(n.affinity_set(p, ep), (addr,), flags=("dynamic", "timeout"),
                     timeout=p.affinity_timeout, size=AFFINITY_SET_SIZE) for ep in sorted(eps)]


def hairpin_elements(ctx: Ctx, p: ServicePortState, cluster: str | None, local: str | None) -> Elements:
    eps = (*(p.cluster_endpoints if cluster else ()), *(p.local_endpoints if local else ()))
    texts = {ctx.text(e.ip) for e in eps}
    return [(n.HAIRPIN, Element(f"{ip} . {ip}")) for ip in texts]


def firewall(ctx: Ctx, p: ServicePortState) -> tuple[Chain, Elements] | None:
    """loadBalancerSourceRanges: traffic to a load-balancer IP from elsewhere is dropped before DNAT.
    As kube-proxy, when a range holds one of this node's addresses the LB IPs may be sources too."""
    if not (p.source_ranges and p.load_balancer_ips):
        return None
    name = n.service_object("fw", p)
    allowed: list[IPNetwork] = list(p.source_ranges)
    if any(ip in r for ip in ctx.node_ips for r in p.source_ranges if ip.version == r.version):
        allowed.extend(ipaddress.ip_network(ip) for ip in p.load_balancer_ips)
    rule = f"{ctx.ip} saddr != {anonymous_set(prefixes(allowed))} drop"
    elements = [(n.FIREWALL_IPS, Element(ip_key(p, ip), f"goto {name}")) for ip in p.load_balancer_ips]
    return Chain(name, (rule,)), elements
