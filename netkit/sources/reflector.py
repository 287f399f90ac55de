"""A reflector: one resource of the Kubernetes API, listed and watched, delivered as netkit values.

Theory of operation (client-go's reflector, on asyncio):

1. **List** the resource in pages (`limit`/`continue`); the pages share one snapshot whose
   resourceVersion is the list's. A continue token that expired mid-list (410) restarts the list in one
   request without a limit, as client-go's pager does. Each page is decoded into netkit's values as it
   arrives and its JSON dropped; nothing is delivered until the list is complete. A page's items stay
   JSON text until decoded: Services and EndpointSlices of the common shape go straight into the
   model (`netkit.model.apidecode`, msgspec), any other item is parsed and read by `from_k8s`.
2. Diff the list against the cache: objects that vanished are delivered as DELETED, new or changed ones
   as ADDED/MODIFIED, unchanged ones not at all. After the first complete list `synced` is set and a
   `Synced` event delivered.
3. **Watch** from the list's version with bookmarks and a randomised `timeoutSeconds` in [min, 2·min)
   (client-go: 5–10 min, so a fleet of nodes does not reconnect in step). The version is taken from
   every event, BOOKMARK included, so a re-watch resumes exactly where the last stream stopped.
4. A stream that **ends cleanly** is re-watched at once from the tracked version — no relist. A
   **dropped or refused connection**, a 5xx/429 or a corrupt line backs off exponentially with jitter
   (client-go: 0.8 s doubling to 30 s) and resumes from the tracked version. **410 Gone** (an HTTP 410
   or an ERROR event with code 410) forgets the version and relists, which emits DELETED for whatever
   vanished while the reflector could not see.
5. Every object goes through `netkit.model.from_k8s` (or the decoder the reflector is given: cluster
   DNS keeps only the fields its answers read, netkit.dns.decode). An object equal to the cached one
   is kept as the cached one, key included, so a relist holds one copy of every unchanged object;
   the key is the object's own reference where it has one (Service, EndpointSlice, Pod).
   An invalid one is delivered as an `Invalid` event carrying the Problem and is left out; if an
   earlier version of the object was good, that version stays in force. Nothing a client sends can
   crash the reflector.

The socket read timeout (per line) is longer than the watch timeout, so a silently dead TCP connection
is noticed without cutting a healthy, quiet stream; the library's own retries are not used.

The transport is a small protocol (`ListWatch`); `KubeListWatch` implements it over netkit's own
aiohttp client (`netkit.sources.apiclient`, through `netkit.sources.kube.list_call`), reading the
responses unparsed so that msgspec parses them (generated model classes would cost time and memory
and lose nothing netkit needs). Constructors do no IO; `Reflector.run()` works until cancelled.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import msgspec

from netkit.errors import InvalidObject, Problem
from netkit.model import apidecode, from_k8s
from netkit.model.types import EndpointSlice, KubeObject, ObjectRef, Pod, Service

log = logging.getLogger(__name__)

JSON = Mapping[str, Any]


# --- events delivered -----------------------------------------------------------------------------


class EventType(enum.Enum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


@dataclass(frozen=True, slots=True)
class Update:
    """An API object appeared, changed or vanished. `objects` is its decoded form (a legacy Endpoints
    object decodes to one EndpointSlice per family); for DELETED it is the last version delivered."""

    resource: str
    key: ObjectRef  # namespace/name of the API object; namespace "" for cluster-scoped objects
    type: EventType
    objects: tuple[KubeObject, ...]


@dataclass(frozen=True, slots=True)
class Invalid:
    """An API object netkit cannot use; it is left out (its last good version, if any, stays)."""

    resource: str
    key: ObjectRef
    problem: Problem


@dataclass(frozen=True, slots=True)
class Synced:
    """The first complete list of a resource has been delivered."""

    resource: str


ReflectorEvent = Update | Invalid | Synced
Sink = Callable[[ReflectorEvent], None]
Decoder = Callable[[JSON], Sequence[KubeObject]]  # raises InvalidObject


def decode_api(obj: JSON) -> list[KubeObject]:
    """The decoder reflectors use unless given another: `netkit.model.from_k8s`."""
    return from_k8s(obj, "api")


# --- transport -----------------------------------------------------------------------------------


class Gone(Exception):
    """410: the version (or continue token) is older than the server's history. Relist."""


