"""`-o json` / `-o yaml` for every command that prints a document (the same document either way)."""

from __future__ import annotations

import json
import sys
from typing import Any

STRUCTURED = ("json", "yaml")


def emit(doc: Any, fmt: str) -> None:
    if fmt == "yaml":
        import yaml  # PyYAML, already a dependency for reading manifests

        sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
        return
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
