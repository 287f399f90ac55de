"""[sig-network] DNS (test/e2e/network/dns.go), translated one to one: the upstream probe pod's
`dig +search` queries, over UDP and TCP, run from a lab pod with kubelet's resolv.conf against
the cluster DNS (`netkit dns` behind kube-dns 10.96.0.10)."""

from __future__ import annotations

import pytest

from netkit.lab.cluster import lifecycle
from netkit.lab.cluster.state import Record
from tests.lab_cluster.conftest import Kubectl, eventually, fresh

from .conftest import POLL, cluster_ip, dig, start_serve_hostname

pytestmark = pytest.mark.netns

DESCRIBE = "DNS"  # the upstream SIGDescribe these tests belong to

DOMAIN = "default.svc.cluster.local"


def service_spec(name: str, selector: str, headless: bool) -> str:
    """e2eservice.CreateServiceSpec: one TCP port 80 named http; `headless`: clusterIP None."""
    cluster_ip_line = "  clusterIP: None\n" if headless else ""
    return f"""apiVersion: v1
kind: Service
metadata: {{name: {name}}}
spec:
{cluster_ip_line}  selector: {{app: {selector}}}
  ports: [{{name: http, port: 80, protocol: TCP}}]
"""


def answers(record: Record, pod: str, name: str, rtype: str) -> dict[str, list[str]]:
    """The probe's two lookups of one name: over UDP (`+notcp`) and TCP (`+tcp`)."""
    return {proto: dig(record, pod, name, rtype, f"+{proto}") for proto in ("notcp", "tcp")}


def both(value: list[str]) -> dict[str, list[str]]:
    return {"notcp": value, "tcp": value}


@pytest.mark.upstream("should provide DNS for services  [Conformance]")
def test_dns_for_services(cluster: Record, kubectl: Kubectl) -> None:
    """DNS should provide DNS for services  [Conformance]: a headless Service and a regular one over
    the probe pod; from the probe pod, the headless Service's FQDN has an A record (the pod's
    address), both Services have `_http._tcp` SRV records, and the regular Service's ClusterIP a
    PTR record — over UDP and TCP.

    Upstream's probe only checks that each answer is non-empty; this checks the records' data too.
    Lab gap: the lab labels a deployment's pods `app=<name>`, so the selector is `app: dns-test`
    instead of `dns-test: "true"`."""
    kubectl.apply(service_spec("dns-test-service", "dns-test", headless=True))
    kubectl.apply(service_spec("test-service-2", "dns-test", headless=False))
    (probe,) = start_serve_hostname(cluster, "dns-test", 1)
    probe_ip = str(next(p.ip for p in fresh(cluster).cluster.pods if p.name == probe))
    regular_ip = cluster_ip(kubectl, "test-service-2")
    expected = {
        (f"dns-test-service.{DOMAIN}", "A"): both([probe_ip]),
        (f"_http._tcp.dns-test-service.{DOMAIN}", "SRV"):
            both([f"0 100 80 {probe_ip.replace('.', '-')}.dns-test-service.{DOMAIN}."]),
        (f"_http._tcp.test-service-2.{DOMAIN}", "SRV"): both([f"0 100 80 test-service-2.{DOMAIN}."]),
    }
    for (name, rtype), want in expected.items():
        assert eventually(lambda n=name, t=rtype, w=want: answers(cluster, probe, n, t) == w,  # type: ignore[misc]
                          POLL, f"{rtype} {name}")
    ptr = ".".join(reversed(regular_ip.split("."))) + ".in-addr.arpa."
    assert answers(cluster, probe, ptr, "PTR") == both([f"test-service-2.{DOMAIN}."])


@pytest.mark.upstream("should provide DNS for ExternalName services [Conformance]")
def test_dns_for_externalname_services(cluster: Record, kubectl: Kubectl, exec_pod: str) -> None:
    """DNS should provide DNS for ExternalName services [Conformance]: the Service's FQDN is a CNAME
    to foo.example.com, then (externalName changed) to bar.example.com; changed to type ClusterIP,
    its A record is the allocated ClusterIP."""
    fqdn = f"dns-test-service-3.{DOMAIN}"
    kubectl.apply("""apiVersion: v1
kind: Service
metadata: {name: dns-test-service-3}
spec: {type: ExternalName, externalName: foo.example.com}
""")
    assert eventually(lambda: answers(cluster, exec_pod, fqdn, "CNAME") == both(["foo.example.com."]), POLL, "foo")
    kubectl("patch", "service", "dns-test-service-3", "-p", '{"spec":{"externalName":"bar.example.com"}}')
    assert eventually(lambda: answers(cluster, exec_pod, fqdn, "CNAME") == both(["bar.example.com."]), POLL, "bar")
    kubectl("patch", "service", "dns-test-service-3", "-p",
            '{"spec":{"type":"ClusterIP","externalName":null,"ports":[{"port":80,"name":"http","protocol":"TCP"}]}}')
    ip = cluster_ip(kubectl, "dns-test-service-3")
    assert ip
    assert eventually(lambda: answers(cluster, exec_pod, fqdn, "A") == both([ip]), POLL, "the ClusterIP")