class ApiUnavailable(Exception):
    """The request did not succeed for a reason worth retrying after a backoff."""


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list. An item is its JSON text not yet parsed (a msgspec.Raw: a view into the
    response) or, from a transport that has them so, its parsed dict."""

    items: Sequence[JSON | msgspec.Raw]
    resource_version: str
    continue_token: str


class _ListMeta(msgspec.Struct):
    resourceVersion: str  # noqa: N815 (the API's field names)
    continue_: str | None = msgspec.field(default=None, name="continue")


class _List(msgspec.Struct):
    """A list response: its items left as their JSON text, each parsed when the reflector decodes it."""

    metadata: _ListMeta
    items: list[msgspec.Raw]


_LIST = msgspec.json.Decoder(_List)


class ListWatch(Protocol):
    """List and watch one resource; raises Gone or ApiUnavailable."""

    kind: str

    async def list_page(self, limit: int, continue_token: str, timeout: float) -> Page: ...

    def watch(self, resource_version: str, timeout_seconds: int,
              read_timeout: float) -> AbstractAsyncContextManager[AsyncIterator[JSON]]: ...


ListCall = Callable[..., Awaitable[aiohttp.ClientResponse]]


class KubeListWatch:
    """`ListWatch` over one list call (`netkit.sources.kube.list_call`): an awaitable taking the list
    and watch query parameters by their Python names and returning the unread response."""

    def __init__(self, call: ListCall, kind: str, *, label_selector: str = "", field_selector: str = "") -> None:
        self.kind = kind
        self._call = call
        self._selectors = {k: v for k, v in (("label_selector", label_selector),
                                             ("field_selector", field_selector)) if v}

    async def list_page(self, limit: int, continue_token: str, timeout: float) -> Page:
        resp = await self._request(limit=limit or None, _continue=continue_token or None,
                                   _request_timeout=timeout)
        async with resp:
            await _check(resp)
            try:
                body = await resp.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise ApiUnavailable(f"list {self.kind}: {exc!r}") from exc
        try:
            listed = _LIST.decode(body)
        except msgspec.DecodeError as exc:  # malformed JSON, or not a list (ValidationError)
            raise ApiUnavailable(f"list {self.kind}: the response is not a list: {exc}") from exc
        return Page(listed.items, listed.metadata.resourceVersion, listed.metadata.continue_ or "")

    @asynccontextmanager
    async def watch(self, resource_version: str, timeout_seconds: int,
                    read_timeout: float) -> AsyncIterator[AsyncIterator[JSON]]:
        resp = await self._request(watch=True, resource_version=resource_version, allow_watch_bookmarks=True,
                                   timeout_seconds=timeout_seconds,
                                   _request_timeout=float(timeout_seconds) + read_timeout)
        try:
            await _check(resp)
            yield self._events(resp, read_timeout)
        finally:
            resp.close()  # never return a half-read stream to the connection pool

    async def _events(self, resp: aiohttp.ClientResponse, read_timeout: float) -> AsyncIterator[JSON]:
        while True:
            try:
                async with asyncio.timeout(read_timeout):
                    line = await resp.content.readline()
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                raise ApiUnavailable(f"watch {self.kind}: stream broken: {exc!r}") from exc
            if not line:
                return  # the server ended the stream cleanly (timeoutSeconds)
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError as exc:
                raise ApiUnavailable(f"watch {self.kind}: corrupt event: {line[:80]!r}") from exc
            if isinstance(event, dict):
                yield event

    async def _request(self, **kwargs: Any) -> aiohttp.ClientResponse:
        try:
            return await self._call(**self._selectors, **kwargs)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise ApiUnavailable(f"{self.kind}: {exc!r}") from exc


async def _check(resp: aiohttp.ClientResponse) -> None:
    if resp.status == 200:
        return
    try:
        text = (await resp.text())[:300]
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError):
        text = ""
    if resp.status == 410:
        raise Gone(text)
    raise ApiUnavailable(f"HTTP {resp.status}: {text}")


# --- backoff -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """client-go's reflector backoff: 0.8 s, doubling, capped at 30 s, jitter up to +100%."""

    initial: float = 0.8
    cap: float = 30.0
    factor: float = 2.0
    jitter: float = 1.0

    def delay(self, failures: int, rng: random.Random) -> float:
        """The pause after the `failures`-th consecutive failure (1-based)."""
        base = min(self.cap, self.initial * self.factor ** max(0, failures - 1))
        return base * (1.0 + self.jitter * rng.random())


# --- the reflector -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReflectorOptions:
    page_size: int = 500
    min_watch_timeout: float = 300.0  # timeoutSeconds is drawn from [min, 2·min)
    read_timeout_margin: float = 30.0  # socket read timeout = watch timeout + this
    list_timeout: float = 60.0
    short_watch: float = 1.0  # a clean end sooner than this, with no event, counts as a failure
    backoff: BackoffPolicy = BackoffPolicy()


