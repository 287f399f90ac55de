"""Packet-flow cases: for each, a packet and what must happen to it, independent of the backend.

Each Flow names a source, a destination and the expectation: which endpoints (with probabilities)
it may reach, or that it is rejected or dropped, and whether its source is masqueraded. The unit
tests run them through the tracer over compiled rules; the lab tests send the same packets through
the kernel and check it agrees. Addresses follow the examples (see examples/ and netkit/lab).
"""

from __future__ import annotations

from dataclasses import dataclass, field

POD_A = "10.244.1.50"  # a client pod on node-a (this node)
NODE_A = "192.0.2.10"
CLIENT_IN = "203.0.113.5"  # external client inside web-lb's loadBalancerSourceRanges
CLIENT_OUT = "203.0.113.100"  # external client outside them
POD_A6 = "fd00:244:0:1::50"
NODE_A6 = "2001:db8:2::10"
CLIENT_IN6 = "2001:db8:113::5"

THIRD = 1 / 3


@dataclass(frozen=True)
class Flow:
    name: str
    src: str
    dst: str  # IP:port or [IPv6]:port
    proto: str = "tcp"
    endpoints: dict[str, float] = field(default_factory=dict)  # expected DNAT targets → probability
    verdict: str = "accept"  # accept | reject | drop
    masquerade: bool | None = None  # None: do not care


FLOWS = [
    Flow("clusterIP from a pod spreads evenly", POD_A, "10.96.0.10:80",
         endpoints={"10.244.1.11:8080": THIRD, "10.244.1.12:8080": THIRD, "10.244.2.11:8080": THIRD},
         masquerade=False),
    Flow("clusterIP from the node itself is masqueraded", NODE_A, "10.96.0.10:80",
         endpoints={"10.244.1.11:8080": THIRD, "10.244.1.12:8080": THIRD, "10.244.2.11:8080": THIRD},
         masquerade=True),
    Flow("clusterIP from off-cluster is masqueraded", CLIENT_IN, "10.96.0.10:80",
         endpoints={"10.244.1.11:8080": THIRD, "10.244.1.12:8080": THIRD, "10.244.2.11:8080": THIRD},
         masquerade=True),
    Flow("NodePort from an external client", CLIENT_IN, f"{NODE_A}:30080",
         endpoints={"10.244.1.11:8080": 0.5, "10.244.2.11:8080": 0.5}, masquerade=True),
    Flow("externalIP", CLIENT_IN, "198.51.100.10:80",
         endpoints={"10.244.1.11:8080": THIRD, "10.244.1.12:8080": THIRD, "10.244.2.11:8080": THIRD},
         masquerade=True),
    Flow("LB IP from an allowed source keeps the client address (eTP=Local)", CLIENT_IN, "198.51.100.100:80",
         endpoints={"10.244.1.12:8080": 1.0}, masquerade=False),
    Flow("LB IP from a denied source is dropped", CLIENT_OUT, "198.51.100.100:80", verdict="drop"),
    Flow("NodePort of an eTP=Local service reaches only the local endpoint", CLIENT_OUT, f"{NODE_A}:30081",
         endpoints={"10.244.1.12:8080": 1.0}, masquerade=False),
    Flow("eTP=Local NodePort from a pod uses every endpoint", POD_A, f"{NODE_A}:30081",
         endpoints={"10.244.1.12:8080": 0.5, "10.244.2.11:8080": 0.5}, masquerade=False),
    Flow("LB source ranges apply to pods too", POD_A, "198.51.100.100:80", verdict="drop"),
    Flow("UDP service", POD_A, "10.96.0.53:53", proto="udp",
         endpoints={"10.244.1.11:5353": 0.5, "10.244.2.11:5353": 0.5}, masquerade=False),
    Flow("TCP on the same port of the DNS service", POD_A, "10.96.0.53:53",
         endpoints={"10.244.1.11:5353": 0.5, "10.244.2.11:5353": 0.5}),
    Flow("ClientIP affinity: a first connection spreads", POD_A, "10.96.0.13:80",
         endpoints={"10.244.1.11:8080": THIRD, "10.244.1.12:8080": THIRD, "10.244.2.11:8080": THIRD}),
    Flow("hairpin: a pod reaching its own service is masqueraded when it picks itself", "10.244.1.11",
         "10.96.0.11:80", endpoints={"10.244.1.11:8080": 0.5, "10.244.2.11:8080": 0.5}),
    Flow("IPv6 clusterIP", POD_A6, "[fd00:96::14]:80",
         endpoints={"[fd00:244:0:1::11]:8080": 0.5, "[fd00:244:0:2::11]:8080": 0.5}, masquerade=False),
    Flow("IPv6 clusterIP from the node itself is masqueraded", NODE_A6, "[fd00:96::14]:80",
         endpoints={"[fd00:244:0:1::11]:8080": 0.5, "[fd00:244:0:2::11]:8080": 0.5}, masquerade=True),
    Flow("IPv6 clusterIP from off-cluster is masqueraded", CLIENT_IN6, "[fd00:96::14]:80",
         endpoints={"[fd00:244:0:1::11]:8080": 0.5, "[fd00:244:0:2::11]:8080": 0.5}, masquerade=True),
    Flow("NodePort from the node itself is masqueraded", NODE_A, f"{NODE_A}:30080",
         endpoints={"10.244.1.11:8080": 0.5, "10.244.2.11:8080": 0.5}, masquerade=True),
    Flow("a port the service does not have is not translated", POD_A, "10.96.0.10:81"),
]

