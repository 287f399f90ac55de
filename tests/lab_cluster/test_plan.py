"""The cluster plan (pure): addresses, placement, scale and drain, the record round trip, wiring."""

from __future__ import annotations

import re
from ipaddress import IPv4Address

import pytest

from netkit.lab.cluster import objects, plan, wiring
from netkit.lab.cluster.lifecycle import names_path
from netkit.lab.cluster.plan import APP_DEPLOY, DNS_DEPLOY


def test_initial_cluster_spreads_pods_round_the_nodes() -> None:
    c = plan.initial("abc123", 3, 2, "iptables")
    assert [n.name for n in c.nodes] == ["node-1", "node-2", "node-3"]
    assert [str(n.ip) for n in c.nodes] == ["192.0.2.11", "192.0.2.12", "192.0.2.13"]
    web = c.pods_of(APP_DEPLOY)
    assert [(p.name, p.node) for p in web[:3]] == [("web-1", "node-1"), ("web-2", "node-2"), ("web-3", "node-3")]
    assert len(web) == 6 and {p.node for p in web[3:]} == {"node-1", "node-2", "node-3"}
    dns = c.pods_of(DNS_DEPLOY)
    assert [(p.node, p.namespace, p.labels) for p in dns] == [
        ("node-1", "kube-system", {"k8s-app": "kube-dns"}), ("node-2", "kube-system", {"k8s-app": "kube-dns"})]
    ips = [p.ip for p in c.pods]
    assert len(set(ips)) == len(ips)
    assert all(p.ip in c.node(p.node).pod_cidr for p in c.pods)
    assert len({p.veth for p in c.pods_on("node-1")}) == len(c.pods_on("node-1"))
    assert all(ns.startswith("nkcabc123-") for ns in c.namespaces)


@pytest.mark.parametrize(("nodes", "per_node"), [(0, 1), (201, 1), (3, -1)])
def test_bad_sizes_are_refused(nodes: int, per_node: int) -> None:
    with pytest.raises(ValueError):
        plan.initial("abc123", nodes, per_node, "iptables")


def test_scale_down_takes_from_the_most_loaded_node_and_up_reuses_slots() -> None:
    c = plan.initial("abc123", 3, 2, "iptables")
    c2, added, doomed = plan.scale(c, APP_DEPLOY, 4)
    assert added == () and len(doomed) == 2
    c2 = plan.without(c2, doomed)
    per_node = sorted(len([p for p in c2.pods_of(APP_DEPLOY) if p.node == n.name]) for n in c2.nodes)
    assert per_node == [1, 1, 2]
    c3, added, _ = plan.scale(c2, APP_DEPLOY, 5)
    assert [p.name for p in added] == ["web-7"]  # names are never reused
    assert added[0].ip not in {p.ip for p in c2.pods}


def test_drain_moves_every_pod_off_the_node_and_keeps_it_empty() -> None:
    c = plan.initial("abc123", 3, 1, "iptables")
    c2, added, evicted = plan.drain(c, "node-2")
    assert {p.node for p in evicted} == {"node-2"} and len(evicted) == 2  # web-2 and coredns-2
    assert all(p.node != "node-2" for p in added)
    assert sorted(p.deploy for p in added) == sorted(p.deploy for p in evicted)
    c3, more, _ = plan.scale(plan.without(c2, evicted), APP_DEPLOY, 6)
    assert all(p.node != "node-2" for p in more)
    only_node_3 = plan.drain(c2, "node-1")[0]
    with pytest.raises(ValueError, match="nowhere"):
        plan.drain(only_node_3, "node-3")


def test_the_record_round_trips() -> None:
    c = plan.drain(plan.initial("abc123", 2, 2, "nftables"), "node-1")[0]
    assert plan.from_json(plan.to_json(c)) == c


def test_wiring_routes_every_other_pod_cidr_via_its_node() -> None:
    c = plan.initial("abc123", 3, 1, "iptables")
    routes = wiring.node_routes(c, c.node("node-2"))
    assert routes == ["route add 10.244.1.0/24 via 192.0.2.11", "route add 10.244.3.0/24 via 192.0.2.13",
                      "route add default via 192.0.2.1"]
    links = wiring.link_batches(c)
    assert "link add n1 type veth peer name eth0 netns nkcabc123-node-1" in links["nkcabc123-net"]
    assert not any("netns" not in line and "veth" in line for line in links["nkcabc123-net"])


def test_resolv_conf_has_the_kubernetes_search_path() -> None:
    pod = plan.initial("abc123", 1, 1, "iptables").pods_of(APP_DEPLOY)[0]
    assert wiring.resolv_conf(pod, "10.96.0.10", "cluster.local") == (
        "nameserver 10.96.0.10\nsearch default.svc.cluster.local svc.cluster.local cluster.local\n"
        "options ndots:5\n")
    assert pod.ip == IPv4Address("10.244.1.10")


def test_namespace_names_say_which_state_directory_records_the_cluster() -> None:
    default = plan.initial("abc123", 1, 1, "iptables")
    assert default.net_netns == "nkcabc123-net" and plan.netns_pattern("nkc").match(default.net_netns)
    other = plan.netns_prefix("/tmp/x/state", "/run/netkit-lab")
    assert re.fullmatch(r"nkc[0-9a-f]{6}\.", other) and other != plan.netns_prefix("/tmp/y/state", "/run/netkit-lab")
    tagged = plan.initial("abc123", 1, 1, "iptables", other)
    assert all(ns.startswith(other + "abc123-") for ns in tagged.namespaces)
    assert plan.from_json(plan.to_json(tagged)) == tagged
    # neither prefix's pattern matches the other's names, nor a name without a cluster id
    assert not any(plan.netns_pattern("nkc").match(ns) for ns in tagged.namespaces)
    assert not any(plan.netns_pattern(other).match(ns) for ns in default.namespaces)
    assert not plan.netns_pattern(other).match(other + "notours")
    assert plan.netns_pattern(other, "abc123").match(tagged.net_netns)


