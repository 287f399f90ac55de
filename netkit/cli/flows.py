"""`netkit flows`: the live connections through Services, read from the kernel's conntrack table.

Each TCP, UDP and SCTP entry whose original destination is a frontend of a Service in the manifests
(`-f`) is counted under that Service port and the endpoint its reply comes from
(`netkit.model.flows.tally`); an endpoint that is not a serving endpoint of the port is flagged
stale. The table is read over netlink inside `--netns` (or this namespace): both IP families.
`--watch` reads it again every few seconds, like top; the manifests are read, and compiled for
trace's predicted shares, once.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from netkit.cli.filters import Filter, add_filter_options
from netkit.cli.inputs import Inputs, add_input_options, check_netns, load_inputs
from netkit.cli.output import STRUCTURED, emit
from netkit.cli.tracing import default_source
from netkit.errors import NetkitError
from netkit.model import IPFamily
from netkit.model.flows import PortFlows, tally
from netkit.model.types import IPAddress
from netkit.rules.backend import Backend, P, R
from netkit.rules.registry import with_backend
from netkit.rules.tracing import Packet, endpoints

FLOWS_SCHEMA = "netkit.flows/v1"  # docs/cli.md "flows -o json"
FLOWS_SCHEMA_FILE = Path(__file__).with_name("schemas") / "flows-v1.json"  # its JSON Schema


def register(sub: Any) -> None:
    p = sub.add_parser("flows", help="live connections through Services, per endpoint (conntrack; root)")
    add_input_options(p)
    add_filter_options(p)
    p.add_argument("--netns", metavar="NAME", help="read this named network namespace's conntrack table")
    p.add_argument("--mode", choices=("iptables", "ipvs", "nftables"), default=None,
                   help="whose rules predict the shares (default: the config file's mode, else iptables)")
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                   help="json/yaml: schema netkit.flows/v1 (docs/cli.md)")
    p.add_argument("-w", "--watch", nargs="?", type=float, const=2.0, default=None, metavar="SECONDS",
                   help="refresh every SECONDS (default 2) like top, until Ctrl-C (text output)")
    p.set_defaults(func=run_flows)


def run_flows(args: argparse.Namespace) -> int:
    from netkit.runtime.conntrack import ConntrackCleaner

    check_netns(args)
    if args.watch is not None and (args.output in STRUCTURED or args.watch <= 0):
        raise NetkitError("--watch: refreshes text output only, every SECONDS > 0")
    inputs = load_inputs(args)
    inputs = replace(inputs, state=Filter.of(args).state(inputs.state, inputs.objects))
    reader = ConntrackCleaner(args.netns)

    def go(be: Backend[R, P]) -> int:
        rules: dict[IPFamily, R] = {}  # compiled once, traced at every refresh

        def render() -> tuple[tuple[PortFlows, ...], Shares]:
            ports = tally([e for version in (4, 6) for e in reader.entries(version)], inputs.state)
            return ports, _predict(be, rules, ports, inputs)

        if args.watch is not None:
            return watch(lambda: text(*render()), args.watch)
        ports, shares = render()
        if args.output in STRUCTURED:
            emit(to_json(ports, shares), args.output)
        else:
            sys.stdout.write(text(ports, shares))
        return 0

    return with_backend(inputs.config.mode, go)


def watch(render: Callable[[], str], interval: float, sleep: Callable[[float], None] = time.sleep) -> int:
    """`render()` again every `interval` seconds, over the last one on a terminal (as top), else
    after a line with the time; until Ctrl-C (the CLI exits 130)."""
    tty = sys.stdout.isatty()
    while True:
        page = render()
        sys.stdout.write(("\x1b[H\x1b[2J" if tty else f"--- {time.strftime('%H:%M:%S')}\n") + page)
        sys.stdout.flush()
        sleep(interval)


Shares = dict[int, dict[str, float]]  # id(PortFlows) → "IP:port" → the share trace predicts


def predicted(ports: tuple[PortFlows, ...], inputs: Inputs) -> Shares:
    """What `netkit trace` predicts for a packet from the node to each port's clusterIP, over the
    rules the manifests compile to (a port without a node address of its family: no prediction)."""
    return with_backend(inputs.config.mode, lambda be: _predict(be, {}, ports, inputs))


def _predict(be: Backend[R, P], rules: dict[IPFamily, R], ports: tuple[PortFlows, ...], inputs: Inputs) -> Shares:
    out: Shares = {}
    node = inputs.state.node.ips
    for pf in ports:
        p = pf.port
        src = default_source(node, (), p.cluster_ip)
        if src is None:
            continue
        family = IPFamily.of(p.cluster_ip)
        if family not in rules:
            rules[family] = be.compile(inputs.state, inputs.config, family)
        pkt = Packet(src, p.cluster_ip, p.port, p.protocol.lower, local_addresses=node)
        out[id(pf)] = endpoints(be.trace(rules[family], pkt))
    return out


def text(ports: tuple[PortFlows, ...], shares: Shares | None = None) -> str:
    """One line per Service port, then one per endpoint: its flows, their share of the port's, and
    the share trace predicts (an endpoint trace predicts with no flow is listed with 0)."""
    if not ports:
        return "no flows through Services\n"
    lines = []
    for pf in ports:
        p = pf.port
        stale = f", {pf.stale} stale" if pf.stale else ""
        lines.append(f"{p.name.ref.namespace}/{p.name.ref.name}:{p.name.port or p.port} ({p.protocol.lower}) "
                     f"{_hp(p.cluster_ip, p.port)}  {pf.flows} flow{'s' if pf.flows != 1 else ''}{stale}")
        for row in _rows(pf, (shares or {}).get(id(pf))):
            share = f"{100 * row['share']:5.1f}%"
            trace = f"  (trace: {100 * row['predicted']:5.1f}%)" if row["predicted"] is not None else ""
            note = "  stale: not a serving endpoint" if row["stale"] else ""
            lines.append(f"  {row['endpoint']:<24} {row['flows']:>6}  {share}{trace}{note}")
    return "\n".join(lines) + "\n"


def to_json(ports: tuple[PortFlows, ...], shares: Shares | None = None) -> dict[str, object]:
    return {"schema": FLOWS_SCHEMA, "services": [{
        "namespace": pf.port.name.ref.namespace, "name": pf.port.name.ref.name, "port": pf.port.name.port,
        "protocol": pf.port.protocol.lower, "number": pf.port.port, "clusterIP": str(pf.port.cluster_ip),
        "flows": pf.flows, "stale": pf.stale,
        "endpoints": [{k: v for k, v in row.items() if k != "endpoint"}
                      for row in _rows(pf, (shares or {}).get(id(pf)))],
    } for pf in ports]}


def _rows(pf: PortFlows, predicted: dict[str, float] | None) -> list[dict[str, Any]]:
    """Each endpoint with flows, then those trace predicts that have none."""
    def guess(dest: str) -> float | None:
        return None if predicted is None else predicted.get(dest, 0.0)

    rows = [{"endpoint": _hp(e.ip, e.port), "ip": str(e.ip), "port": e.port, "flows": e.flows,
             "share": e.flows / pf.flows, "predicted": guess(_hp(e.ip, e.port)), "stale": e.stale}
            for e in pf.endpoints]
    seen = {r["endpoint"] for r in rows}
    for dest, share in sorted((predicted or {}).items()):
        if dest not in seen:
            ip, _, port = dest.rpartition(":")
            rows.append({"endpoint": dest, "ip": ip.strip("[]"), "port": int(port), "flows": 0, "share": 0.0,
                         "predicted": share, "stale": False})
    return rows


def _hp(ip: IPAddress, port: int) -> str:
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"
