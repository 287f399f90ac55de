"""YAML read with PyYAML's safe loader in its C implementation (libyaml) when PyYAML was built with
it, else the Python one: the same documents and errors, ten times faster on large manifests. Every
reader of YAML in netkit goes through here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    return yaml.load(text, Loader=SafeLoader)  # noqa: S506 (a safe loader)


def safe_load_all(text: str) -> Iterator[Any]:
    return yaml.load_all(text, Loader=SafeLoader)  # noqa: S506 (a safe loader)


def compose(text: str) -> yaml.Node | None:
    """The node tree, with each node's line and column (for FILE:LINE in errors)."""
    return yaml.compose(text, Loader=SafeLoader)
