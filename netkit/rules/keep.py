"""Services whose input is invalid keep their live rules ("kept, invalid input"), in every command.

`keep_live(backend, live, desired, services)` is `desired` with the parts of `services`
("namespace/name") taken from the live dump, so a plan made from it neither removes nor changes
them. Each mode exposes `keep(live, desired, services)` in its package's `keep` module (iptables,
nftables, ipvs); for a mode without one, a kept Service that has live rules is an error (nothing is
changed), never a silent removal. `kept_ports` names the service ports concerned, for the report.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Mapping
from typing import cast

from netkit.errors import NetkitError
from netkit.rules.backend import Backend, P, R

_MODULES = {"iptables": "netkit.rules.iptables.keep", "nftables": "netkit.rules.nftables.keep",
            "ipvs": "netkit.rules.ipvs.keep"}


def kept_ports(summary: Mapping[str, tuple[str, ...]], services: Collection[str]) -> list[str]:
    """The service ports ("ns/svc:port/proto") of a summary that belong to one of `services`."""
    wanted = set(services)
    return sorted(k for k in summary if service_of(k) in wanted)


def service_of(port_key: str) -> str:
    """"ns/svc:port/proto" or "ns/svc/proto" (an unnamed port) → "ns/svc"."""
    return port_key.rpartition("/")[0].partition(":")[0]


def keep_live(be: Backend[R, P], live: R, desired: R, services: Collection[str]) -> R:
    if not services:
        return desired
    module = _MODULES.get(be.name)
    if module is None:
        held = kept_ports(be.summarize(live), services) if live is not None else []
        if held:
            raise NetkitError(f"invalid input for {', '.join(sorted(services))}, which has live {be.name} "
                              f"rules ({', '.join(held)}): keeping them as they are is not supported in "
                              f"{be.name} mode yet, so nothing was changed; fix the input")
        return desired
    return cast(R, importlib.import_module(module).keep(live, desired, services))
