"""Benchmark figures as JSON: what every `bench/*.py --json PATH` writes (`--json -`: stdout), and
what `bench/table.py` renders into docs/benchmarks.md from the files committed in bench/results/.

A result file holds one run of one command:

    {"command": "bench/compile.py --runs 3",      the command that reproduces every figure in it
     "workload": "10,000 services × 10 endpoints; ...",   what was measured, against what baseline
     "figures": [{"what": "compile+render", "value": 0.61, "unit": "s",
                  "baseline": 18.6, "ratio": 0.033, "target": "≤ 0.25×"}, ...]}

`value` is netkit's figure; `baseline` the baseline's, measured in the same run (null: none);
`ratio` is value / baseline, or a ratio the benchmark measured directly (qps against dnsmasq's).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Figure:
    what: str
    value: float | None
    unit: str
    baseline: float | None = None
    ratio: float | None = None
    target: str = ""

    @staticmethod
    def measured(what: str, value: float, unit: str, baseline: float | None = None, target: str = "") -> Figure:
        """A figure and, when there is a baseline, the ratio to it."""
        ratio = value / baseline if baseline else None
        return Figure(what, value, unit, baseline, ratio, target)


def parse_args(ap: argparse.ArgumentParser) -> argparse.Namespace:
    """`ap`'s arguments with --json PATH added. With `--json -` the JSON alone goes to stdout and
    what the benchmark prints for people goes to stderr."""
    ap.add_argument("--json", metavar="PATH",
                    help="also write the figures, their baselines and ratios as JSON to PATH ('-': stdout, "
                         "the report to stderr); bench/table.py renders bench/results/*.json into "
                         "docs/benchmarks.md")
    args = ap.parse_args()
    if args.json == "-":
        sys.stdout = sys.stderr
    return args


def command_line(script: str, argv: list[str] | None = None) -> str:
    """`bench/NAME.py ARGS` as run, without --json (the command that reproduces the figures)."""
    args, out, skip = list(sys.argv[1:] if argv is None else argv), [], False
    for a in args:
        if skip:
            skip = False
        elif a == "--json":
            skip = True
        elif not a.startswith("--json="):
            out.append(a)
    return shlex.join([f"bench/{Path(script).name}", *out])


def runs(n: int) -> str:
    """How many runs a figure is the median of, for a workload's text."""
    return "one run" if n == 1 else f"medians of {n} runs"


def document(command: str, workload: str, figures: list[Figure]) -> dict[str, Any]:
    return {"command": command, "workload": workload, "figures": [asdict(f) for f in figures]}


def write(path: str | None, script: str, workload: str, figures: list[Figure]) -> None:
    """Write the result document to `path` ('-': stdout); nothing when `path` is None."""
    if path is None:
        return
    text = json.dumps(document(command_line(script), workload, figures), indent=2, ensure_ascii=False) + "\n"
    if path == "-":
        sys.__stdout__.write(text)
    else:
        Path(path).write_text(text)


def read(path: Path) -> tuple[str, str, list[Figure]]:
    doc = json.loads(path.read_text())
    return doc["command"], doc["workload"], [Figure(**f) for f in doc["figures"]]
