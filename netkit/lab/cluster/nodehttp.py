"""Small HTTP GETs from inside a namespace (a node's metrics and health, a health-check node port),
over a socket created there, so nothing in the machine's own namespace is involved."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from netkit.netns import socket_in

SYNC_METRIC = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: str


def get(netns: str, host: str, port: int, path: str = "/", timeout: float = 1.0) -> Response:
    """GET http://host:port/path from inside `netns`; OSError when nothing answers."""
    sock = socket_in(netns, socket.AF_INET, socket.SOCK_STREAM)
    with sock:
        sock.settimeout(timeout)
        sock.connect((host, port))
        sock.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}:{port}\r\n\r\n".encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise OSError(f"not an HTTP answer from {host}:{port}")
    return Response(int(status_line[1]), body.decode(errors="replace"))


def samples(text: str, name: str) -> list[float]:
    values = []
    for line in text.splitlines():
        if line.startswith((name + " ", name + "{")):
            try:
                values.append(float(line.rsplit(None, 1)[1]))
            except (IndexError, ValueError):
                continue
    return values


def node_summary(netns: str, metrics_port: int = 10249) -> dict[str, float | None]:
    """What a node's daemon last synced, from its metrics: when, how many iptables rules (iptables
    mode), how many Service and endpoint changes wait for the next sync. Empty if nothing answers."""
    try:
        text = get(netns, "127.0.0.1", metrics_port, "/metrics").body
    except OSError:
        return {}
    rules = samples(text, "kubeproxy_sync_proxy_rules_iptables_total")
    pending = samples(text, "kubeproxy_sync_proxy_rules_service_changes_pending") + \
        samples(text, "kubeproxy_sync_proxy_rules_endpoint_changes_pending")
    return {"last_sync": metric(text, SYNC_METRIC), "rules": sum(rules) if rules else None,
            "pending": sum(pending) if pending else None}


def metric(text: str, name: str) -> float | None:
    """The smallest value of Prometheus samples `name` in `text`, labelled or not (kube-proxy's
    sync timestamp has one per IP family: the smallest is when every family last synced)."""
    values = samples(text, name)
    return min(values) if values else None


def last_sync(netns: str, metrics_port: int = 10249) -> float | None:
    """When the node's daemon last synced (epoch seconds; 0 before its first sync), or None if its
    metrics do not answer."""
    try:
        return metric(get(netns, "127.0.0.1", metrics_port, "/metrics").body, SYNC_METRIC)
    except OSError:
        return None
