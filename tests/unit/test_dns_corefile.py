"""The Corefile: coredns/caddy's grammar (tokens, blocks, snippets, import, environment variables),
the plugins and options netkit maps onto its DnsConfig (with CoreDNS's defaults, from the plugins'
READMEs), and the one-line refusal of everything else, with its line and column."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from netkit.dns.config import COMPATIBILITY, DEFAULTS, DnsConfig, from_corefile, load, plugins_enabled
from netkit.dns.corefile import CorefileError, lex, parse
from netkit.errors import NetkitError
from tests.conftest import ROOT

# kubeadm's Corefile (cmd/kubeadm/app/phases/addons/dns/manifests.go, DNSDomain cluster.local), verbatim.
KUBEADM = """.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30 {
       disable success cluster.local
       disable denial cluster.local
    }
    loop
    reload
    loadbalance
}
"""
KUBEADM_BEFORE_1_31 = KUBEADM.replace(""" {
       disable success cluster.local
       disable denial cluster.local
    }""", "")

# The options of each plugin in CoreDNS's READMEs (coredns/coredns plugin/<name>/README.md, Syntax).
REFERENCE = {
    "errors": {"stacktrace", "consolidate"},
    "health": {"lameduck"},
    "ready": set(),
    "prometheus": set(),
    "kubernetes": {"endpoint", "tls", "kubeconfig", "namespaces", "labels", "namespace_labels", "pods",
                   "endpoint_pod_names", "ttl", "noendpoints", "fallthrough", "ignore", "multicluster",
                   "startup_timeout", "apiserver_qps", "apiserver_burst", "apiserver_max_inflight"},
    "forward": {"except", "force_tcp", "prefer_udp", "expire", "max_fails", "tls", "tls_servername", "policy",
                "health_check", "max_concurrent", "next", "failover", "failfast_all_unhealthy_upstreams"},
    "cache": {"success", "denial", "prefetch", "serve_stale", "servfail", "disable", "keepttl"},
    "loop": set(), "reload": set(), "loadbalance": set(), "log": set(), "rewrite": set(),
    "hosts": {"ttl", "no_reverse", "reload", "fallthrough"},
    "autopath": set(), "bind": set(),
}


def config(text: str, env: dict[str, str] | None = None, **files: str) -> DnsConfig:
    def read(path: str) -> str:
        return files[Path(path).name]
    return from_corefile(parse(text, "Corefile", env or {}, read), DEFAULTS, "Corefile")


def refused(text: str) -> str:
    with pytest.raises(CorefileError) as exc:
        config(text)
    return str(exc.value)


def block(*lines: str) -> str:
    return ".:53 {\n    kubernetes cluster.local\n" + "".join(f"    {line}\n" for line in lines) + "}\n"


# --- the grammar ----------------------------------------------------------------------------------


def test_tokens_quotes_comments_lines_and_columns() -> None:
    toks = lex('a "b c" d#e\n  "x\\"y\nz" # all comment\n{ }', "F")
    assert [(t.text, t.line, t.col) for t in toks] == [
        ("a", 1, 1), ("b c", 1, 3), ("d", 1, 9), ('x"y\nz', 2, 3), ("{", 4, 1), ("}", 4, 3)]
    assert toks[3].end_line == 3


def test_environment_variables_both_syntaxes() -> None:
    c = config(".:{$PORT} {\n kubernetes {%ZONE%}\n ready :{$NOPE}81\n}", {"PORT": "1053", "ZONE": "k.test"})
    assert (c.listen, c.zone, c.ready_listen) == ("[::]:1053", "k.test", ":81")


def test_snippets_and_imports_of_files_and_globs(tmp_path: Path) -> None:
    (tmp_path / "a.server").write_text("corp.example:53 {\n  forward . 10.0.0.5\n}\n")
    (tmp_path / "b.override").write_text("log\n")
    main = tmp_path / "Corefile"
    main.write_text("(base) {\n  errors\n  loop\n}\n.:53 {\n  import base\n  kubernetes cluster.local\n"
                    "  import *.override\n  import nothing-*.here\n}\nimport *.server\n")
    c = load(str(main), env={})
    assert c.loop_check and c.log_queries
    assert c.stub_domains == ("corp.example=10.0.0.5",)


def test_a_directive_after_an_import_starts_its_own_line() -> None:
    c = config("(s) {\n ready\n}\n.:53 {\n kubernetes cluster.local\n loop\n import s\n errors\n}\n")
    assert c.ready_listen == ":8181" and c.loop_check


def test_single_block_without_braces_and_comma_separated_keys() -> None:
    assert config(".:5353\nkubernetes cluster.local\n").listen == "[::]:5353"
    c = config(".:53 {\n kubernetes cluster.local\n}\na.test:53,\n b.test:53 {\n forward . 10.0.0.1\n}\n")
    assert c.stub_domains == ("a.test=10.0.0.1", "b.test=10.0.0.1")


@pytest.mark.parametrize(("text", "where", "reason"), [
    (".:53 {\n kubernetes cluster.local\n", "Corefile:1:6", "this '{' is never closed"),
    (".:53 {\n kubernetes cluster.local\n}\n}\n", "Corefile:4:1", "expected '{'"),
    ('.:53 {\n ready "x\n', "Corefile:2:8", "unterminated quoted string"),
    ("(s) {\n loop\n}\n(s) {\n}\n", "Corefile:4:1", "redeclaration of previously declared snippet s"),
    (".:53 {\n import missing.conf\n}\n", "Corefile:2:9", "file to import not found"),
    (".:53 {\n import a b\n}\n", "Corefile:2:2", "expected one argument"),
    ("(s) {\n import s\n}\n.:53 {\n import s\n}\n", "Corefile:2:2", "an import cycle?"),
])
def test_syntax_errors_name_line_and_column(text: str, where: str, reason: str) -> None:
    message = refused(text)
    assert message.startswith(where + ": ") and reason in message, message


# --- kubeadm's Corefile: the flags' defaults -------------------------------------------------------


@pytest.mark.parametrize("text", [KUBEADM, KUBEADM_BEFORE_1_31])
def test_kubeadms_corefile_is_the_flags_defaults(text: str) -> None:
    c = config(text)
    differ = {f.name: getattr(c, f.name) for f in dataclasses.fields(DnsConfig)
              if getattr(c, f.name) != getattr(DEFAULTS, f.name)}
    assert differ == {"listen": "[::]:53", "lameduck": 5.0, "reload": 30.0, "reload_jitter": 15.0,
                      "conf": "Corefile"}


def test_the_plugins_enabled_are_the_corefiles() -> None:
    assert plugins_enabled(config(KUBEADM)) == ("cache", "errors", "forward", "health", "kubernetes", "loadbalance",
                                                "loop", "prometheus", "ready", "reload")
    assert plugins_enabled(config(block("log"))) == ("errors", "kubernetes", "log")


def test_the_flags_and_the_corefile_cannot_both_say_it(tmp_path: Path) -> None:
    (tmp_path / "Corefile").write_text(KUBEADM)
    proc = subprocess.run([sys.executable, "-m", "netkit", "dns", "--conf", str(tmp_path / "Corefile"), "--ttl", "5"],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr == "netkit: error: --ttl: cannot be combined with --conf (the Corefile sets it)\n"


def test_an_unsupported_plugin_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "Corefile").write_text(KUBEADM.replace("    loop\n", "    loop\n    chaos\n"))
    proc = subprocess.run([sys.executable, "-m", "netkit", "dns", "--conf", str(tmp_path / "Corefile")],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    where = f"{tmp_path / 'Corefile'}:21:5"
    assert proc.stderr == f"netkit: error: {where}: chaos: unknown plugin (not supported by netkit)\n"


def test_autopath_needs_pods_verified_and_says_where(tmp_path: Path) -> None:
    (tmp_path / "Corefile").write_text(KUBEADM.replace("    loop\n", "    loop\n    autopath @kubernetes\n"))
    proc = subprocess.run([sys.executable, "-m", "netkit", "dns", "--conf", str(tmp_path / "Corefile")],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr == f"netkit: error: {tmp_path / 'Corefile'}:21:14: autopath: @kubernetes needs the " \
                          "kubernetes plugin's pods verified\n"
    verified = KUBEADM.replace("pods insecure", "pods verified")
    verified = verified.replace("    loop\n", "    loop\n    autopath @kubernetes\n")
    c = config(verified)
    assert c.autopath and "autopath" in plugins_enabled(c)


# --- the compatibility table against CoreDNS's READMEs ---------------------------------------------


def test_the_table_covers_every_option_of_the_readmes_and_no_other() -> None:
    table: dict[str, set[str]] = {}
    for s in COMPATIBILITY:
        table.setdefault(s.plugin, set()).update({s.option} - {""})
    assert table == REFERENCE
    fields = {f.name for f in dataclasses.fields(DnsConfig)}
    assert all(s.field in fields for s in COMPATIBILITY if s.field)
    assert all(s.field for s in COMPATIBILITY if s.supported and not s.note)  # a no-op says why


def _use(s: Any) -> str:
    """A Corefile that uses plugin `s.plugin` with option `s.option`."""
    if s.plugin == "kubernetes":
        return f".:53 {{\n    kubernetes cluster.local {{\n        {s.option} x\n    }}\n}}\n"
    opening = {"forward": "forward . 10.0.0.1", "cache": "cache 30"}.get(s.plugin, s.plugin)
    return f".:53 {{\n    kubernetes cluster.local\n    {opening} {{\n        {s.option} x\n    }}\n}}\n"


@pytest.mark.parametrize("s", [s for s in COMPATIBILITY if not s.supported], ids=lambda s: f"{s.plugin}.{s.option}")
def test_every_refused_option_is_refused_with_its_line_and_column(s: Any) -> None:
    if s.option:
        assert refused(_use(s)) == f"Corefile:{4 if s.plugin != 'kubernetes' else 3}:9: {s.plugin}: {s.option}: " \
                                   "not supported by netkit"
    else:
        assert refused(block(f"{s.plugin} x")) == f"Corefile:3:5: {s.plugin}: not supported by netkit"


def test_unknown_plugins_and_properties_are_refused() -> None:
    assert refused(block("whoami")) == "Corefile:3:5: whoami: unknown plugin (not supported by netkit)"
    assert refused(block("forward . 10.0.0.1 {", "  bogus", "}")) == \
        "Corefile:4:7: forward: bogus: unknown property (not supported by netkit)"


# --- each option, as the README says -------------------------------------------------------------


@pytest.mark.parametrize(("lines", "expected"), [
    # no plugin: off (a Corefile says what runs)
    ((), {"ttl": 5, "pods": "disabled", "loadbalance": False, "upstreams": (), "resolv_conf": "", "cache_ttl": 0,
          "metrics_listen": "", "health_listen": "", "ready_listen": "", "loop_check": False, "log_queries": False,
          "lameduck": 0.0, "reload": 0.0}),
    (("bind 127.0.0.1",), {"listen": "127.0.0.1:53"}),
    (("bind ::1",), {"listen": "[::1]:53"}),
    (("health",), {"health_listen": ":8080", "lameduck": 0.0}),
    (("health 127.0.0.1:8081 {", "lameduck 1m30s", "}"), {"health_listen": "127.0.0.1:8081", "lameduck": 90.0}),
    (("ready",), {"ready_listen": ":8181"}),
    (("ready 127.0.0.1:9999",), {"ready_listen": "127.0.0.1:9999"}),
    (("prometheus",), {"metrics_listen": "127.0.0.1:9153"}),  # localhost:9153
    (("prometheus :9253",), {"metrics_listen": ":9253"}),
    (("forward . 10.0.0.1 dns://10.0.0.2:5353 [fd00::1]:53",),
     {"upstreams": ("10.0.0.1", "10.0.0.2:5353", "[fd00::1]:53"), "resolv_conf": "", "max_concurrent": 0,
      "policy": "random", "health_check": 0.5, "max_fails": 2}),
    (("forward . /etc/resolv.conf",), {"upstreams": (), "resolv_conf": "/etc/resolv.conf"}),
    (("forward . 10.0.0.1 {", "policy sequential", "health_check 2s", "max_fails 5", "max_concurrent 10",
      "expire 30s", "prefer_udp", "}"),
     {"policy": "sequential", "health_check": 2.0, "max_fails": 5, "max_concurrent": 10}),
    (("forward . 10.0.0.1 {", "policy round_robin", "max_fails 0", "health_check 0s", "}"),
     {"policy": "round_robin", "max_fails": 0, "health_check": 0.0}),
    (("cache",), {"cache_ttl": 3600, "cache_min_ttl": 5, "cache_size": 19968, "cache_servfail": 5.0}),
    (("cache 30",), {"cache_ttl": 30}),
    (("cache 300 {", "success 5000", "denial 2500", "servfail 10s", "}"),
     {"cache_ttl": 300, "cache_size": 7500, "cache_servfail": 10.0}),
    (("cache {", "success 100 60 1", "denial 100 60 1", "}"), {"cache_ttl": 60, "cache_min_ttl": 1, "cache_size": 200}),
    (("cache {", "servfail 0", "}"), {"cache_servfail": 0.0}),
    (("cache",), {"cache_prefetch": 0, "cache_serve_stale": 0.0, "cache_keepttl": False}),  # README: all off
    (("cache 30 {", "prefetch 10", "}"),
     {"cache_prefetch": 10, "cache_prefetch_duration": 60.0, "cache_prefetch_percentage": 10}),
    (("cache {", "prefetch 2 30s 50%", "serve_stale 10m verify", "keepttl", "}"),
     {"cache_prefetch": 2, "cache_prefetch_duration": 30.0, "cache_prefetch_percentage": 50,
      "cache_serve_stale": 600.0, "cache_serve_stale_verify": True, "cache_keepttl": True}),
    (("cache {", "serve_stale", "}"), {"cache_serve_stale": 3600.0, "cache_serve_stale_verify": False}),
    (("loop",), {"loop_check": True}),
    (("reload",), {"reload": 30.0, "reload_jitter": 15.0}),
    (("reload 10s",), {"reload": 10.0, "reload_jitter": 5.0}),  # jitter at most half the interval
    (("reload 10s 2s",), {"reload": 10.0, "reload_jitter": 2.0}),
    (("loadbalance",), {"loadbalance": True}),
    (("loadbalance round_robin",), {"loadbalance": True}),
    (("log",), {"log_queries": True}),
    (("errors",), {}),
])
def test_plugin_options(lines: tuple[str, ...], expected: dict[str, Any]) -> None:
    c = config(block(*lines))
    assert {k: getattr(c, k) for k in expected} == expected


@pytest.mark.parametrize(("options", "expected"), [
    ((), {"zone": "cluster.local", "ttl": 5, "pods": "disabled"}),
    (("pods verified", "ttl 0"), {"pods": "verified", "ttl": 0}),
    (("pods insecure", "ttl 3600"), {"pods": "insecure", "ttl": 3600}),
    (("endpoint https://10.0.0.1:6443",), {"master": "https://10.0.0.1:6443"}),
    (("kubeconfig /etc/kube.conf admin@k",), {"kubeconfig": "/etc/kube.conf", "context": "admin@k"}),
    (("kubeconfig /etc/kube.conf",), {"kubeconfig": "/etc/kube.conf", "context": ""}),
])
def test_kubernetes_options(options: tuple[str, ...], expected: dict[str, Any]) -> None:
    body = "".join(f"        {o}\n" for o in options)
    c = config(f".:53 {{\n    kubernetes Cluster.Local. {{\n{body}    }}\n}}\n")
    assert {k: getattr(c, k) for k in expected} == expected


@pytest.mark.parametrize(("lines", "where", "reason"), [
    (("health {", "lameduck soon", "}"), "4:14", "health: lameduck: 'soon' is not a duration"),
    (("forward . 10.0.0.1 {", "policy fastest", "}"), "4:12", "forward: policy: unknown policy 'fastest'"),
    (("forward . 10.0.0.1 {", "max_fails -1", "}"), "4:15", "max_fails can't be negative"),
    (("forward . 10.0.0.1 {", "health_check 1s no_rec", "}"), "4:21", "health_check no_rec: not supported"),
    (("forward . tls://10.0.0.1",), "3:15", "only dns:// is supported"),
    (("forward example.org 10.0.0.1",), "3:13", "FROM example.org other than the server block's zone"),
    (("forward .",), "3:5", "expected FROM TO"),
    (("cache 0",), "3:11", "cache TTL can not be zero or negative"),
    (("cache {", "servfail 6m", "}"), "4:14", "caching SERVFAIL responses over 5 minutes is not permitted"),
    (("cache {", "success 10 60", "}"), "4:5", "different TTLs for success and denial"),
    (("cache {", "disable success example.org", "}"), "4:21", "zones other than the kubernetes zone"),
    (("cache {", "disable denial", "}"), "4:13", "disable for every zone: not supported"),
    (("cache {", "prefetch 0", "}"), "4:14", "prefetch amount should be positive"),
    (("cache {", "prefetch 1 1m 50", "}"), "4:14", "last character of percentage should be `%`"),
    (("cache {", "serve_stale 20", "}"), "4:17", "serve_stale: not a duration"),
    (("cache {", "serve_stale 1m nono", "}"), "4:17", "invalid value for serve_stale refresh mode: nono"),
    (("cache {", "keepttl now", "}"), "4:13", "keepttl takes no arguments"),
    (("autopath /etc/resolv.conf",), "3:14", "only @kubernetes is supported by netkit"),
    (("reload 1s",), "3:12", "interval value must be greater or equal to 2s"),
    (("reload 10s 0s",), "3:16", "jitter value must be greater or equal to 1s"),
    (("loadbalance weighted /etc/w",), "3:17", "loadbalance: weighted: not supported by netkit"),
    (("log . {combined}",), "3:9", "log: names and formats: not supported"),
    (("bind eth0",), "3:10", "only an IP address is supported"),
    (("loop", "loop"), "4:5", "loop: this plugin can only be used once per server block"),
])
def test_invalid_options_are_one_line_with_line_and_column(lines: tuple[str, ...], where: str, reason: str) -> None:
    message = refused(block(*lines))
    assert message.startswith(f"Corefile:{where}: ") and reason in message, message


@pytest.mark.parametrize(("kubernetes", "where", "reason"), [
    ("kubernetes cluster.local in-addr.arpa", "2:30", "in-addr.arpa without fallthrough in-addr.arpa"),
    ("kubernetes cluster.local {\n fallthrough\n }", "3:2", "only in-addr.arpa and ip6.arpa"),
    ("kubernetes a.local b.local", "2:16", "one cluster zone"),
    ("kubernetes 10.0.0.0/8", "2:16", "CIDR zone 10.0.0.0/8: not supported"),
    ("kubernetes", "2:5", "one cluster zone"),  # the block's zone is the root
])
def test_kubernetes_zones_and_fallthrough(kubernetes: str, where: str, reason: str) -> None:
    message = refused(f".:53 {{\n    {kubernetes}\n}}\n")
    assert message.startswith(f"Corefile:{where}: ") and reason in message, message


@pytest.mark.parametrize(("text", "reason"), [
    (".:53 {\n kubernetes cluster.local\n}\nexample.org:1053 {\n forward . 10.0.0.1\n}\n",
     "4:1: server block: port 1053"),
    (".:53 {\n kubernetes cluster.local\n}\nexample.org {\n hosts\n}\n", "5:2: hosts: in a server block without"),
    (".:53 {\n kubernetes cluster.local\n}\nexample.org {\n ready\n}\n", "5:2: ready: in a server block without"),
    (".:53 {\n kubernetes cluster.local\n cache 30\n}\nexample.org {\n forward . 10.0.0.1\n cache 60\n}\n",
     "7:2: cache: settings other than the cluster block's"),
    ("example.org:53 {\n kubernetes cluster.local\n}\n", "1:1: server block: the kubernetes block's key must be"),
    ("tls://.:853 {\n kubernetes cluster.local\n}\n", "1:1: server block: tls:// is not supported"),
])
def test_other_server_blocks_are_stub_domains_or_refused(text: str, reason: str) -> None:
    assert reason in refused(text)


def test_a_stub_domain_block_with_the_cluster_blocks_cache() -> None:
    c = config(".:53 {\n kubernetes cluster.local\n cache 30\n}\ncorp.example:53 {\n errors\n cache 30\n"
               " forward . 10.0.0.5 10.0.0.6:5353\n}\n")
    assert c.stub_domains == ("corp.example=10.0.0.5,10.0.0.6:5353",)


def test_no_kubernetes_block_is_refused() -> None:
    assert refused(".:53 {\n forward . 10.0.0.1\n}\n") == \
        "Corefile: netkit serves one server block with the kubernetes plugin"


def test_load_reports_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(NetkitError, match="--conf .*: cannot read"):
        load(str(tmp_path / "nope"))


def test_the_lab_cluster_dns_pods_read_deploy_dns_corefile(tmp_path: Path) -> None:
    """netkit lab cluster starts each DNS pod with deploy/dns's Corefile and, as the pod's environment,
    its kubeconfig and a resolv.conf: the Corefile's /etc/resolv.conf is read from there."""
    from netkit.cli import parser as cli_parser
    from netkit.dns.config import from_args
    from netkit.lab.cluster import controlplane, deploy
    text = deploy.dns_corefile(deploy.default_dir())
    assert text == KUBEADM
    (tmp_path / "dns").mkdir()
    (tmp_path / "dns" / "Corefile").write_text(text)
    argv = controlplane.dns_argv(tmp_path)
    assert argv[:3] == [sys.executable, "-m", "netkit"]
    c = from_args(cli_parser(argv[3:]).parse_args(argv[3:]))
    assert (c.resolv_conf, c.kubeconfig, c.upstream_timeout) == (
        str(tmp_path / "dns" / "resolv.conf"), str(tmp_path / "dns" / deploy.KUBECONFIG_FILE), 0.5)
    assert (c.zone, c.ttl, c.pods, c.max_concurrent, c.ready_listen) == ("cluster.local", 30, "insecure", 1000, ":8181")


