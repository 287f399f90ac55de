"""netkit.cli.early: the kernel dumps `diff` starts before reading its input."""

from __future__ import annotations

import threading

import pytest

from netkit.cli.early import EarlyDumps
from netkit.errors import KernelError
from netkit.model import IPFamily


def test_dumps_run_in_another_thread_and_errors_come_back_where_used() -> None:
    ran: list[str] = []

    def v4() -> str:
        ran.append(threading.current_thread().name)
        return "v4 ruleset"

    def v6() -> str:
        raise KernelError("ip6tables-legacy-save -t nat failed")

    early = EarlyDumps({IPFamily.IPV4: v4, IPFamily.IPV6: v6})
    assert early.get(IPFamily.IPV4) == "v4 ruleset"
    assert ran == ["netkit-dump"]
    with pytest.raises(KernelError, match="ip6tables-legacy-save"):
        early.get(IPFamily.IPV6)
