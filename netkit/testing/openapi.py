"""The OpenAPI documents of the test API server, and the server side of `fieldValidation`.

Theory of operation. kubectl validates a manifest before sending it (its default `--validate=strict`):
it reads the OpenAPI v3 document of the object's group-version (`/openapi/v3` lists them, then
`/openapi/v3/api/v1`, `/openapi/v3/apis/<group>/<version>`), finds the PATCH operation tagged with
the object's `x-kubernetes-group-version-kind`, and when that operation takes the `fieldValidation`
query parameter it leaves the check to the server: it sends `fieldValidation=Strict` and the server
refuses unknown fields, naming them. Without the documents kubectl stops with "failed to download
openapi" unless told `--validate=false`. `kubectl apply` also computes its strategic merge patch from
the v3 schemas (`x-kubernetes-patch-merge-key`).

The schemas are Kubernetes' own, not written here: the `kubernetes-validate` package ships every
release's definitions (`kubernetes-json-schema/v1.32.0-local/_definitions.json`, converted by its
maintainers to JSON Schema 2020-12); `schemas()` converts them back to OpenAPI (`$ref` targets,
`type: [t, "null"]` → `type: t`, IntOrString as `format: int-or-string`) for the kinds the server
stores and what they reference. The version is the one `/version` reports. The paths (list, create,
get, replace, patch, delete per resource, with kube-apiserver's operation extensions and query
parameters) are generated from the server's resource table.

The documents are built once per set of served resources (and never changed after: callers only
serialise them). `/openapi/v2` is served as JSON only: client-go asks for it as protobuf (gnostic's
encoding), which this server does not speak; kubectl uses v3 when v3 answers, as here.

Field validation (`fieldValidation` on create, update and patch): `Strict` refuses an object with
unknown fields (400, kube-apiserver's wording: `Service in version "v1" cannot be handled as a Service:
strict decoding error: unknown field "spec.foo"`); `Warn` (the default, as kube-apiserver since 1.27)
drops them and says so in a `Warning` header; `Ignore` drops them silently. Unknown fields are never
stored, as on a real server.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from importlib import resources
from typing import Any

from netkit.testing.apistore import RESOURCES, ApiError, Resource

JSON = dict[str, Any]
KUBE_VERSION = "v1.32.0"  # the schemas' release; /version says 1.32
DIRECTIVES = ("Ignore", "Warn", "Strict")
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
PATCH_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")  # what PATCH takes


# --- the schemas -----------------------------------------------------------------------------------


@functools.cache
def _json_schema_defs() -> Mapping[str, JSON]:
    """Kubernetes' definitions as `kubernetes-validate` ships them (JSON Schema 2020-12)."""
    path = resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"{KUBE_VERSION}-local" \
        / "_definitions.json"
    defs: Mapping[str, JSON] = json.loads(path.read_text(encoding="utf-8"))["$defs"]
    return defs


