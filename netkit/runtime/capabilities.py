"""The Linux capabilities `netkit run` uses — deploy/30-daemonset.yaml grants these and no others —
and, at start, one warning for each one missing, saying what will fail without it.

- CAP_NET_ADMIN: every netfilter read and write (iptables-nft, nftables, IPVS, ipset), conntrack
  entry deletion, the nfacct counters.
- CAP_NET_RAW: iptables-legacy talks to the kernel over a raw socket; without it the legacy tables
  can be neither read nor written ("Permission denied (you must be root)"), so the legacy backend
  fails and `--iptables-backend auto` stops on a node whose legacy tables exist.
"""

from __future__ import annotations

import logging

log = logging.getLogger("netkit.capabilities")

NEEDED = (
    (12, "CAP_NET_ADMIN", "no rule can be read or written (iptables, nftables, IPVS, ipset), no conntrack "
                          "entry deleted, no nfacct counter made"),
    (13, "CAP_NET_RAW", "iptables-legacy can neither read nor write (the legacy backend fails; "
                        "--iptables-backend auto stops on a node whose legacy tables exist)"),
)


def effective(status: str) -> int:
    """The effective capability set from /proc/<pid>/status text."""
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def missing(eff: int) -> list[str]:
    """One line for each needed capability `eff` lacks: its name and what fails."""
    return [f"missing capability {name}: {fails}" for bit, name, fails in NEEDED if not eff >> bit & 1]


def report() -> None:
    try:
        with open("/proc/self/status") as f:
            eff = effective(f.read())
    except OSError:
        return
    for line in missing(eff):
        log.warning(line)
