"""Traffic inside a lab: routing between every place, the pod servers, outcomes, Scapy probes, and a
hand-written DNAT in node A that shows the lab can host the Service tests (hairpin included)."""

from __future__ import annotations

import shutil
from ipaddress import IPv4Address, ip_address

import pytest

from netkit.lab import Lab, Outcome
from netkit.lab.plan import SERVICE_CIDR4

pytestmark = pytest.mark.netns


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_pod_to_pod_across_nodes(lab: Lab, family: int, proto: str) -> None:
    src, dst = lab.pod("client-a"), lab.pod("web-b1")
    reply = lab.connect("client-a", dst.address(family), 8080, proto)
    assert reply.outcome is Outcome.ANSWERED, reply
    assert reply.backend == "web-b1"
    assert reply.source == src.address(family)  # routed, not NATed


def test_every_pod_answers_on_every_port_with_its_name_and_the_source(lab: Lab) -> None:
    for pod in lab.pods:
        for port in lab.ports:
            for proto in ("tcp", "udp"):
                for family in (4, 6):
                    reply = lab.connect("client-a", pod.address(family), port, proto)
                    assert reply.backend == pod.name, (pod.name, port, proto, family, reply)
                    assert reply.source == lab.pod("client-a").address(family)
                    assert reply.peer is not None and reply.peer[1] > 0


@pytest.mark.parametrize("family", [4, 6])
def test_external_client_reaches_pods_on_both_nodes_through_node_a(lab: Lab, family: int) -> None:
    client = lab.client.ipv4[0] if family == 4 else lab.client.ipv6[0]
    for name in ("web-a1", "web-b1"):
        reply = lab.connect("client", lab.pod(name).address(family), 8080)
        assert (reply.backend, reply.source) == (name, client)


def test_client_chooses_its_source_address(lab: Lab) -> None:
    for src in (lab.client.allowed, lab.client.denied):
        reply = lab.connect("client", lab.pod("web-a1").ipv4, 8080, src=src)
        assert reply.source == src


@pytest.mark.parametrize("family", [4, 6])
def test_client_reaches_both_node_addresses(lab: Lab, family: int) -> None:
    # Nothing listens on the nodes: a refusal proves the route there and back.
    for node in lab.nodes:
        assert lab.connect("client", node.address(family), 30080).outcome is Outcome.REFUSED


def test_node_reaches_its_pods_and_the_other_nodes_pods(lab: Lab) -> None:
    assert lab.connect("node-a", "10.244.1.12", 5432).backend == "web-a2"
    assert lab.connect("node-a", "10.244.2.21", 5432).backend == "db-1"
    assert lab.connect("node-b", "10.244.1.21", 5432).source == IPv4Address("192.0.2.11")


def test_outcomes_are_told_apart(lab: Lab) -> None:
    assert lab.connect("client-a", "10.244.1.11", 9, "tcp").outcome is Outcome.REFUSED
    assert lab.connect("client-a", "10.244.1.11", 9, "udp").outcome is Outcome.REFUSED
    # No rules yet: node A sends the service CIDR to its blackhole uplink, as a real node would.
    silent = lab.connect("client-a", "10.96.0.10", 80, timeout=0.3)
    assert silent.outcome is Outcome.TIMEOUT and silent.seconds >= 0.3
    lab.exec("node-a", ["ip", "route", "add", "unreachable", "198.51.100.0/24"])
    assert lab.connect("client-a", "198.51.100.10", 80).outcome is Outcome.UNREACHABLE


def test_a_held_connection_keeps_answering(lab: Lab) -> None:
    with lab.stream("client", "10.244.2.11", 8080) as conn:
        assert conn.greeting.backend == "web-b1"
        again = conn.ask()
        assert again.text == conn.greeting.text  # same pod, same source port: the same connection


