"""The cluster's address plan: nodes, pods, namespaces and addresses, as frozen values. Pure.

```
  nkc<id>-net  (the node network's switch, and "outside": 192.0.2.1 on br0)
    br0 ── n1 ─ eth0 node-1 192.0.2.11   cbr0 10.244.1.1/24 ── web-1 10.244.1.10, coredns-1 ...
        ── n2 ─ eth0 node-2 192.0.2.12   cbr0 10.244.2.1/24 ── web-2 10.244.2.10 ...
        ── nN ─ eth0 node-N 192.0.2.(10+N)
```

Every node routes each other node's pod CIDR via that node's IP (host-gw, as a simple CNI does) and
has a default route via 192.0.2.1, which forwards nothing (a ClusterIP without rules goes nowhere,
as on a real node). The bridge lives in the cluster's own `net` namespace, never in the machine's.
A pod's `slot` is the last octet of its IP; the node side of its veth is `veth<slot>`.

IP families (`ip_family`: ipv4, ipv6 or dual, IPv4 primary): every node and pod has an address of
each family, and the cluster uses those of its families. IPv6 follows the IPv4 plan with the same
numbers written into the last group: node-N 2001:db8:2::<10+N> (outside ::1), its pods
fd00:244:0:<N>::<slot> (bridge ::1), services fd00:96::/112, the cluster DNS fd00:96::a.

Namespace names say whose they are: `nkc<id>-<role>` for clusters recorded in the machine's state
directory (/run/netkit-lab), `nkc<tag>.<id>-<role>` for clusters recorded in another one
(NETKIT_LAB_STATE_DIR), where `tag` is 6 hex digits of a hash of that directory's path. So
`down --all` finds a cluster's namespaces even when its record is gone, and never those of a cluster
recorded elsewhere.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from typing import TypeVar

from netkit.lab.plan import DEFAULT_PORTS

NETNS_PREFIX = "nkc"  # the machine's state directory; others add a tag (netns_prefix)
NODE_NET = IPv4Network("192.0.2.0/24")
OUTSIDE_IP = IPv4Address("192.0.2.1")
POD_CIDR = IPv4Network("10.244.0.0/16")
SERVICE_CIDR = IPv4Network("10.96.0.0/16")
DNS_SERVICE_IP = IPv4Address("10.96.0.10")
NODE_NET6 = IPv6Network("2001:db8:2::/64")
OUTSIDE_IP6 = IPv6Address("2001:db8:2::1")
POD_CIDR6 = IPv6Network("fd00:244::/48")
SERVICE_CIDR6 = IPv6Network("fd00:96::/112")
DNS_SERVICE_IP6 = IPv6Address("fd00:96::a")
IP_FAMILIES = ("ipv4", "ipv6", "dual")  # --ip-family
T = TypeVar("T")
IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network
CLUSTER_DOMAIN = "cluster.local"
API_PORT = 6443  # inside every node and DNS pod: 127.0.0.1:6443 is the API server
MAX_NODES = 200
FIRST_SLOT, LAST_SLOT = 10, 254
DNS_SLOTS = (2, 9)
APP_DEPLOY, DNS_DEPLOY = "web", "coredns"
DNS_NAMESPACE = "kube-system"
PORTS: tuple[int, ...] = DEFAULT_PORTS
# agnhost netexec in every pod, on e2enetwork.EndpointHTTPPort and EndpointUDPPort
NETEXEC_HTTP_PORT, NETEXEC_UDP_PORT = 8083, 8081


class Kind:
    """What runs in a pod: the lab's answering servers, or the cluster DNS."""

    ECHO = "echo"
    DNS = "dns"


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    index: int
    netns: str

    @property
    def ip(self) -> IPv4Address:
        return NODE_NET.network_address + 10 + self.index

    @property
    def pod_cidr(self) -> IPv4Network:
        return IPv4Network(f"10.244.{self.index}.0/24")

    @property
    def bridge_ip(self) -> IPv4Address:
        return self.pod_cidr.network_address + 1

    @property
    def ip6(self) -> IPv6Address:
        return IPv6Address(f"2001:db8:2::{10 + self.index}")

    @property
    def pod_cidr6(self) -> IPv6Network:
        return IPv6Network(f"fd00:244:0:{self.index}::/64")

    @property
    def bridge_ip6(self) -> IPv6Address:
        return self.pod_cidr6.network_address + 1

    @property
    def uplink(self) -> str:
        """The `net` namespace's end of this node's eth0."""
        return f"n{self.index}"


