"""Creating and removing a cluster's namespaces (the IO half of `wiring`), with the lab's tools.

Everything is made inside namespaces created here (`netkit.lab.build`: `ip netns add`, one
`ip -n NS -batch -` per namespace and phase, in parallel). A pod's resolv.conf goes to
/etc/netns/<netns>/resolv.conf, which `ip netns exec` bind-mounts over /etc/resolv.conf for whatever
runs in the pod (`netkit lab cluster exec POD -- getent hosts web`). Removal deletes namespaces and
those directories and tolerates anything already gone.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from netkit.lab import pause
from netkit.lab.build import create_namespaces, existing, ip_batch, list_lab_namespaces, remove, run_batches
from netkit.lab.cluster import state, wiring
from netkit.lab.cluster.plan import CLUSTER_DOMAIN, Cluster, Kind, Pod, netns_pattern
from netkit.lab.nsenter import write_sysctls

ETC_NETNS = Path("/etc/netns")


def build(cluster: Cluster) -> None:
    """Every namespace of `cluster`, wired (nodes, the switch, the pods it has)."""
    create_namespaces(cluster.namespaces)
    for ns, values in wiring.sysctls(cluster).items():
        write_sysctls(ns, values)
    pause.point("cluster-namespaces")
    run_batches(wiring.link_batches(cluster), "links")
    run_batches(wiring.address_batches(cluster), "addresses")
    run_batches(wiring.route_batches(cluster), "routes")
    write_resolv_confs(cluster, cluster.pods)


def add_pods(cluster: Cluster, pods: Iterable[Pod]) -> None:
    """Namespaces for `pods` (already in `cluster`), plugged into their nodes' bridges."""
    pods = tuple(pods)
    if not pods:
        return
    create_namespaces(p.netns for p in pods)
    for ns, values in wiring.sysctls(cluster, pods).items():
        write_sysctls(ns, values)
    node_side: wiring.Batches = {}
    for pod in pods:
        node_side.setdefault(cluster.node(pod.node).netns, []).extend(wiring.pod_node_side(pod))
    run_batches(node_side, "pod links")
    run_batches({p.netns: ["link set lo up", *wiring.pod_addresses(cluster, p)] for p in pods}, "pod addresses")
    run_batches({p.netns: wiring.pod_routes(cluster, p) for p in pods}, "pod routes")
    write_resolv_confs(cluster, pods)


def remove_pods(cluster: Cluster, pods: Iterable[Pod]) -> None:
    """Unplug `pods` from their nodes, then delete their namespaces. The node-side veth is deleted
    first and synchronously: a deleted namespace's interfaces go away later, on the kernel's own
    time, and the pod's slot (and veth name) may be reused at once."""
    pods = tuple(pods)
    unplug: dict[str, list[str]] = {}
    for pod in pods:
        unplug.setdefault(cluster.node(pod.node).netns, []).append(f"link del {pod.veth}")
    for ns, lines in unplug.items():
        proc = ip_batch(lines, ns, force=True)
        assert proc.stderr is not None
        proc.stderr.read()
        proc.wait()
    remove_namespaces(p.netns for p in pods)


def write_resolv_confs(cluster: Cluster, pods: Iterable[Pod]) -> None:
    """kube-dns's first address (its primary family), as kubelet writes it."""
    for pod in pods:
        if pod.kind == Kind.DNS:
            continue  # dnsPolicy: Default, as CoreDNS's own pods
        d = ETC_NETNS / pod.netns
        d.mkdir(parents=True, exist_ok=True)
        (d / "resolv.conf").write_text(wiring.resolv_conf(pod, str(cluster.dns_ips[0]), CLUSTER_DOMAIN))


def remove_namespaces(names: Iterable[str]) -> None:
    names = list(names)
    try:
        remove(names)
    finally:
        for name in names:
            shutil.rmtree(ETC_NETNS / name, ignore_errors=True)


def leftovers(cluster_id: str = "", prefix: str = state.NETNS_PREFIX) -> list[str]:
    """Namespaces (and /etc/netns directories) of a cluster, or of every cluster, recorded in the
    state directory whose namespaces' names start with `prefix`: found by name, so also when the
    record is gone, and never another state directory's (their names carry another tag)."""
    ours = netns_pattern(prefix, cluster_id)
    names = set(list_lab_namespaces(prefix))
    if ETC_NETNS.is_dir():
        names |= {p.name for p in ETC_NETNS.iterdir()}
    return sorted(n for n in names if ours.match(n))


__all__ = ["add_pods", "build", "existing", "leftovers", "remove_namespaces", "remove_pods", "write_resolv_confs"]
