"""Localhost NodePorts (iptables mode) with kube-proxy's KUBE-FIREWALL guard, on real packets.

With `iptables.localhostNodePorts` and route_localnet=1 (set inside the lab's node namespace only),
a process on the node reaches a NodePort on 127.0.0.1: the guard in KUBE-FIREWALL (filter INPUT and
OUTPUT) drops packets to 127.0.0.0/8 from other sources unless conntrack knows them, and the node's
own DNATed connection passes it. Without the option, 127.0.0.1:nodePort is not translated.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from netkit import nfacct
from netkit.model import IPFamily, build
from netkit.rules.iptables.names import LOCALHOST_NODEPORTS_ACCEPTED
from netkit.sources.manifests import load
from tests.conftest import EXAMPLES
from tests.lab_dnat.dataplane import Dataplane, config

pytestmark = pytest.mark.netns

NODE_PORT = 30080  # examples/20-web-nodeport.yaml


def _apply(dp: Dataplane, localhost: bool, counters: tuple[str, ...] = ()) -> None:
    cfg = replace(config(dp.backend), localhost_nodeports=localhost, nfacct_counters=counters)
    state = build(load([str(EXAMPLES / "00-node.yaml"), str(EXAMPLES / "20-web-nodeport.yaml")]).objects,
                  "node-a", cfg.node_ips)
    kernel = dp.be.kernel(cfg, IPFamily.IPV4, dp.lab.node_a.netns)
    kernel.apply(dp.be.plan(kernel.dump(), dp.be.compile(state, cfg, IPFamily.IPV4)))


def test_localhost_nodeport_reaches_a_pod_through_the_guard(dataplane: Dataplane) -> None:
    dataplane.lab.sysctl("node-a", "net.ipv4.conf.all.route_localnet", "1")
    if dataplane.mode != "iptables":  # kube-proxy's nftables mode has no localhost NodePorts: the option is inert
        _apply(dataplane, localhost=True)
        assert not dataplane.lab.connect("node-a", "127.0.0.1", NODE_PORT).answered
        return
    _apply(dataplane, localhost=False)
    assert not dataplane.lab.connect("node-a", "127.0.0.1", NODE_PORT).answered
    _apply(dataplane, localhost=True)
    live = dataplane.live(IPFamily.IPV4)
    assert live.rules("filter", "INPUT")[0] == "-j KUBE-FIREWALL"
    assert live.rules("filter", "OUTPUT")[0] == "-j KUBE-FIREWALL"
    replies = dataplane.lab.connect_many("node-a", "127.0.0.1", NODE_PORT, count=4)
    assert all(r.answered and r.backend and r.backend.startswith("web-") for r in replies), replies


def test_localhost_nodeport_connections_count_in_kube_proxys_nfacct_counter(dataplane: Dataplane) -> None:
    netns = dataplane.lab.node_a.netns
    dataplane.lab.sysctl("node-a", "net.ipv4.conf.all.route_localnet", "1")
    counters, failed = nfacct.ensure_counters(netns)
    assert failed == {}
    _apply(dataplane, localhost=True, counters=counters)
    if dataplane.mode != "iptables":  # kube-proxy's other modes count nothing in nfacct
        dataplane.lab.connect("node-a", "127.0.0.1", NODE_PORT)
        assert nfacct.read(LOCALHOST_NODEPORTS_ACCEPTED, netns) == 0
        return
    replies = dataplane.lab.connect_many("node-a", "127.0.0.1", NODE_PORT, count=3)
    assert all(r.answered for r in replies), replies
    assert nfacct.read(LOCALHOST_NODEPORTS_ACCEPTED, netns) == 3  # one per new connection (nat sees the first)
    dataplane.lab.connect("node-a", "192.0.2.10", NODE_PORT)  # the node's own address: not a localhost one
    assert nfacct.read(LOCALHOST_NODEPORTS_ACCEPTED, netns) == 3
