"""`netkit flows --mode ipvs` against the live rules of IPVS mode (inside the test VM): `netkit apply
--mode ipvs` programs the node namespace, the client opens TCP connections and UDP flows (one
datagram from each of many sockets, each answered) through a TCP and a UDP Service to the pods'
backend server, and `netkit flows` must count exactly those per endpoint — the counts of which
backend answered each one — beside the third each that trace predicts over the IPVS rules. The
kernel's IPVS makes the conntrack entries because netkit sets `net.ipv4.vs.conntrack=1`; their
reply tuple comes from the real server, as with iptables' DNAT."""

from __future__ import annotations

import json
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_netkit
from tests.daemon.e2e import web_service, web_slice
from tests.json_schemas import valid_flows_document
from tests.vm.ipvslab import NODE_IP, POD_IPS, Lab

ARGS = ["--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16", "--node-ip", NODE_IP, "--ip-family", "ipv4"]
TCP_FLOWS, UDP_FLOWS = 12, 9  # round robin over three pods: 4 and 3 each


@pytest.fixture
def applied(lab: Lab, tmp_path: Path) -> Iterator[Path]:
    lab.start_backends([f"{ip}:8080/tcp" for ip in POD_IPS] + [f"{ip}:5353/udp" for ip in POD_IPS])
    (tmp_path / "svc.yaml").write_text("---\n".join([
        web_service("10.96.0.10", "TCP", "web", 80, 8080), web_slice(list(POD_IPS), "TCP", "web", "web-1", 8080),
        web_service("10.96.0.53", "UDP", "dns", 53, 5353), web_slice(list(POD_IPS), "UDP", "dns", "dns-1", 5353)]))
    done = run_netkit("apply", "-f", str(tmp_path), *ARGS, "--mode", "ipvs", "--netns", lab.node, timeout=300)
    assert done.returncode == 0, done.stderr
    try:
        yield tmp_path
    finally:
        run_netkit("cleanup", "--netns", lab.node, "--ip-family", "ipv4", timeout=300)


def test_flows_counts_each_real_servers_connections_in_ipvs_mode(lab: Lab, applied: Path) -> None:
    flows = ["flows", "-f", str(applied), *ARGS[:6], "--netns", lab.node, "--mode", "ipvs"]
    assert run_netkit(*flows, timeout=120).stdout == "no flows through Services\n"
    socks: list[socket.socket] = []
    answered: dict[str, Counter[str]] = {"tcp": Counter(), "udp": Counter()}
    try:
        for _ in range(TCP_FLOWS):
            s, who = lab.connect("10.96.0.10", 80)  # kept open: ESTABLISHED
            socks.append(s)
            answered["tcp"][who.rpartition(":")[0]] += 1
        for _ in range(UDP_FLOWS):
            u = lab.socket(socket.SOCK_DGRAM)
            socks.append(u)
            u.connect(("10.96.0.53", 53))
            u.send(b"hi")
            answered["udp"][u.recv(100).decode().rpartition(":")[0]] += 1
        assert all(sorted(c.values()) == [n // 3] * 3 for c, n in ((answered["tcp"], TCP_FLOWS),
                                                                     (answered["udp"], UDP_FLOWS))), answered

        done = run_netkit(*flows, "-o", "json", timeout=120)
        assert done.returncode == 0, done.stderr
        doc = valid_flows_document(json.loads(done.stdout))
        seen = {s["protocol"]: s for s in doc["services"]}
        assert set(seen) == {"tcp", "udp"}
        for proto, n, port in (("tcp", TCP_FLOWS, 8080), ("udp", UDP_FLOWS, 5353)):
            s = seen[proto]
            assert (s["flows"], s["stale"]) == (n, 0), s
            assert {e["ip"]: e["flows"] for e in s["endpoints"]} == dict(answered[proto]), s
            assert {e["port"] for e in s["endpoints"]} == {port}
            assert all(e["predicted"] == pytest.approx(1 / 3) for e in s["endpoints"]), s  # trace: rr, a third each
        text = run_netkit(*flows, timeout=120).stdout
        assert f"default/web:http (tcp) 10.96.0.10:80  {TCP_FLOWS} flows" in text, text
        assert "(trace:  33.3%)" in text, text
    finally:
        for s in socks:
            s.close()