EDGE_FLOWS = [
    Flow("no endpoints: clusterIP rejects", POD_A, "10.96.1.1:80", verdict="reject"),
    Flow("no endpoints: externalIP rejects", CLIENT_IN, "198.51.100.20:80", verdict="reject"),
    Flow("no endpoints: NodePort rejects", CLIENT_IN, f"{NODE_A}:30100", verdict="reject"),
    Flow("iTP=Local without a local endpoint drops", POD_A, "10.96.1.2:80", verdict="drop"),
    Flow("eTP=Local without a local endpoint drops external traffic", CLIENT_IN, f"{NODE_A}:30101",
         verdict="drop"),
    Flow("… but pods still reach it through the cluster chain", POD_A, "198.51.100.101:80",
         endpoints={"10.244.2.31:8080": 1.0}),
    Flow("… and so does the node itself, masqueraded", NODE_A, "198.51.100.101:80",
         endpoints={"10.244.2.31:8080": 1.0}, masquerade=True),
    Flow("terminating endpoint used when none is ready", POD_A, "10.96.1.4:9000", proto="sctp",
         endpoints={"10.244.1.40:9000": 1.0}),
]

# The EDGE_FLOWS cases on the lab's own pods (tests/lab_dnat/manifests/edge.yaml), so that the kernel
# tests can send them: every endpoint here is a pod of netkit/lab.
LAB_EDGE_FLOWS = [
    Flow("no endpoints: clusterIP rejects", POD_A, "10.96.1.1:80", verdict="reject"),
    Flow("no endpoints: clusterIP from the node rejects", NODE_A, "10.96.1.1:80", verdict="reject"),
    Flow("no endpoints: externalIP rejects", CLIENT_IN, "198.51.100.20:80", verdict="reject"),
    Flow("no endpoints: NodePort rejects", CLIENT_IN, f"{NODE_A}:30100", verdict="reject"),
    Flow("iTP=Local without a local endpoint drops", POD_A, "10.96.1.2:80", verdict="drop"),
    Flow("iTP=Local reaches only the local endpoint", POD_A, "10.96.1.5:80",
         endpoints={"10.244.1.11:8080": 1.0}, masquerade=False),
    Flow("iTP=Local from the node itself reaches only the local endpoint", NODE_A, "10.96.1.5:80",
         endpoints={"10.244.1.11:8080": 1.0}),
    Flow("eTP=Local without a local endpoint drops an external NodePort", CLIENT_IN, f"{NODE_A}:30101",
         verdict="drop"),
    Flow("eTP=Local without a local endpoint drops an external LB IP", CLIENT_IN, "198.51.100.101:80",
         verdict="drop"),
    Flow("… but pods still reach it through the cluster chain", POD_A, "198.51.100.101:80",
         endpoints={"10.244.2.11:8080": 1.0}, masquerade=False),
    Flow("… and so does the node itself, masqueraded", NODE_A, "198.51.100.101:80",
         endpoints={"10.244.2.11:8080": 1.0}, masquerade=True),
    Flow("terminating endpoint used when none is ready", POD_A, "10.96.1.4:80",
         endpoints={"10.244.1.11:8080": 1.0}, masquerade=False),
    Flow("terminating endpoint used when none is ready (SCTP)", POD_A, "10.96.1.4:9000", proto="sctp",
         endpoints={"10.244.1.11:5432": 1.0}),
    Flow("a ready endpoint wins over a terminating one", POD_A, "10.96.1.7:80",
         endpoints={"10.244.1.12:8080": 1.0}, masquerade=False),
]
