"""What the tests must leave as they found it in the machine's own network namespace, and the check
that they do (tests/conftest.py runs it around the whole session, as root).

Every kernel test runs in namespaces it creates; nothing may change the machine's own. `read()`
takes a picture of what a stray command would change there, without changing anything itself: the
iptables-legacy tables that exist (`/proc/net/ip_tables_names`: reading a table by name would
create it), their rules and those of every nftables table (iptables-nft's included), the ipsets,
the interfaces, addresses and routes, and the sysctls netkit and the lab write in their
namespaces. Counters, lifetimes and timestamps are left out: traffic on the machine changes them.
`changes(before, after)` says what differs, a line per item. What a kernel module does by being
loaded while the tests run is not a change to look for: a listing that could not be read once (the
module was not there), a sysctl that appears, the fallback devices some modules create in every
namespace (tunl0, gre0, sit0, ifb0, …).

Set NETKIT_ROOT_GUARD=each to check around every test instead (slower; run with `-n 0` so a
change is blamed on the test that made it).
"""

from __future__ import annotations

import difflib
import re
import shutil
import subprocess
from pathlib import Path

# The sysctls netkit (runtime/sysctls.py, ipvs/kernel.py) and the lab (lab/wiring.py) write, where
# this kernel has them.
SYSCTLS = (
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/ipv4/conf/all/rp_filter",
    "net/ipv4/conf/default/rp_filter",
    "net/ipv4/conf/all/arp_ignore",
    "net/ipv4/conf/all/arp_announce",
    "net/ipv6/conf/all/forwarding",
    "net/ipv6/conf/all/disable_ipv6",
    "net/ipv6/conf/all/accept_dad",
    "net/ipv6/conf/default/accept_dad",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/netfilter/nf_conntrack_tcp_be_liberal",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
    "net/netfilter/nf_conntrack_udp_timeout",
    "net/netfilter/nf_conntrack_udp_timeout_stream",
)

_COUNTERS = re.compile(r" \[\d+:\d+\]|counter packets \d+ bytes \d+")
_LIFETIMES = re.compile(r" (valid_lft|preferred_lft|expires) \S+")


def normalize(text: str) -> list[str]:
    """A tool's listing without what traffic and time change: comment lines (iptables-save's dates),
    counters, address and route lifetimes; blank lines and trailing spaces dropped."""
    lines = (_LIFETIMES.sub("", _COUNTERS.sub("", line)).rstrip() for line in text.splitlines())
    return [line for line in lines if line and not line.lstrip().startswith("#")]


# Created in every namespace by their modules when loaded (ipip, ip_gre, sit, ip6_tunnel, ip6_gre,
# ip_vti, ip6_vti, ifb, dummy, bonding): a test loading one is no change to the namespace.
_FALLBACK_DEVICES = re.compile(r"(tunl0|gre0|gretap0|erspan0|sit0|ip6tnl0|ip6gre0|ip6gretap0|ip6erspan0|"
                               r"ip_vti0|ip6_vti0|ifb\d+|dummy\d+|bond0)")


def _tool(*argv: str) -> list[str] | None:
    """The tool's normalized listing; None when it cannot be read (not installed, its module absent)."""
    if shutil.which(argv[0]) is None:
        return None
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    return normalize(proc.stdout) if proc.returncode == 0 else None


def _file(path: Path) -> list[str]:
    """A /proc file's lines; none when it is absent (its module is not loaded: nothing is there)."""
    try:
        return normalize(path.read_text())
    except OSError:
        return []


def read() -> dict[str, list[str] | None]:
    """The picture: per item, its normalized lines (None: unreadable now). Reads only (see above)."""
    sysctls = Path("/proc/sys")
    return {
        "iptables-legacy tables": _file(Path("/proc/net/ip_tables_names")),
        "ip6tables-legacy tables": _file(Path("/proc/net/ip6_tables_names")),
        "iptables-legacy rules": _tool("iptables-legacy-save"),  # no -t: only the tables that exist
        "ip6tables-legacy rules": _tool("ip6tables-legacy-save"),
        "nftables ruleset": _tool("nft", "list", "ruleset"),
        "ipsets": _tool("ipset", "list", "-n"),
        "interfaces": _tool("ip", "-o", "link", "show"),
        "addresses": _tool("ip", "-o", "addr", "show"),
        "IPv4 routes": _tool("ip", "-4", "route", "show", "table", "all"),
        "IPv6 routes": _tool("ip", "-6", "route", "show", "table", "all"),
        "sysctls": [f"{key} = {' '.join(_file(sysctls / key))}" for key in SYSCTLS if (sysctls / key).exists()],
    }


def _link_names(lines: list[str]) -> list[str]:
    """`ip -o link` lines reduced to the interface names (flags and state change on their own),
    without the modules' fallback devices, nor veths whose peer is in another namespace: a
    container's, another test run's, or this run's (tests/leftovers.py blames those)."""
    names = (line.split(": ", 2)[1].split("@")[0] for line in lines if ": " in line and " link-netns" not in line)
    return sorted(n for n in names if not _FALLBACK_DEVICES.fullmatch(n))


def changes(before: dict[str, list[str] | None], after: dict[str, list[str] | None]) -> list[str]:
    """What differs, per item readable both times: its lines removed (-) and added (+); of the
    sysctls, those there before."""
    out: list[str] = []
    for item in before.keys() & after.keys():
        old, new = before[item], after[item]
        if old is None or new is None:
            continue
        if item == "interfaces":
            old, new = _link_names(old), _link_names(new)
        if item == "sysctls":
            known = {line.split(" = ")[0] for line in old}
            new = [line for line in new if line.split(" = ")[0] in known]
        if old == new:
            continue
        diff = [d for d in difflib.unified_diff(old, new, lineterm="", n=0) if d[:1] in "+-" and d[:3] not in
                ("+++", "---")]
        out += [f"{item}: {d}" for d in diff] or [f"{item}: reordered"]
    return sorted(out)
