"""`make demo`: netkit's main job on the bundled examples, in a throwaway network namespace.

compile → dry-run diff (what would change) → apply → diff again (now empty) → clean up. The
namespace gets a unique name and is always removed, also on failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
NODE_ARGS = ["--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16", "--cluster-cidr", "fd00:244::/56"]


def _step(title: str) -> None:
    print(f"\n\033[1m== {title}\033[0m", flush=True)


def _netkit(*args: str, show: int = 40) -> int:
    cmd = [sys.executable, "-m", "netkit", *args]
    print("$ netkit " + " ".join(args), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = proc.stdout.splitlines()
    for line in lines[:show]:
        print("  " + line)
    if len(lines) > show:
        print(f"  … ({len(lines) - show} more lines)")
    for line in proc.stderr.splitlines():
        print("  " + line)
    print(f"  (exit status {proc.returncode})", flush=True)
    return proc.returncode


@contextlib.contextmanager
def throwaway_netns() -> Iterator[str]:
    name = f"netkit-demo-{uuid.uuid4().hex[:8]}"

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
        signal.signal(signal.SIGTERM, old)


def main() -> int:
    if os.geteuid() != 0:
        print("make demo needs root: it creates a network namespace", file=sys.stderr)
        return 2
    files = ["-f", str(EXAMPLES)]
    _step("compile the bundled examples (no root needed for this step)")
    _netkit("compile", *files, *NODE_ARGS, "--ip-family", "ipv4", show=25)
    with throwaway_netns() as ns:
        kernel = ["--netns", ns]
        _step(f"dry run against an empty node (network namespace {ns})")
        pending = _netkit("diff", *files, *NODE_ARGS, *kernel, "--ip-family", "ipv4", show=20)
        _step("apply")
        _netkit("apply", *files, *NODE_ARGS, *kernel)
        _step("dry run again: nothing left to do")
        in_sync = _netkit("diff", *files, *NODE_ARGS, *kernel)
        _step("clean up")
        _netkit("cleanup", *kernel)
    ok = pending == 1 and in_sync == 0
    print("\ndemo " + ("finished: diff showed the changes, apply made them, diff is now empty"
                       if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
