"""netkit's node image (`make image`) run as deploy/30-daemonset.yaml says: its command and args, env
(NODE_NAME from spec.nodeName), the ConfigMap at its mount path, the service account's token, host
network (a namespace made here), the securityContext's capabilities and nothing more. The rules
appear in the node's namespace and the probes answer; bad input says one line and leaves nothing.

The image is built once (tests/image/build.py), so only the first run on a machine pays for the
Debian root.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import netkit
from netkit.lab.cluster import podman as runtime
from netkit.lab.cluster.deploy import documents, find
from netkit.lab.cluster.nodehttp import get
from netkit.lab.cluster.pod import PodSpec, pod_spec
from netkit.lab.errors import LabError
from netkit.model import IPFamily
from netkit.netns import socket_in
from netkit.rules.iptables.kernel import IptablesKernel
from netkit.rules.iptables.summary import summarize
from netkit.testing.apiserver import TestApiServer
from tests.conftest import ROOT, netns_name
from tests.daemon.e2e import WEB, web_service, web_slice, with_ports
from tests.image.build import build_image, need_podman

DEPLOY = ROOT / "deploy"
TOKEN = "image-test-token"
API_PORT = 6443
NODE = """apiVersion: v1
kind: Node
metadata: {name: node-a}
status: {addresses: [{type: InternalIP, address: 192.168.0.21}]}
"""
A, B = "10.244.1.11", "10.244.1.12"


@pytest.fixture(scope="session")
def image() -> str:
    return build_image()


@pytest.fixture
def container_name() -> Iterator[str]:
    """A unique container name; whatever ran under it is removed afterwards, also on failure."""
    name = netns_name("netkit-test")  # the run's tag: tests/leftovers.py knows it
    try:
        yield name
    finally:
        podman = runtime.Podman.find()
        podman.remove(name)
        assert not podman.run("ps", "--all", "--quiet", "--filter", f"name=^{name}$").stdout.strip()


def daemonset() -> dict[str, Any]:
    return find(list(documents(DEPLOY)), "DaemonSet")


def configmaps(server: str) -> dict[str, dict[str, str]]:
    """The ConfigMaps as the DaemonSet mounts them; the control plane's address is the test server's."""
    data = dict(find(list(documents(DEPLOY)), "ConfigMap", "netkit")["data"])
    data["kubeconfig.conf"] = data["kubeconfig.conf"].replace("https://192.168.0.10:6443", server)
    return {"netkit": data}


def api_socket(netns: str) -> socket.socket:
    """A listening socket on 127.0.0.1:6443 inside the node's namespace, for the test API server."""
    sock = socket_in(netns, socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", API_PORT))
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def until(check: Any, timeout: float, what: str) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            if value := await asyncio.to_thread(check):
                return value
        except OSError:
            pass
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


def test_the_image_prints_the_checkouts_version(image: str) -> None:
    podman = runtime.Podman.find()
    extra = [*(["--runtime", podman.runtime] if podman.runtime else []), *(f"--ulimit={u}" for u in podman.ulimits)]
    out = podman.run("run", "--rm", "--network", "none", *extra, image, "--version").stdout
    assert out.strip() == f"netkit {netkit.__version__}"


def test_the_daemonset_runs_the_image_with_its_capabilities_only(image: str, netns: str, tmp_path: Path,
                                                                 container_name: str) -> None:
    podman = runtime.Podman.find()
    spec = pod_spec(daemonset(), "node-a", image)
    assert not spec.privileged and spec.cap_drop == ("ALL",)
    assert ("NODE_NAME", "node-a") in spec.env and "--hostname-override=node-a" in spec.command

    async def scenario() -> None:
        async with TestApiServer(bookmark_interval=0.5) as srv:
            await srv.serve_socket(api_socket(netns))
            for doc in (NODE, web_service(), web_slice([A, B])):
                srv.store.create(yaml.safe_load(doc))
            dirs, sa = runtime.write_files(tmp_path, configmaps(f"http://127.0.0.1:{API_PORT}"), TOKEN)
            host = runtime.host_for(spec, podman, netns, dirs, sa)
            await asyncio.to_thread(runtime.start, podman, spec, container_name, host, 120)
            # iptables-nft: the namespace held no rules, so `auto` (both backends readable) picks nft
            kernel = IptablesKernel(IPFamily.IPV4, netns, "nft")
            await until(lambda: summarize(kernel.dump()).get(WEB) == with_ports([A, B]), 60, "the Service's rules")
            assert spec.liveness is not None and spec.readiness is not None
            for probe in (spec.liveness, spec.readiness):
                assert (await asyncio.to_thread(get, netns, probe.host, probe.port, probe.path)).status == 200
            mine = [a for a in srv.audit if a.resource in ("services", "endpointslices")]
            assert mine and all(a.auth == f"Bearer {TOKEN}" for a in mine), "the service account's token"

    asyncio.run(asyncio.wait_for(scenario(), 180))
    caps = podman.run("inspect", "--format", "{{json .EffectiveCaps}} {{.HostConfig.Privileged}}",
                      container_name).stdout.split()
    assert caps[1] == "false"
    assert set(yaml.safe_load(caps[0])) == {f"CAP_{c}" for c in spec.cap_add}


def test_a_missing_image_says_so_and_leaves_nothing(netns: str, tmp_path: Path, container_name: str) -> None:
    podman = need_podman()
    spec = pod_spec(daemonset(), "node-a", "netkit:no-such-version")
    host = runtime.host_for(spec, podman, netns, *runtime.write_files(tmp_path, configmaps("http://x"), TOKEN))
    with pytest.raises(LabError) as err:
        runtime.start(podman, spec, container_name, host)
    assert str(err.value) == ("image netkit:no-such-version: not in podman's local storage "
                              "(`make image` builds netkit's)")


def test_an_image_that_exits_says_why_and_leaves_nothing(image: str, netns: str, tmp_path: Path,
                                                         container_name: str) -> None:
    podman = runtime.Podman.find()
    spec = pod_spec(daemonset(), "node-a", image)
    spec = PodSpec(**{**{f: getattr(spec, f) for f in spec.__slots__},  # type: ignore[attr-defined]
                      "command": ("netkit", "run", "--config=/var/lib/netkit/no-such-file.conf")})
    host = runtime.host_for(spec, podman, netns, *runtime.write_files(tmp_path, configmaps("http://x"), TOKEN))
    with pytest.raises(LabError) as err:
        runtime.start(podman, spec, container_name, host)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"container {container_name} ({image}) exited with status 2: netkit: error: ")
    assert "no-such-file.conf" in message
    assert not podman.run("ps", "--all", "--quiet", "--filter", f"name=^{container_name}$").stdout.strip()


def test_no_podman_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    tools = {tool: shutil.which(tool) for tool in ("dirname", "sed")}  # what the build script needs first
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LabError, match=r"^podman: not installed \(apt-get install podman runc; see docs/daemon.md\)$"):
        runtime.Podman.find()
    for tool, path in tools.items():
        (tmp_path / tool).symlink_to(str(path))
    proc = subprocess.run(["/bin/bash", str(ROOT / "scripts" / "build-image.sh")], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "PATH": str(tmp_path)}, check=False)
    assert (proc.returncode, proc.stderr.splitlines()) == (
        2, ["netkit: error: make image: podman is not installed (apt-get install podman)"])
