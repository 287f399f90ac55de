"""Bad input never costs a Service its rules: the command-line side without a kernel.

Each test names the item of the issue it covers; the kernel side (apply/diff into network
namespaces) is tests/netns/test_safe_input.py."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from netkit.model import build
from netkit.model.types import Objects
from netkit.sources.files import FileSource
from netkit.sources.manifests import Unparsable, decode_text, load
from netkit.sources.store import Store
from tests.conftest import EXAMPLES, ROOT, held_socket
from tests.factories import endpoint, node, service, slice_


def run(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netkit", *args], input=stdin, capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The stderr of a failed command: exactly one `netkit: error:` line, no traceback."""
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("netkit: error: ")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def dump(*docs: dict[str, object]) -> str:
    return yaml.safe_dump_all(docs)


# --- 1. a file that does not parse stops the command ---------------------------------------------


BROKEN = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n   namespace: default\n"


@pytest.mark.parametrize("command", ["compile", "diff", "apply"])
def test_unparsable_file_in_a_directory_stops_the_command(tmp_path: Path, command: str) -> None:
    (tmp_path / "a.yaml").write_text(dump(service("good", ip="10.96.1.1")))
    (tmp_path / "b.yaml").write_text(BROKEN)
    # diff and apply fail before they look at any kernel (the namespace is never needed).
    proc = run(command, "-f", str(tmp_path), *(["--netns", "nkt-never-used"] if command != "compile" else []))
    assert proc.returncode == 2, proc.stderr
    assert one_error_line(proc) == (f"netkit: error: {tmp_path / 'b.yaml'}:5:13: invalid YAML: "
                                    "mapping values are not allowed in this context")
    assert proc.stdout == ""


def test_unparsable_positions_are_one_based_and_json_too(tmp_path: Path) -> None:
    with pytest.raises(Unparsable, match=r"^<stdin>:2:1: invalid YAML: did not find expected ',' or '\]' "
                                         r"\(while parsing a flow sequence\)$"):
        load(["-"], stdin_text="ports: [1, 2\n")
    f = tmp_path / "x.json"
    f.write_text('{"kind": "Service",\n "metadata": {]}')
    proc = run("compile", "-f", str(f))
    assert proc.returncode == 2
    assert one_error_line(proc).startswith(f"netkit: error: {f}:2:15: invalid JSON: ")


def test_decode_text_still_reports_for_the_daemon() -> None:
    objs, problems = decode_text(BROKEN, "m.yaml")
    assert objs == [] and [str(p) for p in problems] == [
        "m.yaml:5:13: invalid YAML: mapping values are not allowed in this context"]


# --- 2. no Service at all needs --allow-empty -----------------------------------------------------


@pytest.mark.parametrize("content", [None, "", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n"])
def test_empty_input_is_refused_unless_allowed(tmp_path: Path, content: str | None) -> None:
    if content is not None:
        (tmp_path / "only.yaml").write_text(content)
    proc = run("compile", "-f", str(tmp_path), "--ip-family", "ipv4")
    assert proc.returncode == 2
    assert "no Service in" in one_error_line(proc) and "--allow-empty" in proc.stderr
    allowed = run("compile", "-f", str(tmp_path), "--ip-family", "ipv4", "--allow-empty")
    assert allowed.returncode == 0, allowed.stderr
    assert "-A KUBE-SERVICES" in allowed.stdout  # the nodeports tail: a ruleset without services


def test_only_invalid_services_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(dump(service("web", ports=[{"name": "http", "port": 99999}])))
    proc = run("compile", "-f", str(tmp_path), "--ip-family", "ipv4")
    assert proc.returncode == 0, proc.stderr
    assert "invalid object left out" in proc.stderr


# --- 3. which Service an invalid object belongs to ------------------------------------------------


def test_problems_name_the_service_they_feed() -> None:
    bad_slice = slice_("web", endpoints=[endpoint("10.0.0.300")])
    bad_ep = {"kind": "Endpoints", "metadata": {"name": "api", "namespace": "shop"},
              "subsets": [{"addresses": [{"ip": "nope"}]}]}
    text = dump(service("db", ns="shop", ports=[{"name": "x", "port": 0}]), bad_slice, bad_ep)
    _, problems = decode_text(text, "m.yaml")
    assert [p.service for p in problems] == ["shop/db", "default/web", "shop/api"]


# --- 8. trace arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["--to", "fd00:96::14:80"], "an IPv6 address needs brackets"),
    (["--to", "[fd00:96::14]:80", "--from", "10.0.0.1"], "one is IPv4, the other IPv6"),
    (["--to", "10.96.0.10:80", "--from", "fd00::1"], "one is IPv4, the other IPv6"),
    (["--to", "[10.96.0.10]:80"], "expected IP:PORT"),
    (["--to", "10.96.0.10:80", "--from", "nothost"], "--from 'nothost': not an IP address"),
])
def test_trace_argument_errors(args: list[str], message: str) -> None:
    proc = run("trace", "-f", str(EXAMPLES), *args)
    assert proc.returncode == 2
    assert message in one_error_line(proc)


