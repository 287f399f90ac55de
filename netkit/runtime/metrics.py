"""Prometheus metrics under kube-proxy's names, types, labels and buckets (pkg/proxy/metrics), so
existing dashboards and alerts keep working.

`KUBE_PROXY_METRICS` is the compatibility table: every metric kube-proxy exports, with its type,
labels, buckets, the modes that register it, and whether netkit exports it (a test parses the live
page and compares it name by name). One `Metrics` value owns its own registry (no global state), with
the process collector every Go binary has (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
`process_start_time_seconds`, ...); the daemon serves it at /metrics on --metrics-bind-address.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from netkit.model import IPFamily, NodeState, ServicePortState
from netkit.rules.iptables.names import CT_STATE_INVALID_DROPPED, LOCALHOST_NODEPORTS_ACCEPTED
from netkit.runtime.conntrack import VersionPass


def _exponential(start: float, factor: float, count: int) -> tuple[float, ...]:
    return tuple(start * factor**i for i in range(count))


def _linear(start: float, width: float, count: int) -> tuple[float, ...]:
    return tuple(start + width * i for i in range(count))


SYNC_BUCKETS = _exponential(0.001, 2, 15)  # metrics.ExponentialBuckets(0.001, 2, 15)
# MergeBuckets(Linear(0.25, 0.25, 2), Linear(1, 1, 59), Linear(60, 5, 12), Linear(120, 30, 7))
PROGRAMMING_BUCKETS = _linear(0.25, 0.25, 2) + _linear(1, 1, 59) + _linear(60, 5, 12) + _linear(120, 30, 7)
FAMILY_LABEL = {IPFamily.IPV4: "IPv4", IPFamily.IPV6: "IPv6"}


class Type(Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


ALL_MODES = ("iptables", "ipvs", "nftables")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str  # as exposed (counters with their _total)
    type: Type
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    modes: tuple[str, ...] = ALL_MODES
    exported: bool = True
    note: str = ""  # why netkit does not export it, or how it measures it
    nfacct: str = ""  # read from this nfacct counter at scrape time; only when it exists (Metrics.nfacct)


def _m(name: str, t: Type, help: str, labels: tuple[str, ...] = (), buckets: tuple[float, ...] = (),
       modes: tuple[str, ...] = ALL_MODES, exported: bool = True, note: str = "", nfacct: str = "") -> MetricSpec:
    return MetricSpec(name, t, help, labels, buckets, modes, exported, note, nfacct)


C, G, H = Type.COUNTER, Type.GAUGE, Type.HISTOGRAM
F = ("ip_family",)
IPT = ("iptables",)
KUBE_PROXY_METRICS: tuple[MetricSpec, ...] = (
    _m("kubeproxy_sync_proxy_rules_duration_seconds", H, "SyncProxyRules latency in seconds", F, SYNC_BUCKETS,
       note="netkit syncs both families in one pass: each family observes the pass's duration"),
    _m("kubeproxy_sync_full_proxy_rules_duration_seconds", H, "SyncProxyRules latency in seconds for full resyncs",
       F, SYNC_BUCKETS, modes=IPT),
    _m("kubeproxy_sync_partial_proxy_rules_duration_seconds", H,
       "SyncProxyRules latency in seconds for partial resyncs", F, SYNC_BUCKETS, modes=IPT),
    _m("kubeproxy_sync_proxy_rules_last_timestamp_seconds", G, "The last time proxy rules were successfully synced", F),
    _m("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", G,
       "The last time a sync of proxy rules was queued", F),
    _m("kubeproxy_network_programming_duration_seconds", H, "In Cluster Network Programming Latency in seconds", F,
       PROGRAMMING_BUCKETS),
    _m("kubeproxy_sync_proxy_rules_endpoint_changes_pending", G, "Pending proxy rules Endpoint changes"),
    _m("kubeproxy_sync_proxy_rules_endpoint_changes_total", C, "Cumulative proxy rules Endpoint changes"),
    _m("kubeproxy_sync_proxy_rules_service_changes_pending", G, "Pending proxy rules Service changes"),
    _m("kubeproxy_sync_proxy_rules_service_changes_total", C, "Cumulative proxy rules Service changes"),
    _m("kubeproxy_sync_proxy_rules_no_local_endpoints_total", G,
       "Number of services with a Local traffic policy and no endpoints", ("ip_family", "traffic_policy")),
    _m("kubeproxy_proxy_healthz_total", C, "Cumulative proxy healthz HTTP status", ("code",)),
    _m("kubeproxy_proxy_livez_total", C, "Cumulative proxy livez HTTP status", ("code",)),
    _m("kubeproxy_sync_proxy_rules_iptables_restore_failures_total", C, "Cumulative proxy iptables restore failures",
       F, modes=("iptables", "ipvs")),
    _m("kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total", C,
       "Cumulative proxy iptables partial restore failures", F, modes=IPT),
    _m("kubeproxy_sync_proxy_rules_iptables_total", G, "Total number of iptables rules owned by kube-proxy",
       ("ip_family", "table"), modes=IPT),
    _m("kubeproxy_sync_proxy_rules_iptables_last", G, "Number of iptables rules written by kube-proxy in last sync",
       ("ip_family", "table"), modes=IPT),
    _m("kubeproxy_sync_proxy_rules_nftables_sync_failures_total", C, "Cumulative proxy nftables sync failures", F,
       modes=("nftables",)),
    _m("kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total", C, "Cumulative proxy nftables cleanup failures",
       F, modes=("nftables",)),
    _m("kubeproxy_conntrack_reconciler_deleted_entries_total", C,
       "Cumulative conntrack flows deleted by conntrack reconciler", F,
       note="counted per pass of the conntrack worker, per IP family it read (the same count as "
            "netkit_conntrack_udp_flows_deleted_total)"),
    _m("kubeproxy_conntrack_reconciler_sync_duration_seconds", H, "ReconcileConntrackFlowsLatency latency in seconds",
       F, SYNC_BUCKETS, note="one observation per pass of the conntrack worker and IP family it read: after a "
                             "sync that changed a UDP Service's endpoints or frontends, not after every sync"),
    _m("kubeproxy_iptables_ct_state_invalid_dropped_packets_total", C,
       "packets dropped by iptables to work around conntrack problems", modes=IPT, nfacct=CT_STATE_INVALID_DROPPED,
       note="read from the nfacct counter ct_state_invalid_dropped_pkts at scrape time; "
            "absent when the counter could not be created"),
    _m("kubeproxy_iptables_localhost_nodeports_accepted_packets_total", C,
       "Number of packets accepted on nodeports of loopback interface", modes=IPT,
       nfacct=LOCALHOST_NODEPORTS_ACCEPTED,
       note="read from the nfacct counter localhost_nps_accepted_pkts at scrape time; "
            "absent when the counter could not be created"),
)
NETKIT_METRICS: tuple[MetricSpec, ...] = (
    _m("netkit_conntrack_udp_flows_deleted_total", C, "Stale UDP conntrack entries deleted"),
    _m("netkit_sync_proxy_rules_last_snapshot_timestamp_seconds", G,
       "When the last successful sync read the objects it programmed: every change queued before is programmed"),
)
del C, G, H, F, IPT


class Metrics:
    def __init__(self, mode: str = "iptables", families: Iterable[IPFamily] = (IPFamily.IPV4, IPFamily.IPV6),
                 *, process: bool = True) -> None:
        self.mode = mode
        self.families = tuple(families)
        disable_created_metrics()  # type: ignore[no-untyped-call]  # Go's client (kube-proxy's) exports no *_created series
        r = self.registry = CollectorRegistry(auto_describe=True)
        if process:
            ProcessCollector(registry=r)
        self.m: dict[str, Any] = {}
        self._no_local: tuple[NodeState, dict[IPFamily, tuple[int, int]]] | None = None
        for spec in (*KUBE_PROXY_METRICS, *NETKIT_METRICS):
            if spec.exported and mode in spec.modes and not spec.nfacct:
                self.m[spec.name] = _make(spec, r)
        for f in self.families:  # kube-proxy's per-family series exist from the start
            for spec in KUBE_PROXY_METRICS:
                if spec.name in self.m and spec.labels == ("ip_family",):
                    self.m[spec.name].labels(FAMILY_LABEL[f])

    def nfacct(self, counters: Iterable[str], read: Callable[[str], int | None]) -> None:
        """Export the nfacct-based metrics of the counters that exist (kube-proxy leaves out the metric
        of a counter it failed to create); `read(counter)` gives its packets at scrape time."""
        have = set(counters)
        specs = [s for s in KUBE_PROXY_METRICS if s.nfacct in have and self.mode in s.modes]
        if specs:
            self.registry.register(_NfacctCollector(tuple(specs), read))
            self.m.update({s.name: None for s in specs})

    def has(self, name: str) -> bool:
        return name in self.m

    def family(self, name: str, family: IPFamily) -> Any:
        return self.m[name].labels(FAMILY_LABEL[family])

    def each_family(self, name: str, families: Iterable[IPFamily] | None = None) -> list[Any]:
        if name not in self.m:
            return []
        return [self.family(name, f) for f in (self.families if families is None else families)]

    def plain(self, name: str) -> Any:
        return self.m[name]

    @property
    def conntrack_flushed(self) -> Any:
        """netkit_conntrack_udp_flows_deleted_total."""
        return self.m["netkit_conntrack_udp_flows_deleted_total"]

    def conntrack_reconciled(self, passes: Iterable[VersionPass]) -> None:
        """kube-proxy's conntrack reconciler metrics, from one pass of the conntrack worker."""
        for p in passes:
            family = FAMILY_LABEL[IPFamily.IPV4 if p.version == 4 else IPFamily.IPV6]
            self.m["kubeproxy_conntrack_reconciler_sync_duration_seconds"].labels(family).observe(p.seconds)
            self.m["kubeproxy_conntrack_reconciler_deleted_entries_total"].labels(family).inc(p.deleted)

    def count_probe(self, endpoint: str, code: int) -> None:
        self.m[f"kubeproxy_proxy_{endpoint}_total"].labels(str(code)).inc()

    def no_local_endpoints(self, state: NodeState) -> None:
        last = self._no_local
        if last is not None and state.changes is not None and state.changes.applies_to(last[0]):
            counts = _count_no_local(state.changes.came, _count_no_local(state.changes.gone, last[1], -1))
        else:
            counts = _count_no_local(state.ports, {})
        self._no_local = (state, counts)  # the counts follow what changed on the next sync
        for f in self.families:
            internal, external = counts.get(f, (0, 0))
            g = self.m["kubeproxy_sync_proxy_rules_no_local_endpoints_total"]
            g.labels(FAMILY_LABEL[f], "internal").set(internal)
            g.labels(FAMILY_LABEL[f], "external").set(external)

    def iptables_rules(self, family: IPFamily, total: Mapping[str, int], last: Mapping[str, int]) -> None:
        if "kubeproxy_sync_proxy_rules_iptables_total" not in self.m:
            return
        for table in ("filter", "nat", "mangle"):
            self.m["kubeproxy_sync_proxy_rules_iptables_total"].labels(FAMILY_LABEL[family], table).set(
                total.get(table, 0))
            self.m["kubeproxy_sync_proxy_rules_iptables_last"].labels(FAMILY_LABEL[family], table).set(
                last.get(table, 0))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _NfacctCollector(Collector):
    def __init__(self, specs: tuple[MetricSpec, ...], read: Callable[[str], int | None]) -> None:
        self.specs, self.read = specs, read

    def describe(self) -> list[Metric]:
        return [CounterMetricFamily(s.name.removesuffix("_total"), s.help) for s in self.specs]

    def collect(self) -> list[Metric]:
        out: list[Metric] = []
        for s in self.specs:
            value = self.read(s.nfacct)
            if value is not None:  # kube-proxy: a failed read leaves the sample out
                out.append(CounterMetricFamily(s.name.removesuffix("_total"), s.help, value=value))
        return out


