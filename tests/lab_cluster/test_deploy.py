"""`netkit run` on a lab node is read from deploy/: the DaemonSet's command and its ConfigMap files."""

from __future__ import annotations

from pathlib import Path

import yaml

from netkit.lab.cluster import deploy


def test_the_node_runs_the_daemonsets_command_with_its_config(tmp_path: Path) -> None:
    d = deploy.node_daemon(deploy.default_dir(), "node-2", tmp_path, mode="nftables", cluster_cidr="10.244.0.0/16")
    docs = list(deploy.documents(deploy.default_dir()))
    container = deploy.container(deploy.find(docs, "DaemonSet"))
    command = [*(container.get("command") or []), *(container.get("args") or [])]
    assert len(d.argv) >= len(command) and d.argv[0] == command[0]
    assert any(a == "node-2" or a.endswith("=node-2") for a in d.argv) and not any("$(" in a for a in d.argv)
    assert any(str(tmp_path) in a for a in d.argv)  # the config mount is the node's directory
    assert any("kubeconfig" in a for a in d.argv) or any("kubeconfig" in text for _, text in d.files)
    configs = [yaml.safe_load(text) for _, text in d.files]
    kpc = next(c for c in configs if isinstance(c, dict) and c.get("kind") == "KubeProxyConfiguration")
    assert kpc["mode"] == "nftables" and kpc["clusterCIDR"] == "10.244.0.0/16"
    for name, _ in d.files:  # every file the command line names exists among the files
        assert "/" not in name
