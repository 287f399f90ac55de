"""`netkit trace` names the Service port it matched (from the model), takes `--to SERVICE.NAMESPACE[:PORT]`,
says when no Service has the address, calls a DNAT `dnat`, and starts from the node's own IP."""

from __future__ import annotations

import json
from ipaddress import ip_address

import pytest

from netkit.cli import main
from netkit.cli.tracing import default_source
from tests.conftest import ROOT

EXAMPLES = ROOT / "examples"
ARGS = ["trace", "-f", str(EXAMPLES), "--node-name", "node-a", "--cluster-cidr", "10.244.0.0/16"]
MODES = ("iptables", "nftables", "ipvs")


def trace_json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    assert main([*ARGS, *extra, "-o", "json"]) == 0
    doc: dict[str, object] = json.loads(capsys.readouterr().out)
    return doc


@pytest.mark.parametrize("mode", MODES)
def test_names_the_service_port_by_address_and_by_name(mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    by_ip = trace_json(capsys, "--mode", mode, "--to", "10.96.0.53:53/udp")
    by_name = trace_json(capsys, "--mode", mode, "--to", "kube-dns.kube-system:dns")
    want = {"namespace": "kube-system", "name": "kube-dns", "port": "dns", "protocol": "udp", "number": 53,
            "via": "cluster IP"}
    assert by_ip["service"] == by_name["service"] == want
    assert by_name["packet"] == by_ip["packet"]
    assert by_ip["schema"] == "netkit.trace/v1" and by_ip["note"] is None
    verdicts = {o["verdict"] for o in by_ip["outcomes"]}  # type: ignore[attr-defined]
    assert verdicts == {"dnat"}


def test_port_by_number_and_node_port(capsys: pytest.CaptureFixture[str]) -> None:
    assert trace_json(capsys, "--to", "kube-dns.kube-system:53/tcp")["service"] == {
        "namespace": "kube-system", "name": "kube-dns", "port": "dns-tcp", "protocol": "tcp", "number": 53,
        "via": "cluster IP"}
    doc = trace_json(capsys, "--to", "192.0.2.10:30080")
    assert doc["service"]["name"] == "web-nodeport" and doc["service"]["via"] == "node port"  # type: ignore[index]


def test_text_names_the_service(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--to", "web.default:80"]) == 0
    assert "  Service default/web port http (80/tcp), cluster IP\n" in capsys.readouterr().out


@pytest.mark.parametrize(("to", "note"), [
    ("10.96.9.9:80", "no Service has 10.96.9.9"),
    ("10.96.0.10:81", "10.96.0.10 is Service default/web's, which has no port 81/tcp (it has 80/tcp)"),
])
def test_says_when_no_service_has_it(to: str, note: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--to", to]) == 0
    assert f"  note: {note}\n" in capsys.readouterr().out
    doc = trace_json(capsys, "--to", to)
    assert doc["note"] == note and doc["service"] is None
    assert [o["verdict"] for o in doc["outcomes"]] == ["accept"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("to", "error"), [
    ("kube-dns.kube-system", "names more than one port of kube-system/kube-dns"),
    ("nope.default:80", "no Service default/nope"),
    ("web.default:99", "matches no port of default/web"),
])
def test_bad_service_names_are_one_line(to: str, error: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--to", to]) == 2
    err = capsys.readouterr().err
    assert err.startswith("netkit: error: --to ") and error in err and err.count("\n") == 1


def test_a_name_needs_manifests(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "--to", "web.default:80", "--netns", "nowhere-ovw"]) == 2
    assert "needs the manifests (-f)" in capsys.readouterr().err


def test_default_source_is_the_node_ip_not_loopback() -> None:
    lo, node, pod = ip_address("127.0.0.1"), ip_address("192.0.2.10"), ip_address("10.244.1.5")
    dst = ip_address("10.96.0.10")
    assert default_source((node,), (lo, pod, node), dst) == node
    assert default_source((), (lo, pod), dst) == pod
    assert default_source((), (lo,), dst) == lo
    assert default_source((node,), (), ip_address("fd00::10")) is None
