"""What a test run made and left behind, told apart from what other runs on the machine make at the
same time (tests/conftest.py checks it at the end of the session, or around every test).

Other test runs, from other checkouts or the same one, may be creating and removing namespaces,
processes and labs while this one runs; this check blames only what carries this run's mark:

- the run's tag (`Scope.session`, 8 hex digits, in NETKIT_TEST_RUN of every process the run starts)
  and, around one test, the xdist worker that ran it (PYTEST_XDIST_WORKER, "" without xdist);
- network namespaces and /etc/netns directories named with the tag (`tests.conftest.netns_name`),
  with the namespace prefix of one of the run's lab state directories (clusters), or as a lab
  recorded in one of them (labs);
- processes whose environment carries the tag; without any run's tag, those whose command line
  names one of the run's state directories (all but pytest's own; the checkout alone is not the
  run's: another run, an editor or `make test-vm` in it names it too);
- lab records: labs and clusters recorded in the run's state directories, and new ones in the
  machine's `/run/netkit-lab` that a process of the run names (a test that escaped its state dir);
- veths in the machine's own namespace whose peer is in one of the run's namespaces;
- podman containers (running or not) named with the tag or as a cluster of the run's (the
  namespace prefix of its state directory and its id), or labelled with a cluster directory in one
  of the run's state directories (`netkit lab cluster up --image`).

`read(scope)` takes the picture; `new(before, after)` what appeared since; `remove(found)` deletes it
(processes and containers, then namespaces, /etc/netns directories and records), so a failed run
leaves the machine as it found it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from netkit import procfs
from netkit.lab.cluster.plan import netns_prefix
from netkit.lab.state import DEFAULT_STATE_DIR

RUN_ENV = "NETKIT_TEST_RUN"
WORKER_ENV = "PYTEST_XDIST_WORKER"
NETNS_DIR = Path("/run/netns")
ETC_NETNS = Path("/etc/netns")
EXECNET_BOOTSTRAP = b"import sys;exec(eval(sys.stdin.readline()))"  # how xdist starts its workers


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose leftovers: the run tagged `session`, all its workers (worker None) or one ("" or "gwN")."""

    session: str
    worker: str | None
    state_root: Path  # the run's lab state directories are its children
    checkout: Path

    def names_ours(self, name: str) -> bool:
        worker = r"(gw\d+)?" if self.worker is None else re.escape(self.worker)
        return re.search(rf"-{self.session}{worker}-", name) is not None

    def state_dirs(self) -> list[Path]:
        if not self.state_root.is_dir():
            return []
        return sorted(d for d in self.state_root.iterdir() if d.is_dir() and self.worker_owns(d.name))

    def worker_owns(self, name: str) -> bool:
        if self.worker is None:
            return True
        mine = self.worker or "main"
        return name == mine or name.startswith(mine + ".")


Picture = dict[str, dict[str, str]]  # item -> {key: what to show}; a key identifies one object


def read(scope: Scope) -> Picture:
    procs = processes(scope)
    records = lab_records(scope, procs)
    names = namespaces(scope, records)
    return {"processes": procs, "lab records": records, "network namespaces": names,
            "/etc/netns directories": etc_netns(scope, records), "root veths": root_veths(names),
            "containers": containers(scope, records)}


def new(before: Picture, after: Picture) -> list[str]:
    """One line per object in `after` and not in `before`."""
    return sorted(f"{item}: {shown[:200]}" for item, now in after.items() for key, shown in now.items()
                  if key not in before.get(item, {}))


def fresh(before: Picture, after: Picture) -> Picture:
    return {item: {k: v for k, v in now.items() if k not in before.get(item, {})} for item, now in after.items()}


# --- processes -------------------------------------------------------------------------------------

def processes(scope: Scope) -> dict[str, str]:
    """{"PID:STARTTIME": "pid PID: COMMAND LINE"} of the run's processes, pytest's own left out."""
    own = pytest_processes()
    # An untagged process counts only when it names one of the run's state directories: naming the
    # checkout is not enough, since another run, an editor or `make test-vm` in the same checkout
    # does too, and the guard would kill them.
    markers = [str(scope.state_root)]
    found = {}
    for pid in procfs.pids():
        if pid in own:
            continue
        cmdline, env, st = procfs.cmdline(pid), procfs.environ(pid), procfs.stat(pid)
        if cmdline and env is not None and st is not None and runs_ours(scope, cmdline, env, markers):
            shown = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()  # (a zombie's is empty)
            found[f"{pid}:{st.started}"] = f"pid {pid}: {shown}"
    return found


def runs_ours(scope: Scope, cmdline: bytes, env: dict[bytes, bytes], markers: list[str]) -> bool:
    tag = env.get(RUN_ENV.encode())
    if tag is not None:
        worker = env.get(WORKER_ENV.encode(), b"").decode()
        return tag.decode() == scope.session and (scope.worker is None or worker == scope.worker)
    return scope.worker is None and any(re.search(re.escape(m.encode()) + rb"(/|:|\0|$)", cmdline) for m in markers)


def pytest_processes() -> set[int]:
    """This process, its ancestors, and the xdist workers among its children."""
    own = {os.getpid()}
    pid = os.getppid()
    while pid > 1:
        own.add(pid)
        pid = parent(pid)
    own |= {p for p in procfs.pids() if parent(p) == os.getpid() and EXECNET_BOOTSTRAP in (procfs.cmdline(p) or b"")}
    return own


def parent(pid: int) -> int:
    st = procfs.stat(pid)
    return 0 if st is None else st.ppid


# --- lab records, namespaces -------------------------------------------------------------------------

