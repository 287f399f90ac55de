"""The Corefile plugins beyond kubeadm's: kubernetes `endpoint_pod_names`, `hosts`, `rewrite`; tables
from CoreDNS's tests (coredns/coredns plugin/<name>/*_test.go) and READMEs."""

from __future__ import annotations

from ipaddress import ip_address
from typing import Any

import pytest

from netkit.dns.command import _build
from netkit.dns.names import name_from_text, name_to_text
from netkit.dns.resolver import RType, resolve
from netkit.dns.rewrite import NameRule, apply, revert
from netkit.dns.view import _label
from netkit.model.types import Endpoint, ObjectRef, Objects
from netkit.sources.manifests import decode_text
from tests.unit.test_dns_corefile import config

HEADLESS = """
apiVersion: v1
kind: Service
metadata: {name: hl, namespace: default}
spec: {clusterIP: None, ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: hl-1, namespace: default, labels: {kubernetes.io/service-name: hl}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 80}]
endpoints:
- {addresses: [10.244.1.7], targetRef: {kind: Pod, name: hello-abcde, namespace: default}}
- {addresses: [10.244.1.8], hostname: epname, targetRef: {kind: Pod, name: hello-fghij, namespace: default}}
- {addresses: [10.244.1.9]}
"""


# kubernetes_test.go TestEndpointHostname: (ip, hostname, pod name, endpoint_pod_names) → label
@pytest.mark.parametrize(("ip", "hostname", "pod", "mode", "expected"), [
    ("10.11.12.13", "", "", False, "10-11-12-13"),
    ("10.11.12.13", "epname", "", False, "epname"),
    ("10.11.12.13", "", "hello-abcde", False, "10-11-12-13"),
    ("10.11.12.13", "epname", "hello-abcde", False, "epname"),
    ("10.11.12.13", "epname", "hello-abcde", True, "epname"),
    ("10.11.12.13", "", "hello-abcde", True, "hello-abcde"),
    ("fd00:77:30::a", "", "", False, "fd00-77-30--a"),
    ("fd00:77:30::", "", "", False, "fd00-77-30--0"),
])
def test_endpoint_hostname(ip: str, hostname: str, pod: str, mode: bool, expected: str) -> None:
    addr = ip_address(ip)
    ep = Endpoint((addr,), hostname=hostname or None, target_ref=ObjectRef("default", pod) if pod else None)
    assert _label(ep, addr, mode) == expected


def _answers(options: str, name: str, qtype: str = "A") -> list[str]:
    c = config(f".:53 {{\n    kubernetes cluster.local {{\n{options}    }}\n}}\n")
    objects, problems = decode_text(HEADLESS, "hl.yaml")
    assert not problems
    view = _build(Objects.of(objects), c)
    reply = resolve(view, view.options, name_from_text(name), RType[qtype])
    return [str(r) for r in reply.answer] or [reply.rcode.name]


@pytest.mark.parametrize(("options", "name", "expected"), [
    ("", "10-244-1-7.hl.default.svc.cluster.local.", ["10-244-1-7.hl.default.svc.cluster.local. 5 IN A 10.244.1.7"]),
    ("", "hello-abcde.hl.default.svc.cluster.local.", ["NXDOMAIN"]),
    ("endpoint_pod_names\n", "hello-abcde.hl.default.svc.cluster.local.",
     ["hello-abcde.hl.default.svc.cluster.local. 5 IN A 10.244.1.7"]),
    ("endpoint_pod_names\n", "10-244-1-7.hl.default.svc.cluster.local.", ["NXDOMAIN"]),
    ("endpoint_pod_names\n", "epname.hl.default.svc.cluster.local.",
     ["epname.hl.default.svc.cluster.local. 5 IN A 10.244.1.8"]),
    ("endpoint_pod_names\n", "10-244-1-9.hl.default.svc.cluster.local.",
     ["10-244-1-9.hl.default.svc.cluster.local. 5 IN A 10.244.1.9"]),
    ("endpoint_pod_names\n", "7.1.244.10.in-addr.arpa.",
     ["7.1.244.10.in-addr.arpa. 5 IN PTR hello-abcde.hl.default.svc.cluster.local."]),
])
def test_endpoint_pod_names(options: str, name: str, expected: list[str]) -> None:
    qtype = "PTR" if name.endswith("arpa.") else "A"
    assert _answers(options, name, qtype) == expected


