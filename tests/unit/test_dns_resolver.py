"""The resolver, table-driven: each case is a question and the answer as zone-file lines."""

from __future__ import annotations

import pytest

from netkit.dns.names import name_from_text
from netkit.dns.resolver import Rcode, Reply, RType, resolve
from netkit.dns.view import Options, PodMode, View, build
from netkit.model.types import Objects
from netkit.sources.manifests import decode_text
from tests.unit.dns_cluster import headless, objects, view

SOA = "cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30"
Z = ".svc.cluster.local."
NX, OK = Rcode.NXDOMAIN, Rcode.NOERROR
NODATA = ""  # NOERROR, no answer: the SOA must be in authority

CASES: list[tuple[str, str, Rcode, str]] = [
    # ClusterIP services, single and dual stack
    (f"web.default{Z}", "A", OK, f"web.default{Z} 30 IN A 10.96.0.10"),
    (f"Web.DEFAULT{Z}", "A", OK, f"web.default{Z} 30 IN A 10.96.0.10"),
    (f"web.default{Z}", "AAAA", OK, NODATA),
    (f"web.default{Z}", "TXT", OK, NODATA),
    (f"dual.default{Z}", "A", OK, f"dual.default{Z} 30 IN A 10.96.0.14"),
    (f"dual.default{Z}", "AAAA", OK, f"dual.default{Z} 30 IN AAAA fd00:96::14"),
    # SRV for named ports (ClusterIP: the service is the target)
    (f"_http._tcp.web.default{Z}", "SRV", OK, f"_http._tcp.web.default{Z} 30 IN SRV 0 100 80 web.default{Z}"),
    (f"_dns._udp.kube-dns.kube-system{Z}", "SRV", OK,
     f"_dns._udp.kube-dns.kube-system{Z} 30 IN SRV 0 100 53 kube-dns.kube-system{Z}"),
    (f"_dns._tcp.kube-dns.kube-system{Z}", "SRV", NX, ""),
    (f"_dns-tcp._tcp.kube-dns.kube-system{Z}", "SRV", OK,
     f"_dns-tcp._tcp.kube-dns.kube-system{Z} 30 IN SRV 0 100 53 kube-dns.kube-system{Z}"),
    (f"_http._udp.web.default{Z}", "SRV", NX, ""),
    (f"_http._tcp.web.default{Z}", "A", OK, NODATA),
    (f"_tcp.web.default{Z}", "SRV", OK, NODATA),  # an empty non-terminal (RFC 8020: not NXDOMAIN)
    (f"_udp.web.default{Z}", "SRV", NX, ""),
    (f"noname.other{Z}", "SRV", OK, f"noname.other{Z} 30 IN SRV 0 100 80 noname.other{Z}"),  # as CoreDNS
    (f"_http._tcp.noname.other{Z}", "SRV", NX, ""),  # an unnamed port has no _port name
    (f"web.default{Z}", "SRV", OK, f"web.default{Z} 30 IN SRV 0 100 80 web.default{Z}"),
    # headless: every ready endpoint, hostnames, dashed addresses, readiness
    (f"db.default{Z}", "A", OK, (f"db.default{Z} 30 IN A 10.244.1.21\n"
                                 f"db.default{Z} 30 IN A 10.244.2.21")),
    (f"db-0.db.default{Z}", "A", OK, f"db-0.db.default{Z} 30 IN A 10.244.1.21"),
    (f"db-2.db.default{Z}", "A", NX, ""),
    (f"_postgres._tcp.db.default{Z}", "SRV", OK,
     (f"_postgres._tcp.db.default{Z} 30 IN SRV 0 50 5432 db-0.db.default{Z}\n"
      f"_postgres._tcp.db.default{Z} 30 IN SRV 0 50 5432 db-1.db.default{Z}")),
    (f"nr.default{Z}", "A", NX, ""),  # no ready endpoint
    (f"nr-0.nr.default{Z}", "A", NX, ""),
    (f"_peer._tcp.nr.default{Z}", "SRV", NX, ""),
    (f"pub.default{Z}", "A", OK, f"pub.default{Z} 30 IN A 10.244.3.2"),  # publishNotReadyAddresses
    (f"10-244-3-2.pub.default{Z}", "A", OK, f"10-244-3-2.pub.default{Z} 30 IN A 10.244.3.2"),
    (f"hl6.default{Z}", "AAAA", OK, f"hl6.default{Z} 30 IN AAAA fd00:244::5"),
    (f"fd00-244--5.hl6.default{Z}", "AAAA", OK, f"fd00-244--5.hl6.default{Z} 30 IN AAAA fd00:244::5"),
    (f"_dns._udp.hl6.default{Z}", "SRV", OK,
     f"_dns._udp.hl6.default{Z} 30 IN SRV 0 100 5353 fd00-244--5.hl6.default{Z}"),
    # ExternalName: CNAME, chased inside the zone; below it nothing
    (f"alias.default{Z}", "A", OK, (f"alias.default{Z} 30 IN CNAME web.default{Z}\n"
                                    f"web.default{Z} 30 IN A 10.96.0.10")),
    (f"alias.default{Z}", "CNAME", OK, f"alias.default{Z} 30 IN CNAME web.default{Z}"),
    (f"alias.default{Z}", "AAAA", OK, f"alias.default{Z} 30 IN CNAME web.default{Z}"),
    (f"x.alias.default{Z}", "A", NX, ""),
    (f"x.web.default{Z}", "A", NX, ""),  # below a ClusterIP service
    # structure: apex, spaces, namespaces, version, wrong shapes
    ("cluster.local.", "A", OK, NODATA),
    ("cluster.local.", "SOA", OK, SOA),
    ("svc.cluster.local.", "A", OK, NODATA),
    ("pod.cluster.local.", "A", OK, NODATA),
    ("default.svc.cluster.local.", "A", OK, NODATA),
    ("nowhere.svc.cluster.local.", "A", NX, ""),
    (f"web.nowhere{Z}", "A", NX, ""),
    ("dns-version.cluster.local.", "TXT", OK, 'dns-version.cluster.local. 28800 IN TXT "1.1.0"'),
    ("dns-version.cluster.local.", "A", OK, NODATA),
    (f"*.default{Z}", "A", NX, ""),
    (f"web.default{Z[:-1]}.default{Z}", "A", NX, ""),  # a search-path double
    (f"web.default{Z}cluster.local.", "A", NX, ""),
    ("web.default.cluster.local.", "A", NX, ""),
    ("a.b.c.d.web.default.svc.cluster.local.", "A", NX, ""),
    # pods insecure by default (kubeadm's Corefile), in namespaces that exist
    ("10-244-9-9.default.pod.cluster.local.", "A", OK, "10-244-9-9.default.pod.cluster.local. 30 IN A 10.244.9.9"),
    ("10-244-9-9.nowhere.pod.cluster.local.", "A", NX, ""),
    ("empty.svc.cluster.local.", "A", OK, NODATA),  # a Namespace object without Services
    ("empty.pod.cluster.local.", "A", OK, NODATA),
    # the apex NS and its name
    ("cluster.local.", "NS", OK, "cluster.local. 30 IN NS ns.dns.cluster.local."),
    ("ns.dns.cluster.local.", "A", OK, "ns.dns.cluster.local. 30 IN A 10.96.0.53"),  # kube-dns.kube-system
    ("ns.dns.cluster.local.", "AAAA", OK, NODATA),
    ("dns.cluster.local.", "A", NX, ""),
    # reverse: cluster IPs and headless endpoints
    ("10.0.96.10.in-addr.arpa.", "PTR", OK, f"10.0.96.10.in-addr.arpa. 30 IN PTR web.default{Z}"),
    ("21.1.244.10.in-addr.arpa.", "PTR", OK, f"21.1.244.10.in-addr.arpa. 30 IN PTR db-0.db.default{Z}"),
    ("4.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.0.d.f.ip6.arpa.", "PTR", OK,
     ("4.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.0.d.f.ip6.arpa. 30 IN PTR "
      f"dual.default{Z}")),
    ("10.0.96.10.in-addr.arpa.", "A", OK, NODATA),
]


