"""Where the nftables mode means to differ from the iptables mode on a packet-flow case of tests/flows.py.

One table of cases serves both backends; the few deliberate differences are listed here, each with
its reason, and `expected(flow, mode)` is the case as that mode must answer it (the unit tracer tests
and the lab's kernel tests both read it).
"""

from __future__ import annotations

from dataclasses import replace

from tests.flows import Flow

MODES = ("iptables", "nftables")

# flow name → what nftables does instead, and why.
NFTABLES = {
    # kube-proxy's nftables mode (and netkit's) rejects traffic to a clusterIP on a port no service
    # defines (`cluster-ips-check`), where the iptables mode lets it through untranslated.
    "a port the service does not have is not translated": {"verdict": "reject", "endpoints": {}},
}


def expected(flow: Flow, mode: str) -> Flow:
    if mode == "nftables" and flow.name in NFTABLES:
        return replace(flow, **NFTABLES[flow.name])  # type: ignore[arg-type]
    return flow
