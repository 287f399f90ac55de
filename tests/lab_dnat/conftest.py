"""Fixtures for the kernel DNAT tests: a fresh lab per test with netkit's rules in node A.

`dataplane` is parametrized over the backends: the iptables mode through `iptables-legacy-restore`
and `iptables-nft-restore` ("legacy", "nft"), and the nftables mode ("nftables", `nft -f`), so every
test runs for all three. Each test gets its
own lab (about 0.3 s to build), so tests share nothing and run in parallel under xdist.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from netkit.lab import running
from tests.conftest import need_root_and
from tests.lab_dnat.dataplane import BACKENDS, TOOLS, Dataplane


@pytest.fixture(params=BACKENDS)
def dataplane(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
              tmp_path: Path) -> Iterator[Dataplane]:
    """A running lab whose node A is driven by the `request.param` backend (rules not yet applied)."""
    backend = request.param
    need_root_and("ip", *TOOLS[backend])
    # iptables-legacy serialises every writer on the machine through one lock file (/run is not
    # per namespace), so a long restore elsewhere (a 10k-service benchmark: 6 s) would make ours give
    # up after --wait. Only this test writes into its lab's namespaces: give it a lock of its own.
    monkeypatch.setenv("XTABLES_LOCKFILE", str(tmp_path / "xtables.lock"))
    with running() as lab:
        yield Dataplane(lab, backend)
