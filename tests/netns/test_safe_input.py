"""Bad input never costs a Service its rules, against the real kernel in fresh network
namespaces: iptables (legacy and nft) and nftables mode. Each test names the item it covers; the
command-line side without a kernel is tests/unit/test_bad_input.py."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from netkit.rules.nftables.kernel import NftKernel
from tests.conftest import EXAMPLES, ROOT, held_socket, need_root_and, run_netkit
from tests.factories import endpoint, node, service, slice_

MODES = [("iptables", "legacy"), ("iptables", "nft"), ("nftables", "")]
IDS = ["iptables-legacy", "iptables-nft", "nftables"]


@pytest.fixture(autouse=True)
def _tools() -> None:
    need_root_and("iptables-legacy-restore", "iptables-nft-restore", "nft")


def netkit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run_netkit(*args, timeout=timeout)


def mode_args(netns: str, mode: str, flavour: str) -> list[str]:
    return ["--netns", netns, "--mode", mode, "--ip-family", "ipv4", "--node-name", "node-a",
            *(["--iptables-backend", flavour] if flavour else [])]


def live(netns: str, mode: str, flavour: str) -> str:
    """Everything netkit could have written, without counters and time stamps."""
    if mode == "nftables":
        out = subprocess.run(["ip", "netns", "exec", netns, "nft", "list", "ruleset"], capture_output=True,
                             text=True, check=True).stdout
        return out
    out = subprocess.run(["ip", "netns", "exec", netns, f"iptables-{flavour}-save"], capture_output=True, text=True,
                         check=True).stdout
    return "\n".join(ln for ln in out.splitlines() if not ln.startswith("#"))


def write(directory: Path, name: str, *docs: dict[str, object]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(yaml.safe_dump_all(docs))


def two_services(directory: Path) -> None:
    write(directory, "00-node.yaml", node("node-a", ips=("10.0.0.1",)))
    write(directory, "web.yaml", service("web", ip="10.96.0.10"),
          slice_("web", endpoints=[endpoint("10.244.1.5")], ports=[{"name": "http", "port": 8080}]))
    write(directory, "api.yaml", service("api", ip="10.96.0.11"),
          slice_("api", endpoints=[endpoint("10.244.1.6")], ports=[{"name": "http", "port": 8080}]))


def applied(netns: str, mode: str, flavour: str, directory: Path) -> str:
    proc = netkit("apply", "-f", str(directory), *mode_args(netns, mode, flavour))
    assert proc.returncode == 0, proc.stderr
    return live(netns, mode, flavour)


# --- 1. a file that does not parse changes nothing ------------------------------------------------


@pytest.mark.parametrize(("mode", "flavour"), MODES, ids=IDS)
def test_unparsable_file_changes_nothing(netns: str, tmp_path: Path, mode: str, flavour: str) -> None:
    m = tmp_path / "m"
    two_services(m)
    before = applied(netns, mode, flavour, m)
    assert "10.96.0.11" in before
    (m / "api.yaml").write_text("kind: Service\nmetadata:\n  name: api\n   namespace: default\n")
    for command in ("diff", "apply"):
        proc = netkit(command, "-f", str(m), *mode_args(netns, mode, flavour))
        assert proc.returncode == 2, proc.stderr
        assert f"netkit: error: {m / 'api.yaml'}:4:13: invalid YAML: " in proc.stderr
    assert live(netns, mode, flavour) == before


# --- 2. empty input changes nothing unless --allow-empty ------------------------------------------


@pytest.mark.parametrize(("mode", "flavour"), MODES, ids=IDS)
def test_empty_input_changes_nothing_unless_allowed(netns: str, tmp_path: Path, mode: str, flavour: str) -> None:
    m = tmp_path / "m"
    two_services(m)
    before = applied(netns, mode, flavour, m)
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = netkit("apply", "-f", str(empty), *mode_args(netns, mode, flavour))
    assert proc.returncode == 2 and "no Service in" in proc.stderr
    assert live(netns, mode, flavour) == before
    proc = netkit("apply", "-f", str(empty), "--allow-empty", *mode_args(netns, mode, flavour))
    assert proc.returncode == 0, proc.stderr
    assert "10.96.0.10" not in live(netns, mode, flavour)


# --- 3. an object that became invalid keeps its Service's live rules ------------------------------


def api_part(netns: str, mode: str, flavour: str) -> list[str]:
    """What the kernel holds for default/api: iptables rules naming it; nftables chains and elements
    (read through netkit's own dump, so element order and line wrapping do not matter)."""
    if mode == "iptables":
        return sorted(ln for ln in live(netns, mode, flavour).splitlines() if "default/api" in ln)
    table = NftKernel("ip", netns).dump()
    assert table is not None
    chains = [f"{c.name}: {c.rules}" for c in table.chains if "default/api" in c.name]
    elements = [f"{st.name}: {e.text()}" for st in table.sets for e in st.elements if "default/api" in e.text()]
    return sorted(chains + elements)


def traced(netns: str, mode: str, flavour: str, to: str) -> str:
    args = [a for a in mode_args(netns, mode, flavour) if a not in ("--ip-family", "ipv4")]
    proc = netkit("trace", "--to", to, "--from", "10.0.0.9", *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("broken", ["service", "slice"])
@pytest.mark.parametrize(("mode", "flavour"), MODES, ids=IDS)
def test_invalid_object_keeps_the_live_rules(netns: str, tmp_path: Path, mode: str, flavour: str,
                                             broken: str) -> None:
    m = tmp_path / "m"
    two_services(m)
    args = mode_args(netns, mode, flavour)
    before = applied(netns, mode, flavour, m)
    kept = api_part(netns, mode, flavour)
    assert kept and "DNAT → 10.244.1.6:8080" in traced(netns, mode, flavour, "10.96.0.11:80")
    # api's object becomes invalid; web changes endpoints at the same time.
    bad_api = service("api", ip="10.96.0.11", ports=[{"name": "http", "port": 99999}])
    api_slice = slice_("api", endpoints=[endpoint("10.244.1.6")], ports=[{"name": "http", "port": 8080}])
    if broken == "slice":
        bad_api, api_slice = service("api", ip="10.96.0.11"), slice_("api", endpoints=[endpoint("10.244.1.300")])
    write(m, "api.yaml", bad_api, api_slice)
    write(m, "web.yaml", service("web", ip="10.96.0.10"),
          slice_("web", endpoints=[endpoint("10.244.1.7")], ports=[{"name": "http", "port": 8080}]))
    strict = netkit("apply", "-f", str(m), "--strict", *args)
    assert strict.returncode == 2 and live(netns, mode, flavour) == before
    diff = netkit("diff", "-f", str(m), *args)
    assert diff.returncode == 1, diff.stderr
    assert "= default/api:http kept, invalid input" in diff.stdout
    assert "default/web:http endpoints" in diff.stdout and "- default/api" not in diff.stdout
    proc = netkit("apply", "-f", str(m), *args)
    assert proc.returncode == 0, proc.stderr
    assert "default/api:http: kept, invalid input" in proc.stderr
    assert api_part(netns, mode, flavour) == kept
    assert "DNAT → 10.244.1.6:8080" in traced(netns, mode, flavour, "10.96.0.11:80")
    web = traced(netns, mode, flavour, "10.96.0.10:80")
    assert "DNAT → 10.244.1.7:8080" in web and "10.244.1.5" not in web
    # Nothing pending now: the kept rules are what the next diff expects, too.
    again = netkit("diff", "-f", str(m), *args)
    assert again.returncode == 0, again.stdout
    assert "= default/api:http kept, invalid input" in again.stdout
    # Fixed input takes over again.
    write(m, "api.yaml", service("api", ip="10.96.0.11"),
          slice_("api", endpoints=[endpoint("10.244.1.8")], ports=[{"name": "http", "port": 8080}]))
    assert netkit("apply", "-f", str(m), *args).returncode == 0
    assert "DNAT → 10.244.1.8:8080" in traced(netns, mode, flavour, "10.96.0.11:80")


def test_nftables_refuses_what_it_cannot_tell_apart(netns: str, tmp_path: Path) -> None:
    """A Service without endpoints has only no-endpoints verdicts, which carry no name: when its own
    object becomes invalid, nftables mode cannot keep them alone, so it changes nothing."""
    m = tmp_path / "m"
    two_services(m)
    write(m, "api.yaml", service("api", ip="10.96.0.11"))  # no endpoints: rejected
    args = mode_args(netns, "nftables", "")
    before = applied(netns, "nftables", "", m)
    write(m, "api.yaml", service("api", ip="10.96.0.11", ports=[{"name": "http", "port": 99999}]))
    proc = netkit("apply", "-f", str(m), *args)
    assert proc.returncode == 2
    assert "cannot tell the live nftables objects of default/api apart" in proc.stderr
    assert live(netns, "nftables", "") == before


# --- 8. trace over a namespace without netkit's rules ---------------------------------------------


@pytest.mark.parametrize(("mode", "flavour"), MODES, ids=IDS)
def test_trace_over_a_node_without_rules(netns: str, mode: str, flavour: str) -> None:
    args = [a for a in mode_args(netns, mode, flavour) if a not in ("--ip-family", "ipv4")]
    proc = netkit("trace", "--to", "10.96.0.10:80", "--from", "10.0.0.9", *args)
    assert proc.returncode == 2, proc.stdout
    assert f"netkit: error: no netkit {mode} rules in {netns} (IPv4)" in proc.stderr
    assert proc.stdout == ""


# --- 9. the real exit status through a closed pipe ------------------------------------------------


@pytest.mark.parametrize(("mode", "flavour"), MODES, ids=IDS)
def test_diff_status_survives_a_closed_pipe(netns: str, mode: str, flavour: str) -> None:
    diff = [sys.executable, "-m", "netkit", "diff", "-f", str(EXAMPLES), *mode_args(netns, mode, flavour)]
    script = " ".join(f"'{a}'" for a in diff) + " | head -1"
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", script], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert len(proc.stdout.splitlines()) == 1 and "Traceback" not in proc.stderr


# --- 11. no tracebacks from `netkit run` ----------------------------------------------------------


@pytest.mark.parametrize("case", ["missing-file", "busy-healthz", "garbage-healthz", "dns-listen-absent"])
def test_run_operator_errors_are_one_line(netns: str, case: str) -> None:
    held = held_socket(socket.SOCK_STREAM)
    busy = f"127.0.0.1:{held.getsockname()[1]}"
    base = ["run", "--netns", netns, "--metrics-bind-address", "", "--log-format", "text"]
    args, expected = {
        "missing-file": (["-f", "/nonexistent", "--healthz-bind-address", ""],
                         "/nonexistent: no such file or directory"),
        # kube-proxy retries a busy health port every 5 s; with --bind-address-hard-fail it exits.
        "busy-healthz": (["-f", str(EXAMPLES), "--healthz-bind-address", busy, "--bind-address-hard-fail"],
                         f"healthz server: cannot listen on {busy}: Address already in use"),
        "garbage-healthz": (["-f", str(EXAMPLES), "--healthz-bind-address", "garbage"],
                            "--healthz-bind-address: 'garbage' must be IP:port"),
        "dns-listen-absent": (["-f", str(EXAMPLES), "--healthz-bind-address", "", "--dns-listen", "192.0.2.77:5353"],
                              "--dns-listen 192.0.2.77:5353: cannot listen: cannot assign requested address"),
    }[case]
    with held:
        proc = netkit(*base, *args, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("netkit: error: ")]
    assert len(errors) == 1 and expected in errors[0], proc.stderr


def test_ctrl_c_during_start_up_is_one_line(netns: str) -> None:
    """SIGINT while `netkit run` is still importing and starting (before the daemon's own handler,
    which stops it cleanly): one line and status 130 — or death by SIGINT after that line, which a
    shell reports as the same 130. Too early (Python's own start-up, before any netkit code) or too
    late (the daemon up: status 0) is retried with another delay."""
    for delay in (0.3, 0.6, 1.0, 0.15, 0.45):
        proc = subprocess.Popen([sys.executable, "-m", "netkit", "run", "-f", str(EXAMPLES), "--netns", netns,
                                 "--metrics-bind-address", "", "--healthz-bind-address", ""],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        if "init_import_site" in err:  # the interpreter's own start-up: no netkit code ran yet
            continue
        assert "Traceback" not in err, err
        lines = err.strip().splitlines()
        if proc.returncode == 0 or (proc.returncode == -signal.SIGINT and not lines):
            continue
        assert proc.returncode in (130, -signal.SIGINT), err
        assert lines[-1] == "netkit: error: interrupted"
        return
    pytest.skip("no delay hit the start-up window on this machine")


# --- 12. an empty namespace name is an error ------------------------------------------------------


@pytest.mark.parametrize("command", ["diff", "apply", "cleanup", "trace", "run"])
@pytest.mark.parametrize("name", ["", "  "])
def test_empty_netns_name_is_an_error(netns: str, command: str, name: str) -> None:
    """Run inside a fresh namespace, so that the old behaviour ("" = this namespace) would have
    written there and not into the machine's own."""
    extra = {"diff": ["-f", str(EXAMPLES)], "apply": ["-f", str(EXAMPLES)], "cleanup": [],
             "trace": ["--to", "10.96.0.10:80"], "run": ["-f", str(EXAMPLES), "--healthz-bind-address", "",
                                                         "--metrics-bind-address", ""]}[command]
    proc = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-m", "netkit", command, *extra,
                           "--netns", name], capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "empty namespace name" in proc.stderr
    assert live(netns, "iptables", "nft").count("KUBE") == 0
