"""Ctrl-C during a long `netkit apply`: exit 130, one line saying what the node holds and that a
re-run finishes it; traffic to the Services that were there before never stops; the re-run finishes.

A few hundred new Services (IPv4 and IPv6) make the apply long enough to interrupt: SIGINT is sent
when apply announces it is writing IPv4, so it lands at the first safe point in IPv4 (before the
first batch or commit, or between them) and IPv6 is always still to do. In every mode.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, ROOT, run_netkit
from tests.lab_dnat.dataplane import Dataplane

pytestmark = pytest.mark.netns

NEW_V4 = 700  # × 3 chains: past one iptables-nft batch (2,000 chains)
NEW_V6 = 150
WEB = "10.96.0.10"  # examples/10-web-clusterip.yaml


def services(count: int, v6: bool) -> str:
    docs = []
    for i in range(count):
        name = f"{'six' if v6 else 'four'}-{i}"
        ip = f"fd00:96::{0x1000 + i:x}" if v6 else f"10.96.{20 + i // 250}.{i % 250 + 1}"
        eps = ["fd00:244:0:1::11", "fd00:244:0:1::12"] if v6 else ["10.244.1.11", "10.244.1.12"]
        family = "IPv6" if v6 else "IPv4"
        docs.append(f"""apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: load}}
spec:
  clusterIP: "{ip}"
  ipFamilies: [{family}]
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {name}-1, namespace: load, labels: {{kubernetes.io/service-name: {name}}}}}
addressType: {family}
ports: [{{name: http, port: 8080}}]
endpoints:
- {{addresses: ["{eps[0]}"], nodeName: node-a}}
- {{addresses: ["{eps[1]}"], nodeName: node-a}}
""")
    return "---\n".join(docs)


def cli_args(dp: Dataplane, manifests: Path) -> list[str]:
    mode = "nftables" if dp.backend == "nftables" else "iptables"
    backend = "auto" if dp.backend == "nftables" else dp.backend
    return ["-f", str(manifests), "--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16",
            "--cluster-cidr", "fd00:244::/56", "--netns", dp.lab.node_a.netns, "--mode", mode,
            "--iptables-backend", backend]


def netkit(*args: str) -> subprocess.CompletedProcess[str]:
    return run_netkit(*args, timeout=300)


def test_sigint_during_a_long_apply(dataplane: Dataplane, tmp_path: Path) -> None:
    manifests = tmp_path / "m"
    manifests.mkdir()
    for f in EXAMPLES.glob("*.yaml"):
        (manifests / f.name).write_text(f.read_text())
    assert netkit("apply", *cli_args(dataplane, manifests)).returncode == 0
    (manifests / "90-load-v4.yaml").write_text(services(NEW_V4, v6=False))
    (manifests / "91-load-v6.yaml").write_text(services(NEW_V6, v6=True))

    outcomes: Counter[str] = Counter()
    stop = threading.Event()

    def send() -> None:
        while not stop.is_set():
            outcomes[dataplane.lab.connect("client-a", WEB, 80, timeout=1.5).outcome.name] += 1

    senders = [threading.Thread(target=send) for _ in range(2)]
    for t in senders:
        t.start()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "netkit", "apply", *cli_args(dataplane, manifests)],
                                stderr=subprocess.PIPE, text=True, cwd=ROOT)
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "writing" in line:  # said just before the first write; IPv6 comes after IPv4
                proc.send_signal(signal.SIGINT)
                break
        lines += (proc.communicate(timeout=300)[1] or "").splitlines(keepends=True)
    finally:
        stop.set()
        for t in senders:
            t.join()
    assert proc.returncode == 130, "".join(lines)
    interrupted = [ln for ln in lines if ln.startswith("netkit: interrupted")]
    assert len(interrupted) == 1 and "Run the same `netkit apply` again to finish." in interrupted[0], lines
    assert not [ln for ln in lines if "Traceback" in ln or "error" in ln], lines
    assert outcomes["ANSWERED"] > 0 and set(outcomes) == {"ANSWERED"}, dict(outcomes)
    assert netkit("diff", *cli_args(dataplane, manifests)).returncode == 1  # something is left to do
    again = netkit("apply", *cli_args(dataplane, manifests))
    assert again.returncode == 0, again.stderr
    assert netkit("diff", *cli_args(dataplane, manifests)).returncode == 0
    assert dataplane.lab.connect("client-a", "10.96.20.1", 80).answered
    assert dataplane.lab.connect("client-a", "fd00:96::1000", 80).answered