@pytest.mark.parametrize(("cmdline", "named"), [
    (b"python\0-m\0netkit.lab.cluster.controlplane\0/run/netkit-lab/clusters/abc123\0", True),
    (b"ip\0netns\0exec\0ns\0netkit\0run\0--config\0/run/netkit-lab/clusters/abc123/nodes/n/c.conf\0", True),
    (b"netkit\0dns\0--kubeconfig=/run/netkit-lab/clusters/abc123/dns/k.conf\0", True),
    (b"netkit\0run\0--config\0/run/netkit-lab/clusters/abc1234/c.conf\0", False),  # another cluster
    (b"netkit\0run\0--config\0/tmp/t/run/netkit-lab/clusters/abc123/c.conf\0", False),  # another state dir
    (b"grep\0abc123\0", False),
])
def test_a_process_belongs_to_a_cluster_when_an_argument_is_a_path_in_its_directory(cmdline: bytes,
                                                                                    named: bool) -> None:
    assert names_path(cmdline, "/run/netkit-lab/clusters/abc123") is named


def test_dns_pods_default_to_two_and_can_be_set() -> None:
    def dns(c: plan.Cluster) -> list[str]:
        return [p.node for p in c.pods_of(DNS_DEPLOY)]

    assert dns(plan.initial("abc123", 3, 0, "iptables")) == ["node-1", "node-2"]
    assert dns(plan.initial("abc123", 1, 0, "iptables")) == ["node-1"]
    assert dns(plan.initial("abc123", 2, 0, "ipvs", dns_pods=1)) == ["node-1"]
    assert dns(plan.initial("abc123", 2, 0, "ipvs", dns_pods=3)) == ["node-1", "node-2", "node-1"]
    with pytest.raises(ValueError, match="--dns-pods"):
        plan.initial("abc123", 2, 0, "ipvs", dns_pods=0)


def test_a_dual_stack_cluster_wires_both_families_and_an_ipv6_one_only_ipv6() -> None:
    dual = plan.initial("abc123", 2, 1, "iptables", ip_family="dual")
    assert plan.from_json(plan.to_json(dual)) == dual
    node = dual.node("node-2")
    assert wiring.node_routes(dual, node) == [
        "route add 10.244.1.0/24 via 192.0.2.11", "route add fd00:244:0:1::/64 via 2001:db8:2::11",
        "route add default via 192.0.2.1", "route add default via 2001:db8:2::1"]
    addresses = wiring.address_batches(dual)[node.netns]
    assert "addr add 2001:db8:2::12/64 dev eth0 nodad" in addresses and "addr add 192.0.2.12/24 dev eth0" in addresses
    pod = dual.pods_of(APP_DEPLOY)[1]
    assert wiring.pod_addresses(dual, pod)[:2] == ["addr add 10.244.2.10/24 dev eth0",
                                                   "addr add fd00:244:0:2::10/64 dev eth0 nodad"]
    assert dual.families == ("IPv4", "IPv6") and [str(c) for c in dual.cluster_cidrs] == ["10.244.0.0/16",
                                                                                          "fd00:244::/48"]
    six = plan.initial("abc123", 2, 1, "iptables", ip_family="ipv6")
    assert six.families == ("IPv6",) and [str(ip) for ip in six.dns_ips] == ["fd00:96::a"]
    assert not any("192.0.2" in line or "10.244" in line for lines in wiring.address_batches(six).values()
                   for line in lines)
    assert wiring.pod_routes(six, six.pods_of(APP_DEPLOY)[0]) == ["route add default via fd00:244:0:1::1"]
    with pytest.raises(ValueError, match="--ip-family"):
        plan.initial("abc123", 1, 1, "iptables", ip_family="ipv5")


def test_a_pod_template_hostname_and_subdomain_reach_the_pod_object_and_survive_a_drain() -> None:
    c, added, _ = plan.scale(plan.initial("abc123", 2, 1, "iptables"), "querier", 1, "dns-querier-2",
                             "dns-test-service-2")
    (pod,) = added
    assert (pod.hostname, pod.subdomain) == ("dns-querier-2", "dns-test-service-2")
    spec = objects.pod_object(c, pod)["spec"]
    assert (spec["hostname"], spec["subdomain"]) == ("dns-querier-2", "dns-test-service-2")
    assert "hostname" not in objects.pod_object(c, c.pods_of(APP_DEPLOY)[0])["spec"]
    assert plan.from_json(plan.to_json(c)) == c
    _, moved, _ = plan.drain(c, pod.node)
    assert [(p.deploy, p.hostname, p.subdomain) for p in moved if p.deploy == "querier"] == [
        ("querier", "dns-querier-2", "dns-test-service-2")]


def test_a_pod_that_is_never_ready_says_so_in_its_object_and_record() -> None:
    c, (pod,), _ = plan.scale(plan.initial("abc123", 2, 1, "iptables"), "unready", 1, unready=True)
    assert pod.unready
    annotations = objects.pod_object(c, pod)["metadata"]["annotations"]
    assert annotations[objects.NEVER_READY_ANNOTATION] == "true"
    web = objects.pod_object(c, c.pods_of(APP_DEPLOY)[0])
    assert objects.NEVER_READY_ANNOTATION not in web["metadata"]["annotations"]
    assert plan.from_json(plan.to_json(c)) == c
