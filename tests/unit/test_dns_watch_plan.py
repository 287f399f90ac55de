"""`netkit dns` watches like CoreDNS's kubernetes plugin, not like kube-proxy (pure: the watch plan)."""

from __future__ import annotations

from netkit.sources.kube import watch_plan


def test_dns_watches_everything_it_names_and_pods_only_when_asked() -> None:
    plan = {s.resource: s for s in watch_plan("", endpoint_slices=True, dns=True)}
    assert list(plan) == ["services", "endpointslices", "namespaces"]
    assert all(s.label_selector == "" and s.field_selector == "" for s in plan.values())  # headless too
    with_pods = [s.resource for s in watch_plan("", endpoint_slices=True, pods=True, dns=True)]
    assert with_pods == ["services", "endpointslices", "namespaces", "pods"]
    legacy = [s.resource for s in watch_plan("", endpoint_slices=False, dns=True)]
    assert legacy == ["services", "endpoints", "namespaces"]
    proxy = watch_plan("node-a", endpoint_slices=True)
    assert "namespaces" not in [s.resource for s in proxy] and all(s.label_selector for s in proxy[:2])
