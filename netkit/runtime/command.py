"""`netkit run`: the node daemon's command line, and structured (JSON lines) logging."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import socket
import sys
import time
from dataclasses import replace

from netkit.cli.commands import FAMILIES
from netkit.cli.inputs import add_input_options, config_from_args
from netkit.errors import NetkitError
from netkit.model import IPFamily
from netkit.netns import exists
from netkit.rules.registry import backend as get_backend

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None)))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage()}
        doc.update({k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("run", help="the node daemon: watch the API (or -f DIR) and keep the rules in sync")
    add_input_options(p, manifests_required=False)
    g = p.add_argument_group("Kubernetes API (default: in-cluster config)")
    g.add_argument("--kubeconfig", metavar="FILE", default="", help="kubeconfig file")
    g.add_argument("--master", metavar="URL", default="", help="API server URL (overrides the kubeconfig's)")
    g.add_argument("--context", metavar="NAME", default="", help="kubeconfig context")
    p.add_argument("--mode", choices=("iptables", "ipvs", "nftables"), default=None)
    p.add_argument("--ip-family", choices=tuple(FAMILIES), default=None, help="only this family (default: both)")
    p.add_argument("--netns", metavar="NAME", help="program the rules inside this network namespace")
    p.add_argument("--iptables-backend", choices=("auto", "legacy", "nft"), default="auto")
    p.add_argument("--healthz-bind-address", metavar="IP:PORT", default=None,
                   help="/healthz and /livez (default 0.0.0.0:10256; empty disables)")
    p.add_argument("--metrics-bind-address", metavar="IP:PORT", default=None,
                   help="/metrics (default 127.0.0.1:10249; empty disables)")
    p.add_argument("--dns-listen", metavar="IP:PORT", help="also serve cluster DNS on this address")
    p.add_argument("--dns-upstream", action="append", default=[], metavar="IP[:PORT]")
    p.add_argument("--min-sync-period", type=float, metavar="SECONDS", help="default 1")
    p.add_argument("--sync-period", type=float, metavar="SECONDS", help="default 30")
    p.add_argument("--no-conntrack", action="store_true", help="do not delete stale UDP conntrack entries")
    p.add_argument("--cleanup", action="store_true", help="remove every rule netkit wrote, then exit")
    with contextlib.suppress(argparse.ArgumentError):  # the input options may define it already
        p.add_argument("--allow-empty", action="store_true",
                       help="with -f: a directory without Services means no Services (default: keep the rules "
                            "until manifests come back)")
    p.add_argument("--log-format", choices=("json", "text"), default="json")
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    from netkit.runtime.daemon import Daemon, DaemonOptions
    from netkit.sources.kube import settings_from_args

    _logging(args.log_format)
    config = replace(config_from_args(args), iptables_backend=args.iptables_backend)
    if not config.node_name:
        config = replace(config, node_name=socket.gethostname().lower())
    if args.min_sync_period is not None:
        config = replace(config, min_sync_period=args.min_sync_period)
    if args.sync_period is not None:
        config = replace(config, sync_period=args.sync_period)
    if args.netns and not exists(args.netns):
        raise NetkitError(f"--netns {args.netns}: no such network namespace (see `ip netns list`)")
    families = (FAMILIES[args.ip_family],) if args.ip_family else (IPFamily.IPV4, IPFamily.IPV6)
    options = DaemonOptions(
        config=config, families=families, netns=args.netns, files=tuple(args.files),
        api=settings_from_args(args),
        healthz_address=_address(args.healthz_bind_address, config.healthz_bind_address),
        metrics_address=_address(args.metrics_bind_address, config.metrics_bind_address),
        dns_listen=args.dns_listen, dns_upstreams=tuple(args.dns_upstream), conntrack=not args.no_conntrack,
        allow_empty=bool(getattr(args, "allow_empty", False)))
    daemon = Daemon(options, get_backend(config.mode))
    if args.cleanup:
        daemon.cleanup()
        logging.getLogger("netkit.daemon").info("cleanup done")
        return 0
    logging.getLogger("netkit.daemon").info("starting", extra={"node": config.node_name, "mode": config.mode,
                                                              "netns": args.netns or ""})
    asyncio.run(daemon.run())
    return 0


def _address(flag: str | None, default: str) -> str | None:
    value = default if flag is None else flag
    return value or None


def _logging(fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    text = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    handler.setFormatter(JsonFormatter() if fmt == "json" else text)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