def test_endpoint_pod_names_takes_no_argument() -> None:
    with pytest.raises(ValueError, match=r"Corefile:3:28: kubernetes: endpoint_pod_names: unexpected 'x'"):
        config(".:53 {\n    kubernetes cluster.local {\n        endpoint_pod_names x\n    }\n}\n")


# --- hosts -------------------------------------------------------------------------------------------

# hosts_test.go's hostsExample and hostsTestCases (zones ".")
HOSTS_EXAMPLE = """
127.0.0.1 localhost localhost.domain
::1 localhost localhost.domain
10.0.0.1 example.org
::FFFF:10.0.0.2 example.com
"""


def _hosts(name: str, qtype: str, text: str = HOSTS_EXAMPLE, **options: Any) -> list[str]:
    from netkit.dns.hosts import HostsOptions, answer
    from netkit.dns.hosts import parse as parse_hosts
    opts = HostsOptions(**options)
    reply = answer(parse_hosts(text, opts), opts, name_from_text(name), int(RType[qtype]))
    if reply is None:
        return ["next plugin"]
    return [str(r) for r in reply.answer] or [reply.rcode.name]


@pytest.mark.parametrize(("name", "qtype", "expected"), [
    ("example.org.", "A", ["example.org. 3600 IN A 10.0.0.1"]),
    ("Example.ORG.", "A", ["example.org. 3600 IN A 10.0.0.1"]),
    ("example.com.", "A", ["example.com. 3600 IN A 10.0.0.2"]),
    ("localhost.", "AAAA", ["localhost. 3600 IN AAAA ::1"]),
    ("1.0.0.10.in-addr.arpa.", "PTR", ["1.0.0.10.in-addr.arpa. 3600 IN PTR example.org."]),
    ("2.0.0.10.in-addr.arpa.", "PTR", ["2.0.0.10.in-addr.arpa. 3600 IN PTR example.com."]),
    ("1.0.0.127.in-addr.arpa.", "PTR", ["1.0.0.127.in-addr.arpa. 3600 IN PTR localhost.",
                                        "1.0.0.127.in-addr.arpa. 3600 IN PTR localhost.domain."]),
    ("1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa.", "PTR",
     ["1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa. 3600 IN PTR localhost.",
      "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa. 3600 IN PTR localhost.domain."]),
    ("example.org.", "AAAA", ["NOERROR"]),  # the name exists: NODATA (no SOA: a hosts file has none)
    ("example.org.", "MX", ["NOERROR"]),
    ("9.0.0.10.in-addr.arpa.", "PTR", ["next plugin"]),  # an address it does not know: always the next one
    ("example.net.", "A", ["SERVFAIL"]),  # unknown, no fallthrough: CoreDNS's SERVFAIL
])
def test_hosts_lookup(name: str, qtype: str, expected: list[str]) -> None:
    assert _hosts(name, qtype) == expected


