"""The command line without a kernel: compile output, bad input reporting, --strict, exit statuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from netkit.cli import main
from tests.conftest import EXAMPLES, ROOT
from tests.factories import service


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netkit", *args], input=stdin, capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


def test_compile_prints_a_restore_payload_per_family() -> None:
    proc = run("compile", "-f", str(EXAMPLES), "--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16")
    assert proc.returncode == 0, proc.stderr
    assert "# iptables IPv4" in proc.stdout and "# iptables IPv6" in proc.stdout
    assert '-A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment "default/web:http cluster IP"' in proc.stdout
    assert "-d fd00:96::14/128" in proc.stdout
    assert proc.stderr == ""


def test_compile_json_and_single_family(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", "-f", str(EXAMPLES), "--ip-family", "ipv4", "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc["families"]) == ["IPv4"]
    assert "KUBE-SERVICES" in doc["families"]["IPv4"]["tables"]["nat"]


def test_stdin_and_list_documents() -> None:
    manifest = json.dumps({"kind": "List", "items": [service("a", ip="10.96.5.5")]})
    proc = run("compile", "-f", "-", "--ip-family", "ipv4", stdin=manifest)
    assert proc.returncode == 0, proc.stderr
    assert "default/a:http has no endpoints" in proc.stdout


BAD = """\
apiVersion: v1
kind: Service
metadata: {name: good}
spec: {clusterIP: 10.96.7.1, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: "evil\\"\\n-A KUBE-SERVICES -j ACCEPT"}
spec: {clusterIP: 10.96.7.2, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: badport, namespace: shop}
spec: {clusterIP: 10.96.7.3, ports: [{name: "x\\ny", port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: range, namespace: shop}
spec: {clusterIP: 10.96.7.4, ports: [{name: http, port: 99999}]}
"""


def test_bad_objects_are_reported_and_left_out(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(BAD)
    proc = run("compile", "-f", str(f), "--ip-family", "ipv4")
    assert proc.returncode == 0
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 3
    assert f'{f}#1: Service "evil' in errors[0] and ": metadata.name: " in errors[0]
    assert f"{f}#2: Service shop/badport: spec.ports[0].name:" in errors[1]
    assert f"{f}#3: Service shop/range: spec.ports[0].port: 99999 is out of range 1-65535" in errors[2]
    assert "default/good:http" in proc.stdout
    # Nothing from the bad objects reached the payload: every line is a declaration, rule or marker.
    assert "evil" not in proc.stdout and "10.96.7.2" not in proc.stdout
    assert all(ln[:1] in ("*", ":", "-", "#", "C") for ln in proc.stdout.splitlines() if ln)


def test_strict_turns_problems_into_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(BAD)
    proc = run("compile", "-f", str(f), "--strict")
    assert proc.returncode == 2
    assert "invalid object" in proc.stderr and proc.stdout == ""


def test_unreadable_inputs_are_errors(tmp_path: Path) -> None:
    assert run("compile", "-f", str(tmp_path / "missing.yaml")).returncode == 2
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Service\n  bad: [indent\n")
    proc = run("compile", "-f", str(broken))
    assert proc.returncode == 2 and f"netkit: error: {broken}:2:6: invalid YAML" in proc.stderr


def test_config_file_is_kube_proxy_configuration(tmp_path: Path) -> None:
    cfg = tmp_path / "kp.yaml"
    cfg.write_text("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
                   "clusterCIDR: 10.244.0.0/16\niptables: {masqueradeAll: true, masqueradeBit: 15}\n"
                   "hostnameOverride: node-a\nconntrack: {maxPerCore: 32768, maxPerCor: 1}\n")
    proc = run("compile", "-f", str(EXAMPLES), "--config", str(cfg), "--ip-family", "ipv4")
    assert proc.returncode == 0
    assert "--set-xmark 0x8000/0x8000" in proc.stdout
    assert f"{cfg}:6: KubeProxyConfiguration: conntrack.maxPerCor: unknown field" in proc.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: userspace\n")
    proc = run("compile", "-f", str(EXAMPLES), "--config", str(bad))
    assert proc.returncode == 2 and f"netkit: error: {bad}:3: KubeProxyConfiguration: mode: 'userspace'" in proc.stderr


def test_missing_netns_is_a_clear_error() -> None:
    proc = run("diff", "-f", str(EXAMPLES), "--netns", "netkit-no-such-ns")
    assert proc.returncode == 2
    assert "no such network namespace" in proc.stderr


def test_the_command_table_names_every_subcommand_with_the_module_that_registers_it() -> None:
    import argparse
    import importlib

    from netkit.cli import COMMAND_MODULES, COMMANDS
    registered: dict[str, str] = {}
    for module in COMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        registered.update(dict.fromkeys(sub.choices, module))
    assert registered == COMMANDS


def test_a_command_line_imports_only_its_own_command_module() -> None:
    import subprocess
    import sys
    code = ("import sys; from netkit.cli import parser; "
            "parser(['compile', '-f', 'x']).parse_args(['compile', '-f', 'x']); "
            "print(sorted(m for m in ('netkit.dns.command', 'netkit.lab.command', 'netkit.runtime.command', "
            "'aiohttp') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    every = subprocess.run([sys.executable, "-m", "netkit", "--help"], capture_output=True, text=True, check=True)
    assert all(name in every.stdout for name in ("compile", "dns", "lab", "run"))


def test_a_one_pass_command_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path) -> None:
    import gc
    manifest = tmp_path / "svc.yaml"
    manifest.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: web}\n"
                        "spec: {clusterIP: 10.96.0.10, ports: [{port: 80}]}\n")
    assert gc.isenabled()
    assert main(["compile", "-f", str(manifest), "--mode", "iptables", "--node-name", "n"]) == 0
    assert gc.isenabled()


def test_a_node_name_is_known_from_its_node_object_or_an_endpoint() -> None:
    from netkit.cli.inputs import unknown_node
    from tests.factories import endpoint, node, objects, slice_
    objs = objects(node("node-a"), slice_(endpoints=[endpoint("10.0.0.1", "node-b")]))
    assert unknown_node("node-a", objs, defaulted=False) == ""  # a Node object
    assert unknown_node("node-b", objs, defaulted=False) == ""  # an endpoint's nodeName only
    said = unknown_node("node-c", objs, defaulted=True)
    assert said.startswith("node name 'node-c' (the hostname; give --node-name) matches no Node object")
    assert "known: node-a, node-b" in said
    assert unknown_node("node-c", objects(slice_(endpoints=[endpoint("10.0.0.1", None)])), defaulted=False) == ""
