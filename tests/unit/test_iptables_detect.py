"""`--iptables-backend auto` never guesses: a backend whose tables cannot be read stops the detection."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

import pytest

from netkit.errors import KernelError
from netkit.model import IPFamily
from netkit.rules.iptables import kernel
from netkit.rules.iptables.kernel import IptablesKernel, detect_backend

DENIED = ("iptables-legacy-save v1.8.9 (legacy): Cannot initialize: Permission denied (you must be root)\n"
          "Perhaps iptables or your kernel needs to be upgraded.\n")
NFT_RULES = "*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n"
LEGACY_RULES = "*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j A\n-A PREROUTING -j B\nCOMMIT\n"


def fake_tools(monkeypatch: pytest.MonkeyPatch, answers: dict[str, tuple[int, str, str]]) -> None:
    """Each save tool answers (exit status, stdout, stderr); no hint chain over netlink."""
    def run(cmd: Sequence[str], netns: str | None = None, **_: object) -> subprocess.CompletedProcess[str]:
        code, out, err = answers[cmd[0]]
        return subprocess.CompletedProcess(list(cmd), code, out, err)
    monkeypatch.setattr(kernel, "run", run)
    monkeypatch.setattr(kernel, "_nft_hint", lambda family, netns: False)


def test_an_unreadable_legacy_backend_stops_the_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    """With NET_ADMIN alone iptables-legacy-save is refused; nft then holds rules, but the node may be
    a legacy one: the answer is an error naming the tool and its reason, not "nft"."""
    fake_tools(monkeypatch, {"iptables-legacy-save": (1, "", DENIED), "iptables-nft-save": (0, NFT_RULES, "")})
    with pytest.raises(KernelError) as err:
        detect_backend(IPFamily.IPV4, None)
    message = str(err.value)
    assert "\n" not in message
    assert "cannot read iptables-legacy-save (iptables-legacy-save v1.8.9 (legacy): Cannot initialize: " \
           "Permission denied (you must be root))" in message
    assert "--iptables-backend" in message
    with pytest.raises(KernelError):  # what a sync asks for first
        IptablesKernel(IPFamily.IPV4).tool("save")


def test_an_unreadable_nft_backend_stops_it_too(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_tools(monkeypatch, {"ip6tables-legacy-save": (0, LEGACY_RULES, ""),
                             "ip6tables-nft-save": (4, "", "ip6tables-nft-save: Operation not permitted\n")})
    denied = r"cannot read ip6tables-nft-save \(ip6tables-nft-save: Operation not permitted\)"
    with pytest.raises(KernelError, match=denied):
        detect_backend(IPFamily.IPV6, None)


def test_both_readable_the_one_with_more_rules_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_tools(monkeypatch, {"iptables-legacy-save": (0, LEGACY_RULES, ""), "iptables-nft-save": (0, NFT_RULES, "")})
    assert detect_backend(IPFamily.IPV4, None) == "legacy"
    fake_tools(monkeypatch, {"iptables-legacy-save": (0, "", ""), "iptables-nft-save": (0, NFT_RULES, "")})
    assert detect_backend(IPFamily.IPV4, None) == "nft"
