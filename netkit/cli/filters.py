"""kubectl's `-n/--namespace` and `-l/--selector` for compile, diff and trace: which Services a
command looks at. A label selector is kubectl's: `k=v`, `k==v`, `k!=v`, `k` (has the label), `!k`,
`k in (a,b)`, `k notin (a,b)`, joined by commas. Without either, every namespace and Service."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from netkit.errors import NetkitError
from netkit.model import NodeState, Objects
from netkit.model.types import ObjectRef

_SET = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|!=|=)\s*([A-Za-z0-9._-]*)\s*$")
_HAS = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*$")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "in":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values


def parse_selector(text: str) -> tuple[Requirement, ...]:
    out: list[Requirement] = []
    for part in _split(text):
        if m := _SET.match(part):
            values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            out.append(Requirement(m.group(1), m.group(2), values))
        elif m := _EQ.match(part):
            out.append(Requirement(m.group(1), "notin" if m.group(2) == "!=" else "in", frozenset({m.group(3)})))
        elif m := _HAS.match(part):
            out.append(Requirement(m.group(2), "!exists" if m.group(1) else "exists"))
        else:
            raise NetkitError(f"--selector {text!r}: cannot read {part.strip()!r} (e.g. app=web,tier!=db,env in (a,b))")
    return tuple(out)


def _split(text: str) -> list[str]:
    """Commas outside parentheses separate requirements."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in [*parts, cur] if p.strip()]


def add_filter_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("which Services (as kubectl)")
    g.add_argument("-n", "--namespace", metavar="NS", help="only Services in this namespace (default: every namespace)")
    g.add_argument("-l", "--selector", metavar="SELECTOR",
                   help="only Services whose labels match, e.g. app=web,tier!=db (kubectl's label selector)")


@dataclass(frozen=True, slots=True)
class Filter:
    namespace: str | None = None
    selector: tuple[Requirement, ...] = ()

    @staticmethod
    def of(args: argparse.Namespace) -> Filter:
        sel = getattr(args, "selector", None)
        return Filter(getattr(args, "namespace", None), parse_selector(sel) if sel else ())

    @property
    def active(self) -> bool:
        return self.namespace is not None or bool(self.selector)

    def refs(self, objects: Objects) -> frozenset[ObjectRef]:
        """The Services this filter selects."""
        return frozenset(s.ref for s in objects.services if self._keeps(s.ref.namespace, dict(s.labels)))

    def _keeps(self, namespace: str, labels: dict[str, str]) -> bool:
        if self.namespace is not None and namespace != self.namespace:
            return False
        return all(r.matches(labels) for r in self.selector)

    def state(self, state: NodeState, objects: Objects) -> NodeState:
        """The node state with only the selected Services' ports."""
        if not self.active:
            return state
        keep = self.refs(objects)
        return replace(state, ports=tuple(p for p in state.ports if p.name.ref in keep))

    def keys(self, keys: Iterable[tuple[str, str]], objects: Objects) -> set[tuple[str, str]]:
        """Of (namespace, name) pairs, those the filter selects (a Service no longer in the input
        is selected by namespace alone: its labels are gone with it)."""
        known = {(s.ref.namespace, s.ref.name): dict(s.labels) for s in objects.services}
        return {k for k in keys if self._keeps(k[0], known.get(k, {})) and (k in known or not self.selector)}
