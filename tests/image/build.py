"""netkit's node image for the tests that run it (tests/image, tests/lab_cluster): built once per
machine and checkout by scripts/build-image.sh (its base cached in ~/.cache/netkit-image, concurrent
builds serialised), so only the first run pays for the Debian root. The tests run the checkout's own
tag, `netkit:<version>-<hash of the image's inputs>`: never a stale image, nor another checkout's.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

import netkit
from netkit.lab.cluster import podman as runtime
from netkit.lab.errors import LabError
from tests.conftest import ROOT, need_root_and


def need_podman() -> runtime.Podman:
    need_root_and("ip")
    try:
        return runtime.Podman.find()
    except LabError:
        pytest.skip("needs podman (installed by make test)")


def build_image() -> str:
    """The checkout's image tag, built if it is not there; skips where podman or mmdebstrap is missing."""
    need_podman()
    if shutil.which("mmdebstrap") is None:
        pytest.skip("needs mmdebstrap (installed by make test)")
    script = str(ROOT / "scripts" / "build-image.sh")
    proc = subprocess.run([script], cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tag = subprocess.run([script, "--tag"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert tag.startswith(f"netkit:{netkit.__version__}-"), tag
    return tag
