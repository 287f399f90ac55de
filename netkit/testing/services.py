"""What kube-apiserver's Service registry does to a Service on create and update. Pure but for the
allocator's own state (a test double: never a product path).

In the order kube-apiserver applies them:

1. Defaults (pkg/apis/core/v1/defaults.go, SetDefaults_Service): `type` ClusterIP, `sessionAffinity`
   None (ClientIP gets `sessionAffinityConfig.clientIP.timeoutSeconds` 10800), each port's `protocol`
   TCP and `targetPort` = `port`, `externalTrafficPolicy` Cluster for a Service reachable from outside
   (NodePort, LoadBalancer, or externalIPs), `internalTrafficPolicy` Cluster (all but ExternalName),
   `allocateLoadBalancerNodePorts` true for LoadBalancer.
2. On update, the fields a change of type or policy makes meaningless, when the user left them as
   they were (pkg/registry/core/service/strategy.go, dropTypeDependentFields): `clusterIP(s)`,
   `ipFamilies`, `ipFamilyPolicy` on a change to ExternalName; node ports on a change to a type without
   them; `healthCheckNodePort` when it is no longer needed (not LoadBalancer, or eTP no longer Local);
   `allocateLoadBalancerNodePorts` leaving LoadBalancer; `externalTrafficPolicy` when no longer reachable
   from outside. Values the update omits but still needs are kept from the old object
   (storage.go, patchAllocatedValues).
3. Allocation (storage.go, the IP and port allocators): a missing clusterIP, node port or health-check
   node port is allocated; a requested one already in use is refused as kube-apiserver words it; the
   values the old object held and the new one does not are released, so they can be allocated again.
   IP family fields follow (initIPFamilyFields): `clusterIPs` = [clusterIP], `ipFamilies` from the
   address, `ipFamilyPolicy` SingleStack; a headless Service gets `clusterIPs: [None]`.

With service ranges (`Allocator(cidrs=...)`, one per family, primary first: the lab cluster's), the IP
family fields are settled as kube-apiserver settles them (`netkit.testing.ipfamilies`) and every
family in `ipFamilies` gets an address from its range; a requested address outside it is refused.
Without (the default, for tests that store any address they like) the fields follow the first
address and nothing is checked. Not done: random allocation (addresses and ports are handed out in
order, skipping those in use, so tests are deterministic).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, IPv6Network, ip_address
from typing import Any

from netkit.testing import ipfamilies

JSON = dict[str, Any]
AFFINITY_TIMEOUT = 10800  # v1.DefaultClientIPServiceAffinitySeconds
NODE_PORTS = range(30000, 32768)  # --service-node-port-range's default


def _get(obj: JSON | None, *path: str) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


# --- 1. defaults ----------------------------------------------------------------------------------


def externally_accessible(spec: JSON) -> bool:
    kind = spec.get("type")
    return kind in ("NodePort", "LoadBalancer") or (kind == "ClusterIP" and bool(spec.get("externalIPs")))


def apply_defaults(svc: JSON) -> None:
    spec = svc.setdefault("spec", {})
    spec.setdefault("sessionAffinity", "None")
    if spec["sessionAffinity"] == "None":
        spec.pop("sessionAffinityConfig", None)
    elif _get(spec, "sessionAffinityConfig", "clientIP", "timeoutSeconds") is None:
        spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": AFFINITY_TIMEOUT}}
    spec["type"] = spec.get("type") or "ClusterIP"
    for port in spec.get("ports") or []:
        port["protocol"] = port.get("protocol") or "TCP"
        if port.get("targetPort") in (None, 0, ""):
            port["targetPort"] = port.get("port")
    if externally_accessible(spec) and not spec.get("externalTrafficPolicy"):
        spec["externalTrafficPolicy"] = "Cluster"
    if spec["type"] != "ExternalName" and spec.get("internalTrafficPolicy") is None:
        spec["internalTrafficPolicy"] = "Cluster"
    if spec["type"] == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is None:
        spec["allocateLoadBalancerNodePorts"] = True


# --- 2. what a type change makes meaningless ------------------------------------------------------


def needs_cluster_ip(spec: JSON) -> bool:
    return spec.get("type") != "ExternalName"


def needs_node_ports(spec: JSON) -> bool:
    return spec.get("type") == "NodePort" or (
        spec.get("type") == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is not False)


def needs_health_check_port(spec: JSON) -> bool:
    return spec.get("type") == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local"


def _node_ports(spec: JSON) -> list[Any]:
    return [p.get("nodePort") for p in spec.get("ports") or []]


def drop_type_dependent_fields(new: JSON, old: JSON) -> None:
    ns, os_ = new["spec"], old.get("spec") or {}

    def same(key: str) -> bool:
        return bool(ns.get(key) == os_.get(key))

    if needs_cluster_ip(os_) and not needs_cluster_ip(ns):
        if same("clusterIP") and same("clusterIPs"):
            ns.pop("clusterIP", None), ns.pop("clusterIPs", None)
        if same("ipFamilies"):
            ns.pop("ipFamilies", None)
        if same("ipFamilyPolicy"):
            ns.pop("ipFamilyPolicy", None)
    if needs_node_ports(os_) and not needs_node_ports(ns) and _node_ports(ns) == _node_ports(os_):
        for port in ns.get("ports") or []:
            port.pop("nodePort", None)
    if needs_health_check_port(os_) and not needs_health_check_port(ns) and same("healthCheckNodePort"):
        ns.pop("healthCheckNodePort", None)
    if os_.get("type") == "LoadBalancer" and ns.get("type") != "LoadBalancer" \
            and same("allocateLoadBalancerNodePorts"):
        ns.pop("allocateLoadBalancerNodePorts", None)
    if externally_accessible(os_) and not externally_accessible(ns) and same("externalTrafficPolicy"):
        ns.pop("externalTrafficPolicy", None)


def keep_allocated_values(new: JSON, old: JSON) -> None:
    """An update that omits an allocated value the Service still needs keeps the old one."""
    ns, os_ = new["spec"], old.get("spec") or {}
    if needs_cluster_ip(ns) and not ns.get("clusterIP") and not ns.get("clusterIPs") and os_.get("clusterIP"):
        ns["clusterIP"], ns["clusterIPs"] = os_["clusterIP"], list(os_.get("clusterIPs") or [os_["clusterIP"]])
    if needs_node_ports(ns):
        old_ports = {(p.get("port"), p.get("protocol", "TCP")): p.get("nodePort") for p in os_.get("ports") or []}
        for port in ns.get("ports") or []:
            if not port.get("nodePort") and old_ports.get((port.get("port"), port.get("protocol", "TCP"))):
                port["nodePort"] = old_ports[(port.get("port"), port.get("protocol", "TCP"))]
    if needs_health_check_port(ns) and not ns.get("healthCheckNodePort") and os_.get("healthCheckNodePort"):
        ns["healthCheckNodePort"] = os_["healthCheckNodePort"]


# --- 3. allocation ---------------------------------------------------------------------------------


@dataclass
class Allocator:
    """The cluster's clusterIPs and node ports in use, keyed by the Service holding them."""

    ip_base: IPv4Address = IPv4Address("10.96.0.0")
    first_ip: int = 100  # dynamic clusterIPs are handed out from <base>+100 up
    ips: dict[str, str] = field(default_factory=dict)  # address → "namespace/name"
    ports: dict[int, str] = field(default_factory=dict)  # node port → "namespace/name"
    _next_ip: int = 0
    _next_port: int = NODE_PORTS.start
    cidrs: tuple[IPv4Network | IPv6Network, ...] = ()  # the service ranges, primary first; () checks nothing
    _next_by_family: dict[str, int] = field(default_factory=dict)

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(ipfamilies.IPV6 if c.version == 6 else ipfamilies.IPV4 for c in self.cidrs)

    def allocate(self, svc: JSON, old: JSON | None) -> None:
        """Allocate what `svc` needs and release what `old` held that `svc` does not: all or nothing
        (a refused request leaves the allocator as it was)."""
        owner = f"{svc['metadata'].get('namespace', '')}/{svc['metadata']['name']}"
        trial = Allocator(self.ip_base, self.first_ip, dict(self.ips), dict(self.ports), self._next_ip,
                          self._next_port, self.cidrs, dict(self._next_by_family))
        trial.release(owner)
        trial._take(svc, owner)
        self.ips, self.ports, self._next_ip, self._next_port = trial.ips, trial.ports, trial._next_ip, trial._next_port
        self._next_by_family = trial._next_by_family

    def release(self, owner: str) -> None:
        self.ips = {ip: o for ip, o in self.ips.items() if o != owner}
        self.ports = {p: o for p, o in self.ports.items() if o != owner}

    def _take(self, svc: JSON, owner: str) -> None:
        spec, name = svc["spec"], svc["metadata"]["name"]
        if needs_cluster_ip(spec) and self.cidrs:
            self._take_ips(spec, owner, name)
        elif needs_cluster_ip(spec):
            self._take_ip(spec, owner, name)
            set_ip_families(spec)
        if needs_node_ports(spec):
            for n, port in enumerate(spec.get("ports") or []):
                port["nodePort"] = self._take_port(port.get("nodePort"), owner, name, f"spec.ports[{n}].nodePort")
        if needs_health_check_port(spec):
            spec["healthCheckNodePort"] = self._take_port(spec.get("healthCheckNodePort"), owner, name,
                                                          "spec.healthCheckNodePort")

    def _take_ip(self, spec: JSON, owner: str, name: str) -> None:
        ip = spec.get("clusterIP") or (spec.get("clusterIPs") or [""])[0]
        if ip == "None":
            return
        if not ip:
            while True:
                ip = str(self.ip_base + self.first_ip + self._next_ip)
                self._next_ip += 1
                if ip not in self.ips:
                    break
        elif self.ips.get(ip, owner) != owner:
            raise invalid(name, "spec.clusterIPs", f'[]string{{"{ip}"}}',
                          f"failed to allocate IP {ip}: provided IP is already allocated")
        self.ips[ip] = owner
        spec["clusterIP"] = ip

    def _take_ips(self, spec: JSON, owner: str, name: str) -> None:
        """One address per family in `ipFamilies` (settled already): the requested one, else the next free."""
        ips = list(spec.get("clusterIPs") or [])
        if ips[:1] == ["None"]:
            return
        for i, family in enumerate(spec["ipFamilies"]):
            if i >= len(ips):
                ips.append("")
            cidr = self.cidrs[self.families.index(family)]
            if not ips[i]:
                ips[i] = self._next_free(cidr, family)
            elif self.ips.get(ips[i], owner) != owner:
                raise invalid(name, "spec.clusterIPs", ipfamilies.go_list(ips),
                              f"failed to allocate IP {ips[i]}: provided IP is already allocated")
            elif ip_address(ips[i]) not in cidr:
                raise invalid(name, "spec.clusterIPs", ipfamilies.go_list(ips),
                              f"failed to allocate IP {ips[i]}: the provided IP ({ips[i]}) is not in the valid "
                              f"range. The range of valid IPs is {cidr}")
            self.ips[ips[i]] = owner
        spec["clusterIPs"], spec["clusterIP"] = ips, ips[0]

    def _next_free(self, cidr: IPv4Network | IPv6Network, family: str) -> str:
        while True:
            n = self._next_by_family.get(family, 0)
            self._next_by_family[family] = n + 1
            ip = str(cidr.network_address + self.first_ip + n)
            if ip not in self.ips:
                return ip

    def _take_port(self, wanted: Any, owner: str, name: str, path: str) -> int:
        if wanted:
            if self.ports.get(int(wanted), owner) != owner:
                raise invalid(name, path, str(wanted), "provided port is already allocated")
            port = int(wanted)
        else:
            while self._next_port in self.ports:
                self._next_port += 1
            port = self._next_port
        self.ports[port] = owner
        return port


