"""The typed rule reader (netkit.nft.rule) against the compiler: every rule `compile`
writes reads back into typed statements whose text is the rule again (text → typed → text), reading
that text gives the same value, and the readers that use it (summaries, keep, trace) see the same
structure whatever spelling nft lists. Rules netkit never writes are refused, never guessed at.
(JSON dump → typed against the real kernel: tests/netns/test_nft_kernel.py.)
"""

from __future__ import annotations

from dataclasses import replace
from ipaddress import ip_network

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netkit.config import Config
from netkit.model import IPFamily
from netkit.nft import rule
from netkit.nft.parse import FOREIGN
from netkit.nft.rule import (
    Dnat,
    MapLookup,
    Match,
    Meta,
    NotUnderstood,
    Numgen,
    Payload,
    SetRef,
    Value,
    Verdict,
    read,
)
from netkit.rules.nftables.compile import compile
from tests.unit.nft_states import node_states

CONFIG = Config(cluster_cidrs=(ip_network("10.244.0.0/16"), ip_network("fd00:244::/48")))
CONFIGS = st.sampled_from([
    CONFIG,
    replace(CONFIG, masquerade_all=True),
    replace(CONFIG, conntrack_tcp_be_liberal=True),
    replace(CONFIG, detect_local_mode="BridgeInterface", bridge_interface="cbr0"),
    replace(CONFIG, detect_local_mode="InterfaceNamePrefix", interface_name_prefix="veth"),
])


@settings(max_examples=150, deadline=None)
@given(data=st.data(), family=st.sampled_from(list(IPFamily)), config=CONFIGS)
def test_every_compiled_rule_reads_back_to_its_own_text(data: st.DataObject, family: IPFamily,
                                                        config: Config) -> None:
    rs = compile(data.draw(node_states(family)), config, family)
    for chain in rs.chains:
        for text in chain.rules:
            typed = read(text)
            assert str(typed) == text, chain.name
            assert read(str(typed)) == typed


def test_a_rule_reads_into_typed_statements() -> None:
    typed = read("meta l4proto tcp dnat ip to numgen random mod 2 offset 939057152 map @endpoints-tcp-0e")
    assert typed.statements == (
        Match(Meta("l4proto"), "==", Value("tcp")),
        Dnat("ip", MapLookup(Numgen(2, 939057152), SetRef("endpoints-tcp-0e"))),
    )
    assert rule.slots(MapLookup(Numgen(2, 939057152), SetRef("x"))) == frozenset({"939057152", "939057153"})
    assert read("ip6 saddr != fd00:244::/48 jump mark-for-masquerade").statements == (
        Match(Payload("ip6", "saddr"), "!=", Value("fd00:244::/48")), Verdict("jump", "mark-for-masquerade"))
    assert str(read("meta mark & 0x4000 == 0x0 return")) == "meta mark & 0x4000 == 0x0 return"
    assert read("reject with tcp reset").statements == (Verdict("reject", "tcp reset"),)


@pytest.mark.parametrize("text", [
    f"{FOREIGN} counter",
    "ip daddr 10.0.0.1 log prefix mine",
    "oifname \"eth0\" accept",
    "meta skuid 0 accept",
    "numgen random mod x",
    "dnat ip to numgen random mod 2 @endpoints",
])
def test_rules_netkit_never_writes_are_not_understood(text: str) -> None:
    with pytest.raises(NotUnderstood):
        read(text)
    assert rule.readable(text) is None


def test_endpoints_of_each_dnat_spelling() -> None:
    assert rule.host("[fd00::1]:8080") == "fd00::1" and rule.host("10.0.0.1:80") == "10.0.0.1"
    anon = read("dnat ip6 to numgen random mod 2 map { 0 : fd00::1 . 80, 1 : fd00::2 . 80 }")
    (d,) = anon.dnats()
    assert rule.endpoints(d, {}) == ["[fd00::1]:80", "[fd00::2]:80"]
    (literal,) = read("meta l4proto tcp dnat ip to 10.0.0.1:8080").dnats()
    assert rule.endpoints(literal, {}) == ["10.0.0.1:8080"]


def _words_targets(rules: tuple[str, ...]) -> set[str]:
    return {t for r in rules for verb, t in zip(r.split(), r.split()[1:], strict=False) if verb in ("jump", "goto")}


def _words_sets(rules: tuple[str, ...]) -> set[str]:
    return {w.lstrip("@").rstrip(",") for r in rules for w in r.split() if w.startswith("@")}


@settings(max_examples=100, deadline=None)
@given(data=st.data(), family=st.sampled_from(list(IPFamily)), config=CONFIGS)
def test_the_references_the_planner_follows_are_every_name_in_the_rules(data: st.DataObject, family: IPFamily,
                                                                         config: Config) -> None:
    """What plan and the fake kernel follow (Chain.targets / set_refs, read by rule.py) is every chain
    after a jump or goto and every @set in the rule text: nothing is missed."""
    rs = compile(data.draw(node_states(family)), config, family)
    for chain in rs.chains:
        assert chain.targets() == _words_targets(chain.rules), chain.name
        assert chain.set_refs() == _words_sets(chain.rules), chain.name
