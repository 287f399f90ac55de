"""The `netkit` command line: one subcommand per user job.

Each area owns its subcommands in a module exposing `register(subparsers)`; the registered handler
takes the parsed arguments and returns the exit status. Errors netkit understands (`NetkitError`)
are printed on stderr and exit with status 2, like diff(1) and kubectl.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from netkit import __version__
from netkit.errors import NetkitError

# Modules that add subcommands. Each exposes register(subparsers: argparse._SubParsersAction).
COMMAND_MODULES: tuple[str, ...] = (
    "netkit.cli.commands",
    "netkit.dns.command",
    "netkit.lab.command",
    "netkit.runtime.command",
)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="netkit",
        description="kube-proxy dataplane and Service-networking toolkit",
    )
    top.add_argument("--version", action="version", version=f"netkit {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        status: int = args.func(args)
        return status
    except NetkitError as exc:
        print(f"netkit: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `netkit diff | head`
        sys.stderr.close()
        return 0
