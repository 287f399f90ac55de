"""Command-line inputs shared by every subcommand that compiles: manifests, config and node flags.

`add_input_options(parser)` declares them; `load_inputs(args)` reads the files, merges the
KubeProxyConfiguration with the flags (flags win), reports invalid objects on stderr and returns an
`Inputs` value. This is the IO edge in front of the pure core.

Bad input never costs a Service its rules (docs/cli.md, "Bad input"): a file that does not parse or
cannot be read stops the command (`Unparsable`, `ManifestError`), an input without any Service stops
it unless `--allow-empty`, and a Service whose object (or one of its Endpoints/EndpointSlices) is
invalid is named in `Inputs.keep`, so the commands leave its live rules as they are.
"""

from __future__ import annotations

import argparse
import socket
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from netkit.config import Config, ConfigError, load_kube_proxy_configuration, parse_cidrs, parse_ips
from netkit.errors import NetkitError, Problem
from netkit.model import NodeState, Objects, build
from netkit.sources.manifests import load


@dataclass(frozen=True, slots=True)
class Inputs:
    config: Config
    objects: Objects
    state: NodeState
    problems: tuple[Problem, ...]
    # "namespace/name" of every Service with invalid input: left out of `state`, live rules kept.
    keep: frozenset[str] = frozenset()


def add_input_options(p: argparse.ArgumentParser, *, manifests_required: bool = True) -> None:
    g = p.add_argument_group("inputs")
    g.add_argument("-f", "--filename", dest="files", action="append", default=[], metavar="PATH",
                   required=manifests_required,
                   help="manifest file or directory (repeatable; '-' reads stdin), as kubectl -f")
    g.add_argument("--config", metavar="FILE", help="a kube-proxy KubeProxyConfiguration file")
    g.add_argument("--node-name", metavar="NAME",
                   help="this node's name (endpoints on it are local; default: the hostname, lower case)")
    g.add_argument("--node-ip", action="append", default=[], metavar="IP",
                   help="an address of this node (repeatable); added to the Node object's addresses")
    g.add_argument("--cluster-cidr", action="append", default=[], metavar="CIDR",
                   help="pod network, one per family (repeatable; commas allowed)")
    g.add_argument("--masquerade-all", action="store_true", default=None,
                   help="masquerade all traffic to service IPs")
    g.add_argument("--strict", action="store_true",
                   help="treat any invalid object as an error (exit status 2)")
    g.add_argument("--allow-empty", action="store_true",
                   help="accept input without any Service (apply then removes every Service's rules)")


def config_from_args(args: argparse.Namespace) -> Config:
    cfg = Config()
    if getattr(args, "config", None):
        cfg = load_kube_proxy_configuration(_read_text(args.config), args.config)
        for warning in cfg.warnings:
            print(f"netkit: warning: {warning}", file=sys.stderr)
    changes: dict[str, Any] = {}
    if getattr(args, "mode", None):
        changes["mode"] = args.mode
    if getattr(args, "node_name", None):
        changes["node_name"] = args.node_name
    if getattr(args, "node_ip", None):
        changes["node_ips"] = parse_ips(args.node_ip, "--node-ip")
    if getattr(args, "cluster_cidr", None):
        changes["cluster_cidrs"] = parse_cidrs(args.cluster_cidr, "--cluster-cidr")
    if getattr(args, "masquerade_all", None):
        changes["masquerade_all"] = True
    cfg = replace(cfg, **changes)
    if not cfg.node_name:
        cfg = replace(cfg, node_name=default_node_name())
    return cfg


def default_node_name() -> str:
    """The node name when neither --node-name nor hostnameOverride gives one: the hostname, trimmed
    and in lower case, as kube-proxy does (Kubernetes node names are lower case)."""
    return socket.gethostname().strip().lower()


def check_netns(args: argparse.Namespace) -> None:
    """`--netns ""` (or blanks) would mean the machine's own namespace: refuse it."""
    netns = getattr(args, "netns", None)
    if netns is not None and not netns.strip():
        raise NetkitError(f"--netns {netns!r}: empty namespace name (leave --netns out to work in this "
                          "namespace)")


def load_inputs(args: argparse.Namespace, config: Config | None = None) -> Inputs:
    """The inputs `args` name; `config`: config_from_args(args), when the caller has it already."""
    config = config_from_args(args) if config is None else config
    loaded = load(args.files)
    report_problems(loaded.problems, strict=getattr(args, "strict", False))
    check_not_empty(loaded.objects, loaded.problems, args.files, allow=getattr(args, "allow_empty", False))
    defaulted = not getattr(args, "node_name", None) and config.node_name == default_node_name()
    warn_unknown_node(config.node_name, loaded.objects, defaulted=defaulted)
    state = build(loaded.objects, config.node_name, config.node_ips)
    return Inputs(config, loaded.objects, state, loaded.problems, services_to_keep(loaded.problems))


def report_problems(problems: tuple[Problem, ...], *, strict: bool) -> None:
    for problem in problems:
        print(f"netkit: invalid object left out: {problem}", file=sys.stderr)
    if strict and problems:
        raise NetkitError(f"{len(problems)} invalid object(s) and --strict is set; nothing changed")


def services_to_keep(problems: tuple[Problem, ...]) -> frozenset[str]:
    return frozenset(p.service for p in problems if p.service)


def check_not_empty(objects: Objects, problems: tuple[Problem, ...], files: list[str], *, allow: bool) -> None:
    """An input without a single Service (an empty directory, a wrong path) would remove every
    Service's rules; that takes --allow-empty."""
    if allow or objects.services or any(p.kind == "Service" for p in problems):
        return
    where = " ".join(files) or "the input"
    raise NetkitError(f"no Service in {where}: this would remove every Service's rules; nothing changed "
                      "(give --allow-empty if that is what you want)")


def warn_unknown_node(node_name: str, objects: Objects, *, defaulted: bool) -> None:
    said = unknown_node(node_name, objects, defaulted=defaulted)
    if said:
        print(f"netkit: warning: {said}", file=sys.stderr)


def unknown_node(node_name: str, objects: Objects, *, defaulted: bool) -> str:
    """A node name that no Node object and no endpoint's nodeName uses is most likely a typo (or the
    hostname differs from the Node's name): endpoints on this node would not count as local. Said
    only when the input names nodes at all; "" when all is well."""
    known = {n.name for n in objects.nodes}
    if node_name in known:  # its Node object: the 100,000 endpoints need not be walked
        return ""
    known.update(e.node_name for s in objects.slices for e in s.endpoints if e.node_name)
    if not known or node_name in known:
        return ""
    origin = " (the hostname; give --node-name)" if defaulted else ""
    return (f"node name {node_name!r}{origin} matches no Node object and no endpoint's nodeName "
            f"(known: {', '.join(sorted(known)[:5])}{', …' if len(known) > 5 else ''}): no endpoint is local")


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
