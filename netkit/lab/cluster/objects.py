"""The API objects the lab itself owns: its Nodes, its Pods, the kube-dns Service. Pure.

A lab pod carries two annotations the lab's kubelet part reads: `lab.netkit.io/netns` (the network
namespace it lives in) and `lab.netkit.io/kind` (`echo`: the lab's answering servers; `dns`:
`netkit dns`).
"""

from __future__ import annotations

from typing import Any

from netkit.lab.cluster.plan import (
    CLUSTER_DOMAIN,
    DNS_NAMESPACE,
    NETEXEC_HTTP_PORT,
    NETEXEC_UDP_PORT,
    PORTS,
    Cluster,
    Kind,
    Node,
    Pod,
)

JSON = dict[str, Any]
NETNS_ANNOTATION = "lab.netkit.io/netns"
KIND_ANNOTATION = "lab.netkit.io/kind"
NEVER_READY_ANNOTATION = "lab.netkit.io/never-ready"  # "true": its readiness probe never passes
DOMAIN = CLUSTER_DOMAIN


def node_object(cluster: Cluster, node: Node, cordoned: bool = False) -> JSON:
    """Its pod CIDRs and InternalIPs of the cluster's families, primary first (as kubelet reports them)."""
    cidrs = [str(c) for c in cluster.pod_cidrs(node)]
    internal = [{"type": "InternalIP", "address": str(ip)} for ip in cluster.node_ips(node)]
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node.name, "labels": {"kubernetes.io/hostname": node.name,
                                                    "kubernetes.io/os": "linux"}},
        "spec": {"podCIDR": cidrs[0], "podCIDRs": cidrs, **({"unschedulable": True} if cordoned else {})},
        "status": {"addresses": [*internal, {"type": "Hostname", "address": node.name}],
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def container_ports(pod: Pod) -> list[JSON]:
    if pod.kind == Kind.DNS:
        return [{"name": "dns", "containerPort": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"}]
    named = [{"name": "http", "containerPort": PORTS[0], "protocol": "TCP"}]
    netexec_ports = [{"containerPort": NETEXEC_HTTP_PORT, "protocol": "TCP"},
                     {"containerPort": NETEXEC_UDP_PORT, "protocol": "UDP"}]
    return named + [{"containerPort": p, "protocol": proto} for p in PORTS for proto in ("TCP", "UDP")
                    if (p, proto) != (PORTS[0], "TCP")] + netexec_ports


def pod_object(cluster: Cluster, pod: Pod, *, ready: bool = False, terminating: str = "") -> JSON:
    node = cluster.node(pod.node)
    ips = [str(ip) for ip in cluster.pod_ips(pod)]
    image = "netkit-lab/dns" if pod.kind == Kind.DNS else "netkit-lab/echo"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "labels": pod.labels,
                     "annotations": {NETNS_ANNOTATION: pod.netns, KIND_ANNOTATION: pod.kind,
                                     **({NEVER_READY_ANNOTATION: "true"} if pod.unready else {})},
                     **({"deletionTimestamp": terminating} if terminating else {})},
        "spec": {"nodeName": pod.node,
                 **({"hostname": pod.hostname} if pod.hostname else {}),
                 **({"subdomain": pod.subdomain} if pod.subdomain else {}),
                 "containers": [{"name": pod.deploy, "image": image, "ports": container_ports(pod)}]},
        "status": {"phase": "Running", "hostIP": str(cluster.node_ips(node)[0]), "podIP": ips[0],
                   "podIPs": [{"ip": ip} for ip in ips],
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def dns_service(cluster: Cluster) -> JSON:
    """kube-dns at the tenth address of every service range: PreferDualStack, as a dual-stack
    cluster's installer writes it (SingleStack on a single-stack cluster, where that is what it gets)."""
    ips = [str(ip) for ip in cluster.dns_ips]
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": DNS_NAMESPACE,
                     "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
        "spec": {"clusterIP": ips[0], "clusterIPs": ips, "type": "ClusterIP", "ipFamilies": list(cluster.families),
                 "ipFamilyPolicy": "PreferDualStack" if len(ips) > 1 else "SingleStack",
                 "selector": {"k8s-app": "kube-dns"},
                 "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                           {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}]},
    }


def kubeconfig(server: str, name: str = "netkit-lab") -> JSON:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": name, "user": {}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
    }
