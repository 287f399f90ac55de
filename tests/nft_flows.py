"""Where the nftables mode means to differ from the iptables mode on a packet-flow case of tests/flows.py.

One table of cases serves both backends; the few deliberate differences are listed here, each with
its reason, and `expected(flow, mode)` is the case as that mode must answer it (the unit tracer tests
and the lab's kernel tests both read it).
"""

from __future__ import annotations

from dataclasses import replace

from tests.flows import Flow

MODES = ("iptables", "nftables")
TRACE_MODES = (*MODES, "ipvs")  # IPVS is traced on the host too; its kernel tests run in the VM

# flow name → what nftables does instead, and why.
NFTABLES = {
    # kube-proxy's nftables mode (and netkit's) rejects traffic to a clusterIP on a port no service
    # defines (`cluster-ips-check`), where the iptables mode lets it through untranslated.
    "a port the service does not have is not translated": {"verdict": "reject", "endpoints": {}},
}


# flow name → what the IPVS mode does instead, and why.
IPVS = {
    # KUBE-IPVS-FILTER rejects NEW connections to a service address on a port no virtual server has
    # (kube-proxy's IPVS mode does the same).
    "a port the service does not have is not translated": {"verdict": "reject", "endpoints": {}},
    # No usable endpoint leaves an empty virtual server, which answers ICMP port-unreachable itself
    # (ip_vs_leave): a reject, where the iptables rules DROP (docs/ipvs.md, "No endpoints").
    "iTP=Local without a local endpoint drops": {"verdict": "reject"},
    "eTP=Local without a local endpoint drops external traffic": {"verdict": "reject"},
    "eTP=Local without a local endpoint drops an external NodePort": {"verdict": "reject"},
    "eTP=Local without a local endpoint drops an external LB IP": {"verdict": "reject"},
    # The node's own connection to an eTP=Local address goes through the fwmark virtual server
    # without KUBE-MARK-MASQ (the address is in KUBE-LOAD-BALANCER-LOCAL / -EXTERNAL-IP-LOCAL): it
    # keeps the node's address, which the endpoint answers through the node anyway.
    "… and so does the node itself, masqueraded": {"masquerade": False},
}


def expected(flow: Flow, mode: str) -> Flow:
    table = {"nftables": NFTABLES, "ipvs": IPVS}.get(mode, {})
    if flow.name in table:
        return replace(flow, **table[flow.name])  # type: ignore[arg-type]
    return flow
