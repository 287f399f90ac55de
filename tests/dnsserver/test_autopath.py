"""`autopath @kubernetes` (CoreDNS's autopath README and plugin/kubernetes/autopath.go) against real
sockets: dnspython clients bound to 127.0.0.x addresses that the test's Pods carry, so the server
finds their namespace by source address; a client that is not a pod falls through to the usual answer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest

from netkit.dns.autopath import candidates, search_path
from netkit.dns.metrics import DnsMetrics
from netkit.dns.upstream import resolv_conf_search
from netkit.dns.view import Options, PodMode, View, build
from netkit.model import Objects
from netkit.sources.manifests import decode_text
from tests.dnsserver.conftest import Running, TestUpstream
from tests.unit.dns_cluster import objects

Start = Callable[..., Running]
IN_OTHER, IN_DEFAULT, NOT_A_POD = "127.0.0.31", "127.0.0.32", "127.0.0.1"
PODS = f"""
apiVersion: v1
kind: Pod
metadata: {{name: client, namespace: other}}
status: {{podIPs: [{{ip: {IN_OTHER}}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: client, namespace: default}}
status: {{podIPs: [{{ip: {IN_DEFAULT}}}]}}
"""


def view(autopath: bool = True) -> View:
    extra, problems = decode_text(PODS, "pods")
    assert not problems
    base = objects()
    options = Options(pods=PodMode.VERIFIED, autopath=autopath, autopath_search=(("corp", "test"),))
    return build(Objects.of(list(base.services + base.slices + base.pods) + extra), options, serial=1)


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    up = TestUpstream(host="127.0.0.33")
    yield up
    up.close()


def ask(r: Running, name: str, source: str, tcp: bool = False, qtype: str = "A") -> dns.message.Message:
    q = dns.message.make_query(name, qtype)
    if tcp:
        return dns.query.tcp(q, "127.0.0.1", port=r.port, timeout=10, source=source)
    return dns.query.udp(q, "127.0.0.1", port=r.port, timeout=10, source=source)


def autopaths(metrics: DnsMetrics) -> float:
    for family in metrics.collect():
        for s in family.samples:
            if s.name == "coredns_autopath_success_total":
                return float(s.value)
    raise AssertionError("coredns_autopath_success_total not exported")


def records(m: dns.message.Message) -> list[str]:
    return [f"{rr.name} {dns.rdatatype.to_text(rr.rdtype)} {item}" for rr in m.answer for item in rr]


@pytest.mark.parametrize("tcp", [False, True])
def test_a_pod_gets_the_name_found_down_its_search_path_in_one_round_trip(
        start_server: Start, upstream: TestUpstream, tcp: bool) -> None:
    r = start_server(view(), [upstream.address])
    asked = "web.default.other.svc.cluster.local."  # `web.default` from a pod in `other`
    # Not a pod (and a pod of another namespace): the usual NXDOMAIN, which must not stick in the cache.
    for source in (NOT_A_POD, IN_DEFAULT):
        assert ask(r, asked, source, tcp).rcode() == dns.rcode.NXDOMAIN
    assert autopaths(r.server.metrics) == 0
    m = ask(r, asked, IN_OTHER, tcp)
    assert m.rcode() == dns.rcode.NOERROR and m.question[0].name.to_text() == asked
    assert records(m)[0] == f"{asked} CNAME web.default.svc.cluster.local."
    assert records(m)[1].startswith("web.default.svc.cluster.local. A ")
    assert autopaths(r.server.metrics) == 1
    assert not upstream.seen  # found inside the cluster: nothing forwarded


def test_names_outside_the_cluster_come_through_the_host_search_and_the_bare_name(
        start_server: Start, upstream: TestUpstream) -> None:
    r = start_server(view(), [upstream.address])
    asked = "www.example.com.other.svc.cluster.local."
    m = ask(r, asked, IN_OTHER)
    assert m.rcode() == dns.rcode.NOERROR
    assert records(m) == [f"{asked} CNAME www.example.com.", "www.example.com. A 192.0.2.1"]
    assert upstream.seen == ["www.example.com.corp.test.", "www.example.com."]  # the host's search, then bare
    assert autopaths(r.server.metrics) == 1


def test_a_name_that_exists_or_nowhere_is_answered_as_usual(start_server: Start, upstream: TestUpstream) -> None:
    r = start_server(view(), [upstream.address])
    m = ask(r, "noname.other.svc.cluster.local.", IN_OTHER)  # the pod's own namespace: no CNAME
    assert records(m) == ["noname.other.svc.cluster.local. A 10.96.0.20"]
    m = ask(r, "nothing.other.svc.cluster.local.", IN_OTHER)  # NXDOMAIN all the way: the first NXDOMAIN
    assert m.rcode() == dns.rcode.NXDOMAIN and m.question[0].name.to_text() == "nothing.other.svc.cluster.local."
    assert m.authority and m.authority[0].name.to_text() == "cluster.local."
    assert upstream.seen == ["nothing.corp.test.", "nothing."]
    m = ask(r, "web.default.svc.cluster.local.", IN_OTHER)  # not in the first element of its search path
    assert records(m)[0].startswith("web.default.svc.cluster.local. A ")
    assert autopaths(r.server.metrics) == 0


def test_without_autopath_the_pod_walks_its_search_path_itself(start_server: Start, upstream: TestUpstream) -> None:
    r = start_server(view(autopath=False), [upstream.address])
    assert ask(r, "web.default.other.svc.cluster.local.", IN_OTHER).rcode() == dns.rcode.NXDOMAIN


def test_autopath_needs_pods_verified() -> None:
    with pytest.raises(ValueError, match="pods verified"):
        Options(pods=PodMode.INSECURE, autopath=True)


def test_the_search_path_is_corednss(tmp_path: Path) -> None:
    v = view()
    assert search_path(v, v.options, IN_OTHER) == (
        ("other", "svc", "cluster", "local"), ("svc", "cluster", "local"), ("cluster", "local"), ("corp", "test"), ())
    assert search_path(v, v.options, NOT_A_POD) == () and search_path(v, v.options, "not-an-ip") == ()
    search = search_path(v, v.options, IN_OTHER)
    assert candidates(("a", "b", "other", "svc", "cluster", "local"), search)[-1] == ("a", "b")
    assert candidates(("other", "svc", "cluster", "local"), search) == ()  # nothing before the element
    assert candidates(("a", "default", "svc", "cluster", "local"), search) == ()
    conf = tmp_path / "resolv.conf"
    conf.write_text("nameserver 10.0.0.10\nsearch old.test\nsearch Corp.Test. example.org\noptions ndots:5\n")
    assert resolv_conf_search(str(conf)) == (("corp", "test"), ("example", "org"))  # the last line counts
    assert resolv_conf_search(str(tmp_path / "missing")) == ()
