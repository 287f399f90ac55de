"""`netkit trace`: the IO around the pure tracer — where the rules and the node's addresses come from
(compiled from manifests, or dumped from a live namespace), and how the answer is shown.

Backend-generic: the mode's backend (netkit.rules.registry.with_backend) compiles, dumps
(`kernel(…).dump()`) and traces (`Backend.trace`, returning netkit.rules.tracing Outcomes; a backend
without a tracer raises Unsupported, shown as one error line)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from ipaddress import ip_address

from netkit.cli.filters import Filter
from netkit.cli.inputs import Inputs, check_netns, config_from_args, load_inputs
from netkit.cli.output import STRUCTURED, emit
from netkit.errors import NetkitError
from netkit.model import IPFamily, NodeState, lookup
from netkit.model.types import IPAddress
from netkit.netns import exists, run
from netkit.rules.backend import Backend, P, R
from netkit.rules.registry import with_backend
from netkit.rules.tracing import Outcome, Packet, endpoints

PROTOCOLS = ("tcp", "udp", "sctp")


def parse_destination(text: str) -> tuple[IPAddress, int, str]:
    hostport, _, proto = text.partition("/")
    proto = (proto or "tcp").lower()
    host, sep, port = hostport.rpartition(":")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise NetkitError(f"--to {text!r}: an IPv6 address needs brackets, e.g. [fd00::1]:80 "
                          "(without them the port cannot be told from the address)")
    try:
        if not sep:
            raise ValueError
        addr, number = ip_address(host.removeprefix("[").removesuffix("]")), int(port)
        if host.startswith("[") and addr.version != 6:
            raise ValueError
    except ValueError as exc:
        raise NetkitError(f"--to {text!r}: expected IP:PORT[/PROTO], e.g. 10.96.0.10:80/tcp or [fd00::1]:80") from exc
    if proto not in PROTOCOLS or not 0 < number < 65536:
        raise NetkitError(f"--to {text!r}: protocol must be tcp, udp or sctp and the port 1-65535")
    return addr, number, proto


def run_trace(args: argparse.Namespace) -> int:
    inputs = load_inputs(args) if args.files else None
    if inputs:
        inputs = replace(inputs, state=Filter.of(args).state(inputs.state, inputs.objects))
    state = inputs.state if inputs else None
    dst, dport, proto = _destination(args.to, state, args.namespace)
    family = IPFamily.of(dst)

    given = parse_source(args.source, dst) if args.source else None

    def run(be: Backend[R, P]) -> int:
        ruleset, node_ips, local = _rules_and_addresses(args, family, be, inputs)
        src = given or default_source(node_ips, local, dst)
        if src is None:
            raise NetkitError("--from is needed: the node's own address is not known (give --node-ip or a Node object)")
        pkt = Packet(src, dst, dport, proto, local_addresses=local, in_iface=args.in_interface)
        if args.netns and not be.holds_rules(ruleset):
            raise NetkitError(f"no netkit {be.name} rules in {args.netns} ({family.value}): nothing to trace "
                              "(apply first, or trace the manifests with -f)")
        outcomes = be.trace(ruleset, pkt)
        found = lookup.match(state, dst, dport, proto, local) if state else None
        note = lookup.miss(state, dst, dport, proto) if state and not found else None
        if args.output in STRUCTURED:
            emit(_json(pkt, outcomes, found, note), args.output)
        else:
            _print(pkt, outcomes, args.verbose, found, note)
        return 0

    return with_backend(config_from_args(args).mode, run)


def _destination(text: str, state: NodeState | None, namespace: str | None = None) -> tuple[IPAddress, int, str]:
    """--to: IP:PORT[/PROTO], or SERVICE[.NAMESPACE][:PORT][/PROTO] resolved through the model (the
    namespace: -n, else `default`, as kubectl)."""
    head = text.partition("/")[0]
    host = head.rpartition(":")[0] if head.count(":") == 1 else head
    if host.startswith("[") or host.replace(".", "").isdigit() or ":" in host:
        return parse_destination(text)
    if state is None:
        raise NetkitError(f"--to {text!r}: a Service name needs the manifests (-f) to look it up")
    name, sep, rest = text.partition(":")
    if "." not in name:
        text = f"{name}.{namespace or 'default'}" + sep + rest
    p = lookup.resolve(state, text)
    return p.cluster_ip, p.port, p.protocol.lower


def default_source(node_ips: Sequence[IPAddress], local: Sequence[IPAddress], dst: IPAddress) -> IPAddress | None:
    """The node itself: its first node IP of dst's family, else the namespace's first address that is
    not loopback, else loopback."""
    same = [a for a in (*node_ips, *local) if a.version == dst.version]
    return next((a for a in same if not a.is_loopback), same[0] if same else None)


def parse_source(text: str, dst: IPAddress) -> IPAddress:
    try:
        src = ip_address(text)
    except ValueError as exc:
        raise NetkitError(f"--from {text!r}: not an IP address (give the packet's source address)") from exc
    if src.version != dst.version:
        raise NetkitError(f"--from {text} and --to {dst}: one is IPv4, the other IPv6; a packet has one family")
    return src


def _rules_and_addresses(args: argparse.Namespace, family: IPFamily, be: Backend[R, P], inputs: Inputs | None,
                         ) -> tuple[R, tuple[IPAddress, ...], tuple[IPAddress, ...]]:
    """The rules, the node IPs and every local address."""
    check_netns(args)
    if args.netns:
        if not exists(args.netns):
            raise NetkitError(f"--netns {args.netns}: no such network namespace (see `ip netns list`)")
        config = replace(inputs.config if inputs else config_from_args(args), iptables_backend=args.iptables_backend)
        live = be.kernel(config, family, args.netns).dump()
        node_ips = (*config.node_ips, *(inputs.state.node.ips if inputs else ()))
        return live, node_ips, (*node_ips, *_netns_addresses(args.netns))
    if inputs is None:
        raise NetkitError("give manifests (-f) to trace a compiled ruleset, or --netns NAME to trace a live one")
    return be.compile(inputs.state, inputs.config, family), inputs.state.node.ips, inputs.state.node.ips


def _netns_addresses(netns: str) -> tuple[IPAddress, ...]:
    out = run(["ip", "-j", "addr", "show"], netns).stdout
    return tuple(ip_address(a["local"]) for link in json.loads(out or "[]") for a in link.get("addr_info", ()))


def _where(pkt: Packet) -> str:
    if pkt.from_node:
        return "from this node: output → postrouting"
    return "arriving at this node: prerouting → input/forward → postrouting"


def _print(pkt: Packet, outcomes: list[Outcome], verbose: bool, found: lookup.Match | None = None,
           note: str | None = None) -> None:
    out = sys.stdout
    out.write(f"{pkt.src} → {_hp(pkt.dst, pkt.dport)}/{pkt.proto}  ({_where(pkt)})\n")
    if found:
        out.write(f"  {found.line()}\n")
    if note:
        out.write(f"  note: {note}\n")
    for o in outcomes:
        out.write(f"  {o.probability * 100:5.1f}%  {_describe(o)}\n")
        if o.reason:
            out.write(f"          decided by {o.reason.table} {o.reason.chain} #{o.reason.index}: {o.reason.rule}\n")
        for u in o.unknown:
            out.write(f"          note: {u}\n")
        if verbose:
            for s in o.steps:
                out.write(f"          {s.table:6} {s.chain} #{s.index}: {s.rule}\n")
    reach = endpoints(outcomes)
    if reach:
        out.write("endpoints: " + ", ".join(f"{d} {p * 100:.1f}%" for d, p in sorted(reach.items())) + "\n")


def _describe(o: Outcome) -> str:
    if o.verdict == "reject":
        return "REJECTED (connection refused at once)"
    if o.verdict == "drop":
        return "DROPPED (the client times out)"
    src = "source masqueraded to the node" if o.masquerade else "source preserved"
    if o.destination:
        return f"DNAT → {o.destination}, {src}"
    return f"not translated: delivered as addressed, {src}"


def _hp(ip: IPAddress, port: int) -> str:
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


TRACE_SCHEMA = "netkit.trace/v1"  # docs/cli.md "trace -o json"


def _json(pkt: Packet, outcomes: list[Outcome], found: lookup.Match | None = None,
          note: str | None = None) -> dict[str, object]:
    return {
        "schema": TRACE_SCHEMA,
        "packet": {"src": str(pkt.src), "dst": str(pkt.dst), "dport": pkt.dport, "proto": pkt.proto,
                   "from_node": pkt.from_node},
        "service": found.to_json() if found else None,
        "note": note,
        "outcomes": [{
            "probability": o.probability, "verdict": "dnat" if o.verdict == "accept" and o.destination else o.verdict,
            "destination": o.destination,
            "masquerade": o.masquerade,
            "reason": {"table": o.reason.table, "chain": o.reason.chain, "index": o.reason.index,
                       "rule": o.reason.rule} if o.reason else None,
            "steps": [{"table": s.table, "chain": s.chain, "index": s.index, "rule": s.rule} for s in o.steps],
            "unknown": list(o.unknown),
        } for o in outcomes],
        "endpoints": endpoints(outcomes),
    }
