"""Errors netkit reports to users. Each names what went wrong precisely enough to fix it."""

from __future__ import annotations

import errno
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class NetkitError(Exception):
    """Base class: anything the CLI reports as a clean error: one line `netkit: error: …` and exit
    status `exit_status` (2, like diff(1) and kubectl; an interruption uses 130)."""

    exit_status = 2


class ParseError(NetkitError):
    """Text or JSON that is not what a reader accepts (an iptables rule or ruleset, an nft listing):
    one class for every backend's reader."""


class ListenError(NetkitError):
    """An address netkit was told to listen on cannot be used (in use, not on this host, malformed)."""

    def __init__(self, what: str, address: str, exc: Exception) -> None:
        if isinstance(exc, OSError):
            reason = exc.strerror or str(exc)
        else:  # garbage, or a port out of range
            reason = "expected IP:PORT ([IP]:PORT for IPv6) with a port 0-65535"
        hint = ""
        if isinstance(exc, OSError) and exc.errno == errno.EADDRNOTAVAIL:
            hint = " (no interface of this host has that address)"
        elif isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
            hint = " (another process listens there)"
        super().__init__(f"{what} {address}: cannot listen: {reason[:1].lower()}{reason[1:]}{hint}")


@contextmanager
def listening(what: str, address: str) -> Iterator[None]:
    """Wrap the parsing and binding of one listen address: `with listening("--listen", text): …`
    turns OSError (in use, address not here), ValueError and OverflowError (garbage, port out of
    range) into a ListenError naming the flag and the address."""
    try:
        yield
    except (OSError, ValueError, OverflowError) as exc:
        raise ListenError(what, address, exc) from exc


@dataclass(frozen=True, slots=True)
class Problem:
    """One invalid object: where it came from, what it is, which field, and why."""

    source: str  # file path (with document index) or "api"
    kind: str
    name: str  # namespace/name, or name for cluster-scoped objects, or "?" when unknown
    field: str  # dotted field path, e.g. spec.ports[0].port
    reason: str
    # "namespace/name" of the Service whose rules this object feeds (a Service, its Endpoints, an
    # EndpointSlice labelled with it), when the object says so: its live rules are kept as they are.
    service: str = ""

    def __str__(self) -> str:
        if self.kind == "?" and self.name == "?" and not self.field:  # the file, not one object in it
            return f"{_safe(self.source)}: {_safe(self.reason)}"
        return f"{_safe(self.source)}: {_safe(self.kind)} {_safe(self.name)}: {_safe(self.field)}: {_safe(self.reason)}"


_SAFE = re.compile(r"^[\w./:#\[\]@ ,'()<>-]*$")


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
