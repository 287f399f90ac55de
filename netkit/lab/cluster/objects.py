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
    DNS_SERVICE_IP,
    PORTS,
    Cluster,
    Kind,
    Node,
    Pod,
)

JSON = dict[str, Any]
NETNS_ANNOTATION = "lab.netkit.io/netns"
KIND_ANNOTATION = "lab.netkit.io/kind"
DOMAIN = CLUSTER_DOMAIN


def node_object(node: Node, cordoned: bool = False) -> JSON:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node.name, "labels": {"kubernetes.io/hostname": node.name,
                                                    "kubernetes.io/os": "linux"}},
        "spec": {"podCIDR": str(node.pod_cidr), "podCIDRs": [str(node.pod_cidr)],
                 **({"unschedulable": True} if cordoned else {})},
        "status": {"addresses": [{"type": "InternalIP", "address": str(node.ip)},
                                 {"type": "Hostname", "address": node.name}],
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def container_ports(pod: Pod) -> list[JSON]:
    if pod.kind == Kind.DNS:
        return [{"name": "dns", "containerPort": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"}]
    named = [{"name": "http", "containerPort": PORTS[0], "protocol": "TCP"}]
    return named + [{"containerPort": p, "protocol": proto} for p in PORTS for proto in ("TCP", "UDP")
                    if (p, proto) != (PORTS[0], "TCP")]


def pod_object(cluster: Cluster, pod: Pod, *, ready: bool = False, terminating: str = "") -> JSON:
    node = cluster.node(pod.node)
    image = "netkit-lab/dns" if pod.kind == Kind.DNS else "netkit-lab/echo"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "labels": pod.labels,
                     "annotations": {NETNS_ANNOTATION: pod.netns, KIND_ANNOTATION: pod.kind},
                     **({"deletionTimestamp": terminating} if terminating else {})},
        "spec": {"nodeName": pod.node,
                 "containers": [{"name": pod.deploy, "image": image, "ports": container_ports(pod)}]},
        "status": {"phase": "Running", "hostIP": str(node.ip), "podIP": str(pod.ip),
                   "podIPs": [{"ip": str(pod.ip)}],
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def dns_service() -> JSON:
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": DNS_NAMESPACE,
                     "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
        "spec": {"clusterIP": str(DNS_SERVICE_IP), "clusterIPs": [str(DNS_SERVICE_IP)], "type": "ClusterIP",
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
