"""Manifest files as a source, read the way kubectl reads `-f`.

`load(paths)` accepts files (YAML with several documents, JSON, `kind: List`), directories (recursive,
files ending .yaml/.yml/.json in name order) and `-` for stdin. Every object goes through
`netkit.model.from_k8s`; an invalid one becomes a Problem (file, document, kind, name, field, reason)
and is left out, so the rest still compiles. The result is a `Loaded` value: objects and problems.

A file whose text does not parse is not a set of invalid objects but an unknown set of objects: `load`
raises `Unparsable` (`FILE:LINE:COL: invalid YAML: reason`), so a command changes nothing rather than
removing what the file defined. A path that cannot be read — a file, a directory or any directory
below it — raises `ManifestError` for the same reason. `decode_text` (the daemon's and netkit dns's
per-file reader) returns the same report as a Problem instead, for the caller to keep the file's last
good version.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from netkit import yamlload
from netkit.errors import InvalidObject, NetkitError, Problem
from netkit.model import Objects, from_k8s, list_items
from netkit.model.types import KubeObject

_EXTENSIONS = (".yaml", ".yml", ".json")


@dataclass(frozen=True, slots=True)
class Loaded:
    objects: Objects
    problems: tuple[Problem, ...]
    files: tuple[str, ...]


class ManifestError(NetkitError):
    pass


class Unparsable(ManifestError):
    """A file's text is not YAML (or JSON): `FILE:LINE:COL: invalid YAML: reason` (1-based)."""

    def __init__(self, label: str, line: int, column: int, what: str, reason: str) -> None:
        self.problem = Problem(f"{label}:{line}:{column}", "?", "?", "", f"invalid {what}: {reason}")
        super().__init__(str(self.problem))


def load(paths: Iterable[str], stdin_text: str | None = None) -> Loaded:
    objs: list[KubeObject] = []
    problems: list[Problem] = []
    files: list[str] = []
    for label, text in _read_all(paths, stdin_text):
        files.append(label)
        decoded, problems_here = _decode(_documents(text, label), label)
        objs.extend(decoded)
        problems.extend(problems_here)
    return Loaded(Objects.of(objs), tuple(problems), tuple(files))


def decode_text(text: str, label: str) -> tuple[list[KubeObject], list[Problem]]:
    """Decode one file's text: each document and List item separately, problems collected. Text that
    does not parse gives no objects and one Problem (`Unparsable.problem`, kind "?")."""
    try:
        docs = _documents(text, label)
    except Unparsable as exc:
        return [], [exc.problem]
    return _decode(docs, label)


def _decode(docs: list[Any], label: str) -> tuple[list[KubeObject], list[Problem]]:
    objs: list[KubeObject] = []
    problems: list[Problem] = []
    for index, doc in enumerate(docs):
        source = label if len(docs) == 1 else f"{label}#{index}"
        for item in list_items(doc):
            try:
                objs.extend(from_k8s(item, source))
            except InvalidObject as exc:
                problems.append(exc.problem)
    return objs, problems


def _documents(text: str, label: str) -> list[Any]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise Unparsable(label, exc.lineno, exc.colno, "JSON", exc.msg) from exc
        return doc if isinstance(doc, list) else [doc]
    try:
        return [d for d in yamlload.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise _unparsable(label, exc) from exc


def _unparsable(label: str, exc: yaml.YAMLError) -> Unparsable:
    """Where and why, from PyYAML's marks (0-based there): "did not find expected ',' or ']'
    (while parsing a flow sequence)"."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    reason = f"{problem} ({context})" if context else problem
    return Unparsable(label, line, column, "YAML", " ".join(str(reason).split()))


def _read_all(paths: Iterable[str], stdin_text: str | None) -> Iterator[tuple[str, str]]:
    for p in paths:
        if p == "-":
            yield "<stdin>", stdin_text if stdin_text is not None else sys.stdin.read()
            continue
        path = Path(p)
        if path.is_dir():
            for f in manifest_files(path):
                yield str(f), _read(f)
        elif path.exists():
            yield str(path), _read(path)
        else:
            raise ManifestError(f"{p}: no such file or directory")


def manifest_files(directory: Path) -> list[Path]:
    """The manifest files under `directory`, recursively, in name order. A directory that cannot be
    listed is an error (skipping it would drop the Services it holds); symlinked directories are
    not followed, as kubectl does not."""
    found: list[Path] = []

    def fail(exc: OSError) -> None:
        raise ManifestError(f"{exc.filename}: cannot read directory: {exc.strerror}") from exc

    for top, _dirs, names in os.walk(directory, onerror=fail):
        found.extend(Path(top, n) for n in names if Path(n).suffix in _EXTENSIONS and Path(top, n).is_file())
    return sorted(found)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read: {exc}") from exc
