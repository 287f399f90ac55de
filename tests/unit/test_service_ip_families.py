"""The test API server settles a Service's IP family fields as kube-apiserver does, on single-stack
and dual-stack service ranges: the table of what it accepts (and allocates) and what it refuses,
in kube-apiserver's words (pkg/registry/core/service/storage alloc.go and its tests,
pkg/apis/core/validation)."""

from __future__ import annotations

import copy
from ipaddress import ip_network
from typing import Any

import pytest

from netkit.testing.apistore import ApiError, Store, resource_for_kind

SERVICES = resource_for_kind("Service")
CLUSTERS = {
    "v4": (ip_network("10.96.0.0/16"),),
    "v6": (ip_network("fd00:96::/112"),),
    "dual": (ip_network("10.96.0.0/16"), ip_network("fd00:96::/112")),
    "dual6": (ip_network("fd00:96::/112"), ip_network("10.96.0.0/16")),
}
V4, V6 = "10.96.0.100", "fd00:96::64"  # the first addresses each range hands out


def svc(name: str = "s", **spec: Any) -> dict[str, Any]:
    spec.setdefault("selector", {"app": "web"})
    return {"kind": "Service", "metadata": {"name": name, "namespace": "default"},
            "spec": {"ports": [{"port": 80}], **spec}}


def families(spec: dict[str, Any]) -> tuple[str, list[str], list[str]]:
    return spec["ipFamilyPolicy"], spec["ipFamilies"], spec["clusterIPs"]


ACCEPTED = [
    # cluster, spec → (policy, ipFamilies, clusterIPs)
    ("v4", {}, ("SingleStack", ["IPv4"], [V4])),
    ("v6", {}, ("SingleStack", ["IPv6"], [V6])),
    ("dual", {}, ("SingleStack", ["IPv4"], [V4])),
    ("dual6", {}, ("SingleStack", ["IPv6"], [V6])),
    ("v4", {"ipFamilyPolicy": "PreferDualStack"}, ("PreferDualStack", ["IPv4"], [V4])),
    ("dual", {"ipFamilyPolicy": "PreferDualStack"}, ("PreferDualStack", ["IPv4", "IPv6"], [V4, V6])),
    ("dual", {"ipFamilyPolicy": "RequireDualStack"}, ("RequireDualStack", ["IPv4", "IPv6"], [V4, V6])),
    ("dual6", {"ipFamilyPolicy": "RequireDualStack"}, ("RequireDualStack", ["IPv6", "IPv4"], [V6, V4])),
    ("dual", {"ipFamilies": ["IPv6"]}, ("SingleStack", ["IPv6"], [V6])),
    ("dual", {"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv6"]},
     ("RequireDualStack", ["IPv6", "IPv4"], [V6, V4])),
    ("dual", {"ipFamilyPolicy": "PreferDualStack", "ipFamilies": ["IPv6", "IPv4"]},
     ("PreferDualStack", ["IPv6", "IPv4"], [V6, V4])),
    ("dual", {"clusterIP": "fd00:96::7"}, ("SingleStack", ["IPv6"], ["fd00:96::7"])),
    ("dual", {"clusterIPs": ["10.96.0.7", "fd00:96::7"], "ipFamilyPolicy": "RequireDualStack"},
     ("RequireDualStack", ["IPv4", "IPv6"], ["10.96.0.7", "fd00:96::7"])),
    ("dual", {"clusterIP": "10.96.0.7", "ipFamilyPolicy": "PreferDualStack"},
     ("PreferDualStack", ["IPv4", "IPv6"], ["10.96.0.7", V6])),
    # headless: no address; with a selector as any Service, without one dual by default, on any cluster
    ("dual", {"clusterIP": "None", "ipFamilyPolicy": "PreferDualStack"},
     ("PreferDualStack", ["IPv4", "IPv6"], ["None"])),
    ("dual", {"clusterIP": "None"}, ("SingleStack", ["IPv4"], ["None"])),
    ("v4", {"clusterIP": "None", "selector": None}, ("RequireDualStack", ["IPv4", "IPv6"], ["None"])),
    ("v6", {"clusterIP": "None", "selector": None, "ipFamilyPolicy": "SingleStack"},
     ("SingleStack", ["IPv6"], ["None"])),
]


