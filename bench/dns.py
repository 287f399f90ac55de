"""Cluster DNS benchmark: `netkit dns` against dnsmasq, same names, same load, same run.

Both servers serve the same 1,000 service names on loopback (netkit from generated manifests, dnsmasq
in the foreground from its own hosts file with `--local=/<zone>/`, so names it lacks are NXDOMAIN).
Both forward `example.test` to the same *origin* (a third dnsmasq serving 1,000 names there from a
hosts file, TTL 300). Each server is pinned to one core and dnsperf to another (taskset); netkit runs
with its metrics endpoint on (counting every answer). Three loads:

  hits  A queries for the 1,000 service names (the cache-hit case)
  mix   half of them, half search-path misses (`<svc>.<ns>.svc.<zone>.<ns>.svc.<zone>`, NXDOMAIN),
        which is what pods with ndots:5 send
  fwd   A queries for the 1,000 forwarded names, answered from each server's cache of the origin's
        answers (netkit's `cache 30` against dnsmasq's cache)

For each: queries per second (dnsperf) and CPU microseconds per query (the server's user+system time
from /proc over the queries it answered), and netkit/dnsmasq ratios. Then, with 300 idle TCP
connections held open to `netkit dns`, the latency of a new TCP client's query (connect, ask, answer),
against the same with no idle connections; and the resident memory of `netkit dns` serving 10,000
services. Needs dnsperf and dnsmasq (Debian: dnsperf, dnsmasq-base).

`--relist` measures instead what a large cluster costs `netkit dns --kubeconfig … --pods verified`:
the test API server (netkit.testing) serves 10,000 Services, 10,000 EndpointSlices (5 endpoints each)
and 50,000 Pods shaped like a Deployment's, and the figures are the time to the first answer, the
peak resident memory (VmHWM) after the first list and after a forced relist (the API server goes down,
compacts its history and comes back, so the watches get 410 Gone), and the answers for existing
names that were not NOERROR while the relist ran (CoreDNS keeps the old store until the new list is
complete). The target is kubeadm's CoreDNS memory limit, 170 MiB.

    .venv/bin/python bench/dns.py [--seconds 5] [--clients 4] [--loop auto|asyncio|uvloop]
    .venv/bin/python bench/dns.py --relist [--pods 50000] --json bench/results/dns-relist.json
    .venv/bin/python bench/dns.py --where     # tracemalloc's largest sites in that cluster's store and view
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results  # noqa: E402  (bench/results.py: --json)

ROOT = Path(__file__).resolve().parent.parent
ZONE = "cluster.local"
TARGETS = {"hits": 1.0, "mix": 1.0, "fwd": 0.8}
LOADS = {"hits": "cache-hit A queries, metrics on", "mix": "half search-path NXDOMAIN",
         "fwd": "forwarded names from the cache"}
EXTERNAL = "example.test"
TCP_IDLE = 300
TCP_TARGET_MS = 100
MEMORY_TARGET_MB = 200
RELIST_TARGET_MIB = 170  # kubeadm's CoreDNS Deployment: resources.limits.memory 170Mi


@dataclass(frozen=True)
class Result:
    qps: float
    us_per_query: float
    answered: int


def names(count: int) -> list[tuple[str, str]]:
    return [(f"svc-{i}.ns-{i % 20}.svc.{ZONE}", f"10.96.{i // 250}.{i % 250 + 1}") for i in range(count)]


def external_names(count: int) -> list[tuple[str, str]]:
    return [(f"ext-{i}.{EXTERNAL}", f"198.51.{i // 250}.{i % 250 + 1}") for i in range(count)]


def write_manifests(path: Path, count: int) -> None:
    docs = []
    for i, (_, ip) in enumerate(names(count)):
        docs.append(f"apiVersion: v1\nkind: Service\nmetadata: {{name: svc-{i}, namespace: ns-{i % 20}}}\n"
                    f"spec: {{clusterIP: {ip}, ports: [{{name: http, port: 80}}]}}\n")
    path.write_text("---\n".join(docs))


def write_queries(path: Path, count: int, mix: bool) -> None:
    lines = []
    for name, _ in names(count):
        lines.append(f"{name} A")
        if mix:  # the search path of a pod in ns-<i % 20>, after the name itself was not enough
            ns = name.split(".")[1]
            lines.append(f"{name}.{ns}.svc.{ZONE} A")
    path.write_text("\n".join(lines) + "\n")


def free_port() -> int:
    """A loopback port free for both UDP and TCP at the time of asking."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u, socket.socket() as t:
            u.bind(("127.0.0.1", 0))
            port: int = u.getsockname()[1]
            try:
                t.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def wait_ready(port: int, name: str, timeout: float = 60) -> None:
    query = (b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
             + b"".join(bytes([len(x)]) + x.encode() for x in name.split(".")) + b"\x00\x00\x01\x00\x01")
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.2)
        while time.monotonic() < deadline:
            s.sendto(query, ("127.0.0.1", port))
            try:
                if s.recv(512)[3] & 0x0F == 0:
                    return
            except OSError:
                pass
    raise RuntimeError(f"server on port {port} did not answer {name}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(match.group(1)) / 1024 if match else float("nan")


def dnsperf(port: int, queries: Path, seconds: int, clients: int, core: int) -> tuple[float, int]:
    out = subprocess.run(["taskset", "-c", str(core), "dnsperf", "-s", "127.0.0.1", "-p", str(port),
                          "-d", str(queries), "-c", str(clients), "-T", "1", "-l", str(seconds), "-q", "500"],
                         capture_output=True, text=True, check=True).stdout
    qps = float(re.search(r"Queries per second:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    done = int(re.search(r"Queries completed:\s+(\d+)", out).group(1))  # type: ignore[union-attr]
    return qps, done


def measure(pid: int, port: int, queries: Path, args: argparse.Namespace) -> Result:
    dnsperf(port, queries, 1, args.clients, args.client_core)  # warm up (and fill netkit's fast path)
    before = cpu_seconds(pid)
    qps, done = dnsperf(port, queries, args.seconds, args.clients, args.client_core)
    used = cpu_seconds(pid) - before
    return Result(qps, used / max(done, 1) * 1e6, done)


def start_netkit(manifests: Path, port: int, core: int, loop: str, upstream: int | None = None,
                 ) -> subprocess.Popen[bytes]:
    up = upstream or free_port()  # without an origin: nothing listens there, so nothing leaves loopback
    return subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-m", "netkit", "dns",
                             "-f", str(manifests), "--listen", f"127.0.0.1:{port}",
                             "--upstream", f"127.0.0.1:{up}", "--upstream-timeout", "0.5",
                             "--metrics-listen", f"127.0.0.1:{free_port()}", "--health-listen", "",
                             "--ready-listen", "", "--loop", loop], cwd=ROOT, stderr=subprocess.DEVNULL)


def start_dnsmasq(hosts: Path, port: int, core: int, *extra: str) -> subprocess.Popen[bytes]:
    dnsmasq = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"
    user = ["--user=root"] if os.geteuid() == 0 else []  # keep reading our 0700 work folder
    return subprocess.Popen(["taskset", "-c", str(core), dnsmasq, "--keep-in-foreground", "--conf-file=/dev/null",
                             f"--port={port}", "--listen-address=127.0.0.1", "--bind-interfaces",
                             "--no-resolv", "--no-hosts", f"--addn-hosts={hosts}", f"--local=/{ZONE}/",
                             "--cache-size=10000", f"--pid-file={hosts.parent / f'dnsmasq-{port}.pid'}", *extra,
                             *user], stderr=subprocess.DEVNULL)


def start_origin(work: Path, count: int, core: int) -> tuple[subprocess.Popen[bytes], int]:
    """The upstream both servers forward `example.test` to: dnsmasq answering from a hosts file."""
    (work / "origin-hosts").write_text("".join(f"{ip} {name}\n" for name, ip in external_names(count)))
    port = free_port()
    proc = start_dnsmasq(work / "origin-hosts", port, core, f"--local=/{EXTERNAL}/", "--local-ttl=300")
    wait_ready(port, external_names(1)[0][0])
    return proc, port


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_pair(work: Path, args: argparse.Namespace) -> dict[str, dict[str, Result]]:
    write_manifests(work / "services.yaml", args.services)
    (work / "hosts").write_text("".join(f"{ip} {name}\n" for name, ip in names(args.services)))
    loads = {"hits": work / "hits.txt", "mix": work / "mix.txt", "fwd": work / "fwd.txt"}
    write_queries(loads["hits"], args.services, mix=False)
    write_queries(loads["mix"], args.services, mix=True)
    loads["fwd"].write_text("".join(f"{name} A\n" for name, _ in external_names(args.services)))
    results: dict[str, dict[str, Result]] = {}
    first = names(1)[0][0]
    origin, origin_port = start_origin(work, args.services, args.client_core)
    try:
        for server in ("dnsmasq", "netkit"):
            port = free_port()
            forward = f"--server=/{EXTERNAL}/127.0.0.1#{origin_port}"
            proc = (start_dnsmasq(work / "hosts", port, args.server_core, forward) if server == "dnsmasq"
                    else start_netkit(work / "services.yaml", port, args.server_core, args.loop, origin_port))
            try:
                wait_ready(port, first)
                results[server] = {load: measure(proc.pid, port, path, args) for load, path in loads.items()}
            finally:
                stop(proc)
    finally:
        stop(origin)
    return results


def tcp_query_ms(port: int, name: str) -> float:
    """Connect, ask one A query over TCP, read the answer: milliseconds."""
    wire = (b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
            + b"".join(bytes([len(x)]) + x.encode() for x in name.split(".")) + b"\x00\x00\x01\x00\x01")
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(len(wire).to_bytes(2, "big") + wire)
        size = int.from_bytes(_exactly(s, 2), "big")
        _exactly(s, size)
    return (time.perf_counter() - started) * 1000


def _exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed before the answer")
        out += chunk
    return out


def tcp_with_idle(work: Path, args: argparse.Namespace) -> tuple[float, float, float]:
    """(median ms with no idle connections, median ms and worst ms with TCP_IDLE idle ones held)."""
    port = free_port()
    proc = start_netkit(work / "services.yaml", port, args.server_core, args.loop)
    name = names(1)[0][0]
    try:
        wait_ready(port, name)
        quiet = statistics.median(tcp_query_ms(port, name) for _ in range(20))
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(TCP_IDLE)]
        try:
            time.sleep(0.5)  # accepted and held
            held = [tcp_query_ms(port, name) for _ in range(20)]
        finally:
            for s in idle:
                s.close()
        return quiet, statistics.median(held), max(held)
    finally:
        stop(proc)