def _to_openapi(schema: Any, ref_prefix: str, name: str = "") -> Any:
    """One JSON Schema 2020-12 node back to OpenAPI's dialect."""
    if not isinstance(schema, dict):
        return schema
    if name.endswith("intstr.IntOrString"):
        return {"type": "string", "format": "int-or-string"}
    out: JSON = {}
    for key, value in schema.items():
        if key == "$ref":
            out[key] = ref_prefix + value.removeprefix("#/$defs/")
        elif key == "type" and isinstance(value, list):
            out[key] = next(t for t in value if t != "null")
        elif key == "oneOf" and all(isinstance(s, dict) and "type" in s for s in value):
            out["type"] = _to_openapi(value[0], ref_prefix)["type"]  # Quantity: a string (or a number)
        elif key == "properties":
            out[key] = {k: _to_openapi(v, ref_prefix) for k, v in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _to_openapi(value, ref_prefix)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [_to_openapi(v, ref_prefix) for v in value]
        else:
            out[key] = value
    return out


def _refs(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str):
            yield ref.rsplit("/", 1)[-1]
        for value in schema.values():
            yield from _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _refs(value)


def definition_name(group: str, version: str, kind: str) -> str:
    for name, schema in _json_schema_defs().items():
        if {"group": group, "version": version, "kind": kind} in schema.get("x-kubernetes-group-version-kind", []):
            return name
    raise KeyError(f"no schema for {group}/{version} {kind}")


def _roots(served: Sequence[Resource]) -> list[str]:
    names = [META + n for n in ("Patch", "Status", "DeleteOptions")]
    for r in served:
        names += [definition_name(r.group, r.version, r.kind), definition_name(r.group, r.version, r.kind + "List")]
    return names


@functools.cache
def schemas(served: tuple[Resource, ...], ref_prefix: str) -> Mapping[str, JSON]:
    """The definitions the served kinds need (and what they reference), in OpenAPI's dialect."""
    defs = _json_schema_defs()
    todo, seen = _roots(served), set[str]()
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(_refs(defs[name]))
    return {name: _to_openapi(defs[name], ref_prefix, name) for name in sorted(seen)}


# --- the documents ---------------------------------------------------------------------------------


def _base(r: Resource) -> str:
    return f"/apis/{r.group}/{r.version}" if r.group else f"/api/{r.version}"


def _operations(r: Resource, prefix: str) -> dict[str, dict[str, JSON]]:
    """{path: {method: operation}} for one resource; schema references start with `prefix`."""

    def ref(name: str) -> JSON:
        return {"$ref": prefix + name}

    gvk = {"group": r.group, "version": r.version, "kind": r.kind}
    obj = ref(definition_name(r.group, r.version, r.kind))
    lst = ref(definition_name(r.group, r.version, r.kind + "List"))
    ns = "/namespaces/{namespace}" if r.namespaced else ""
    collection, item = f"{_base(r)}{ns}/{r.plural}", f"{_base(r)}{ns}/{r.plural}/{{name}}"
    writes = ["dryRun", "fieldManager", "fieldValidation"]

    def op(action: str, verb: str, schema: JSON, query: Sequence[str], body: JSON | None = None) -> JSON:
        out: JSON = {"operationId": f"{verb}{r.kind}", "x-kubernetes-action": action,
                     "x-kubernetes-group-version-kind": gvk,
                     "parameters": [{"name": q, "in": "query", "schema": {"type": "string"},
                                     "type": "string", "uniqueItems": True} for q in query],
                     "responses": {"200": {"description": "OK", "schema": schema,
                                           "content": {"application/json": {"schema": schema}}}}}
        if body is not None:
            out["requestBody"] = {"required": True, "content": {t: {"schema": body[t]} for t in body}}
        return out

    paths = {
        collection: {
            "get": op("list", "list", lst, ["labelSelector", "fieldSelector", "limit", "continue",
                                            "resourceVersion", "watch", "timeoutSeconds"]),
            "post": op("post", "create", obj, writes, {"application/json": obj}),
        },
        item: {
            "get": op("get", "read", obj, []),
            "put": op("put", "replace", obj, writes, {"application/json": obj}),
            "patch": op("patch", "patch", obj, [*writes, "force"], {t: ref(META + "Patch") for t in PATCH_TYPES}),
            "delete": op("delete", "delete", ref(META + "Status"), ["gracePeriodSeconds", "propagationPolicy"]),
        },
    }
    if r.namespaced:
        paths[f"{_base(r)}/{r.plural}"] = {"get": op("list", "list", lst, ["labelSelector", "fieldSelector"])}
    return paths


@functools.cache
def v3_document(served: tuple[Resource, ...], group_version: str) -> JSON | None:
    """`/openapi/v3/<api/v1 | apis/group/version>`, or None for a group-version not served."""
    chosen = tuple(r for r in served if group_path(r) == group_version)
    if not chosen:
        return None
    prefix = "#/components/schemas/"
    paths: JSON = {}
    for r in chosen:
        paths.update(_operations(r, prefix))
    for ops in paths.values():
        for operation in ops.values():
            for p in operation["parameters"]:
                p.pop("type"), p.pop("uniqueItems")
            for response in operation["responses"].values():
                response.pop("schema")
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": KUBE_VERSION},
            "paths": paths, "components": {"schemas": dict(schemas(chosen, prefix))}}


