"""Traffic while things change: real connections through the lab's node A while the daemon
follows a rolling update, a scale to zero and back, a restart, a SIGKILL in the middle of a sync, an
endpoint removed while it was down, endpoints that terminate while still serving, its manifest
directory removed and re-created, and every file in it deleted for 2 s. Every attempt is judged
against what was right when it started (`netkit.lab.traffic`): none may fail, time out, or be
answered by a wrong or removed endpoint (a kept UDP socket whose flow must move may lose the one
reply in flight when its conntrack entry is deleted, as with kube-proxy: see `netkit.lab.traffic`).

Short runs (20 new TCP connections/s to the ClusterIP and to the NodePort, 10 UDP requests/s on one
socket and 10 on new sockets, ~0.6 s per step), iptables-legacy mode; `bench/scenarios.py` runs the
same scenarios longer, in every mode."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from netkit.lab import Lab, running
from netkit.testing.scenarios import SCENARIOS
from tests.conftest import need_root_and

from .conftest import run

RATE, HOLD = 20.0, 0.6


@pytest.fixture
def lab() -> Iterator[Lab]:
    need_root_and("ip")
    if shutil.which("conntrack") is None:
        pytest.skip("needs the conntrack tool (conntrack package) to reset the lab's node")
    with running() as built:
        yield built


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_no_connection_is_lost_or_misrouted(lab: Lab, name: str) -> None:
    tallies = run(SCENARIOS[name](lab, "iptables", RATE, HOLD), timeout=150)
    for target, t in tallies.items():
        assert t.attempted > 5 and t.answered > 0, (target, str(t))
        assert t.ok, f"{name}, {target}: {t}; e.g. {list(t.examples)}"
