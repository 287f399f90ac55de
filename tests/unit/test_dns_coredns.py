"""CoreDNS's kubernetes-plugin test tables, as a table of ours.

The cases are those of coredns/coredns plugin/kubernetes: handler_test.go (dnsTestCases, nsTestCases,
notSyncedTestCases), handler_pod_insecure_test.go, handler_pod_verified_test.go,
handler_pod_disabled_test.go, kubernetes_apex_test.go, reverse_test.go, and handler_case_test.go
(dnsPreserveCaseCases: which names repeat the query's letter case, so asked over the wire). Their
fixture objects (svc1, svcempty, svc6, hdls1, hdlsprtls, external, svc-dual-stack, ... in namespace
testns) are written below as manifests, so the same facts reach netkit's view the way a cluster's
objects do. Expectations are zone-file lines with
CoreDNS's TTL of 5; answers and additional records are compared as sets (CoreDNS's SortAndCheck sorts
them too), negative answers must carry the zone SOA. Where netkit deliberately differs, the case says
so (`DIFFERS`) and docs/dns.md explains why; the case then asserts netkit's answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import ip_address

import pytest

from netkit.dns.engine import Engine
from netkit.dns.names import name_from_text
from netkit.dns.resolver import Rcode, RType, resolve
from netkit.dns.view import Options, PodMode, View, build
from netkit.model.types import Objects
from netkit.sources.manifests import decode_text

OBJECTS = """
apiVersion: v1
kind: Namespace
metadata: {name: testns}
---
apiVersion: v1
kind: Namespace
metadata: {name: kube-system}
---
apiVersion: v1
kind: Namespace
metadata: {name: podns}
---
apiVersion: v1
kind: Namespace
metadata: {name: svcns}
---
apiVersion: v1
kind: Namespace
metadata: {name: unexposedns}
---
apiVersion: v1
kind: Service
metadata: {name: kubedns, namespace: kube-system}
spec: {clusterIP: 10.0.0.10, ports: [{name: dns, protocol: UDP, port: 53}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: kubedns-1, namespace: kube-system, labels: {kubernetes.io/service-name: kubedns}}
addressType: IPv4
ports: [{name: dns, protocol: UDP, port: 53}]
endpoints: [{addresses: [172.0.0.100]}]
---
apiVersion: v1
kind: Service
metadata: {name: svc1, namespace: testns}
spec: {clusterIP: 10.0.0.1, ports: [{name: http, protocol: TCP, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc1-slice1, namespace: testns, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 80}]
endpoints: [{addresses: [172.0.0.1], hostname: ep1a}]
---
apiVersion: v1
kind: Service
metadata: {name: svcempty, namespace: testns}
spec: {clusterIP: 10.0.0.1, ports: [{name: http, protocol: TCP, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svcempty-slice1, namespace: testns, labels: {kubernetes.io/service-name: svcempty}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 80}]
endpoints: []
---
apiVersion: v1
kind: Service
metadata: {name: svc6, namespace: testns}
spec: {clusterIP: "1234:abcd::1", ipFamilies: [IPv6], ports: [{name: http, protocol: TCP, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: hdls1, namespace: testns}
spec: {clusterIP: None, ports: [{name: http, protocol: TCP, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: hdls1-slice1, namespace: testns, labels: {kubernetes.io/service-name: hdls1}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 80}]
endpoints:
- {addresses: [172.0.0.2]}
- {addresses: [172.0.0.3]}
- {addresses: [172.0.0.4], hostname: dup-name}
- {addresses: [172.0.0.5], hostname: dup-name}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: hdls1-slice2, namespace: testns, labels: {kubernetes.io/service-name: hdls1}}
addressType: IPv6
ports: [{name: http, protocol: TCP, port: 80}]
endpoints:
- {addresses: ["5678:abcd::1"]}
- {addresses: ["5678:abcd::2"]}
---
apiVersion: v1
kind: Service
metadata: {name: external, namespace: testns}
spec: {type: ExternalName, externalName: ext.interwebs.test, ports: [{name: http, protocol: TCP, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: external-to-service, namespace: testns}
spec: {type: ExternalName, externalName: svc1.testns.svc.cluster.local., ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: hdlsprtls, namespace: testns}
spec: {clusterIP: None}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: hdlsprtls-slice1, namespace: testns, labels: {kubernetes.io/service-name: hdlsprtls}}
addressType: IPv4
endpoints: [{addresses: [172.0.0.20]}]
---
apiVersion: v1
kind: Service
metadata: {name: svc1, namespace: unexposedns}
spec: {clusterIP: 10.0.0.2, ports: [{name: http, protocol: TCP, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: svc-dual-stack, namespace: testns}
spec:
  clusterIP: 10.0.0.3
  clusterIPs: [10.0.0.3, "10::3"]
  ipFamilies: [IPv4, IPv6]
  ipFamilyPolicy: RequireDualStack
  ports: [{name: http, protocol: TCP, port: 80}]
---
apiVersion: v1
kind: Pod
metadata: {name: foo, namespace: podns}
status: {podIP: 10.240.0.1, podIPs: [{ip: 10.240.0.1}]}
"""

# reverse_test.go's own fixture: a service with cluster IP 192.168.1.100 and four named endpoints.
REVERSE = """
apiVersion: v1
kind: Service
metadata: {name: svc1, namespace: testns}
spec: {clusterIP: 192.168.1.100, ports: [{name: http, protocol: TCP, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc1-4, namespace: testns, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 80}]
endpoints: [{addresses: [10.0.0.100], hostname: ep1a}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc1-6, namespace: testns, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv6
ports: [{name: http, protocol: TCP, port: 80}]
endpoints:
- {addresses: ["1234:abcd::1"], hostname: ep1b}
- {addresses: ["fd00:77:30::a"], hostname: ip6svc1ex}
- {addresses: ["fd00:77:30::2:9ba6"], hostname: ip6svc1in}
"""

Z = ".testns.svc.cluster.local."
NX, OK, FAIL = Rcode.NXDOMAIN, Rcode.NOERROR, Rcode.SERVFAIL
TYPES = {"A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "HINFO": 13, "PTR": 12, "TXT": 16, "AAAA": 28, "SRV": 33}


@dataclass(frozen=True)
class Case:
    table: str  # CoreDNS's test table
    qname: str
    qtype: str
    rcode: Rcode
    answer: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    differs: str = ""  # why netkit answers otherwise (docs/dns.md), when it does
    upstream: bool = False  # the rest comes from the upstream: the resolver asks for it (chase/forward)


def c(table: str, qname: str, qtype: str, rcode: Rcode, answer: str = "", extra: str = "", **kw: object) -> Case:
    return Case(table, qname, qtype, rcode, tuple(x for x in answer.split("\n") if x),
                tuple(x for x in extra.split("\n") if x), **kw)  # type: ignore[arg-type]


def srv(owner: str, weight: int, target: str) -> str:
    return f"{owner} 5 IN SRV 0 {weight} 80 {target}"


H = "hdls1" + Z
HDLS_SRV = "\n".join(srv(f"_http._tcp.{H}", 16, f"{t}.{H}")
                     for t in ("172-0-0-2", "172-0-0-3", "5678-abcd--1", "5678-abcd--2", "dup-name"))
HDLS_EXTRA = "\n".join([f"172-0-0-2.{H} 5 IN A 172.0.0.2", f"172-0-0-3.{H} 5 IN A 172.0.0.3",
                        f"5678-abcd--1.{H} 5 IN AAAA 5678:abcd::1", f"5678-abcd--2.{H} 5 IN AAAA 5678:abcd::2",
                        f"dup-name.{H} 5 IN A 172.0.0.4", f"dup-name.{H} 5 IN A 172.0.0.5"])
HDLS_A = "\n".join(f"{H} 5 IN A 172.0.0.{i}" for i in (2, 3, 4, 5))
R6 = "0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.c.b.a.4.3.2.1.ip6.arpa."
F6 = "0.0.0.0.0.0.0.0.0.0.0.3.0.0.7.7.0.0.0.0.d.f.ip6.arpa."
FALLTHROUGH = "CoreDNS answers it only from its own reverse zone; kubeadm's Corefile falls through, as netkit"

CASES = [
    c("dnsTestCases", f"svc1{Z}", "A", OK, f"svc1{Z} 5 IN A 10.0.0.1"),
    c("dnsTestCases", f"svcempty{Z}", "A", OK, f"svcempty{Z} 5 IN A 10.0.0.1"),
    c("dnsTestCases", f"svc1{Z}", "SRV", OK, srv(f"svc1{Z}", 100, f"svc1{Z}"), f"svc1{Z} 5 IN A 10.0.0.1"),
    c("dnsTestCases", f"svcempty{Z}", "SRV", OK, srv(f"svcempty{Z}", 100, f"svcempty{Z}"),
      f"svcempty{Z} 5 IN A 10.0.0.1"),
    c("dnsTestCases", f"svc6{Z}", "SRV", OK, srv(f"svc6{Z}", 100, f"svc6{Z}"), f"svc6{Z} 5 IN AAAA 1234:abcd::1"),
    c("dnsTestCases", f"_http._tcp.svc1{Z}", "SRV", OK, srv(f"_http._tcp.svc1{Z}", 100, f"svc1{Z}"),
      f"svc1{Z} 5 IN A 10.0.0.1"),
    c("dnsTestCases", f"_http._tcp.svcempty{Z}", "SRV", OK, srv(f"_http._tcp.svcempty{Z}", 100, f"svcempty{Z}"),
      f"svcempty{Z} 5 IN A 10.0.0.1"),
    c("dnsTestCases", H, "A", OK, HDLS_A),
    c("dnsTestCases", f"hdlsprtls{Z}", "A", OK, f"hdlsprtls{Z} 5 IN A 172.0.0.20"),
    c("dnsTestCases", f"172-0-0-20.hdlsprtls{Z}", "A", OK, f"172-0-0-20.hdlsprtls{Z} 5 IN A 172.0.0.20"),
    c("dnsTestCases", f"172-0-0-2.{H}", "A", OK, f"172-0-0-2.{H} 5 IN A 172.0.0.2"),
    c("dnsTestCases", f"172-0-0-3.{H}", "A", OK, f"172-0-0-3.{H} 5 IN A 172.0.0.3"),
    c("dnsTestCases", f"dup-name.{H}", "A", OK, f"dup-name.{H} 5 IN A 172.0.0.4\ndup-name.{H} 5 IN A 172.0.0.5"),
    c("dnsTestCases", f"_http._tcp.{H}", "SRV", OK, HDLS_SRV, HDLS_EXTRA),
    c("dnsTestCases", H, "A", OK, HDLS_A),
    c("dnsTestCases", f"5678-abcd--2.{H}", "AAAA", OK, f"5678-abcd--2.{H} 5 IN AAAA 5678:abcd::2"),
    c("dnsTestCases", f"external{Z}", "CNAME", OK, f"external{Z} 5 IN CNAME ext.interwebs.test."),
    c("dnsTestCases", f"external{Z}", "A", OK, f"external{Z} 5 IN CNAME ext.interwebs.test.", upstream=True),
    c("dnsTestCases", f"external-to-service{Z}", "A", OK,
      f"external-to-service{Z} 5 IN CNAME svc1{Z}\nsvc1{Z} 5 IN A 10.0.0.1"),
    c("dnsTestCases", f"svc1{Z}", "AAAA", OK),
    c("dnsTestCases", f"svc0{Z}", "AAAA", NX),
    c("dnsTestCases", f"svc0{Z}", "A", NX),
    c("dnsTestCases", "svc0.svc-nons.svc.cluster.local.", "A", NX),
    c("dnsTestCases", "dns-version.cluster.local.", "TXT", OK, 'dns-version.cluster.local. 28800 IN TXT "1.1.0"'),
    c("dnsTestCases", f"bogusendpoint.{H}", "A", NX),
    c("dnsTestCases", f"bogusendpoint.svc0{Z}", "A", NX),
    c("dnsTestCases", f"svc6{Z}", "AAAA", OK, f"svc6{Z} 5 IN AAAA 1234:abcd::1"),
    c("dnsTestCases", f"_http._tcp.svc6{Z}", "SRV", OK, srv(f"_http._tcp.svc6{Z}", 100, f"svc6{Z}"),
      f"svc6{Z} 5 IN AAAA 1234:abcd::1"),
    c("dnsTestCases", H, "AAAA", OK, f"{H} 5 IN AAAA 5678:abcd::1\n{H} 5 IN AAAA 5678:abcd::2"),
    c("dnsTestCases", f"5678-abcd--1.{H}", "AAAA", OK, f"5678-abcd--1.{H} 5 IN AAAA 5678:abcd::1"),
    c("dnsTestCases", "svc.cluster.local.", "A", OK),
    c("dnsTestCases", "pod.cluster.local.", "A", OK),
    c("dnsTestCases", "testns.svc.cluster.local.", "A", OK),
    c("dnsTestCases", "svc.cluster.local.", "NS", OK),
    c("dnsTestCases", "testns.svc.cluster.local.", "NS", OK),
    c("dnsTestCases", "foo.cluster.local.", "NS", NX),
    c("dnsTestCases", "foo.svc.cluster.local.", "NS", NX),
    c("dnsTestCases", f"svc-dual-stack{Z}", "A", OK, f"svc-dual-stack{Z} 5 IN A 10.0.0.3"),
    c("dnsTestCases", f"svc-dual-stack{Z}", "AAAA", OK, f"svc-dual-stack{Z} 5 IN AAAA 10::3"),
    c("dnsTestCases", f"svc-dual-stack{Z}", "SRV", OK, srv(f"svc-dual-stack{Z}", 50, f"svc-dual-stack{Z}"),
      f"svc-dual-stack{Z} 5 IN A 10.0.0.3\nsvc-dual-stack{Z} 5 IN AAAA 10::3"),
    c("dnsTestCases", f"svc1{Z}", "SOA", OK),
    c("dnsTestCases", f"endpoint.external{Z}", "CNAME", NX),
    c("nsTestCases", f"svc1{Z}", "A", OK, f"svc1{Z} 5 IN A 10.0.0.1"),
    c("nsTestCases", "svc1.nsnoexist.svc.cluster.local.", "A", NX),
    c("kubeApexCases", "cluster.local.", "SOA", OK,
      "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 5"),
    c("kubeApexCases", "cluster.local.", "HINFO", OK),
    c("kubeApexCases", "cluster.local.", "NS", OK, "cluster.local. 5 IN NS ns.dns.cluster.local.",
      "ns.dns.cluster.local. 5 IN A 127.0.0.1"),
]

POD_INSECURE = [
    c("podModeInsecureCases", "10-240-0-1.podns.pod.cluster.local.", "A", OK,
      "10-240-0-1.podns.pod.cluster.local. 5 IN A 10.240.0.1"),
    c("podModeInsecureCases", "172-0-0-2.podns.pod.cluster.local.", "A", OK,
      "172-0-0-2.podns.pod.cluster.local. 5 IN A 172.0.0.2"),
    c("podModeInsecureCases", "blah.podns.pod.cluster.local.", "A", NX),
    c("podModeInsecureCases", "blah.podns.pod.cluster.local.", "AAAA", NX),
    c("podModeInsecureCases", "blah.podns.pod.cluster.local.", "HINFO", NX),
    c("podModeInsecureCases", "blah.pod-nons.pod.cluster.local.", "A", NX),
    c("podModeInsecureCases", "podns.pod.cluster.local.", "A", OK,
      differs="an existing namespace is NODATA under pod. as under svc. (CoreDNS's verified mode agrees)"),
]

POD_VERIFIED = [
    c("podModeVerifiedCases", "10-240-0-1.podns.pod.cluster.local.", "A", OK,
      "10-240-0-1.podns.pod.cluster.local. 5 IN A 10.240.0.1"),
    c("podModeVerifiedCases", "podns.pod.cluster.local.", "A", OK),
    c("podModeVerifiedCases", "svcns.svc.cluster.local.", "A", OK),
    c("podModeVerifiedCases", "pod-nons.pod.cluster.local.", "A", NX),
    c("podModeVerifiedCases", "172-0-0-2.podns.pod.cluster.local.", "A", NX),
]

REVERSE_CASES = [
    c("TestReverse", "100.0.0.10.in-addr.arpa.", "PTR", OK,
      "100.0.0.10.in-addr.arpa. 5 IN PTR ep1a.svc1.testns.svc.cluster.local."),
    c("TestReverse", "100.1.168.192.in-addr.arpa.", "PTR", OK,
      "100.1.168.192.in-addr.arpa. 5 IN PTR svc1.testns.svc.cluster.local."),
    c("TestReverse", f"1.0.0.0.{R6}", "PTR", OK, f"1.0.0.0.{R6} 5 IN PTR ep1b.svc1.testns.svc.cluster.local."),
    c("TestReverse", f"a.0.0.0.0.0.0.0.0.0.{F6}", "PTR", OK,
      f"a.0.0.0.0.0.0.0.0.0.{F6} 5 IN PTR ip6svc1ex.svc1.testns.svc.cluster.local."),
    c("TestReverse", f"6.a.b.9.2.0.0.0.0.0.{F6}", "PTR", OK,
      f"6.a.b.9.2.0.0.0.0.0.{F6} 5 IN PTR ip6svc1in.svc1.testns.svc.cluster.local."),
    c("TestReverse", "101.0.0.10.in-addr.arpa.", "PTR", OK, upstream=True, differs=FALLTHROUGH),
    c("TestReverse", "example.org.cluster.local.", "PTR", NX,
      differs="a name of no schema shape in the zone is NXDOMAIN, as the spec's wrongly shaped names"),
]

POD_DISABLED = [
    c("podModeDisabledCases", "10-240-0-1.podns.pod.cluster.local.", "A", NX),
    c("podModeDisabledCases", "172-0-0-2.podns.pod.cluster.local.", "A", NX),
]

NOT_SYNCED = [c("notSyncedTestCases", f"svc0{Z}", "A", FAIL)]

# (question, type, rcode, answer, additional, authority) as dnspython prints them
PRESERVE_CASE = [
    ("not-a-service.testns.svc.ClUsTeR.lOcAl.", "A", NX, [], [],
     ["ClUsTeR.lOcAl. 5 IN SOA ns.dns.ClUsTeR.lOcAl. hostmaster.ClUsTeR.lOcAl. 1 7200 1800 86400 5"]),
    ("SvC1.TeStNs.SvC.cLuStEr.LoCaL.", "A", OK, ["SvC1.TeStNs.SvC.cLuStEr.LoCaL. 5 IN A 10.0.0.1"], [], []),
    ("_HtTp._TcP.sVc1.TeStNs.SvC.cLuStEr.LoCaL.", "SRV", OK,
     # DIFFERS: CoreDNS's target ends in the query's case (svc1.testns.svc.cLuStEr.LoCaL.). An SRV target
     # is never compressed (RFC 2782), so it cannot point at the question: netkit writes it canonical,
     # which keeps the reply cache's bytes the same for every casing of the question.
     ["_HtTp._TcP.sVc1.TeStNs.SvC.cLuStEr.LoCaL. 5 IN SRV 0 100 80 svc1.testns.svc.cluster.local."],
     ["svc1.testns.svc.cLuStEr.LoCaL. 5 IN A 10.0.0.1"], []),
    ("Cluster.local.", "SOA", OK,
     ["Cluster.local. 5 IN SOA ns.dns.Cluster.local. hostmaster.Cluster.local. 1 7200 1800 86400 5"], [], []),
]


def _view(text: str, pods: PodMode = PodMode.DISABLED) -> View:
    objs, problems = decode_text(text, "coredns")
    assert not problems, problems
    return build(Objects.of(objs), Options(ttl=5, pods=pods, local_ips=(ip_address("127.0.0.1"),)), serial=1)


def _check(v: View | None, options: Options, case: Case) -> None:
    reply = resolve(v, options, name_from_text(case.qname), TYPES[case.qtype])
    assert reply.rcode is case.rcode
    assert sorted(str(r) for r in reply.answer) == sorted(case.answer)
    assert sorted(str(r) for r in reply.additional) == sorted(case.extra)
    if case.upstream:
        assert reply.forward or reply.chase is not None
        return
    negative = case.rcode is not OK or not case.answer
    assert [r.rtype for r in reply.authority] == ([RType.SOA] if negative else [])
    if negative:
        assert str(reply.authority[0]).startswith("cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.")


def _ids(cases: list[Case]) -> list[str]:
    return [f"{x.table}: {x.qname} {x.qtype}" + (" (differs)" if x.differs else "") for x in cases]


ALL = CASES + POD_INSECURE + POD_VERIFIED + POD_DISABLED + REVERSE_CASES + NOT_SYNCED


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_handler_cases(case: Case) -> None:
    v = _view(OBJECTS)
    _check(v, v.options, case)


@pytest.mark.parametrize("case", POD_INSECURE, ids=_ids(POD_INSECURE))
def test_pod_insecure_cases(case: Case) -> None:
    v = _view(OBJECTS, PodMode.INSECURE)
    _check(v, v.options, case)


@pytest.mark.parametrize("case", POD_VERIFIED, ids=_ids(POD_VERIFIED))
def test_pod_verified_cases(case: Case) -> None:
    v = _view(OBJECTS, PodMode.VERIFIED)
    _check(v, v.options, case)


@pytest.mark.parametrize("case", POD_DISABLED, ids=_ids(POD_DISABLED))
def test_pod_disabled_cases(case: Case) -> None:
    v = _view(OBJECTS, PodMode.DISABLED)
    _check(v, v.options, case)


@pytest.mark.parametrize(("qname", "qtype", "rcode", "answer", "extra", "authority"), PRESERVE_CASE,
                         ids=[f"dnsPreserveCaseCases: {x[0]} {x[1]}" + (" (differs)" if x[1] == "SRV" else "")
                              for x in PRESERVE_CASE])
def test_preserve_case_cases(qname: str, qtype: str, rcode: Rcode, answer: list[str], extra: list[str],
                             authority: list[str]) -> None:
    import dns.message

    v = _view(OBJECTS)
    engine = Engine(v.options)
    engine.set_view(v)
    for _ in range(2):  # the second time from the reply cache
        out = engine.answer(dns.message.make_query(qname, qtype).to_wire(), False)
        assert isinstance(out, bytes)
        m = dns.message.from_wire(out)
        lines = [[line for rrset in section for line in rrset.to_text().splitlines()]
                 for section in (m.answer, m.additional, m.authority)]
        assert (m.rcode(), *lines) == (rcode, answer, extra, authority)


@pytest.mark.parametrize("case", REVERSE_CASES, ids=_ids(REVERSE_CASES))
def test_reverse_cases(case: Case) -> None:
    v = _view(REVERSE)
    _check(v, v.options, case)


@pytest.mark.parametrize("case", NOT_SYNCED, ids=_ids(NOT_SYNCED))
def test_not_synced_cases(case: Case) -> None:
    reply = resolve(None, Options(ttl=5), name_from_text(case.qname), TYPES[case.qtype])
    assert reply.rcode is case.rcode and [r.rtype for r in reply.authority] == [RType.SOA]


def test_the_table_is_complete() -> None:
    """73 cases: every case of CoreDNS's tables named above; only the documented ones differ."""
    assert len(ALL) + len(PRESERVE_CASE) == 73
    assert [x.qname for x in ALL if x.differs] == [
        "podns.pod.cluster.local.", "101.0.0.10.in-addr.arpa.", "example.org.cluster.local."]
