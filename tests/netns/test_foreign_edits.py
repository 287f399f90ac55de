"""Foreign edits inside what netkit owns, in a fresh network namespace per test (nftables mode).

Someone adds a statement netkit never writes to netkit's table (`nft add rule ip netkit services
counter`), a chain and a set of their own: `netkit diff` shows each and exits 1, `netkit apply`
repairs the table (exit 0, in sync after), and a running daemon's next full sync repairs it too —
without errors in its log. (The iptables mode's twin is test_iptables_kernel's foreign-rules test.)
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
from pathlib import Path

import pytest

from netkit.config import Config
from netkit.model import IPFamily
from netkit.nft.parse import FOREIGN
from netkit.rules.nftables import backend as nftables_backend
from netkit.rules.nftables.kernel import NftKernel
from netkit.runtime.daemon import Daemon, DaemonOptions
from tests.conftest import EXAMPLES, need_root_and, run_netkit

NODE = ["--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16", "--cluster-cidr", "fd00:244::/56"]
FOREIGN_EDITS = [
    ["add", "rule", "ip", "netkit", "services", "counter"],
    ["insert", "rule", "ip", "netkit", "services", "ip", "daddr", "10.96.0.10", "log", "prefix", "mine"],
    ["add", "chain", "ip", "netkit", "my-chain"],
    ["add", "set", "ip", "netkit", "my-set", "{ type ipv4_addr; }"],
]


@pytest.fixture(autouse=True)
def _tools() -> None:
    need_root_and("nft")


def netkit(*args: str) -> subprocess.CompletedProcess[str]:
    return run_netkit(*args, timeout=120)


def nft(netns: str, *args: str) -> str:
    return subprocess.run(["ip", "netns", "exec", netns, "nft", *args], capture_output=True, text=True,
                          check=True).stdout


def edit(netns: str) -> None:
    for words in FOREIGN_EDITS:
        nft(netns, *words)


def test_diff_shows_and_apply_repairs_foreign_statements_chains_and_sets(netns: str) -> None:
    args = ["-f", str(EXAMPLES), *NODE, "--mode", "nftables", "--netns", netns]
    assert netkit("apply", *args).returncode == 0
    edit(netns)
    diff = netkit("diff", *args, "--ip-family", "ipv4")
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert "Traceback" not in diff.stderr
    assert "! foreign rule in chain services: counter: apply removes it" in diff.stdout
    assert '"log"' in diff.stdout and "mine" in diff.stdout
    assert "! foreign chain my-chain (0 rules): apply deletes it" in diff.stdout
    assert "! foreign set my-set: apply deletes it" in diff.stdout
    applied = netkit("apply", *args)
    assert applied.returncode == 0, applied.stderr
    table = nft(netns, "list", "table", "ip", "netkit")
    assert "counter" not in table and "log" not in table and "my-chain" not in table and "my-set" not in table
    assert "vmap @service-ips" in table  # netkit's own rules are back
    assert netkit("diff", *args).returncode == 0


def test_the_daemon_repairs_foreign_statements_at_its_next_full_sync(netns: str,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    cfg = Config(node_name="node-a", mode="nftables", min_sync_period=0.1, sync_period=1.0)
    opts = DaemonOptions(config=cfg, families=(IPFamily.IPV4,), netns=netns, files=(str(EXAMPLES),),
                         healthz_address=None, metrics_address=None, conntrack=False)
    kernel = NftKernel("ip", netns, transport="cli")

    def foreign_rules() -> list[str]:
        live = kernel.dump()
        assert live is not None
        return [r for c in live.chains for r in c.rules if r.startswith(FOREIGN)] + [
            c.name for c in live.chains if c.name == "my-chain"]

    async def scenario() -> None:
        daemon = Daemon(opts, nftables_backend)  # type: ignore[arg-type]
        task = asyncio.create_task(daemon.run())
        try:
            await asyncio.wait_for(daemon.synced.wait(), 10)
            edit(netns)
            assert foreign_rules()
            for _ in range(100):  # a full sync every second
                await asyncio.sleep(0.1)
                if not await asyncio.to_thread(foreign_rules):
                    break
            assert not await asyncio.to_thread(foreign_rules), "the daemon never repaired the table"
            assert daemon.last_result is not None and daemon.last_result.error is None
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    with caplog.at_level(logging.WARNING):
        asyncio.run(asyncio.wait_for(scenario(), 30))
    # Health check node ports listen on the Node object's addresses (nftables mode: primary), which this
    # bare namespace lacks; that error is the health server's, not the sync's.
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.name != "netkit.health"], caplog.text


def test_a_foreign_element_a_set_cannot_hold_is_repaired(netns: str, tmp_path: Path) -> None:
    """An element in one of netkit's maps pointing at a chain of someone else's."""
    args = ["-f", str(EXAMPLES), *NODE, "--mode", "nftables", "--netns", netns, "--ip-family", "ipv4"]
    assert netkit("apply", *args).returncode == 0
    nft(netns, "add", "chain", "ip", "netkit", "my-chain")
    nft(netns, "add", "element", "ip", "netkit", "service-ips", "{ 10.96.9.9 . tcp . 80 : goto my-chain }")
    diff = netkit("diff", *args)
    assert diff.returncode == 1 and "! foreign chain my-chain" in diff.stdout
    assert netkit("apply", *args).returncode == 0
    assert "10.96.9.9" not in nft(netns, "list", "table", "ip", "netkit")
    assert netkit("diff", *args).returncode == 0
