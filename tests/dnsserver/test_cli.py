"""`netkit dns` refuses bad options and busy ports with one line and exit status 2."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys

import pytest

from netkit.cli import parser
from netkit.dns.cache import CacheOptions
from netkit.dns.config import cache_options, flags_config
from netkit.dns.endpoints import parse_http_address
from netkit.dns.upstream import Address, UpstreamError, parse_stub_domain
from netkit.errors import NetkitError
from netkit.netns import socket_in
from tests.conftest import EXAMPLES, ROOT
from tests.dnsserver.conftest import DNS_PORT, NO_HTTP

BUSY = 5300  # held by the test in its namespace


def netkit_dns(netns: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`netkit dns` to its exit, in the test's own namespace: the ports it binds are free there."""
    return subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-m", "netkit", "dns", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)


def test_a_busy_port_is_one_line_and_exit_2(netns: str) -> None:
    with socket_in(netns, socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", BUSY))
        busy.listen()
        dns_busy = netkit_dns(netns, "-f", str(EXAMPLES), "--listen", f"127.0.0.1:{BUSY}", *NO_HTTP)
        metrics_busy = netkit_dns(netns, "-f", str(EXAMPLES), "--listen", f"127.0.0.1:{DNS_PORT}", *NO_HTTP,
                                  "--metrics-listen", f"127.0.0.1:{BUSY}")
    for proc, flag in ((dns_busy, "--listen"), (metrics_busy, "--metrics-listen")):
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"netkit: error: {flag} 127.0.0.1:")
        assert "cannot listen" in lines[0]


@pytest.mark.parametrize(("value", "reason"), [
    ("6m", "caching SERVFAIL responses over 5 minutes is not permitted"),
    ("-1s", "invalid negative ttl for servfail"), ("soon", "'soon' is not a duration"),
])
def test_a_bad_servfail_duration_is_one_line_and_exit_2(netns: str, value: str, reason: str) -> None:
    proc = netkit_dns(netns, "-f", str(EXAMPLES), "--listen", f"127.0.0.1:{DNS_PORT}", *NO_HTTP,
                      f"--cache-servfail={value}")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"netkit: error: --cache-servfail: {reason}"), lines


def test_bad_stub_domains_and_addresses_are_refused(netns: str) -> None:
    proc = netkit_dns(netns, "-f", str(EXAMPLES), "--stub-domain", "example.com", *NO_HTTP)
    assert proc.returncode == 2 and proc.stderr.startswith("netkit: error: 'example.com': expected DOMAIN=")
    assert parse_stub_domain("Corp.Example.com=10.0.0.5,10.0.0.6:5353") == (
        ("corp", "example", "com"), [Address("10.0.0.5"), Address("10.0.0.6", 5353)])
    with pytest.raises(UpstreamError):
        parse_stub_domain("example.com=not-an-ip")
    assert parse_http_address(":9153", "--metrics-listen") == (None, 9153)
    assert parse_http_address("[::1]:8080", "--health-listen") == ("::1", 8080)
    assert parse_http_address("", "--ready-listen") is None
    with pytest.raises(NetkitError):
        parse_http_address("localhost:80", "--ready-listen")


def test_no_api_configuration_is_one_line(netns: str) -> None:
    proc = netkit_dns(netns, "--kubeconfig", "/nonexistent/kubeconfig", "--listen", f"127.0.0.1:{DNS_PORT}", *NO_HTTP,
                      env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["netkit: error: --kubeconfig /nonexistent/kubeconfig: no such file"]


def dns_args(*flags: str) -> argparse.Namespace:
    return parser().parse_args(["dns", *flags])


def test_the_cache_flags_are_lines_of_the_cache_block() -> None:
    o = cache_options(flags_config(dns_args()))
    assert o == CacheOptions(success_ttl=30, denial_ttl=30)  # kubeadm's `cache 30`
    o = cache_options(flags_config(dns_args("--cache-prefetch", "3 2m 20%", "--cache-serve-stale", "--cache-keepttl")))
    assert (o.prefetch, o.prefetch_duration, o.prefetch_percentage) == (3, 120.0, 20)
    assert (o.serve_stale, o.serve_stale_verify, o.keepttl) == (3600.0, False, True)
    o = cache_options(flags_config(dns_args("--cache-serve-stale", "10m verify")))
    assert (o.serve_stale, o.serve_stale_verify) == (600.0, True)


@pytest.mark.parametrize(("flag", "value", "reason"), [
    ("--cache-prefetch", "0", "prefetch amount should be positive"),
    ("--cache-prefetch", "2 1m 50", "last character of percentage should be `%`"),
    ("--cache-serve-stale", "1m nono", "invalid value for serve_stale refresh mode: nono"),
    ("--cache-serve-stale", "20", "serve_stale: not a duration"),
])
def test_a_bad_cache_option_is_one_line_and_exit_2(netns: str, flag: str, value: str, reason: str) -> None:
    proc = netkit_dns(netns, "-f", str(EXAMPLES), "--listen", f"127.0.0.1:{DNS_PORT}", *NO_HTTP, flag, value)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"netkit: error: {flag}: {reason}"), lines


def test_autopath_without_pods_verified_is_one_line_and_exit_2(netns: str) -> None:
    proc = netkit_dns(netns, "-f", str(EXAMPLES), "--listen", f"127.0.0.1:{DNS_PORT}", *NO_HTTP, "--autopath")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == ["netkit: error: autopath @kubernetes needs pods verified "
                     "(it finds the client's pod by its address)"]
    assert dns_args("--autopath", "--pods", "verified").autopath
