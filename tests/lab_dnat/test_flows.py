"""Every packet-flow case of tests/flows.py, sent through a real kernel with netkit's rules in node A.

One table, both iptables backends: for each flow, trace over the live rules must say what the table
says, and the kernel must do what trace says — real sockets (outcome, backend, spread, the source the
backend saw) and Scapy probes sniffed at the backends (the DNATed destination and source). See
`dataplane.Dataplane.expect_kernel_agrees`.
"""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLES
from tests.flows import FLOWS, LAB_EDGE_FLOWS, Flow
from tests.lab_dnat.dataplane import LAB_EDGE, Dataplane

pytestmark = pytest.mark.netns


@pytest.mark.parametrize("flow", FLOWS, ids=[f.name for f in FLOWS])
def test_examples(dataplane: Dataplane, flow: Flow) -> None:
    dataplane.apply(EXAMPLES)
    dataplane.expect_kernel_agrees(flow)


@pytest.mark.parametrize("flow", LAB_EDGE_FLOWS, ids=[f.name for f in LAB_EDGE_FLOWS])
def test_edge_cases(dataplane: Dataplane, flow: Flow) -> None:
    dataplane.apply(LAB_EDGE)
    dataplane.expect_kernel_agrees(flow)
