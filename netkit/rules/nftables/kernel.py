"""NftKernel: the IO edge of the nftables backend — dump netkit's table, apply a Transaction, clean up.

Only netkit's own table is ever listed (`list table ip netkit`), never the whole ruleset: listing
everything took 17.8 s and 1.6 GB at 10k services here, and broke kube-proxy at 44k services.
The daemon keeps the committed Ruleset in memory and dumps only for periodic full syncs.

The table is read from nft's TEXT listing (`nft -y -T list table`, parse_listing.py): at 10,000
services nft lists it in 1.5 s and 261 MB, against 2.0 s and 527 MB for the JSON. The text reader
knows only what netkit writes; anything else in the table (a foreign edit) makes it refuse, and the
JSON listing is read instead (parse.py shows and repairs foreign edits).

Two transports send the same script; both end in libnftables and one netlink batch per script, so a
refused script changes nothing:

- "cli": `nft -f -` (through `ip netns exec NAME` for a named namespace);
- "lib": libnftables in-process through Debian's python3-nftables (a ctypes wrapper). Its netlink
  socket is bound to the namespace it is created in, so the context is created on a short-lived
  thread that has entered the namespace (setns is per thread); the process never leaves its own
  namespace. Saves the fork/exec of `ip` and `nft` on every sync.

`transport="auto"` picks "lib" when python3-nftables can be loaded, else "cli"; bench/nftables.py
measures both (figures in docs/nftables.md). With "auto", a transaction netlink.py can encode (the
small ones of the daemon's syncs) is sent as one NFNETLINK batch of its own making instead, without
nft's cache fill that lists every chain first; "cli" and "lib" always send scripts.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import io
import os
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, TextIO, TypeVar

from netkit import netns as netns_mod
from netkit.errors import KernelError
from netkit.nft import fingerprint, netlink
from netkit.nft.fingerprint import Fingerprint, Unreadable
from netkit.nft.generation import NETLINK_NETFILTER, Generation, netfilter_socket
from netkit.nft.parse import parse
from netkit.nft.parse_listing import LIST_OPTIONS, Unrecognised, parse_listing
from netkit.nft.ruleset import Ruleset
from netkit.nft.transaction import Transaction, render_prelude, render_transaction

# Debian installs python3-nftables for the system interpreter only; a virtualenv on another
# interpreter loads the same pure-Python wrapper from there.
DEBIAN_NFTABLES = "/usr/lib/python3/dist-packages/nftables/nftables.py"
CLONE_NEWNET = 0x40000000


class NftKernel:
    def __init__(self, family: str, netns: str | None = None, *, table: str = "netkit",
                 transport: str = "auto") -> None:
        if transport not in ("auto", "cli", "lib"):
            raise ValueError(f"transport {transport!r} is not auto, cli or lib")
        self.family = family
        self.netns = netns
        self.table = table
        self.transport = transport
        self._lib: Any = None
        self._generation = Generation(lambda: netfilter_socket(netns), f"/run/netns/{netns}" if netns else None)
        self._known: int | None = None  # the generation at which this kernel last wrote or read the table
        # Knowledge lost to someone else's commit: the generation moved while netkit was not looking
        # (between a known point and its next write, or during a write). Cleared by a read only.
        self._lost = False
        path = f"/run/netns/{netns}" if netns else None
        self._writer = netlink.Writer(lambda: netfilter_socket(netns), path)
        self.netlink_batches = 0  # transactions sent by netlink.py's writer (tests and benchmarks)
        # The fingerprint of the table netkit last wrote or read (fingerprint.py), None when not known.
        self._print: Fingerprint | None = None
        self._reader = fingerprint.Reader(lambda: netns_mod.netlink_socket(netns, NETLINK_NETFILTER, rcvbuf=1 << 22),
                                          family, table, path)
        self.compared_reads = 0  # full syncs that found the table unchanged by its fingerprint (tests, benchmarks)

    # ── the Kernel protocol ──

    def dump(self) -> Ruleset | None:
        """netkit's table as it is in the kernel, or None when there is none."""
        return self._dump(None)

    def _dump(self, like: Ruleset | None) -> Ruleset | None:
        """The table read from nft's text listing (parse_listing.py: faster, half the memory of the
        JSON), or from the JSON listing when the text holds anything that reader does not know (a
        foreign edit: parse.py reads and shows those)."""
        try:
            return self._read(like, text=True)
        except Unrecognised:
            return self._read(like, text=False)

    def _read(self, like: Ruleset | None, *, text: bool) -> Ruleset | None:
        self._print = None
        before = self._generation.read()
        command = f"list table {self.family} {self.table}"
        with self._listed(command, text) as (code, lines, err):
            if code != 0:
                if "No such file or directory" in err:
                    self._read_at(before)  # known too: no table
                    return None
                raise KernelError(f"nft {command} failed", stderr=err)
            if text:
                found = _without_gc(lambda: parse_listing(lines, self.family, self.table, like=like))
            else:
                found = _without_gc(lambda: parse("".join(lines), self.family, self.table, like=like))
        self._read_at(before)
        return found

    def _read_at(self, before: int | None) -> None:
        """After a read begun at generation `before`: the table read is the one at `before` when
        nobody committed during the read."""
        self._known = before if before is not None and self._generation.read() == before else None
        self._lost = self._known is None

    @contextmanager
    def _listed(self, command: str, text: bool) -> Iterator[tuple[int, Iterable[str], str]]:
        """A listing's exit status, its lines and its stderr: the text one with parse_listing's
        options. A child's output is read from a file line by line, never held whole."""
        if not text:
            code, out, err = self._run(command, json=True, big=True)
            yield code, (out,), err
        elif self.transport != "auto" and self._use_lib():
            code, out, err = _lib_listing(self._lib, command)
            yield code, io.StringIO(out), err  # its lines one at a time, not a list of them beside it
        else:
            with _listing_file(["nft", *LIST_OPTIONS, *command.split()], self.netns) as listed:
                yield listed

    writes = frozenset({"nftables"})

    def dump_reusing(self, committed: Ruleset | None) -> Ruleset | None:
        """`committed` itself when nothing has been committed in the namespace since this kernel last
        wrote or read the table (see generation.py), or when something was but the table's
        fingerprint, read over netlink, is the one it had then (fingerprint.py): the table is then
        what the caller committed through it. Else a real dump, sharing the sets and chains equal
        to `committed`'s."""
        if committed is None:
            return self._dump(committed)
        known = self._known
        if known is not None and self._generation.read() == known:
            if self._print is None:
                self._print = self._fingerprint_at(known)  # once, so that later full syncs can compare
            return committed
        seen = self.read_fingerprint()
        if seen is not None and self._print is not None and seen[0] == self._print:
            self._known, self._lost = seen[1], False
            self.compared_reads += 1
            return committed
        found = self._dump(committed)
        if seen is not None and self._known == seen[1]:  # read at the generation the dump was read at
            self._print = seen[0]
        return found

    def read_fingerprint(self) -> tuple[Fingerprint, int] | None:
        """The table's fingerprint and the generation it was read at; None when it could not be
        read whole at one generation (no table, a failed or interrupted dump, a commit meanwhile)."""
        before = self._generation.read()
        if before is None:
            return None
        try:
            found = _without_gc(self._reader.read)
        except Unreadable:
            return None
        return (found, before) if self._generation.read() == before else None

    def _fingerprint_at(self, generation: int) -> Fingerprint | None:
        seen = self.read_fingerprint()
        return seen[0] if seen is not None and seen[1] == generation else None

    def prefetch(self) -> bool:
        """Nothing to read before the dump itself."""
        return False

    def apply(self, tx: Transaction, *, stop: Callable[[], bool] | None = None,
              progress: Callable[[str], None] | None = None) -> None:
        """Send the transaction's new dynamic sets alone (plan.py: `prelude`), the transaction, then
        its deferred deletions as a second transaction."""
        prior, lost = self._known, self._lost
        self._known, self._lost = None, True  # until the writes are known to be all that happened
        old, self._print = self._print, None
        before = self._generation.read()
        pre = render_prelude(tx)
        sent = self.send(pre, big=tx.create is not None) if pre else 0
        sent += self._write(tx)
        follow = tx.followup()
        if follow:
            sent += self._write(follow)
        after = self._generation.read()
        if before is None or after != before + sent:
            return  # someone else committed during the writes: the next full sync reads the table
        # The table is what was planned, if it was the committed one before the writes: when someone
        # committed since netkit last knew it, the next full sync compares the fingerprint (kept
        # strictly, from what netkit wrote alone) or reads the table, rather than trust it.
        moved = lost or (prior is not None and before != prior)
        if not moved:
            self._known, self._lost = after, False
        self._print = self._followed(old, tx, after, strict=moved)

    def _followed(self, old: Fingerprint | None, tx: Transaction, generation: int, *,
                  strict: bool) -> Fingerprint | None:
        """The fingerprint after netkit's own write of `tx`: read whole after a table was created
        (or many chains were written), else `old` with the elements `tx` changed accounted for and
        the chains and sets it wrote read back (fingerprint.py). None when not known. `strict`: the
        table before the writes is not known to be `old`'s, so only what `tx` wrote whole is read
        back (never a whole table, nor a set's elements it changed in part)."""
        if tx.create is not None:
            return None if strict else self._fingerprint_at(generation)
        if old is None:
            return None
        rest = fingerprint.account(old, tx)  # `old` is this kernel's alone, and forgotten on failure
        if len(rest.chains) > fingerprint.FULL_READ_ABOVE:
            return None if strict else self._fingerprint_at(generation)
        try:
            self._reader.read_back(old, rest, strict=strict)
        except Unreadable:
            return None
        return old if self._generation.read() == generation else None

    def _write(self, tx: Transaction) -> int:
        """One transaction, as one netlink batch encoded by netlink.py when it can encode all of it
        (transport "auto"), else as an nft script; returns how many were sent (0 or 1)."""
        if self.transport == "auto" and tx.create is None and not tx.empty:
            genid = self._generation.read()
            if genid is not None:
                try:
                    self._send_batch(tx, genid)
                    return 1
                except netlink.Unsupported:
                    pass  # nothing was sent: the whole transaction goes as a script
        return self.send(render_transaction(tx), big=tx.create is not None)

    def _send_batch(self, tx: Transaction, genid: int) -> None:
        where = f" in network namespace {self.netns}" if self.netns else ""
        try:
            self._writer.send(tx, genid)
        except netlink.Refused as exc:
            raise KernelError(f"the kernel refused the transaction{where}; nothing was changed",
                              payload=render_transaction(tx), stderr=str(exc)) from None
        except OSError as exc:
            raise KernelError(f"netlink transaction{where}: {exc}", payload=render_transaction(tx)) from None
        self.netlink_batches += 1

    def cleanup(self) -> None:
        """Delete netkit's table and nothing else (`add` first so a missing table is no error)."""
        self._known, self._lost, self._print = None, True, None
        t = f"{self.family} {self.table}"
        before = self._generation.read()
        sent = self.send(f"add table {t}\ndelete table {t}\n")
        after = self._generation.read()
        if before is not None and after == before + sent:
            self._known, self._lost = after, False  # known: no table

    # ── transports ──

    def send(self, script: str, *, big: bool = False) -> int:
        """Send one script as one transaction; returns how many were sent (0 for an empty script)."""
        if not script.strip():
            return 0
        code, _, err = self._run(script, big=big)
        if code != 0:
            where = f" in network namespace {self.netns}" if self.netns else ""
            raise KernelError(f"nft refused the transaction{where}; nothing was changed",
                              payload=script, stderr=err)
        return 1

    def _run(self, script: str, *, json: bool = False, big: bool = False) -> tuple[int, str, str]:
        """`big` (a whole table created or listed) goes through `nft` in a child process with "auto":
        libnftables holds what it parsed or listed, and in-process that counted in the daemon's
        RSS (10,000 services: 584 MB after the first sync, 1.5 GB peak on a full sync's dump)."""
        if not (big and self.transport == "auto") and self._use_lib():
            return self._run_lib(script, json)
        if json:
            return _listing(["nft", "-j", *script.split()], self.netns)
        proc = netns_mod.run(["nft", "-f", "-"], self.netns, input=script, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    def _use_lib(self) -> bool:
        if self.transport == "cli":
            return False
        if self._lib is None:
            module = load_nftables_module()
            if module is None:
                if self.transport == "lib":
                    raise KernelError("libnftables transport needs python3-nftables (Debian)")
                self.transport = "cli"
                return False
            self._lib = context_in(module, self.netns)
        return True

    def _run_lib(self, script: str, json: bool) -> tuple[int, str, str]:
        self._lib.set_json_output(json)
        code, out, err = self._lib.cmd(script)
        return int(code), str(out), str(err)


def _listing(argv: list[str], netns: str | None) -> tuple[int, str, str]:
    """A listing's output through an unlinked temporary file rather than a pipe. A pipe is drained
    only when this process's reading thread gets the GIL, and `netkit diff` lists the kernel on a
    thread while its main thread decodes the input (netkit.cli.early): nft stalled on the full
    64 KiB pipe for the whole decode (a 21 MB listing at 10,000 services took 6.5 s instead of 2.2 s)."""
    with _listing_file(argv, netns) as (code, out, err):
        return code, out.read(), err


@contextmanager
def _listing_file(argv: list[str], netns: str | None) -> Iterator[tuple[int, TextIO, str]]:
    """As `_listing`, the output left in its (unlinked) file for the caller to read line by line."""
    wrapped = netns_mod.wrap(argv, netns)
    with tempfile.TemporaryFile("w+", encoding="utf-8") as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.run(wrapped, stdin=subprocess.DEVNULL, stdout=out, stderr=err, timeout=600,
                                  process_group=0, check=False)
        except FileNotFoundError as exc:
            raise KernelError(f"{wrapped[0]}: not installed") from exc
        except subprocess.TimeoutExpired as exc:
            raise KernelError(f"{' '.join(wrapped[:6])}: timed out after 600 s") from exc
        out.seek(0)
        err.seek(0)
        yield proc.returncode, out, err.read().decode(errors="replace")


def _lib_listing(lib: Any, command: str) -> tuple[int, str, str]:
    """A text listing in-process, with parse_listing's options (numeric priorities and times) set
    for this command only."""
    lib.set_json_output(False)
    lib.set_numeric_prio_output(True)
    lib.set_numeric_time_output(True)
    try:
        code, out, err = lib.cmd(command)
    finally:
        lib.set_numeric_prio_output(False)
        lib.set_numeric_time_output(False)
    return int(code), str(out), str(err)


Parsed = TypeVar("Parsed")


def _without_gc(read: Callable[[], Parsed]) -> Parsed:
    """`read()` with the cyclic garbage collector paused: the ~500k objects of a 10,000-service
    table triggered collections that walked the daemon's whole heap and found nothing (a dump's
    parse took 1.7 s instead of 0.6 s). Nothing read here forms a cycle."""
    was = gc.isenabled()
    gc.disable()
    try:
        return read()
    finally:
        if was:
            gc.enable()


def load_nftables_module() -> ModuleType | None:
    try:
        import nftables as module

        if hasattr(module, "Nftables"):  # not some other module that happens to be called nftables
            return module  # type: ignore[no-any-return]
    except ImportError:
        pass
    if not os.path.exists(DEBIAN_NFTABLES):
        return None
    spec = importlib.util.spec_from_file_location("netkit_debian_nftables", DEBIAN_NFTABLES)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except OSError:
        return None
    return module


def context_in(module: ModuleType, netns: str | None) -> Any:
    """An Nftables context whose netlink socket lives in `netns` (None: this process's namespace)."""
    if netns is None:
        return module.Nftables()
    result: dict[str, Any] = {}

    def enter_and_create() -> None:
        try:
            result["ctx"] = _create_in(module, f"/run/netns/{netns}")
        except Exception as exc:  # noqa: BLE001 — any failure is re-raised on the caller's thread
            result["error"] = exc

    worker = threading.Thread(target=enter_and_create, name=f"nft-setns-{netns}")
    worker.start()
    worker.join()
    if "error" in result:
        raise KernelError(f"cannot open libnftables in network namespace {netns}: {result['error']}")
    return result["ctx"]


def _create_in(module: ModuleType, path: str) -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns({path})")
        try:
            return module.Nftables()
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:  # never leave a pooled thread elsewhere
                os._exit(70)
    finally:
        os.close(own)
        os.close(target)