@pytest.mark.upstream("should provide DNS for the cluster  [Conformance]")
def test_dns_for_the_cluster(cluster: Record, exec_pod: str) -> None:
    """DNS should provide DNS for the cluster  [Conformance]: from a pod, kubernetes.default.svc's
    A record (the kubernetes Service's ClusterIP) and the pod's own A record
    (`a-b-c-d.default.pod.cluster.local`), over UDP and TCP. Upstream's probe only checks that
    each answer is non-empty; this checks the data too."""
    pod_ip = str(next(p.ip for p in fresh(cluster).cluster.pods if p.name == exec_pod))
    expected = {
        "kubernetes.default.svc.cluster.local": both(["10.96.0.1"]),
        f"{pod_ip.replace('.', '-')}.default.pod.cluster.local": both([pod_ip]),
    }
    for name, want in expected.items():
        assert eventually(lambda n=name, w=want: answers(cluster, exec_pod, n, "A") == w,  # type: ignore[misc]
                          POLL, f"A {name}")


@pytest.mark.upstream("should resolve DNS of partial qualified names for services [LinuxOnly] [Conformance]")
def test_dns_partial_qualified_names(cluster: Record, kubectl: Kubectl) -> None:
    """DNS should resolve DNS of partial qualified names for services [LinuxOnly] [Conformance]:
    through the search path, the headless Service by its name, NAME.NAMESPACE and
    NAME.NAMESPACE.svc (A), `_http._tcp.` of both Services in NAMESPACE.svc (SRV), and the regular
    Service's ClusterIP (PTR) — over UDP and TCP.

    Lab gap: the cluster is shared by the tests and has one namespace, so the Services are
    `dns-partial-service` and `test-partial-2` (upstream's names are taken by the DNS for
    services test), over pods labelled `app: dns-partial`."""
    kubectl.apply(service_spec("dns-partial-service", "dns-partial", headless=True))
    kubectl.apply(service_spec("test-partial-2", "dns-partial", headless=False))
    (probe,) = start_serve_hostname(cluster, "dns-partial", 1)
    probe_ip = str(next(p.ip for p in fresh(cluster).cluster.pods if p.name == probe))
    regular_ip = cluster_ip(kubectl, "test-partial-2")
    expected = {
        ("dns-partial-service", "A"): both([probe_ip]),
        ("dns-partial-service.default", "A"): both([probe_ip]),
        ("dns-partial-service.default.svc", "A"): both([probe_ip]),
        ("_http._tcp.dns-partial-service.default.svc", "SRV"):
            both([f"0 100 80 {probe_ip.replace('.', '-')}.dns-partial-service.{DOMAIN}."]),
        ("_http._tcp.test-partial-2.default.svc", "SRV"): both([f"0 100 80 test-partial-2.{DOMAIN}."]),
        (".".join(reversed(regular_ip.split("."))) + ".in-addr.arpa.", "PTR"): both([f"test-partial-2.{DOMAIN}."]),
    }
    for (name, rtype), want in expected.items():
        assert eventually(lambda n=name, t=rtype, w=want: answers(cluster, probe, n, t) == w,  # type: ignore[misc]
                          POLL, f"{rtype} {name}")


@pytest.mark.upstream("should provide DNS for pods for Subdomain [Conformance]")
def test_dns_for_pods_subdomain(cluster: Record, kubectl: Kubectl) -> None:
    """DNS should provide DNS for pods for Subdomain [Conformance]: a headless Service
    dns-test-service-2 and a probe pod with hostname dns-querier-2 and that subdomain; from the
    probe, `dns-querier-2.dns-test-service-2.NS.svc` and `dns-test-service-2.NS.svc` have A records
    (the probe's address), as has the probe's own pod record — over UDP and TCP. Upstream's probe
    only checks that each answer is non-empty; this checks the data too. Lab gap: the selector is
    `app: dns-querier` (the lab labels a deployment's pods `app=<name>`)."""
    kubectl.apply(service_spec("dns-test-service-2", "dns-querier", headless=True))
    lifecycle.scale(cluster.cluster_id, "dns-querier", 1, create=True, hostname="dns-querier-2",
                    subdomain="dns-test-service-2")
    (probe,) = {p.name for p in fresh(cluster).cluster.pods_of("dns-querier")}
    probe_ip = str(next(p.ip for p in fresh(cluster).cluster.pods if p.name == probe))
    names = [f"dns-querier-2.dns-test-service-2.{DOMAIN}", f"dns-test-service-2.{DOMAIN}",
             f"{probe_ip.replace('.', '-')}.default.pod.cluster.local"]
    for name in names:
        assert eventually(lambda n=name: answers(cluster, probe, n, "A") == both([probe_ip]),  # type: ignore[misc]
                          POLL, f"A {name}")
