"""The pure conntrack decision (netkit.model.conntrack) as tables: which entries are stale for a set of
checked UDP frontends (kube-proxy's pkg/proxy/conntrack cleanup_test cases), and which ports a sync
must check."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from ipaddress import ip_address
from typing import Any

import pytest

from netkit.model import NodeState, build
from netkit.model.conntrack import Flow, Frontends, frontends, ports_to_check, serving, stale, to_check
from netkit.model.state import StateBuilder
from netkit.runtime.conntrack import CleanupWorker, Reconciled
from tests.factories import endpoint, node, objects, service, slice_

CLUSTER_IP, EXTERNAL_IP, LB_IP = "172.30.1.1", "192.168.99.100", "1.2.3.4"
SERVING, NOT_SERVING, DELETED, TERMINATING = "10.240.0.4", "10.240.1.5", "10.240.2.6", "10.240.3.7"
SERVICE_PORT, NODE_PORT, OTHER_PORT, EP_PORT, OLD_EP_PORT = 8000, 32000, 3000, 9090, 8080


def docs(eps: list[dict[str, Any]], proto: str = "UDP", node_port: bool = True) -> list[dict[str, Any]]:
    ports = [{"name": "p", "port": SERVICE_PORT, "targetPort": EP_PORT, "protocol": proto,
              **({"nodePort": NODE_PORT} if node_port else {})}]
    svc = service("cleanup", ip=CLUSTER_IP, ports=ports, type="LoadBalancer" if node_port else "ClusterIP",
                  externalIPs=[EXTERNAL_IP],
                  **({"status": {"loadBalancer": {"ingress": [{"ip": LB_IP}]}}} if node_port else {}))
    out = [node(), svc]
    if eps:
        out.append(slice_("cleanup", endpoints=eps, ports=[{"name": "p", "port": EP_PORT, "protocol": proto}]))
    return out


def state(eps: list[dict[str, Any]], proto: str = "UDP", **kw: Any) -> NodeState:
    return build(objects(*docs(eps, proto, **kw)), "node-a", ())


KUBE_PROXY_ENDPOINTS = [endpoint(SERVING, serving=True, ready=True),
                        endpoint(NOT_SERVING, serving=False, ready=False)]


def flow(dst: str, dport: int, reply: str, rport: int = EP_PORT, sport: int = 40000) -> Flow:
    return Flow(ip_address("203.0.113.5"), sport, ip_address(dst), dport, ip_address(reply), rport)


def test_stale_entries_like_kube_proxy() -> None:
    """kube-proxy's TestCleanStaleEntries: to a service IP:port or the nodePort, an entry whose reply
    does not come from a serving endpoint IP:port goes; other ports, TCP, serving endpoints stay."""
    checked = frontends(state(KUBE_PROXY_ENDPOINTS).ports)
    expected_gone, kept = set(), set()
    for dst in (CLUSTER_IP, LB_IP, EXTERNAL_IP):
        expected_gone.add(flow(dst, SERVICE_PORT, SERVING, OLD_EP_PORT))  # the endpoint moved port
        expected_gone.add(flow(dst, SERVICE_PORT, dst, SERVICE_PORT))  # never DNATed (no rules yet)
        kept.add(flow(dst, OTHER_PORT, dst, OTHER_PORT))
        for ep in (SERVING, NOT_SERVING, DELETED):
            (kept if ep == SERVING else expected_gone).add(flow(dst, SERVICE_PORT, ep))
            kept.add(flow(dst, OTHER_PORT, ep))
    for ep in (SERVING, NOT_SERVING, DELETED):
        (kept if ep == SERVING else expected_gone).add(flow("192.0.2.10", NODE_PORT, ep))
    assert set(stale([*expected_gone, *kept], checked)) == expected_gone


def test_a_service_without_serving_endpoints_loses_its_flows() -> None:
    """kube-proxy since kubernetes#139629 (its TestServiceWithoutEndpoints kept them before): the next
    datagram is rejected at once instead of reaching a pod that is gone or does not serve."""
    checked = frontends(state([endpoint(NOT_SERVING, serving=False, ready=False)]).ports)
    flows = [flow(CLUSTER_IP, SERVICE_PORT, DELETED), flow(CLUSTER_IP, SERVICE_PORT, NOT_SERVING)]
    assert set(stale(flows, checked)) == set(flows)
    assert set(stale(flows, frontends(state([]).ports))) == set(flows)
    assert stale([flow(CLUSTER_IP, OTHER_PORT, DELETED)], checked) == ()


def test_terminating_but_serving_endpoints_keep_their_flows() -> None:
    eps = [endpoint(SERVING), endpoint(TERMINATING, ready=False, serving=True, terminating=True)]
    s = state(eps)
    (port,) = s.ports
    assert {ip for ip, _ in serving(port)} == {ip_address(SERVING), ip_address(TERMINATING)}
    # new connections avoid the terminating endpoint while a ready one exists ...
    assert {e.ip for e in port.cluster_endpoints} == {ip_address(SERVING)}
    # ... but its flows are not cut while it serves
    assert stale([flow(CLUSTER_IP, SERVICE_PORT, TERMINATING)], frontends(s.ports)) == ()
    stopped = state([endpoint(SERVING), endpoint(TERMINATING, ready=False, serving=False, terminating=True)])
    assert stale([flow(CLUSTER_IP, SERVICE_PORT, TERMINATING)], frontends(stopped.ports)) != ()


def test_tcp_ports_are_never_checked() -> None:
    assert not frontends(state(KUBE_PROXY_ENDPOINTS, "TCP").ports)


def test_a_node_port_is_checked_per_ip_family() -> None:
    checked = frontends(state([endpoint(SERVING)]).ports)
    v6 = Flow(ip_address("2001:db8::5"), 40000, ip_address("2001:db8::10"), NODE_PORT,
              ip_address("2001:db8::10"), NODE_PORT)
    assert stale([v6], checked) == ()
    assert checked.versions == frozenset({4})


def test_flow_reads_like_a_log_line() -> None:
    assert str(flow(CLUSTER_IP, 53, SERVING, 5353)) == "203.0.113.5:40000 → 172.30.1.1:53 (reply from 10.240.0.4:5353)"


def names(ports: tuple[Any, ...]) -> set[str]:
    return {str(p.name) for p in ports}


ONE, TWO = [endpoint(SERVING)], [endpoint(SERVING), endpoint(DELETED)]
CASES = [
    ("first sync after a start: every UDP port", None, state(ONE), 1),
    ("no change", state(ONE), state(ONE), 0),
    ("endpoint added", state(ONE), state(TWO), 1),
    ("endpoint removed", state(TWO), state(ONE), 1),
    ("0 → 1 endpoint", state([]), state(ONE), 1),
    ("endpoint starts terminating, still serving: its flows stay, nothing to check",
     state(TWO), state([endpoint(SERVING), endpoint(DELETED, ready=False, serving=True, terminating=True)]), 0),
    ("endpoint stops serving", state(TWO),
     state([endpoint(SERVING), endpoint(DELETED, ready=False, serving=False)]), 1),
    ("TCP endpoint removed: nothing", state(TWO, "TCP"), state(ONE, "TCP"), 0),
    ("first sync, TCP only: nothing", None, state(ONE, "TCP"), 0),
]


@pytest.mark.parametrize("old, new, count", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_ports_to_check(old: NodeState | None, new: NodeState, count: int) -> None:
    assert len(ports_to_check(old, new)) == count


def test_unchanged_services_are_skipped_by_identity() -> None:
    builder, objs = StateBuilder(), objects(*docs(ONE))
    first = builder.build(objs, "node-a", ())
    again = builder.build(objs, "node-a", ())
    assert first.ports[0] is again.ports[0]
    assert ports_to_check(first, again) == ()


class SlowCleaner:
    """Stands in for the netlink edge: the first pass blocks until released, the second fails."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls: list[Frontends] = []

    def reconcile(self, checked: Frontends) -> Reconciled:
        self.calls.append(checked)
        if len(self.calls) == 1:
            self.release.wait(5)
        if len(self.calls) == 2:
            raise OSError("netlink went away")
        return Reconciled(10, len(checked), 0.0)