@dataclass(slots=True)
class ReflectorStats:
    """Counters for logs, metrics and tests."""

    lists: int = 0  # complete lists (initial and relists)
    watches: int = 0  # watch requests started
    gone: int = 0  # 410s seen
    failures: int = 0  # dropped or refused connections and other retried errors
    events: int = 0  # watch events received, bookmarks included
    last_delay: float = 0.0


@dataclass(slots=True)
class _Cache:
    objects: dict[ObjectRef, tuple[KubeObject, ...]] = field(default_factory=dict)


class Reflector:
    """Lists and watches one resource for as long as `run()` runs, delivering events to `sink`."""

    def __init__(self, resource: str, lw: ListWatch, sink: Sink, options: ReflectorOptions | None = None,
                 *, rng: random.Random | None = None, decode: Decoder = decode_api) -> None:
        self.resource = resource
        self._decode_object = decode
        self.options = options or ReflectorOptions()
        self.stats = ReflectorStats()
        self.resource_version: str | None = None
        self._lw, self._sink = lw, sink
        self._rng = rng or random.Random()
        self._cache = _Cache()
        self._synced = asyncio.Event()
        self._failures = 0
        self._gone_streak = 0

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def snapshot(self) -> dict[ObjectRef, tuple[KubeObject, ...]]:
        """The current objects as this reflector knows them (a copy)."""
        return dict(self._cache.objects)

    async def run(self) -> None:
        while True:
            try:
                if self.resource_version is None:
                    await self._list()
                if await self._watch():
                    self._failures = self._gone_streak = 0
                    continue
                reason = "the watch ended at once without events"
            except Gone as exc:
                self.stats.gone += 1
                log.info("%s: version %s expired (%s); relisting", self.resource, self.resource_version, exc)
                self.resource_version = None
                self._gone_streak += 1
                if self._gone_streak == 1:  # relist at once, but never loop on 410 without a pause
                    continue
                reason = "repeated 410"
            except ApiUnavailable as exc:
                reason = str(exc)
            await self._back_off(reason)

    async def _back_off(self, reason: str) -> None:
        self._failures += 1
        self.stats.failures += 1
        delay = self.options.backoff.delay(self._failures, self._rng)
        self.stats.last_delay = delay
        log.warning("%s: %s; retrying in %.2fs", self.resource, reason, delay)
        await asyncio.sleep(delay)

    # list

    async def _list(self) -> None:
        fresh, invalid, version = await self._list_all()
        for event in invalid:
            self._sink(event)
        self._replace(fresh)
        self.resource_version = version
        self.stats.lists += 1
        self._failures = 0
        if not self._synced.is_set():
            self._synced.set()
            self._sink(Synced(self.resource))

    async def _list_all(self) -> tuple[dict[ObjectRef, tuple[KubeObject, ...]], list[Invalid], str]:
        """The complete list, decoded page by page as the pages arrive (so the JSON of one page at a
        time is held, not the whole list's: at 10k Services × 10 endpoints the list's peak under
        tracemalloc is 58 MB instead of 128 MB), with the Invalid events it gives; nothing is delivered
        before the list is complete, so no state is ever built from part of a list."""
        opts = self.options
        fresh: dict[ObjectRef, tuple[KubeObject, ...]] = {}
        invalid: list[Invalid] = []
        token = ""
        while True:
            try:
                page = await self._lw.list_page(opts.page_size, token, opts.list_timeout)
            except Gone:
                if not token:
                    raise
                log.info("%s: continue token expired; listing again in one request", self.resource)
                fresh, invalid = {}, []
                page = await self._lw.list_page(0, "", opts.list_timeout)
                self._decode_page(page.items, fresh, invalid)
                return fresh, invalid, page.resource_version
            self._decode_page(page.items, fresh, invalid)
            if not page.continue_token:
                return fresh, invalid, page.resource_version
            token = page.continue_token

    def _decode_page(self, items: Sequence[JSON | msgspec.Raw], fresh: dict[ObjectRef, tuple[KubeObject, ...]],
                     invalid: list[Invalid]) -> None:
        kind = self._lw.kind
        typed = self._decode_object is decode_api  # netkit's model: apidecode reads it from the JSON text
        for item in items:
            key: ObjectRef | None
            objects: tuple[KubeObject, ...] | None
            if isinstance(item, msgspec.Raw):
                got = apidecode.decode(item, kind) if typed else None
                if got is not None:
                    key, objects = got[0], tuple(got[1])
                else:  # not the common shape, or another decoder: from the parsed dict
                    key, objects = self._decode({**msgspec.json.decode(item), "kind": kind}, invalid.append)
            else:
                key, objects = self._decode({**item, "kind": kind}, invalid.append)
            if key is None:
                continue
            old = self._cache.objects.get(key)
            if objects is not None:
                kept = old if old == objects else objects  # unchanged: the cached one, one copy
                fresh[_held_key(key, kept)] = kept
            elif old is not None:
                fresh[_held_key(key, old)] = old  # invalid now: the last good version stays

    def _replace(self, fresh: dict[ObjectRef, tuple[KubeObject, ...]]) -> None:
        """Deliver what the list changed, and make the cache the list, in place (a new dict beside the
        old one and the list's would be a third one of the resource's size). An object still listed
        keeps the key it had (a sink keeps the keys it was given, so the new list's equal keys would
        otherwise be held twice)."""
        held = self._cache.objects
        for key in [k for k in held if k not in fresh]:
            self._sink(Update(self.resource, key, EventType.DELETED, held.pop(key)))
        changed = [k for k, objects in held.items() if fresh[k] is not objects]  # equal ones are the cached ones
        for key in changed:
            held[key] = fresh[key]
            self._sink(Update(self.resource, key, EventType.MODIFIED, held[key]))
        for key, objects in fresh.items():
            if key not in held:
                held[key] = objects
                self._sink(Update(self.resource, key, EventType.ADDED, objects))

    # watch

    async def _watch(self) -> bool:
        """One watch stream. True when it ended cleanly after being useful."""
        opts = self.options
        assert self.resource_version is not None
        timeout = max(1, int(opts.min_watch_timeout * (1.0 + self._rng.random())))
        loop = asyncio.get_running_loop()
        started, useful = loop.time(), False
        self.stats.watches += 1
        async with self._lw.watch(self.resource_version, timeout, timeout + opts.read_timeout_margin) as events:
            async for event in events:
                self.stats.events += 1
                self._on_event(event)
                useful = True
                self._failures = self._gone_streak = 0
        return useful or loop.time() - started >= opts.short_watch

    def _on_event(self, event: JSON) -> None:
        etype, obj = event.get("type"), event.get("object")
        if not isinstance(obj, Mapping):
            raise ApiUnavailable(f"watch {self._lw.kind}: event without an object: {str(event)[:120]}")
        if etype == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise Gone(str(obj.get("message", "")))
            raise ApiUnavailable(f"watch {self._lw.kind}: ERROR event {code}: {obj.get('message', '')}")
        if etype in ("ADDED", "MODIFIED"):
            self._upsert({**obj, "kind": self._lw.kind})
        elif etype == "DELETED":
            self._delete(_key(obj))
        elif etype != "BOOKMARK":
            log.warning("%s: ignoring watch event of type %r", self.resource, etype)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if isinstance(version, str) and version:
            self.resource_version = version

    def _upsert(self, obj: JSON) -> None:
        key, objects = self._decode(obj)
        if key is None or objects is None:
            return
        old = self._cache.objects.get(key)
        if old == objects:
            return
        key = _held_key(key, objects)
        self._cache.objects[key] = objects
        self._sink(Update(self.resource, key, EventType.MODIFIED if old is not None else EventType.ADDED,
                          objects))

    def _delete(self, key: ObjectRef | None) -> None:
        if key is None:
            return
        old = self._cache.objects.pop(key, None)
        self._sink(Update(self.resource, key, EventType.DELETED, old or ()))

    def _decode(self, obj: JSON, invalid: Callable[[Invalid], None] | None = None,
                ) -> tuple[ObjectRef | None, tuple[KubeObject, ...] | None]:
        """(key, objects); objects None when invalid (an Invalid event has been given to `invalid`,
        by default delivered)."""
        key = _key(obj)
        try:
            return key, tuple(self._decode_object(obj))
        except InvalidObject as exc:
            log.warning("%s: invalid object left out: %s", self.resource, exc.problem)
            (invalid or self._sink)(Invalid(self.resource, key or ObjectRef("", "?"), exc.problem))
            return key, None


def _held_key(key: ObjectRef, objects: tuple[KubeObject, ...]) -> ObjectRef:
    """`key`, or the equal reference its object already holds: one object for both, not a key of its
    own per object (at 70,000 objects ~10 MiB), and a relist's keys are the ones already held."""
    ref = objects[0].ref if objects and isinstance(objects[0], Service | EndpointSlice | Pod) else None
    return ref if ref is not None and ref == key else key


def _key(obj: JSON) -> ObjectRef | None:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        return None
    ns = meta.get("namespace")
    return ObjectRef(ns if isinstance(ns, str) else "", meta["name"])
