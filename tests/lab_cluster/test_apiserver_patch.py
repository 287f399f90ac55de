"""The test API server's PATCH (what a second `kubectl apply` sends), pure: merge patch and the
strategic merge patch subset, with kubectl's own patch shapes."""

from __future__ import annotations

from netkit.testing.patch import merge_patch, strategic_merge_patch

SVC = {"metadata": {"name": "web", "labels": {"a": "1", "b": "2"}},
       "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080},
                                                      {"name": "https", "port": 443}]}}


def test_kubectl_applys_port_change() -> None:
    patch = {"spec": {"$setElementOrder/ports": [{"port": 81}, {"port": 443}],
                      "ports": [{"name": "http", "port": 81, "targetPort": 8080}, {"$patch": "delete", "port": 80}]}}
    out = strategic_merge_patch(SVC, patch)
    assert out["spec"]["ports"] == [{"name": "http", "port": 81, "targetPort": 8080}, {"name": "https", "port": 443}]
    assert out["spec"]["selector"] == {"app": "web"} and SVC["spec"]["ports"][0]["port"] == 80  # not mutated


def test_null_deletes_maps_merge_and_unkeyed_lists_are_replaced() -> None:
    out = strategic_merge_patch(SVC, {"metadata": {"labels": {"a": None, "c": "3"}},
                                      "spec": {"selector": {"$patch": "replace", "app": "db"}}})
    assert out["metadata"]["labels"] == {"b": "2", "c": "3"} and out["spec"]["selector"] == {"app": "db"}
    out = strategic_merge_patch({"spec": {"externalIPs": ["1.1.1.1", "2.2.2.2"]}},
                                {"spec": {"externalIPs": ["3.3.3.3"]}})
    assert out["spec"]["externalIPs"] == ["3.3.3.3"]


def test_merge_patch_replaces_lists() -> None:
    out = merge_patch(SVC, {"spec": {"ports": [{"port": 1}]}, "metadata": {"labels": {"b": None}}})
    assert out["spec"]["ports"] == [{"port": 1}] and out["metadata"]["labels"] == {"a": "1"}