def lines(reply: Reply) -> str:
    return "\n".join(str(r) for r in reply.answer)


def ask(v: View | None, name: str, qtype: str, options: Options | None = None) -> Reply:
    opts = options or (v.options if v else Options())
    return resolve(v, opts, name_from_text(name), RType[qtype])


@pytest.mark.parametrize(("name", "qtype", "rcode", "answer"), CASES, ids=[f"{c[0]} {c[1]}" for c in CASES])
def test_answer(name: str, qtype: str, rcode: Rcode, answer: str) -> None:
    reply = ask(view(), name, qtype)
    assert (reply.rcode, lines(reply)) == (rcode, answer)
    negative = rcode is Rcode.NXDOMAIN or not any(r.rtype == RType[qtype] for r in reply.answer)
    soa = SOA.replace("cluster.local.", "in-addr.arpa.", 1) if name.endswith("in-addr.arpa.") else SOA
    assert [str(r) for r in reply.authority] == ([soa] if negative else [])
    assert reply.authoritative and not reply.forward and reply.chase is None


def test_srv_carries_target_addresses_in_additional() -> None:
    reply = ask(view(), f"_postgres._tcp.db.default{Z}", "SRV")
    assert [str(r) for r in reply.additional] == [f"db-0.db.default{Z} 30 IN A 10.244.1.21",
                                                  f"db-1.db.default{Z} 30 IN A 10.244.2.21"]


