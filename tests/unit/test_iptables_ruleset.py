"""render/parse round trips, and normalize(): any spelling iptables-restore accepts → iptables-save's.

The normalize table's right-hand sides were read from iptables-save (1.8.9, legacy and nft print the
same) after restoring the left-hand sides into a namespace; tests/netns re-checks them on the kernel.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netkit.model import IPFamily
from netkit.rules.iptables.ruleset import Ruleset, kernel_probability, normalize, parse, render

V4 = IPFamily.IPV4

NORMALIZE_CASES = [
    ('-m comment --comment "ns/svc:port cluster IP" -m tcp -p tcp -d 10.96.0.1 --dport 443 -j KUBE-SVC-X',
     '-d 10.96.0.1/32 -p tcp -m comment --comment "ns/svc:port cluster IP" -m tcp --dport 443 -j KUBE-SVC-X'),
    ('-m comment --comment "ns/svc:port cluster IP" -m tcp -p tcp -d 10.96.0.1 --dport 443 ! -s 10.244.0.0/16 '
     '-j KUBE-MARK-MASQ',
     '! -s 10.244.0.0/16 -d 10.96.0.1/32 -p tcp -m comment --comment "ns/svc:port cluster IP" -m tcp --dport 443 '
     '-j KUBE-MARK-MASQ'),
    ('-m comment --comment "ns/svc:port -> 10.0.0.1:80" -m recent --name KUBE-SEP-A --rcheck --seconds 10800 '
     '--reap -j KUBE-SEP-A',
     '-m comment --comment "ns/svc:port -> 10.0.0.1:80" -m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-A '
     '--mask 255.255.255.255 --rsource -j KUBE-SEP-A'),
    ('-m comment --comment "ns/svc:port -> 10.0.0.1:80" -m statistic --mode random --probability 0.3333333333 '
     '-j KUBE-SEP-A',
     '-m comment --comment "ns/svc:port -> 10.0.0.1:80" -m statistic --mode random --probability 0.33333333349 '
     '-j KUBE-SEP-A'),
    ('-m comment --comment ns/svc:port -s 10.0.0.1 -j KUBE-MARK-MASQ',
     '-s 10.0.0.1/32 -m comment --comment "ns/svc:port" -j KUBE-MARK-MASQ'),
    ('-m comment --comment ns/svc:port -m recent --name KUBE-SEP-A --set -m tcp -p tcp -j DNAT --to-destination '
     '10.0.0.1:80',
     '-p tcp -m comment --comment "ns/svc:port" -m recent --set --name KUBE-SEP-A --mask 255.255.255.255 --rsource '
     '-m tcp -j DNAT --to-destination 10.0.0.1:80'),
    ("-j MARK --or-mark 0x4000", "-j MARK --set-xmark 0x4000/0x4000"),
    ("-j MARK --xor-mark 0x4000", "-j MARK --set-xmark 0x4000/0x0"),
    ('-m comment --comment "ns/svc:port has no endpoints" -m tcp -p tcp -d 10.96.0.1 --dport 80 -j REJECT',
     '-d 10.96.0.1/32 -p tcp -m comment --comment "ns/svc:port has no endpoints" -m tcp --dport 80 -j REJECT '
     '--reject-with icmp-port-unreachable'),
    ('-m comment --comment "ns/svc:port has no endpoints" -m addrtype --dst-type LOCAL -m udp -p udp --dport 30080 '
     '-j REJECT',
     '-p udp -m comment --comment "ns/svc:port has no endpoints" -m addrtype --dst-type LOCAL -m udp --dport 30080 '
     '-j REJECT --reject-with icmp-port-unreachable'),
]


@pytest.mark.parametrize("given_rule, canonical", NORMALIZE_CASES)
def test_normalize(given_rule: str, canonical: str) -> None:
    assert normalize(given_rule, V4) == canonical
    assert normalize(canonical, V4) == canonical  # idempotent


def test_kernel_probability_matches_iptables_save() -> None:
    assert kernel_probability(0.3333333333) == "0.33333333349"
    assert kernel_probability(0.5) == "0.50000000000"
    assert kernel_probability(0.1) == "0.10000000009"


def test_parse_reads_restore_payloads_with_normalization() -> None:
    text = "*nat\n:KUBE-MARK-MASQ - [0:0]\n-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\nCOMMIT\n"
    rs = parse(text, V4, normalize_rules=True)
    assert rs.rules("nat", "KUBE-MARK-MASQ") == ("-j MARK --set-xmark 0x4000/0x4000",)


_names = st.from_regex(r"KUBE-[A-Z0-9]{3,12}", fullmatch=True)
_rules = st.lists(st.from_regex(r'-d 10\.[0-9]{1,2}\.0\.1/32 -p tcp -m comment --comment "[a-z/:-]{1,20}" '
                                r"-m tcp --dport [1-9][0-9]{0,3} -j (ACCEPT|DROP)", fullmatch=True), max_size=4)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["filter", "nat", "mangle"]),
                       st.dictionaries(_names, _rules.map(tuple), max_size=5), max_size=3))
def test_parse_render_round_trip(tables: dict[str, dict[str, tuple[str, ...]]]) -> None:
    rs = Ruleset(V4, tables)
    assert parse(render(rs), V4) == rs


def test_parse_reuses_equal_chains_of_a_known_ruleset() -> None:
    known = Ruleset(V4, {"nat": {"KUBE-A": ("-j ACCEPT", "-j DROP"), "KUBE-B": ("-j RETURN",)}})
    text = ("*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j ACCEPT\n-A KUBE-A -j DROP\n"
            "-A KUBE-B -j ACCEPT\nCOMMIT\n")
    from netkit.rules.iptables.ruleset import parse_lines
    got = parse_lines(text.splitlines(), V4, reuse=known)
    assert got.rules("nat", "KUBE-A") is known.rules("nat", "KUBE-A")
    assert got.rules("nat", "KUBE-B") == ("-j ACCEPT",)
    assert got == parse(text, V4)