# --- kubernetes: namespaces, labels, noendpoints (what the view is built from) ---------------------


def _resolved(options: tuple[str, ...], name: str, qtype: str = "A") -> tuple[str, int]:
    """The rcode and answer count for `name` from a view built as `netkit dns --conf` builds it."""
    from netkit.dns.command import _build
    from netkit.dns.names import name_from_text
    from netkit.dns.resolver import RType, resolve
    from tests.unit.dns_cluster import objects
    body = "".join(f"        {o}\n" for o in options)
    c = config(f".:53 {{\n    kubernetes cluster.local {{\n        pods insecure\n{body}    }}\n}}\n")
    view = _build(objects(), c)
    reply = resolve(view, view.options, name_from_text(name), RType[qtype])
    return reply.rcode.name, len(reply.answer)


@pytest.mark.parametrize(("options", "name", "expected"), [
    ((), "web.default.svc.cluster.local.", ("NOERROR", 1)),
    ((), "sticky.shop.svc.cluster.local.", ("NOERROR", 1)),
    # namespaces: "only expose the Kubernetes namespaces listed"
    (("namespaces default",), "web.default.svc.cluster.local.", ("NOERROR", 1)),
    (("namespaces default",), "sticky.shop.svc.cluster.local.", ("NXDOMAIN", 0)),
    (("namespaces default",), "shop.svc.cluster.local.", ("NXDOMAIN", 0)),
    (("namespaces default",), "10-244-1-5.shop.pod.cluster.local.", ("NXDOMAIN", 0)),
    (("namespaces default shop",), "sticky.shop.svc.cluster.local.", ("NOERROR", 1)),
    # labels: "only exposes the records for Kubernetes objects that match this label selector"
    (("labels app=web",), "web.default.svc.cluster.local.", ("NOERROR", 1)),
    (("labels app=web",), "db.default.svc.cluster.local.", ("NXDOMAIN", 0)),
    (("labels app!=web",), "web.default.svc.cluster.local.", ("NXDOMAIN", 0)),
    # noendpoints: "all endpoint queries and headless service queries will result in an NXDOMAIN"
    ((), "db.default.svc.cluster.local.", ("NOERROR", 2)),
    ((), "db-0.db.default.svc.cluster.local.", ("NOERROR", 1)),
    (("noendpoints",), "db.default.svc.cluster.local.", ("NXDOMAIN", 0)),
    (("noendpoints",), "db-0.db.default.svc.cluster.local.", ("NXDOMAIN", 0)),
    (("noendpoints",), "web.default.svc.cluster.local.", ("NOERROR", 1)),
])
def test_what_the_kubernetes_plugin_exposes(options: tuple[str, ...], name: str, expected: tuple[str, int]) -> None:
    assert _resolved(options, name) == expected


def test_exposure_options_are_read_and_checked() -> None:
    c = config(".:53 {\n kubernetes cluster.local {\n  namespaces a b\n  labels app in (x, y),tier\n"
               "  noendpoints\n }\n}\n")
    assert (c.namespaces, c.labels, c.noendpoints) == (("a", "b"), "app in (x, y),tier", True)
    assert refused(".:53 {\n kubernetes cluster.local {\n  labels app=(\n }\n}\n") == \
        "Corefile:3:10: kubernetes: labels: unable to parse label selector 'app=('"
    assert refused(".:53 {\n kubernetes cluster.local {\n  namespaces\n }\n}\n") == \
        "Corefile:3:3: kubernetes: namespaces: expected at least one namespace"
