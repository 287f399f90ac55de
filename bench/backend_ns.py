"""Network namespaces for the benchmarks that send real packets: a node namespace, and a backend
namespace behind a veth that owns a Service's endpoint addresses and accepts TCP on 8080.

Names carry a tag and a random suffix, and every namespace is removed when its block ends.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager


def sh(*argv: str, input: str | None = None) -> str:
    """ARGV's stdout; its stderr in the error when it fails."""
    out = subprocess.run(argv, input=input, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {out.returncode}: {out.stderr[-1000:]}")
    return out.stdout


@contextmanager
def namespace(tag: str, prefix: str = "nkb") -> Iterator[str]:
    name = f"{prefix}-{tag}-{uuid.uuid4().hex[:8]}"
    sh("ip", "netns", "add", name)
    try:
        sh("ip", "-n", name, "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


SERVER = r"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080)); s.listen(512)
print("ready", flush=True)
while True:
    c, _ = s.accept(); c.close()
"""


@contextmanager
def backend(node: str, net: str, endpoints: int = 10, prefix: str = "nkb") -> Iterator[None]:
    """A backend namespace behind a veth from `node`, owning `net`.1 … `net`.`endpoints` (a /24) and
    accepting TCP on 8080; `node` routes the ClusterIP range 10.96.0.0/12 to it."""
    with namespace("be", prefix) as be:
        sh("ip", "-n", node, "link", "add", "veth-be", "type", "veth", "peer", "name", "eth0", "netns", be)
        sh("ip", "-n", node, "addr", "add", f"{net}.254/24", "dev", "veth-be")
        sh("ip", "-n", node, "link", "set", "veth-be", "up")
        for k in range(1, endpoints + 1):
            sh("ip", "-n", be, "addr", "add", f"{net}.{k}/24", "dev", "eth0")
        sh("ip", "-n", be, "link", "set", "eth0", "up")
        sh("ip", "-n", node, "route", "add", "10.96.0.0/12", "dev", "veth-be")
        server = subprocess.Popen(["ip", "netns", "exec", be, sys.executable, "-c", SERVER],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            yield
        finally:
            server.kill()
            server.wait()
