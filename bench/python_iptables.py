"""Benchmark: reading a big iptables table through the python-iptables bindings (libiptc) against
netkit's way, `iptables-save` + parse (IptablesKernel.dump), in the same run, on the same table.

For each size (services × 10 endpoints; bench/compile.py's objects), the compiled iptables ruleset is
loaded with `iptables-legacy-restore` into a network namespace the benchmark creates and always
removes. Then, in a child process inside that namespace: (a) python-iptables walks every rule of the
nat and filter tables and reads what netkit needs of each (source, destination, protocol, every
match with its parameters, the target with its parameters); (b) `IptablesKernel(backend="legacy").dump()`
runs iptables-legacy-save and parses it into netkit's Ruleset. Both count the rules they saw.

Two more facts it checks, once: the bindings see nothing of a table written through iptables-nft
(the default backend on current distributions); and opening a table in a namespace that has none
creates it, empty, in the legacy backend (a reader should not write).

    .venv/bin/python bench/python_iptables.py [--services 1000 3000] [--chart docs/img/python-iptables.png]

Needs root, iptables (both backends) and the `bench` extra (`pip install '.[bench]'`: python-iptables,
matplotlib for the chart).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results  # noqa: E402  (bench/results.py: --json)
from charts import line_chart  # noqa: E402
from compile import CONFIG, objects  # noqa: E402  (bench/compile.py: the same objects)

from netkit.model import IPFamily  # noqa: E402
from netkit.model.state import build  # noqa: E402
from netkit.rules.iptables.compile import compile  # noqa: E402
from netkit.rules.iptables.ruleset import render  # noqa: E402

CHILD = r"""
import json, sys, time
which = sys.argv[1]
if which == "bindings":
    import iptc
    start = time.perf_counter()
    n = 0
    for name in ("nat", "filter"):
        table = iptc.Table(name)
        table.autocommit = False
        for chain in table.chains:
            for rule in chain.rules:
                _ = (rule.src, rule.dst, rule.protocol,
                     [(m.name, m.get_all_parameters()) for m in rule.matches],
                     (rule.target.name, rule.target.get_all_parameters()))
                n += 1
    print(json.dumps({"seconds": time.perf_counter() - start, "rules": n}))
else:
    from netkit.model import IPFamily
    from netkit.rules.iptables.kernel import IptablesKernel
    start = time.perf_counter()
    rs = IptablesKernel(IPFamily.IPV4, None, "legacy").dump(("nat", "filter"))
    n = sum(len(r) for t in ("nat", "filter") for r in rs.chains(t).values())
    print(json.dumps({"seconds": time.perf_counter() - start, "rules": n}))
"""


class Netns:
    def __init__(self) -> None:
        self.name = f"nkbench-pt-{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> str:
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        return self.name

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["ip", "netns", "del", self.name], check=False)


def child(ns: str, which: str) -> dict[str, float]:
    out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", CHILD, which],
                         capture_output=True, text=True, check=True, timeout=3600)
    result: dict[str, float] = json.loads(out.stdout)
    return result


def payload(n_services: int) -> str:
    return render(compile(build(objects(n_services, 10), CONFIG.node_name), CONFIG, IPFamily.IPV4))


def measure(n_services: int) -> dict[str, float]:
    text = payload(n_services)
    with Netns() as ns:
        subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy-restore"], input=text, text=True, check=True)
        save = child(ns, "save")
        bindings = child(ns, "bindings")
    return {"services": n_services, "save_s": save["seconds"], "save_rules": save["rules"],
            "bindings_s": bindings["seconds"], "bindings_rules": bindings["rules"]}


def facts() -> dict[str, object]:
    """What the bindings see of an iptables-nft table, and what opening a table leaves behind."""
    with Netns() as ns:
        subprocess.run(["ip", "netns", "exec", ns, "iptables-nft-restore"], input=payload(100), text=True, check=True)
        nft_rules = child(ns, "bindings")["rules"]
    with Netns() as ns:
        before = subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy-save"], capture_output=True,
                                text=True, check=True).stdout
        child(ns, "bindings")
        after = subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy-save"], capture_output=True,
                               text=True, check=True).stdout
    created = sorted(line[1:] for line in after.splitlines() if line.startswith("*")
                     and line not in before.splitlines())
    return {"rules_seen_of_an_iptables_nft_table_of_100_services": nft_rules,
            "legacy_tables_created_by_reading": created}


def chart(rows: list[dict[str, float]], path: Path) -> None:
    line_chart(path, {
        "python-iptables (libiptc), every rule": [(r["services"], r["bindings_s"]) for r in rows],
        "iptables-save + netkit parse (baseline)": [(r["services"], r["save_s"]) for r in rows],
    }, title="Reading a kube-proxy-layout table", xlabel="Services (× 10 endpoints)",
        ylabel="seconds to read nat + filter")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, nargs="+", default=[1000, 3000])
    ap.add_argument("--chart", type=Path, default=None, help="write a PNG chart of the figures here")
    args = results.parse_args(ap)
    rows = []
    for n in args.services:
        r = measure(n)
        rows.append(r)
        print(f"{n:>6} services: python-iptables {r['bindings_s']:.2f} s ({r['bindings_rules']:.0f} rules), "
              f"iptables-save + parse {r['save_s']:.2f} s ({r['save_rules']:.0f} rules): "
              f"{r['bindings_s'] / r['save_s']:.1f}× slower", flush=True)
    print(json.dumps(facts()))
    results.write(args.json, __file__, "reading the nat and filter tables of bench/compile.py's layout (legacy "
                  "backend) through the python-iptables bindings vs `iptables-save` and netkit's parse (the "
                  "baseline), same table", [
        results.Figure.measured(f"{r['services']:,.0f} services: python-iptables", r["bindings_s"], "s", r["save_s"])
        for r in rows])
    if args.chart:
        chart(rows, args.chart)
        print(f"chart: {args.chart}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
