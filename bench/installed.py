"""How the benchmarks start netkit: as an installed copy starts, its modules already compiled to
bytecode. `pip install` compiles a package's modules when it installs them; a checkout run with
PYTHONDONTWRITEBYTECODE set (some shells and CI images set it) compiles all of netkit's modules
again at every start, ~0.05 s of the ~0.1 s that importing `netkit diff`'s modules takes.

    env = installed_env()            # the environment without PYTHONDONTWRITEBYTECODE, modules compiled
    subprocess.run([sys.executable, "-m", "netkit", ...], env=env)
"""

from __future__ import annotations

import compileall
import os
from pathlib import Path

import netkit


def installed_env() -> dict[str, str]:
    """os.environ without PYTHONDONTWRITEBYTECODE, once netkit's modules are compiled in place
    (their __pycache__ directories, as any run of the checkout without that variable writes them)."""
    package = Path(netkit.__file__).resolve().parent
    if not compileall.compile_dir(str(package), quiet=1):
        raise RuntimeError(f"compiling {package} to bytecode failed")
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
