"""The lab's address plan and layout: which namespaces exist, which addresses they own. Pure data.

The plan is the one the bundled examples (`examples/*.yaml`) are written against:

```
  client ns                      node-a ns (node under test)                 node-b ns
  203.0.113.5 .6 .7  (in  /28)   ext0 203.0.113.1        eth0 192.0.2.10 ─── eth0 192.0.2.11
  203.0.113.100 .101 (outside) ──┘                        uplink ─► blackhole  cbr0 10.244.2.1/24
  default via node-a             cbr0 10.244.1.1/24 (hairpin on every port)    ├─ web-b1 .2.11
                                 ├─ web-a1 .1.11  ├─ web-a2 .1.12              └─ db-1   .2.21
                                 ├─ db-0   .1.21  └─ client-a .1.50 (pod-side client)
```

IPv6 mirrors it: pods fd00:244:0:N::<last IPv4 octet>, nodes 2001:db8:2::10 / ::11, clients
2001:db8:113::5 / ::100. Node A's default route (and its route covering the service CIDR) points into
`uplink`, a veth whose peer drops everything: a real node has a default route, and without one a
ClusterIP with no DNAT would fail with "network unreachable" before netkit's REJECT is reached.

Namespace names are `nk<id>-<role>`, where `<id>` is random hex per lab, so parallel labs (xdist
workers, a demo next to a test run) never collide. Interface names live inside the namespaces and are
fixed (`eth0`, `cbr0`, `p-<pod>`), so they never collide either.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network, IPv6Address, IPv6Interface, IPv6Network

IPAddress = IPv4Address | IPv6Address

NETNS_PREFIX = "nk"
DEFAULT_PORTS: tuple[int, ...] = (8080, 5353, 5432)  # every targetPort/EndpointSlice port in examples/

SERVICE_CIDR4 = IPv4Network("10.96.0.0/16")
SERVICE_CIDR6 = IPv6Network("fd00:96::/112")
POD_CIDR4 = IPv4Network("10.244.0.0/16")
NODE_NET4 = IPv4Network("192.0.2.0/24")
NODE_NET6 = IPv6Network("2001:db8:2::/64")
EXTERNAL_NET4 = IPv4Network("203.0.113.0/24")
EXTERNAL_NET6 = IPv6Network("2001:db8:113::/64")
EXTERNAL_GW4 = IPv4Address("203.0.113.1")
EXTERNAL_GW6 = IPv6Address("2001:db8:113::1")
# The blackhole uplink (RFC 2544 benchmarking range; nothing answers there).
UPLINK4 = IPv4Interface("198.18.0.2/24")
UPLINK6 = IPv6Interface("fd00:ff::2/64")
UPLINK_GW4 = IPv4Address("198.18.0.1")
UPLINK_GW6 = IPv6Address("fd00:ff::1")
UPLINK_GW_MAC = "02:00:5e:00:00:01"


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod: its own namespace, one `eth0` on its node's bridge, servers on every lab port."""

    name: str
    node: str
    netns: str
    ipv4: IPv4Address
    ipv6: IPv6Address

    def address(self, family: int = 4) -> IPAddress:
        return self.ipv4 if family == 4 else self.ipv6


@dataclass(frozen=True, slots=True)
class Node:
    """A node namespace: node IPs on `eth0`, a pod bridge `cbr0`, forwarding on."""

    name: str
    netns: str
    ipv4: IPv4Address
    ipv6: IPv6Address
    pod_cidr4: IPv4Network
    pod_cidr6: IPv6Network

    @property
    def bridge4(self) -> IPv4Address:
        return self.pod_cidr4.network_address + 1

    @property
    def bridge6(self) -> IPv6Address:
        return self.pod_cidr6.network_address + 1

    def address(self, family: int = 4) -> IPAddress:
        return self.ipv4 if family == 4 else self.ipv6


@dataclass(frozen=True, slots=True)
class Client:
    """The external client network behind node A: several source addresses in one namespace.

    `ipv4[0]` is the primary (default source); the first three lie inside 203.0.113.0/28 (the
    examples' loadBalancerSourceRanges), the rest outside it.
    """

    netns: str
    ipv4: tuple[IPv4Address, ...]
    ipv6: tuple[IPv6Address, ...]

    @property
    def allowed(self) -> IPv4Address:
        return self.ipv4[0]

    @property
    def denied(self) -> IPv4Address:
        return next(a for a in self.ipv4 if a not in IPv4Network("203.0.113.0/28"))


# (name, node, last octet) — the examples' pods plus a client pod on node A.
POD_TABLE: tuple[tuple[str, str, int], ...] = (
    ("web-a1", "node-a", 11),
    ("web-a2", "node-a", 12),
    ("db-0", "node-a", 21),
    ("client-a", "node-a", 50),
    ("web-b1", "node-b", 11),
    ("db-1", "node-b", 21),
)
NODE_TABLE: tuple[tuple[str, int], ...] = (("node-a", 1), ("node-b", 2))  # (name, pod subnet index)
CLIENT_OCTETS: tuple[int, ...] = (5, 6, 7, 100, 101)


def netns_name(lab_id: str, role: str) -> str:
    return f"{NETNS_PREFIX}{lab_id}-{role}"


def make_node(lab_id: str, name: str, index: int) -> Node:
    return Node(
        name=name,
        netns=netns_name(lab_id, name),
        ipv4=NODE_NET4.network_address + 9 + index,
        ipv6=IPv6Address(f"2001:db8:2::{9 + index}"),  # written like the IPv4 octet: ::10, ::11
        pod_cidr4=IPv4Network(f"10.244.{index}.0/24"),
        pod_cidr6=IPv6Network(f"fd00:244:0:{index}::/64"),
    )


def make_pod(lab_id: str, name: str, node: Node, octet: int) -> Pod:
    return Pod(
        name=name,
        node=node.name,
        netns=netns_name(lab_id, name),
        ipv4=node.pod_cidr4.network_address + octet,
        ipv6=IPv6Address(f"{node.pod_cidr6.network_address}{octet}"),
    )


def make_client(lab_id: str) -> Client:
    return Client(
        netns=netns_name(lab_id, "client"),
        ipv4=tuple(EXTERNAL_NET4.network_address + o for o in CLIENT_OCTETS),
        ipv6=tuple(IPv6Address(f"2001:db8:113::{o}") for o in CLIENT_OCTETS),
    )


@dataclass(frozen=True, slots=True)
class Layout:
    """Everything about one lab that follows from its id: namespace names and addresses."""

    lab_id: str
    client: Client
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    ports: tuple[int, ...]

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.client.netns, *(n.netns for n in self.nodes), *(p.netns for p in self.pods))

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def pods_on(self, node: str) -> tuple[Pod, ...]:
        return tuple(p for p in self.pods if p.node == node)


def layout(lab_id: str, ports: tuple[int, ...] = DEFAULT_PORTS) -> Layout:
    nodes = tuple(make_node(lab_id, name, index) for name, index in NODE_TABLE)
    by_name = {n.name: n for n in nodes}
    pods = tuple(make_pod(lab_id, name, by_name[node], octet) for name, node, octet in POD_TABLE)
    return Layout(lab_id=lab_id, client=make_client(lab_id), nodes=nodes, pods=pods, ports=ports)
