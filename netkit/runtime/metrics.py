"""Prometheus metrics under kube-proxy's names, so existing dashboards and alerts keep working.

One `Metrics` value owns its own registry (no global state); the daemon serves it on
`--metrics-bind-address` (default 127.0.0.1:10249) at /metrics.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# kube-proxy's buckets for sync durations: exponential from 1 ms.
SYNC_BUCKETS = tuple(0.001 * 2**i for i in range(15))
PROGRAMMING_BUCKETS = (0.25, 0.5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60,
                       90, 120, 150, 180, 210, 240, 270, 300)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.sync_duration = Histogram(
            "kubeproxy_sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds",
            buckets=SYNC_BUCKETS, registry=r)
        self.full_sync_duration = Histogram(
            "kubeproxy_sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for full resyncs",
            buckets=SYNC_BUCKETS, registry=r)
        self.partial_sync_duration = Histogram(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for partial resyncs", buckets=SYNC_BUCKETS, registry=r)
        self.network_programming = Histogram(
            "kubeproxy_network_programming_duration_seconds",
            "In Cluster Network Programming Latency in seconds", buckets=PROGRAMMING_BUCKETS, registry=r)
        self.restore_failures = Counter(
            "kubeproxy_sync_proxy_rules_iptables_restore_failures", "Cumulative proxy iptables restore failures",
            registry=r)
        self.last_sync = Gauge(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "The last time proxy rules were successfully synced", registry=r)
        self.last_queued = Gauge(
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "The last time a sync of proxy rules was queued", registry=r)
        self.endpoint_changes_pending = Gauge(
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending", "Pending proxy rules Endpoint changes",
            registry=r)
        self.service_changes_pending = Gauge(
            "kubeproxy_sync_proxy_rules_service_changes_pending", "Pending proxy rules Service changes",
            registry=r)
        self.endpoint_changes = Counter(
            "kubeproxy_sync_proxy_rules_endpoint_changes", "Cumulative proxy rules Endpoint changes", registry=r)
        self.service_changes = Counter(
            "kubeproxy_sync_proxy_rules_service_changes", "Cumulative proxy rules Service changes", registry=r)
        self.conntrack_flushed = Counter(
            "netkit_conntrack_udp_flows_deleted", "Stale UDP conntrack entries deleted", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
