"""rule.read(): the one typed reader of an iptables rule (what summaries, trace, keep, kernel and
cleanup see inside a rule); words() splits as the shell does."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netkit.config import Config, parse_cidrs
from netkit.model import IPFamily, build
from netkit.rules.iptables.compile import compile
from netkit.rules.iptables.rule import ParseError, read, words
from tests.factories import endpoint, node, objects, service, slice_

SVC = '-d 10.96.0.10/32 -p tcp -m comment --comment "ns/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-ABC'
SEP = '-p tcp -m comment --comment "ns/web:http" -m recent --set --name KUBE-SEP-X --mask 255.255.255.255 ' \
      "--rsource -m tcp -j DNAT --to-destination 10.244.1.5:8080"


def test_a_service_rule_reads_into_its_parts() -> None:
    r = read(SVC)
    assert r.generic == ((False, "-d", "10.96.0.10/32"), (False, "-p", "tcp"))
    assert [m for m, _ in r.modules] == ["comment", "tcp"]
    assert r.modules[1][1] == ((False, "--dport", "80"),)
    assert (r.target, r.goto, r.protocol, r.first_module) == ("KUBE-SVC-ABC", False, "tcp", "comment")
    assert r.comment == "ns/web:http cluster IP"
    assert r.owner == ("ns", "web")
    assert r.dnat is None
    assert r.words == tuple(shlex.split(SVC))


def test_dnat_negation_goto_and_sets() -> None:
    assert read(SEP).dnat == "10.244.1.5:8080"
    assert read(SEP).target_option("--to-destination") == "10.244.1.5:8080"
    neg = read("! -s 10.244.0.0/16 -d 10.96.0.1/32 -m conntrack ! --ctstate RELATED,ESTABLISHED -g KUBE-X")
    assert neg.generic[0] == (True, "-s", "10.244.0.0/16")
    assert neg.modules == (("conntrack", ((True, "--ctstate", "RELATED,ESTABLISHED"),)),)
    assert (neg.target, neg.goto, neg.protocol) == ("KUBE-X", True, None)
    sets = read("-m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT")
    assert sets.match_sets == ("KUBE-CLUSTER-IP",)
    assert read("-j MARK --set-xmark 0x4000/0x4000").target_option("--set-xmark") == "0x4000/0x4000"


@pytest.mark.parametrize(("comment", "owner"), [
    ("ns/web:http cluster IP", ("ns", "web")), ("ns/web cluster IP", ("ns", "web")), ("ns/web", ("ns", "web")),
    ("kubernetes service portals", None), ("masquerade traffic for ns/web:http external destinations", None),
    ("Ns/web:http", None),
])
def test_owner_is_the_service_the_comment_starts_with(comment: str, owner: tuple[str, str] | None) -> None:
    assert read(f'-m comment --comment "{comment}" -j ACCEPT').owner == owner
    if " " not in comment:  # another spelling (restore text) reads the same
        assert read(f"-m comment --comment {comment} -j ACCEPT").owner == owner


def test_the_same_text_is_read_once() -> None:
    assert read(SVC) is read(SVC[:-1] + "C")


def test_unbalanced_quotes_are_a_parse_error() -> None:
    with pytest.raises(ParseError, match="cannot read rule"):
        read('-m comment --comment "ns/web -j ACCEPT')


_TEXT = st.text(alphabet=st.sampled_from(list('ab-/:" \t\'\\')), max_size=30)


@settings(max_examples=300, deadline=None)
@given(_TEXT)
def test_words_split_as_the_shell_does(text: str) -> None:
    try:
        expected = shlex.split(text)
    except ValueError:
        with pytest.raises(ParseError):
            words(text)
        return
    assert words(text) == expected


def test_every_compiled_rule_reads_back_to_its_words() -> None:
    cfg = Config(node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16"], "t"))
    objs = objects(node(), service("web", ip="10.96.0.10", sessionAffinity="ClientIP", type="NodePort",
                                   ports=[{"name": "http", "port": 80, "nodePort": 30080}]),
                   slice_("web", endpoints=[endpoint("10.244.1.5", "node-a"), endpoint("10.244.2.5", "node-b")]))
    ruleset = compile(build(objs, "node-a"), cfg, IPFamily.IPV4)
    texts = [r for chains in ruleset.tables.values() for rules in chains.values() for r in rules]
    assert len(texts) > 20
    for text in texts:
        assert read(text).words == tuple(shlex.split(text))
