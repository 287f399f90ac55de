"""ConntrackCleaner against the real conntrack table of a fresh network namespace: entries are made
with the conntrack tool (as a DNATed UDP flow looks: original to the service, reply from the
endpoint), then `flush` must delete exactly the flows its Flush values name and leave the others."""

from __future__ import annotations

import shutil
import subprocess
from ipaddress import ip_address

import pytest

from netkit.runtime.conntrack import ConntrackCleaner, Flush

CLIENT = "203.0.113.5"


def _insert(netns: str, proto: str, dst: str, dport: int, endpoint: str, eport: int, sport: int) -> None:
    subprocess.run(["ip", "netns", "exec", netns, "conntrack", "-I", "-p", proto, "-s", CLIENT, "-d", dst,
                    "--sport", str(sport), "--dport", str(dport), "-r", endpoint, "-q", CLIENT,
                    "--reply-port-src", str(eport), "--reply-port-dst", str(sport), "-t", "120",
                    *(["--state", "ESTABLISHED"] if proto == "tcp" else [])],
                   check=True, capture_output=True)


def _flows(netns: str) -> set[tuple[str, str, int, str, int]]:
    out = subprocess.run(["ip", "netns", "exec", netns, "conntrack", "-L", "-o", "extended"],
                         check=True, capture_output=True, text=True).stdout
    flows = set()
    for line in out.splitlines():
        pairs = [kv.split("=", 1) for kv in line.split() if "=" in kv]
        first: dict[str, str] = {}
        second: dict[str, str] = {}
        for k, v in pairs:
            (second if k in first else first).setdefault(k, v)
        proto = line.split()[2]
        flows.add((proto, first["dst"], int(first["dport"]), second["src"], int(second["sport"])))
    return flows


@pytest.fixture
def ctns(netns: str) -> str:
    if shutil.which("conntrack") is None:
        pytest.skip("needs the conntrack tool (conntrack package) to create entries")
    return netns


def test_flush_deletes_exactly_the_named_flows(ctns: str) -> None:
    _insert(ctns, "udp", "10.96.0.53", 53, "10.244.1.11", 5353, 40001)  # to the service, endpoint 1
    _insert(ctns, "udp", "10.96.0.53", 53, "10.244.2.11", 5353, 40002)  # to the service, endpoint 2
    _insert(ctns, "udp", "10.96.0.54", 53, "10.244.1.11", 5353, 40003)  # another service, endpoint 1
    _insert(ctns, "udp", "192.0.2.10", 30053, "10.244.1.11", 5353, 40004)  # nodePort, endpoint 1
    _insert(ctns, "tcp", "10.96.0.53", 53, "10.244.1.11", 5353, 40005)  # TCP: never touched
    assert len(_flows(ctns)) == 5

    deleted = ConntrackCleaner(ctns).flush([
        Flush(ip_address("10.96.0.53"), 53, (ip_address("10.244.1.11"), 5353)),
        Flush(None, 30053, (ip_address("10.244.1.11"), 5353)),
    ])

    assert deleted == 2
    assert _flows(ctns) == {
        ("udp", "10.96.0.53", 53, "10.244.2.11", 5353),
        ("udp", "10.96.0.54", 53, "10.244.1.11", 5353),
        ("tcp", "10.96.0.53", 53, "10.244.1.11", 5353),
    }


def test_flush_of_a_service_ip_deletes_every_udp_flow_to_it(ctns: str) -> None:
    _insert(ctns, "udp", "10.96.0.53", 53, "10.244.1.11", 5353, 40001)
    _insert(ctns, "udp", "10.96.0.53", 53, "10.244.2.11", 5353, 40002)
    _insert(ctns, "udp", "10.96.0.53", 54, "10.244.2.11", 5354, 40003)  # another port of the same IP
    assert ConntrackCleaner(ctns).flush([Flush(ip_address("10.96.0.53"), 53)]) == 2
    assert _flows(ctns) == {("udp", "10.96.0.53", 54, "10.244.2.11", 5354)}


def test_nothing_to_flush_touches_nothing(ctns: str) -> None:
    _insert(ctns, "udp", "10.96.0.53", 53, "10.244.1.11", 5353, 40001)
    assert ConntrackCleaner(ctns).flush([]) == 0
    assert ConntrackCleaner(ctns).flush([Flush(ip_address("10.96.0.99"), 53)]) == 0
    assert len(_flows(ctns)) == 1
