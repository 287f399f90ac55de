"""Forwarding like CoreDNS's `forward` and `cache 30`, against fake upstreams on 127.0.0.x: the cache,
failover past a dead upstream, policies, max_concurrent, stub domains, and ExternalName chasing that
keeps the upstream's SOA and TC bit."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterator

import dns.flags
import dns.message
import dns.query
import dns.rcode
import pytest

from netkit.dns.upstream import Forwarder, Policy, Router
from netkit.dns.view import Options, View, build
from netkit.model import Objects
from netkit.sources.manifests import decode_text
from tests.dnsserver.conftest import Running, TestUpstream
from tests.unit.dns_cluster import objects

Z = ".svc.cluster.local."
Start = Callable[..., Running]
Upstreams = Callable[..., TestUpstream]
ALIASES = """
apiVersion: v1
kind: Service
metadata: {name: gone, namespace: default}
spec: {type: ExternalName, externalName: gone.test}
---
apiVersion: v1
kind: Service
metadata: {name: large, namespace: default}
spec: {type: ExternalName, externalName: big.example.com}
"""


def view() -> View:
    extra, problems = decode_text(ALIASES, "aliases")
    assert not problems
    base = objects()
    return build(Objects.of(list(base.services + base.slices + base.pods) + extra), Options(), serial=1)


def ask(r: Running, name: str, qtype: str = "A", tcp: bool = False, timeout: float = 5) -> dns.message.Message:
    q = dns.message.make_query(name, qtype)
    if tcp:
        return dns.query.tcp(q, "127.0.0.1", port=r.port, timeout=timeout)
    return dns.query.udp(q, "127.0.0.1", port=r.port, timeout=timeout)


@pytest.fixture
def upstreams() -> Iterator[Callable[..., TestUpstream]]:
    made: list[TestUpstream] = []

    def make(host: str = "127.0.0.2", **kw: object) -> TestUpstream:
        up = TestUpstream(host=host, **kw)  # type: ignore[arg-type]
        made.append(up)
        return up

    yield make
    for up in made:
        up.close()


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_three_client_queries_cost_one_upstream_query(start_server: Start, upstreams: Upstreams) -> None:
    up = upstreams()
    r = start_server(view(), [up.address])
    answers = [ask(r, name) for name in ("www.example.com.", "WWW.example.com.", "www.Example.COM.")]
    assert up.count("www.example.com.") == 1
    assert [a.answer[0][0].to_text() for a in answers] == ["192.0.2.1"] * 3
    assert [a.question[0].name.to_text() for a in answers] == ["www.example.com.", "WWW.example.com.",
                                                                  "www.Example.COM."]
    assert all(a.answer[0].ttl <= 30 for a in answers)  # capped like `cache 30`
    c = r.server.metrics  # counted just after the answer is sent
    eventually(lambda: sum(c.counts[n] for n, k in enumerate(c.kinds) if k.plugin == "cache") == 2)


def test_negative_answers_are_cached_with_their_soa(start_server: Start, upstreams: Upstreams) -> None:
    up = upstreams()
    r = start_server(view(), [up.address])
    first, second = ask(r, "nothing.test."), ask(r, "nothing.test.")
    assert first.rcode() == second.rcode() == dns.rcode.NXDOMAIN
    assert second.authority[0].rdtype == dns.rdatatype.SOA and second.authority[0].ttl <= 30
    assert up.count("nothing.test.") == 1


def test_cached_ttls_count_down(start_server: Start, upstreams: Upstreams) -> None:
    up = upstreams()
    r = start_server(view(), [up.address])
    assert ask(r, "tick.example.com.").answer[0].ttl == 30
    eventually(lambda: ask(r, "tick.example.com.").answer[0].ttl < 30, timeout=5)
    assert up.count("tick.example.com.") == 1


def test_a_dead_first_upstream_is_skipped_once_health_checks_fail(
        start_server: Start, upstreams: Upstreams) -> None:
    dead, live = upstreams("127.0.0.2", mute=True), upstreams("127.0.0.3")
    fwd = Forwarder([dead.address, live.address], 0.2, policy=Policy.SEQUENTIAL, health_check=0.05)
    r = start_server(view(), forwarder=fwd)
    assert ask(r, "a.example.com.").answer[0][0].to_text() == "192.0.2.1"  # after the dead one timed out
    eventually(lambda: fwd.down(dead.address))
    client_queries = [n for n in dead.seen if n != "."]
    for i in range(5):
        assert ask(r, f"b{i}.example.com.").answer
    assert [n for n in dead.seen if n != "."] == client_queries  # only health checks reach it now
    assert r.server.metrics.proxy.healthcheck_failures[str(dead.address)] > fwd.max_fails


def test_a_silent_upstream_costs_one_query_its_timeout(start_server: Start, upstreams: Upstreams) -> None:
    """Within one query the silent upstream is given up and the next tried; until a health check says
    it answers again, the queries after it go to the others first (the probe's first try is 5 s away,
    so nothing here depends on max_fails)."""
    dead, live = upstreams("127.0.0.2", mute=True), upstreams("127.0.0.3")
    fwd = Forwarder([dead.address, live.address], 0.3, policy=Policy.SEQUENTIAL, health_check=5.0)
    r = start_server(view(), forwarder=fwd)
    assert ask(r, "a.example.com.").answer[0][0].to_text() == "192.0.2.1"
    assert dead.count("a.example.com.") == 1 and not fwd.down(dead.address)
    for i in range(5):
        assert ask(r, f"b{i}.example.com.").answer
    assert not any(n.startswith("b") for n in dead.seen)
    assert live.count("b4.example.com.") == 1


def test_a_recovered_upstream_is_used_again(start_server: Start, upstreams: Upstreams) -> None:
    flaky, other = upstreams("127.0.0.2", mute=True), upstreams("127.0.0.3")
    fwd = Forwarder([flaky.address, other.address], 0.2, policy=Policy.SEQUENTIAL, health_check=0.05)
    r = start_server(view(), forwarder=fwd)
    ask(r, "a.example.com.")
    eventually(lambda: fwd.down(flaky.address))
    flaky.mute = False
    eventually(lambda: not fwd.down(flaky.address))
    ask(r, "c.example.com.")
    assert flaky.count("c.example.com.") == 1 and other.count("c.example.com.") == 0


def test_round_robin_spreads_and_sequential_keeps_order(
        start_server: Start, upstreams: Upstreams) -> None:
    one, two = upstreams("127.0.0.2"), upstreams("127.0.0.3")
    r = start_server(view(), forwarder=Forwarder([one.address, two.address], 1, policy=Policy.ROUND_ROBIN))
    for i in range(6):
        ask(r, f"rr{i}.example.com.")
    assert len(one.seen) == len(two.seen) == 3
    r2 = start_server(view(), forwarder=Forwarder([one.address, two.address], 1, policy=Policy.SEQUENTIAL))
    for i in range(4):
        ask(r2, f"seq{i}.example.com.")
    assert sum(n.startswith("seq") for n in one.seen) == 4 and not any(n.startswith("seq") for n in two.seen)


def test_max_concurrent_refuses_beyond_the_limit(start_server: Start, upstreams: Upstreams) -> None:
    slow = upstreams(delay=1.0)
    r = start_server(view(), forwarder=Forwarder([slow.address], 3, max_concurrent=1))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        waiting = pool.submit(ask, r, "slow.example.com.")
        eventually(lambda: slow.count("slow.example.com.") == 1)
        refused = ask(r, "other.example.com.")
        assert refused.rcode() == dns.rcode.REFUSED
        assert waiting.result().answer[0][0].to_text() == "192.0.2.9"
    assert r.server.metrics.proxy.max_concurrent_rejects == 1


def test_stub_domains_go_to_their_own_upstreams(start_server: Start, upstreams: Upstreams) -> None:
    default, stub = upstreams("127.0.0.2"), upstreams("127.0.0.3")
    router = Router(Forwarder([default.address], 1), {("corp", "example", "com"): Forwarder([stub.address], 1)})
    r = start_server(view(), forwarder=router)
    ask(r, "db.Corp.example.com.")
    ask(r, "www.example.com.")
    assert stub.seen == ["db.corp.example.com."] and default.seen == ["www.example.com."]


def test_chased_external_name_keeps_the_upstream_soa_and_tc(
        start_server: Start, upstreams: Upstreams) -> None:
    up = upstreams()
    r = start_server(view(), [up.address])
    gone = ask(r, f"gone.default{Z}")  # an ExternalName to a name the upstream does not know
    assert gone.rcode() == dns.rcode.NXDOMAIN
    assert [rr.rdtype for rr in gone.answer] == [dns.rdatatype.CNAME]
    assert [rr.rdtype for rr in gone.authority] == [dns.rdatatype.SOA]
    big = ask(r, f"large.default{Z}")  # → big.example.com, truncated upstream over UDP
    assert big.flags & dns.flags.TC
    full = ask(r, f"large.default{Z}", tcp=True)
    assert not full.flags & dns.flags.TC and len(full.answer[1]) == 60
