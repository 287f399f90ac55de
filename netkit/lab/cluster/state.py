"""Where a cluster lives on disk: /run/netkit-lab/clusters/<id>/ (a tmpfs: gone after a reboot), or
$NETKIT_LAB_STATE_DIR/clusters/<id>/.

```
state.json       the plan (nodes, pods, cordoned nodes) and the control plane's pid and API port
kubeconfig       for kubectl on this machine (http://127.0.0.1:<port>)
nodes/<node>/    config.conf and kubeconfig.conf: what `netkit run` reads on that node
dns/             what `netkit dns` reads
logs/            one log per process
lock             held while a command changes the cluster
```

Every process of a cluster has the cluster's directory on its command line, which is how `down`
finds processes left behind by a crash. Records live in a subdirectory so `netkit lab status` (which
reads /run/netkit-lab/*.json) never mistakes a cluster for a lab. `NETNS_PREFIX` starts the names
of the namespaces of clusters recorded here (plan.netns_prefix).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from netkit.lab.cluster.plan import Cluster, from_json, netns_prefix, to_json
from netkit.lab.state import DEFAULT_STATE_DIR, STATE_DIR

CLUSTERS_DIR = STATE_DIR / "clusters"
NETNS_PREFIX = netns_prefix(str(STATE_DIR), str(DEFAULT_STATE_DIR))


@dataclass(frozen=True, slots=True)
class Record:
    cluster: Cluster
    api_port: int = 0
    control_pid: int = 0
    image: str = ""  # the node image the pods run as containers ("": as processes)

    @property
    def cluster_id(self) -> str:
        return self.cluster.cluster_id

    @property
    def dir(self) -> Path:
        return cluster_dir(self.cluster_id)

    def with_cluster(self, cluster: Cluster) -> Record:
        return replace(self, cluster=cluster)


def cluster_dir(cluster_id: str) -> Path:
    return CLUSTERS_DIR / cluster_id


def kubeconfig_path(cluster_id: str) -> Path:
    return cluster_dir(cluster_id) / "kubeconfig"


def node_dir(cluster_id: str, node: str) -> Path:
    return cluster_dir(cluster_id) / "nodes" / node


def log_dir(cluster_id: str) -> Path:
    return cluster_dir(cluster_id) / "logs"


def save(record: Record) -> None:
    d = record.dir
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / "state.json.tmp"
    tmp.write_text(json.dumps({**to_json(record.cluster), "api_port": record.api_port,
                               "control_pid": record.control_pid, "image": record.image}, indent=1))
    tmp.replace(d / "state.json")


def load(cluster_id: str) -> Record | None:
    try:
        data = json.loads((cluster_dir(cluster_id) / "state.json").read_text())
        return Record(from_json(data), int(data.get("api_port", 0)), int(data.get("control_pid", 0)),
                      str(data.get("image", "")))
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        return None


def known_ids() -> list[str]:
    """Every cluster directory, with or without a readable record (a crash mid-`up` leaves one)."""
    if not CLUSTERS_DIR.is_dir():
        return []
    return sorted(p.name for p in CLUSTERS_DIR.iterdir() if p.is_dir())


def forget(cluster_id: str) -> None:
    shutil.rmtree(cluster_dir(cluster_id), ignore_errors=True)


@contextmanager
def locked(cluster_id: str) -> Iterator[None]:
    """One changing command at a time per cluster (scale, drain, down)."""
    d = cluster_dir(cluster_id)
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
