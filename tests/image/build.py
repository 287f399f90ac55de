"""netkit's node image for the tests that run it (tests/image, tests/lab_cluster): built once per
machine and checkout by scripts/build-image.sh (its base cached in ~/.cache/netkit-image, the image
by an input hash on it, concurrent builds serialised), so only the first run pays for the Debian root.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

import netkit
from netkit.lab.cluster import podman as runtime
from netkit.lab.errors import LabError
from tests.conftest import ROOT, need_root_and

IMAGE = f"netkit:{netkit.__version__}"


def need_podman() -> runtime.Podman:
    need_root_and("ip")
    try:
        return runtime.Podman.find()
    except LabError:
        pytest.skip("needs podman (installed by make test)")


def build_image() -> str:
    """netkit's image, built if its inputs changed; skips where podman or mmdebstrap is missing."""
    need_podman()
    if shutil.which("mmdebstrap") is None:
        pytest.skip("needs mmdebstrap (installed by make test)")
    proc = subprocess.run([str(ROOT / "scripts" / "build-image.sh")], cwd=ROOT, capture_output=True, text=True,
                          timeout=1800, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return IMAGE
