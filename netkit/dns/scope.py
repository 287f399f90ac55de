"""What the `kubernetes` plugin exposes (pure): CoreDNS's `namespaces` (only these namespaces),
`labels` (only Services and EndpointSlices whose labels match the selector) and `noendpoints` (no
endpoint records: headless Services and endpoint names are NXDOMAIN). The view is built from what
this leaves, so every answer follows from it."""

from __future__ import annotations

from dataclasses import replace

from netkit.cli.filters import Requirement
from netkit.model import Objects


def scoped(objects: Objects, namespaces: frozenset[str] = frozenset(), selector: tuple[Requirement, ...] = (),
           endpoints: bool = True) -> Objects:
    if not namespaces and not selector and endpoints:
        return objects

    def shown(namespace: str, labels: tuple[tuple[str, str], ...] | None) -> bool:
        if namespaces and namespace not in namespaces:
            return False
        return labels is None or all(r.matches(dict(labels)) for r in selector)

    return replace(
        objects,
        services=tuple(s for s in objects.services if shown(s.ref.namespace, s.labels)),
        slices=tuple(s for s in objects.slices if shown(s.ref.namespace, s.labels)) if endpoints else (),
        pods=tuple(p for p in objects.pods if shown(p.ref.namespace, None)),
        namespaces=tuple(n for n in objects.namespaces if not namespaces or n.name in namespaces))
