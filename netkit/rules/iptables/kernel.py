"""The iptables kernel edge: iptables-save to read, iptables-restore --noflush to write, -C/-I for jumps.

One `IptablesKernel` per (family, backend, network namespace). Constructing it does no IO.
- backend "legacy" or "nft" picks `iptables-legacy-*` or `iptables-nft-*` (`ip6tables-*` for IPv6);
  "auto" detects what the node already uses, as kube-proxy's iptables wrapper does: a hint chain
  (KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY, or our own KUBE-PROXY-CANARY) decides, iptables-nft's
  first, else the backend holding more rules, else nft (Debian's default). The two backends cannot
  see each other's rules, so writing into the wrong one leaves traffic to the invisible one
  (kubernetes#71305): a backend whose tables cannot be read (a missing capability) stops the
  detection with a KernelError saying so, never a guess.
- `apply(plan)` writes the plan as one restore per table commit, in the order of commits.py (no
  packet ever meets a state that is neither the old nor the new ruleset for its Service); with more
  than one commit, all of them are first checked with `iptables-restore --test`, so a payload the
  tool refuses changes nothing. Each restore is taken whole or not at all. Only then are missing
  entry jumps inserted, each checked first with `-C` so none is ever duplicated. iptables-nft gets
  big plans' new chains in batches first (plan.batches): unreferenced, so invisible to traffic.
- `stop`, when set, is asked between commits: if it says so, `apply` raises ApplyInterrupted at
  that safe point, saying what is written (the CLI sets it on SIGINT). The tools run in their own
  process group, so a Ctrl-C at the terminal never kills one half-way.
- `cleanup()` removes netkit's jumps from the built-in chains and every netkit chain, nothing else.
- `dump_reusing(committed)` (a full sync) with legacy compares each table with the text the kernel
  should print — `committed`, and what is not netkit's as this edge last read it plus the jumps it
  inserted since — and parses only a table that differs (ruleset.read_expecting).
- `prefetch()` (legacy; `netkit diff`) reads the three tables' text at once, in the caller's thread,
  before anything is compiled; the next `dump` or `dump_reusing` reads that text instead of the
  kernel. The pipes are read without holding Python's interpreter lock, so a thread can do it while
  the input is decoded; the comparison with the compiled ruleset comes after (`dump_reusing`).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from itertools import filterfalse
from typing import IO

from netkit.errors import KernelError
from netkit.model import IPFamily
from netkit.netns import run, wrap
from netkit.rules.backend import ApplyInterrupted
from netkit.rules.iptables.commits import commits
from netkit.rules.iptables.names import OWNED, is_owned
from netkit.rules.iptables.plan import Plan, batches, render_plan, render_plan_lines
from netkit.rules.iptables.rule import read
from netkit.rules.iptables.ruleset import (
    BUILTIN_CHAINS,
    Expected,
    Ruleset,
    expected_save,
    is_builtin,
    parse_chunks,
    read_expecting,
)

TABLES = ("mangle", "filter", "nat")
NFT_BATCH_CHAINS = 2000  # ~0.4 s a batch on this kind of machine; see plan.batches
BACKENDS = ("auto", "legacy", "nft")
PIPE_BYTES = 1 << 20  # Linux's default /proc/sys/fs/pipe-max-size
_HINT_CHAINS = ("KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY", "KUBE-PROXY-CANARY")


@dataclass
class IptablesKernel:
    family: IPFamily
    netns: str | None = None
    backend: str = "auto"
    wait_seconds: int = 5  # xtables lock wait, as kube-proxy
    # Per table, the chains not netkit's (built-in ones included) as last read, with the entry jumps
    # inserted since: with the committed ruleset, what the kernel should hold (dump_reusing).
    _seen: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict, init=False, repr=False)
    # From `prefetch`: each table's iptables-save output, in the pieces the pipe gave; used once.
    _prefetched: list[tuple[str, list[bytes]]] | None = field(default=None, init=False, repr=False)

    @cached_property
    def resolved_backend(self) -> str:
        if self.backend != "auto":
            return self.backend
        return detect_backend(self.family, self.netns)

    @property
    def writes(self) -> frozenset[str]:
        return frozenset({f"iptables-{self.resolved_backend}"})

    def tool(self, what: str) -> str:
        base = "iptables" if self.family is IPFamily.IPV4 else "ip6tables"
        suffix = f"-{what}" if what else ""
        return f"{base}-{self.resolved_backend}{suffix}"

    def dump(self, tables: tuple[str, ...] = TABLES) -> Ruleset:
        """What the kernel holds of `tables`; the output is parsed as it streams in."""
        if (read := self._take_prefetched(tables)) is not None:
            return self._remember(parse_chunks((c for _, chunks in read for c in _used(chunks)), self.family))
        return self._remember(_only(parse_chunks(self._save_chunks(tables), self.family), tables))

    def prefetch(self) -> bool:
        """Read every table's text now, for the next `dump` or `dump_reusing` (see the module
        docstring); False, reading nothing, unless the backend is legacy (iptables-nft lists chains
        in another order, so its dump is parsed as it streams, as before)."""
        if self.resolved_backend != "legacy":
            return False
        procs = [self._start_save(table) for table in TABLES]
        try:
            self._prefetched = [(t, list(self._read_save(t, p))) for t, p in zip(TABLES, procs, strict=True)]
        finally:
            for proc in procs:
                _reap(proc)
        return True

    def _take_prefetched(self, tables: tuple[str, ...]) -> list[tuple[str, list[bytes]]] | None:
        read, self._prefetched = self._prefetched, None
        if read is None or tuple(t for t, _ in read) != tables:
            return None
        return read

    def dump_reusing(self, committed: Ruleset) -> Ruleset:
        """`dump`, with every chain equal to `committed`'s sharing its tuple (a full sync re-reading
        an unchanged kernel then holds one copy of 300k rules, not two). With legacy, the three tools
        start at once and each table is compared with the text `committed` would print, built while
        they read the kernel (ruleset.read_expecting); the result's `since` lets the planner compare
        only what can differ. iptables-nft lists chains in another order: it is parsed as it streams."""
        read = self._take_prefetched(TABLES)
        if self.resolved_backend != "legacy":  # never prefetched
            return _only(parse_chunks(self._save_chunks(TABLES), self.family, reuse=committed), TABLES)
        procs = [self._start_save(table) for table in TABLES] if read is None else []
        try:
            expected = {t: self._should_hold(t, committed) for t in TABLES if committed.chains(t)}
            tables = (_used(chunks) for _, chunks in read) if read is not None else \
                (self._read_save(t, p) for t, p in zip(TABLES, procs, strict=True))
            live, matched = read_expecting(tables, self.family, committed, expected)
            return self._remember(live, matched)
        finally:
            for proc in procs:
                _reap(proc)

    def _should_hold(self, table: str, committed: Ruleset) -> Expected:
        """The text of `committed`'s chains of `table`, and the others (other software's, the built-in
        ones with its rules and netkit's jumps) as this kernel edge last saw and changed them."""
        mine = committed.chains(table)
        chains, differs = dict(mine), set()
        for chain, rules in self._seen.get(table, {}).items():  # a few: kept as committed's where equal
            same = mine.get(chain)
            chains[chain] = same if same is not None and same == rules else rules
            if chains[chain] is not same:
                differs.add(chain)
        return expected_save(table, chains, frozenset(differs))

    def _remember(self, live: Ruleset, unchanged: frozenset[str] = frozenset()) -> Ruleset:
        """Keep what is not netkit's of each table read (`unchanged`: read as expected, so as kept)."""
        for table, chains in live.tables.items():
            seen = self._seen.get(table)
            if table in unchanged and seen is not None:
                seen.update((c, chains[c]) for c in BUILTIN_CHAINS.get(table, ()) if c in chains and c not in seen)
            else:
                self._seen[table] = {c: chains[c] for c in filterfalse(OWNED.match, chains)}
        return live

    def _save_chunks(self, tables: tuple[str, ...]) -> Iterator[bytes]:
        """iptables-save's output in the pieces the pipe gives (read while the tool still writes):
        legacy's table by table (each is its own blob in the kernel); iptables-nft's of every table
        at once, in one run without -t, when nat is among several asked for: the tool reads the
        family's whole ruleset over netlink whichever table it prints (at 3,000 services `-t mangle`
        took 0.36 s, `-t filter` 0.37 s, `-t nat` 0.54 s, and all of them at once 0.50 s). Without
        nat (the small tables only) they are printed one by one, so the nat table is not read. The
        caller keeps only `tables` (`_only`)."""
        whole = self.resolved_backend == "nft" and len(tables) > 1 and "nat" in tables
        for table in (None,) if whole else tables:
            proc = self._start_save(table)
            try:
                yield from self._read_save(table or "", proc)
            finally:
                _reap(proc)

    def _start_save(self, table: str | None) -> subprocess.Popen[bytes]:
        """`iptables-save -t table` (every table: None) started, its pipe widened."""
        argv = wrap([self.tool("save"), *(("-t", table) if table else ())], self.netns)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                process_group=0)
        assert proc.stdout is not None
        _widen(proc.stdout)
        return proc

    def _read_save(self, table: str, proc: subprocess.Popen[bytes]) -> Iterator[bytes]:
        assert proc.stdout is not None and proc.stderr is not None
        while chunk := os.read(proc.stdout.fileno(), PIPE_BYTES):
            yield chunk
        err = proc.stderr.read().decode(errors="replace")
        if proc.wait() != 0 and "does not exist" not in err:
            raise KernelError(f"{self.tool('save')}{f' -t {table}' if table else ''} failed", stderr=err)

    def apply(self, plan: Plan, *, stop: Callable[[], bool] | None = None,
              progress: Callable[[str], None] | None = None) -> None:
        """`stop` is asked between commits (see the module docstring); `progress` is told what is
        written at each point `stop` is asked."""
        point = partial(_stop_point, stop, progress)
        # iptables-nft's --noflush restore is quadratic in the chains of one batch: write big plans'
        # new chains in batches first (see plan.batches); legacy swaps the whole table per restore.
        parts = batches(plan, NFT_BATCH_CHAINS) if self.resolved_backend == "nft" else [plan]
        early, steps = [p for p in parts[:-1] if not p.empty], commits(parts[-1])
        for i, part in enumerate(early):
            point(f"{i} of {len(early)} batches of new chains written, none of them used yet: "
                             "traffic still meets the previous rules only")
            self._restore(part)
        if len(steps) > 1:
            self._test_all(steps)
        for i, part in enumerate(steps):
            if i == 0:
                point(f"{len(early)} batches of new chains written, none of them used yet: traffic "
                                 "still meets the previous rules only" if early else "nothing was written")
            else:
                point(f"{i} of {len(steps)} table commits done: every Service meets either its "
                                 "previous or its new rules")
            try:
                self._restore(part)
            except KernelError as exc:
                if not i:
                    raise
                head = str(exc).split("\n", 1)[0].replace("; nothing was changed", "")
                raise KernelError(f"{head}; the {i} commit(s) before it stay: every Service meets either its "
                                  "previous or its new rules", payload=exc.payload, stderr=exc.stderr) from exc
        for jump in plan.jumps:
            self._ensure_jump(jump.table, jump.chain, jump.rule, jump.position)

    def _test_all(self, plans: list[Plan]) -> None:
        """Every plan in one `iptables-restore --test` run: refused → KernelError, nothing changed."""
        payload = "".join(render_plan(p) for p in plans)
        argv = wrap([self.tool("restore"), "--noflush", "--wait", str(self.wait_seconds), "--test"], self.netns)
        proc = subprocess.run(argv, input=payload, capture_output=True, text=True, process_group=0)
        if proc.returncode != 0:
            where = f" in network namespace {self.netns}" if self.netns else ""
            raise KernelError(f"{self.tool('restore')} --test refused the payload{where} (exit {proc.returncode}); "
                              "nothing was changed", payload=payload, stderr=proc.stderr)

    def _restore(self, plan: Plan) -> None:
        """One `iptables-restore --noflush` batch, the payload streamed in pieces: at 10k services a
        first sync is 37 MB of text, which is never held whole (nor twice, as str and as bytes)."""
        argv = wrap([self.tool("restore"), "--noflush", "--wait", str(self.wait_seconds)], self.netns)
        with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, process_group=0) as proc:
            assert proc.stdin is not None
            batch: list[str] = []
            try:
                for line in render_plan_lines(plan):
                    batch.append(line)
                    if len(batch) >= 4096:
                        proc.stdin.write("".join(batch))
                        batch.clear()
                proc.stdin.write("".join(batch))
            except BrokenPipeError:
                pass  # the tool gave up early; its exit status and stderr say why
            _, err = proc.communicate()
        if proc.returncode != 0:
            where = f" in network namespace {self.netns}" if self.netns else ""
            raise KernelError(f"{self.tool('restore')} failed{where} (exit {proc.returncode}); nothing was changed",
                              payload=render_plan(plan), stderr=err)

    def _ensure_jump(self, table: str, chain: str, rule: str, position: int) -> None:
        args = read(rule).words
        check = run([self.tool(""), "-w", str(self.wait_seconds), "-t", table, "-C", chain, *args],
                    self.netns, check=False)
        if check.returncode == 0:
            return
        run([self.tool(""), "-w", str(self.wait_seconds), "-t", table, "-I", chain, str(position), *args],
            self.netns)
        if (seen := self._seen.get(table)) is not None:
            rules = list(seen.get(chain, ()))
            rules.insert(position - 1, rule)
            seen[chain] = tuple(rules)

    def cleanup(self, owned: Callable[[str], bool] = is_owned) -> int:
        """Remove netkit's jumps and chains; returns how many chains were removed. `owned` says which
        chains are netkit's (the IPVS backend passes its own layout's)."""
        live = self.dump()
        for table in TABLES:
            for chain, rules in live.chains(table).items():
                if not is_builtin(table, chain):
                    continue
                for rule in rules:
                    if jump_target(rule) and owned(jump_target(rule) or ""):
                        run([self.tool(""), "-w", str(self.wait_seconds), "-t", table, "-D", chain,
                             *read(rule).words], self.netns)
        payload, count = cleanup_payload(live, owned)
        if payload:
            run([self.tool("restore"), "--noflush", "--wait", str(self.wait_seconds)], self.netns,
                input=payload)
        return count


