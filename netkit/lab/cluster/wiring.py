"""The cluster as sysctls and `ip -batch` lines, per namespace and phase. Pure.

Phases, as in the lab (`netkit.lab.wiring`): sysctls before interfaces exist; links (every veth is
created by the namespace that keeps one end, the other end placed straight into its peer namespace);
addresses and link up; routes once every link is up. A pod added later (`scale`, `drain`) goes
through the same three phases on its own (`pod_*` functions).

IPv6 addresses are added `nodad`: with duplicate address detection each would be held back for a
second or two and the first packets to it would fail.
"""

from __future__ import annotations

from collections.abc import Iterable

from netkit.lab.cluster.plan import NODE_NET, NODE_NET6, Cluster, IPAddress, IPNetwork, Node, Pod
from netkit.lab.wiring import COMMON_SYSCTLS, NODE_SYSCTLS

Batches = dict[str, list[str]]


def sysctls(cluster: Cluster, pods: Iterable[Pod] | None = None) -> dict[str, dict[str, str]]:
    """Nodes forward and see bridged traffic in netfilter; the switch namespace forwards nothing."""
    if pods is not None:
        return {p.netns: COMMON_SYSCTLS for p in pods}
    values = {cluster.net_netns: COMMON_SYSCTLS, **{n.netns: NODE_SYSCTLS for n in cluster.nodes}}
    values.update({p.netns: COMMON_SYSCTLS for p in cluster.pods})
    return values


def link_batches(cluster: Cluster) -> Batches:
    batches: Batches = {cluster.net_netns: ["link add br0 type bridge mcast_snooping 0"]}
    for node in cluster.nodes:
        batches[cluster.net_netns] += [
            f"link add {node.uplink} type veth peer name eth0 netns {node.netns}",
            f"link set {node.uplink} master br0",
        ]
        batches[node.netns] = ["link add cbr0 type bridge mcast_snooping 0"]
    for pod in cluster.pods:
        batches[cluster.node(pod.node).netns] += pod_node_side(pod)
    return batches


def pod_mac(pod: Pod) -> str:
    """0a:58 and the IP, as the bridge CNI plugin does: a pod that gets a removed pod's address also
    gets its MAC, so no neighbour cache on the node or its pods points at a MAC that is gone."""
    return "0a:58:" + ":".join(f"{b:02x}" for b in pod.ip.packed)


def pod_node_side(pod: Pod) -> list[str]:
    """On the pod's node: its veth on the pod bridge, hairpin on (a pod reaching itself through its
    Service), and up."""
    return [
        f"link add {pod.veth} type veth peer name eth0 address {pod_mac(pod)} netns {pod.netns}",
        f"link set {pod.veth} master cbr0",
        f"link set {pod.veth} type bridge_slave hairpin on",
        f"link set {pod.veth} up",
    ]


def addr(ip: IPAddress, net: IPNetwork, dev: str) -> str:
    return f"addr add {ip}/{net.prefixlen} dev {dev}" + (" nodad" if ip.version == 6 else "")


def address_batches(cluster: Cluster) -> Batches:
    net = cluster.net_netns
    batches: Batches = {ns: ["link set lo up"] for ns in cluster.namespaces}
    nets: tuple[IPNetwork, ...] = cluster.pick(NODE_NET, NODE_NET6)
    batches[net] += [*(addr(ip, n, "br0") for ip, n in zip(cluster.outside_ips, nets, strict=True)),
                     "link set br0 up", *(f"link set {n.uplink} up" for n in cluster.nodes)]
    for node in cluster.nodes:
        bridges: tuple[IPAddress, ...] = cluster.pick(node.bridge_ip, node.bridge_ip6)
        batches[node.netns] += [
            *(addr(ip, cidr, "cbr0") for ip, cidr in zip(bridges, cluster.pod_cidrs(node), strict=True)),
            *(addr(ip, n, "eth0") for ip, n in zip(cluster.node_ips(node), nets, strict=True)),
            "link set cbr0 up", "link set eth0 up",
        ]
    for pod in cluster.pods:
        batches[pod.netns] += pod_addresses(cluster, pod)
    return batches


def pod_addresses(cluster: Cluster, pod: Pod) -> list[str]:
    cidrs = cluster.pod_cidrs(cluster.node(pod.node))
    return [*(addr(ip, cidr, "eth0") for ip, cidr in zip(cluster.pod_ips(pod), cidrs, strict=True)),
            "link set eth0 up"]


def route_batches(cluster: Cluster) -> Batches:
    batches: Batches = {node.netns: node_routes(cluster, node) for node in cluster.nodes}
    for pod in cluster.pods:
        batches[pod.netns] = pod_routes(cluster, pod)
    return batches


def node_routes(cluster: Cluster, node: Node) -> list[str]:
    """host-gw: every other node's pod CIDR via that node; the default via the (non-forwarding)
    switch namespace, so unmatched traffic leaves like traffic to the internet. Per family."""
    out = []
    for other in cluster.nodes:
        if other != node:
            out += [f"route add {cidr} via {ip}"
                    for cidr, ip in zip(cluster.pod_cidrs(other), cluster.node_ips(other), strict=True)]
    return out + [f"route add default via {ip}" for ip in cluster.outside_ips]


def pod_routes(cluster: Cluster, pod: Pod) -> list[str]:
    node = cluster.node(pod.node)
    return [f"route add default via {ip}" for ip in cluster.pick(node.bridge_ip, node.bridge_ip6)]


def resolv_conf(pod: Pod, dns_ip: str, domain: str) -> str:
    """What kubelet writes for a ClusterFirst pod: the cluster DNS, the Kubernetes search path, ndots 5."""
    search = f"{pod.namespace}.svc.{domain} svc.{domain} {domain}"
    return f"nameserver {dns_ip}\nsearch {search}\noptions ndots:5\n"
