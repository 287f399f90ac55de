"""The node sysctls kube-proxy sets at start (conntrack sizing and timeouts, IPVS strict ARP, localhost
NodePorts), and netkit's choice: leave them, and say so, unless `--apply-sysctls` asks for them.

`wanted(config, cpus)` is pure: kube-proxy's rules (cmd/kube-proxy/app/server_linux.go) — nf_conntrack_max
is max(maxPerCore x CPUs, min) when maxPerCore > 0, a timeout is set when it is > 0, tcpBeLiberal sets
nf_conntrack_tcp_be_liberal=1, ipvs.strictARP sets arp_ignore=1 and arp_announce=2, localhost NodePorts
in iptables mode need route_localnet=1. `apply_or_report` writes them (only those that differ) or
logs each with the value the node has now. The daemon refuses `--apply-sysctls` with `--netns`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from netkit.config import Config

log = logging.getLogger("netkit.sysctls")
PROC_SYS = Path("/proc/sys")


@dataclass(frozen=True, slots=True)
class Sysctl:
    path: str  # under /proc/sys, with slashes
    value: int
    why: str


def wanted(config: Config, cpus: int) -> tuple[Sysctl, ...]:
    out: list[Sysctl] = []
    if config.conntrack_max_per_core > 0:
        value = max(config.conntrack_max_per_core * cpus, config.conntrack_min)
        why = "conntrack.maxPerCore x CPUs, at least conntrack.min"
        out.append(Sysctl("net/netfilter/nf_conntrack_max", value, why))
    timeouts = (("nf_conntrack_tcp_timeout_established", config.conntrack_tcp_established_timeout,
                 "conntrack.tcpEstablishedTimeout"),
                ("nf_conntrack_tcp_timeout_close_wait", config.conntrack_tcp_close_wait_timeout,
                 "conntrack.tcpCloseWaitTimeout"),
                ("nf_conntrack_udp_timeout", config.conntrack_udp_timeout, "conntrack.udpTimeout"),
                ("nf_conntrack_udp_timeout_stream", config.conntrack_udp_stream_timeout, "conntrack.udpStreamTimeout"))
    out += [Sysctl(f"net/netfilter/{name}", int(seconds), why) for name, seconds, why in timeouts if seconds > 0]
    if config.conntrack_tcp_be_liberal:
        out.append(Sysctl("net/netfilter/nf_conntrack_tcp_be_liberal", 1, "conntrack.tcpBeLiberal"))
    if config.mode == "ipvs" and config.ipvs_strict_arp:
        out += [Sysctl("net/ipv4/conf/all/arp_ignore", 1, "ipvs.strictARP"),
                Sysctl("net/ipv4/conf/all/arp_announce", 2, "ipvs.strictARP")]
    if config.mode == "iptables" and config.localhost_nodeports:
        out.append(Sysctl("net/ipv4/conf/all/route_localnet", 1, "iptables.localhostNodePorts"))
    return tuple(out)


def current(path: str, root: Path = PROC_SYS) -> int | None:
    try:
        return int((root / path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True, slots=True)
class Outcome:
    written: tuple[Sysctl, ...]
    failed: tuple[Sysctl, ...]  # the kernel refused the write (logged)


def apply_or_report(config: Config, *, apply: bool, root: Path = PROC_SYS, cpus: int | None = None) -> Outcome:
    """Write (apply) or report each wanted sysctl: the ones written, and those that could not be."""
    written, failed = [], []
    for s in wanted(config, cpus or os.cpu_count() or 1):
        now = current(s.path, root)
        if now == s.value:
            continue
        if not apply:
            log.info("leaving sysctl %s at %s (kube-proxy would set %d for %s; --apply-sysctls sets it)",
                     s.path.replace("/", "."), "unset" if now is None else now, s.value, s.why)
            continue
        try:
            (root / s.path).write_text(f"{s.value}\n")
            written.append(s)
            log.info("set sysctl %s = %d (%s)", s.path.replace("/", "."), s.value, s.why)
        except OSError as exc:  # the daemon logs and goes on (a read-only /proc/sys in a container)
            failed.append(s)
            log.warning("cannot set sysctl %s = %d: %s", s.path.replace("/", "."), s.value, exc.strerror or exc)
    return Outcome(tuple(written), tuple(failed))
