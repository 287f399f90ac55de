"""deploy/: the ClusterRole covers every request a real daemon run makes (initial lists, watches, a
relist after compaction, the Endpoints fallback) and grants nothing it does not use; kubectl accepts
every manifest against the test API server; the DaemonSet and Containerfile say what the daemon needs.
deploy/dns/ (netkit dns in place of kubeadm's CoreDNS) too; every manifest of both matches the
Kubernetes schema as the official client's models describe it (tests/dnsserver/test_api_source.py
checks its ClusterRole against what a running netkit dns requests)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from netkit.cli import _coredns
from netkit.dns.config import DEFAULTS, load
from netkit.testing.apiserver import TestApiServer, rbac_uncovered
from tests.daemon.conftest import EVENT_TIMEOUT

from .conftest import eventually, run
from .e2e import (
    Kubectl,
    config,
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
DNS_DEPLOY = DEPLOY / "dns"


def manifests(folder: Path = DEPLOY) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def of_kind(kind: str, folder: Path = DEPLOY) -> dict[str, Any]:
    return next(d for d in manifests(folder) if d["kind"] == kind)


def schema_problems(data: Any, typ: str, where: str) -> list[str]:
    """Where `data` departs from the type the kubernetes client's models name: unknown fields,
    wrong scalar types (IntOrString fields are `object` there, so anything goes)."""
    import kubernetes.client as k8s
    if typ.lower().startswith("list["):
        if not isinstance(data, list):
            return [f"{where}: expected a list"]
        return [p for i, x in enumerate(data) for p in schema_problems(x, typ[5:-1], f"{where}[{i}]")]
    if typ.lower().startswith(("dict(", "dict[")):
        value_type = typ[5:-1].split(", ", 1)[1]
        if not isinstance(data, dict):
            return [f"{where}: expected a map"]
        return [p for k, v in data.items() for p in schema_problems(v, value_type, f"{where}.{k}")]
    scalars: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float)}
    if typ in scalars:
        wrong = not isinstance(data, scalars[typ]) or (typ == "int" and isinstance(data, bool))
        return [f"{where}: expected {typ}, got {data!r}"] if wrong else []
    if typ == "object":
        return []
    model = getattr(k8s, typ)
    if not isinstance(data, dict):
        return [f"{where}: expected an object ({typ})"]
    fields = {json: attr for attr, json in model.attribute_map.items()}
    out = [f"{where}.{k}: no such field in {typ}" for k in data if k not in fields]
    return out + [p for k, v in data.items() if k in fields
                  for p in schema_problems(v, model.openapi_types[fields[k]], f"{where}.{k}")]


@pytest.mark.parametrize("folder", [DEPLOY, DNS_DEPLOY], ids=["deploy", "deploy-dns"])
def test_the_manifests_match_the_kubernetes_schema(folder: Path) -> None:
    import kubernetes.client as k8s
    client = k8s.ApiClient()
    docs = manifests(folder)
    assert docs
    for doc in docs:
        typ = doc["apiVersion"].rpartition("/")[2].capitalize() + doc["kind"]  # apps/v1 Deployment → V1Deployment
        assert schema_problems(doc, typ, doc["kind"]) == []
        client._ApiClient__deserialize(doc, typ)  # the models' own checks: required fields, enums


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
                await asyncio.wait_for(r.daemon.synced.wait(), EVENT_TIMEOUT)
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

    used = run(scenario())
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
            out = await kubectl("create", "-f", str(DEPLOY))
            assert out.count("created") == 5, out
            got = yaml.safe_load(await kubectl("get", "-n", "kube-system", "daemonset/netkit", "-o", "yaml"))
            assert got["spec"]["template"]["spec"]["hostNetwork"] is True
            for what in ("serviceaccount/netkit", "configmap/netkit"):
                await kubectl("get", "-n", "kube-system", what, "-o", "name")
            for what in ("clusterrole/netkit", "clusterrolebinding/netkit"):
                await kubectl("get", what, "-o", "name")

    run(scenario())


def test_the_daemonset_has_what_the_daemon_needs(tmp_path: Path) -> None:
    ds = of_kind("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert pod["hostNetwork"] is True and c["securityContext"]["privileged"] is False
    # the capabilities tests/image runs the image with, and no others
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN", "NET_RAW"]}
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
            # an upstream of its own on loopback (the discard port): never the machine's resolv.conf
            opts = options(netns, config(), kubeconfig=kubectl.kubeconfig, dns_listen="127.0.0.1:0",
                           dns_upstreams=("127.0.0.1:9",))
            daemon, task = await start_daemon(opts)
            try:
                await asyncio.wait_for(daemon.synced.wait(), EVENT_TIMEOUT)  # a 403 on Pods would block this
            finally:
                await stop_daemon(task)
            assert rbac_uncovered(srv.audit, role) == []
            assert not [a for a in srv.audit if a.resource == "pods"]

    run(scenario())


def test_the_containerfile_copies_what_exists_and_installs_the_tools() -> None:
    lines = [line.strip() for line in (DEPLOY / "Containerfile").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    joined = " ".join(lines)
    assert lines[0].startswith("FROM ") and "bookworm" in lines[0]  # Debian-based
    # the package list `make image` reads too
    assert "image-packages.txt)" in joined and "image-finish.sh trim" in joined
    packages = (DEPLOY / "image-packages.txt").read_text().split()
    for tool in ("iptables", "nftables", "conntrack", "iproute2", "ipset", "ipvsadm", "kmod", "python3"):
        assert tool in packages, tool
    copies = [line.split()[1:-1] for line in lines if line.startswith("COPY ")]
    assert copies
    for sources in copies:
        for src in sources:
            assert (ROOT / src).exists(), f"COPY {src}: missing"
    assert "pip install" in joined


def test_the_dns_deployment_is_a_drop_in_for_kubeadms_coredns(tmp_path: Path) -> None:
    kinds = [d["kind"] for d in manifests(DNS_DEPLOY)]
    assert kinds == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Service"]
    dep, svc = of_kind("Deployment", DNS_DEPLOY), of_kind("Service", DNS_DEPLOY)
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 2 and dep["metadata"]["namespace"] == "kube-system"
    assert dep["spec"]["template"]["metadata"]["labels"]["k8s-app"] == "kube-dns"
    assert svc["spec"]["selector"] == {"k8s-app": "kube-dns"}  # CoreDNS's pods and ours alike
    assert svc["metadata"]["name"] == "kube-dns" and svc["spec"]["clusterIP"] == "10.96.0.10"
    assert [(p["port"], p["protocol"]) for p in svc["spec"]["ports"]] == [(53, "UDP"), (53, "TCP"), (9153, "TCP")]
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    anti = anti["podAffinityTerm"]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchExpressions"] == [{"key": "k8s-app", "operator": "In", "values": ["kube-dns"]}]
    assert pod["serviceAccountName"] == of_kind("ServiceAccount", DNS_DEPLOY)["metadata"]["name"]
    role = of_kind("ClusterRole", DNS_DEPLOY)
    assert of_kind("ClusterRoleBinding", DNS_DEPLOY)["roleRef"]["name"] == role["metadata"]["name"]
    c = pod["containers"][0]
    ports = {p["name"]: (p["containerPort"], p["protocol"]) for p in c["ports"]}
    assert ports == {"dns": (53, "UDP"), "dns-tcp": (53, "TCP"), "metrics": (9153, "TCP"),
                     "liveness-probe": (8080, "TCP"), "readiness-probe": (8181, "TCP")}
    live, ready = c["livenessProbe"]["httpGet"], c["readinessProbe"]["httpGet"]
    assert (live["path"], ports[live["port"]][0]) == ("/health", 8080)
    assert (ready["path"], ports[ready["port"]][0]) == ("/ready", 8181)
    # kubeadm's command line for CoreDNS's image: the ConfigMap's Corefile, mounted at /etc/coredns
    assert "command" not in c and c["args"] == ["-conf", "/etc/coredns/Corefile"]
    assert c["volumeMounts"] == [{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}]
    assert pod["volumes"] == [{"name": "config-volume", "configMap": {
        "name": "coredns", "items": [{"key": "Corefile", "path": "Corefile"}]}}]
    assert pod["dnsPolicy"] == "Default" and c["resources"]["limits"] == {"memory": "170Mi"}
    assert _coredns(c["args"]) == ["dns", "--conf", "/etc/coredns/Corefile"]  # the image's entrypoint: netkit
    corefile = tmp_path / "Corefile"
    corefile.write_text(of_kind("ConfigMap", DNS_DEPLOY)["data"]["Corefile"])
    conf = load(str(corefile))  # kubeadm's Corefile: the flags' defaults, on :53, with lameduck and reload
    assert dataclasses.replace(conf, listen=DEFAULTS.listen, lameduck=0.0, reload=0.0, reload_jitter=0.0, conf="",
                               conf_digest="") == DEFAULTS
    assert (conf.listen, conf.lameduck, conf.reload) == ("[::]:53", 5.0, 30.0)  # both families, as CoreDNS


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")
def test_kubectl_accepts_the_dns_manifests(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with TestApiServer() as srv:
            kubectl = Kubectl(srv, tmp_path)
            out = await kubectl("create", "-f", str(DNS_DEPLOY))
            assert out.count("created") == 6, out
            got = yaml.safe_load(await kubectl("get", "-n", "kube-system", "service/kube-dns", "-o", "yaml"))
            assert got["spec"]["clusterIP"] == "10.96.0.10"
            await kubectl("get", "-n", "kube-system", "deployment/coredns", "-o", "name")

    run(scenario())
