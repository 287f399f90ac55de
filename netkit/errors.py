"""Errors netkit reports to users. Each names what went wrong precisely enough to fix it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass


class NetkitError(Exception):
    """Base class: anything the CLI reports as a clean error (exit status 2)."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One invalid object: where it came from, what it is, which field, and why."""

    source: str  # file path (with document index) or "api"
    kind: str
    name: str  # namespace/name, or name for cluster-scoped objects, or "?" when unknown
    field: str  # dotted field path, e.g. spec.ports[0].port
    reason: str

    def __str__(self) -> str:
        return f"{_safe(self.source)}: {_safe(self.kind)} {_safe(self.name)}: {_safe(self.field)}: {_safe(self.reason)}"


_SAFE = re.compile(r"^[\w./:#\[\]@ ,'()-]*$")


def _safe(text: str) -> str:
    """Object names come from untrusted input: show anything unusual escaped, on one line."""
    return text if _SAFE.match(text) else json.dumps(text)


class InvalidObject(NetkitError):
    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


class KernelError(NetkitError):
    """A kernel tool refused a change. Carries the payload and the tool's stderr."""

    def __init__(self, message: str, *, payload: str = "", stderr: str = "") -> None:
        super().__init__(message + (f"\n{stderr.strip()}" if stderr.strip() else ""))
        self.payload = payload
        self.stderr = stderr
