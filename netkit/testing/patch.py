"""PATCH bodies for the test API server: JSON merge patch (RFC 7386) and the part of Kubernetes'
strategic merge patch that `kubectl apply`, `kubectl label`, `kubectl annotate` and `kubectl scale`
send. Pure.

Strategic merge patch, as far as implemented (k8s.io/apimachinery/pkg/util/strategicpatch): maps
merge recursively; `null` deletes a key; lists of objects with a known merge key (`ports` by `port`
or `containerPort`, `containers`/`env`/`volumes` by `name`, `volumeMounts` by `mountPath`,
`conditions` by `type`) merge item by item, and `{"$patch": "delete", <key>: v}` removes an item;
`$setElementOrder/<list>` puts the merged list in the patch's order; `$patch: replace` on a map
replaces it; every other list is replaced whole. Not implemented: `$retainKeys`,
`$deleteFromPrimitiveList`, and merge keys read from OpenAPI (the table below stands in for it).
"""

from __future__ import annotations

from typing import Any

MERGE_KEYS: dict[str, tuple[str, ...]] = {
    "ports": ("port", "containerPort"),
    "containers": ("name",), "initContainers": ("name",), "env": ("name",), "volumes": ("name",),
    "volumeMounts": ("mountPath",), "conditions": ("type",), "tolerations": ("key",),
}
ORDER = "$setElementOrder/"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    if patch.get("$patch") == "replace":
        return {k: v for k, v in patch.items() if not k.startswith("$")}
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        if v is None:
            out.pop(k, None)
        elif isinstance(v, list) and merge_key(k, v, out.get(k)):
            out[k] = merge_list(out.get(k) or [], v, merge_key(k, v, out.get(k)), patch.get(ORDER + k))
        elif isinstance(v, dict):
            out[k] = strategic_merge_patch(out.get(k), v)
        else:
            out[k] = v
    for k, order in patch.items():  # an order for a list the patch did not touch
        name = k.removeprefix(ORDER)
        if k.startswith(ORDER) and name not in patch and isinstance(out.get(name), list):
            key = merge_key(name, order, out[name])
            if key:
                out[name] = ordered(out[name], order, key)
    return out


def merge_key(field: str, *lists: Any) -> str:
    items = [i for lst in lists if isinstance(lst, list) for i in lst]
    if not items or not all(isinstance(i, dict) for i in items):
        return ""
    return next((k for k in MERGE_KEYS.get(field, ()) if any(k in i for i in items)), "")


def merge_list(current: list[Any], patch: list[Any], key: str, order: Any) -> list[Any]:
    out = [dict(i) for i in current if isinstance(i, dict)]
    for item in patch:
        index = next((n for n, i in enumerate(out) if i.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
        elif index is None:
            out.append({k: v for k, v in item.items() if not k.startswith("$")})
        else:
            out[index] = strategic_merge_patch(out[index], item)
    return ordered(out, order, key) if isinstance(order, list) else out


def ordered(items: list[Any], order: list[Any], key: str) -> list[Any]:
    rank = {o.get(key): n for n, o in enumerate(order) if isinstance(o, dict)}
    return sorted(items, key=lambda i: rank.get(i.get(key), len(rank)))