@pytest.mark.parametrize(("pods", "name", "rcode", "answer"), [
    (PodMode.INSECURE, "10-1-2-3.other.pod.cluster.local.", OK, "10-1-2-3.other.pod.cluster.local. 30 IN A 10.1.2.3"),
    (PodMode.INSECURE, "other.pod.cluster.local.", OK, NODATA),
    (PodMode.INSECURE, "10-1-2-3.any.pod.cluster.local.", NX, ""),  # no such namespace
    (PodMode.INSECURE, "any.pod.cluster.local.", NX, ""),
    (PodMode.INSECURE, "10-1-2.any.pod.cluster.local.", NX, ""),
    (PodMode.INSECURE, "10-1-2-300.any.pod.cluster.local.", NX, ""),
    (PodMode.INSECURE, "x.10-1-2-3.any.pod.cluster.local.", NX, ""),
    (PodMode.VERIFIED, "10-244-9-9.default.pod.cluster.local.", OK,
     "10-244-9-9.default.pod.cluster.local. 30 IN A 10.244.9.9"),
    (PodMode.VERIFIED, "10-244-1-11.default.pod.cluster.local.", OK,  # known from an endpoint's targetRef
     "10-244-1-11.default.pod.cluster.local. 30 IN A 10.244.1.11"),
    (PodMode.VERIFIED, "10-244-9-9.other.pod.cluster.local.", NX, ""),
    (PodMode.VERIFIED, "10-1-2-3.default.pod.cluster.local.", NX, ""),
    (PodMode.DISABLED, "default.pod.cluster.local.", NX, ""),
])
def test_pod_records(pods: PodMode, name: str, rcode: Rcode, answer: str) -> None:
    reply = ask(view(pods), name, "A")
    assert (reply.rcode, lines(reply)) == (rcode, answer)


def test_insecure_pods_answer_ipv6_dashed_form() -> None:
    reply = ask(view(PodMode.INSECURE), "fd00-244--5.default.pod.cluster.local.", "AAAA")
    assert lines(reply) == "fd00-244--5.default.pod.cluster.local. 30 IN AAAA fd00:244::5"


def test_external_name_outside_the_zone_is_chased_upstream() -> None:
    reply = ask(view(), f"search.default{Z}", "A")
    assert lines(reply) == f"search.default{Z} 30 IN CNAME search.example.com."
    assert reply.chase == ("search", "example", "com") and not reply.from_view


def test_external_name_loop_is_servfail() -> None:
    assert ask(view(), f"loop1.default{Z}", "A").rcode is Rcode.SERVFAIL


@pytest.mark.parametrize("name", ["example.com.", "9.9.9.9.in-addr.arpa.", "10.in-addr.arpa.", "."])
def test_outside_and_foreign_reverse_names_are_forwarded(name: str) -> None:
    assert ask(view(), name, "A" if "arpa" not in name else "PTR").forward


def test_no_view_yet_is_servfail_in_the_zone_never_nxdomain() -> None:
    assert ask(None, f"web.default{Z}", "A").rcode is Rcode.SERVFAIL
    assert ask(None, "nowhere.svc.cluster.local.", "A").rcode is Rcode.SERVFAIL
    assert ask(None, "10.0.96.10.in-addr.arpa.", "PTR").rcode is Rcode.SERVFAIL
    assert ask(None, "example.com.", "A").forward
    soa = ask(None, f"web.default{Z}", "A").authority
    assert [str(r) for r in soa] == [
        "cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 0 7200 1800 86400 30"]


@pytest.mark.parametrize("qtype", ["AXFR", "IXFR"])
def test_zone_transfers_are_refused(qtype: str) -> None:
    assert ask(view(), "cluster.local.", qtype).rcode is Rcode.REFUSED


def test_other_zone_and_ttl() -> None:
    v = view(zone=("k8s", "example"), ttl=5)
    assert lines(ask(v, "web.default.svc.k8s.example.", "A")) == "web.default.svc.k8s.example. 5 IN A 10.96.0.10"
    assert ask(v, f"web.default{Z}", "A").forward


def test_any_returns_every_record_of_the_name() -> None:
    reply = ask(view(), f"dual.default{Z}", "ANY")
    assert {r.rtype for r in reply.answer} == {RType.A, RType.AAAA, RType.SRV}


@pytest.mark.parametrize(("count", "weight"), [(1, 100), (2, 50), (3, 33), (6, 16), (101, 0)])
def test_srv_weights_share_100_per_answer_as_coredns(count: int, weight: int) -> None:
    extra, problems = decode_text(headless("many", count), "many")
    assert not problems
    v = build(Objects.of([*objects().services, *objects().slices, *extra]), Options())
    reply = ask(v, f"_peer._tcp.many.default{Z}", "SRV")
    assert len(reply.answer) == count and {r.data.weight for r in reply.answer} == {weight}  # type: ignore[union-attr]
