"""`netkit dns --conf COREFILE` over real sockets: the Corefile's `reload` follows a ConfigMap volume's
`..data` symlink swap (and keeps the running configuration when the new Corefile is invalid or cannot
start), with CoreDNS's reload metrics, and
`health { lameduck }` keeps answering after SIGTERM while /ready stops answering 200, then exits 0."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rcode
import pytest
from prometheus_client.parser import text_string_to_metric_families

from netkit.dns.config import corefile_digest
from netkit.netns import socket_in
from tests.conftest import EXAMPLES
from tests.dnsserver.conftest import (
    DNS_PORT,
    HEALTH_PORT,
    METRICS_PORT,
    READY_PORT,
    DnsProcess,
    TestUpstream,
    ask_in,
)

WEB = "web.default.svc.cluster.local."


def corefile(port: int, ready: int, *, ttl: int = 30, extra: str = "", lameduck: str = "") -> str:
    health = f"health 127.0.0.1:{HEALTH_PORT} {{\n        lameduck {lameduck}\n    }}" if lameduck else ""
    return f""".:{port} {{
    errors
    bind 127.0.0.1
    {health}
    ready 127.0.0.1:{ready}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl {ttl}
    }}
    {extra}
}}
"""


class Served(DnsProcess):
    """`netkit dns --conf` on the examples in the test's namespace, its stderr collected line by line."""

    def __init__(self, netns: str, conf: Path) -> None:
        super().__init__(netns, "--conf", str(conf), "-f", str(EXAMPLES))

    def ask(self, name: str = WEB, qtype: str = "A") -> dns.message.Message | None:  # type: ignore[override]
        try:
            return ask_in(self.netns, name, qtype)
        except (dns.exception.Timeout, OSError):
            return None

    def ready_status(self) -> int | None:
        try:
            return self.get(READY_PORT, "/ready")[0]
        except (OSError, http.client.HTTPException):
            return None

    def metric(self, port: int, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """The samples of one metric family: labels → value."""
        status, text = self.get(port, "/metrics")
        assert status == 200, text
        return {tuple(sorted(s.labels.items())): s.value for f in text_string_to_metric_families(text)
                for s in f.samples if s.name == name}


def wait_for(what: Callable[[], bool], served: Served, timeout: float = 60) -> None:
    served.wait_for(what, timeout)


@pytest.fixture
def serve(netns: str) -> Iterator[Callable[[Path], Served]]:
    started: list[Served] = []

    def start(conf: Path) -> Served:
        started.append(Served(netns, conf))
        return started[-1]

    yield start
    for s in started:
        s.close()


def configmap_volume(root: Path, text: str, version: int) -> None:
    """What the kubelet does to a ConfigMap volume: the new content in a new timestamped directory,
    `..data` swapped to it in one rename, `Corefile` a symlink through `..data`."""
    new = root / f"..2026_01_01_00_00_0{version}.000000"
    new.mkdir()
    (new / "Corefile").write_text(text)
    tmp = root / "..data_tmp"
    tmp.symlink_to(new.name)
    os.rename(tmp, root / "..data")
    if not (root / "Corefile").is_symlink():
        (root / "Corefile").symlink_to("..data/Corefile")


def ttl_of(reply: dns.message.Message | None) -> int | None:
    return reply.answer[0].ttl if reply is not None and reply.answer else None


def test_reload_follows_the_configmap_swap_and_keeps_the_old_config_on_errors(
        tmp_path: Path, serve: Callable[[Path], Served]) -> None:
    port, ready, metrics = DNS_PORT, READY_PORT, METRICS_PORT
    extra = f"reload 2s 1s\n    prometheus 127.0.0.1:{metrics}"
    first = corefile(port, ready, ttl=30, extra=extra)
    configmap_volume(tmp_path, first, 1)
    served = serve(tmp_path / "Corefile")
    wait_for(lambda: ttl_of(served.ask()) == 30, served)
    assert served.metric(metrics, "coredns_reload_version_info") == {
        (("hash", "sha512"), ("value", corefile_digest(first))): 1.0}
    assert served.ask(WEB, "TXT") is not None  # counted once, before the reload

    def txt_requests() -> float:
        return sum(v for k, v in served.metric(metrics, "coredns_dns_requests_total").items() if ("type", "TXT") in k)
    assert txt_requests() == 1

    second = corefile(port, ready, ttl=7, extra=extra)
    rcodes: list[int] = []
    done = threading.Event()

    def keep_asking() -> None:  # through the reload: the cluster's names never get SERVFAIL
        while not done.is_set():
            reply = served.ask()
            if reply is not None:
                rcodes.append(reply.rcode())
            time.sleep(0.01)

    asking = threading.Thread(target=keep_asking, daemon=True)
    asking.start()
    configmap_volume(tmp_path, second, 2)
    wait_for(lambda: ttl_of(served.ask()) == 7, served)
    done.set()
    asking.join(10)
    assert rcodes and set(rcodes) == {dns.rcode.NOERROR}
    assert served.said("reloading")
    assert served.metric(metrics, "coredns_reload_version_info") == {
        (("hash", "sha512"), ("value", corefile_digest(second))): 1.0}
    assert txt_requests() == 1  # the counters go on over a reload, as CoreDNS's do

    configmap_volume(tmp_path, corefile(port, ready, ttl=9, extra=extra + "\n    chaos"), 3)
    wait_for(lambda: served.said("reload failed"), served)
    assert any("chaos: unknown plugin (not supported by netkit)" in line for line in served.lines)
    assert ttl_of(served.ask()) == 7  # the running configuration keeps serving
    assert served.ready_status() == 200
    assert served.metric(metrics, "coredns_reload_failed_total") == {(): 1.0}

    # a Corefile that reads well but cannot start: the old one starts again
    with socket_in(served.netns, socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 5300))
        busy.listen()
        configmap_volume(tmp_path, corefile(5300, ready, ttl=5, extra=extra), 4)
        wait_for(lambda: served.said("starting the previous Corefile again"), served)
        wait_for(lambda: ttl_of(served.ask()) == 7, served)
    assert served.metric(metrics, "coredns_reload_failed_total") == {(): 2.0}

    configmap_volume(tmp_path, corefile(port, ready, ttl=11, extra=extra), 5)
    wait_for(lambda: ttl_of(served.ask()) == 11, served)
    assert served.metric(metrics, "coredns_reload_failed_total") == {(): 2.0}


