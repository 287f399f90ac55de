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
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from netkit.dns.engine import Engine
from netkit.dns.names import name_from_text, name_to_text
from netkit.dns.server import DnsServer
from netkit.dns.upstream import DEFAULT_TIMEOUT, Address, Forwarder, from_resolv_conf, parse_address
from netkit.dns.view import MAX_TTL, Options, PodMode, build
from netkit.errors import NetkitError
from netkit.sources.files import FileSource
from netkit.sources.store import Store


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


async def _serve(files: list[str], options: Options, listen: Address, forwarder: Forwarder) -> int:
    """Feed the server from the same file source the daemon's `-f` uses: it follows the files and keeps
    each file's last good version, so a half-written file never takes names away."""
    store = Store()
    source = FileSource(files, store)
    server = DnsServer(Engine(options), listen, forwarder)
    addr = await server.start()  # SERVFAIL until the first complete view below
    feed = asyncio.create_task(source.run(), name="files")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    loops: asyncio.Task[None] | None = None
    try:
        await _first(store.wait_synced(), feed)
        _report(store)
        if any(p.kind == "?" for p in store.problems.values()):
            raise NetkitError("cannot read the manifests (see above)")
        view = build(store.objects(), options, serial=int(time.time()))
        server.set_view(view)
        _say(f"serving {name_to_text(options.zone)} on {addr} (UDP and TCP), "
             f"{len(view.services)} services, upstreams: {', '.join(map(str, forwarder.usable)) or 'none'}")
        loops = asyncio.create_task(_check_loops(server))
        store.take_changes()
        while not stop.is_set():
            if not await _first(store.changed.wait(), feed, stop.wait()):
                break
            store.take_changes()
            _report(store)
            view = build(store.objects(), options, serial=int(time.time()))
            server.set_view(view)
            _say(f"reloaded: {len(view.services)} services")
    finally:
        for task in (feed, loops):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in (feed, loops) if t is not None), return_exceptions=True)
        await server.close()
    return 0


async def _first(wanted: Coroutine[Any, Any, Any], feed: asyncio.Task[None],
                 stop: Coroutine[Any, Any, Any] | None = None) -> bool:
    """Wait for `wanted`; False when `stop` came first; the file source's error if it failed."""
    waits = [asyncio.ensure_future(wanted), *([asyncio.ensure_future(stop)] if stop is not None else [])]
    done, _ = await asyncio.wait([*waits, feed], return_when=asyncio.FIRST_COMPLETED)
    for w in waits:
        w.cancel()
    if feed in done:
        feed.result()  # raises what stopped the source (a missing file, …)
        raise NetkitError("the manifest watcher stopped")
    return waits[0] in done


def _report(store: Store) -> None:
    _say(*(f"invalid object left out: {p}" for p in store.problems.values()))


async def _check_loops(server: DnsServer) -> None:
    for up in await server.check_loops():
        _say(f"upstream {up} forwards back to this server: not using it")


def _say(*lines: str) -> None:
    for line in lines:
        print(f"netkit dns: {line}", file=sys.stderr, flush=True)