@pytest.mark.parametrize(("cluster", "spec", "want"), ACCEPTED)
def test_accepted_services_get_kube_apiservers_families_and_addresses(
        cluster: str, spec: dict[str, Any], want: tuple[str, list[str], list[str]]) -> None:
    stored = Store(service_cidrs=CLUSTERS[cluster]).create(svc(**spec))["spec"]
    assert families(stored) == want
    assert stored["clusterIP"] == want[2][0]


REFUSED = [
    ("v4", {"ipFamilyPolicy": "RequireDualStack"},
     'spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services'),
    ("v6", {"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv6"]},
     'spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services'),
    ("v4", {"ipFamilies": ["IPv6"]}, 'spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster'),
    ("v4", {"clusterIP": "fd00:96::5"},
     'spec.clusterIPs[0]: Invalid value: []string{"fd00:96::5"}: IPv6 is not configured on this cluster'),
    ("dual", {"ipFamilies": ["IPv4", "IPv6"]},
     "spec.ipFamilyPolicy: Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' "
     "when multiple IP families are specified"),
    ("dual", {"clusterIPs": ["10.96.0.7", "fd00:96::7"]},
     "spec.ipFamilyPolicy: Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' "
     "when multiple cluster IPs are specified"),
    ("dual", {"clusterIPs": ["10.96.0.7", "10.96.0.8"], "ipFamilyPolicy": "RequireDualStack"},
     'spec.clusterIPs: Invalid value: []string{"10.96.0.7", "10.96.0.8"}: may specify no more than one IP for '
     "each IP family"),
    ("dual", {"clusterIPs": ["10.96.0.7"], "ipFamilies": ["IPv6"]},
     'spec.clusterIPs[0]: Invalid value: "10.96.0.7": expected an IPv6 value as indicated by `ipFamilies[0]`'),
    ("dual", {"clusterIP": "10.96.0.7", "clusterIPs": ["10.96.0.8"]},
     'spec.clusterIPs: Invalid value: []string{"10.96.0.8"}: first value must match `clusterIP`'),
    ("dual", {"clusterIPs": ["None", "10.96.0.8"], "ipFamilyPolicy": "RequireDualStack"},
     "spec.clusterIPs: Invalid value: []string{\"None\", \"10.96.0.8\"}: 'None' must be the first and only value"),
    ("dual", {"clusterIP": "10.96.0.300"},
     'spec.clusterIPs[0]: Invalid value: "10.96.0.300": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)'),
    ("dual", {"ipFamilyPolicy": "DualStack"}, 'spec.ipFamilyPolicy: Unsupported value: "DualStack": supported '
                                             'values: "PreferDualStack", "RequireDualStack", "SingleStack"'),
    ("dual", {"ipFamilies": ["IPv4", "IPv4"], "ipFamilyPolicy": "PreferDualStack"},
     'spec.ipFamilies[1]: Duplicate value: "IPv4"'),
    ("v4", {"clusterIP": "10.97.0.1"},
     'spec.clusterIPs: Invalid value: []string{"10.97.0.1"}: failed to allocate IP 10.97.0.1: the provided IP '
     "(10.97.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/16"),
]


@pytest.mark.parametrize(("cluster", "spec", "message"), REFUSED)
def test_refused_services_in_kube_apiservers_words(cluster: str, spec: dict[str, Any], message: str) -> None:
    store = Store(service_cidrs=CLUSTERS[cluster])
    with pytest.raises(ApiError) as err:
        store.create(svc(**spec))
    assert err.value.code == 422
    assert err.value.message == f'Service "s" is invalid: {message}'
    assert not store.objects[SERVICES] and not store.allocator.ips  # nothing stored, nothing held


def test_two_problems_are_one_refusal_listing_both() -> None:
    with pytest.raises(ApiError) as err:
        Store(service_cidrs=CLUSTERS["v4"]).create(svc(ipFamilyPolicy="RequireDualStack", ipFamilies=["IPv6"]))
    assert err.value.message == (
        'Service "s" is invalid: [spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not '
        'configured for dual-stack services, spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this '
        "cluster]")
    assert [c["field"] for c in err.value.causes] == ["spec.ipFamilyPolicy", "spec.ipFamilies[0]"]


