"""Hypothesis strategies for NodeState values (shared by the nftables unit and netns tests).

States are built directly from ServicePortState values, with endpoints categorised by the model's
own `categorize`, so every generated state is one NodeState.build could produce.
"""

from __future__ import annotations

from dataclasses import replace
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

from hypothesis import strategies as st

from netkit.model import EndpointAddr, IPFamily, NodeInfo, NodeState, ObjectRef, Protocol, ServicePortName
from netkit.model.state import ServicePortState, categorize
from netkit.model.types import IPAddress

NODE_V4 = ip_address("192.0.2.10")
NODE_V6 = ip_address("2001:db8:2::10")
NAMES = ("web", "api", "db", "cache", "dns")
NAMESPACES = ("default", "shop", "kube-system")


def _ip(family: IPFamily, base: str, i: int) -> IPAddress:
    if family is IPFamily.IPV4:
        return IPv4Address(int(IPv4Address(base)) + i)
    return IPv6Address(int(IPv6Address(base)) + i)


@st.composite
def endpoints(draw: st.DrawFn, family: IPFamily) -> tuple[EndpointAddr, ...]:
    base = "10.244.1.0" if family is IPFamily.IPV4 else "fd00:244:0:1::"
    idx = draw(st.sets(st.integers(1, 12), max_size=4))
    out = []
    for i in sorted(idx):
        ready = draw(st.booleans()) or draw(st.booleans())
        out.append(EndpointAddr(ip=_ip(family, base, i), port=draw(st.sampled_from((8080, 9090))),
                                ready=ready, serving=ready or draw(st.booleans()),
                                terminating=not ready and draw(st.booleans()),
                                local=i % 2 == 0, node_name="node-a" if i % 2 == 0 else "node-b"))
    return tuple(sorted(out))


@st.composite
def service_port(draw: st.DrawFn, family: IPFamily, index: int) -> ServicePortState:
    ns = draw(st.sampled_from(NAMESPACES))
    name = draw(st.sampled_from(NAMES)) + f"-{index}"
    proto = draw(st.sampled_from(list(Protocol)))
    port_name = draw(st.sampled_from(("", "http", "metrics")))
    svc_base = "10.96.0.0" if family is IPFamily.IPV4 else "fd00:96::"
    lb_base = "198.51.100.0" if family is IPFamily.IPV4 else "2001:db8:100::"
    external = draw(st.booleans())
    lb = draw(st.booleans())
    node_port = 30000 + index if draw(st.booleans()) else None
    ranges = ()
    if lb and draw(st.booleans()):
        ranges = (ip_network("203.0.113.0/28") if family is IPFamily.IPV4 else ip_network("2001:db8:113::/64"),)
    etp_local = (external or lb or node_port is not None) and draw(st.booleans())
    base = ServicePortState(
        name=ServicePortName(ObjectRef(ns, name), port_name), family=family, protocol=proto,
        cluster_ip=_ip(family, svc_base, 10 + index), port=draw(st.sampled_from((53, 80, 443))),
        node_port=node_port,
        external_ips=(_ip(family, lb_base, 10 + index),) if external else (),
        load_balancer_ips=(_ip(family, lb_base, 100 + index),) if lb else (),
        source_ranges=ranges,
        affinity_timeout=draw(st.sampled_from((None, None, 600, 10800))),
        external_policy_local=etp_local,
        internal_policy_local=draw(st.booleans()) and draw(st.booleans()),
        health_check_node_port=32000 + index if etp_local and lb else None,
    )
    eps = draw(endpoints(family))
    cluster, local, has_any = categorize(eps, base, None)
    return replace(base, endpoints=eps, cluster_endpoints=cluster, local_endpoints=local, has_endpoints=has_any)


@st.composite
def node_states(draw: st.DrawFn, family: IPFamily = IPFamily.IPV4, max_services: int = 5) -> NodeState:
    count = draw(st.integers(0, max_services))
    indexes = draw(st.lists(st.integers(0, 30), min_size=count, max_size=count, unique=True))
    ports = [draw(service_port(family, i)) for i in indexes]
    node = NodeInfo("node-a", None, (NODE_V4, NODE_V6))
    return NodeState(node, tuple(sorted(ports, key=lambda p: (p.name, p.protocol.value))))