def memory_at(work: Path, count: int, args: argparse.Namespace) -> float:
    write_manifests(work / "big.yaml", count)
    write_queries(work / "big.txt", count, mix=True)
    port = free_port()
    proc = start_netkit(work / "big.yaml", port, args.server_core, args.loop)
    try:
        wait_ready(port, names(count)[-1][0], timeout=300)
        dnsperf(port, work / "big.txt", 2, args.clients, args.client_core)  # fill the fast path too
        return rss_mb(proc.pid)
    finally:
        stop(proc)


# --- --relist: a large cluster from the test API server --------------------------------------------


STAMP = "2026-01-01T00:00:00Z"
NAMESPACES = 100


def pod_ip(i: int) -> str:
    return f"10.{64 + ((i + 1) >> 16)}.{((i + 1) >> 8) & 255}.{(i + 1) & 255}"


def pod_doc(i: int, per: int) -> dict[str, Any]:
    """A Deployment's pod as the API server returns it (without managedFields): ~2.5 kB of JSON."""
    app, ip, node = f"app-{i // per}", pod_ip(i), f"node-{i % 500}"
    ready = [{"type": t, "status": "True", "lastTransitionTime": STAMP}
             for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")]
    container = {"name": "app", "image": "registry.test/app:1.2.3", "imagePullPolicy": "IfNotPresent",
                 "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                 "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                         {"name": "LOG_LEVEL", "value": "info"}],
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                 "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 10},
                 "volumeMounts": [{"name": "kube-api-access", "readOnly": True,
                                   "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
    volume = {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}
    tolerations = [{"key": f"node.kubernetes.io/{k}", "operator": "Exists", "effect": "NoExecute",
                    "tolerationSeconds": 300} for k in ("not-ready", "unreachable")]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"{app}-7d4b9c8f6-{i:05x}", "namespace": f"ns-{(i // per) % NAMESPACES}",
        "labels": {"app": app, "pod-template-hash": "7d4b9c8f6"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-7d4b9c8f6",
                             "uid": f"{i // per:08x}-0000-4000-8000-000000000000", "controller": True,
                             "blockOwnerDeletion": True}]},
        "spec": {"nodeName": node, "serviceAccountName": "default", "restartPolicy": "Always",
                 "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler", "containers": [container],
                 "volumes": [volume], "tolerations": tolerations},
        "status": {"phase": "Running", "qosClass": "Burstable", "hostIP": f"192.168.{i % 500 // 250}.{i % 250 + 1}",
                   "podIP": ip, "podIPs": [{"ip": ip}], "startTime": STAMP, "conditions": ready,
                   "containerStatuses": [{"name": "app", "ready": True, "started": True, "restartCount": 0,
                                          "image": "registry.test/app:1.2.3",
                                          "imageID": "registry.test/app@sha256:" + f"{i:064x}",
                                          "containerID": "containerd://" + f"{i + 1:064x}",
                                          "state": {"running": {"startedAt": STAMP}}}]}}


