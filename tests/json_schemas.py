"""The committed JSON Schemas of the commands' `-o json` documents (netkit/cli/schemas/), checked
with the jsonschema package, formats (ipv4, ipv6) included."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator

from netkit.cli.flows import FLOWS_SCHEMA_FILE


@cache
def flows_validator() -> Draft202012Validator:
    schema = json.loads(FLOWS_SCHEMA_FILE.read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def valid_flows_document(doc: Any) -> Any:
    """`doc` when it validates against netkit.flows/v1; else jsonschema's ValidationError."""
    flows_validator().validate(doc)
    return doc