@pytest.mark.parametrize(("options", "name", "qtype", "expected"), [
    # ZONES: names outside are the next plugin's, file entries outside are dropped
    ({"zones": (("example", "org"),)}, "example.org.", "A", ["example.org. 3600 IN A 10.0.0.1"]),
    ({"zones": (("example", "org"),)}, "example.com.", "A", ["next plugin"]),
    ({"zones": (("example", "org"),)}, "2.0.0.10.in-addr.arpa.", "PTR", ["next plugin"]),
    ({"zones": (("example", "org"),)}, "www.example.org.", "A", ["SERVFAIL"]),
    # fallthrough [ZONES]: only NXDOMAIN-like names go on, and only in those zones
    ({"fallthrough": ((),)}, "example.net.", "A", ["next plugin"]),
    ({"fallthrough": ((),)}, "example.org.", "AAAA", ["NOERROR"]),
    ({"fallthrough": (("net",),)}, "example.net.", "A", ["next plugin"]),
    ({"fallthrough": (("net",),)}, "example.info.", "A", ["SERVFAIL"]),
    # ttl, no_reverse
    ({"ttl": 60}, "example.org.", "A", ["example.org. 60 IN A 10.0.0.1"]),
    ({"reverse": False}, "1.0.0.10.in-addr.arpa.", "PTR", ["next plugin"]),
    # inline entries come after the file's
    ({"inline": "10.0.0.9 example.org\n10.0.0.8 inline.example"}, "example.org.", "A",
     ["example.org. 3600 IN A 10.0.0.1", "example.org. 3600 IN A 10.0.0.9"]),
    ({"inline": "10.0.0.8 inline.example"}, "inline.example.", "A", ["inline.example. 3600 IN A 10.0.0.8"]),
])
def test_hosts_options(options: dict[str, object], name: str, qtype: str, expected: list[str]) -> None:
    assert _hosts(name, qtype, **options) == expected  # type: ignore[arg-type]


def test_hosts_file_lines_that_cannot_be_read_are_skipped() -> None:
    text = ("# a comment\nnot-an-address example.org\n10.0.0.1\n10.0.0.2 ok.example  # trailing\n"
            "fe80::1%eth0 z.example\n")
    assert _hosts("ok.example.", "A", text) == ["ok.example. 3600 IN A 10.0.0.2"]
    assert _hosts("z.example.", "AAAA", text) == ["z.example. 3600 IN AAAA fe80::1"]


def test_hosts_in_a_corefile() -> None:
    from netkit.dns.hosts import HostsOptions
    c = config(".:53 {\n    hosts /etc/custom.hosts example.org {\n        10.0.0.1 a.example.org\n"
               "        ttl 60\n        no_reverse\n        reload 10s\n        fallthrough\n    }\n"
               "    kubernetes cluster.local\n}\n")
    assert c.hosts == HostsOptions("/etc/custom.hosts", (("example", "org"),), "10.0.0.1 a.example.org", 60,
                                   False, 10.0, ((),))
    c = config(".:53 {\n    hosts\n    kubernetes cluster.local\n}\n")
    assert c.hosts == HostsOptions("/etc/hosts", ((),), "", 3600, True, 5.0, None)
    assert config(".:53 {\n    kubernetes cluster.local\n}\n").hosts is None


@pytest.mark.parametrize(("body", "message"), [
    ("hosts {\n ttl 0\n }", "Corefile:4:6: hosts: ttl: ttl provided is invalid"),
    ("hosts {\n ttl 65536\n }", "Corefile:4:6: hosts: ttl: ttl provided is invalid"),
    ("hosts {\n ttl x\n }", "Corefile:4:6: hosts: ttl: 'x' is not a number"),
    ("hosts {\n reload -1s\n }", "Corefile:4:9: hosts: reload: invalid negative duration for reload '-1s'"),
    ("hosts {\n reload\n }", "Corefile:4:2: hosts: reload: expected a duration (zero seconds to disable)"),
    ("hosts {\n no_reverse x\n }", "Corefile:4:13: hosts: no_reverse: unexpected 'x'"),
    ("hosts {\n fallthru\n }", "Corefile:4:2: hosts: fallthru: unknown property (not supported by netkit)"),
    ("hosts {\n 10.0.0.1\n }", "Corefile:4:2: hosts: '10.0.0.1': expected an address and at least one name"),
])
def test_hosts_options_are_checked(body: str, message: str) -> None:
    from netkit.dns.config import DEFAULTS, from_corefile
    from netkit.dns.corefile import parse
    text = f".:53 {{\n kubernetes cluster.local\n {body}\n}}\n"
    with pytest.raises(ValueError) as info:
        from_corefile(parse(text, "Corefile", {}), DEFAULTS, "Corefile")
    assert str(info.value) == message


