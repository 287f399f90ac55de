"""Lab fixtures: a running lab per test, torn down afterwards (also when the test fails).

Layers: `lab_ports` (override it in a test module to serve other ports) → `lab` (function scope: a
fresh lab per test, so tests may change anything inside it, and xdist workers never share one).
Teardown (`netkit.lab.stop`) tolerates partial setup; `netkit.lab.start` already removes a lab whose
build failed half-way.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from netkit.lab import Lab, running
from netkit.lab.plan import DEFAULT_PORTS
from tests.conftest import need_root_and


@pytest.fixture
def lab_ports() -> tuple[int, ...]:
    """The ports every pod serves (TCP and UDP, IPv4 and IPv6)."""
    return DEFAULT_PORTS


@pytest.fixture
def lab(lab_ports: tuple[int, ...]) -> Iterator[Lab]:
    """A running lab: client, node-a (under test), node-b, pods with servers. Removed afterwards."""
    need_root_and("ip")
    with running(lab_ports) as built:
        yield built