@functools.cache
def v2_document(served: tuple[Resource, ...]) -> JSON:
    prefix = "#/definitions/"
    paths: JSON = {}
    for r in served:
        paths.update(_operations(r, prefix))
    for ops in paths.values():
        for operation in ops.values():
            for p in operation["parameters"]:
                p.pop("schema")
            body = operation.pop("requestBody", None)
            if body is not None:
                schema = next(iter(body["content"].values()))["schema"]
                operation["parameters"].append({"name": "body", "in": "body", "required": True, "schema": schema})
            for response in operation["responses"].values():
                response.pop("content")
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": KUBE_VERSION}, "paths": paths,
            "definitions": dict(schemas(served, prefix))}


def group_path(r: Resource) -> str:
    return f"apis/{r.group}/{r.version}" if r.group else f"api/{r.version}"


@functools.cache
def v3_index(served: tuple[Resource, ...]) -> JSON:
    """`/openapi/v3`: each group-version's document with the hash clients cache it by."""
    out: JSON = {}
    for path in sorted({group_path(r) for r in served}):
        doc = v3_document(served, path)
        digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest().upper()
        out[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": out}


# --- field validation ------------------------------------------------------------------------------


def unknown_fields(obj: Any, schema: Mapping[str, Any], defs: Mapping[str, JSON], path: str = "") -> list[str]:
    """The paths of `obj`'s fields that `schema` does not know (kube's spelling: `spec.ports[0].foo`)."""
    while "$ref" in schema:
        schema = defs[str(schema["$ref"]).rsplit("/", 1)[-1]]
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    found: list[str] = []
    if isinstance(obj, dict):
        props, extra = schema.get("properties"), schema.get("additionalProperties")
        for key, value in obj.items():
            here = f"{path}.{key}" if path else str(key)
            if isinstance(props, dict):
                if key in props:
                    found += unknown_fields(value, props[key], defs, here)
                else:
                    found.append(here)
            elif isinstance(extra, dict):
                found += unknown_fields(value, extra, defs, here)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for n, value in enumerate(obj):
            found += unknown_fields(value, schema["items"], defs, f"{path}[{n}]")
    return found


def prune(obj: Any, fields: Sequence[str]) -> Any:
    """`obj` without the fields `unknown_fields` named (a new object)."""
    out = json.loads(json.dumps(obj))
    for field in fields:
        parts = field.replace("[", ".[").split(".")
        node = out
        for part in parts[:-1]:
            node = node[int(part[1:-1])] if part.startswith("[") else node[part]
        node.pop(parts[-1], None)
    return out


def validate(obj: JSON, r: Resource, directive: str) -> tuple[JSON, list[str]]:
    """(the object to store, warnings) under `fieldValidation=directive` ("" is Warn); Strict refuses
    unknown fields with kube-apiserver's message."""
    directive = directive or "Warn"
    if directive not in DIRECTIVES:
        raise ApiError(400, "BadRequest", f'fieldValidation: Unsupported value: "{directive}": supported '
                                          f'values: "{DIRECTIVES[0]}", "{DIRECTIVES[1]}", "{DIRECTIVES[2]}"')
    defs = schemas(RESOURCES, "#/definitions/")
    unknown = unknown_fields(obj, {"$ref": definition_name(r.group, r.version, r.kind)}, defs)
    if not unknown:
        return obj, []
    named = ", ".join(f'unknown field "{f}"' for f in unknown)
    if directive == "Strict":
        raise ApiError(400, "BadRequest", f'{r.kind} in version "{r.version}" cannot be handled as a {r.kind}: '
                                          f"strict decoding error: {named}")
    return prune(obj, unknown), [f'unknown field "{f}"' for f in unknown] if directive == "Warn" else []
