"""Tests that need a kernel with IPVS: they run inside the test VM (vm-images/run-tests), where /init
sets NETKIT_IN_VM=1. Anywhere else they are skipped. Every test here is marked `vm`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.vm.ipvslab import Lab

HERE = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each file one xdist group (vm-images/run-tests runs `--dist loadgroup`): a file's tests share
    its lab or cluster, so one worker builds it."""
    for item in items:
        if Path(str(item.fspath)).is_relative_to(HERE):
            item.add_marker(pytest.mark.vm)
            item.add_marker(pytest.mark.xdist_group(f"vm-{item.path.stem}"))
            if os.environ.get("NETKIT_IN_VM") != "1" or not Path("/proc/net/ip_vs").exists():
                item.add_marker(pytest.mark.skip(reason="needs the IPVS test VM (vm-images/run-tests)"))


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    lab = Lab().up()
    try:
        yield lab
    finally:
        lab.down()