def lab_records(scope: Scope, procs: dict[str, str]) -> dict[str, str]:
    """{path: path} of labs (`ID.json`) and clusters (`clusters/ID`) recorded in the run's state
    directories, and of those in /run/netkit-lab that one of the run's processes names."""
    found = {}
    for d in scope.state_dirs():
        for p in (*d.glob("*.json"), *(d / "clusters").glob("*")):
            found[str(p)] = str(p)
    default = Path(DEFAULT_STATE_DIR)
    for p in (*default.glob("*.json"), *(default / "clusters").glob("*")):
        if any(str(p) in shown for shown in procs.values()) or server_named(p, procs):
            found[str(p)] = f"{p} (outside the run's state directories)"
    return found


def server_named(record: Path, procs: dict[str, str]) -> bool:
    """Whether a lab record's server process is one of `procs`."""
    try:
        pid = int(json.loads(record.read_text()).get("server_pid", 0))
    except (OSError, ValueError, AttributeError):
        return False
    return any(key.split(":")[0] == str(pid) for key in procs) if pid else False


def record_prefixes(scope: Scope, records: dict[str, str]) -> list[str]:
    """The namespace-name prefixes of the run's labs and clusters."""
    prefixes = [netns_prefix(str(d), str(DEFAULT_STATE_DIR)) for d in scope.state_dirs()]
    for path in map(Path, records):
        if path.suffix == ".json":
            prefixes.append(f"nk{path.stem}-")  # netkit.lab.plan: nk<lab id>-<role>
        elif path.parent.name == "clusters":
            state = path.parent.parent
            prefixes.append(netns_prefix(str(state), str(DEFAULT_STATE_DIR)) + path.name + "-")
    return prefixes


def ours(scope: Scope, name: str, prefixes: list[str]) -> bool:
    return scope.names_ours(name) or name.startswith(tuple(prefixes))


def namespaces(scope: Scope, records: dict[str, str]) -> dict[str, str]:
    prefixes = record_prefixes(scope, records)
    try:
        names = os.listdir(NETNS_DIR)
    except OSError:
        return {}
    return {n: n for n in names if ours(scope, n, prefixes)}


def etc_netns(scope: Scope, records: dict[str, str]) -> dict[str, str]:
    prefixes = record_prefixes(scope, records)
    try:
        names = os.listdir(ETC_NETNS)
    except OSError:
        return {}
    return {n: str(ETC_NETNS / n) for n in names if ours(scope, n, prefixes)}


def root_veths(names: dict[str, str]) -> dict[str, str]:
    """Veths in the machine's own namespace with their peer in one of `names`."""
    if not names or shutil.which("ip") is None:
        return {}
    try:
        ids = {str(i["nsid"]): i.get("name", "") for i in json.loads(run("ip", "-j", "netns", "list-id") or "[]")}
        links = json.loads(run("ip", "-j", "link", "show", "type", "veth") or "[]")
    except ValueError:
        return {}
    found = {}
    for link in links:
        peer = ids.get(str(link.get("link_netnsid", "")), "")
        if peer in names:
            found[link["ifname"]] = f"{link['ifname']} (its peer is in {peer})"
    return found


CLUSTER_LABEL = "netkit.lab.cluster"  # netkit.lab.cluster.kubelet: a container's cluster directory


def containers(scope: Scope, records: dict[str, str]) -> dict[str, str]:
    """{name: name} of the run's podman containers, by name or by their cluster's directory."""
    if shutil.which("podman") is None:
        return {}
    prefixes = record_prefixes(scope, records)
    dirs = tuple(f"{d}/" for d in scope.state_dirs())
    out = run("podman", "ps", "--all", "--format", f'{{{{.Names}}}} {{{{index .Labels "{CLUSTER_LABEL}"}}}}')
    found = {}
    for line in out.splitlines():
        name, _, where = line.partition(" ")
        if ours(scope, name, prefixes) or (dirs and where.startswith(dirs)):
            found[name] = name
    return found


def run(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60).stdout


# --- settling, removing ----------------------------------------------------------------------------

def settle(scope: Scope, before: Picture, timeout: float = 10.0, steady: float = 2.0) -> Picture:
    """What is new, once it has stopped shrinking for `steady` seconds (a server told to stop may
    still be on its way out), at most after `timeout`."""
    deadline = time.monotonic() + timeout
    found = fresh(before, read(scope))
    since = time.monotonic()
    while any(found.values()) and time.monotonic() < min(deadline, since + steady):
        time.sleep(0.2)
        now = fresh(before, read(scope))
        if now != found:
            found, since = now, time.monotonic()
    return found


def remove(found: Picture) -> None:
    """Delete what `found` lists: processes first (TERM, then KILL), then namespaces (their veths go
    with them), /etc/netns directories and records."""
    procs = [(pid, started) for pid, _, started in (key.partition(":") for key in found.get("processes", {}))]
    for pid, _ in procs:
        signal_pid(int(pid), signal.SIGTERM)
    deadline = time.monotonic() + 5
    while procs and time.monotonic() < deadline:
        procs = [(pid, started) for pid, started in procs if same_process(int(pid), started)]
        time.sleep(0.05)
    for pid, _ in procs:
        signal_pid(int(pid), signal.SIGKILL)
    for name in found.get("containers", {}):
        subprocess.run(["podman", "rm", "--force", "--time", "0", name], capture_output=True, check=False)
    for name in found.get("network namespaces", {}):
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    for etc in found.get("/etc/netns directories", {}).values():
        shutil.rmtree(etc, ignore_errors=True)
    for record in map(Path, found.get("lab records", {})):
        if record.is_dir():
            shutil.rmtree(record, ignore_errors=True)
        else:
            record.unlink(missing_ok=True)
            record.with_suffix(".log").unlink(missing_ok=True)


def same_process(pid: int, started: str) -> bool:
    st = procfs.stat(pid)
    return st is not None and str(st.started) == started


def signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
