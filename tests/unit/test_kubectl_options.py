"""kubectl habits: -n/--namespace and -l/--selector on compile, diff and trace; -o yaml; -o json on
apply and cleanup; a bad flag answered with the subcommand's own usage."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import yaml

from netkit.cli import main
from netkit.cli.filters import parse_selector
from netkit.errors import NetkitError
from tests.conftest import ROOT

EXAMPLES = str(ROOT / "examples")
NODE = ["--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16"]


def compiled(capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    assert main(["compile", "-f", EXAMPLES, *NODE, "--ip-family", "ipv4", *extra]) == 0
    return capsys.readouterr().out


def services_in(ruleset_text: str) -> set[str]:
    return {line.split('--comment "', 1)[1].split(":")[0] for line in ruleset_text.splitlines()
            if "-A KUBE-SERVICES" in line and "cluster IP" in line}


@pytest.mark.parametrize(("extra", "want"), [
    ((), {"default/web", "default/web-nodeport", "default/web-lb", "default/dual", "shop/sticky",
          "kube-system/kube-dns"}),
    (("-n", "shop"), {"shop/sticky"}),
    (("--namespace", "kube-system"), {"kube-system/kube-dns"}),
    (("-l", "app=web"), {"default/web"}),
    (("-l", "k8s-app in (kube-dns, other)"), {"kube-system/kube-dns"}),
    (("-n", "default", "-l", "app!=web"), {"default/web-nodeport", "default/web-lb", "default/dual"}),
    (("-n", "default", "-l", "!app"), {"default/web-nodeport", "default/web-lb", "default/dual"}),
    (("-n", "nowhere"), set()),
])
def test_compile_filters(extra: tuple[str, ...], want: set[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert services_in(compiled(capsys, *extra)) == want


def test_diff_filters_the_service_lines_and_the_status(capsys: pytest.CaptureFixture[str]) -> None:
    # Against a node that has nothing (the machine's own namespace holds no netkit rules; diff only reads)
    def diff(*extra: str) -> tuple[int, dict[str, Any]]:
        status = main(["diff", "-f", EXAMPLES, *NODE, "--ip-family", "ipv4", "-o", "json", *extra])
        return status, json.loads(capsys.readouterr().out)

    status, doc = diff("-n", "shop")
    names = [s["service"]["name"] for s in doc["families"]["IPv4"]["services"]]
    assert status == 1 and names == ["sticky"] and doc["totals"]["add"] == 1
    assert "payload" not in doc["families"]["IPv4"]  # the rules are shared: a filter shows service lines only
    status, doc = diff("-l", "app=nothing-has-this")
    assert status == 0 and doc["in_sync"] is True and doc["families"]["IPv4"]["services"] == []


def test_trace_namespace_resolves_short_names(capsys: pytest.CaptureFixture[str]) -> None:
    def service(*extra: str) -> Any:
        assert main(["trace", "-f", EXAMPLES, *NODE, "-o", "json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["service"]
    assert service("-n", "shop", "--to", "sticky:80")["namespace"] == "shop"
    assert service("--to", "web:http")["name"] == "web"  # no -n: `default`, as kubectl
    # a filtered-out Service is not named
    assert service("-n", "shop", "--to", "10.96.0.10:80") is None


def test_yaml_is_the_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    as_json = json.loads(compiled(capsys, "-o", "json"))
    assert yaml.safe_load(compiled(capsys, "-o", "yaml")) == as_json
    assert main(["trace", "-f", EXAMPLES, *NODE, "--to", "web.default:80", "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["schema"] == "netkit.trace/v1"


@pytest.mark.parametrize("text", ["a=b=c", "a in b", "(x)"])
def test_bad_selectors_are_one_error(text: str) -> None:
    with pytest.raises(NetkitError, match="--selector"):
        parse_selector(text)


@pytest.mark.parametrize(("argv", "usage"), [
    (["diff", "-f", EXAMPLES, "--bogus"], "usage: netkit diff "),
    (["compile", "-f", EXAMPLES, "--nope"], "usage: netkit compile "),
    (["cleanup", "--bogus"], "usage: netkit cleanup "),
    (["lab", "up", "--bogus"], "usage: netkit lab up "),
])
def test_a_bad_flag_shows_the_subcommands_usage(argv: list[str], usage: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "netkit", *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith(usage), proc.stderr
    assert "unrecognized arguments" in proc.stderr


@pytest.mark.parametrize("command", ["compile", "diff", "apply", "trace", "cleanup"])
def test_every_dataplane_command_has_json_and_yaml(command: str) -> None:
    from netkit.cli import parser
    sub = next(a for a in parser([command])._actions if a.dest == "command")
    p = sub.choices[command]  # type: ignore[attr-defined]
    out = next(a for a in p._actions if a.dest == "output")
    assert {"json", "yaml"} <= set(out.choices)
    mode = next((a for a in p._actions if a.dest == "mode"), None)
    assert mode is None or mode.help
