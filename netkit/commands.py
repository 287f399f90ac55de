"""compile, apply, diff and cleanup: the dataplane subcommands (filled in by the iptables work)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    pass