# --- rewrite ----------------------------------------------------------------------------------------


def _rule(line: str) -> tuple[NameRule, ...]:
    c = config(f".:53 {{\n    {line}\n    kubernetes cluster.local\n}}\n")
    return c.rewrite


def _rewritten(lines: list[str], name: str) -> str | None:
    rules = tuple(r for line in lines for r in _rule(line))
    done = apply(rules, name_from_text(name))
    return None if done is None else name_to_text(done.name)


# name_test.go / rewrite_test.go / README: the question each rule list turns a name into
@pytest.mark.parametrize(("lines", "name", "expected"), [
    (["rewrite name a.coredns.rocks b.coredns.rocks"], "a.coredns.rocks.", "b.coredns.rocks."),
    (["rewrite name exact a.coredns.rocks b.coredns.rocks"], "A.CoreDNS.rocks.", "b.coredns.rocks."),
    (["rewrite name exact a.coredns.rocks b.coredns.rocks"], "x.a.coredns.rocks.", None),
    (["rewrite name prefix prefix to"], "prefix.coredns.rocks.", "to.coredns.rocks."),
    (["rewrite name prefix prefix to"], "prefixes.coredns.rocks.", None),  # FROM is `prefix.`
    (["rewrite name suffix .coredns.rocks .svc.cluster.local"], "web.default.coredns.rocks.",
     "web.default.svc.cluster.local."),
    (["rewrite name substring from.coredns.rocks to.coredns.rocks"], "a.from.coredns.rocks.", "a.to.coredns.rocks."),
    (["rewrite name regex (.*)-(us-west-1)\\.example\\.org {1}.service.{2}.consul"],
     "foo-us-west-1.example.org.", "foo.service.us-west-1.consul."),
    (["rewrite name regex (.*)\\.my\\.domain\\.$ {1}.default.svc.cluster.local"], "web.my.domain.",
     "web.default.svc.cluster.local."),
    # stop (the default) ends the list; continue hands the new name on
    (["rewrite name a.example b.example", "rewrite name b.example c.example"], "a.example.", "b.example."),
    (["rewrite continue name a.example b.example", "rewrite name b.example c.example"], "a.example.", "c.example."),
    (["rewrite stop name a.example b.example", "rewrite name b.example c.example"], "a.example.", "b.example."),
    (["rewrite name b.example c.example", "rewrite name a.example b.example"], "a.example.", "b.example."),
])
def test_rewrite_name(lines: list[str], name: str, expected: str | None) -> None:
    assert _rewritten(lines, name) == expected


def _reverted(line: str, name: str, records: list[tuple[str, str, str]]) -> list[str]:
    """The answer for the rewritten `name`, as the client gets it back."""
    from netkit.dns.resolver import Rcode, Record, Reply
    rules = _rule(line)
    done = apply(rules, name_from_text(name))
    assert done is not None
    def data(kind: str, text: str) -> Any:
        return ip_address(text) if kind in ("A", "AAAA") else name_from_text(text)
    reply = Reply(Rcode.NOERROR, tuple(Record(name_from_text(owner), RType[kind], 5, data(kind, value))
                                       for owner, kind, value in records))
    return [str(r) for r in revert(reply, done.reverts).answer]


