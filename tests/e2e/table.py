"""docs/e2e.md's table, generated from a test run: upstream test → our test → result per mode
(dual-stack: an iptables-mode cluster with both IP families; upstream's [Feature:IPv6DualStack]
tests run there only, "—" in the other columns).

    NETKIT_E2E_RESULTS=tests/e2e/results.json pytest -n 2 tests/e2e   # as root
    python -m tests.e2e.table                                         # rewrites docs/e2e.md's table

The table goes between the page's two markers; the upstream tests not yet translated, and those the
lab cannot express (with the reason), come from the lists below.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "e2e" / "results.json"
PAGE = ROOT / "docs" / "e2e.md"
BEGIN, END = "<!-- e2e-table:begin -->", "<!-- e2e-table:end -->"
MODES = ("iptables", "nftables", "dual-stack")
MARK = {"passed": "pass", "failed": "**FAIL**", "skipped": "skipped"}
DUAL_STACK_ONLY = "[Feature:IPv6DualStack]"  # upstream's dual-stack tests: run in the dual-stack mode only
GRANULAR = f"{DUAL_STACK_ONLY} Granular Checks: Services Secondary IP Family [LinuxOnly]"


def modes_of(row: dict[str, str]) -> tuple[str, ...]:
    """The modes a translated test runs in."""
    return ("dual-stack",) if row["describe"] == DUAL_STACK_ONLY else MODES

NOT_YET = (
    "Services should have session affinity timeout work for service with type clusterIP [LinuxOnly] [Conformance]",
    "Services should have session affinity work for NodePort service [LinuxOnly] [Conformance]",
    "Services should be able to switch session affinity for NodePort service [LinuxOnly] [Conformance]",
    "Services should have session affinity timeout work for NodePort service [LinuxOnly] [Conformance]",
    "Services should serve a basic endpoint from pods [Conformance]",
    "Services should be able to change the type from ExternalName to NodePort [Conformance]",
    "Services should be able to change the type from NodePort to ExternalName [Conformance]",
    "Services should be able to create a functioning NodePort service [Conformance]",
    "Services should allow pods to hairpin back to themselves through services",
    "Services should preserve source pod IP for traffic thru service cluster IP [LinuxOnly]",
    "Services should respect internalTrafficPolicy=Local Pod to Pod",
    "Services should implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy changes",
    "Services should be able to up and down services",
    "Services should work after the service has been recreated",
    "Services should be updated after adding or deleting ports",
    "Services should be able to connect to terminating and unready endpoints if PublishNotReadyAddresses is true",
    "Services should not be able to connect to terminating and unready endpoints if PublishNotReadyAddresses "
    "is false",
    "Services should create endpoints for unready pods",
    "Conntrack should be able to preserve UDP traffic when server pod cycles for a ClusterIP service",
    "Conntrack should be able to preserve UDP traffic when server pod cycles for a NodePort service",
    "Conntrack should drop INVALID conntrack entries [Privileged]",
    "DNS should provide DNS for the cluster  [Conformance]",
    "DNS should resolve DNS of partial qualified names for services [LinuxOnly] [Conformance]",
    "DNS should provide DNS for pods for Hostname [LinuxOnly] [Conformance]",
    "DNS should provide DNS for pods for Subdomain [Conformance]",
    "Services should check kube-proxy urls",
    f"{GRANULAR} should be able to handle large requests: http",
    f"{GRANULAR} should be able to handle large requests: udp",
)
NOT_EXPRESSIBLE = (
    ("Services should be rejected for evicted pods (no endpoints exist)",
     "needs a kubelet that evicts a pod over its ephemeral-storage limit; the lab's pods are namespaces"),
    ("DNS should provide /etc/hosts entries for the cluster [Conformance]",
     "kubelet's /etc/hosts, not the dataplane or the cluster DNS; the lab has no kubelet"),
    ("DNS should support configurable pod DNS nameservers [Conformance]",
     "kubelet writes a pod's resolv.conf from dnsPolicy/dnsConfig; the lab's pods get a fixed one"),
    ("Services should be able to change the type and ports of a TCP service [Slow]",
     "needs a cloud load balancer"),
    (f"{GRANULAR} should function for pod-Service: sctp [Feature:SCTPConnectivity][Disruptive]",
     "SCTP sockets do not exist in the lab's kernel: no pod can serve SCTP"),
    (f"{GRANULAR} should function for service endpoints using hostNetwork",
     "needs endpoints on a node's network; the lab's pods always have namespaces of their own"),
)


def load(path: Path = RESULTS) -> dict[str, dict[str, str]]:
    data: dict[str, dict[str, str]] = json.loads(path.read_text())
    return data


def table(results: dict[str, dict[str, str]]) -> str:
    lines = ["| upstream test | our test | " + " | ".join(MODES) + " |", "|---|---|" + "---|" * len(MODES)]
    for name, row in sorted(results.items(), key=lambda kv: (kv[1]['describe'], kv[0])):
        cells = [MARK.get(row.get(m, ""), "not run") if m in modes_of(row) else "—" for m in MODES]
        lines.append(f"| {row['describe']} {name} | `{row['test']}` | " + " | ".join(cells) + " |")
    lines += ["", "Not yet translated:", ""] + [f"- {name}" for name in NOT_YET]
    lines += ["", "Not expressible in the lab:", ""] + [f"- {name}: {why}." for name, why in NOT_EXPRESSIBLE]
    return "\n".join(lines) + "\n"


def render(page: str, results: dict[str, dict[str, str]]) -> str:
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table(results)}{END}{tail}"


def main() -> int:
    PAGE.write_text(render(PAGE.read_text(), load()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