def cleanup_payload(live: Ruleset, owned: Callable[[str], bool] = is_owned) -> tuple[str, int]:
    out: list[str] = []
    count = 0
    for table in TABLES:
        mine = [c for c in live.chains(table) if owned(c)]
        if not mine:
            continue
        count += len(mine)
        out.append(f"*{table}")
        out.extend(f":{c} - [0:0]" for c in mine)
        out.extend(f"-X {c}" for c in mine)
        out.append("COMMIT")
    return ("\n".join(out) + "\n" if out else ""), count


def jump_target(rule: str) -> str | None:
    """The chain or verdict a rule jumps (-j) or goes (-g) to (rule.py reads it)."""
    return read(rule).target or None


def _used(chunks: list[bytes]) -> Iterator[bytes]:
    """The prefetched pieces, each let go once read (a 10k-service nat table is 37 MB of text)."""
    chunks.reverse()
    while chunks:
        yield chunks.pop()


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Stop a save tool that is still running (its reader gave up) and close its pipes."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _only(ruleset: Ruleset, tables: tuple[str, ...]) -> Ruleset:
    """`ruleset`'s `tables`, in that order: iptables-nft-save without -t prints every table it
    knows (raw and security too, when they exist), newest first."""
    if list(ruleset.tables) == [t for t in tables if t in ruleset.tables]:
        return ruleset
    return replace(ruleset, tables={t: ruleset.tables[t] for t in tables if t in ruleset.tables})


