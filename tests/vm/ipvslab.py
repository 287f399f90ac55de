"""The network the IPVS VM tests run on, built from network namespaces inside the VM:

    client (192.0.2.100) ──veth── node (192.0.2.10, kube-ipvs0) ──veth── pods (10.244.1.11-.13)

The node namespace is where netkit programs IPVS; the pods namespace holds every backend address
(one server process answers on all of them with its own address, see backend_server.py); the client
is outside the cluster. Client sockets are created in the client namespace by entering it on this
thread (`setns`) just for `socket()`: a socket stays in the namespace it was created in.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import netns_name

CLONE_NEWNET = 0x40000000
NODE_IP, CLIENT_IP, GATEWAY_PODS = "192.0.2.10", "192.0.2.100", "10.244.1.1"
POD_IPS = ("10.244.1.11", "10.244.1.12", "10.244.1.13")
_libc = ctypes.CDLL(None, use_errno=True)


def sh(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip()}")
    return proc.stdout


class Lab:
    def __init__(self) -> None:
        self.node, self.client, self.pods = netns_name("nkv-node"), netns_name("nkv-cli"), netns_name("nkv-pods")
        self.server: subprocess.Popen[str] | None = None

    def up(self) -> Lab:
        for name in (self.node, self.client, self.pods):
            sh("ip", "netns", "add", name)
            sh("ip", "-n", name, "link", "set", "lo", "up")
        self._veth(self.client, "eth0", CLIENT_IP + "/24", self.node, "to-client", NODE_IP + "/24")
        self._veth(self.pods, "eth0", POD_IPS[0] + "/24", self.node, "to-pods", GATEWAY_PODS + "/24")
        for ip in POD_IPS[1:]:
            sh("ip", "-n", self.pods, "addr", "add", ip + "/24", "dev", "eth0")
        sh("ip", "-n", self.client, "route", "add", "default", "via", NODE_IP)
        sh("ip", "-n", self.pods, "route", "add", "default", "via", GATEWAY_PODS)
        return self

    def _veth(self, a: str, a_if: str, a_ip: str, b: str, b_if: str, b_ip: str) -> None:
        tmp = f"v{uuid.uuid4().hex[:8]}"
        sh("ip", "link", "add", tmp, "netns", a, "type", "veth", "peer", "name", b_if, "netns", b)
        sh("ip", "-n", a, "link", "set", tmp, "name", a_if)
        for ns, ifname, ip in ((a, a_if, a_ip), (b, b_if, b_ip)):
            sh("ip", "-n", ns, "addr", "add", ip, "dev", ifname)
            sh("ip", "-n", ns, "link", "set", ifname, "up")

    def start_backends(self, specs: list[str]) -> None:
        server = Path(__file__).with_name("backend_server.py")
        self.server = subprocess.Popen(["ip", "netns", "exec", self.pods, sys.executable, str(server), *specs],
                                       stdout=subprocess.PIPE, text=True)
        assert self.server.stdout is not None
        line = self.server.stdout.readline()
        assert line.strip() == "ready", f"backend server did not start: {line!r}"

    def down(self) -> None:
        if self.server is not None:
            self.server.kill()
            self.server.wait()
        for name in (self.node, self.client, self.pods):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)

    # -- traffic from the client

    @contextmanager
    def entered(self, netns: str) -> Iterator[None]:
        here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        there = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        try:
            if _libc.setns(there, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns {netns}")
            yield
        finally:
            _libc.setns(here, CLONE_NEWNET)
            os.close(here)
            os.close(there)

    def socket(self, kind: int, netns: str | None = None) -> socket.socket:
        with self.entered(netns or self.client):
            s = socket.socket(socket.AF_INET, kind)
        s.settimeout(5)
        return s

    def connect(self, ip: str, port: int) -> tuple[socket.socket, str]:
        """A TCP connection through the service; returns it and the real server that answered."""
        s = self.socket(socket.SOCK_STREAM)
        s.connect((ip, port))
        return s, s.makefile().readline().strip()

    def tcp_hits(self, ip: str, port: int, n: int) -> Counter[str]:
        hits: Counter[str] = Counter()
        for _ in range(n):
            s, who = self.connect(ip, port)
            s.close()
            hits[who] += 1
        return hits

    def udp_hits(self, ip: str, port: int, n: int) -> Counter[str]:
        """One datagram from each of n fresh sockets (fresh source ports: fresh IPVS connections)."""
        hits: Counter[str] = Counter()
        for _ in range(n):
            s = self.socket(socket.SOCK_DGRAM)
            s.connect((ip, port))
            s.send(b"hi")
            hits[s.recv(100).decode()] += 1
            s.close()
        return hits


def wait_for(cond, timeout: float = 20, step: float = 0.2) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return bool(cond())
