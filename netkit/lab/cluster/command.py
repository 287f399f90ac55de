"""`netkit lab cluster up|down|status|kubeconfig|scale|drain|exec|trace`.

Every verb but `up` and `down --all` works on one cluster: `--cluster ID`, or the only one that is up.
A name that is not in the cluster, or a cluster that does not exist, is one `netkit: error:` line and
exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any, NoReturn

from netkit.lab.cluster import state
from netkit.lab.cluster.plan import APP_DEPLOY, IP_FAMILIES, MAX_NODES, Cluster
from netkit.lab.errors import LabError

MODES = ("iptables", "nftables", "ipvs")


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments are one line, `netkit: error: lab cluster up: argument --nodes: ...`, exit 2."""

    def error(self, message: str) -> NoReturn:
        prog = self.prog.removeprefix("netkit ").strip()
        self.exit(2, f"netkit: error: {prog}: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def register(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cluster = verbs.add_parser("cluster", help="a multi-node cluster: kubectl, netkit run on every node, DNS",
                               description="N nodes in network namespaces, the test API server, netkit run "
                                           "on every node and netkit dns (see docs/lab.md).")
    cluster.error = OneLineParser.error.__get__(cluster)
    sub = cluster.add_subparsers(dest="cluster_command", metavar="VERB", parser_class=OneLineParser)
    sub.required = True
    which = argparse.ArgumentParser(add_help=False)
    which.add_argument("--cluster", "-c", metavar="ID", default="", help="cluster id (default: the only one)")

    up = sub.add_parser("up", help="build a cluster and keep it until `down`")
    up.add_argument("--nodes", type=count(1, MAX_NODES), default=3, help="nodes (default 3)")
    up.add_argument("--mode", choices=MODES, default="iptables", help="netkit run's mode (default iptables)")
    up.add_argument("--pods-per-node", type=count(0, 50), default=2,
                    help=f"pods of the {APP_DEPLOY!r} deployment per node (default 2)")
    up.add_argument("--ip-family", choices=IP_FAMILIES, default="ipv4",
                    help="the cluster's IP families: ipv4, ipv6, or dual (both, IPv4 primary; default ipv4)")
    up.add_argument("--dns-pods", type=count(1, 16), default=None,
                    help="pods of the cluster DNS (coredns-N; default 2, 1 with one node)")
    up.add_argument("--timeout", type=float, default=60.0,
                    help="seconds to wait for every node's first sync (default 60)")
    up.add_argument("--image", default="", metavar="IMAGE",
                    help="run every node's daemon and every DNS pod as a podman container of IMAGE, as kubelet "
                         "would (netkit:<version>, built by `make image`); default: as processes")
    up.add_argument("--id", type=cluster_id, default=None, help="the cluster's id, 6 hex digits (default: random)")
    up.add_argument("-o", "--output", choices=("text", "json"), default="text")
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", parents=[which], help="remove a cluster and everything in it")
    down.add_argument("ids", nargs="*", metavar="ID")
    down.add_argument("--all", action="store_true", help="every cluster, and leftovers of crashed ones")
    down.set_defaults(func=cmd_down)

    status = sub.add_parser("status", parents=[which], help="nodes, pods, Services, each daemon's last sync")
    status.add_argument("-o", "--output", choices=("text", "json"), default="text")
    status.set_defaults(func=cmd_status)

    kc = sub.add_parser("kubeconfig", parents=[which], help="print the path of the cluster's kubeconfig")
    kc.set_defaults(func=cmd_kubeconfig)

    scale = sub.add_parser("scale", parents=[which], help="set a deployment's number of pods")
    scale.add_argument("deploy", metavar="DEPLOY")
    scale.add_argument("replicas", type=count(0, 1000), metavar="N")
    scale.add_argument("--create", action="store_true", help="a new deployment (pods labelled app=DEPLOY)")
    scale.set_defaults(func=cmd_scale)

    drain = sub.add_parser("drain", parents=[which], help="cordon a node and move its pods elsewhere")
    drain.add_argument("node", metavar="NODE")
    drain.set_defaults(func=cmd_drain)

    ex = sub.add_parser("exec", parents=[which], help="run a command in a pod, a node, or `outside`")
    ex.add_argument("target", metavar="POD|NODE|outside")
    ex.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD")
    ex.set_defaults(func=cmd_exec)

    tr = sub.add_parser("trace", parents=[which], help="netkit trace on the node the packet enters")
    tr.add_argument("source", metavar="FROM", help="a pod, a node, or `outside`")
    tr.add_argument("--to", required=True, metavar="IP:PORT[/PROTO]")
    tr.add_argument("--node", default="", help="the node the packet enters (for `outside`: default the "
                                               "node whose IP is the destination)")
    tr.add_argument("-v", "--verbose", action="store_true")
    tr.set_defaults(func=cmd_trace)

    fl = sub.add_parser("flows", parents=[which], help="netkit flows on a node: live connections per endpoint")
    fl.add_argument("--node", required=True, help="whose conntrack table to read")
    fl.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    fl.add_argument("-w", "--watch", nargs="?", type=float, const=2.0, default=None, metavar="SECONDS")
    fl.set_defaults(func=cmd_flows)


