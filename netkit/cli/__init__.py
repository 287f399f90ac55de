"""The `netkit` command line: one subcommand per user job.

Each area owns its subcommands in a module exposing `register(subparsers)`; the registered handler
takes the parsed arguments and returns the exit status. Errors netkit understands (`NetkitError`)
and OSErrors (paths, addresses) are printed on stderr as one line and exit with status 2, like
diff(1) and kubectl; Ctrl-C exits with 130. Code that binds a listen address wraps it in
`netkit.errors.listening(flag, address)` so the line names the flag and the address.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Sequence

from netkit import __version__
from netkit.errors import NetkitError

# Modules that add subcommands. Each exposes register(subparsers: argparse._SubParsersAction).
COMMAND_MODULES: tuple[str, ...] = (
    "netkit.cli.commands",
    "netkit.cli.flows",
    "netkit.dns.command",
    "netkit.lab.command",
    "netkit.runtime.command",
)
# The subcommands each of them registers: a command line names one, and only its module is imported
# (the others bring asyncio, aiohttp and the DNS server: a third of a second of CPU at every start).
# A test compares this table with what the modules register.
COMMANDS: dict[str, str] = {
    "compile": "netkit.cli.commands",
    "diff": "netkit.cli.commands",
    "apply": "netkit.cli.commands",
    "trace": "netkit.cli.commands",
    "cleanup": "netkit.cli.commands",
    "flows": "netkit.cli.flows",
    "dns": "netkit.dns.command",
    "lab": "netkit.lab.command",
    "run": "netkit.runtime.command",
}
# Commands that make one pass over their input and exit. They run without CPython's cyclic garbage
# collector: the objects they build hold no reference cycles (reference counting frees them), and
# at 10,000 Services its full passes over the millions of decoded objects cost a third of the
# command's time while finding nothing. The daemons (run, dns, lab) keep it.
ONE_PASS: frozenset[str] = frozenset({"compile", "diff", "apply", "trace", "cleanup", "flows"})


def parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line parser; given the arguments, with only the subcommands they can use (all of
    them for `netkit --help`, a top-level option or an unknown command, so the listing is whole)."""
    top = argparse.ArgumentParser(
        prog="netkit",
        description="kube-proxy dataplane and Service-networking toolkit",
    )
    top.add_argument("--version", action="version", version=f"netkit {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    args = sys.argv[1:] if argv is None else argv
    own = COMMANDS.get(args[0]) if args else None
    for name in COMMAND_MODULES if own is None else (own,):
        importlib.import_module(name).register(sub)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every failure an operator can cause ends here as one line on stderr:
    `netkit: error: …` and status 2 (NetkitError, and OSError such as a path or an address that
    cannot be used), or status 130 for Ctrl-C. Output cut short by a closed pipe (`netkit diff | head`)
    does not change the status: the command finishes and reports what it found."""
    stdout = sys.stdout
    sys.stdout = _PipeSafe(stdout)
    collecting = gc.isenabled()
    argv = _coredns(argv)
    try:
        args = parse(parser(argv), argv)
        if args.command in ONE_PASS:
            gc.disable()
        status: int = args.func(args)
        return status
    except NetkitError as exc:
        return _fail(str(exc), exc.exit_status)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except OSError as exc:  # a bind, a file: a property of this host, not a bug
        return _fail(_os_error(exc), 2)
    finally:
        _flush(sys.stdout)
        sys.stdout = stdout
        if collecting:
            gc.enable()


def _coredns(argv: Sequence[str] | None) -> Sequence[str] | None:
    """CoreDNS's command line, `-conf FILE` (what kubeadm's Deployment passes), is `netkit dns --conf
    FILE`: CoreDNS's own Deployment runs netkit's image with nothing else changed."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and (args[0] == "-conf" or args[0].startswith("-conf=")):
        return ["dns", "-" + args[0], *args[1:]]
    return argv


def parse(top: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse; an unknown option is reported with the usage of the subcommand it was given to
    (`netkit diff --bogus` shows diff's usage, not the list of commands), as kubectl does."""
    args, extra = top.parse_known_args(argv)
    if extra:
        _deepest(top, args).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _deepest(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)subcommand that was chosen: by its dest, else by its handler."""
    for action in p._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        chosen = getattr(args, action.dest, None)
        child = action.choices.get(chosen) if isinstance(chosen, str) else None
        if child is None:
            func = getattr(args, "func", None)
            child = next((c for c in action.choices.values() if func is not None and c.get_default("func") is func),
                         None)
        if child is not None:
            return _deepest(child, args)
    return p


def _fail(message: str, status: int) -> int:
    first, *rest = message.splitlines() or [""]
    print(f"netkit: error: {first}", file=sys.stderr)
    for line in rest:  # a kernel tool's own stderr, indented under the one line
        print(f"  {line}", file=sys.stderr)
    return status


def _os_error(exc: OSError) -> str:
    if exc.strerror and exc.filename:
        return f"{exc.filename}: {exc.strerror}"
    return exc.strerror or str(exc)


def _flush(out: object) -> None:
    try:
        flush = getattr(out, "flush", None)
        if flush is not None:
            flush()
    except (BrokenPipeError, ValueError):
        pass


class _PipeSafe:
    """stdout that, once the reader has gone (EPIPE), sends the rest to /dev/null instead of raising,
    so the command still returns its own status (`set -o pipefail` then sees it)."""

    def __init__(self, inner: object) -> None:
        self._inner = inner
        self.broken = False

    def write(self, text: str) -> int:
        if self.broken:
            return len(text)
        try:
            return int(self._inner.write(text))  # type: ignore[attr-defined]
        except BrokenPipeError:
            self._detach()
            return len(text)

    def flush(self) -> None:
        if self.broken:
            return
        try:
            self._inner.flush()  # type: ignore[attr-defined]
        except BrokenPipeError:
            self._detach()

    def _detach(self) -> None:
        """Point the file descriptor at /dev/null: what is still buffered goes there at exit."""
        self.broken = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._inner.fileno())  # type: ignore[attr-defined]
            os.close(devnull)
        except (OSError, AttributeError, ValueError):
            pass

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)