def test_lameduck_answers_while_ready_says_no_then_exits_0(
        tmp_path: Path, serve: Callable[[Path], Served]) -> None:
    port, ready = DNS_PORT, READY_PORT
    (tmp_path / "Corefile").write_text(corefile(port, ready, lameduck="4s"))
    served = serve(tmp_path / "Corefile")
    wait_for(lambda: served.ready_status() == 200 and served.ask() is not None, served)

    served.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: served.ready_status() == 503, served, timeout=30)
    answered_while_draining = served.ask()
    assert answered_while_draining is not None and answered_while_draining.rcode() == dns.rcode.NOERROR
    assert answered_while_draining.answer and answered_while_draining.answer[0][0].address == "10.96.0.10"
    assert served.proc.poll() is None  # still there: the lameduck lasts 4 s
    assert served.proc.wait(60) == 0
    assert served.ask() is None


def test_without_lameduck_sigterm_exits_at_once(tmp_path: Path, serve: Callable[[Path], Served]) -> None:
    port, ready = DNS_PORT, READY_PORT
    (tmp_path / "Corefile").write_text(corefile(port, ready))
    served = serve(tmp_path / "Corefile")
    wait_for(lambda: served.ready_status() == 200, served)
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(30) == 0
    assert not served.said("lameduck")


def test_serve_stale_through_a_corefile(tmp_path: Path, netns: str, serve: Callable[[Path], Served]) -> None:
    upstream = TestUpstream(host="127.0.0.24", netns=netns)
    try:
        port, ready, metrics = DNS_PORT, READY_PORT, METRICS_PORT
        extra = f"""prometheus 127.0.0.1:{metrics}
    forward . 127.0.0.24:{upstream.port}
    cache 30 {{
        success 9984 1 0
        denial 9984 1 0
        serve_stale 1h immediate
        prefetch 100
    }}"""
        (tmp_path / "Corefile").write_text(corefile(port, ready, extra=extra))
        served = serve(tmp_path / "Corefile")
        wait_for(lambda: served.ask("www.example.com.") is not None, served)
        upstream.mute = True  # the upstream goes silent; the answer expires (TTL 1)
        time.sleep(1.2)
        m = served.ask("www.example.com.")
        assert m is not None and m.rcode() == dns.rcode.NOERROR and ttl_of(m) == 0
        assert m.answer[0][0].to_text() == "192.0.2.1"
        assert sum(served.metric(metrics, "coredns_cache_served_stale_total").values()) == 1
        assert "autopath" not in str(served.metric(metrics, "coredns_plugin_enabled"))
    finally:
        upstream.close()


def test_autopath_through_a_corefile(tmp_path: Path, netns: str) -> None:
    """A pod at 127.0.0.41 (namespace other) asks `web.default.other.svc…` once and gets web.default's
    address under a CNAME; the Corefile says `autopath @kubernetes` with `pods verified`."""
    (tmp_path / "pod.yaml").write_text(  # a file source waits for a Service in every file
        "apiVersion: v1\nkind: Pod\nmetadata: {name: client, namespace: other}\nstatus: {podIPs: [{ip: 127.0.0.41}]}\n"
        "---\napiVersion: v1\nkind: Service\nmetadata: {name: client, namespace: other}\n"
        "spec: {clusterIP: 10.96.7.7, ports: [{port: 80}]}\n")
    text = corefile(DNS_PORT, READY_PORT).replace("pods insecure", "pods verified")
    text = text.replace("    errors\n", "    errors\n    autopath @kubernetes\n")
    (tmp_path / "Corefile").write_text(text)
    server = DnsProcess(netns, "--conf", str(tmp_path / "Corefile"), "-f", str(EXAMPLES),
                        "-f", str(tmp_path / "pod.yaml"))
    asked = "web.default.other.svc.cluster.local."
    q = dns.message.make_query(asked, "A")

    def from_pod() -> dns.message.Message:
        with socket_in(netns, socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.bind(("127.0.0.41", 0))
            sock.setblocking(False)
            return dns.query.udp(q, "127.0.0.1", port=DNS_PORT, timeout=1, sock=sock)

    try:
        server.wait_for(lambda: from_pod().rcode() != dns.rcode.SERVFAIL)  # SERVFAIL until the first complete list
        m = from_pod()
        assert m.rcode() == dns.rcode.NOERROR
        assert m.answer[0].name.to_text() == asked and m.answer[0][0].to_text() == WEB
        assert m.answer[1].name.to_text() == WEB
        plain = ask_in(netns, asked, timeout=5)  # not a pod: as usual
        assert plain.rcode() == dns.rcode.NXDOMAIN
    finally:
        server.stop()