def count(low: int, high: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {low}-{high}, not {value}")
        return value

    return parse


def cluster_id(text: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{6}", text):
        raise argparse.ArgumentTypeError(f"must be 6 hex digits (like 4d57b7), not {text!r}")
    return text


def chosen(args: argparse.Namespace) -> state.Record:
    ids = state.known_ids()
    if args.cluster:
        if args.cluster not in ids:
            raise LabError(f"no cluster {args.cluster} (clusters: {', '.join(ids) or 'none'})")
        cid = args.cluster
    elif len(ids) == 1:
        cid = ids[0]
    elif not ids:
        raise LabError("no cluster is up (netkit lab cluster up)")
    else:
        raise LabError(f"several clusters are up ({', '.join(ids)}): name one with --cluster")
    record = state.load(cid)
    if record is None:
        raise LabError(f"cluster {cid} has no readable record (netkit lab cluster down {cid})")
    return record


# --- verbs ---------------------------------------------------------------------------------------------

def cmd_up(args: argparse.Namespace) -> int:
    from netkit.lab.cluster import lifecycle  # here, not at the top: every netkit command builds this parser

    started = time.monotonic()
    record = lifecycle.up(args.nodes, args.mode, args.pods_per_node, timeout=args.timeout, cluster_id=args.id or "",
                          dns_pods=args.dns_pods, ip_family=args.ip_family, image=args.image)
    seconds = time.monotonic() - started
    c = record.cluster
    kubeconfig = state.kubeconfig_path(c.cluster_id)
    if args.output == "json":
        print(json.dumps({"id": c.cluster_id, "seconds": round(seconds, 3), "kubeconfig": str(kubeconfig),
                          "image": record.image or None, **layout(c)}, indent=2))
        return 0
    family = "" if c.ip_family == "ipv4" else f", {c.ip_family}"
    image = f", image {record.image}" if record.image else ""
    print(f"cluster {c.cluster_id} is up ({seconds:.1f} s): {len(c.nodes)} nodes, mode {c.mode}{family}{image}, "
          f"{len(c.pods)} pods")
    for n in c.nodes:
        pods = " ".join(p.name for p in c.pods_on(n.name))
        print(f"  {n.name:<8} {n.netns:<18} {' '.join(map(str, c.node_ips(n)))}  "
              f"pods {' '.join(map(str, c.pod_cidrs(n)))}: {pods}")
    print(f"kubeconfig: {kubeconfig}")
    print(f"  export KUBECONFIG={kubeconfig}; kubectl apply -f service.yaml")
    print(f"inside:     netkit lab cluster exec {c.pods[-1].name if c.pods else 'node-1'} -- getent hosts "
          "kube-dns.kube-system")
    print(f"remove:     netkit lab cluster down {c.cluster_id}")
    return 0


def layout(c: Cluster) -> dict[str, Any]:
    """Where things are; `ip` is the primary address, `ips` every one (primary first)."""
    def ips(values: tuple[Any, ...]) -> dict[str, Any]:
        return {"ip": str(values[0]), "ips": [str(v) for v in values]}

    return {"mode": c.mode, "ip_family": c.ip_family, "outside": {"netns": c.net_netns, **ips(c.outside_ips)},
            "nodes": [{"name": n.name, "netns": n.netns, **ips(c.node_ips(n)), "podCIDR": str(c.pod_cidrs(n)[0]),
                       "podCIDRs": [str(x) for x in c.pod_cidrs(n)], "cordoned": n.name in c.cordoned}
                      for n in c.nodes],
            "pods": [{"name": p.name, "namespace": p.namespace, "node": p.node, "netns": p.netns,
                      **ips(c.pod_ips(p)), "deploy": p.deploy} for p in c.pods]}


def cmd_down(args: argparse.Namespace) -> int:
    from netkit.lab.cluster import lifecycle  # here, not at the top: every netkit command builds this parser

    lifecycle.need_root()
    if args.all:
        for cid in lifecycle.down_all():
            print(f"cluster {cid} removed")
        return 0
    ids = args.ids or [chosen(args).cluster_id]
    known = set(lifecycle.known_ids())  # also a cluster of which only namespaces are left
    missing = [i for i in ids if i not in known]
    if missing:
        raise LabError(f"no cluster {', '.join(missing)} (see netkit lab cluster status)")
    for cid in ids:
        lifecycle.down(cid)
        print(f"cluster {cid} removed")
    return 0


def cmd_kubeconfig(args: argparse.Namespace) -> int:
    print(state.kubeconfig_path(chosen(args).cluster_id))
    return 0


def cmd_scale(args: argparse.Namespace) -> int:
    from netkit.lab.cluster import lifecycle  # here, not at the top: every netkit command builds this parser

    lifecycle.need_root()
    cid = chosen(args).cluster_id
    changed = lifecycle.scale(cid, args.deploy, args.replicas, create=args.create)
    print(f"{args.deploy} scaled to {args.replicas}: "
          f"+{len(changed.added)} {' '.join(p.name for p in changed.added)}".rstrip()
          + f", -{len(changed.removed)} {' '.join(p.name for p in changed.removed)}".rstrip())
    return 0


def cmd_drain(args: argparse.Namespace) -> int:
    from netkit.lab.cluster import lifecycle  # here, not at the top: every netkit command builds this parser

    lifecycle.need_root()
    cid = chosen(args).cluster_id
    changed = lifecycle.drain(cid, args.node)
    moved = ", ".join(f"{old.name} → {new.name} on {new.node}" for old, new in zip(changed.removed, changed.added,
                                                                                  strict=True))
    print(f"{args.node} drained" + (f": {moved}" if moved else " (no pods)"))
    return 0


def target_netns(c: Cluster, target: str) -> tuple[str, dict[str, str]]:
    """(netns, extra environment) for a pod, a node (KUBECONFIG: the node's own) or `outside`."""
    if target == "outside":
        return c.net_netns, {}
    for n in c.nodes:
        if n.name == target:
            return n.netns, {"KUBECONFIG": str(state.node_dir(c.cluster_id, n.name) / "kubeconfig.conf")}
    for p in c.pods:
        if p.name == target:
            return p.netns, {}
    raise LabError(f"no pod or node {target!r} in cluster {c.cluster_id} "
                   f"(nodes: {', '.join(n.name for n in c.nodes)}; pods: {', '.join(p.name for p in c.pods)})")


def cmd_exec(args: argparse.Namespace) -> int:
    from netkit.lab.cluster import lifecycle  # here, not at the top: every netkit command builds this parser

    lifecycle.need_root()
    record = chosen(args)
    netns, env = target_netns(record.cluster, args.target)
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        raise LabError("exec: give a command after --, e.g. netkit lab cluster exec web-1 -- getent hosts web")
    sys.stdout.flush()
    os.execvpe("ip", ["ip", "netns", "exec", netns, *argv], {**os.environ, **env})


def entry_node(c: Cluster, source: str, to: str, node: str) -> tuple[str, str, str]:
    """(node netns, source IP, in-interface) for a trace from `source`."""
    if node:
        target_netns(c, node)
    if source == "outside":
        dst = to.rpartition(":")[0].strip("[]") if ":" in to else to
        chosen_node = node or next((n.name for n in c.nodes if dst in map(str, c.node_ips(n))), "")
        if not chosen_node:
            raise LabError(f"trace from outside to {dst}: which node does it enter? give --node NODE")
        return c.node(chosen_node).netns, str(same_family(c.outside_ips, dst)), "eth0"
    for n in c.nodes:
        if n.name == source:
            return n.netns, str(same_family(c.node_ips(n), to)), ""
    for p in c.pods:
        if p.name == source:
            return c.node(p.node).netns, str(same_family(c.pod_ips(p), to)), "cbr0"
    target_netns(c, source)  # raises with the list of names
    raise AssertionError


def same_family(ips: tuple[Any, ...], to: str) -> Any:
    """Of a source's addresses, the one of the destination's family (`[v6]:port` or `v4:port`)."""
    v6 = to.startswith("[") or to.count(":") > 1
    return next((ip for ip in ips if (ip.version == 6) == v6), ips[0])


def cmd_trace(args: argparse.Namespace) -> int:
    from netkit.lab.cluster import lifecycle  # here, not at the top: every netkit command builds this parser

    lifecycle.need_root()
    c = chosen(args).cluster
    if c.mode == "ipvs":
        raise LabError("trace: netkit trace reads iptables and nftables rules; this cluster runs ipvs")
    netns, src, iface = entry_node(c, args.source, args.to, args.node)
    from netkit.cli import main as netkit_main

    argv = ["trace", "--netns", netns, "--mode", c.mode, "--from", src, "--to", args.to,
            *(["--in-interface", iface] if iface else []), *(["-v"] if args.verbose else [])]
    return netkit_main(argv)


def cmd_flows(args: argparse.Namespace) -> int:
    """`netkit flows` in the node's namespace, over the Services, EndpointSlices and Nodes the
    cluster's API server holds now (written to a manifest file for it)."""
    import tempfile

    from netkit.lab.cluster import lifecycle  # here, not at the top: every netkit command builds this parser
    from netkit.lab.cluster.api import Api

    lifecycle.need_root()
    record = chosen(args)
    node = record.cluster.node(args.node)
    api = Api(record.api_port)
    kinds = {"services": ("v1", "Service"), "endpointslices": ("discovery.k8s.io/v1", "EndpointSlice"),
             "nodes": ("v1", "Node")}
    items = [{**item, "apiVersion": version, "kind": kind}
             for plural, (version, kind) in kinds.items() for item in api.list(plural)]
    from netkit.cli import main as netkit_main

    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump({"apiVersion": "v1", "kind": "List", "items": items}, f)
        f.flush()
        return netkit_main(["flows", "-f", f.name, "--netns", node.netns, "--mode", record.cluster.mode,
                            "--node-name", node.name, "-o", args.output,
                            *(["--watch", str(args.watch)] if args.watch is not None else [])])


def cmd_status(args: argparse.Namespace) -> int:
    from netkit.lab.cluster import lifecycle  # here, not at the top: every netkit command builds this parser

    ids = [chosen(args).cluster_id] if args.cluster else lifecycle.known_ids()  # also broken ones, leftovers
    rows = [status_of(cid) for cid in ids]
    if args.output == "json":
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no clusters")
    for row in rows:
        print_status(row)
    return 0


def status_of(cid: str) -> dict[str, Any]:
    from netkit.lab.cluster import build, lifecycle, nodehttp
    from netkit.lab.cluster.api import Api

    record = state.load(cid)
    if record is None:
        left = len(build.leftovers(cid))
        return {"id": cid, "state": f"broken (no record{f', {left} namespaces left' if left else ''}): "
                                   f"netkit lab cluster down {cid}"}
    c = record.cluster
    up = bool(record.control_pid) and lifecycle.alive(record.control_pid, str(state.cluster_dir(cid)))
    procs = read_json(state.cluster_dir(cid) / "status.json")
    row: dict[str, Any] = {"id": cid, "state": "up" if up else "DOWN (control plane gone)", "mode": c.mode,
                           "kubeconfig": str(state.kubeconfig_path(cid)), **layout(c)}
    now = time.time()
    for n in row["nodes"]:
        daemon = (procs.get("daemons") or {}).get(n["name"]) or {}
        summary = nodehttp.node_summary(n["netns"]) if up else {}
        synced = summary.get("last_sync")
        n.update(daemon_pid=daemon.get("pid", 0), restarts=daemon.get("restarts", 0),
                 last_sync_ago=round(now - synced, 1) if synced else None,
                 rules=summary.get("rules"), pending=summary.get("pending"))
    if up:
        try:
            api = Api(record.api_port, timeout=2)
            pods = {p["metadata"]["name"]: p for p in api.list("pods")}
            for p in row["pods"]:
                obj = pods.get(p["name"]) or {}
                p["ready"] = any(x.get("status") == "True" for x in (obj.get("status") or {}).get("conditions") or [])
            slices = api.list("endpointslices")
            row["services"] = [service_row(s, slices) for s in api.list("services")]
        except LabError as exc:
            row["api"] = str(exc)
    return row


def service_row(svc: dict[str, Any], slices: list[dict[str, Any]]) -> dict[str, Any]:
    m, spec = svc["metadata"], svc.get("spec") or {}
    mine = [s for s in slices if (s["metadata"].get("labels") or {}).get("kubernetes.io/service-name") == m["name"]
            and s["metadata"].get("namespace") == m.get("namespace")]
    pods = {(e.get("targetRef") or {}).get("name") or e["addresses"][0]: e for s in mine
            for e in s.get("endpoints") or []}  # one per pod, though a dual-stack pod is in two slices
    eps = list(pods.values())
    ready = sum(1 for e in eps if (e.get("conditions") or {}).get("ready"))
    ports = [f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/{p.get('protocol', 'TCP')}"
             for p in spec.get("ports") or []]
    return {"name": f"{m.get('namespace')}/{m['name']}", "type": spec.get("type", "ClusterIP"),
            "clusterIP": spec.get("clusterIP"), "clusterIPs": spec.get("clusterIPs") or [],
            "ports": ports, "endpoints": len(eps), "ready": ready}


def read_json(path: Any) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def print_status(row: dict[str, Any]) -> None:
    family = f", {row['ip_family']}" if row.get("ip_family", "ipv4") != "ipv4" else ""
    print(f"cluster {row['id']}: {row['state']}" + (f", mode {row['mode']}{family}" if "mode" in row else ""))
    for n in row.get("nodes", []):
        sync = f"synced {n['last_sync_ago']} s ago" if n.get("last_sync_ago") is not None else "no sync"
        if n.get("rules") is not None:
            sync += f", {n['rules']:.0f} rules"
        if n.get("pending"):
            sync += f", {n['pending']:.0f} changes pending"
        flags = " (cordoned)" if n["cordoned"] else ""
        print(f"  node {n['name']:<8} {' '.join(n['ips']):<12} netkit run pid {n['daemon_pid'] or '-':<7} "
              f"restarts {n['restarts']}  {sync}{flags}")
    for p in row.get("pods", []):
        ready = "ready" if p.get("ready") else "not ready"
        print(f"  pod  {p['namespace'] + '/' + p['name']:<24} {p['node']:<8} {' '.join(p['ips']):<13} {ready}")
    for s in row.get("services", []):
        print(f"  svc  {s['name']:<24} {s['type']:<12} {','.join(s['clusterIPs']) or s['clusterIP']:<13} "
              f"{','.join(s['ports'])}  "
              f"endpoints {s['ready']}/{s['endpoints']} ready")
