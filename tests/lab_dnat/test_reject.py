"""A Service without endpoints refuses TCP with a TCP reset and UDP with ICMP, in every mode.

The kernel rate-limits ICMP errors per peer (net.ipv4.icmp_ratelimit, a burst of about six and then
one a second), so with ICMP port-unreachable for TCP only the first few of many quick connections
were refused at once and the rest waited for SYN retransmits (kubernetes#90810). A TCP reset is not
rate-limited: every connection fails at once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from netkit.lab import Outcome
from netkit.model import IPFamily
from tests.lab_dnat.dataplane import Dataplane

pytestmark = pytest.mark.netns

NO_ENDPOINTS = """\
apiVersion: v1
kind: Service
metadata: {name: gone, namespace: edge}
spec:
  clusterIP: 10.96.1.40
  ports:
  - {name: http, port: 80, protocol: TCP}
  - {name: dns, port: 53, protocol: UDP}
"""
CONNECTIONS = 40  # well past the ICMP burst


def test_no_endpoints_tcp_is_reset_every_time_udp_gets_icmp(dataplane: Dataplane, tmp_path: Path) -> None:
    manifest = tmp_path / "gone.yaml"
    manifest.write_text(NO_ENDPOINTS)
    dataplane.apply(manifest)
    replies = [dataplane.lab.connect("client", "10.96.1.40", 80, timeout=1.5) for _ in range(CONNECTIONS)]
    outcomes = Counter(r.outcome.name for r in replies)
    assert outcomes == {"REFUSED": CONNECTIONS}, outcomes
    assert max(r.seconds for r in replies) < 0.9  # before the first SYN retransmission (1 s): at once
    udp = dataplane.lab.connect("client", "10.96.1.40", 53, "udp", timeout=1.5)
    assert udp.outcome is Outcome.REFUSED and udp.seconds < 0.9
    live = dataplane.be.render(dataplane.live(IPFamily.IPV4))
    assert ("--reject-with tcp-reset" if dataplane.mode == "iptables" else "reject with tcp reset") in live
