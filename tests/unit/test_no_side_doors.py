"""Nothing but the Backend interface stands between the commands, the daemon, the summaries and a mode.

Outside a mode's own package (netkit/rules/iptables/, nftables/, ipvs/) and the registry that hands
the modes out, no module imports a class of a mode package (its Ruleset, Plan, Kernel, …), whether
by name (`from netkit.rules.iptables.kernel import IptablesKernel`) or through the module
(`ipvs_ruleset.Ruleset`), so no `isinstance` on a mode's types can be written there either; what a
caller needs from a mode is a member of netkit.rules.backend.Backend or Kernel. Constants and pure
helpers of a mode (iptables' nfacct counter names, for the metrics) may be imported.

Read from the AST: imports inside functions and under TYPE_CHECKING count.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.unit.test_import_graph import ROOT, module_name, modules

MODES = ("iptables", "nftables", "ipvs")
# The one exception, and why: `netkit cleanup` and the survey of other modes' leftovers read every
# mode's kernel objects by what they are (iptables chains, IPVS virtual servers, nftables tables).
ALLOWED = {"netkit.rules.cleanup"}


def in_a_mode(module: str) -> bool:
    return any(module == f"netkit.rules.{m}" or module.startswith(f"netkit.rules.{m}.") for m in MODES)


def classes(path: Path) -> set[str]:
    """Classes a module defines, and module-level aliases of classes (`Ruleset = _ruleset.Ruleset`)."""
    tree = ast.parse(path.read_text())
    out = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    out |= {t.id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute | ast.Name)
            for t in n.targets if isinstance(t, ast.Name) and t.id[:1].isupper() and not t.id.isupper()}
    return out


def side_doors(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Each use of a mode's class in `module`: 'line N: name from module'."""
    tree = ast.parse(path.read_text())
    mode_modules: dict[str, str] = {}  # local name → a mode's module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and in_a_mode(node.module):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                if sub in known:
                    mode_modules[a.asname or a.name] = sub
                elif node.module in known and a.name in classes(known[node.module]):
                    yield f"line {node.lineno}: {a.name} from {node.module}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if in_a_mode(a.name) and a.asname:
                    mode_modules[a.asname] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in mode_modules:
            target = mode_modules[node.value.id]
            if node.attr in classes(known[target]):
                yield f"line {node.lineno}: {node.attr} from {target}"


def test_outside_the_modes_nothing_uses_a_modes_classes() -> None:
    known = modules()
    found = [f"{name}: {door}" for name, path in known.items()
             if not in_a_mode(name) and name not in ALLOWED | {"netkit.rules.registry"}
             for door in side_doors(name, path, known)]
    assert found == [], "use the Backend interface instead:\n" + "\n".join(found)


def test_the_reader_finds_a_side_door(tmp_path: Path) -> None:
    known = modules()
    path = tmp_path / "probe.py"
    path.write_text("from netkit.rules.iptables.kernel import IptablesKernel\n"
                    "from netkit.rules.ipvs import ruleset as rs\n"
                    "from netkit.rules.iptables.names import OWNED\n"
                    "def f(x):\n    return isinstance(x, rs.Ruleset)\n")
    assert list(side_doors("netkit.probe", path, known)) == [
        "line 1: IptablesKernel from netkit.rules.iptables.kernel", "line 5: Ruleset from netkit.rules.ipvs.ruleset"]
    assert module_name(ROOT / "netkit" / "rules" / "registry.py") == "netkit.rules.registry"
