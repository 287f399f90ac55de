"""How a Layout becomes kernel objects: sysctls and `ip -batch` command lists, per namespace. Pure.

Building runs in phases; within a phase every namespace's batch is independent, so the builder runs
them in parallel (one `ip -n NS -batch -` process each):

1. sysctls, before any interface exists, so `default` values apply to every interface made later
   (rp_filter off, IPv6 DAD off so addresses are usable at once, forwarding on nodes, bridge
   netfilter on nodes as on a real Kubernetes node);
2. links: each node creates its veth pairs, placing the far end directly in the peer namespace
   (nothing is ever created in the machine's own namespace), plus the pod bridge and hairpin;
3. addresses and link up;
4. routes, after every link is up (an IPv6 route via a gateway needs the connected prefix).
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address

from netkit.lab.plan import (
    EXTERNAL_GW4,
    EXTERNAL_GW6,
    EXTERNAL_NET4,
    EXTERNAL_NET6,
    NODE_NET4,
    NODE_NET6,
    SERVICE_CIDR4,
    SERVICE_CIDR6,
    UPLINK4,
    UPLINK6,
    UPLINK_GW4,
    UPLINK_GW6,
    UPLINK_GW_MAC,
    Layout,
    Node,
    Pod,
)

Batches = dict[str, list[str]]  # netns name -> `ip -batch` lines

COMMON_SYSCTLS: dict[str, str] = {
    "net/ipv4/conf/all/rp_filter": "0",
    "net/ipv4/conf/default/rp_filter": "0",
    "net/ipv6/conf/all/accept_dad": "0",
    "net/ipv6/conf/default/accept_dad": "0",
    "net/ipv6/conf/all/disable_ipv6": "0",
}
NODE_SYSCTLS: dict[str, str] = {
    **COMMON_SYSCTLS,
    "net/ipv4/ip_forward": "1",
    "net/ipv6/conf/all/forwarding": "1",
    "net/bridge/bridge-nf-call-iptables": "1",
    "net/bridge/bridge-nf-call-ip6tables": "1",
}


def port_name(pod: Pod) -> str:
    """The node-side end of a pod's veth (IFNAMSIZ is 16: at most 15 characters)."""
    return f"p-{pod.name}"[:15]


def sysctls(lay: Layout) -> dict[str, dict[str, str]]:
    nodes = {n.netns: NODE_SYSCTLS for n in lay.nodes}
    others = {ns: COMMON_SYSCTLS for ns in lay.namespaces if ns not in nodes}
    return {**others, **nodes}


def link_batches(lay: Layout) -> Batches:
    node_a, node_b = lay.nodes
    batches: Batches = {n.netns: node_links(n, lay.pods_on(n.name)) for n in lay.nodes}
    batches[node_a.netns] += [
        f"link add eth0 type veth peer name eth0 netns {node_b.netns}",
        f"link add ext0 type veth peer name eth0 netns {lay.client.netns}",
        "link add uplink type veth peer name uplink-peer",
    ]
    return batches


def node_links(node: Node, pods: tuple[Pod, ...]) -> list[str]:
    lines = ["link add cbr0 type bridge mcast_snooping 0"]
    for pod in pods:
        port = port_name(pod)
        lines += [
            f"link add {port} type veth peer name eth0 netns {pod.netns}",
            f"link set {port} master cbr0",
            f"link set {port} type bridge_slave hairpin on",
        ]
    return lines


def addr(ip: IPv4Address | IPv6Address, prefix: int, dev: str) -> str:
    return f"addr add {ip}/{prefix} dev {dev}" + (" nodad" if ip.version == 6 else "")


def address_batches(lay: Layout) -> Batches:
    node_a = lay.nodes[0]
    batches: Batches = {ns: ["link set lo up"] for ns in lay.namespaces}
    for node in lay.nodes:
        batches[node.netns] += [
            addr(node.bridge4, node.pod_cidr4.prefixlen, "cbr0"),
            addr(node.bridge6, node.pod_cidr6.prefixlen, "cbr0"),
            addr(node.ipv4, NODE_NET4.prefixlen, "eth0"),
            addr(node.ipv6, NODE_NET6.prefixlen, "eth0"),
            "link set cbr0 up", "link set eth0 up",
            *(f"link set {port_name(p)} up" for p in lay.pods_on(node.name)),
        ]
    batches[node_a.netns] += [
        addr(EXTERNAL_GW4, EXTERNAL_NET4.prefixlen, "ext0"),
        addr(EXTERNAL_GW6, EXTERNAL_NET6.prefixlen, "ext0"),
        addr(UPLINK4.ip, UPLINK4.network.prefixlen, "uplink"),
        addr(UPLINK6.ip, UPLINK6.network.prefixlen, "uplink"),
        "link set ext0 up", "link set uplink up", "link set uplink-peer up",
    ]
    for pod in lay.pods:
        node = lay.node(pod.node)
        batches[pod.netns] += [
            addr(pod.ipv4, node.pod_cidr4.prefixlen, "eth0"),
            addr(pod.ipv6, node.pod_cidr6.prefixlen, "eth0"),
            "link set eth0 up",
        ]
    client = lay.client
    batches[client.netns] += [
        *(addr(a, EXTERNAL_NET4.prefixlen, "eth0") for a in client.ipv4),
        addr(client.ipv6[0], EXTERNAL_NET6.prefixlen, "eth0"),
        # IPv6 picks the newest of equal addresses as source: deprecate the others so the first
        # stays the default source (binding to them explicitly still works).
        *(addr(a, EXTERNAL_NET6.prefixlen, "eth0") + " preferred_lft 0" for a in client.ipv6[1:]),
        "link set eth0 up",
    ]
    return batches


def route_batches(lay: Layout) -> Batches:
    node_a, node_b = lay.nodes
    batches: Batches = {
        pod.netns: [
            f"route add default via {lay.node(pod.node).bridge4}",
            f"route add default via {lay.node(pod.node).bridge6}",
        ]
        for pod in lay.pods
    }
    batches[lay.client.netns] = [f"route add default via {EXTERNAL_GW4}", f"route add default via {EXTERNAL_GW6}"]
    batches[node_a.netns] = [
        f"route add {node_b.pod_cidr4} via {node_b.ipv4}",
        f"route add {node_b.pod_cidr6} via {node_b.ipv6}",
        f"neigh add {UPLINK_GW4} lladdr {UPLINK_GW_MAC} dev uplink nud permanent",
        f"neigh add {UPLINK_GW6} lladdr {UPLINK_GW_MAC} dev uplink nud permanent",
        # `src`: the node's own traffic leaves with the node IP, as through a real node's eth0.
        f"route add default via {UPLINK_GW4} dev uplink src {node_a.ipv4}",
        f"route add default via {UPLINK_GW6} dev uplink src {node_a.ipv6}",
        f"route add {SERVICE_CIDR4} via {UPLINK_GW4} dev uplink src {node_a.ipv4}",
        f"route add {SERVICE_CIDR6} via {UPLINK_GW6} dev uplink src {node_a.ipv6}",
    ]
    batches[node_b.netns] = [
        f"route add {node_a.pod_cidr4} via {node_a.ipv4}",
        f"route add {node_a.pod_cidr6} via {node_a.ipv6}",
        f"route add default via {node_a.ipv4}",
        f"route add default via {node_a.ipv6}",
    ]
    return batches