def _widen(pipe: IO[bytes]) -> None:
    """Let the tool write up to PIPE_BYTES ahead of the reader (the default pipe holds 64 KiB: the
    tool would stop each time the parser works on a piece); best effort."""
    try:
        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass


def detect_backend(family: IPFamily, netns: str | None) -> str:
    """Which iptables backend the node uses (see the module docstring): a hint chain in
    iptables-nft's tables, else in legacy's, else the backend holding more rules, else nft.

    iptables-nft's hint chains are looked up by name over netfilter netlink (NFT_MSG_GETCHAIN in each
    of its tables): `iptables-nft-save` lists every rule, 2.2 s beside 10,000 services of them. It
    runs only when no backend has a hint, to count the rules; legacy's save reads only the tables
    that exist, each its own blob, and is cheap either way."""
    base = "iptables" if family is IPFamily.IPV4 else "ip6tables"
    if _nft_hint(family, netns):
        return "nft"
    saves = {"legacy": _save_all(f"{base}-legacy-save", netns)}
    if _has_hint(saves["legacy"]):
        return "legacy"
    saves["nft"] = _save_all(f"{base}-nft-save", netns)
    if _has_hint(saves["nft"]):  # the netlink look-up could not be made
        return "nft"
    counts = {b: sum(1 for line in text.splitlines() if line.startswith("-A ")) for b, text in saves.items()}
    return "legacy" if counts["legacy"] > counts["nft"] else "nft"


