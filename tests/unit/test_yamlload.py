"""Every YAML reader in netkit uses the C loader (libyaml) when PyYAML has it."""

from __future__ import annotations

import re

import pytest
import yaml

from netkit import yamlload
from tests.conftest import ROOT


def test_the_loader_is_libyamls_when_pyyaml_has_it() -> None:
    if not yaml.__with_libyaml__:
        pytest.skip("PyYAML here was built without libyaml")
    assert yamlload.SafeLoader is yaml.CSafeLoader
    assert yamlload.safe_load("a: [1, 2]") == {"a": [1, 2]}
    node = yamlload.compose("a: 1\nb: 2\n")
    assert node is not None and [k.start_mark.line for k, _ in node.value] == [0, 1]


def test_no_module_reads_yaml_past_it() -> None:
    direct = re.compile(r"\byaml\.(safe_load|safe_load_all|load|load_all|compose|full_load)\(")
    found = [str(p.relative_to(ROOT)) for p in (ROOT / "netkit").rglob("*.py")
             if p.name != "yamlload.py" and direct.search(p.read_text(encoding="utf-8"))]
    assert found == []
