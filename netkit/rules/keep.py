"""Services whose input is invalid keep their live rules ("kept, invalid input"), in every command.

`keep_live(backend, live, desired, services)` is `desired` with the parts of `services`
("namespace/name") taken from the live dump, so a plan made from it neither removes nor changes
them: the backend's `keep` member (each mode's `keep` module). `kept_ports` names the service
ports concerned, for the report.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from netkit.rules.backend import Backend, P, R


def kept_ports(summary: Mapping[str, tuple[str, ...]], services: Collection[str]) -> list[str]:
    """The service ports ("ns/svc:port/proto") of a summary that belong to one of `services`."""
    wanted = set(services)
    return sorted(k for k in summary if service_of(k) in wanted)


def service_of(port_key: str) -> str:
    """"ns/svc:port/proto" or "ns/svc/proto" (an unnamed port) → "ns/svc"."""
    return port_key.rpartition("/")[0].partition(":")[0]


def keep_live(be: Backend[R, P], live: R, desired: R, services: Collection[str]) -> R:
    return be.keep(live, desired, services) if services else desired
