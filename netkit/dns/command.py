"""`netkit dns`: serve cluster DNS from manifest files, reloading them when they change.

The files are read like `kubectl -f` (netkit.sources.manifests); the view is built and installed
before the first query is answered. A watcher (watchfiles, inotify on Linux) reloads on every change:
a reload that cannot read a whole file keeps the previous view rather than serving a partial one,
since a missing Service would be answered with a confident NXDOMAIN. Upstreams come from `--upstream`
or else the node's resolv.conf; any that is this server itself is refused, and a probe at start
drops any that forwards back to us.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from netkit.dns.engine import Engine
from netkit.dns.names import name_from_text, name_to_text
from netkit.dns.server import DnsServer
from netkit.dns.upstream import DEFAULT_TIMEOUT, Address, Forwarder, from_resolv_conf, parse_address
from netkit.dns.view import MAX_TTL, Options, PodMode, View, build
from netkit.errors import NetkitError
from netkit.sources.manifests import load

_EXTENSIONS = (".yaml", ".yml", ".json")
RELOAD_DEBOUNCE_MS = 200


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("dns", help="serve cluster DNS (UDP and TCP) from manifests",
                       description="Serve the Kubernetes DNS schema 1.1.0 for the Services, "
                                   "EndpointSlices and Pods in the manifests; reload when they change.")
    p.add_argument("-f", "--filename", dest="files", action="append", required=True, metavar="PATH",
                   help="manifest file or directory (repeatable), as kubectl -f")
    p.add_argument("--listen", default="127.0.0.1:5353", metavar="IP:PORT",
                   help="address for both UDP and TCP (default 127.0.0.1:5353)")
    p.add_argument("--zone", default="cluster.local", help="cluster domain (default cluster.local)")
    p.add_argument("--ttl", type=int, default=30, help=f"record TTL in seconds, 0..{MAX_TTL} (default 30)")
    p.add_argument("--pods", choices=[m.value for m in PodMode], default=PodMode.DISABLED.value,
                   help="pod records a-b-c-d.<ns>.pod.<zone> (default disabled)")
    p.add_argument("--upstream", action="append", default=[], metavar="IP[:PORT]",
                   help="resolver for names outside the zone (repeatable; default: resolv.conf's)")
    p.add_argument("--resolv-conf", default="/etc/resolv.conf", metavar="FILE",
                   help="where to find upstreams when --upstream is not given")
    p.add_argument("--upstream-timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"how long to wait for each upstream (default {DEFAULT_TIMEOUT})")
    p.add_argument("--loop", choices=["auto", "asyncio", "uvloop"], default="auto",
                   help="event loop (auto: uvloop when installed)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    options = _options(args)
    upstreams = _upstreams(args)
    listen = parse_address(args.listen)
    if "-" in args.files:
        raise NetkitError("netkit dns reads files it can watch; '-' (stdin) is not supported")
    with asyncio.Runner(loop_factory=_loop_factory(args.loop)) as runner:
        return runner.run(_serve(args.files, options, listen, Forwarder(upstreams, args.upstream_timeout)))


def _options(args: argparse.Namespace) -> Options:
    try:
        return Options(zone=name_from_text(args.zone), ttl=args.ttl, pods=PodMode(args.pods))
    except ValueError as exc:
        raise NetkitError(str(exc)) from exc


def _upstreams(args: argparse.Namespace) -> list[Address]:
    if args.upstream:
        return [parse_address(u) for u in args.upstream]
    try:
        return from_resolv_conf(Path(args.resolv_conf).read_text(encoding="utf-8"))
    except OSError:
        return []


def _loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise NetkitError("--loop uvloop: the uvloop package is not installed") from None
        return None
    return uvloop.new_event_loop


def load_view(files: list[str], options: Options) -> tuple[View | None, list[str]]:
    """The view from the files, or None when a whole file could not be read; and what to report."""
    loaded = load(files)
    report = [f"invalid object left out: {p}" for p in loaded.problems]
    if any(p.kind == "?" for p in loaded.problems):
        return None, report
    return build(loaded.objects, options, serial=int(time.time())), report


async def _serve(files: list[str], options: Options, listen: Address, forwarder: Forwarder) -> int:
    view, report = load_view(files, options)
    _say(*report)
    if view is None:
        raise NetkitError("cannot read the manifests (see above)")
    server = DnsServer(Engine(options), listen, forwarder)
    server.set_view(view)
    addr = await server.start()
    _say(f"serving {name_to_text(options.zone)} on {addr} (UDP and TCP), "
         f"{len(view.services)} services, upstreams: {', '.join(map(str, forwarder.usable)) or 'none'}")
    loops = asyncio.ensure_future(_check_loops(server))
    try:
        await _watch(files, options, server)
    finally:
        loops.cancel()
        await server.close()
    return 0


async def _check_loops(server: DnsServer) -> None:
    for up in await server.check_loops():
        _say(f"upstream {up} forwards back to this server: not using it")


async def _watch(files: list[str], options: Options, server: DnsServer) -> None:
    from watchfiles import awatch

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    roots = _watch_roots(files)
    async for changes in awatch(*roots, stop_event=stop, debounce=RELOAD_DEBOUNCE_MS,
                                watch_filter=lambda _change, path: _relevant(path, files)):
        view, report = load_view(files, options)
        _say(*report)
        if view is None:
            _say(f"reload after {len(changes)} change(s) failed: keeping the previous view")
            continue
        server.set_view(view)
        _say(f"reloaded: {len(view.services)} services")


def _watch_roots(files: list[str]) -> list[Path]:
    """Directories as given; a file's parent (editors replace files by renaming)."""
    return sorted({Path(f).resolve() if Path(f).is_dir() else Path(f).resolve().parent for f in files})


def _relevant(path: str, files: list[str]) -> bool:
    p = Path(path).resolve()
    for f in files:
        root = Path(f).resolve()
        if p == root or (root.is_dir() and root in p.parents and p.suffix in _EXTENSIONS):
            return True
    return False


def _say(*lines: str) -> None:
    for line in lines:
        print(f"netkit dns: {line}", file=sys.stderr, flush=True)
