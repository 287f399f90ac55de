"""Where running labs are recorded: one small JSON file per lab under /run/netkit-lab.

Every lab writes its record when it is up (tests' labs too), so `netkit lab status` sees all of them
and `netkit lab down --stale` can remove labs whose owning process died without tearing down (killed
with SIGKILL). A lab started by `netkit lab up` has no owner: it lives until `netkit lab down`.
/run is a tmpfs, so records never outlive a reboot (and neither do namespaces).

NETKIT_LAB_STATE_DIR names another directory for every lab and cluster command (and the processes
they start): tests give each cluster they break on purpose a directory of its own, so
`netkit lab cluster down --all` there never touches anyone else's.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from netkit.lab.plan import DEFAULT_PORTS, Layout, layout

DEFAULT_STATE_DIR = Path("/run/netkit-lab")
STATE_DIR_ENV = "NETKIT_LAB_STATE_DIR"
STATE_DIR = Path(os.path.abspath(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR))


@dataclass(frozen=True, slots=True)
class Record:
    """What outlives the process that built a lab: enough to find and remove everything."""

    lab_id: str
    ports: tuple[int, ...]
    server_pid: int
    owner_pid: int  # 0: persistent (netkit lab up)

    def layout(self) -> Layout:
        return layout(self.lab_id, self.ports)

    def owner_alive(self) -> bool:
        if not self.owner_pid:
            return True
        try:
            os.kill(self.owner_pid, 0)
        except ProcessLookupError:
            return False
        return True


def path(lab_id: str) -> Path:
    return STATE_DIR / f"{lab_id}.json"


def log_path(lab_id: str) -> Path:
    return STATE_DIR / f"{lab_id}.log"


def save(record: Record) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = path(record.lab_id).with_suffix(".tmp")
    tmp.write_text(json.dumps({"lab_id": record.lab_id, "ports": list(record.ports),
                               "server_pid": record.server_pid, "owner_pid": record.owner_pid}))
    tmp.replace(path(record.lab_id))


def load(lab_id: str) -> Record | None:
    try:
        data = json.loads(path(lab_id).read_text())
    except (OSError, ValueError):
        return None
    return Record(str(data["lab_id"]), tuple(int(p) for p in data.get("ports", DEFAULT_PORTS)),
                  int(data.get("server_pid", 0)), int(data.get("owner_pid", 0)))


def load_all() -> list[Record]:
    if not STATE_DIR.is_dir():
        return []
    found = (load(p.stem) for p in sorted(STATE_DIR.glob("*.json")))
    return [r for r in found if r is not None]


def forget(lab_id: str) -> None:
    for p in (path(lab_id), log_path(lab_id)):
        p.unlink(missing_ok=True)
