"""docs/e2e.md's table, generated from a test run: upstream test → our test → result per mode
(iptables-dual-stack, nftables-dual-stack: that mode's cluster with both IP families; upstream's
[Feature:IPv6DualStack] tests run there only, "—" in the other columns).

    NETKIT_E2E_RESULTS=tests/e2e/results.json pytest -n 2 tests/e2e   # as root
    NETKIT_E2E_RESULTS=tests/e2e/results-ipvs.json vm-images/run-tests  # the VM part, IPVS subset included
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
RESULTS_VM = ROOT / "tests" / "e2e" / "results-ipvs.json"  # the IPVS subset, run in the test VM
PAGE = ROOT / "docs" / "e2e.md"
BEGIN, END = "<!-- e2e-table:begin -->", "<!-- e2e-table:end -->"
DUAL_STACK_MODES = ("iptables-dual-stack", "nftables-dual-stack")
MODES = ("iptables", "nftables", *DUAL_STACK_MODES)  # on the host
VM_MODES = ("ipvs",)  # the tests marked `ipvs`, in the test VM; "—" for the others
MARK = {"passed": "pass", "failed": "**FAIL**", "skipped": "skipped"}
DUAL_STACK_ONLY = "[Feature:IPv6DualStack]"  # upstream's dual-stack tests: run in the dual-stack modes only
GRANULAR = f"{DUAL_STACK_ONLY} Granular Checks: Services Secondary IP Family [LinuxOnly]"


def modes_of(row: dict[str, str]) -> tuple[str, ...]:
    """The modes a translated test runs in."""
    return DUAL_STACK_MODES if row["describe"] == DUAL_STACK_ONLY else MODES


NOT_YET: tuple[str, ...] = ()
NOT_EXPRESSIBLE = (
    ("Services should be rejected for evicted pods (no endpoints exist)",
     "needs a kubelet that evicts a pod over its ephemeral-storage limit; the lab's pods are namespaces"),
    ("DNS should provide /etc/hosts entries for the cluster [Conformance]",
     "kubelet's /etc/hosts, not the dataplane or the cluster DNS; the lab has no kubelet"),
    ("DNS should provide DNS for pods for Hostname [LinuxOnly] [Conformance]",
     "the probe's `getent hosts` of its own hostname reads kubelet's /etc/hosts, not the cluster DNS"),
    ("DNS should support configurable pod DNS nameservers [Conformance]",
     "kubelet writes a pod's resolv.conf from dnsPolicy/dnsConfig; the lab's pods get a fixed one"),
    ("Services should be able to change the type and ports of a TCP service [Slow]",
     "needs a cloud load balancer"),
    (f"{GRANULAR} should function for pod-Service: sctp [Feature:SCTPConnectivity][Disruptive]",
     "SCTP sockets do not exist in the lab's kernel: no pod can serve SCTP"),
    ("Networking Granular Checks: Services should function for pod-Service: sctp [Feature:SCTPConnectivity]"
     "[Disruptive]", "SCTP sockets do not exist in the lab's kernel: no pod can serve SCTP"),
    (f"{GRANULAR} should function for service endpoints using hostNetwork",
     "needs endpoints on a node's network; the lab's pods always have namespaces of their own"),
)


def load(path: Path = RESULTS, vm: Path = RESULTS_VM) -> dict[str, dict[str, str]]:
    """The host run's outcomes, with the VM run's joined in by upstream name."""
    data: dict[str, dict[str, str]] = json.loads(path.read_text())
    extra: dict[str, dict[str, str]] = json.loads(vm.read_text()) if vm.exists() else {}
    for name, row in extra.items():
        data.get(name, {}).update({m: row[m] for m in VM_MODES if m in row})
    return data


def table(results: dict[str, dict[str, str]]) -> str:
    columns = (*MODES, *VM_MODES)
    lines = ["| upstream test | our test | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for name, row in sorted(results.items(), key=lambda kv: (kv[1]['describe'], kv[0])):
        cells = [MARK.get(row.get(m, ""), "not run") if m in modes_of(row) else "—" for m in MODES]
        cells += [MARK.get(row.get(m, ""), "—") for m in VM_MODES]
        lines.append(f"| {row['describe']} {name} | `{row['test']}` | " + " | ".join(cells) + " |")
    if NOT_YET:
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
