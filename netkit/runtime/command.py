"""`netkit run`: the node daemon's command line, and structured (JSON lines) logging.

The command line is kube-proxy's (netkit/runtime/flags.py holds the table), so kubeadm's DaemonSet
arguments (`--config=/var/lib/kube-proxy/config.conf --hostname-override=$(NODE_NAME)`) work with
the binary swapped; netkit's own options (`-f DIR`, `--netns`, `--dns-listen`, ...) come on top.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path

from netkit.cli.commands import FAMILIES
from netkit.cli.inputs import check_netns
from netkit.config import Config, ConfigError, load_kube_proxy_configuration
from netkit.errors import NetkitError
from netkit.model import IPFamily
from netkit.netns import exists
from netkit.runtime.flags import add_flags, apply_flags, flag_true, given

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None)))
log = logging.getLogger("netkit.daemon")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage()}
        doc.update({k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("run", help="the node daemon: watch the API (or -f DIR) and keep the rules in sync",
                       description="The node daemon, in place of kube-proxy; takes kube-proxy's flags.")
    p.add_argument("-f", "--filename", dest="files", action="append", default=[], metavar="PATH",
                   help="follow manifests (files or directories) instead of the API")
    p.add_argument("--context", metavar="NAME", default="", help="kubeconfig context")
    p.add_argument("--ip-family", choices=tuple(FAMILIES), default=None, help="only this family (default: both)")
    p.add_argument("--netns", metavar="NAME", help="program the rules inside this network namespace")
    p.add_argument("--iptables-backend", choices=("auto", "legacy", "nft"), default="auto")
    p.add_argument("--dns-listen", metavar="IP:PORT", help="also serve cluster DNS on this address")
    p.add_argument("--dns-upstream", action="append", default=[], metavar="IP[:PORT]")
    p.add_argument("--no-conntrack", action="store_true", help="do not delete stale UDP conntrack entries")
    p.add_argument("--allow-empty", action="store_true",
                   help="with -f: a directory without Services means no Services (default: keep the rules "
                        "until manifests come back)")
    add_flags(p.add_argument_group("kube-proxy's flags (and netkit's equivalents)"))
    p.set_defaults(func=cmd_run)


def run_config(args: argparse.Namespace) -> tuple[Config, tuple[str, ...]]:
    """The file (if any) with the flags over it; every warning to report at start."""
    cfg, warnings, _ = run_config_named(args)
    return cfg, warnings


def run_config_named(args: argparse.Namespace) -> tuple[Config, tuple[str, ...], bool]:
    """run_config, and whether the node name is the hostname (neither flag nor file gave one)."""
    cfg = Config()
    warnings: tuple[str, ...] = ()
    path = given(args, "config")
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
        cfg = load_kube_proxy_configuration(text, path)
        warnings = cfg.warnings
    applied = apply_flags(cfg, args)
    cfg = replace(applied.config, iptables_backend=args.iptables_backend)
    defaulted = not cfg.node_name
    if defaulted:
        cfg = replace(cfg, node_name=socket.gethostname().strip().lower())
    return cfg, warnings + applied.warnings, defaulted


def cmd_run(args: argparse.Namespace) -> int:
    from netkit.runtime import capabilities
    from netkit.runtime.daemon import Daemon, DaemonOptions
    from netkit.runtime.sysctls import apply_or_report
    from netkit.sources.kube import ApiSettings

    check_netns(args)  # first: `--netns ""` would program the machine's own namespace
    config, warnings, defaulted = run_config_named(args)
    _logging(config)
    for warning in warnings:
        log.warning(warning)
    if given(args, "write-config-to"):  # before anything else, as kube-proxy's Run
        return write_config(config, given(args, "write-config-to"), "" if defaulted else config.node_name)
    if args.netns and not exists(args.netns):
        raise NetkitError(f"--netns {args.netns}: no such network namespace (see `ip netns list`)")
    for flag in ("apply-sysctls", "init-only"):
        if flag_true(args, flag) and args.netns:
            raise NetkitError(f"--{flag}: refused with --netns (the conntrack table size is the whole machine's)")
    if flag_true(args, "init-only") and not flag_true(args, "cleanup"):  # kube-proxy: --cleanup first
        return init_only(config)
    families = (FAMILIES[args.ip_family],) if args.ip_family else (IPFamily.IPV4, IPFamily.IPV6)
    api = ApiSettings(kubeconfig=config.kubeconfig, master=given(args, "master") or "", context=args.context,
                      qps=config.api_qps, burst=config.api_burst)
    options = DaemonOptions(
        config=config, families=families, netns=args.netns, files=tuple(args.files), api=api,
        healthz_address=config.healthz_bind_address or None, metrics_address=config.metrics_bind_address or None,
        dns_listen=args.dns_listen, dns_upstreams=tuple(args.dns_upstream), conntrack=not args.no_conntrack,
        bind_hard_fail=config.bind_address_hard_fail, allow_empty=args.allow_empty, node_name_defaulted=defaulted,
        nfacct=config.mode == "iptables" and not flag_true(args, "cleanup"))
    daemon = Daemon.for_mode(options)
    if flag_true(args, "cleanup"):
        daemon.cleanup()
        log.info("cleanup done")
        return 0
    capabilities.report()
    apply_or_report(config, apply=flag_true(args, "apply-sysctls"))
    log.info("starting", extra={"node": config.node_name, "mode": config.mode, "netns": args.netns or "",
                                "sync_period": config.sync_period, "min_sync_period": config.min_sync_period})
    asyncio.run(daemon.run())
    return 0


def write_config(config: Config, path: str, hostname_override: str) -> int:
    """--write-config-to: the configuration as a KubeProxyConfiguration file; exit 0 (kube-proxy's)."""
    from netkit.config_encode import dump_kube_proxy_configuration

    text = dump_kube_proxy_configuration(config, hostname_override)
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise NetkitError(f"--write-config-to: {path}: cannot write: {exc.strerror or exc}") from None
    log.info("Wrote configuration to: %s", path, extra={"file": path})
    return 0


def init_only(config: Config) -> int:
    """--init-only: what needs full privileges — the node sysctls --apply-sysctls sets — then exit
    (kube-proxy's InitAndExit); status 1 when one could not be set."""
    from netkit.runtime.sysctls import apply_or_report

    failed = apply_or_report(config, apply=True).failed
    if failed:
        log.error("--init-only: could not set %s", ", ".join(s.path.replace("/", ".") for s in failed))
        return 1
    log.info("System initialized and --init-only specified")
    return 0


def _logging(config: Config) -> None:
    handler = logging.StreamHandler(sys.stderr)
    text = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    handler.setFormatter(text if config.log_format == "text" else JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if config.log_verbosity >= 4 else logging.INFO)