@dataclass(frozen=True, slots=True)
class Pod:
    name: str
    namespace: str
    deploy: str
    node: str
    node_index: int
    slot: int
    netns: str
    kind: str = Kind.ECHO
    hostname: str = ""  # the pod's spec.hostname and spec.subdomain, as a pod template sets them
    subdomain: str = ""
    unready: bool = False  # its readiness probe never passes: serving, never Ready

    @property
    def ip(self) -> IPv4Address:
        return IPv4Address(f"10.244.{self.node_index}.{self.slot}")

    @property
    def ip6(self) -> IPv6Address:
        return IPv6Address(f"fd00:244:0:{self.node_index}::{self.slot}")

    @property
    def veth(self) -> str:
        return f"veth{self.slot}"

    @property
    def labels(self) -> dict[str, str]:
        if self.kind == Kind.DNS:
            return {"k8s-app": "kube-dns"}
        return {"app": self.deploy}


@dataclass(frozen=True, slots=True)
class Cluster:
    """One cluster: everything that follows from its id, plus the pods it has now."""

    cluster_id: str
    mode: str
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...] = ()
    serials: tuple[tuple[str, int], ...] = ()  # (deploy, last serial used)
    cordoned: tuple[str, ...] = field(default=())
    prefix: str = NETNS_PREFIX  # of its namespaces' names (netns_prefix of its state directory)
    ip_family: str = "ipv4"  # ipv4, ipv6 or dual

    @property
    def v4(self) -> bool:
        return self.ip_family != "ipv6"

    @property
    def v6(self) -> bool:
        return self.ip_family != "ipv4"

    def pick(self, v4: T, v6: T) -> tuple[T, ...]:
        """The cluster's values of a pair, primary (IPv4 when it has both) first."""
        return (*((v4,) if self.v4 else ()), *((v6,) if self.v6 else ()))

    def node_ips(self, node: Node) -> tuple[IPAddress, ...]:
        return self.pick(node.ip, node.ip6)

    def pod_ips(self, pod: Pod) -> tuple[IPAddress, ...]:
        return self.pick(pod.ip, pod.ip6)

    def pod_cidrs(self, node: Node) -> tuple[IPNetwork, ...]:
        return self.pick(node.pod_cidr, node.pod_cidr6)

    @property
    def families(self) -> tuple[str, ...]:
        """Kubernetes' names of its families, primary first."""
        return self.pick("IPv4", "IPv6")

    @property
    def cluster_cidrs(self) -> tuple[IPNetwork, ...]:
        return self.pick(POD_CIDR, POD_CIDR6)

    @property
    def service_cidrs(self) -> tuple[IPNetwork, ...]:
        return self.pick(SERVICE_CIDR, SERVICE_CIDR6)

    @property
    def dns_ips(self) -> tuple[IPAddress, ...]:
        return self.pick(DNS_SERVICE_IP, DNS_SERVICE_IP6)

    @property
    def outside_ips(self) -> tuple[IPAddress, ...]:
        return self.pick(OUTSIDE_IP, OUTSIDE_IP6)

    @property
    def net_netns(self) -> str:
        return netns_name(self.prefix, self.cluster_id, "net")

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.net_netns, *(n.netns for n in self.nodes), *(p.netns for p in self.pods))

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def pod(self, name: str) -> Pod:
        for p in self.pods:
            if p.name == name:
                return p
        raise KeyError(name)

    def pods_of(self, deploy: str) -> tuple[Pod, ...]:
        return tuple(p for p in self.pods if p.deploy == deploy)

    def pods_on(self, node: str) -> tuple[Pod, ...]:
        return tuple(p for p in self.pods if p.node == node)

    def serial(self, deploy: str) -> int:
        return dict(self.serials).get(deploy, 0)

    @property
    def deploys(self) -> tuple[str, ...]:
        return tuple(sorted({p.deploy for p in self.pods}))


