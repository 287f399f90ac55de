"""`netkit flows` against the real kernel, in iptables and in nftables mode: `netkit apply` programs a
namespace whose node IP sits on a veth that every other destination is routed out of; the test opens
UDP flows (one datagram from each of many sockets) and TCP connections (a SYN each) to a Service's
clusterIP, which the mode's rules DNAT to its endpoints; `netkit flows` must count exactly those per
endpoint (as the conntrack tool lists them), beside the half each that trace predicts, then, read
against manifests where one endpoint is gone (the cleanup not run), flag that endpoint's flows stale."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from netkit.netns import socket_in
from tests.conftest import ROOT, need_root_and, route_out, run_netkit
from tests.daemon.e2e import web_service, web_slice
from tests.json_schemas import valid_flows_document

pytestmark = pytest.mark.netns
NODE_IP, EP_A, EP_B = "192.0.2.10", "10.244.1.11", "10.244.2.11"
ARGS = ["--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16", "--node-ip", NODE_IP, "--ip-family", "ipv4"]
UDP_FLOWS, TCP_FLOWS = 24, 12


@pytest.fixture
def node_ns(netns: str) -> str:
    need_root_and("conntrack")
    route_out(netns, NODE_IP)
    return netns


def manifests(folder: Path, eps: list[str]) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "svc.yaml").write_text("---\n".join([
        web_service("10.96.0.53", "UDP", "dns", 53, 5353), web_slice(eps, "UDP", "dns", "dns-1", 5353),
        web_service("10.96.0.80", "TCP", "web", 80, 8080), web_slice(eps, "TCP", "web", "web-1", 8080)]))
    return folder


def kernel_count(netns: str) -> Counter[tuple[str, str, str]]:
    """(protocol, original destination, reply source) of each entry, as the conntrack tool lists them."""
    out = subprocess.run(["ip", "netns", "exec", netns, "conntrack", "-L", "-o", "extended"],
                         check=True, capture_output=True, text=True).stdout
    count: Counter[tuple[str, str, str]] = Counter()
    for line in out.splitlines():
        fields = line.split()
        dsts = [v for k, v in (kv.split("=", 1) for kv in fields if "=" in kv) if k == "dst"]
        srcs = [v for k, v in (kv.split("=", 1) for kv in fields if "=" in kv) if k == "src"]
        count[(fields[2], dsts[0], srcs[1])] += 1
    return count


def flows(netns: str, folder: Path, mode: str) -> dict[str, dict[str, object]]:
    done = run_netkit("flows", "-f", str(folder), *ARGS[:6], "--netns", netns, "--mode", mode, "-o", "json",
                      timeout=60)
    assert done.returncode == 0, done.stderr
    doc = valid_flows_document(json.loads(done.stdout))  # the committed schema, machine-checked
    return {f"{s['namespace']}/{s['name']}:{s['protocol']}": s for s in doc["services"]}


@pytest.mark.parametrize("mode", ["iptables", "nftables"])
def test_flows_counts_each_endpoints_connections_and_flags_stale_ones(node_ns: str, tmp_path: Path,
                                                                       mode: str) -> None:
    if mode == "iptables" and shutil.which("iptables-legacy") is None:
        pytest.skip("needs iptables-legacy")
    both = manifests(tmp_path / "both", [EP_A, EP_B])
    applied = run_netkit("apply", "-f", str(both), *ARGS, "--mode", mode, "--netns", node_ns,
                         *(["--iptables-backend", "legacy"] if mode == "iptables" else []), timeout=120)
    assert applied.returncode == 0, applied.stderr
    assert "no flows through Services" in run_netkit("flows", "-f", str(both), *ARGS[:6], "--netns", node_ns).stdout

    socks = []
    for i in range(UDP_FLOWS + TCP_FLOWS):
        s = socket_in(node_ns, socket.AF_INET, socket.SOCK_DGRAM if i < UDP_FLOWS else socket.SOCK_STREAM)
        socks.append(s)
        if i < UDP_FLOWS:
            s.sendto(b"x", ("10.96.0.53", 53))
        else:
            s.setblocking(False)
            assert s.connect_ex(("10.96.0.80", 80)) != 0  # a SYN leaves, no answer comes: SYN_SENT
    try:
        kernel = kernel_count(node_ns)
        seen = flows(node_ns, both, mode)
        for key, proto, ip, port in (("default/dns:udp", "udp", "10.96.0.53", 5353),
                                     ("default/web:tcp", "tcp", "10.96.0.80", 8080)):
            s = seen[key]
            by_endpoint = {e["ip"]: e["flows"] for e in s["endpoints"]}  # type: ignore[attr-defined]
            assert by_endpoint == {ep: kernel[(proto, ip, ep)] for ep in (EP_A, EP_B) if kernel[(proto, ip, ep)]}
            assert s["flows"] == (UDP_FLOWS if proto == "udp" else TCP_FLOWS) and s["stale"] == 0
            assert {e["port"] for e in s["endpoints"]} == {port}  # type: ignore[attr-defined]
            assert {e["predicted"] for e in s["endpoints"]} == {0.5}  # type: ignore[attr-defined]  # trace: half each

        # EP_A removed from the manifests, the rules and conntrack not touched: its flows are stale
        only_b = manifests(tmp_path / "only-b", [EP_B])
        after = flows(node_ns, only_b, mode)["default/dns:udp"]
        stale = {e["ip"]: e["stale"] for e in after["endpoints"]}  # type: ignore[attr-defined]
        assert stale == {EP_A: True, EP_B: False} and after["stale"] == kernel[("udp", "10.96.0.53", EP_A)]
        text = run_netkit("flows", "-f", str(only_b), *ARGS[:6], "--netns", node_ns).stdout
        assert f"default/dns:http (udp) 10.96.0.53:53  {UDP_FLOWS} flows" in text
        assert f"{EP_A}:5353" in text and "stale: not a serving endpoint" in text
        # --watch reads the table again and again (stopped here by the timeout, as by Ctrl-C)
        with pytest.raises(subprocess.TimeoutExpired) as stopped:
            subprocess.run([sys.executable, "-m", "netkit", "flows", "-f", str(only_b), *ARGS[:6], "--netns", node_ns,
                            "--watch", "0.2"], capture_output=True, text=True, cwd=ROOT, timeout=20)
        pages = (stopped.value.stdout or b"").decode() if isinstance(stopped.value.stdout, bytes) \
            else stopped.value.stdout or ""
        assert pages.count("\n--- ") + pages.startswith("--- ") >= 2  # a time line per page
        assert pages.count(f"10.96.0.53:53  {UDP_FLOWS} flows") >= 2
    finally:
        for s in socks:
            s.close()
