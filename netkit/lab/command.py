"""`netkit lab up|down|status`: a lab that outlives the command, for poking at by hand.

`up` builds a persistent lab (its pod servers keep running after the command exits) and prints the
namespace of every role; `down` removes it (by id; the only one when there is just one; `--all`;
`--stale` for labs whose owning test process died); `status` lists every recorded lab, including
test labs currently running, with whether its servers and namespaces are still there.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from netkit.lab import build, servers, state
from netkit.lab.errors import LabError
from netkit.lab.lab import Lab, start, teardown
from netkit.lab.plan import DEFAULT_PORTS, Layout


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    lab = sub.add_parser("lab", help="network-namespace lab: up, down, status, cluster",
                         description="A client, two nodes and pods in network namespaces (see docs/lab.md).")
    verbs = lab.add_subparsers(dest="lab_command", metavar="VERB")
    verbs.required = True
    up = verbs.add_parser("up", help="build a lab and keep it until `netkit lab down`")
    up.add_argument("--ports", type=parse_ports, default=DEFAULT_PORTS,
                    help="ports every pod serves, TCP and UDP (default: %(default)s)")
    up.add_argument("-o", "--output", choices=("text", "json"), default="text")
    up.set_defaults(func=cmd_up)
    down = verbs.add_parser("down", help="remove a lab and everything in it")
    down.add_argument("ids", nargs="*", metavar="ID", help="lab ids (default: the only lab started by up)")
    down.add_argument("--all", action="store_true", help="remove every recorded lab")
    down.add_argument("--stale", action="store_true", help="remove labs whose owning process is gone")
    down.set_defaults(func=cmd_down)
    status = verbs.add_parser("status", help="list labs and their namespaces")
    status.add_argument("-o", "--output", choices=("text", "json"), default="text")
    status.set_defaults(func=cmd_status)
    from netkit.lab.cluster.command import register as register_cluster

    register_cluster(verbs)


def parse_ports(text: str) -> tuple[int, ...]:
    try:
        ports = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated port list: {text!r}") from exc
    if not ports or not all(0 < p < 65536 for p in ports):
        raise argparse.ArgumentTypeError(f"ports must be 1-65535: {text!r}")
    return ports


def need_root() -> None:
    if os.geteuid() != 0:
        raise LabError("netkit lab needs root (it creates network namespaces)")


def roles(lay: Layout) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"role": "client", "netns": lay.client.netns,
         "addresses": [str(a) for a in (*lay.client.ipv4, *lay.client.ipv6)]}
    ]
    rows += [{"role": n.name, "netns": n.netns, "addresses": [str(n.ipv4), str(n.ipv6)]} for n in lay.nodes]
    rows += [{"role": p.name, "netns": p.netns, "node": p.node, "addresses": [str(p.ipv4), str(p.ipv6)]}
             for p in lay.pods]
    return rows


def describe(lab: Lab, seconds: float) -> str:
    lines = [f"lab {lab.id} is up ({seconds:.2f} s); pods serve TCP and UDP on {', '.join(map(str, lab.ports))}"]
    for row in roles(lab.layout):
        lines.append(f"  {row['role']:<9} {row['netns']:<20} {' '.join(row['addresses'])}")
    lines += [f"inside:   ip netns exec {lab.node_a.netns} iptables-save",
              f"remove:   netkit lab down {lab.id}"]
    return "\n".join(lines)


def cmd_up(args: argparse.Namespace) -> int:
    need_root()
    started = time.monotonic()
    lab = start(args.ports, persistent=True)
    seconds = time.monotonic() - started
    if args.output == "json":
        print(json.dumps({"id": lab.id, "ports": list(lab.ports), "server_pid": lab.server_pid,
                          "namespaces": roles(lab.layout)}, indent=2))
    else:
        print(describe(lab, seconds))
    return 0


def chosen(args: argparse.Namespace, records: list[state.Record]) -> list[state.Record]:
    if args.all:
        return records
    if args.stale:
        return [r for r in records if not r.owner_alive()]
    if args.ids:
        known = {r.lab_id: r for r in records}
        missing = [i for i in args.ids if i not in known]
        if missing:
            raise LabError(f"no such lab: {', '.join(missing)} (see netkit lab status)")
        return [known[i] for i in args.ids]
    persistent = [r for r in records if not r.owner_pid]
    if len(persistent) > 1:
        raise LabError(f"several labs are up ({', '.join(r.lab_id for r in persistent)}): name one, or --all")
    return persistent


def cmd_down(args: argparse.Namespace) -> int:
    need_root()
    for record in chosen(args, state.load_all()):
        teardown(record)
        print(f"lab {record.lab_id} removed")
    return 0


def status_row(record: state.Record) -> dict[str, Any]:
    names = record.layout().namespaces
    return {
        "id": record.lab_id,
        "owner": "persistent" if not record.owner_pid else f"pid {record.owner_pid}"
        + ("" if record.owner_alive() else " (gone: stale)"),
        "servers": bool(record.server_pid) and servers.is_server(record.server_pid),
        "namespaces": f"{len(build.existing(names))}/{len(names)}",
        "ports": list(record.ports),
    }


def cmd_status(args: argparse.Namespace) -> int:
    rows = [status_row(r) for r in state.load_all()]
    if args.output == "json":
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no labs")
    for row in rows if args.output == "text" else []:
        print(f"{row['id']}  {row['owner']:<22} servers {'up' if row['servers'] else 'DOWN':<5}"
              f" namespaces {row['namespaces']}")
    return 0
