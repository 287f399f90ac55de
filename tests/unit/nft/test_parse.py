"""Reading `nft -j list table` JSON (netkit.nft.parse) item by item, and the short ways for
the element shapes netkit's sets hold: each gives what the general reader gives. (Against the real
kernel's dumps: tests/netns/test_nft_kernel.py.)"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from netkit.nft.parse import _any_element, element, items, parse
from netkit.nft.ruleset import Element

DOC = {"nftables": [
    {"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
    {"table": {"family": "ip", "name": "netkit", "handle": 1}},
    {"set": {"family": "ip", "name": "cluster-ips", "table": "netkit", "type": "ipv4_addr", "handle": 2,
             "elem": ["10.96.0.1", "10.96.0.10"]}},
    {"set": {"family": "ip", "name": "hairpin-endpoints", "table": "netkit", "type": ["ipv4_addr", "ipv4_addr"],
             "handle": 3, "elem": [{"concat": ["10.244.1.5", "10.244.1.5"]}]}},
    {"map": {"family": "ip", "name": "endpoints-tcp-00", "table": "netkit", "type": "integer", "handle": 4,
             "map": "ipv4_addr . inet_service", "elem": [[7, {"concat": ["10.244.1.5", 8080]}]]}},
    {"map": {"family": "ip", "name": "service-ips", "table": "netkit", "handle": 5, "map": "verdict",
             "type": ["ipv4_addr", "inet_proto", "inet_service"],
             "elem": [[{"concat": ["10.96.0.10", "tcp", 80]}, {"goto": {"target": "svc-x"}}]]}},
    {"chain": {"family": "ip", "table": "netkit", "name": "svc-x", "handle": 6}},
    {"rule": {"family": "ip", "table": "netkit", "chain": "svc-x", "handle": 7, "expr": [
        {"dnat": {"family": "ip", "addr": {"map": {"key": {"numgen": {"mode": "random", "mod": 1, "offset": 7}},
                                                    "data": "@endpoints-tcp-00"}}}}]}},
    {"table": {"family": "ip6", "name": "netkit", "handle": 8}},
]}


@pytest.mark.parametrize("indent", [None, 2])
def test_items_are_the_documents_objects_one_by_one(indent: int | None) -> None:
    assert list(items(json.dumps(DOC, indent=indent))) == DOC["nftables"]
    assert list(items('{"nftables": []}')) == []
    assert list(items(json.dumps({"other": 1, "nftables": [{"table": {}}]}))) == [{"table": {}}]


def test_a_dump_reads_into_a_ruleset() -> None:
    rs = parse(json.dumps(DOC))
    assert rs is not None
    sets = rs.set_map()
    assert sets["cluster-ips"].elements == {Element("10.96.0.1"), Element("10.96.0.10")}
    assert sets["hairpin-endpoints"].elements == {Element("10.244.1.5 . 10.244.1.5")}
    assert sets["endpoints-tcp-00"].elements == {Element("7", "10.244.1.5 . 8080")}
    assert sets["service-ips"].elements == {Element("10.96.0.10 . tcp . 80", "goto svc-x")}
    assert rs.chain_map()["svc-x"].rules == ("dnat ip to numgen random mod 1 offset 7 map @endpoints-tcp-00",)
    assert parse(json.dumps(DOC), "ip6") is not None and parse(json.dumps(DOC), "ip", "other") is None


SCALAR = st.one_of(st.integers(0, 2**32), st.sampled_from(["10.0.0.1", "tcp", "fd00::1"]))
VALUE = st.one_of(SCALAR, st.builds(lambda xs: {"concat": xs}, st.lists(SCALAR, min_size=2, max_size=3)),
                  st.builds(lambda a, n: {"prefix": {"addr": a, "len": n}}, st.just("10.0.0.0"), st.integers(8, 32)))
DATA = st.one_of(VALUE, st.sampled_from([{"goto": {"target": "svc-a"}}, {"jump": {"target": "b"}}, {"accept": None},
                                         {"drop": None}]))
ELEMENT = st.one_of(VALUE, st.tuples(VALUE, DATA).map(list))


@given(ELEMENT)
def test_the_short_ways_read_as_the_general_reader(e: object) -> None:
    assert element(e) == _any_element(e)


def test_a_dump_read_like_a_committed_ruleset_shares_what_is_equal() -> None:
    text = json.dumps(DOC)
    committed = parse(text)
    assert committed is not None
    edited = json.loads(text)
    edited["nftables"][2]["set"]["elem"] = ["10.96.0.1"]  # an element of cluster-ips deleted
    live = parse(json.dumps(edited), like=committed)
    assert live is not None and live != committed
    assert live.set_map()["cluster-ips"].elements == {Element("10.96.0.1")}
    assert live.set_map()["service-ips"] is committed.set_map()["service-ips"]
    assert live.chain_map()["svc-x"] is committed.chain_map()["svc-x"]
    assert parse(text, like=committed) == committed
    assert parse(text, "ip6", like=committed) is not None  # another family's table shares nothing