def _save_all(tool: str, netns: str | None) -> str:
    """Every table `tool` shows. A backend that cannot be read stops the detection: guessing the
    other one would write rules where, on a node using this one, no packet sees them (without
    CAP_NET_RAW, iptables-legacy-save says "Permission denied (you must be root)")."""
    proc = run([tool], netns, check=False)
    if proc.returncode != 0:
        said = proc.stderr.strip().splitlines()
        reason = said[0] if said else f"exit {proc.returncode}"
        raise KernelError(f"--iptables-backend auto: cannot read {tool} ({reason}), so cannot tell which "
                          "iptables backend this node uses (set --iptables-backend, or see docs/daemon.md "
                          "for the capabilities netkit needs)")
    return proc.stdout


def _has_hint(save: str) -> bool:
    return any(f":{hint} " in save for hint in _HINT_CHAINS)


def _nft_hint(family: IPFamily, netns: str | None) -> bool:
    """Whether one of iptables-nft's tables of `family` holds a hint chain; False when that cannot
    be asked (then detect_backend reads the save)."""
    from netkit.nft import lookup
    fam = "ip" if family is IPFamily.IPV4 else "ip6"
    return bool(lookup.chains(netns, fam, [(t, h) for t in BUILTIN_CHAINS for h in _HINT_CHAINS]))


def _stop_point(stop: Callable[[], bool] | None, progress: Callable[[str], None] | None, state: str) -> None:
    if progress is not None and state != "nothing was written":
        progress(state.split(":")[0])
    if stop is not None and stop():
        raise ApplyInterrupted(state)
