"""Manifest files as a live source: `netkit run -f DIR` without an API server.

Theory of operation. `FileSource.run()` loads every manifest under the given paths exactly as
`netkit.sources.manifests` reads them (directories recursively, `.yaml`/`.yml`/`.json`, several
documents per file, `kind: List`), puts each file's objects into the `Store` under the file's path,
marks itself synced, and then follows changes with `watchfiles` (inotify on Linux, debounced): a
changed file is decoded again and its objects replaced, a removed file takes its objects with it.

A file that becomes invalid keeps its last good version. If the text no longer parses, all of the
file's previous objects stay; if single objects in it are invalid, each keeps its previous version
(matched by kind and namespace/name) while the valid ones take effect. Problems are reported in the
store under the file's path until the file is valid again.

The watcher starts before a second full scan, so an edit made while the first load was running is not
missed. Constructors do no IO.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from watchfiles import Change, awatch

from netkit.errors import Problem
from netkit.model.types import EndpointSlice, KubeObject, Node
from netkit.sources.manifests import decode_text
from netkit.sources.store import Store, key_of

log = logging.getLogger(__name__)

EXTENSIONS = (".yaml", ".yml", ".json")


class FileSource:
    """Feeds `store` from manifest files and directories until cancelled."""

    name = "files"

    def __init__(self, paths: Sequence[str], store: Store, *, debounce_ms: int = 200, step_ms: int = 50) -> None:
        self.paths = tuple(Path(p) for p in paths)
        self.store = store
        self.debounce_ms, self.step_ms = debounce_ms, step_ms
        self.reloads = 0  # files decoded, for logs and tests
        self._held: dict[Path, tuple[KubeObject, ...]] = {}
        store.expect(self.name)

    async def run(self) -> None:
        for path in self.paths:
            if not path.exists():
                raise FileNotFoundError(f"{path}: no such file or directory")
        self._scan()
        self.store.mark_synced(self.name)
        roots = sorted({str(p if p.is_dir() else p.parent) for p in self.paths})
        changes = awatch(*roots, debounce=self.debounce_ms, step=self.step_ms,
                         recursive=any(p.is_dir() for p in self.paths),
                         watch_filter=lambda _change, name: self._wanted(Path(name)))
        try:
            # The generator sets up inotify synchronously on its first step, which runs at the next
            # loop iteration; after that a rescan cannot miss an edit made during the first load.
            first = asyncio.ensure_future(anext(changes))
            await asyncio.sleep(0)
            self._scan()
            batch = await first
            while True:
                self._apply(batch)
                batch = await anext(changes)
        finally:
            await changes.aclose()

    def _wanted(self, path: Path) -> bool:
        if path.suffix not in EXTENSIONS:
            return False
        return any(path == p or (p.is_dir() and path.is_relative_to(p)) for p in self.paths)

    def _scan(self) -> None:
        found = set(self._files())
        for gone in set(self._held) - found:
            self._remove(gone)
        for path in sorted(found):
            self._reload(path)

    def _files(self) -> list[Path]:
        out: list[Path] = []
        for p in self.paths:
            if p.is_dir():
                out.extend(f for f in p.rglob("*") if f.is_file() and f.suffix in EXTENSIONS)
            elif p.is_file():
                out.append(p)
        return out

    def _apply(self, batch: set[tuple[Change, str]]) -> None:
        for path in sorted({Path(name) for _, name in batch}):
            if path.is_file():
                self._reload(path)
            else:
                self._remove(path)

    def _reload(self, path: Path) -> None:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems = [Problem(str(path), "?", "?", "", f"cannot read: {exc}")]
            objects: list[KubeObject] = []
        else:
            objects, problems = decode_text(text, str(path))
        self.reloads += 1
        kept = keep_last_good(self._held.get(path, ()), objects, problems)
        self._held[path] = kept
        self.store.put(path, kept)
        self.store.report(path, problems[0] if problems else None)
        for problem in problems:
            log.warning("invalid object left out: %s", problem)

    def _remove(self, path: Path) -> None:
        self._held.pop(path, None)
        self.store.put(path, ())
        self.store.report(path, None)


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
