"""The objects cluster DNS answers from: what the API's reflectors deliver, one reference per object.

Theory of operation. The reflectors (netkit.sources.reflector, fed by `KubeSource`) already keep each
resource's objects, keyed by namespace/name, for their own diffing; this store keeps the same tuples
(one dict entry per API object, the reflector's key and tuple shared) rather than the general store's
per-object holders, pending changes and sorted indexes (netkit.sources.store): cluster DNS rebuilds
its whole view on a change, so it needs to know *that* something changed, never *what*.

A relist does not pass through an empty store: the reflector lists every page into a new dict while
this store still holds the old objects, and only when the list is complete does it deliver what
vanished, appeared or changed (an object equal to the one before is the one before). So the old
objects answer until the new list is complete — as client-go's `Replace` into CoreDNS's indexer —
and no name is NXDOMAIN for the length of a relist.

`objects()` is the snapshot the view is built from, each kind in namespace/name order, cached until
the next change. The order is a sorted list of keys per resource, kept by bisection as keys come
and go (a list arrives in the API's order, the same, so its keys are appended): sorting 70,000
objects anew on every change would cost ~6 MiB of sort keys at the moment the next view is built.
The store is plain data plus two asyncio.Events; it does no IO and never blocks.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Mapping
from typing import TypeVar

from netkit.errors import Problem
from netkit.model.types import EndpointSlice, KubeObject, Namespace, ObjectRef, Objects, Pod, Service
from netkit.sources.reflector import EventType, Invalid, ReflectorEvent, Update
from netkit.sources.store import SyncState

T = TypeVar("T")
Key = tuple[str, ObjectRef]  # (resource, namespace/name of the API object)


class ClusterStore(SyncState):
    """A reflector sink (`apply`) with the consumer side `netkit dns` reads (`objects`, `changed`);
    `expect`, `mark_synced`, `all_synced` and `wait_synced` as the general store's."""

    def __init__(self) -> None:
        super().__init__()
        self._resources: dict[str, dict[ObjectRef, tuple[KubeObject, ...]]] = {}
        self._order: dict[str, list[ObjectRef]] = {}  # each resource's keys, sorted
        self._problems: dict[Key, Problem] = {}
        self._snapshot: Objects | None = None
        self._changed = asyncio.Event()

    def apply(self, event: ReflectorEvent) -> None:
        if isinstance(event, Update):
            objects = self._resources.setdefault(event.resource, {})
            order = self._order.setdefault(event.resource, [])
            if event.type is EventType.DELETED:
                if objects.pop(event.key, None) is None:
                    return
                del order[bisect.bisect_left(order, event.key)]
            else:
                if event.key not in objects:
                    _insert(order, event.key)
                objects[event.key] = event.objects
            self._problems.pop((event.resource, event.key), None)
            self._snapshot = None
            self._changed.set()
        elif isinstance(event, Invalid):
            self._problems[(event.resource, event.key)] = event.problem

    @property
    def changed(self) -> asyncio.Event:
        """Set from a change until `take_changes()`."""
        return self._changed

    def take_changes(self) -> None:
        self._changed.clear()

    @property
    def problems(self) -> Mapping[Key, Problem]:
        return dict(self._problems)

    def __len__(self) -> int:
        return sum(len(objs) for objs in self._resources.values())

    def objects(self) -> Objects:
        if self._snapshot is None:
            found: list[KubeObject] = [o for name, resource in self._resources.items()
                                       for key in self._order[name] for o in resource[key]]
            self._snapshot = Objects(services=_only(found, Service), slices=_only(found, EndpointSlice),
                                     pods=_only(found, Pod), namespaces=_only(found, Namespace))
        return self._snapshot


def _insert(order: list[ObjectRef], key: ObjectRef) -> None:
    if not order or order[-1] < key:
        order.append(key)
    else:
        bisect.insort(order, key)


def _only(found: list[KubeObject], kind: type[T]) -> tuple[T, ...]:
    return tuple(o for o in found if isinstance(o, kind))