def valid_deploy_name(name: str) -> bool:
    """A DNS label short enough that `<name>-<serial>` is one too, and not the DNS deployment."""
    return bool(re.fullmatch(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?", name)) and name != DNS_DEPLOY


def netns_prefix(state_dir: str, default_dir: str) -> str:
    """`nkc` for clusters recorded in `default_dir`, `nkc<tag>.` for those recorded in `state_dir`
    (an absolute path): the tag is the first 6 hex digits of the path's SHA-256."""
    if state_dir == default_dir:
        return NETNS_PREFIX
    return f"{NETNS_PREFIX}{hashlib.sha256(state_dir.encode()).hexdigest()[:6]}."


def netns_pattern(prefix: str, cluster_id: str = "") -> re.Pattern[str]:
    """The names of cluster `cluster_id`'s namespaces (of every cluster: ""), under `prefix`."""
    return re.compile(f"^{re.escape(prefix)}{re.escape(cluster_id) if cluster_id else '[0-9a-f]{6}'}-")


def netns_name(prefix: str, cluster_id: str, role: str) -> str:
    return f"{prefix}{cluster_id}-{role}"


def make_nodes(prefix: str, cluster_id: str, count: int) -> tuple[Node, ...]:
    if not 1 <= count <= MAX_NODES:
        raise ValueError(f"--nodes must be 1-{MAX_NODES}, not {count}")
    return tuple(Node(f"node-{i}", i, netns_name(prefix, cluster_id, f"node-{i}")) for i in range(1, count + 1))


def initial(cluster_id: str, nodes: int, pods_per_node: int, mode: str, prefix: str = NETNS_PREFIX,
            dns_pods: int | None = None, ip_family: str = "ipv4") -> Cluster:
    """A new cluster: `pods_per_node` web pods on every node and `dns_pods` DNS pods (default two, as
    kubeadm's CoreDNS Deployment; one with one node)."""
    if ip_family not in IP_FAMILIES:
        raise ValueError(f"--ip-family must be one of {', '.join(IP_FAMILIES)}, not {ip_family!r}")
    if pods_per_node < 0:
        raise ValueError(f"--pods-per-node must be 0 or more, not {pods_per_node}")
    if dns_pods is not None and dns_pods < 1:
        raise ValueError(f"--dns-pods must be 1 or more, not {dns_pods}")
    cluster = Cluster(cluster_id, mode, make_nodes(prefix, cluster_id, nodes), prefix=prefix, ip_family=ip_family)
    cluster = scale(cluster, DNS_DEPLOY, min(2, nodes) if dns_pods is None else dns_pods)[0]
    return scale(cluster, APP_DEPLOY, pods_per_node * nodes)[0]


def schedulable(cluster: Cluster) -> tuple[Node, ...]:
    return tuple(n for n in cluster.nodes if n.name not in cluster.cordoned)


def free_slot(cluster: Cluster, node: Node, kind: str = Kind.ECHO) -> int:
    """DNS pods take .2-.9 of the node's pod CIDR, the others .10 up."""
    used = {p.slot for p in cluster.pods_on(node.name)}
    first, last = (DNS_SLOTS[0], FIRST_SLOT - 1) if kind == Kind.DNS else (FIRST_SLOT, LAST_SLOT)
    for slot in range(first, last + 1):
        if slot not in used:
            return slot
    raise ValueError(f"{node.name} has no room for another pod")


def place(cluster: Cluster, deploy: str) -> Node:
    """The schedulable node with the fewest pods of `deploy` (then the first), so a deployment's
    pods go round the nodes in order: web-1 on node-1, web-2 on node-2, ..."""
    candidates = schedulable(cluster)
    if not candidates:
        raise ValueError("every node is drained: nowhere to put a pod")
    return min(candidates, key=lambda n: (sum(1 for p in cluster.pods_of(deploy) if p.node == n.name), n.index))


def new_pod(cluster: Cluster, deploy: str, hostname: str = "", subdomain: str = "", unready: bool = False
            ) -> tuple[Cluster, Pod]:
    node = place(cluster, deploy)
    serial = cluster.serial(deploy) + 1
    name = f"{deploy}-{serial}"
    kind = Kind.DNS if deploy == DNS_DEPLOY else Kind.ECHO
    namespace = DNS_NAMESPACE if kind == Kind.DNS else "default"
    pod = Pod(name, namespace, deploy, node.name, node.index, free_slot(cluster, node, kind),
              netns_name(cluster.prefix, cluster.cluster_id, name), kind, hostname, subdomain, unready)
    serials = tuple(sorted({**dict(cluster.serials), deploy: serial}.items()))
    return replace(cluster, pods=(*cluster.pods, pod), serials=serials), pod


def scale(cluster: Cluster, deploy: str, replicas: int, hostname: str = "", subdomain: str = "",
          unready: bool = False) -> tuple[Cluster, tuple[Pod, ...], tuple[Pod, ...]]:
    """(cluster with `replicas` pods of `deploy`, pods added, pods to remove). Removes the newest
    pods from the most loaded nodes first, as a ReplicaSet spreads its deletions. New pods get
    `hostname` and `subdomain` (a pod template's spec.hostname and spec.subdomain); `unready`: their
    readiness probe never passes."""
    if replicas < 0:
        raise ValueError(f"replicas must be 0 or more, not {replicas}")
    added: list[Pod] = []
    while len(cluster.pods_of(deploy)) < replicas:
        cluster, pod = new_pod(cluster, deploy, hostname, subdomain, unready)
        added.append(pod)
    current = list(cluster.pods_of(deploy))
    doomed: list[Pod] = []
    while len(current) > replicas:
        load = {n.name: sum(1 for p in current if p.node == n.name) for n in cluster.nodes}
        victim = max(current, key=lambda p: (p.node in cluster.cordoned, load[p.node], p.slot))
        current.remove(victim)
        doomed.append(victim)
    return cluster, tuple(added), tuple(doomed)


def without(cluster: Cluster, pods: Iterable[Pod]) -> Cluster:
    gone = {p.name for p in pods}
    return replace(cluster, pods=tuple(p for p in cluster.pods if p.name not in gone))


def cordon(cluster: Cluster, node: str) -> Cluster:
    return replace(cluster, cordoned=tuple(sorted({*cluster.cordoned, node})))


def drain(cluster: Cluster, node: str) -> tuple[Cluster, tuple[Pod, ...], tuple[Pod, ...]]:
    """Cordon `node` and move its pods: (cluster, replacements to add, pods to remove)."""
    cluster = cordon(cluster, node)
    evicted = cluster.pods_on(node)
    added: list[Pod] = []
    for old in evicted:
        cluster, pod = new_pod(cluster, old.deploy, old.hostname, old.subdomain, old.unready)
        added.append(pod)
    return cluster, tuple(added), evicted


# --- records -------------------------------------------------------------------------------------

def to_json(cluster: Cluster) -> dict[str, object]:
    return {
        "cluster_id": cluster.cluster_id, "mode": cluster.mode, "nodes": len(cluster.nodes),
        "pods": [{"name": p.name, "namespace": p.namespace, "deploy": p.deploy, "node": p.node,
                  "slot": p.slot, "kind": p.kind, **({"hostname": p.hostname} if p.hostname else {}),
                  **({"subdomain": p.subdomain} if p.subdomain else {}),
                  **({"unready": True} if p.unready else {})} for p in cluster.pods],
        "serials": dict(cluster.serials), "cordoned": list(cluster.cordoned), "netns_prefix": cluster.prefix,
        "ip_family": cluster.ip_family,
    }


def from_json(data: dict[str, object]) -> Cluster:
    cid, mode = str(data["cluster_id"]), str(data["mode"])
    prefix = str(data.get("netns_prefix", NETNS_PREFIX))
    nodes = make_nodes(prefix, cid, int(str(data["nodes"])))
    index = {n.name: n.index for n in nodes}
    pods = tuple(Pod(str(p["name"]), str(p["namespace"]), str(p["deploy"]), str(p["node"]),
                     index[str(p["node"])], int(str(p["slot"])), netns_name(prefix, cid, str(p["name"])),
                     str(p["kind"]), str(p.get("hostname", "")), str(p.get("subdomain", "")),
                     bool(p.get("unready", False)))
                 for p in _dicts(data.get("pods")))
    serials = data.get("serials") or {}
    assert isinstance(serials, dict)
    cordoned = data.get("cordoned") or []
    assert isinstance(cordoned, list)
    return Cluster(cid, mode, nodes, pods, tuple(sorted((str(k), int(v)) for k, v in serials.items())),
                   tuple(str(c) for c in cordoned), prefix, str(data.get("ip_family", "ipv4")))


def _dicts(value: object) -> Sequence[dict[str, object]]:
    assert isinstance(value, list)
    return value