def wait_for(check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_the_worker_never_blocks_the_submitter_and_merges_and_retries() -> None:
    cleaner = SlowCleaner()
    done: list[Reconciled] = []
    worker = CleanupWorker(cleaner, done.append, retry=0.01)  # type: ignore[arg-type]
    a = frontends(state(ONE).ports)
    b = frontends(build(objects(node(), service("other", ip="172.30.9.9", ports=[
        {"name": "p", "port": 53, "protocol": "UDP"}]), slice_("other", endpoints=[endpoint(SERVING)], ports=[
            {"name": "p", "port": 53, "protocol": "UDP"}])), "node-a", ()).ports)
    worker.start()
    try:
        worker.submit(a)
        wait_for(lambda: len(cleaner.calls) == 1)
        # While the first pass is held (until `release`): a submit that waited for it would never return.
        def submit_both() -> None:
            worker.submit(b)
            worker.submit(a)

        submitter = threading.Thread(target=submit_both, daemon=True)
        submitter.start()
        submitter.join(60)
        assert not submitter.is_alive(), "submit waited for the running pass"
        assert not worker.idle()
        cleaner.release.set()
        wait_for(lambda: len(done) == 2 and worker.idle())
    finally:
        worker.stop()
    assert len(cleaner.calls) == 3, "first pass, a failed pass, and its retry"
    assert cleaner.calls[1] == cleaner.calls[2]
    assert set(cleaner.calls[2].by_address) == set(a.by_address) | set(b.by_address)
    assert [d.deleted for d in done] == [len(a), len(a) + len(b)]


# --- what a sync asks to check: the cases kube-proxy's reconciler handles, as flows before → after ---

NODE_IP, NEW_CLUSTER_IP, OTHER_IP, OTHER_EP = "192.0.2.10", "172.30.1.2", "172.30.9.9", "10.240.9.9"


def svc_docs(*, ip: str = CLUSTER_IP, eps: tuple[str, ...] = (SERVING, DELETED), node_port: int = NODE_PORT,
             external: tuple[str, ...] = (EXTERNAL_IP,), lb: tuple[str, ...] = (LB_IP,),
             ports: tuple[int, ...] = (SERVICE_PORT, OTHER_PORT), proto: str = "UDP",
             **spec: Any) -> list[dict[str, Any]]:
    """The "cleanup" Service (a LoadBalancer with an externalIP, two ports) and its endpoints."""
    svc_ports = [{"name": f"p{p}", "port": p, "targetPort": EP_PORT, "protocol": proto,
                  **({"nodePort": node_port + i} if node_port else {})} for i, p in enumerate(ports)]
    svc = service("cleanup", ip=ip, ports=svc_ports, type="LoadBalancer" if node_port else "ClusterIP",
                  externalIPs=list(external), status={"loadBalancer": {"ingress": [{"ip": x} for x in lb]}}, **spec)
    ep_ports = [{"name": f"p{p}", "port": EP_PORT, "protocol": proto} for p in ports]
    return [svc, slice_("cleanup", endpoints=[endpoint(e) for e in eps], ports=ep_ports)]


OTHER = [service("other", ip=OTHER_IP, ports=[{"name": "dns", "port": 53, "targetPort": EP_PORT, "protocol": "UDP"}]),
         slice_("other", endpoints=[endpoint(OTHER_EP)], ports=[{"name": "dns", "port": EP_PORT, "protocol": "UDP"}])]

# the flows clients opened before the change (each to a serving endpoint then), by name
FLOWS = {
    "cluster": flow(CLUSTER_IP, SERVICE_PORT, SERVING),
    "cluster, 2nd port": flow(CLUSTER_IP, OTHER_PORT, SERVING, sport=40001),
    "cluster, 2nd endpoint": flow(CLUSTER_IP, SERVICE_PORT, DELETED, sport=40002),
    "new cluster IP": flow(NEW_CLUSTER_IP, SERVICE_PORT, SERVING, sport=40003),
    "external IP": flow(EXTERNAL_IP, SERVICE_PORT, SERVING, sport=40004),
    "LB IP": flow(LB_IP, SERVICE_PORT, SERVING, sport=40005),
    "node port": flow(NODE_IP, NODE_PORT, SERVING, sport=40006),
    "other service": flow(OTHER_IP, 53, OTHER_EP, sport=40007),
}
ALL_CLEANUP = {k for k in FLOWS if k not in ("other service", "new cluster IP")}

# (case, objects before (None: the first sync after a start), objects after, the flows that are stale)
SYNC_CASES: list[tuple[str, list[dict[str, Any]] | None, list[dict[str, Any]], set[str]]] = [
    ("nothing changed", svc_docs(), svc_docs(), set()),
    ("endpoint removed", svc_docs(), svc_docs(eps=(SERVING,)), {"cluster, 2nd endpoint"}),
    ("scale to zero (kubernetes#139629)", svc_docs(), svc_docs(eps=()), ALL_CLEANUP),
    ("Service deleted (kubernetes#141371)", svc_docs(), [], ALL_CLEANUP),
    ("a port removed", svc_docs(), svc_docs(ports=(SERVICE_PORT,)), {"cluster, 2nd port"}),
    ("clusterIP changed", svc_docs(), svc_docs(ip=NEW_CLUSTER_IP),
     {"cluster", "cluster, 2nd port", "cluster, 2nd endpoint"}),
    ("nodePort changed", svc_docs(), svc_docs(node_port=NODE_PORT + 100), {"node port"}),
    ("externalIP removed", svc_docs(), svc_docs(external=()), {"external IP"}),
    ("load-balancer IP removed", svc_docs(), svc_docs(lb=()), {"LB IP"}),
    ("only the traffic policy changed: no frontend went", svc_docs(),
     svc_docs(internalTrafficPolicy="Local"), set()),
    ("restart: an endpoint was removed meanwhile", None, svc_docs(eps=(SERVING,)), {"cluster, 2nd endpoint"}),
    ("TCP Service deleted: UDP flows are not its", svc_docs(proto="TCP"), [], set()),
]


@pytest.mark.parametrize("incremental", [True, False], ids=["changes", "full-walk"])
@pytest.mark.parametrize("before, after, gone", [c[1:] for c in SYNC_CASES], ids=[c[0] for c in SYNC_CASES])
def test_to_check_after_a_sync(before: list[dict[str, Any]] | None, after: list[dict[str, Any]],
                               gone: set[str], incremental: bool) -> None:
    builder = StateBuilder()
    old = builder.build(objects(node(), *OTHER, *before), "node-a", ()) if before is not None else None
    new = builder.build(objects(node(), *OTHER, *after), "node-a", ())
    if not incremental:
        new = replace(new, changes=None)
    assert new.changes is not None or not incremental or old is None
    assert stale_names(to_check(old, new)) == gone
    # a full sync checks every port of the new state (kube-proxy's every sync), and still the frontends that went
    assert stale_names(to_check(old, new, every_port=True)) == gone | stale_names(frontends(new.ports))


def stale_names(checked: Frontends) -> set[str]:
    return {k for k, f in FLOWS.items() if f in stale(FLOWS.values(), checked)}
