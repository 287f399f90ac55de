"""Mode name → backend module (each satisfies netkit.rules.backend.Backend)."""

from __future__ import annotations

import importlib
from typing import cast

from netkit.errors import NetkitError
from netkit.rules.backend import Backend

_MODULES = {
    "iptables": "netkit.rules.iptables.backend",
    "nftables": "netkit.rules.nftables.backend",
    "ipvs": "netkit.rules.ipvs.backend",
}


def backend(mode: str) -> Backend:
    module = _MODULES.get(mode)
    if module is None:
        raise NetkitError(f"--mode {mode!r}: not one of {', '.join(_MODULES)}")
    try:
        loaded = importlib.import_module(module)
        # A backend is either the module itself or an object it exports as BACKEND.
        return cast(Backend, getattr(loaded, "BACKEND", loaded))
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("netkit.rules."):
            raise NetkitError(f"--mode {mode}: this backend is not built yet") from exc
        raise
