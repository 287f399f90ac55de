"""`netkit run` on a lab node exactly as `deploy/` runs it as a DaemonSet.

Read from the manifests, not restated here: the container's command and arguments (with
`$(NODE_NAME)` from its `fieldRef: spec.nodeName`), and every ConfigMap volume's files. Each node
gets those files in its own directory, the mount path on the command line and inside the files
replaced by that directory, so the daemon reads the very configuration the DaemonSet would. Lab
values are set in the KubeProxyConfiguration: `mode` (from `--mode`) and `clusterCIDR`; a
`clientConnection.kubeconfig` is pointed at the node's own kubeconfig. A manifest that relies on
in-cluster credentials (no kubeconfig in its configuration) gets `--kubeconfig` with the node's own
kubeconfig added, in place of the service-account token a pod would have.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from netkit import yamlload
from netkit.lab.errors import LabError

JSON = dict[str, Any]
KUBECONFIG_FILE = "kubeconfig.conf"


@dataclass(frozen=True, slots=True)
class NodeDaemon:
    argv: tuple[str, ...]            # as the container runs it, paths in the node's directory
    files: tuple[tuple[str, str], ...]  # (file name, text) for the node's directory


def default_dir() -> Path:
    return Path(__file__).resolve().parents[3] / "deploy"


def documents(deploy_dir: Path) -> Iterator[JSON]:
    for path in sorted(deploy_dir.glob("*.yaml")):
        for doc in yamlload.safe_load_all(path.read_text()):
            if isinstance(doc, dict):
                yield doc


def find(docs: list[JSON], kind: str, name: str | None = None) -> JSON:
    for doc in docs:
        if doc.get("kind") == kind and (name is None or (doc.get("metadata") or {}).get("name") == name):
            return doc
    raise LabError(f"deploy/: no {kind}{' ' + name if name else ''} in the manifests")


def dns_corefile(deploy_dir: Path) -> str:
    """The Corefile of the `coredns` ConfigMap in deploy/dns/, which the lab's DNS pods read."""
    cm = find(list(documents(deploy_dir / "dns")), "ConfigMap", "coredns")
    text = (cm.get("data") or {}).get("Corefile")
    if not isinstance(text, str):
        raise LabError("deploy/dns/: the coredns ConfigMap has no Corefile")
    return text


def container(ds: JSON) -> JSON:
    containers = ((ds.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []
    if not containers:
        raise LabError("deploy/: the DaemonSet has no container")
    return dict(containers[0])


def config_mounts(ds: JSON, c: JSON) -> dict[str, str]:
    """{mountPath: ConfigMap name} for the container's ConfigMap volumes."""
    volumes = {v["name"]: v["configMap"]["name"] for v in ds["spec"]["template"]["spec"].get("volumes") or []
               if "configMap" in v}
    return {m["mountPath"]: volumes[m["name"]] for m in c.get("volumeMounts") or [] if m["name"] in volumes}


def expand(arg: str, env: Mapping[str, str]) -> str:
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


def field_env(c: JSON, node: str) -> dict[str, str]:
    env = {}
    for e in c.get("env") or []:
        ref = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if ref == "spec.nodeName":
            env[e["name"]] = node
        elif "value" in e:
            env[e["name"]] = str(e["value"])
    return env


def lab_config(text: str, mode: str, cluster_cidr: str, kubeconfig: str | None) -> tuple[str, bool]:
    """(the KubeProxyConfiguration with the lab's values, whether it names a kubeconfig); `kubeconfig`
    replaces the one it names (None: kept)."""
    doc = yamlload.safe_load(text)
    if not isinstance(doc, dict) or doc.get("kind") != "KubeProxyConfiguration":
        return text, False
    doc["mode"] = mode
    doc["clusterCIDR"] = cluster_cidr
    conn = doc.get("clientConnection")
    has_kubeconfig = isinstance(conn, dict) and bool(conn.get("kubeconfig"))
    if has_kubeconfig and kubeconfig is not None:
        assert isinstance(conn, dict)
        conn["kubeconfig"] = kubeconfig
    return yaml.safe_dump(doc, sort_keys=False), has_kubeconfig


def node_daemon(deploy_dir: Path, node: str, node_dir: Path, *, mode: str, cluster_cidr: str) -> NodeDaemon:
    docs = list(documents(deploy_dir))
    ds = find(docs, "DaemonSet")
    c = container(ds)
    mounts = config_mounts(ds, c)
    kubeconfig = str(node_dir / KUBECONFIG_FILE)
    files: dict[str, str] = {}
    named_kubeconfig = False
    for mount, cm_name in mounts.items():
        for fname, text in ((find(docs, "ConfigMap", cm_name).get("data")) or {}).items():
            if "kubeconfig" in fname:
                continue  # the node's own kubeconfig is written instead
            text = text.replace(mount.rstrip("/") + "/", str(node_dir) + "/")
            text, named = lab_config(text, mode, cluster_cidr, kubeconfig)
            named_kubeconfig |= named
            files[fname] = text
    env = field_env(c, node)
    argv = [expand(a, env) for a in [*(c.get("command") or []), *(c.get("args") or [])]]
    for mount in mounts:
        argv = [a.replace(mount.rstrip("/") + "/", str(node_dir) + "/") for a in argv]
    if not named_kubeconfig and not any(a.startswith("--kubeconfig") for a in argv):
        argv += ["--kubeconfig", kubeconfig]
    return NodeDaemon(tuple(argv), tuple(sorted(files.items())))


def pod_config_maps(deploy_dir: Path, workload: JSON, *, mode: str, cluster_cidr: str,
                    server: str) -> tuple[dict[str, dict[str, str]], bool]:
    """The ConfigMaps `workload`'s pod mounts, as kubelet projects them into a container, with the
    lab's values (a KubeProxyConfiguration's `mode` and `clusterCIDR`, a kubeconfig's `server:`), and
    whether one of them is a configuration that names its kubeconfig."""
    docs = [*documents(deploy_dir), *documents(deploy_dir / "dns")]
    volumes = ((workload.get("spec") or {}).get("template") or {}).get("spec", {}).get("volumes") or []
    maps: dict[str, dict[str, str]] = {}
    named_kubeconfig = False
    for vol in volumes:
        if "configMap" not in vol:
            continue
        name = vol["configMap"]["name"]
        data: dict[str, str] = {}
        for fname, text in ((find(docs, "ConfigMap", name).get("data")) or {}).items():
            if "kubeconfig" in fname:
                text = re.sub(r"(?m)^(\s*server:\s*)\S+", lambda m: m.group(1) + server, text)
            text, named = lab_config(text, mode, cluster_cidr, None)
            named_kubeconfig |= named
            data[fname] = text
        maps[name] = data
    return maps, named_kubeconfig