def update(store: Store, name: str, **changes: Any) -> dict[str, Any]:
    obj = store.get(SERVICES, "default", name)
    for key, value in changes.items():
        if value is None:
            obj["spec"].pop(key, None)
        else:
            obj["spec"][key] = value
    return store.update(copy.deepcopy(obj))["spec"]


def test_an_update_upgrades_to_dual_stack_and_downgrades_with_single_stack_only() -> None:
    store = Store(service_cidrs=CLUSTERS["dual"])
    store.create(svc("a"))
    up = update(store, "a", ipFamilyPolicy="PreferDualStack")
    assert families(up) == ("PreferDualStack", ["IPv4", "IPv6"], [V4, V6])
    with pytest.raises(ApiError) as err:  # releasing the secondary needs SingleStack
        update(store, "a", clusterIPs=[V4], ipFamilies=["IPv4"])
    assert err.value.message == (
        'Service "a" is invalid: [spec.ipFamilyPolicy: Invalid value: "PreferDualStack": must be set to '
        "'SingleStack' when releasing the secondary clusterIP, spec.ipFamilyPolicy: Invalid value: "
        "\"PreferDualStack\": must be set to 'SingleStack' when releasing the secondary ipFamily]")
    down = update(store, "a", ipFamilyPolicy="SingleStack")  # addresses unchanged: SingleStack says it all
    assert families(down) == ("SingleStack", ["IPv4"], [V4])
    assert store.create(svc("b", clusterIP=V6))["spec"]["clusterIPs"] == [V6]  # released: free again


def test_an_update_never_changes_the_primary_address_or_family() -> None:
    store = Store(service_cidrs=CLUSTERS["dual"])
    store.create(svc("a", ipFamilyPolicy="RequireDualStack"))
    with pytest.raises(ApiError) as err:
        update(store, "a", clusterIP="10.96.0.9", clusterIPs=["10.96.0.9", V6])
    assert err.value.message == ('Service "a" is invalid: spec.clusterIPs[0]: Invalid value: '
                                 '[]string{"10.96.0.9", "fd00:96::64"}: may not change once set')
    store.create(svc("single"))
    with pytest.raises(ApiError) as err:
        update(store, "single", ipFamilies=["IPv6"], clusterIP=None, clusterIPs=None)
    assert err.value.message == ('Service "single" is invalid: spec.ipFamilies[0]: Invalid value: '
                                 '[]core.IPFamily{"IPv6"}: may not change once set')


def test_an_update_that_omits_the_family_fields_keeps_them() -> None:
    """kubectl apply of a manifest without clusterIPs/ipFamilies/ipFamilyPolicy keeps what was allocated."""
    store = Store(service_cidrs=CLUSTERS["dual"])
    store.create(svc("a", ipFamilyPolicy="RequireDualStack"))
    kept = update(store, "a", clusterIP=None, clusterIPs=None, ipFamilies=None, ipFamilyPolicy=None)
    assert families(kept) == ("RequireDualStack", ["IPv4", "IPv6"], [V4, V6])


def test_deleting_a_dual_stack_service_frees_both_addresses() -> None:
    store = Store(service_cidrs=CLUSTERS["dual"])
    store.create(svc("a", ipFamilyPolicy="RequireDualStack"))
    store.delete(SERVICES, "default", "a")
    again = store.create(svc("b", clusterIPs=[V4, V6], ipFamilyPolicy="RequireDualStack"))["spec"]
    assert again["clusterIPs"] == [V4, V6]


def test_without_service_ranges_anything_is_stored_as_given() -> None:
    """The default Store (tests of odd objects): families follow the first address, nothing is checked."""
    spec = Store().create(svc(clusterIPs=["10.0.0.3", "10::3"], ipFamilies=["IPv4", "IPv6"],
                              ipFamilyPolicy="RequireDualStack"))["spec"]
    assert families(spec) == ("RequireDualStack", ["IPv4", "IPv6"], ["10.0.0.3", "10::3"])
