"""The node image ships the runtime dependencies alone: no module netkit runs (the daemon, cluster DNS,
the CLI, the lab) imports the official `kubernetes` client, which only the tests use (netkit.testing)."""

from __future__ import annotations

import subprocess
import sys

# what the official client pulls in; none of it is in pyproject.toml's runtime dependencies
CLIENT = ("kubernetes", "urllib3", "requests", "pydantic")

CODE = f"""
import importlib, pkgutil, sys
import netkit, netkit.runtime.daemon, netkit.sources.kube, netkit.sources.apiclient, netkit.dns.command
from netkit.cli import parser
parser(["run"]).parse_args(["run"])
for m in pkgutil.walk_packages(netkit.__path__, "netkit."):
    if not m.name.startswith(("netkit.testing", "netkit.__main__")):
        importlib.import_module(m.name)
print(sorted({{n.split(".")[0] for n in sys.modules}} & set({CLIENT!r})))
"""


def test_no_module_netkit_runs_imports_the_official_client() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