def test_node_a_routes_like_a_node(lab: Lab) -> None:
    routes = lab.exec("node-a", ["ip", "route"]).stdout
    assert "default via" in routes and f"{SERVICE_CIDR4} via" in routes
    links = lab.exec("node-a", ["ip", "-d", "link", "show", "master", "cbr0"]).stdout
    assert links.count("hairpin on") == len([p for p in lab.pods if p.node == "node-a"])


def scapy_interfaces() -> list[str]:
    """Runs in a forked child inside a namespace: Scapy imported there sees that namespace."""
    from scapy.arch import get_if_list

    return sorted(get_if_list())


def test_run_forks_into_the_namespace_and_scapy_sees_it(lab: Lab) -> None:
    names = lab.run("web-a1", scapy_interfaces)
    assert "eth0" in names and "cbr0" not in names
    assert "cbr0" in lab.run("node-a", scapy_interfaces)


@pytest.mark.parametrize(("proto", "dst"), [("tcp", "10.244.2.11"), ("udp", "10.244.1.12"),
                                            ("sctp", "10.244.1.11"), ("tcp", "fd00:244:0:2::11")])
def test_probe_is_seen_at_its_backend_only(lab: Lab, proto: str, dst: str) -> None:
    result = lab.probe("client", dst, 8080, proto)
    (seen,) = result.seen
    assert result.backend == seen.where
    assert lab.pod(seen.where).address(ip_address(dst).version) == ip_address(dst)
    assert (seen.proto, seen.dst, seen.dport) == (proto, ip_address(dst), 8080)
    assert (seen.src, seen.sport) == (result.sent.src, result.sent.sport)


def test_probe_that_reaches_nothing_sees_nothing(lab: Lab) -> None:
    result = lab.probe("client-a", "10.96.0.99", 80, "udp", timeout=0.3)
    assert result.seen == () and result.backend is None


@pytest.fixture
def iptables(lab: Lab) -> str:
    for tool in ("iptables-legacy", "iptables-nft", "iptables"):
        if shutil.which(tool):
            return tool
    pytest.skip("needs iptables")


def test_hand_written_dnat_is_visible_to_probes_and_sockets(lab: Lab, iptables: str) -> None:
    """Not netkit's rules: the smallest DNAT proving the lab can host the kernel tests."""
    vip = "10.96.0.10"
    for argv in (["-t", "nat", "-A", "PREROUTING", "-d", vip, "-p", "tcp", "--dport", "80",
                  "-j", "DNAT", "--to-destination", "10.244.1.11:8080"],
                 ["-t", "nat", "-A", "OUTPUT", "-d", vip, "-p", "tcp", "--dport", "80",
                  "-j", "DNAT", "--to-destination", "10.244.1.11:8080"],
                 ["-t", "nat", "-A", "POSTROUTING", "-s", "10.244.1.11", "-d", "10.244.1.11",
                  "-j", "MASQUERADE"]):  # hairpin: the pod reaching itself through the VIP
        lab.exec("node-a", [iptables, *argv])
    assert lab.connect("client-a", vip, 80).backend == "web-a1"
    from_node = lab.connect("node-a", vip, 80)  # needs the service-CIDR route
    assert (from_node.backend, from_node.source) == ("web-a1", lab.node_a.ipv4)
    hairpin = lab.connect("web-a1", vip, 80)
    assert hairpin.backend == "web-a1" and hairpin.source == lab.node_a.bridge4
    (seen,) = lab.probe("client", vip, 80, "tcp", src=lab.client.denied).seen
    assert (seen.where, str(seen.dst), seen.dport, seen.src) == ("web-a1", "10.244.1.11", 8080,
                                                                 lab.client.denied)


def test_probe_can_watch_a_node_interface(lab: Lab) -> None:
    result = lab.probe("client", "10.244.2.21", 5432, "udp", at=["node-b:eth0", "db-1", "db-0"])
    assert sorted(s.where for s in result.seen) == ["db-1", "node-b:eth0"]
