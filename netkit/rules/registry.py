"""Mode name → backend: each mode's backend module itself; each satisfies
`netkit.rules.backend.Backend[R, P]` for its own Ruleset and Plan types (mypy checks
it here; tests/unit/test_backend_conformance.py runs every member).

`with_backend(mode, fn)` calls `fn` with the concrete backend, so `fn` — generic in R and P — sees
the types line up. Backend modules are imported on first use only (IPVS pulls in pyroute2)."""

from __future__ import annotations

from typing import TypeVar

from netkit.errors import NetkitError
from netkit.rules.backend import BackendUser

T = TypeVar("T")

MODES = ("iptables", "nftables", "ipvs")


def with_backend(mode: str, user: BackendUser[T]) -> T:
    if mode == "iptables":
        from netkit.rules.iptables import backend as iptables

        return user(iptables)
    if mode == "nftables":
        from netkit.rules.nftables import backend as nftables

        return user(nftables)
    if mode == "ipvs":
        from netkit.rules.ipvs import backend as ipvs

        return user(ipvs)
    raise NetkitError(f"--mode {mode!r}: not one of {', '.join(MODES)}")


def backend(mode: str) -> object:
    """The backend object of `mode`, untyped: for tests and tools that pick a backend by name and
    do not need the types to line up (netkit's own code uses `with_backend`)."""
    return with_backend(mode, _itself)


def _itself(be: object) -> object:
    return be
