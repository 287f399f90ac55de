"""Running kernel tools inside a named network namespace (`ip netns exec`), or on the host.

Every kernel edge of netkit (iptables, nft, ipset, conntrack, the lab) runs its tools through
`run()`, so `--netns NAME` is honoured everywhere by one piece of code.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from netkit.errors import KernelError


def wrap(cmd: Sequence[str], netns: str | None) -> list[str]:
    return ["ip", "netns", "exec", netns, *cmd] if netns else list(cmd)


def run(cmd: Sequence[str], netns: str | None = None, *, input: str | None = None,
        check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    argv = wrap(cmd, netns)
    try:
        proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        raise KernelError(f"{argv[0]}: not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise KernelError(f"{' '.join(argv[:6])}: timed out after {timeout:.0f} s") from exc
    if check and proc.returncode != 0:
        where = f" in network namespace {netns}" if netns else ""
        raise KernelError(f"{' '.join(cmd[:3])} failed{where} (exit {proc.returncode})",
                          payload=input or "", stderr=proc.stderr)
    return proc


def exists(netns: str) -> bool:
    proc = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return any(line.split()[0] == netns for line in proc.stdout.splitlines() if line.strip())