def test_bracketed_ipv6_still_traces() -> None:
    proc = run("trace", "-f", str(EXAMPLES), "--node-name", "node-a", "--to", "[fd00:96::14]:80",
               "--from", "fd00:244::5")
    assert proc.returncode == 0, proc.stderr
    assert "DNAT" in proc.stdout


# --- 10. one default node name --------------------------------------------------------------------


def test_node_name_defaults_to_the_lowercased_hostname(tmp_path: Path) -> None:
    me = socket.gethostname().strip().lower()
    local = service("web", ip="10.96.3.3", internalTrafficPolicy="Local")
    (tmp_path / "m.yaml").write_text(dump(local, slice_("web", endpoints=[endpoint("10.244.1.5", node=me)])))
    default = run("compile", "-f", str(tmp_path), "--ip-family", "ipv4")
    named = run("compile", "-f", str(tmp_path), "--ip-family", "ipv4", "--node-name", me)
    other = run("compile", "-f", str(tmp_path), "--ip-family", "ipv4", "--node-name", "elsewhere")
    assert default.returncode == named.returncode == other.returncode == 0
    assert default.stdout == named.stdout != other.stdout
    assert "10.244.1.5:8080" in default.stdout and "10.244.1.5:8080" not in other.stdout
    assert default.stderr == ""


def test_node_name_matching_nothing_is_warned_about() -> None:
    proc = run("compile", "-f", str(EXAMPLES), "--ip-family", "ipv4", "--node-name", "node-aa")
    assert proc.returncode == 0
    assert "netkit: warning: node name 'node-aa' matches no Node object and no endpoint's nodeName" in proc.stderr
    assert run("compile", "-f", str(EXAMPLES), "--node-name", "node-a").stderr == ""


# --- 11. no tracebacks for operator errors --------------------------------------------------------


