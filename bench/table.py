"""Render the figures committed in bench/results/*.json as the table in docs/benchmarks.md.

    .venv/bin/python bench/table.py           # print the table
    .venv/bin/python bench/table.py --write   # replace the table between the markers in docs/benchmarks.md

After re-running a benchmark with `--json bench/results/NAME.json`, run `--write` and commit both;
tests/unit/test_bench_table.py fails while the page and the JSON files disagree.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import Figure, read  # noqa: E402  (bench/results.py)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
BEGIN = "<!-- bench/table.py: generated from bench/results/*.json; do not edit by hand -->"
END = "<!-- end of bench/table.py's table -->"

# the order of the files on the page; a file not named here comes after these, by name
ORDER = ["compile", "compile-command", "compile-50k", "sync", "sync-legacy", "sync-nftables",
         "sync-nftables-50k", "coldstart", "coldstart-50k", "imports", "diff-iptables", "diff-nftables", "nftables",
         "nftables-50k", "ipvs", "ipvs-daemon", "dns", "dns-relist", "conntrack", "scenarios", "cluster",
         "cluster-image",
         "python-iptables"]


def number(x: float) -> str:
    """A measured value: whole numbers as they are, else three significant figures; thousands separated,
    never in exponent form."""
    if float(x).is_integer() or abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}" if abs(x) >= 1e-3 else f"{x:.1e}"


def ratio(x: float) -> str:
    """A ratio: three significant figures, trailing zeros kept from 1 up (1.00×, 0.19×, 0.0328×)."""
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:#.3g}".rstrip(".") if abs(x) >= 1 else f"{x:.3g}"


def _cells(f: Figure) -> list[str]:
    value = f"**{number(f.value)} {f.unit}".rstrip() + "**" if f.value is not None else "—"
    base = f"{number(f.baseline)} {f.unit}".rstrip() if f.baseline is not None else "—"
    times = f"**{ratio(f.ratio)}×**" if f.ratio is not None else "—"
    return [f.what, value, base, times, f.target or "—"]


def files() -> list[Path]:
    found = sorted(RESULTS.glob("*.json"))
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(found, key=lambda p: (rank.get(p.stem, len(ORDER)), p.stem))


def table() -> str:
    rows = ["| command | figure | netkit | baseline | ratio | target |", "|---|---|---|---|---|---|"]
    notes = []
    for path in files():
        command, workload, figures = read(path)
        for i, f in enumerate(figures):
            first = f"`{command}`" if i == 0 else ""
            rows.append("| " + " | ".join([first, *_cells(f)]) + " |")
        notes.append(f"- `{command}` (bench/results/{path.name}): {workload}")
    return "\n".join([*rows, "", "What each command measures, and against what:", "", *notes])


def render_page(page: str) -> str:
    """`page` with the text between BEGIN and END replaced by the current table."""
    head, sep, rest = page.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise SystemExit(f"{PAGE.relative_to(ROOT)}: the markers {BEGIN!r} and {END!r} are missing")
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write the table into {PAGE.relative_to(ROOT)}")
    args = ap.parse_args()
    if args.write:
        PAGE.write_text(render_page(PAGE.read_text()))
    else:
        print(table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