def set_ip_families(spec: JSON) -> None:
    ip = spec["clusterIP"] if spec.get("clusterIP") else "None"
    spec["clusterIPs"] = spec.get("clusterIPs") or [ip]
    if spec["clusterIPs"][0] != ip:
        spec["clusterIPs"] = [ip, *spec["clusterIPs"][1:]]
    if ip == "None":
        spec["clusterIP"] = "None"
        spec.setdefault("ipFamilies", ["IPv4"])
    else:
        spec.setdefault("ipFamilies", ["IPv6" if ":" in ip else "IPv4"])  # not validated: tests store bad IPs
    spec.setdefault("ipFamilyPolicy", "SingleStack")


class Invalid(Exception):
    """A Service the registry refuses (the store answers 422 with this message): one or more
    (field path, detail) problems, joined as kube-apiserver joins them."""

    def __init__(self, name: str, path: str, detail: str, more: tuple[ipfamilies.Problem, ...] = ()) -> None:
        self.problems = ((path, detail), *more)
        text = ", ".join(f"{p}: {d}" for p, d in self.problems)
        self.message = f'Service "{name}" is invalid: ' + (f"[{text}]" if more else text)
        super().__init__(self.message)
        self.name, self.path, self.detail = name, path, detail


def invalid(name: str, path: str, value: str, why: str) -> Invalid:
    """kube-apiserver's words: `Service "web" is invalid: <path>: Invalid value: <value>: <why>`."""
    return Invalid(name, path, f"Invalid value: {value}: {why}")


def admit(svc: JSON, old: JSON | None, allocator: Allocator) -> JSON:
    """The Service as kube-apiserver's registry would store it (a new object)."""
    svc = copy.deepcopy(svc)
    apply_defaults(svc)
    if old is not None:
        drop_type_dependent_fields(svc, old)
        keep_allocated_values(svc, old)
    if allocator.cidrs and needs_cluster_ip(svc["spec"]):
        settle_families(svc, old, allocator.families)
    allocator.allocate(svc, old)
    return svc


def settle_families(svc: JSON, old: JSON | None, families: tuple[str, ...]) -> None:
    spec = svc["spec"]
    old_spec = old.get("spec") if old is not None and needs_cluster_ip(old.get("spec") or {}) else None
    ipfamilies.normalize(spec, old_spec)
    problems = ipfamilies.check_change(spec, old_spec) if old_spec is not None else []
    problems = problems or ipfamilies.settle(spec, old_spec, families)
    if problems:
        raise Invalid(svc["metadata"]["name"], *problems[0], more=tuple(problems[1:]))