@pytest.mark.parametrize(("line", "name", "records", "expected"), [
    # exact: always rewritten back, names below it too
    ("rewrite name exact a.example b.example", "a.example.", [("b.example.", "A", "10.0.0.1")],
     ["a.example. 5 IN A 10.0.0.1"]),
    ("rewrite name exact a.example b.example", "a.example.", [("b.example.", "CNAME", "x.b.example.")],
     ["a.example. 5 IN CNAME x.a.example."]),
    # prefix without answer auto: the client sees the rewritten owner (as CoreDNS)
    ("rewrite name prefix foo bar", "foo.example.", [("bar.example.", "A", "10.0.0.1")],
     ["bar.example. 5 IN A 10.0.0.1"]),
    ("rewrite name prefix foo bar answer auto", "foo.example.", [("bar.example.", "A", "10.0.0.1")],
     ["foo.example. 5 IN A 10.0.0.1"]),
    ("rewrite name suffix .my.domain .svc.cluster.local answer auto", "web.default.my.domain.",
     [("web.default.svc.cluster.local.", "A", "10.96.0.10")], ["web.default.my.domain. 5 IN A 10.96.0.10"]),
    ("rewrite name regex (.*)\\.my\\.domain {1}.default.svc.cluster.local answer auto", "web.my.domain.",
     [("web.default.svc.cluster.local.", "A", "10.96.0.10")], ["web.my.domain. 5 IN A 10.96.0.10"]),
    # reverter_test.go: answer name with groups
    ("rewrite name regex (core)\\.(dns)\\.(rocks) {2}.{1}.{3} answer name (dns)\\.(core)\\.(rocks) {2}.{1}.{3}",
     "core.dns.rocks.", [("dns.core.rocks.", "A", "10.0.0.1"), ("dns.core.rocks.", "A", "10.0.0.2")],
     ["core.dns.rocks. 5 IN A 10.0.0.1", "core.dns.rocks. 5 IN A 10.0.0.2"]),
    ("rewrite name regex (.*)\\.domain\\.uk {1}.cluster.local answer name (.*)\\.cluster\\.local {1}.domain.uk "
     "answer value (.*)\\.cluster\\.local {1}.domain.uk", "my.domain.uk.",
     [("my.cluster.local.", "CNAME", "srv1.my.cluster.local.")], ["my.domain.uk. 5 IN CNAME srv1.my.domain.uk."]),
])
def test_rewrite_answer(line: str, name: str, records: list[tuple[str, str, str]], expected: list[str]) -> None:
    assert _reverted(line, name, records) == expected


def test_rewrite_block_form() -> None:
    rules = _rule("rewrite stop {\n        name regex (.*)\\.my\\.domain\\.$ {1}.default.svc.cluster.local\n"
                  "        answer name (.*)\\.default\\.svc\\.cluster\\.local\\.$ {1}.my.domain\n    }")
    assert len(rules) == 1 and rules[0].stop and rules[0].match == "regex"
    assert [(m.source, m.target, m.owner) for m in rules[0].answers] == [
        ("(.*)\\.default\\.svc\\.cluster\\.local\\.$", "{1}.my.domain.", True)]


@pytest.mark.parametrize(("line", "message"), [
    ("rewrite name a.example", "2:13: rewrite: name: too few arguments for a name rule"),
    ("rewrite name wrong a.example b.example", "2:13: rewrite: name: name rule supports only exact, prefix, "
     "suffix, substring, and regex name matching, received: wrong"),
    ("rewrite name regex (.*)\\.example {1}.{2}.example", "2:13: rewrite: name: the rewrite regex pattern "
     "({1}.{2}.example.) uses more subexpressions than its corresponding matching regex pattern ((.*)\\.example)"),
    ("rewrite name regex ( x", "2:13: rewrite: name: invalid regex matching pattern: ("),
    ("rewrite name prefix a b answer", "2:13: rewrite: name: invalid arguments for prefix rule"),
    ("rewrite name prefix a b answer bogus", "2:13: rewrite: name: invalid type 'bogus' for answer rule"),
    ("rewrite name prefix a b answer auto answer name x y", "2:13: rewrite: name: auto name answer rule cannot"),
    ("rewrite type A AAAA", "2:13: rewrite: type: not supported by netkit"),
    ("rewrite edns0 local set 0xffee abc", "2:13: rewrite: edns0: not supported by netkit"),
])
def test_rewrite_is_checked(line: str, message: str) -> None:
    from netkit.dns.config import DEFAULTS, from_corefile
    from netkit.dns.corefile import parse
    with pytest.raises(ValueError) as info:
        from_corefile(parse(f".:53 {{\n    {line}\n    kubernetes cluster.local\n}}\n", "Corefile", {}), DEFAULTS,
                      "Corefile")
    assert str(info.value).startswith("Corefile:" + message), str(info.value)
