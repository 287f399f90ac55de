"""`netkit dns --master URL` as a user runs it, fed by the test API server: SERVFAIL (with the SOA) and
/ready 503 until the first list, changes resolvable from their watch events, CoreDNS's metrics, /health, and
the query log in CoreDNS's format."""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest
from prometheus_client.parser import text_string_to_metric_families

from netkit.dns.metrics import COREDNS_METRICS
from netkit.netns import socket_in
from netkit.testing.apiserver import TestApiServer, rbac_uncovered
from tests.conftest import ROOT
from tests.dnsserver.conftest import (
    API_PORT,
    DNS_PORT,
    HEALTH_PORT,
    IN_NETNS,
    METRICS_PORT,
    READY_PORT,
    DnsProcess,
    LoopThread,
    TestUpstream,
    need_dig,
)

Z = ".svc.cluster.local."


def service(name: str, ip: str, ns: str = "default") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterIP": ip, "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}


def headless_slice(svc: str, ips: list[str]) -> dict[str, Any]:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{svc}-1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": svc, "service.kubernetes.io/headless": ""}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips]}


class Api:
    """The test API server in its own loop thread; `create`/`delete` run there. It answers inside
    `netns` too, on 127.0.0.1:API_PORT, where `netkit dns` runs: refused there until `start()`."""

    def __init__(self, netns: str) -> None:
        self.lt = LoopThread()
        self.srv = TestApiServer()
        self.listener = socket_in(netns, socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", API_PORT))  # bound, not listening: connections refused

    def start(self) -> None:
        self.lt.call(self.srv.start())
        self.lt.call(self.srv.serve_socket(self.listener))

    url = f"http://127.0.0.1:{API_PORT}"  # as `netkit dns` in the namespace sees it

    def create(self, obj: dict[str, Any]) -> None:
        self.lt.run(lambda: self.srv.store.create(obj))

    def delete(self, resource: str, ns: str, name: str) -> None:
        from netkit.testing.apistore import RESOURCES
        res = next(r for r in RESOURCES if r.plural == resource)
        self.lt.run(lambda: self.srv.store.delete(res, ns, name))

    def close(self) -> None:
        self.lt.call(self.srv.stop())
        self.lt.stop()
        self.listener.close()


def netkit_dns(netns: str, master: str, *args: str) -> DnsProcess:
    """`netkit dns --master MASTER` in `netns`, DNS and HTTP on the fixed ports there, queries logged
    to stdout."""
    return DnsProcess(netns, "--master", master, *IN_NETNS, *args, stdout=True)


# A change is answered from its watch event (milliseconds on an idle machine; the next relist is
# minutes away). 30 s leaves room for a loaded machine without letting a relist pass the test.
CHANGE_TIMEOUT = 30.0


def addresses(m: dns.message.Message) -> list[str]:
    return sorted(r.to_text() for rrset in m.answer for r in rrset)


@pytest.fixture(scope="module")
def synced(module_netns: str) -> Iterator[tuple[Api, DnsProcess]]:
    api = Api(module_netns)
    api.start()
    api.create(service("web", "10.96.0.10"))
    server = netkit_dns(module_netns, api.url, "--upstream", "127.0.0.1:9")
    try:
        server.wait_for(lambda: server.ask(f"web.default{Z}").rcode() == dns.rcode.NOERROR)
        yield api, server
    finally:
        server.stop()
        api.close()


def test_changes_are_resolvable_from_their_watch_events(synced: tuple[Api, DnsProcess]) -> None:
    api, server = synced
    api.create(service("fresh", "10.96.7.7"))
    server.wait_for(lambda: addresses(server.ask(f"fresh.default{Z}")) == ["10.96.7.7"], timeout=CHANGE_TIMEOUT)
    api.delete("services", "default", "fresh")
    server.wait_for(lambda: server.ask(f"fresh.default{Z}").rcode() == dns.rcode.NXDOMAIN, timeout=CHANGE_TIMEOUT)


def test_headless_services_and_namespaces_are_watched_like_coredns(synced: tuple[Api, DnsProcess]) -> None:
    api, server = synced
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "empty"}})
    server.wait_for(lambda: server.ask("empty.svc.cluster.local.").rcode() == dns.rcode.NOERROR,
                    timeout=CHANGE_TIMEOUT)
    hl = service("db", "None")
    api.create(hl)
    api.create(headless_slice("db", ["10.244.1.5", "10.244.2.5"]))  # labelled headless: kube-proxy skips it
    server.wait_for(lambda: addresses(server.ask(f"db.default{Z}")) == ["10.244.1.5", "10.244.2.5"],
                    timeout=CHANGE_TIMEOUT)


def test_deploy_dns_cluster_role_covers_what_netkit_dns_requests(synced: tuple[Api, DnsProcess]) -> None:
    """deploy/dns/10-rbac.yaml (kubeadm's system:coredns) allows every request of a running netkit dns
    (no Pods in insecure mode), and grants only list and watch."""
    import yaml
    api, _ = synced
    role = next(d for d in yaml.safe_load_all((ROOT / "deploy" / "dns" / "10-rbac.yaml").read_text())
                if d["kind"] == "ClusterRole")
    assert rbac_uncovered(api.srv.audit, role) == []
    used = {(a.group, a.resource) for a in api.srv.audit if a.resource}
    assert used == {("", "services"), ("", "namespaces"), ("discovery.k8s.io", "endpointslices")}
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    # kubeadm's system:coredns: list and watch only, of what netkit dns watches (Endpoints: the
    # fallback without slices; Pods: `pods verified`)
    assert granted == {(g, r, v) for g, r in used | {("", "endpoints"), ("", "pods")} for v in ("list", "watch")}


