"""Command-line inputs shared by every subcommand that compiles: manifests, config and node flags.

`add_input_options(parser)` declares them; `load_inputs(args)` reads the files, merges the
KubeProxyConfiguration with the flags (flags win), reports invalid objects on stderr and returns an
`Inputs` value. This is the IO edge in front of the pure core.
"""

from __future__ import annotations

import argparse
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


def add_input_options(p: argparse.ArgumentParser, *, manifests_required: bool = True) -> None:
    g = p.add_argument_group("inputs")
    g.add_argument("-f", "--filename", dest="files", action="append", default=[], metavar="PATH",
                   required=manifests_required,
                   help="manifest file or directory (repeatable; '-' reads stdin), as kubectl -f")
    g.add_argument("--config", metavar="FILE", help="a kube-proxy KubeProxyConfiguration file")
    g.add_argument("--node-name", metavar="NAME", help="this node's name (endpoints on it are local)")
    g.add_argument("--node-ip", action="append", default=[], metavar="IP",
                   help="an address of this node (repeatable); added to the Node object's addresses")
    g.add_argument("--cluster-cidr", action="append", default=[], metavar="CIDR",
                   help="pod network, one per family (repeatable; commas allowed)")
    g.add_argument("--masquerade-all", action="store_true", default=None,
                   help="masquerade all traffic to service IPs")
    g.add_argument("--strict", action="store_true",
                   help="treat any invalid object as an error (exit status 2)")


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
    return replace(cfg, **changes)


def load_inputs(args: argparse.Namespace) -> Inputs:
    config = config_from_args(args)
    loaded = load(args.files)
    report_problems(loaded.problems, strict=getattr(args, "strict", False))
    state = build(loaded.objects, config.node_name, config.node_ips)
    return Inputs(config, loaded.objects, state, loaded.problems)


def report_problems(problems: tuple[Problem, ...], *, strict: bool) -> None:
    for problem in problems:
        print(f"netkit: invalid object left out: {problem}", file=sys.stderr)
    if strict and problems:
        raise NetkitError(f"{len(problems)} invalid object(s) and --strict is set")


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