@pytest.mark.parametrize("case", ["busy", "absent", "missing-file"])
def test_dns_operator_errors_are_one_line(case: str) -> None:
    """`netkit run`'s cases need a namespace: tests/netns/test_safe_input.py."""
    held = held_socket(socket.SOCK_DGRAM)
    busy = f"127.0.0.1:{held.getsockname()[1]}"
    args, expected = {
        "busy": (["dns", "-f", str(EXAMPLES), "--listen", busy],
                 f"--listen {busy}: cannot listen: address already in use"),
        "absent": (["dns", "-f", str(EXAMPLES), "--listen", "192.0.2.77:5353"],
                   "--listen 192.0.2.77:5353: cannot listen: cannot assign requested address"),
        "missing-file": (["dns", "-f", "/nonexistent"], "/nonexistent: no such file or directory"),
    }[case]
    with held:
        proc = run(*args, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert expected in one_error_line(proc)


# --- 12. empty namespace names, unreadable directories --------------------------------------------


def test_unreadable_subdirectory_is_an_error() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (util-linux) to read as an unprivileged user")
    base = Path(tempfile.mkdtemp(prefix="netkit-unreadable-"))  # /tmp: traversable by others, unlike tmp_path
    try:
        base.chmod(0o755)
        top = base / "m"
        (top / "sub").mkdir(parents=True)
        (top / "a.yaml").write_text(dump(service("a", ip="10.96.1.1")))
        (top / "sub" / "b.yaml").write_text(dump(service("b", ip="10.96.1.2")))
        top.chmod(0o755)
        (top / "a.yaml").chmod(0o644)
        (top / "sub").chmod(0o300)  # not listable by others
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        proc = subprocess.run([*as_nobody, sys.executable, "-m", "netkit", "compile", "-f", str(top)],
                              capture_output=True, text=True, cwd="/", timeout=60,
                              env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        assert proc.returncode == 2, proc.stderr
        assert one_error_line(proc) == f"netkit: error: {top / 'sub'}: cannot read directory: Permission denied"
    finally:
        shutil.rmtree(base)


# --- 13. EndpointSlices win over v1 Endpoints -----------------------------------------------------


ENDPOINTS = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web", "namespace": "default"},
             "subsets": [{"addresses": [{"ip": "10.244.9.9"}, {"ip": "10.244.1.1"}],
                          "ports": [{"name": "http", "port": 8080}]}]}


def _endpoints_of(objects: Objects) -> dict[str, set[str]]:
    state = build(objects, "node-a")
    return {str(p.name): {f"{e.ip}:{e.port}" for e in p.endpoints} for p in state.ports}


def test_slices_win_over_endpoints_and_endpoints_are_the_fallback() -> None:
    web_slice = slice_("web", endpoints=[endpoint("10.244.1.1")], ports=[{"name": "http", "port": 8080}])
    only_ep = {**ENDPOINTS, "metadata": {"name": "api", "namespace": "default"}}
    loaded = load(["-"], stdin_text=dump(service("web"), service("api", ip="10.96.0.11"), ENDPOINTS, web_slice,
                                         only_ep))
    assert _endpoints_of(loaded.objects) == {"default/web:http": {"10.244.1.1:8080"},
                                             "default/api:http": {"10.244.9.9:8080", "10.244.1.1:8080"}}


def test_slices_win_in_the_daemons_store_too() -> None:
    store = Store()
    web_slice = slice_("web", endpoints=[endpoint("10.244.1.1")], ports=[{"name": "http", "port": 8080}])
    for origin, doc in (("svc", service("web")), ("ep", ENDPOINTS), ("slice", web_slice)):
        objs, problems = decode_text(dump(doc), origin)
        assert not problems
        store.put(origin, tuple(objs))
    assert _endpoints_of(store.objects()) == {"default/web:http": {"10.244.1.1:8080"}}
    store.put("slice", ())  # the slice goes: the Endpoints are the fallback again
    assert _endpoints_of(store.objects()) == {"default/web:http": {"10.244.9.9:8080", "10.244.1.1:8080"}}


def test_compile_of_a_kubectl_dump_with_both_views() -> None:
    web_slice = slice_("web", endpoints=[endpoint("10.244.1.1")], ports=[{"name": "http", "port": 8080}])
    doc = json.dumps({"kind": "List", "items": [service("web"), ENDPOINTS, web_slice, node()]})
    proc = run("compile", "-f", "-", "--ip-family", "ipv4", "--node-name", "node-a", stdin=doc)
    assert proc.returncode == 0, proc.stderr
    assert "10.244.1.1:8080" in proc.stdout and "10.244.9.9" not in proc.stdout


# --- 21. the daemon's log line for a file that does not parse -------------------------------------


def test_daemon_log_line_for_unparsable_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from tests.daemon.conftest import background, eventually
    from tests.daemon.conftest import run as run_async

    f = tmp_path / "web.yaml"
    f.write_text(dump(service("web")))
    store = Store()

    async def scenario() -> None:
        async with background(FileSource([str(f)], store, debounce_ms=20, step_ms=10).run()):
            await asyncio.wait_for(store.wait_synced(), 5)
            f.write_text(BROKEN)
            await eventually(lambda: bool(store.problems), what="the problem")

    with caplog.at_level(logging.WARNING, logger="netkit.sources.files"):
        run_async(scenario())
    assert [r.getMessage() for r in caplog.records if "invalid" in r.getMessage()] == [
        f"{f}:5:13: invalid YAML: mapping values are not allowed in this context; keeping its last good version"]
    assert [s.ref.name for s in store.objects().services] == ["web"]


# --- 3 in IPVS mode (no IPVS in this kernel: the fake kernel; tests/vm has the real one) ----------


def _ipvs_state(*docs: dict[str, object]):  # type: ignore[no-untyped-def]
    loaded = load(["-"], stdin_text=dump(*docs))
    return build(loaded.objects, "node-a"), loaded.problems


@pytest.mark.parametrize("broken", ["service", "slice"])
def test_ipvs_keeps_the_live_virtual_servers_of_invalid_input(broken: str) -> None:
    from netkit.config import Config
    from netkit.model import IPFamily
    from netkit.rules.ipvs.compile import compile as ipvs_compile
    from netkit.rules.ipvs.fake import FakeKernel
    from netkit.rules.ipvs.plan import plan
    from netkit.rules.keep import keep_live
    from netkit.rules.registry import backend

    cfg, v4 = Config(mode="ipvs"), IPFamily.IPV4
    eps = {"ports": [{"name": "http", "port": 8080}]}
    good, _ = _ipvs_state(service("web"), slice_("web", endpoints=[endpoint("10.244.1.5")], **eps),
                          service("api", ip="10.96.0.11"), slice_("api", endpoints=[endpoint("10.244.1.6")], **eps))
    kernel = FakeKernel(v4)
    kernel.apply(plan(kernel.dump(), ipvs_compile(good, cfg, v4)))
    before = {str(vs.key): vs for vs in kernel.dump().services}
    api = "tcp 10.96.0.11:80"
    assert [r.ip for r in before[api].reals] == [ip("10.244.1.6")]
    bad_api = [service("api", ip="10.96.0.11", ports=[{"name": "http", "port": 99999}]),
               slice_("api", endpoints=[endpoint("10.244.1.6")], **eps)]
    if broken == "slice":
        bad_api = [service("api", ip="10.96.0.11"), slice_("api", endpoints=[endpoint("10.244.1.300")])]
    new, problems = _ipvs_state(service("web"), slice_("web", endpoints=[endpoint("10.244.1.7")], **eps), *bad_api)
    assert {p.service for p in problems} == {"default/api"}
    live = kernel.dump()
    desired = keep_live(backend("ipvs"), live, ipvs_compile(new, cfg, v4), {"default/api"})
    kernel.apply(plan(live, desired))
    after = {str(vs.key): vs for vs in kernel.dump().services}
    assert after[api] == before[api]  # the same virtual server, the same real servers
    assert [r.ip for r in after["tcp 10.96.0.10:80"].reals if r.weight] == [ip("10.244.1.7")]
    assert ip("10.96.0.11") in kernel.dump().addresses
    assert plan(kernel.dump(), keep_live(backend("ipvs"), kernel.dump(), ipvs_compile(new, cfg, v4),
                                         {"default/api"})).empty


def ip(text: str):  # type: ignore[no-untyped-def]
    from ipaddress import ip_address
    return ip_address(text)


def test_dns_answers_from_slices_over_endpoints_too() -> None:
    """netkit dns (and run --dns-listen) build their view from the same objects: a headless Service's
    records come from its EndpointSlices only when it has any."""
    from netkit.dns.view import Options
    from netkit.dns.view import build as build_view

    headless = service("web", ip="None")
    web_slice = slice_("web", endpoints=[endpoint("10.244.1.1")], ports=[{"name": "http", "port": 8080}])
    loaded = load(["-"], stdin_text=dump(headless, ENDPOINTS, web_slice))
    view = build_view(loaded.objects, Options())
    hosts = view.services[("default", "web")].hosts
    assert sorted(str(a) for h in hosts.values() for a in h.addresses) == ["10.244.1.1"]