def _make(spec: MetricSpec, r: CollectorRegistry) -> Any:
    base = spec.name.removesuffix("_total") if spec.type is Type.COUNTER else spec.name
    if spec.type is Type.COUNTER:
        return Counter(base, spec.help, spec.labels, registry=r)
    if spec.type is Type.GAUGE:
        return Gauge(base, spec.help, spec.labels, registry=r)
    return Histogram(base, spec.help, spec.labels, buckets=spec.buckets, registry=r)


def no_local_endpoints(state: NodeState, family: IPFamily) -> tuple[int, int]:
    """kube-proxy's count of service ports with endpoints somewhere but none on this node for a Local
    internal (resp. external) traffic policy (pure)."""
    return no_local_endpoints_by_family(state).get(family, (0, 0))


def no_local_endpoints_by_family(state: NodeState) -> dict[IPFamily, tuple[int, int]]:
    return _count_no_local(state.ports, {})


def _count_no_local(ports: Iterable[ServicePortState], start: Mapping[IPFamily, tuple[int, int]],
                    sign: int = 1) -> dict[IPFamily, tuple[int, int]]:
    """`start` with each port of `ports` counted in (sign 1) or out (-1)."""
    counts = {f: list(c) for f, c in start.items()}
    for p in ports:
        if not p.has_endpoints or p.local_endpoints:
            continue
        c = counts.setdefault(p.family, [0, 0])
        if p.internal_policy_local:
            c[0] += sign
        if p.external_policy_local and p.externally_accessible:
            c[1] += sign
    return {f: (c[0], c[1]) for f, c in counts.items()}
