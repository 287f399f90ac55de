"""kube-proxy's nfacct counters against the real kernel, in fresh network namespaces: created and read
over netlink (no `nfacct` tool), `-m nfacct` rules load and read back equal in both iptables backends,
and real packets count."""

from __future__ import annotations

import socket

import pytest

from netkit import nfacct
from netkit.config import Config, parse_cidrs
from netkit.model import IPFamily, build
from netkit.netns import socket_in
from netkit.rules.iptables.compile import compile
from netkit.rules.iptables.kernel import IptablesKernel
from netkit.rules.iptables.names import CT_STATE_INVALID_DROPPED, LOCALHOST_NODEPORTS_ACCEPTED, NFACCT_COUNTERS
from netkit.runtime.metrics import Metrics
from netkit.sources.manifests import load
from tests.conftest import EXAMPLES, need_root_and
from tests.conftest import run_netkit as netkit
from tests.netns.test_iptables_kernel import apply_and_read_back

pytestmark = pytest.mark.netns


def test_counters_created_and_read_over_netlink(netns: str) -> None:
    need_root_and("ip")
    assert nfacct.read(CT_STATE_INVALID_DROPPED, netns) is None  # a fresh namespace has none
    made, failed = nfacct.ensure_counters(netns)
    assert made == NFACCT_COUNTERS and failed == {}
    assert [nfacct.read(n, netns) for n in NFACCT_COUNTERS] == [0, 0]
    assert nfacct.ensure_counters(netns) == (NFACCT_COUNTERS, {})  # already there: fine, as kube-proxy's Ensure
    made, failed = nfacct.ensure_counters(netns, ("x" * 40,))
    assert made == () and "x" * 40 in failed  # too long for NFACCT_NAME_MAX: reported, not raised


@pytest.mark.parametrize("backend", ["legacy", "nft"])
def test_nfacct_rules_read_back_equal_and_count_packets(netns: str, backend: str) -> None:
    need_root_and(f"iptables-{backend}-restore", f"ip6tables-{backend}-restore")
    counters, _ = nfacct.ensure_counters(netns)
    cfg = Config(node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16", "fd00:244::/56"], "t"),
                 iptables_backend=backend, localhost_nodeports=True, nfacct_counters=counters)
    loaded = load([str(EXAMPLES / "00-node.yaml"), str(EXAMPLES / "20-web-nodeport.yaml")])
    for family in (IPFamily.IPV4, IPFamily.IPV6):
        live = apply_and_read_back(netns, backend, compile(build(loaded.objects, "node-a"), cfg, family))
        assert "--nfacct-name  ct_state_invalid_dropped_pkts" in live.rules("filter", "KUBE-FORWARD")[0]
    # A real packet: a UDP datagram to a localhost NodePort passes the counting rule in nat KUBE-NODEPORTS.
    metrics = Metrics("iptables", (IPFamily.IPV4,), process=False)
    metrics.nfacct(counters, lambda c: nfacct.read(c, netns))
    assert "kubeproxy_iptables_localhost_nodeports_accepted_packets_total 0.0" in metrics.render().decode()
    s = socket_in(netns, socket.AF_INET, socket.SOCK_DGRAM)
    with s:
        s.sendto(b"x", ("127.0.0.1", 30080))  # examples/20-web-nodeport.yaml's NodePort is TCP: no match
    tcp = socket_in(netns, socket.AF_INET, socket.SOCK_STREAM)
    with tcp:
        tcp.settimeout(0.5)
        try:
            tcp.connect(("127.0.0.1", 30080))  # nat sees the SYN: counted, then DNAT to an endpoint
        except OSError:
            pass  # the endpoint does not exist in this namespace; only the count matters
    assert nfacct.read(LOCALHOST_NODEPORTS_ACCEPTED, netns) == 1
    page = metrics.render().decode()
    assert "kubeproxy_iptables_localhost_nodeports_accepted_packets_total 1.0" in page
    assert "kubeproxy_iptables_ct_state_invalid_dropped_packets_total 0.0" in page


def test_one_shot_commands_count_into_existing_counters_and_diff_in_sync(netns: str) -> None:
    need_root_and("iptables-legacy-restore")
    args = ["-f", str(EXAMPLES), "--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16", "--netns", netns,
            "--iptables-backend", "legacy", "--ip-family", "ipv4"]
    assert netkit("apply", *args).returncode == 0
    kernel = IptablesKernel(IPFamily.IPV4, netns, "legacy")
    assert "nfacct" not in kernel.dump().rules("filter", "KUBE-FORWARD")[0]  # no counters: none created
    nfacct.ensure_counters(netns)  # as `netkit run` or kube-proxy would have
    assert netkit("diff", *args).returncode == 1  # the INVALID drop rule now counts
    applied = netkit("apply", *args)
    assert applied.returncode == 0, applied.stderr
    assert "--nfacct-name  ct_state_invalid_dropped_pkts" in kernel.dump().rules("filter", "KUBE-FORWARD")[0]
    same = netkit("diff", *args)
    assert same.returncode == 0, same.stdout
