"""The cluster DNS tests answer from: the examples plus the corner cases of the DNS spec."""

from __future__ import annotations

from netkit.dns.view import Options, PodMode, View, build
from netkit.model.types import Objects
from netkit.sources.manifests import decode_text, load
from tests.conftest import EXAMPLES

EXTRA = """
apiVersion: v1
kind: Service
metadata: {name: nr, namespace: default}
spec: {clusterIP: None, ports: [{name: peer, port: 7000}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: nr-1, namespace: default, labels: {kubernetes.io/service-name: nr}}
addressType: IPv4
ports: [{name: peer, protocol: TCP, port: 7000}]
endpoints:
- {addresses: [10.244.3.1], hostname: nr-0, conditions: {ready: false}}
---
apiVersion: v1
kind: Service
metadata: {name: pub, namespace: default}
spec: {clusterIP: None, publishNotReadyAddresses: true, ports: [{name: peer, port: 7000}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: pub-1, namespace: default, labels: {kubernetes.io/service-name: pub}}
addressType: IPv4
ports: [{name: peer, protocol: TCP, port: 7000}]
endpoints:
- {addresses: [10.244.3.2], conditions: {ready: false}}
---
apiVersion: v1
kind: Service
metadata: {name: hl6, namespace: default}
spec: {clusterIP: None, ipFamilies: [IPv6], ports: [{name: dns, port: 53, protocol: UDP}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: hl6-1, namespace: default, labels: {kubernetes.io/service-name: hl6}}
addressType: IPv6
ports: [{name: dns, protocol: UDP, port: 5353}]
endpoints:
- {addresses: ["fd00:244::5"]}
---
apiVersion: v1
kind: Service
metadata: {name: alias, namespace: default}
spec: {type: ExternalName, externalName: web.default.svc.cluster.local}
---
apiVersion: v1
kind: Service
metadata: {name: loop1, namespace: default}
spec: {type: ExternalName, externalName: loop2.default.svc.cluster.local}
---
apiVersion: v1
kind: Service
metadata: {name: loop2, namespace: default}
spec: {type: ExternalName, externalName: loop1.default.svc.cluster.local}
---
apiVersion: v1
kind: Service
metadata: {name: noname, namespace: other}
spec: {clusterIP: 10.96.0.20, ports: [{port: 80}]}
---
apiVersion: v1
kind: Namespace
metadata: {name: empty}
---
apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: default}
status: {podIPs: [{ip: 10.244.9.9}]}
"""


def objects() -> Objects:
    base = load([str(EXAMPLES)])
    extra, problems = decode_text(EXTRA, "dns_cluster")
    assert not base.problems and not problems, (base.problems, problems)
    return Objects.of(list(base.objects.services + base.objects.slices + base.objects.pods) + extra)


def view(pods: PodMode = PodMode.INSECURE, **kw: object) -> View:
    return build(objects(), Options(pods=pods, **kw), serial=1)  # type: ignore[arg-type]


def headless(name: str, count: int, ns: str = "default") -> str:
    """A headless service with `count` ready endpoints 10.250.x.y, hostnames <name>-<i>."""
    eps = "\n".join(f"- {{addresses: [10.250.{i // 250}.{i % 250 + 1}], hostname: {name}-{i}}}"
                    for i in range(count))
    return f"""
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec: {{clusterIP: None, ports: [{{name: peer, port: 7000}}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {name}-1, namespace: {ns}, labels: {{kubernetes.io/service-name: {name}}}}}
addressType: IPv4
ports: [{{name: peer, protocol: TCP, port: 7000}}]
endpoints:
{eps}
"""
