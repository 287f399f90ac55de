"""`netkit run` says at start which capability it lacks and what fails without it, one line each."""

from __future__ import annotations

from netkit.runtime.capabilities import effective, missing

NET_ADMIN, NET_RAW = 1 << 12, 1 << 13
STATUS = "Name:\tnetkit\nCapInh:\t0000000000000000\nCapPrm:\t0000000000003000\nCapEff:\t{eff:016x}\n"


def test_both_granted_says_nothing() -> None:
    assert missing(effective(STATUS.format(eff=NET_ADMIN | NET_RAW))) == []


def test_each_missing_capability_is_one_line_naming_what_fails() -> None:
    only_admin = missing(effective(STATUS.format(eff=NET_ADMIN)))
    assert len(only_admin) == 1 and only_admin[0].startswith("missing capability CAP_NET_RAW: iptables-legacy")
    none = missing(effective(STATUS.format(eff=0)))
    assert [line.split(":")[0] for line in none] == ["missing capability CAP_NET_ADMIN",
                                                     "missing capability CAP_NET_RAW"]
    assert all("\n" not in line for line in none)
