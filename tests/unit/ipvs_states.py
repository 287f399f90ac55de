"""NodeState builders for the IPVS tests (unit and VM): a service port stated in one call."""

from __future__ import annotations

from ipaddress import ip_address, ip_network

from netkit.model import (
    EndpointAddr,
    IPFamily,
    NodeInfo,
    NodeState,
    ObjectRef,
    Protocol,
    ServicePortName,
    ServicePortState,
)

NODE = NodeInfo("node-a", None, (ip_address("192.0.2.10"),))


def sp(name: str, cluster_ip: str, port: int = 80, eps: tuple[str, ...] = (), *, proto: Protocol = Protocol.TCP,
       target: int = 8080, node_port: int | None = None, affinity: int | None = None,
       external_ips: tuple[str, ...] = (), lb_ips: tuple[str, ...] = (), source_ranges: tuple[str, ...] = (),
       local_eps: tuple[str, ...] = (), etp_local: bool = False, ns: str = "default") -> ServicePortState:
    """A service port whose endpoints are all ready (and those in local_eps on this node)."""
    cluster = tuple(EndpointAddr(ip_address(e), target, local=e in local_eps, node_name="node-a" if e in local_eps
                                 else "node-b") for e in eps)
    local = tuple(e for e in cluster if e.local) if etp_local else ()
    return ServicePortState(
        ServicePortName(ObjectRef(ns, name), "http"), IPFamily.IPV4, proto, ip_address(cluster_ip), port,
        node_port=node_port, external_ips=tuple(ip_address(i) for i in external_ips),
        load_balancer_ips=tuple(ip_address(i) for i in lb_ips),
        source_ranges=tuple(ip_network(c) for c in source_ranges), affinity_timeout=affinity,
        external_policy_local=etp_local, endpoints=cluster, cluster_endpoints=cluster, local_endpoints=local,
        has_endpoints=bool(cluster))


def state(*ports: ServicePortState) -> NodeState:
    return NodeState(NODE, tuple(ports))
