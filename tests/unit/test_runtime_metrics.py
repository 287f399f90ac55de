"""The metrics page compared name by name with kube-proxy's: names, types, labels and buckets
(kube-proxy's metrics reference for pkg/proxy/metrics, v1.34), per mode, plus the process
collector every Go binary exports."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from netkit.model import IPFamily, build
from netkit.rules.iptables.names import NFACCT_COUNTERS
from netkit.rules.iptables.plan import count_rules, plan_rules
from netkit.runtime.conntrack import VersionPass
from netkit.runtime.metrics import (
    KUBE_PROXY_METRICS,
    PROGRAMMING_BUCKETS,
    Metrics,
    no_local_endpoints,
)
from tests.factories import endpoint, node, objects, service, slice_

# kube-proxy's metrics as its reference documentation lists them: name → (type, labels).
KUBE_PROXY = {
    "kubeproxy_conntrack_reconciler_deleted_entries_total": ("counter", ("ip_family",)),
    "kubeproxy_conntrack_reconciler_sync_duration_seconds": ("histogram", ("ip_family",)),
    "kubeproxy_iptables_ct_state_invalid_dropped_packets_total": ("counter", ()),
    "kubeproxy_iptables_localhost_nodeports_accepted_packets_total": ("counter", ()),
    "kubeproxy_network_programming_duration_seconds": ("histogram", ("ip_family",)),
    "kubeproxy_proxy_healthz_total": ("counter", ("code",)),
    "kubeproxy_proxy_livez_total": ("counter", ("code",)),
    "kubeproxy_sync_full_proxy_rules_duration_seconds": ("histogram", ("ip_family",)),
    "kubeproxy_sync_partial_proxy_rules_duration_seconds": ("histogram", ("ip_family",)),
    "kubeproxy_sync_proxy_rules_duration_seconds": ("histogram", ("ip_family",)),
    "kubeproxy_sync_proxy_rules_endpoint_changes_pending": ("gauge", ()),
    "kubeproxy_sync_proxy_rules_endpoint_changes_total": ("counter", ()),
    "kubeproxy_sync_proxy_rules_iptables_last": ("gauge", ("ip_family", "table")),
    "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total": ("counter", ("ip_family",)),
    "kubeproxy_sync_proxy_rules_iptables_restore_failures_total": ("counter", ("ip_family",)),
    "kubeproxy_sync_proxy_rules_iptables_total": ("gauge", ("ip_family", "table")),
    "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds": ("gauge", ("ip_family",)),
    "kubeproxy_sync_proxy_rules_last_timestamp_seconds": ("gauge", ("ip_family",)),
    "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total": ("counter", ("ip_family",)),
    "kubeproxy_sync_proxy_rules_nftables_sync_failures_total": ("counter", ("ip_family",)),
    "kubeproxy_sync_proxy_rules_no_local_endpoints_total": ("gauge", ("ip_family", "traffic_policy")),
    "kubeproxy_sync_proxy_rules_service_changes_pending": ("gauge", ()),
    "kubeproxy_sync_proxy_rules_service_changes_total": ("counter", ()),
}
# What kube-proxy's RegisterMetrics adds per mode on top of the common ones.
PER_MODE = {
    "iptables": {"kubeproxy_sync_full_proxy_rules_duration_seconds",
                 "kubeproxy_sync_partial_proxy_rules_duration_seconds",
                 "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
                 "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
                 "kubeproxy_sync_proxy_rules_iptables_total", "kubeproxy_sync_proxy_rules_iptables_last",
                 "kubeproxy_iptables_ct_state_invalid_dropped_packets_total",
                 "kubeproxy_iptables_localhost_nodeports_accepted_packets_total"},
    "ipvs": {"kubeproxy_sync_proxy_rules_iptables_restore_failures_total"},
    "nftables": {"kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
                 "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total"},
}
PROCESS = ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
           "process_start_time_seconds", "process_open_fds", "process_max_fds")


def test_the_table_is_kube_proxys_list() -> None:
    assert {s.name: (s.type.value, s.labels) for s in KUBE_PROXY_METRICS} == KUBE_PROXY
    assert all(s.note for s in KUBE_PROXY_METRICS if not s.exported)  # every omission says why


def _page(m: Metrics) -> dict[str, tuple[str, set[str], list[dict[str, str]]]]:
    out = {}
    for fam in text_string_to_metric_families(m.render().decode()):
        name = fam.name + "_total" if fam.type == "counter" else fam.name
        labels = {k for s in fam.samples for k in s.labels if k not in ("le",)}
        out[name] = (fam.type, labels, [s.labels for s in fam.samples])
    return out


@pytest.mark.parametrize("mode", ["iptables", "ipvs", "nftables"])
def test_the_page_has_kube_proxys_metrics_for_the_mode(mode: str) -> None:
    m = Metrics(mode, (IPFamily.IPV4, IPFamily.IPV6))
    m.count_probe("healthz", 200)
    m.count_probe("livez", 503)
    m.no_local_endpoints(build(objects(node()), "node-a", ()))
    if mode == "iptables":
        m.iptables_rules(IPFamily.IPV4, {"nat": 3}, {"nat": 1})
    m.nfacct(NFACCT_COUNTERS, {"ct_state_invalid_dropped_pkts": 7, "localhost_nps_accepted_pkts": 0}.get)
    page = _page(m)
    registered = {s.name for s in KUBE_PROXY_METRICS if s.exported and mode in s.modes}
    mode_only = set().union(*PER_MODE.values())
    assert registered == {n for n in KUBE_PROXY if n not in mode_only and
                          n in {s.name for s in KUBE_PROXY_METRICS if s.exported}} | PER_MODE[mode]
    kube = {n for n in page if n.startswith("kubeproxy_")}
    assert kube == registered
    for name in registered:
        typ, labels = KUBE_PROXY[name]
        assert page[name][0] == typ, name
        assert page[name][1] == set(labels), name
    fam = page["kubeproxy_sync_proxy_rules_last_timestamp_seconds"]
    assert {s["ip_family"] for s in fam[2]} == {"IPv4", "IPv6"}  # both families from the start
    assert {s["code"] for s in page["kubeproxy_proxy_healthz_total"][2]} == {"200"}
    for name in PROCESS:
        assert name in page, name


def test_network_programming_buckets_are_kube_proxys() -> None:
    expected = [0.25, 0.5, *range(1, 60), *range(60, 120, 5), *range(120, 301, 30)]
    assert list(PROGRAMMING_BUCKETS) == [float(b) for b in expected]
    fam = _page(Metrics())["kubeproxy_network_programming_duration_seconds"]
    les = [s["le"] for s in fam[2] if "le" in s and s["ip_family"] == "IPv4"]
    assert les[:3] == ["0.25", "0.5", "1.0"] and les[-2:] == ["300.0", "+Inf"]


@pytest.mark.parametrize("name", ["kubeproxy_conntrack_reconciler_sync_duration_seconds",
                                  "kubeproxy_sync_proxy_rules_duration_seconds",
                                  "kubeproxy_sync_full_proxy_rules_duration_seconds",
                                  "kubeproxy_sync_partial_proxy_rules_duration_seconds"])
def test_duration_buckets_are_kube_proxys(name: str) -> None:
    """pkg/proxy/metrics gives these histograms ExponentialBuckets(0.001, 2, 15): 1 ms doubling to
    16.384 s, then +Inf; a dashboard's quantiles over them mean the same as over kube-proxy's."""
    fam = _page(Metrics("iptables"))[name]
    les = [s["le"] for s in fam[2] if "le" in s and s["ip_family"] == "IPv4"]
    assert les[-1] == "+Inf"
    assert [float(le) for le in les[:-1]] == pytest.approx([0.001 * 2 ** k for k in range(15)])


def test_no_local_endpoints_counts_like_kube_proxy() -> None:
    def svc(name: str, ip: str, **spec: object) -> dict[str, object]:
        port = {"name": "http", "port": 80, "targetPort": 8080}
        if spec.get("type") == "NodePort":
            port["nodePort"] = 30080
        return service(name, ip=ip, ports=[port], **spec)
    docs = [node(),
            svc("itp", "10.96.0.1", internalTrafficPolicy="Local"),
            slice_("itp", endpoints=[endpoint("10.244.2.1", node="node-b")]),
            svc("etp", "10.96.0.2", type="NodePort", externalTrafficPolicy="Local"),
            slice_("etp", endpoints=[endpoint("10.244.2.2", node="node-b")]),
            svc("local-ok", "10.96.0.3", type="NodePort", externalTrafficPolicy="Local"),
            slice_("local-ok", endpoints=[endpoint("10.244.1.3", node="node-a")]),
            svc("none", "10.96.0.4", internalTrafficPolicy="Local"),  # no endpoints at all: REJECT, not counted
            slice_("none", endpoints=[])]
    state = build(objects(*docs), "node-a", ())
    assert no_local_endpoints(state, IPFamily.IPV4) == (1, 1)
    assert no_local_endpoints(state, IPFamily.IPV6) == (0, 0)


def test_rule_counts_per_table_and_written() -> None:
    class RS:
        def __init__(self, tables: dict[str, dict[str, tuple[str, ...]]]) -> None:
            self.tables = tables

    class Plan:
        write = {"nat": {"KUBE-SVC-X": ("-j D", "-j E")}, "filter": {"KUBE-FW": ("-j F",)}}
        delete = {"nat": ("KUBE-SEP-OLD",)}

    before = RS({"nat": {"KUBE-SERVICES": ("-j A", "-j B"), "KUBE-SVC-X": ("-j C",), "KUBE-SEP-OLD": ("-j G",)}})
    after = RS({"nat": {"KUBE-SERVICES": ("-j A", "-j B"), "KUBE-SVC-X": ("-j D", "-j E")},
                "filter": {"KUBE-FW": ("-j F",)}})
    assert count_rules(before) == {"nat": 4}
    total, last = plan_rules(Plan(), before, count_rules(before))
    assert total == count_rules(after) == {"nat": 4, "filter": 1}
    assert last == {"nat": 2, "filter": 1}


def test_nfacct_metrics_only_for_counters_that_exist_read_at_scrape_time() -> None:
    counts = {"ct_state_invalid_dropped_pkts": 3}
    m = Metrics("iptables", (IPFamily.IPV4,), process=False)
    m.nfacct(("ct_state_invalid_dropped_pkts",), counts.get)  # localhost_nps_accepted_pkts failed to be created
    page = m.render().decode()
    assert "kubeproxy_iptables_ct_state_invalid_dropped_packets_total 3.0" in page
    assert "localhost_nodeports" not in page
    counts["ct_state_invalid_dropped_pkts"] = 5
    assert "kubeproxy_iptables_ct_state_invalid_dropped_packets_total 5.0" in m.render().decode()
    counts.clear()  # a failed read leaves the sample out, as kube-proxy's collector
    assert "kubeproxy_iptables_ct_state_invalid_dropped_packets_total " not in m.render().decode()


def test_no_nfacct_metrics_outside_iptables_mode() -> None:
    m = Metrics("nftables", (IPFamily.IPV4,), process=False)
    m.nfacct(NFACCT_COUNTERS, lambda _: 1)
    assert "kubeproxy_iptables_" not in m.render().decode()


def test_conntrack_reconciler_metrics_count_each_pass_per_family() -> None:
    """kube-proxy's CleanStaleEntries observes its duration and adds what it deleted, per IP family
    it reconciled; netkit does so per pass of its conntrack worker and family it read."""
    m = Metrics("nftables")
    m.conntrack_reconciled([VersionPass(4, 3, 0.004), VersionPass(6, 0, 0.002)])
    m.conntrack_reconciled([VersionPass(4, 2, 0.5)])
    samples = {(s.name, s.labels.get("ip_family"), s.labels.get("le")): s.value
               for fam in text_string_to_metric_families(m.render().decode()) for s in fam.samples}
    deleted = "kubeproxy_conntrack_reconciler_deleted_entries_total"
    assert (samples[(deleted, "IPv4", None)], samples[(deleted, "IPv6", None)]) == (5, 0)
    duration = "kubeproxy_conntrack_reconciler_sync_duration_seconds"
    assert samples[(f"{duration}_count", "IPv4", None)] == 2 and samples[(f"{duration}_count", "IPv6", None)] == 1
    assert samples[(f"{duration}_bucket", "IPv4", "0.004")] == 1  # kube-proxy's buckets: 1 ms × 2^k
    assert samples[(f"{duration}_bucket", "IPv4", "0.512")] == 2
