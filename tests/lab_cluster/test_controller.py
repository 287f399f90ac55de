"""The lab's EndpointSlice controller (pure): selectors, named ports, ready/serving/terminating."""

from __future__ import annotations

from typing import Any

from netkit.lab.cluster import controller, objects, plan

JSON = dict[str, Any]


def service(name: str = "web", selector: dict[str, str] | None = None, target: object = "http", **spec: Any) -> JSON:
    return {"kind": "Service", "metadata": {"name": name, "namespace": "default", "uid": "u1", "labels": {"x": "y"}},
            "spec": {"selector": {"app": "web"} if selector is None else selector, "clusterIP": "10.96.0.100",
                     "ports": [{"name": "http", "port": 80, "targetPort": target, "protocol": "TCP"}], **spec}}


def pods(ready: bool = True, terminating: str = "") -> list[JSON]:
    c = plan.initial("abc123", 2, 1, "iptables")
    return [objects.pod_object(c, p, ready=ready, terminating=terminating if p.name == "web-1" else "")
            for p in c.pods]


def test_a_selector_picks_the_matching_pods_with_their_named_port() -> None:
    wanted = controller.desired([service()], pods())
    (key, s), = wanted.items()
    assert key == ("default", "web-lab")
    assert s["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    assert [(e["addresses"], e["nodeName"]) for e in s["endpoints"]] == [
        (["10.244.1.10"], "node-1"), (["10.244.2.10"], "node-2")]
    labels = s["metadata"]["labels"]
    assert labels["kubernetes.io/service-name"] == "web" and labels["x"] == "y"
    assert labels[controller.MANAGED_BY] == controller.MANAGER


def test_terminating_pods_are_serving_but_not_ready_and_unready_pods_neither() -> None:
    eps = controller.desired([service()], pods(terminating="2026-01-01T00:00:00Z"))[("default", "web-lab")]["endpoints"]
    assert eps[0]["conditions"] == {"ready": False, "serving": True, "terminating": True}
    assert eps[1]["conditions"] == {"ready": True, "serving": True, "terminating": False}
    unready = controller.desired([service()], pods(ready=False))[("default", "web-lab")]["endpoints"]
    assert all(e["conditions"] == {"ready": False, "serving": False, "terminating": False} for e in unready)
    published = controller.desired([service(publishNotReadyAddresses=True)], pods(ready=False))
    assert all(e["conditions"]["ready"] for e in published[("default", "web-lab")]["endpoints"])


def test_no_match_is_one_empty_slice_and_a_missing_named_port_leaves_the_pod_out() -> None:
    empty = controller.desired([service(selector={"app": "nothing"})], pods())
    assert [s["endpoints"] for s in empty.values()] == [[]]
    missing = controller.desired([service(target="nope")], pods())
    assert [s["endpoints"] for s in missing.values()] == [[]]
    numeric = controller.desired([service(target=5432)], pods())
    assert [p["port"] for s in numeric.values() for p in s["ports"]] == [5432]


def test_no_selector_headless_and_external_name() -> None:
    assert controller.desired([service(selector={})], pods()) == {}
    assert controller.desired([service(type="ExternalName")], pods()) == {}
    headless = controller.desired([service(clusterIP="None")], pods())
    assert all(controller.HEADLESS in s["metadata"]["labels"] for s in headless.values())
    dns = controller.desired([objects.dns_service(plan.initial("abc123", 2, 1, "iptables"))], pods())
    (s,) = dns.values()
    assert sorted((p["protocol"], p["port"]) for p in s["ports"]) == [("TCP", 53), ("UDP", 53)]
    assert [e["targetRef"]["name"] for e in s["endpoints"]] == ["coredns-1", "coredns-2"]


