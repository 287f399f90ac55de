"""The lab's edge-case flows through both tracers over compiled rules (no root): the table the kernel
tests in this package send is itself right before any packet is sent."""

from __future__ import annotations

import pytest

from tests.flows import LAB_EDGE_FLOWS, Flow
from tests.lab_dnat.dataplane import LAB_EDGE
from tests.nft_flows import TRACE_MODES
from tests.unit.test_trace import check


@pytest.mark.parametrize("mode", TRACE_MODES)
@pytest.mark.parametrize("flow", LAB_EDGE_FLOWS, ids=[f.name for f in LAB_EDGE_FLOWS])
def test_lab_edge_flows(flow: Flow, mode: str) -> None:
    check(flow, [LAB_EDGE], mode)