def service_doc(s: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": f"svc-{s}", "namespace": f"ns-{s % NAMESPACES}", "labels": {"app": f"app-{s}"}},
        "spec": {"selector": {"app": f"app-{s}"}, "type": "ClusterIP",
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}


def slice_doc(s: int, per: int, pods: int) -> dict[str, Any]:
    ns = f"ns-{s % NAMESPACES}"
    endpoints = [{"addresses": [pod_ip(i)], "conditions": {"ready": True, "serving": True, "terminating": False},
                  "nodeName": f"node-{i % 500}", "zone": f"zone-{i % 3}",
                  "targetRef": {"kind": "Pod", "namespace": ns, "name": f"app-{s}-7d4b9c8f6-{i:05x}",
                                "uid": f"{i:08x}-0000-4000-8000-000000000000"}}
                 for i in range(s * per, min(pods, (s + 1) * per))]
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {
        "name": f"svc-{s}-x7k2p", "namespace": ns,
        "labels": {"kubernetes.io/service-name": f"svc-{s}",
                   "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
        "addressType": "IPv4", "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}


def cluster_docs(services: int, pods: int) -> Iterator[dict[str, Any]]:
    per = max(1, pods // max(1, services))
    yield from ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"ns-{n}"}} for n in range(NAMESPACES))
    yield from (service_doc(s) for s in range(services))
    yield from (slice_doc(s, per, pods) for s in range(services))
    yield from (pod_doc(i, per) for i in range(pods))


class ApiServerThread:
    """The test API server on its own event loop in a thread of this process, seeded with a cluster."""

    def __init__(self, services: int, pods: int) -> None:
        from netkit.testing.apiserver import TestApiServer
        from netkit.testing.apistore import Store

        class Quick(Store):  # objects are never changed in place here: no deep copies, no history
            def select(self, resource: Any, namespace: str, labels: str = "", fields: str = "") -> list[Any]:
                assert not labels and not fields
                return [o for (ns, _), o in sorted(self.objects[resource].items()) if not namespace or ns == namespace]

            def seed(self, doc: dict[str, Any]) -> None:
                resource, key = self._identify(doc)
                doc["metadata"].update(uid=f"{self.rv:08x}-0000-4000-8000-000000000000", creationTimestamp=STAMP,
                                       resourceVersion=str(self.rv + 1))
                self.rv += 1
                self.objects[resource][key] = self._admit(doc, None) if doc["kind"] == "Service" else doc

        store = Quick()
        for doc in cluster_docs(services, pods):
            store.seed(doc)
        store.compact()
        self.server = TestApiServer(store=store)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="apiserver", daemon=True)
        self.thread.start()
        self.run(self.server.start())

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def force_relist(self, docs: list[dict[str, Any]]) -> None:
        """Down, `docs` created meanwhile, history compacted, up: every watch resumes into 410 Gone."""
        await self.server.stop()
        for doc in docs:
            self.server.store.create(doc)
        self.server.compact()
        await self.server.start()

    def close(self) -> None:
        self.run(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def ask(sock: socket.socket, port: int, name: str, timeout: float = 1.0) -> int | None:
    """The rcode of an A query for `name`, or None when no answer came within `timeout`."""
    qid = os.urandom(2)
    sock.settimeout(timeout)
    sock.sendto(qid + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
                + b"".join(bytes([len(x)]) + x.encode() for x in name.split(".")) + b"\x00\x00\x01\x00\x01",
                ("127.0.0.1", port))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            reply = sock.recv(4096)
        except OSError:
            return None
        if reply[:2] == qid:
            return reply[3] & 0x0F
    return None


def peak_mib(pid: int) -> tuple[float, float]:
    """(VmHWM, VmRSS) in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return tuple(int(re.search(rf"{k}:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]
                 for k in ("VmHWM", "VmRSS"))  # type: ignore[return-value]


@dataclass(frozen=True)
class RelistResult:
    first_answer: float  # seconds from the start of the process
    first_peak: float  # MiB
    first_rss: float
    relist_peak: float
    relist_rss: float
    relist_seconds: float  # from the API server's return to the new objects answered
    failed: int  # answers for existing names other than NOERROR during the relist
    unanswered: int  # queries for existing names without an answer within 1 s during the relist
    asked: int


def await_answer(port: int, name: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"netkit dns exited with {proc.returncode}")
            if ask(sock, port, name, 0.5) == 0:
                return
            time.sleep(0.05)
    raise RuntimeError(f"no answer for {name} within {timeout:.0f}s")


def during_relist(port: int, names_: list[str], markers: list[str], timeout: float) -> tuple[int, int, int]:
    """Ask for `names_` (which exist throughout) until every marker answers: (failed, unanswered, asked)."""
    failed = unanswered = asked = 0
    deadline = time.monotonic() + timeout
    waiting = list(markers)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        while waiting:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the relist did not bring {waiting} within {timeout:.0f}s")
            for name in names_:
                rcode = ask(sock, port, name)
                asked += 1
                unanswered += rcode is None
                failed += rcode not in (None, 0)
            waiting = [m for m in waiting if ask(sock, port, m, 0.5) != 0]
            time.sleep(0.02)
    return failed, unanswered, asked


def relist_run(work: Path, args: argparse.Namespace) -> RelistResult:
    api = ApiServerThread(args.relist_services, args.pods)
    proc: subprocess.Popen[bytes] | None = None
    try:
        kubeconfig = api.server.write_kubeconfig(work / "kubeconfig")
        port = free_port()
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "netkit", "dns", "--kubeconfig", str(kubeconfig),
                                 "--pods", "verified", "--listen", f"127.0.0.1:{port}",
                                 "--upstream", f"127.0.0.1:{free_port()}", "--upstream-timeout", "0.5",
                                 "--metrics-listen", f"127.0.0.1:{free_port()}", "--health-listen", "",
                                 "--ready-listen", "", "--loop", args.loop], cwd=ROOT, stderr=subprocess.DEVNULL)
        last = args.relist_services - 1
        service = f"svc-{last}.ns-{last % NAMESPACES}.svc.{ZONE}"
        per = max(1, args.pods // max(1, args.relist_services))
        pod = f"{pod_ip(args.pods - 1).replace('.', '-')}.ns-{(args.pods - 1) // per % NAMESPACES}.pod.{ZONE}"
        await_answer(port, service, proc, 900)
        first_answer = time.monotonic() - started
        await_answer(port, pod, proc, 60)
        time.sleep(2)  # the view built after the first answer, the garbage collected
        first_peak, first_rss = peak_mib(proc.pid)
        marker_pod = pod_doc(args.pods + 7, 1)
        marker_pod["metadata"].update(name="relist-marker", namespace="ns-0")
        marker_svc = service_doc(args.relist_services)
        marker_svc["metadata"].update(name="relist-marker", namespace="ns-0")
        markers = [f"relist-marker.ns-0.svc.{ZONE}", f"{pod_ip(args.pods + 7).replace('.', '-')}.ns-0.pod.{ZONE}"]
        relist_started = time.monotonic()
        api.run(api.force_relist([marker_pod, marker_svc]))
        failed, unanswered, asked = during_relist(port, [service, pod], markers, 900)
        relist_seconds = time.monotonic() - relist_started
        time.sleep(2)
        relist_peak, relist_rss = peak_mib(proc.pid)
        return RelistResult(first_answer, first_peak, first_rss, relist_peak, relist_rss, relist_seconds,
                            failed, unanswered, asked)
    finally:
        if proc is not None:
            stop(proc)
        api.close()


def where_memory_goes(args: argparse.Namespace, top: int = 10) -> int:
    """`--where`: the cluster of `--relist` decoded in this process as `netkit dns` decodes it, into its
    store, then its view, with tracemalloc's largest allocation sites of each (no API server)."""
    import tracemalloc

    from netkit.dns.decode import decode_unlabelled
    from netkit.dns.store import ClusterStore
    from netkit.dns.view import Options, PodMode, build
    from netkit.model.types import ObjectRef
    from netkit.sources.reflector import EventType, Update

    docs, plural = list(cluster_docs(args.relist_services, args.pods)), {"EndpointSlice": "endpointslices"}
    for i, svc in enumerate(d for d in docs if d["kind"] == "Service"):  # as the API server allocates them
        svc["spec"]["clusterIP"] = f"10.96.{i // 250}.{i % 250 + 1}"
    tracemalloc.start()
    store = ClusterStore()
    for doc in docs:
        key = ObjectRef(doc["metadata"].get("namespace", ""), doc["metadata"]["name"])
        store.apply(Update(plural.get(doc["kind"], doc["kind"].lower() + "s"), key, EventType.ADDED,
                           tuple(decode_unlabelled(doc))))
    del docs, doc
    stored = tracemalloc.take_snapshot()
    view = build(store.objects(), Options(pods=PodMode.VERIFIED))
    built = tracemalloc.take_snapshot()
    sites = {"store": [(s.size, s.count, s.traceback[0]) for s in stored.statistics("lineno")],
             "view": [(s.size_diff, s.count_diff, s.traceback[0]) for s in built.compare_to(stored, "lineno")]}
    for what, found in sites.items():
        print(f"{what}: {sum(size for size, _, _ in found) / 2**20:.1f} MiB in all; the largest sites:")
        for size, count, frame in found[:top]:
            print(f"  {size / 2**20:6.1f} MiB {count:8,} blocks  {Path(frame.filename).name}:{frame.lineno}")
    assert view.services
    return 0


def relist_main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="netkit-bench-dns-") as tmp:
        r = relist_run(Path(tmp), args)
    target = f"≤ {RELIST_TARGET_MIB} MiB"
    print(f"first answer {r.first_answer:.1f} s after start; peak RSS after the first list {r.first_peak:.0f} MiB "
          f"(now {r.first_rss:.0f}), after a forced relist {r.relist_peak:.0f} MiB (now {r.relist_rss:.0f}; "
          f"relist answered in {r.relist_seconds:.1f} s); during the relist {r.failed} of {r.asked} answers for "
          f"existing names failed, {r.unanswered} unanswered within 1 s (target {target}: "
          f"{'met' if max(r.first_peak, r.relist_peak) <= RELIST_TARGET_MIB else 'NOT met'})")
    figures = [results.Figure("time to the first answer", r.first_answer, "s"),
               results.Figure("peak RSS after the first list", r.first_peak, "MiB", target=target),
               results.Figure("peak RSS after a forced relist (410 Gone)", r.relist_peak, "MiB", target=target),
               results.Figure("RSS serving, after the relist", r.relist_rss, "MiB"),
               results.Figure("answers for existing names other than NOERROR during the relist", r.failed, "",
                              target="0"),
               results.Figure("queries unanswered within 1 s during the relist", r.unanswered, "")]
    results.write(args.json, __file__, f"`netkit dns --kubeconfig … --pods verified` against the test API server "
                  f"with {args.relist_services:,} Services, {args.relist_services:,} EndpointSlices and "
                  f"{args.pods:,} Pods (about 2.5 kB of JSON each, as a Deployment's); one run, no baseline", figures)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--services", type=int, default=1000)
    p.add_argument("--memory-services", type=int, default=10000)
    p.add_argument("--server-core", type=int, default=0)
    p.add_argument("--client-core", type=int, default=1)
    p.add_argument("--loop", choices=["auto", "asyncio", "uvloop"], default="auto")
    p.add_argument("--rounds", type=int, default=3,
                   help="repeat both servers' loads this many times and report medians (a shared 2-core "
                        "machine swings ±15%% between single runs)")
    p.add_argument("--relist", action="store_true",
                   help="measure a large cluster's first list and relist from the test API server instead")
    p.add_argument("--relist-services", type=int, default=10000, help="Services and EndpointSlices (--relist)")
    p.add_argument("--pods", type=int, default=50000, help="Pods (--relist)")
    p.add_argument("--where", action="store_true",
                   help="show where the memory of --relist's cluster goes (tracemalloc, in this process)")
    args = results.parse_args(p)
    if args.where:
        return where_memory_goes(args)
    if args.relist:
        return relist_main(args)
    for tool in ("dnsperf", "taskset"):
        if shutil.which(tool) is None:
            sys.exit(f"bench/dns.py needs {tool} (Debian package {'dnsperf' if tool == 'dnsperf' else 'util-linux'})")
    if shutil.which("dnsmasq") is None and not Path("/usr/sbin/dnsmasq").exists():
        sys.exit("bench/dns.py needs dnsmasq (Debian package dnsmasq-base)")
    with tempfile.TemporaryDirectory(prefix="netkit-bench-dns-") as tmp:
        work = Path(tmp)
        rounds = [run_pair(work, args) for _ in range(max(1, args.rounds))]
        print(f"{'load':6} {'server':8} {'qps':>10} {'µs/query':>9}   (medians of {len(rounds)} rounds)")
        figures: list[results.Figure] = []
        for load in ("hits", "mix", "fwd"):
            # rounds where a server answered nothing at all (a failed start) are reported, not counted
            ok = [r for r in rounds if r["netkit"][load].qps > 0 and r["dnsmasq"][load].qps > 0]
            median: dict[str, tuple[float, float]] = {}
            for server in ("dnsmasq", "netkit"):
                qps = statistics.median(r[server][load].qps for r in ok or rounds)
                us = statistics.median(r[server][load].us_per_query for r in ok or rounds)
                median[server] = qps, us
                print(f"{load:6} {server:8} {qps:10.0f} {us:9.1f}")
            if not ok:
                print(f"{load:6} {'ratio':8} no round where both servers answered")
                continue
            # the ratio of each round (both servers measured back to back), then the median of those
            qps_ratio = statistics.median(r["netkit"][load].qps / r["dnsmasq"][load].qps for r in ok)
            cpu_ratio = statistics.median(r["netkit"][load].us_per_query / r["dnsmasq"][load].us_per_query
                                          for r in ok)
            each = ", ".join(f"{r['netkit'][load].qps / r['dnsmasq'][load].qps:.2f}" for r in ok)
            failed = "".join(f"; round {i + 1}: {server} answered nothing" for i, r in enumerate(rounds)
                             for server in ("dnsmasq", "netkit") if not r[server][load].qps)
            print(f"{load:6} {'ratio':8} {qps_ratio:9.2f}× {cpu_ratio:8.2f}×"
                  f"   (target qps ≥ {TARGETS[load]}× dnsmasq: "
                  f"{'met' if qps_ratio >= TARGETS[load] else 'NOT met'}; rounds: {each}{failed})")
            figures += [results.Figure(f"{LOADS[load]}: queries per second", median["netkit"][0], "qps",
                                       median["dnsmasq"][0], qps_ratio, f"≥ {TARGETS[load]}×"),
                        results.Figure(f"{LOADS[load]}: CPU per query", median["netkit"][1], "µs",
                                       median["dnsmasq"][1], cpu_ratio)]
        quiet, held, worst = tcp_with_idle(work, args)
        verdict = "met" if worst < TCP_TARGET_MS else "NOT met"
        print(f"tcp: a new TCP query with {TCP_IDLE} idle connections held: median {held:.1f} ms, "
              f"worst {worst:.1f} ms (none held: {quiet:.1f} ms; target < {TCP_TARGET_MS} ms: {verdict})")
        mb = memory_at(work, args.memory_services, args)
        print(f"memory: netkit dns at {args.memory_services} services: {mb:.0f} MB RSS "
              f"(target ≤ {MEMORY_TARGET_MB} MB: {'met' if mb <= MEMORY_TARGET_MB else 'NOT met'})")
        figures += [results.Figure.measured(f"a new TCP query with {TCP_IDLE} idle connections held, median", held,
                                            "ms", quiet, f"< {TCP_TARGET_MS} ms"),
                    results.Figure.measured(f"RSS at {args.memory_services:,} services", mb, "MB",
                                            target=f"≤ {MEMORY_TARGET_MB} MB")]
    results.write(args.json, __file__, f"`netkit dns` vs dnsmasq serving the same {args.services:,} names, dnsperf "
                  f"on the other core; medians of {len(rounds)} rounds, the ratios the median of each round's; the "
                  "TCP query's baseline is the same query with no connection held", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