def test_a_pod_naming_the_service_as_its_subdomain_gets_its_hostname_on_the_endpoint() -> None:
    """endpointutil.ShouldSetHostname: hostname set, and subdomain equal to the Service's name."""
    ps = {p["metadata"]["name"]: p for p in pods()}
    ps["web-1"]["spec"].update(hostname="web-a", subdomain="web")
    ps["web-2"]["spec"].update(hostname="web-b", subdomain="other")
    eps = controller.desired([service(clusterIP="None")], list(ps.values()))[("default", "web-lab")]["endpoints"]
    assert [(e["targetRef"]["name"], e.get("hostname")) for e in eps] == [("web-1", "web-a"), ("web-2", None)]
    ps["web-1"]["spec"].pop("hostname")  # a subdomain without a hostname names nothing
    eps = controller.desired([service(clusterIP="None")], list(ps.values()))[("default", "web-lab")]["endpoints"]
    assert [e.get("hostname") for e in eps] == [None, None]


def test_changes_touch_only_what_differs_and_stamp_the_trigger_time() -> None:
    wanted = controller.desired([service()], pods())
    create, update, delete = controller.changes([], wanted, "T1")
    assert [c["metadata"]["name"] for c in create] == ["web-lab"] and not update and not delete
    assert create[0]["metadata"]["annotations"] == {controller.TRIGGER: "T1"}
    current = [{**create[0], "metadata": {**create[0]["metadata"], "resourceVersion": "7"}}]
    assert controller.changes(current, wanted, "T2") == ([], [], [])
    moved = controller.desired([service()], pods(terminating="2026-01-01T00:00:00Z"))
    assert [u["metadata"]["annotations"][controller.TRIGGER] for u in controller.changes(current, moved, "T3")[1]] \
        == ["T3"]
    foreign = {"kind": "EndpointSlice", "metadata": {"name": "x", "namespace": "default", "labels": {}}}
    assert controller.changes([*current, foreign], {}, "T4")[2] == [("default", "web-lab")]


def test_the_sync_metric_is_read_labelled_or_not() -> None:
    from netkit.lab.cluster.nodehttp import SYNC_METRIC, metric

    text = (f"# HELP {SYNC_METRIC} x\n{SYNC_METRIC}{{ip_family=\"IPv4\"}} 1.5e+09\n"
            f"{SYNC_METRIC}{{ip_family=\"IPv6\"}} 1.4e+09\n{SYNC_METRIC}_other 7\n")
    assert metric(text, SYNC_METRIC) == 1.4e9
    assert metric(f"{SYNC_METRIC} 0.0\n", SYNC_METRIC) == 0.0 and metric("", SYNC_METRIC) is None


def test_a_dual_stack_service_gets_one_slice_per_family_with_the_pods_addresses_of_it() -> None:
    c = plan.initial("abc123", 2, 1, "iptables", ip_family="dual")
    ps = [objects.pod_object(c, p, ready=True) for p in c.pods]
    both = controller.desired([service(ipFamilies=["IPv4", "IPv6"])], ps)
    assert sorted(both) == [("default", "web-lab"), ("default", "web-lab-v6")]
    assert both[("default", "web-lab")]["addressType"] == "IPv4"
    six = both[("default", "web-lab-v6")]
    assert six["addressType"] == "IPv6"
    assert [e["addresses"] for e in six["endpoints"]] == [["fd00:244:0:1::10"], ["fd00:244:0:2::10"]]
    only6 = controller.desired([service(clusterIP="fd00:96::64", ipFamilies=["IPv6"])], ps)
    assert list(only6) == [("default", "web-lab-v6")]
    dns = objects.dns_service(c)["spec"]
    assert dns["clusterIPs"] == ["10.96.0.10", "fd00:96::a"] and dns["ipFamilyPolicy"] == "PreferDualStack"
    node = objects.node_object(c, c.nodes[0])
    assert node["spec"]["podCIDRs"] == ["10.244.1.0/24", "fd00:244:0:1::/64"]
    assert [a["address"] for a in node["status"]["addresses"]] == ["192.0.2.11", "2001:db8:2::11", "node-1"]
