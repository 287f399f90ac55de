"""deploy/: the ClusterRole covers every request a real daemon run makes (initial lists, watches, a
relist after compaction, the Endpoints fallback) and grants nothing it does not use; kubectl accepts
every manifest against the test API server; the DaemonSet and Containerfile say what the daemon needs."""

from __future__ import annotations

import argparse
import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from netkit.testing.apiserver import TestApiServer, rbac_uncovered

from .conftest import eventually, run
from .e2e import (
    Kubectl,
    config,
    free_port,
    options,
    running_daemon,
    start_daemon,
    stop_daemon,
    web_service,
    web_slice,
    with_ports,
)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def manifests() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def of_kind(kind: str) -> dict[str, Any]:
    return next(d for d in manifests() if d["kind"] == kind)


def granted(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


@pytest.mark.parametrize("slices", [True, False], ids=["endpointslices", "endpoints-fallback"])
def test_the_cluster_role_covers_exactly_what_the_daemon_requests(netns: str, tmp_path: Path, slices: bool) -> None:
    role = of_kind("ClusterRole")

    async def scenario() -> set[tuple[str, str, str]]:
        srv = TestApiServer(bookmark_interval=0.5, serve_endpoint_slices=slices)
        await srv.start()
        try:
            srv.store.create(yaml.safe_load(web_service()))
            if slices:
                srv.store.create(yaml.safe_load(web_slice(["10.244.1.11"])))
            async with running_daemon(netns, tmp_path, srv=srv) as r:
                await asyncio.wait_for(r.daemon.synced.wait(), 10)
                if slices:
                    await r.converge(lambda s: s.get("default/web:http/tcp") == with_ports(["10.244.1.11"]))
                lists = len(srv.requests("list"))
                srv.stall_watches()
                srv.store.create(yaml.safe_load(web_service("10.96.0.11", name="late")))  # not delivered
                srv.compact()
                srv.drop_connections()  # → 410 → relists
                await eventually(lambda: len(srv.requests("list")) >= lists + 1, 10, "relists")
        finally:
            await srv.stop()
        assert rbac_uncovered(srv.audit, role) == []
        return {(a.group, a.resource, a.verb) for a in srv.audit if a.resource}

    used = run(scenario(), timeout=40)
    expected = {("", "services", "list"), ("", "services", "watch"), ("", "nodes", "list"), ("", "nodes", "watch")}
    expected |= ({("discovery.k8s.io", "endpointslices", v) for v in ("list", "watch")} if slices
                 else {("", "endpoints", v) for v in ("list", "watch")})
    assert used == expected
    assert granted(role) == expected | {("", "endpoints", "list"), ("", "endpoints", "watch"),
                                        ("discovery.k8s.io", "endpointslices", "list"),
                                        ("discovery.k8s.io", "endpointslices", "watch")}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")
def test_kubectl_accepts_the_manifests(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            kubectl = Kubectl(srv, tmp_path)
            await kubectl("create", "namespace", "kube-system", "--dry-run=client", "-o", "name")
            out = await kubectl("create", "--validate=false", "-f", str(DEPLOY))
            assert out.count("created") == 5, out
            got = yaml.safe_load(await kubectl("get", "-n", "kube-system", "daemonset/netkit", "-o", "yaml"))
            assert got["spec"]["template"]["spec"]["hostNetwork"] is True
            for what in ("serviceaccount/netkit", "configmap/netkit"):
                await kubectl("get", "-n", "kube-system", what, "-o", "name")
            for what in ("clusterrole/netkit", "clusterrolebinding/netkit"):
                await kubectl("get", what, "-o", "name")

    run(scenario(), timeout=40)


def test_the_daemonset_has_what_the_daemon_needs(tmp_path: Path) -> None:
    ds = of_kind("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["hostNetwork"] is True and c["securityContext"]["privileged"] is True
    assert pod["serviceAccountName"] == of_kind("ServiceAccount")["metadata"]["name"]
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert {"/run/xtables.lock", "/lib/modules"} <= set(mounts)
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": 10256, "host": "127.0.0.1"}
    live = c["livenessProbe"]
    assert live["httpGet"] == {"path": "/livez", "port": 10256, "host": "127.0.0.1"}
    # /livez fails 2 x syncPeriod after a change queued during the first sync; the probe then waits
    # failureThreshold x periodSeconds more: together at least twice the 65 s of a 10k-service first sync.
    assert 60 + live["failureThreshold"] * live["periodSeconds"] >= 2 * 65
    # kubeadm's arguments, the ConfigMap mounted where config.conf names its kubeconfig.conf
    assert c["command"] == ["netkit", "run", "--config=/var/lib/netkit/config.conf",
                            "--hostname-override=$(NODE_NAME)"]
    volume = next(v for v in pod["volumes"] if v["name"] == mounts["/var/lib/netkit"])
    cm = of_kind("ConfigMap")
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    from netkit.config import load_kube_proxy_configuration
    cfg = load_kube_proxy_configuration(cm["data"]["config.conf"], "config.conf")
    assert cfg.warnings == () and cfg.healthz_bind_address.endswith(":10256")
    assert cfg.kubeconfig == "/var/lib/netkit/kubeconfig.conf" and "kubeconfig.conf" in cm["data"]
    kubeconfig = yaml.safe_load(cm["data"]["kubeconfig.conf"])
    user = kubeconfig["users"][0]["user"]
    assert user == {"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}
    assert kubeconfig["clusters"][0]["cluster"]["server"].startswith("https://")
    binding = of_kind("ClusterRoleBinding")
    assert binding["roleRef"]["name"] == of_kind("ClusterRole")["metadata"]["name"]
    # the command line parses as netkit run's (kube-proxy's flags)
    from netkit.runtime.command import register, run_config
    top = argparse.ArgumentParser()
    register(top.add_subparsers())
    conf = tmp_path / "config.conf"
    conf.write_text(cm["data"]["config.conf"])
    argv = [a.replace("/var/lib/netkit/config.conf", str(conf)).replace("$(NODE_NAME)", "node-a")
            for a in c["command"][2:]]
    parsed, _ = run_config(top.parse_args(["run", *argv]))
    assert parsed.node_name == "node-a" and parsed.sync_period == 30.0


def test_dns_listen_needs_no_more_than_the_cluster_role(netns: str, tmp_path: Path) -> None:
    role = of_kind("ClusterRole")

    async def scenario() -> None:
        async with TestApiServer(bookmark_interval=0.5) as srv:
            srv.store.create(yaml.safe_load(web_service()))
            kubectl = Kubectl(srv, tmp_path)
            opts = options(netns, config(), kubeconfig=kubectl.kubeconfig, dns_listen=f"127.0.0.1:{free_port()}")
            daemon, task = await start_daemon(opts)
            try:
                await asyncio.wait_for(daemon.synced.wait(), 10)  # a 403 on Pods would block this
            finally:
                await stop_daemon(task)
            assert rbac_uncovered(srv.audit, role) == []
            assert not [a for a in srv.audit if a.resource == "pods"]

    run(scenario(), timeout=40)


def test_the_containerfile_copies_what_exists_and_installs_the_tools() -> None:
    lines = [line.strip() for line in (DEPLOY / "Containerfile").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    joined = " ".join(lines)
    assert lines[0].startswith("FROM ") and "bookworm" in lines[0]  # Debian-based
    for tool in ("iptables", "nftables", "conntrack", "iproute2"):
        assert tool in joined, tool
    copies = [line.split()[1:-1] for line in lines if line.startswith("COPY ")]
    assert copies
    for sources in copies:
        for src in sources:
            assert (ROOT / src).exists(), f"COPY {src}: missing"
    assert "pip install" in joined
