"""What IPVSKernel runs, with the tools replaced by a recorder (the real runs are in tests/vm and
tests/netns/test_ipvs_iptables.py): setup once per kernel object, not once per sync."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from ipaddress import ip_address

import pytest

from netkit.model import IPFamily
from netkit.rules.ipvs import kernel as kernel_mod
from netkit.rules.ipvs.kernel import IPVSKernel
from netkit.rules.ipvs.plan import Plan


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    seen: list[list[str]] = []

    def run(cmd: Sequence[str], netns: str | None = None, *, input: str | None = None, check: bool = True,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
        seen.append(list(cmd))
        missing = list(cmd[:3]) == ["ip", "link", "show"] or cmd[:2] == ["ip", "-j"]
        return subprocess.CompletedProcess(list(cmd), 1 if missing else 0, "", "")

    monkeypatch.setattr(kernel_mod.ns, "run", run)
    return seen


def plan_adding(address: str) -> Plan:
    return Plan(IPFamily.IPV4, add_addresses=(ip_address(address),))


def test_prepare_runs_once_per_kernel_object(calls: list[list[str]]) -> None:
    k = IPVSKernel(IPFamily.IPV4, "nk-none")
    for i in range(3):
        k.apply(plan_adding(f"10.96.0.{i + 1}"))
    assert sum(c[0] == "sysctl" for c in calls) == 1
    assert sum(c[:3] == ["ip", "link", "show"] for c in calls) == 1
    assert sum(c[:2] == ["ip", "-batch"] for c in calls) == 1 + 3  # lo up + kube-ipvs0 once, then the addresses


def test_a_dump_without_kube_ipvs0_prepares_again(calls: list[list[str]]) -> None:
    k = IPVSKernel(IPFamily.IPV4, "nk-none")
    k.apply(plan_adding("10.96.0.1"))
    k._addresses()  # what dump() reads first: the interface is gone (the recorder says so)
    k.apply(plan_adding("10.96.0.2"))
    assert sum(c[0] == "sysctl" for c in calls) == 2


def test_a_plan_without_ipvs_changes_opens_no_netlink_socket(calls: list[list[str]],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    k = IPVSKernel(IPFamily.IPV4, "nk-none")
    monkeypatch.setattr(k, "_ipvs", lambda: pytest.fail("netlink opened"))
    k.apply(plan_adding("10.96.0.1"))
