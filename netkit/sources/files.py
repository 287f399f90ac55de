"""Manifest files as a live source: `netkit run -f DIR` without an API server.

Theory of operation. `FileSource.run()` loads every manifest under the given paths (the *roots*)
exactly as `netkit.sources.manifests` reads them (directories recursively, `.yaml`/`.yml`/`.json`,
several documents per file, `kind: List`), puts each file's objects into the `Store` under the file's
path, marks itself synced, and then follows changes with `watchfiles` (inotify on Linux, debounced):
a changed file is decoded again and its objects replaced; a removed file takes its objects with it
once its root has had no other change for one poll interval, so files deleted over several batches
are seen together (and, when that empties the root, as the root emptying: see below).

A file that becomes invalid keeps its last good version. If the text no longer parses, all of the
file's previous objects stay; if single objects in it are invalid, each keeps its previous version
(matched by kind and namespace/name) while the valid ones take effect. Problems are reported in the
store under the file's path until the file is valid again.

A root that vanishes (`rm -rf DIR`, a deleted `-f FILE`) or empties (no Service left in it) is a
source that is briefly gone, not a cluster without Services: its objects stay in the store as they
were, a warning says so, and when files come back the root is read again in full and followed. Only
with `allow_empty` does a root that exists but holds no Service mean "no Services" (a vanished root is
kept even then). A gone root is read again in full only once its files have stayed the same for one
poll interval, so a tool writing them back one by one is not caught half-way (which would drop the
Services of the files not written yet). At start, an empty root is waited for the same way (the
source is not synced, so nothing is written) unless `allow_empty`; a missing one is an error.

inotify watches an inode: a directory removed and created again is a new one the old watch never
sees. So the watcher wakes up every `poll_ms` even without events and compares each root's identity
(device and inode; of the parent directory for a file root); when one changed or vanished, it stops,
waits for every root to exist again, starts a new watch, and rescans. The watch starts before each
rescan, so an edit made during a scan is not missed. Constructors do no IO.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from watchfiles import Change, awatch

from netkit.errors import Problem
from netkit.model.types import EndpointSlice, KubeObject, Node, Service
from netkit.sources.manifests import decode_text
from netkit.sources.store import Store, key_of

log = logging.getLogger(__name__)

EXTENSIONS = (".yaml", ".yml", ".json")
Identity = tuple[int, int] | None
Fingerprint = tuple[tuple[str, int, int], ...]  # (path, mtime_ns, size) of each manifest file
Decoded = tuple[KubeObject, ...] | None  # None: the file is gone


class FileSource:
    """Feeds `store` from manifest files and directories until cancelled."""

    name = "files"

    def __init__(self, paths: Sequence[str], store: Store, *, allow_empty: bool = False, debounce_ms: int = 200,
                 step_ms: int = 50, poll_ms: int = 500) -> None:
        self.paths = tuple(Path(p) for p in paths)
        self.store = store
        self.allow_empty = allow_empty
        self.debounce_ms, self.step_ms, self.poll_ms = debounce_ms, step_ms, poll_ms
        self.reloads = 0  # files decoded, for logs and tests
        self.watches = 0  # watchers started (a new one after a root vanished or was re-created)
        self._held: dict[Path, tuple[KubeObject, ...]] = {}  # what each file holds in the store
        self._dirs: dict[Path, bool] = {}  # root -> is a directory (decided at start)
        self._gone: set[Path] = set()  # roots briefly gone: what they held stays in the store
        self._seen: dict[Path, Fingerprint] = {}  # gone roots: their files at the last look
        self._tried: dict[Path, Fingerprint] = {}  # gone roots: the files last read in full
        self._removing: dict[Path, set[Path]] = {}  # files deleted, applied once the root is quiet
        self._quiet_at: dict[Path, float] = {}  # root -> when its pending removals apply
        store.expect(self.name)

    @property
    def gone(self) -> frozenset[Path]:
        """The roots currently vanished or empty, whose last objects are kept."""
        return frozenset(self._gone)

    async def run(self) -> None:
        for path in self.paths:
            if not path.exists():
                raise FileNotFoundError(f"{path}: no such file or directory")
            self._dirs[path] = path.is_dir()
        self._scan()
        await self._wait_until_not_empty()
        self.store.mark_synced(self.name)
        while True:
            await self._wait_for_roots()
            await self._follow()

    # --- watching --------------------------------------------------------------------------------

    async def _follow(self) -> None:
        """Watch until a root vanishes or is replaced by a new directory of the same name."""
        identities = {root: self._identity(root) for root in self.paths}
        watched = sorted({str(root if self._dirs[root] else root.parent) for root in self.paths})
        changes = awatch(*watched, debounce=self.debounce_ms, step=self.step_ms, rust_timeout=self.poll_ms,
                         yield_on_timeout=True, recursive=any(self._dirs.values()),
                         watch_filter=lambda _change, name: self._wanted(Path(name)))
        self.watches += 1
        try:
            # The generator sets up inotify synchronously on its first step, which runs at the next
            # loop iteration; after that a rescan cannot miss an edit made during the scan.
            first = asyncio.ensure_future(anext(changes))
            await asyncio.sleep(0)
            self._scan()
            batch = await first
            while all(self._identity(root) == ident for root, ident in identities.items()):
                self._apply(batch)
                self._settle_removals()
                self._retry_gone()
                batch = await anext(changes)
        finally:
            await changes.aclose()
        for root, ident in identities.items():
            if self._identity(root) != ident:
                self._vanished(root)

    async def _wait_for_roots(self) -> None:
        while not all(self._identity(root) is not None for root in self.paths):
            await asyncio.sleep(self.poll_ms / 1000)

    async def _wait_until_not_empty(self) -> None:
        if self._gone:
            log.warning("%s: no Service in it; waiting for manifests before the first sync (nothing is "
                        "written until then; --allow-empty starts from an empty input)",
                        ", ".join(map(str, sorted(self._gone))))
        while self._gone:
            await self._wait_for_roots()
            await asyncio.sleep(self.poll_ms / 1000)
            self._retry_gone()

    def _retry_gone(self) -> None:
        """Read a gone root again in full once its files have stayed the same for one poll interval
        (a tool writing the files back one by one is not caught half-way: a partial read would drop
        the Services of the files not written yet)."""
        for root in sorted(self._gone):
            if self._identity(root) is None:
                continue
            now = self._fingerprint(root)
            settled = now and now == self._seen.get(root) and now != self._tried.get(root)
            self._seen[root] = now
            if settled:
                self._tried[root] = now
                self._update(root, {path: self._decode(path) for path in self._files(root)}, full=True)

    def _fingerprint(self, root: Path) -> Fingerprint:
        out = []
        for path in self._files(root):
            try:
                st = path.stat()
            except OSError:
                continue
            out.append((str(path), st.st_mtime_ns, st.st_size))
        return tuple(out)

    def _identity(self, root: Path) -> Identity:
        target = root if self._dirs[root] else root.parent
        try:
            st = os.stat(target)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _vanished(self, root: Path) -> None:
        if root not in self._gone:
            held = sum(len(objs) for path, objs in self._held.items() if self._root_of(path) == root)
            log.warning("%s: removed or replaced; keeping the %d objects read from it and following it when "
                        "it comes back", root, held)
            self._gone.add(root)

    # --- reading ---------------------------------------------------------------------------------

    def _wanted(self, path: Path) -> bool:
        return path.suffix in EXTENSIONS and self._root_of(path) is not None

    def _root_of(self, path: Path) -> Path | None:
        for root, is_dir in self._dirs.items():
            if path == root or (is_dir and path.is_relative_to(root)):
                return root
        return None

    def _files(self, root: Path) -> list[Path]:
        if self._dirs[root]:
            try:
                return sorted(f for f in root.rglob("*") if f.suffix in EXTENSIONS and f.is_file())
            except OSError:  # vanished while being walked
                return []
        return [root] if root.is_file() else []

    def _scan(self) -> None:
        """Read every root in full."""
        for root in self.paths:
            self._update(root, {path: self._decode(path) for path in self._files(root)}, full=True)

    def _apply(self, batch: set[tuple[Change, str]]) -> None:
        by_root: dict[Path, set[Path]] = {}
        for _, name in batch:
            root = self._root_of(Path(name))
            if root is not None:
                by_root.setdefault(root, set()).add(Path(name))
        for root, paths in by_root.items():
            if root in self._gone:  # a gone root is read again in full once quiet (_retry_gone)
                continue
            present = sorted(p for p in paths if p.is_file())
            removing = self._removing.setdefault(root, set())
            removing.difference_update(present)  # re-created (an editor's rename): an edit
            removing.update(p for p in paths if p not in present and p in self._held)
            if removing:
                self._quiet_at[root] = time.monotonic() + self.poll_ms / 1000
            if present:
                self._update(root, {path: self._decode(path) for path in present}, full=False)

    def _settle_removals(self) -> None:
        """Apply removed files once their root has had no change for one poll interval: files deleted
        over a few batches are then seen together — as the root emptying, when it does."""
        now = time.monotonic()
        for root in [r for r, due in self._quiet_at.items() if due <= now]:
            del self._quiet_at[root]
            gone = {path: None for path in self._removing.pop(root, set()) if not path.is_file()}
            if gone and root not in self._gone:
                self._update(root, gone, full=False)

    def _decode(self, path: Path) -> tuple[KubeObject, ...]:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems = [Problem(str(path), "?", "?", "", f"cannot read: {exc}")]
            objects: list[KubeObject] = []
        else:
            objects, problems = decode_text(text, str(path))
        self.reloads += 1
        previous = self._held.get(path, ())
        kept = keep_last_good(previous, objects, problems)
        self.store.report(path, problems[0] if problems else None)
        for problem in problems:
            what = "keeping its last good version" if previous and _keeps(problem, previous) else "left out"
            log.warning("%s; %s", problem, what)
        return kept

    def _update(self, root: Path, decoded: Mapping[Path, Decoded], *, full: bool) -> None:
        """Put what `root`'s files now hold into the store — unless that leaves the root without a
        Service, which keeps everything as it was (see the module docstring)."""
        held = {path: objs for path, objs in self._held.items() if self._root_of(path) == root}
        new = {} if full else dict(held)
        for path, objs in decoded.items():
            if objs is None:
                new.pop(path, None)
            else:
                new[path] = objs
        if not any(isinstance(o, Service) for objs in new.values() for o in objs) and not (
                self.allow_empty and root.exists()):
            if root not in self._gone:
                log.warning("%s: %s; keeping the %d objects read from it until manifests come back "
                            "(--allow-empty: an empty input means no Services)",
                            root, "no Service left in it" if root.exists() else "removed",
                            sum(map(len, held.values())))
                self._gone.add(root)
            return
        if root in self._gone:
            log.info("%s: manifests are back; following it again", root)
            self._gone.discard(root)
            self._seen.pop(root, None)
            self._tried.pop(root, None)
        for path in held.keys() - new.keys():
            del self._held[path]
            self.store.put(path, ())
            self.store.report(path, None)
        for path, objs in new.items():
            if held.get(path) != objs:
                self._held[path] = objs
                self.store.put(path, objs)


def keep_last_good(previous: Sequence[KubeObject], decoded: Sequence[KubeObject],
                   problems: Sequence[Problem]) -> tuple[KubeObject, ...]:
    """The objects a file stands for after an edit: the decoded ones, plus the previous version of each
    object that is now invalid; everything previous when the text does not parse at all (pure)."""
    if any(p.kind == "?" for p in problems):
        return tuple(previous) if previous else tuple(decoded)
    out = list(decoded)
    have = {key_of(o) for o in decoded}
    for old in previous:
        if key_of(old) not in have and any(_names(old, p) for p in problems):
            out.append(old)
    return tuple(out)


def _keeps(problem: Problem, previous: Sequence[KubeObject]) -> bool:
    """Whether `problem` keeps an earlier version (the file does not parse, or the object was valid)."""
    return problem.kind == "?" or any(_names(old, problem) for old in previous)


def _names(obj: KubeObject, problem: Problem) -> bool:
    """Whether `problem` (kind, "namespace/name" or "name" as written) is about `obj`."""
    if isinstance(obj, Node):
        return problem.kind == "Node" and problem.name == obj.name
    ref = obj.ref
    if isinstance(obj, EndpointSlice) and obj.from_legacy_endpoints:
        kind, name = "Endpoints", obj.service_name
    else:
        kind, name = type(obj).__name__, ref.name
    written = {f"{ref.namespace}/{name}"} | ({name} if ref.namespace == "default" else set())
    return problem.kind == kind and problem.name in written
