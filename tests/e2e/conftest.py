"""Kubernetes' [sig-network] e2e tests translated one to one against `netkit lab cluster`.

One cluster per mode (session scope: each xdist worker builds at most one per mode, and pytest
runs every test of one mode before building the next) — iptables, nftables, and each of them dual
stack (iptables-dual-stack, nftables-dual-stack: a cluster with both IP families, where the
single-stack tests run unchanged on IPv4, the primary family, and the [Feature:IPv6DualStack] tests
run only) — shared by every test: each test uses Services and deployments of its own names. One mode
alone: `-k "nftables and not dual"`, `-k iptables-dual`. `upstream("…")` names the upstream `ginkgo.It` test a
function translates (`DESCRIBE` in its module: the upstream `SIGDescribe`); the name is in every
failure and, with `NETKIT_E2E_RESULTS=FILE`, in the JSON of outcomes `tests/e2e/table.py` renders
into docs/e2e.md.

The lab's pods answer every connection with their name (what agnhost's netexec `/hostname` gives
the upstream tests) and the source they saw, on 8080 (container port `http`), 5353 and 5432.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from netkit.lab.cluster import lifecycle
from netkit.lab.cluster.state import Record
from netkit.lab.sockets import Outcome
from tests.conftest import need_root_and
from tests.lab_cluster.conftest import UP_TIMEOUT, Kubectl, fresh, hit, in_pod, need_kubectl

HERE = Path(__file__).parent
IN_VM = os.environ.get("NETKIT_IN_VM") == "1"  # the IPVS test VM (vm-images/run-tests): the ipvs subset
DUAL_STACK_MODES = ("iptables-dual-stack", "nftables-dual-stack")
MODES = ("ipvs",) if IN_VM else ("iptables", "nftables", *DUAL_STACK_MODES)
# a mode is netkit's proxy mode, or that mode's cluster with both IP families
PROXY_MODE = {"iptables-dual-stack": "iptables", "nftables-dual-stack": "nftables"}
IP_FAMILY = dict.fromkeys(DUAL_STACK_MODES, "dual")
RESULTS_ENV = "NETKIT_E2E_RESULTS"  # a file: the outcome of every test, by upstream name and mode
POLL = 60.0  # seconds: the lab syncs in about a second; a loaded machine takes longer
CLIENT_NODE = "node-3"  # the last node; in the VM's 2-node cluster, node-2

pytestmark = pytest.mark.netns


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "upstream(name): the upstream [sig-network] e2e test translated")
    config.addinivalue_line("markers", "ipvs: in the IPVS subset the test VM runs")


def upstream_name(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("upstream")
    return str(marker.args[0]) if marker else None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The IPVS subset alone in the VM; each mode's tests one xdist group (`--dist loadgroup`, as
    `make test` runs), so one worker builds that mode's cluster, not every worker that gets one of
    its tests; the upstream test's name on each report."""
    if IN_VM:  # only the IPVS subset: the others are not run (not reported as skipped)
        outside = [i for i in items if i.path.is_relative_to(HERE) and i.get_closest_marker("ipvs") is None]
        config.hook.pytest_deselected(items=outside)
        items[:] = [i for i in items if i not in outside]
    for item in items:
        name = upstream_name(item)
        if name is not None:
            callspec = getattr(item, "callspec", None)
            mode = callspec.params.get("mode", "") if callspec else ""
            test = f"{item.path.name}::{item.name.split('[')[0]}"
            describe = str(getattr(getattr(item, "module", None), "DESCRIBE", ""))
            item.user_properties += [("upstream", name), ("mode", mode), ("test", test), ("describe", describe)]
        callspec = getattr(item, "callspec", None)
        if item.path.is_relative_to(HERE) and callspec is not None and "mode" in callspec.params:
            item.add_marker(pytest.mark.xdist_group(f"e2e-{callspec.params['mode']}"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failure names the upstream test it translates."""
    report = yield
    name = upstream_name(item)
    if name is not None and report.failed:
        describe = getattr(getattr(item, "module", None), "DESCRIBE", "")
        report.sections.append(("upstream test", f"[sig-network] {describe} {name}"))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    props = dict(report.user_properties)
    if "upstream" not in props or (report.when != "call" and not (report.failed or report.skipped)):
        return
    row = _collected.setdefault(str(props["upstream"]),
                                {"test": str(props["test"]), "describe": str(props["describe"])})
    row[str(props["mode"])] = report.outcome


_collected: dict[str, dict[str, str]] = {}  # upstream name → {"test", "describe", each mode: outcome}


def pytest_sessionfinish(session: pytest.Session) -> None:
    where = os.environ.get(RESULTS_ENV)
    if where and _collected and not hasattr(session.config, "workerinput"):
        Path(where).write_text(json.dumps(dict(sorted(_collected.items())), indent=2) + "\n")


@pytest.fixture(scope="session", params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def proxy_mode(mode: str) -> str:
    return PROXY_MODE.get(mode, mode)


@pytest.fixture(scope="session")
def cluster(mode: str, proxy_mode: str, writable_etc_netns: None) -> Iterator[Record]:
    """3 nodes, 2 `web` pods each; in the test VM (software emulation, one vCPU, where each `netkit
    run` and `netkit dns` costs ~40 s of CPU to start) 2 nodes, 1 `web` pod each, 1 DNS pod."""
    need_root_and("ip", *lifecycle.MODE_TOOLS[proxy_mode])
    record = (lifecycle.up(2, proxy_mode, 1, timeout=1500, dns_pods=1) if IN_VM
              else lifecycle.up(3, proxy_mode, 2, timeout=float(UP_TIMEOUT), ip_family=IP_FAMILY.get(mode, "ipv4")))
    try:
        yield record
    finally:
        lifecycle.down(record.cluster_id)


@pytest.fixture
def kubectl(cluster: Record, tmp_path: Path) -> Kubectl:
    need_kubectl()
    return Kubectl(cluster, tmp_path)


@pytest.fixture
def exec_pod(cluster: Record) -> str:
    """The upstream tests' exec pod: a `web` pod on the last node (no test here scales `web`)."""
    last = fresh(cluster).cluster.nodes[-1].name
    return next(p.name for p in fresh(cluster).cluster.pods_on(last) if p.deploy == "web")


def get(kubectl: Kubectl, kind: str, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(kubectl("get", kind, name, "-o", "json"))
    return doc


def cluster_ip(kubectl: Kubectl, name: str) -> str:
    return str(get(kubectl, "service", name)["spec"].get("clusterIP", ""))


def pods_of(record: Record, deploy: str) -> set[str]:
    return {p.name for p in fresh(record).cluster.pods_of(deploy)}


def start_serve_hostname(record: Record, deploy: str, replicas: int) -> set[str]:
    """StartServeHostnameService's pods: `replicas` pods labelled app=DEPLOY."""
    lifecycle.scale(record.cluster_id, deploy, replicas, create=True)
    return pods_of(record, deploy)


def hostnames(record: Record, pod: str, ip: str, port: int, count: int) -> list[str | None]:
    """`count` connections from `pod` to ip:port, each's answering pod (None: no answer)."""
    return [hit(record, pod, ip, port, timeout=1.0).backend for _ in range(count)]


def service_up(record: Record, pod: str, ip: str, port: int, expected: set[str]) -> bool:
    """verifyServeHostnameServiceUp: over 10 connections per pod, every expected pod answers and
    nothing else does (a failed connection counts as an unexpected answer)."""
    return set(hostnames(record, pod, ip, port, 10 * len(expected))) == expected


def service_down(record: Record, pod: str, ip: str, port: int) -> bool:
    """verifyServeHostnameServiceDown: no connection is answered."""
    return all(hit(record, pod, ip, port, timeout=0.5).outcome is not Outcome.ANSWERED for _ in range(3))


CONNECT = """import socket, sys
host, port, proto = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    if proto == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(3)
        s.connect((host, port))
        s.send(b"hostname\\n")
    else:
        s = socket.create_connection((host, port), timeout=3)
    print(s.recv(200).decode().split()[0])
except ConnectionRefusedError:
    print("REFUSED")
except (socket.timeout, TimeoutError):
    print("TIMEOUT")
except OSError as e:
    print("OTHER", e)
"""


def connect_by_name(record: Record, pod: str, host: str, port: int, proto: str = "tcp") -> str:
    """agnhost connect (or `nc -u` for UDP) from inside the pod, by name through its resolv.conf:
    the answering pod's name, or REFUSED / TIMEOUT / OTHER."""
    proc = in_pod(record, pod, [sys.executable, "-c", CONNECT, host, str(port), proto])
    return proc.stdout.strip() or f"OTHER {proc.stderr.strip()}"


def node_ips(record: Record) -> list[str]:
    """e2enode.CollectAddresses(nodes, InternalIP): every node's address, the first node's first."""
    return [str(n.ip) for n in fresh(record).cluster.nodes]


def node_of(record: Record, pod: str) -> str:
    return next(p.node for p in fresh(record).cluster.pods if p.name == pod)


def pod_ip(record: Record, pod: str) -> str:
    return next(str(p.ip) for p in fresh(record).cluster.pods if p.name == pod)


def web_pod_on(record: Record, node: str) -> str:
    """A pause pod on `node`: one of the `web` pods there (no test scales `web`)."""
    return next(p.name for p in fresh(record).cluster.pods_on(node) if p.deploy == "web")


def service_reachable(record: Record, pod: str, name: str, ip: str, ports: list[tuple[int, str]],
                      pods: set[str], node_ports: list[int] | None = None) -> bool:
    """CheckServiceReachability: every Service port answered by one of `pods`, by name and by
    ClusterIP (and for a NodePort Service, on every node's address at its node port)."""
    for port, proto in ports:
        if connect_by_name(record, pod, name, port, proto) not in pods:
            return False
        if hit(record, pod, ip, port, proto).backend not in pods:
            return False
    return all(hit(record, pod, node, port).backend in pods for node in node_ips(record) for port in node_ports or [])


CURL = """import sys, urllib.error, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=3) as r:
        print(r.status, r.reason); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.reason)
except OSError as e:
    print("ERROR", e)
"""


def http_get(record: Record, where: str, url: str) -> str:
    """`curl -i URL` from a pod or a node: the status line ("200 OK"), then the body; or
    "ERROR …" when nothing answers."""
    return in_pod(record, where, [sys.executable, "-c", CURL, url]).stdout


def dig(record: Record, pod: str, name: str, rtype: str = "A", *extra: str) -> list[str]:
    """The answers' data, as the upstream probe pods' `dig +search +short` prints them."""
    proc = in_pod(record, pod, ["dig", "+short", "+search", "+time=2", "+tries=2", *extra, name, rtype])
    return sorted(line for line in proc.stdout.split("\n") if line and not line.startswith(";"))