def test_metrics_have_coredns_names_and_labels(synced: tuple[Api, DnsProcess]) -> None:
    _, server = synced
    for _ in range(3):
        server.ask(f"web.default{Z}")
        server.ask(f"nope.default{Z}")
    status, text = server.get(METRICS_PORT, "/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for spec in COREDNS_METRICS:
        name = spec.name.removesuffix("_total") if spec.type == "counter" else spec.name
        fam = families[name]
        assert fam.type == spec.type, spec.name
        for sample in fam.samples:
            assert set(sample.labels) - {"le"} == set(spec.labels), (spec.name, sample)
    assert "process_resident_memory_bytes" in families and "process_cpu_seconds" in families

    def value(name: str, **labels: str) -> float:
        samples = (s for f in families.values() for s in f.samples)
        return sum(s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    assert value("coredns_dns_requests_total", type="A", proto="udp", family="1") >= 6
    assert value("coredns_dns_responses_total", rcode="NXDOMAIN") >= 3
    assert value("coredns_cache_hits_total", type="success") >= 2
    assert value("coredns_cache_hits_total", type="denial") >= 2
    assert value("coredns_dns_request_duration_seconds_count", type="A") >= 6
    server_label = {s.labels["server"] for s in families["coredns_dns_requests"].samples}
    assert server_label == {f"dns://127.0.0.1:{DNS_PORT}"}


def test_health_is_ok(synced: tuple[Api, DnsProcess]) -> None:
    _, server = synced
    assert server.get(HEALTH_PORT, "/health") == (200, "OK")
    assert server.get(READY_PORT, "/ready") == (200, "OK")


def test_servfail_with_soa_and_not_ready_until_the_first_list(netns: str) -> None:
    up = TestUpstream(host="127.0.0.2", netns=netns)
    api = Api(netns)
    server = netkit_dns(netns, api.url, "--upstream", "127.0.0.2:53", "--log-queries")
    try:
        server.wait_for(lambda: server.get(HEALTH_PORT, "/health") == (200, "OK"))
        assert server.get(READY_PORT, "/ready")[0] == 503
        early = server.ask(f"web.default{Z}")
        assert early.rcode() == dns.rcode.SERVFAIL
        assert [rr.rdtype for rr in early.authority] == [dns.rdatatype.SOA]
        assert server.ask("www.example.com.").answer  # names outside the zone need no sync
        api.create(service("web", "10.96.0.10"))
        api.start()
        server.wait_for(lambda: server.get(READY_PORT, "/ready") == (200, "OK"))
        assert addresses(server.ask(f"web.default{Z}")) == ["10.96.0.10"]
    finally:
        out, _ = server.stop()
        api.close()
        up.close()
    line = re.compile(r'^\[INFO\] 127\.0\.0\.1:\d+ - \d+ "A IN web\.default\.svc\.cluster\.local\. udp \d+ '
                      r'(true|false) \d+" NOERROR qr,aa,rd(,ra)? \d+ \d+(\.\d+)?s$')
    assert any(line.match(x) for x in out.splitlines()), out[-2000:]
    assert re.search(r'"A IN web\.default\.svc\.cluster\.local\. udp \d+ \w+ \d+" SERVFAIL', out)


def test_dig_resolves_over_udp_and_tcp(synced: tuple[Api, DnsProcess]) -> None:
    dig = need_dig()
    _, server = synced
    for transport in ("+notcp", "+tcp"):
        out = subprocess.run(["ip", "netns", "exec", server.netns, dig, "@127.0.0.1", "-p", str(DNS_PORT), transport,
                              "+short", "+tries=1", "+time=2",
                              f"web.default{Z}"], capture_output=True, text=True, timeout=10).stdout
        assert out.split() == ["10.96.0.10"], transport


def test_a_corefile_names_the_api_with_the_kubernetes_plugins_endpoint(tmp_path: Path, netns: str) -> None:
    """`kubernetes … { endpoint URL }` in a Corefile: the same watches as --master, and the zone,
    TTL and `namespaces` the Corefile says."""
    api = Api(netns)
    api.start()
    conf = tmp_path / "Corefile"
    conf.write_text(f""".:{DNS_PORT} {{
    bind 127.0.0.1
    ready 127.0.0.1:{READY_PORT}
    kubernetes k8s.test {{
        endpoint {api.url}
        ttl 17
        namespaces default
    }}
}}
""")
    api.create(service("web", "10.96.0.10"))
    api.create(service("hidden", "10.96.0.11", ns="kube-system"))
    server = DnsProcess(netns, "--conf", str(conf))
    try:
        server.wait_for(lambda: server.ask("web.default.svc.k8s.test.").rcode() == dns.rcode.NOERROR)
        assert server.ask("web.default.svc.k8s.test.").answer[0].ttl == 17
        assert server.ask("hidden.kube-system.svc.k8s.test.").rcode() == dns.rcode.NXDOMAIN
        api.create(service("late", "10.96.0.12"))
        server.wait_for(lambda: server.ask("late.default.svc.k8s.test.").rcode() == dns.rcode.NOERROR,
                        timeout=CHANGE_TIMEOUT)
    finally:
        server.stop()
        api.close()
