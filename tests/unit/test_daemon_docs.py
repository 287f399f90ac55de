"""docs/daemon.md's compatibility tables cover the code's: every KubeProxyConfiguration field, every
flag and every metric appears with what netkit does with it."""

from __future__ import annotations

from pathlib import Path

from netkit.config import KPC_FIELDS, Kind
from netkit.runtime.flags import FLAGS
from netkit.runtime.metrics import KUBE_PROXY_METRICS, NETKIT_METRICS

DOC = (Path(__file__).parents[2] / "docs" / "daemon.md").read_text()


def _rows() -> set[str]:
    return {line.split("|")[1].strip() for line in DOC.splitlines() if line.startswith("| `")}


def test_every_field_flag_and_metric_has_a_row() -> None:
    rows = _rows()
    for f in KPC_FIELDS:
        if f.kind is not Kind.OBJECT:
            assert f"`{f.path}`" in rows, f.path
    flag_rows = " ".join(rows)
    for flag in FLAGS:
        assert f"`--{flag.name}`" in flag_rows, flag.name
    for m in (*KUBE_PROXY_METRICS, *NETKIT_METRICS):
        assert f"`{m.name}`" in rows, m.name
