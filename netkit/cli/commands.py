"""compile, apply, diff and cleanup: the dataplane subcommands, one pipeline for every backend.

    inputs (manifests + config) → NodeState → backend.compile → desired Ruleset (per IP family)
    diff  = backend.plan(kernel.dump(), desired), shown for people (exit 0 in sync, 1 pending, 2 error)
    apply = the same plan, sent to the kernel (nothing is sent when it is empty)
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Generic

from netkit import nfacct
from netkit.cli.early import EarlyDumps
from netkit.cli.filters import Filter, add_filter_options
from netkit.cli.inputs import Inputs, add_input_options, check_netns, config_from_args, load_inputs
from netkit.cli.output import STRUCTURED, emit
from netkit.cli.progress import Progress
from netkit.config import Config
from netkit.errors import NetkitError
from netkit.model import IPFamily
from netkit.netns import exists
from netkit.rules import cleanup, summary
from netkit.rules.backend import ApplyInterrupted, Backend, Kernel, P, R
from netkit.rules.cleanup import Survey
from netkit.rules.keep import keep_live, kept_ports
from netkit.rules.registry import with_backend
from netkit.rules.summary import ServiceChange, Totals

FAMILIES = {"ipv4": IPFamily.IPV4, "ipv6": IPFamily.IPV6}


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("compile", help="print the ruleset the manifests compile to (no root needed)")
    _common(p)
    add_filter_options(p)
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                   help="text: the kernel tool's input; json/yaml: the ruleset as a document")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("diff", help="dry run: what apply would change, per service and per rule")
    _common(p, kernel=True)
    add_filter_options(p)
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                   help="json/yaml: schema netkit.diff/v1 (docs/cli.md)")
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--summary", action="store_true",
                       help="only the per-Service lines and the totals, not the rules")
    shown.add_argument("--stat", action="store_true",
                       help="only the totals: services to add, change, remove, and objects written")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("apply", help="write the compiled rules into the kernel, changing only what differs")
    _common(p, kernel=True)
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                   help="json/yaml: what was written, schema netkit.apply/v1 (docs/cli.md); progress stays on stderr")
    p.set_defaults(func=cmd_apply)

    p = sub.add_parser("trace", help="where does this packet go? (no root needed)")
    add_input_options(p, manifests_required=False)
    add_filter_options(p)
    p.add_argument("--mode", choices=("iptables", "ipvs", "nftables"), default=None,
                   help="whose rules to trace (default: the config file's mode, else iptables)")
    p.add_argument("--to", required=True, metavar="IP:PORT[/PROTO]|SERVICE.NAMESPACE[:PORT]",
                   help="destination, e.g. 10.96.0.10:80/tcp, or a Service's cluster IP by name: web.default:80 "
                        "(a port number or name; needs -f)")
    p.add_argument("--from", dest="source", metavar="IP",
                   help="source address (default: the node itself, its first node IP; with --netns and no node "
                        "IP known, the namespace's first address that is not loopback)")
    p.add_argument("--in-interface", metavar="IFACE", help="interface the packet arrives on, if it matters")
    p.add_argument("-v", "--verbose", action="store_true", help="show the rules every outcome walks")
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                   help="json/yaml: schema netkit.trace/v1 (docs/cli.md)")
    _kernel_options(p)
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("cleanup", help="remove everything netkit wrote, nothing else")
    p.add_argument("--mode", choices=("iptables", "ipvs", "nftables"), default=None,
                   help="only this mode's objects (default: every mode's, as kube-proxy --cleanup)")
    p.add_argument("--ip-family", choices=tuple(FAMILIES), default=None,
                   help="only this family (default: both)")
    _kernel_options(p)
    _verbose(p)
    p.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                   help="json/yaml: what was removed, schema netkit.cleanup/v1 (docs/cli.md)")
    p.set_defaults(func=cmd_cleanup)


def _verbose(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="store_true",
                   help="progress on stderr, a line per phase with counts and elapsed time, also when stderr "
                        "is not a terminal (on a terminal it is always shown)")


def _common(p: argparse.ArgumentParser, *, kernel: bool = False) -> None:
    add_input_options(p)
    _verbose(p)
    p.add_argument("--mode", choices=("iptables", "ipvs", "nftables"), default=None,
                   help="dataplane backend (default: the config file's mode, else iptables)")
    p.add_argument("--ip-family", choices=tuple(FAMILIES), default=None,
                   help="only this family (default: both)")
    if kernel:
        _kernel_options(p)
    else:  # no kernel options: the commands read them all the same
        p.set_defaults(netns=None, iptables_backend=None)


def _kernel_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--netns", metavar="NAME", help="work inside this named network namespace")
    p.add_argument("--iptables-backend", choices=("auto", "legacy", "nft"), default="auto",
                   help="iptables flavour (default: detect what the node uses)")


def _families(args: argparse.Namespace) -> tuple[IPFamily, ...]:
    return (FAMILIES[args.ip_family],) if args.ip_family else (IPFamily.IPV4, IPFamily.IPV6)


def _setup(args: argparse.Namespace, config: Config | None = None) -> Inputs:
    check_netns(args)
    inputs = load_inputs(args, config)
    if config is None and args.iptables_backend:
        inputs = replace(inputs, config=replace(inputs.config, iptables_backend=args.iptables_backend))
    _check_netns(args)
    return inputs


def _config(args: argparse.Namespace) -> Config:
    """The configuration `_setup` gives, before any manifest is read."""
    check_netns(args)
    config = config_from_args(args)
    return replace(config, iptables_backend=args.iptables_backend) if args.iptables_backend else config


def _read(args: argparse.Namespace, progress: Progress, config: Config | None = None) -> Inputs:
    with progress.phase("read the input") as done:
        inputs = _setup(args, config)
        done(f"{len(inputs.objects.services)} Services, {len(inputs.objects.slices)} EndpointSlices")
    return inputs


def _ports(inputs: Inputs, family: IPFamily) -> int:
    return sum(1 for p in inputs.state.ports if p.family is family)


def _check_netns(args: argparse.Namespace) -> None:
    check_netns(args)
    if args.netns and not exists(args.netns):
        raise NetkitError(f"--netns {args.netns}: no such network namespace (see `ip netns list`)")


def _desired(be: Backend[R, P], inputs: Inputs, family: IPFamily, live: R) -> tuple[R, list[str]]:
    """The compiled ruleset, with the live rules of Services whose input is invalid kept as they
    are (netkit.rules.keep); and those Services' service ports, for the report."""
    return _kept(be, inputs, be.compile(inputs.state, inputs.config, family), live)


def _kept(be: Backend[R, P], inputs: Inputs, desired: R, live: R) -> tuple[R, list[str]]:
    if not inputs.keep:
        return desired, []
    kept = [_display(k) for k in kept_ports(be.summarize(live), inputs.keep)] if live is not None else []
    return keep_live(be, live, desired, inputs.keep), kept


# --- compile -------------------------------------------------------------------------------------


def cmd_compile(args: argparse.Namespace) -> int:
    progress = Progress.for_args(args.verbose)
    with progress.running():
        return _compile(args, progress)


def _compile(args: argparse.Namespace, progress: Progress) -> int:
    inputs = _read(args, progress)
    inputs = replace(inputs, state=Filter.of(args).state(inputs.state, inputs.objects))
    families = _families(args)

    def run(be: Backend[R, P]) -> int:
        rulesets = {}
        for f in families:
            with progress.phase(f"{f.value}: compile") as done:
                rulesets[f] = be.compile(inputs.state, inputs.config, f)
                done(f"{_ports(inputs, f)} service ports")
        if args.output in STRUCTURED:
            emit({"mode": be.name, "families": {f.value: be.to_json(r) for f, r in rulesets.items()}}, args.output)
            return 0
        for f, r in rulesets.items():
            if len(families) > 1:
                sys.stdout.write(f"# {be.name} {f.value}\n")
            sys.stdout.write(be.render(r))
        return 0

    return with_backend(inputs.config.mode, run)


# --- diff ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FamilyDiff(Generic[P]):
    in_sync: bool
    services: list[ServiceChange]
    plan: P
    foreign: list[str]  # what netkit did not write in its own tables, which apply removes
    kept: list[str]  # service ports whose input is invalid: live rules kept as they are


DIFF_SCHEMA = "netkit.diff/v1"  # docs/cli.md "diff -o json"; bump on an incompatible change


def cmd_diff(args: argparse.Namespace) -> int:
    progress = Progress.for_args(args.verbose)
    with progress.running():
        return _diff(args, progress)


def _diff(args: argparse.Namespace, progress: Progress) -> int:
    config = _config(args)
    flt = Filter.of(args)

    def run(be: Backend[R, P]) -> int:
        # The kernel is read while the input is (netkit.cli.early): the dumps and the survey of other
        # modes' leftovers are mostly the tools' work. A missing namespace is reported after the
        # input's own errors (by _setup), as before.
        kernels = {family: be.kernel(config, family, args.netns) for family in _families(args)}
        there = not args.netns or exists(args.netns)
        early = EarlyDumps({family: partial(_read_kernel, be.name, family, kernel, args.netns)
                            for family, kernel in kernels.items()}) if there else None
        counters = EarlyDumps({"nfacct": partial(nfacct.existing, args.netns)}) \
            if there and config.mode == "iptables" else None
        inputs = _with_nfacct(_read(args, progress, config), args, counters.get("nfacct") if counters else None)
        report: dict[str, FamilyDiff[P]] = {}
        surveys: dict[IPFamily, list[Survey]] = {}

        def dumped(family: IPFamily, compiled: R) -> R:
            assert early is not None
            live, surveys[family] = early.get(family)(compiled)
            return live

        for family, kernel in kernels.items():
            live, desired, kept, p = _read_and_plan(be, inputs, family, kernel, progress,
                                                    dumped if early is not None else None)
            # An empty plan means in sync, whatever the summaries say.
            with progress.phase(f"{family.value}: summarise") as done:
                changes = [] if p.empty else plan_summary(be, live, desired, summary.addresses(inputs.state, family))
                if flt.active:
                    keep = flt.keys({(c.service.namespace, c.service.name) for c in changes}, inputs.objects)
                    changes = [c for c in changes if (c.service.namespace, c.service.name) in keep]
                done(Totals.of(changes).line())
            found = surveys.get(family)
            if found is None:
                found = _leftovers(be.name, kernel.writes, family, args.netns, live)
            stale = leftover_lines(be.name, found)
            in_sync = (not changes) if flt.active else p.empty and not stale
            report[family.value] = FamilyDiff(in_sync, changes, p, be.foreign(live, desired) + stale, kept)
        pending = any(not r.in_sync or r.services for r in report.values())
        # A filter shows the selected Services' lines only: the rules are shared (entry chains, maps).
        only_summary = args.summary or flt.active
        if args.output in STRUCTURED:
            emit(diff_json(be, report, args.stat, only_summary), args.output)
        else:
            _print_diff(be, report, args.stat, only_summary)
        return 1 if pending else 0

    return with_backend(config.mode, run)


def _read_kernel(mode: str, family: IPFamily, kernel: Kernel[R, P],
                 netns: str | None) -> Callable[[R], tuple[R, list[Survey]]]:
    """What `diff` reads of the kernel, started before the input is read: a function that, given
    the compiled ruleset, returns the live rules and what other modes left (read-only).

    With iptables-legacy, the tables' text is read now and compared with what the compiled ruleset
    would print once it exists (Kernel.prefetch, dump_reusing): a kernel in sync is then
    not parsed, and the live ruleset shares the compiled one's rules. Otherwise the dump is read
    (and parsed) now."""
    if kernel.prefetch() and (flavour := cleanup.iptables_backend(kernel.writes)) is not None:
        complete = cleanup.leftovers_then(mode, family, netns, flavour)

        def finish(compiled: R) -> tuple[R, list[Survey]]:
            live = kernel.dump_reusing(compiled)
            return live, complete(live)

        return finish
    live = kernel.dump()
    surveys = _leftovers(mode, kernel.writes, family, netns, live)
    return lambda compiled: (live, surveys)


def plan_summary(be: Backend[R, P], live: R, desired: R, names: Mapping[str, str] | None = None) -> list[ServiceChange]:
    """Per service port, what changes between the live and the desired ruleset (netkit.rules.summary);
    `names`: the model's addresses of each service port (summary.addresses)."""
    names = names or {}
    before = summary.name_live(summary.facts(be.objects(live, names), be.summarize(live)), be.live_names(desired))
    return summary.service_changes(before, summary.facts(be.objects(desired, names), be.summarize(desired)))


def diff_json(be: Backend[R, P], report: Mapping[str, FamilyDiff[P]], stat: bool = False,
              only_summary: bool = False) -> dict[str, Any]:
    """`netkit diff -o json`, schema netkit.diff/v1 (docs/cli.md)."""
    families: dict[str, Any] = {}
    for f, r in report.items():
        stats = r.plan.stats()
        doc: dict[str, Any] = {"in_sync": r.in_sync, "totals": Totals.of(r.services).to_json(),
                               "objects": {"written": stats.written, "deleted": stats.deleted, "text": stats.text}}
        if not stat:
            doc["services"] = [c.to_json() for c in r.services]
            doc["foreign"] = r.foreign
            doc["kept_invalid_input"] = [summary.ServicePortKey.parse(k).to_json() for k in r.kept]
        if not stat and not only_summary:
            doc["payload"] = be.render_plan(r.plan)
        families[f] = doc
    total = sum((Totals.of(r.services) for r in report.values()), Totals())
    return {"schema": DIFF_SCHEMA, "mode": be.name,
            "in_sync": not any(not r.in_sync or r.services for r in report.values()),
            "totals": total.to_json(), "families": families}


def _display(key: str) -> str:
    return summary.ServicePortKey.parse(key).display()


def _print_diff(be: Backend[R, P], report: Mapping[str, FamilyDiff[P]], stat: bool = False,
                only_summary: bool = False) -> None:
    out = sys.stdout
    for family, r in report.items():
        kept = "".join(f"  = {_display(k)} kept, invalid input\n" for k in r.kept)
        if r.in_sync and not r.services and not r.foreign:
            out.write(f"{family}: in sync\n" + ("" if stat else kept))
            continue
        if stat:
            out.write(f"{family}: {Totals.of(r.services).line()} ({r.plan.stats()})\n")
            continue
        out.write(f"{family}:\n{kept}")
        for c in r.services:
            out.write("  " + c.line() + "\n")
        for line in r.foreign:
            out.write(f"  ! {line}\n")
        if not only_summary:
            for line in be.describe_plan(r.plan).splitlines():
                out.write(f"  {line}\n")
        out.write(f"  {Totals.of(r.services).line()} ({r.plan.stats()})\n")
    total = sum((Totals.of(r.services) for r in report.values()), Totals())
    if len(report) > 1 and any(r.services for r in report.values()):
        out.write(f"Plan: {total.line()}\n")


# --- apply / cleanup -----------------------------------------------------------------------------


LONG_APPLY = 1000  # objects: an apply writing more says so before it starts


def cmd_apply(args: argparse.Namespace) -> int:
    """Per family: plan against the live rules, write the plan, then remove what other modes left
    (two dataplanes must not both see traffic). Everything is read first: a foreign rule referring
    to another mode's chains stops the apply before anything changes. SIGINT (Ctrl-C) is honoured
    at the next safe point — between table commits, batches or families — never inside one: exit
    130 with one line saying what the node holds."""
    progress = Progress.for_args(args.verbose)
    with progress.running():
        inputs = _with_nfacct(_read(args, progress), args)
    with deferred_sigint() as interrupted:
        return with_backend(inputs.config.mode, lambda be: _apply(be, inputs, args, interrupted, progress))



def _with_nfacct(inputs: Inputs, args: argparse.Namespace, found: tuple[str, ...] | None = None) -> Inputs:
    """iptables mode against a kernel: count into the nfacct counters that exist in the namespace
    (`netkit run` and kube-proxy create them), so their rules compare equal; none are created here.
    `found`: those counters, when already read (diff reads them beside the input)."""
    if inputs.config.mode != "iptables":
        return inputs
    counters = found if found is not None else nfacct.existing(args.netns)
    return replace(inputs, config=replace(inputs.config, nfacct_counters=counters)) if counters else inputs


def _read_and_plan(be: Backend[R, P], inputs: Inputs, family: IPFamily, kernel: Kernel[R, P],
                   progress: Progress, dumped: Callable[[IPFamily, R], R] | None = None) -> tuple[R, R, list[str], P]:
    """Dump the live rules, compile (keeping what invalid input protects) and plan, one phase each.
    With `dumped` (the dump being read meanwhile, netkit.cli.early), compile first, then take it
    (given the compiled ruleset, which it may compare the dump with)."""
    if dumped is not None:
        with progress.phase(f"{family.value}: compile") as done:
            compiled = be.compile(inputs.state, inputs.config, family)
            done(f"{_ports(inputs, family)} service ports")
        with progress.phase(f"{family.value}: read the live rules"):
            live = dumped(family, compiled)
            desired, kept = _kept(be, inputs, compiled, live)
    else:
        with progress.phase(f"{family.value}: read the live rules"):
            live = kernel.dump()
        with progress.phase(f"{family.value}: compile") as done:
            desired, kept = _desired(be, inputs, family, live)
            done(f"{_ports(inputs, family)} service ports")
    with progress.phase(f"{family.value}: plan") as done:
        p = be.plan(live, desired)
        done(str(p.stats()))
    return live, desired, kept, p


def _apply(be: Backend[R, P], inputs: Inputs, args: argparse.Namespace, interrupted: threading.Event,
           progress: Progress) -> int:
    work = []
    done: dict[str, dict[str, Any]] = {}  # -o json/yaml: per family, what was written
    for family in _families(args):
        kernel = be.kernel(inputs.config, family, args.netns)
        live, desired, kept, p = _read_and_plan(be, inputs, family, kernel, progress)
        stats = p.stats()
        done[family.value] = {"changed": not p.empty, "objects": {"written": stats.written, "deleted": stats.deleted,
                                                                   "text": stats.text},
                              "kept_invalid_input": [summary.ServicePortKey.parse(k).to_json() for k in kept],
                              "removed_other_modes": []}
        for k in kept:
            print(f"netkit: {family.value}: {k}: kept, invalid input (its live rules stay as they are)",
                  file=sys.stderr)
        others = _leftovers(be.name, kernel.writes, family, args.netns, live)
        work.append((family, kernel, p, others))
    cleanup.refuse_if_blocked([s for *_, surveys in work for s in surveys])
    if interrupted.is_set():
        return _interrupted("nothing was written, the node is unchanged")
    for n, (family, kernel, p, surveys) in enumerate(work):
        rest = "".join(f"; {f.value}: not started" for f, *_ in work[n + 1:])
        if p.empty:
            print(f"netkit: {family.value}: already in sync", file=sys.stderr)
        else:
            if p.stats().written >= LONG_APPLY:
                print(f"netkit: {family.value}: writing ({p.stats()}) …", file=sys.stderr, flush=True)
            try:
                kernel.apply(p, stop=interrupted.is_set, progress=partial(_say, progress, family))
            except ApplyInterrupted as exc:
                return _interrupted(f"{family.value}: {exc.state}{rest}")
            print(f"netkit: {family.value}: applied ({p.stats()})", file=sys.stderr)
        stale = any(not s.empty for s in surveys)
        if interrupted.is_set() and (stale or rest):
            left = ", other modes' rules not yet removed" if stale else ""
            return _interrupted(f"{family.value}: applied{left}{rest}")
        if stale:
            with progress.phase(f"{family.value}: remove other modes' leftovers"):
                cleanup.execute(surveys)
            done[family.value]["removed_other_modes"] = [d for s in surveys for d in s.describe()]
            removed = "; ".join(d for s in surveys for d in s.describe())
            print(f"netkit: {family.value}: removed what other modes left: {removed}", file=sys.stderr)
    if args.output in STRUCTURED:
        emit({"schema": "netkit.apply/v1", "mode": be.name, "families": done}, args.output)
    if interrupted.is_set():
        print("netkit: interrupted after everything was written: nothing is left to do", file=sys.stderr)
        return 130
    return 0


def _say(progress: Progress, family: IPFamily, state: str) -> None:
    progress.say(f"{family.value}: {state}")


def _interrupted(state: str) -> int:
    print(f"netkit: interrupted: {state}. Run the same `netkit apply` again to finish.", file=sys.stderr)
    return 130


@contextlib.contextmanager
def deferred_sigint() -> Iterator[threading.Event]:
    """SIGINT sets the event instead of raising KeyboardInterrupt, so the work in progress can reach
    a safe point (only the main thread can take signals; elsewhere the event is never set)."""
    event = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield event
        return
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: event.set())
    try:
        yield event
    finally:
        signal.signal(signal.SIGINT, previous)


def _leftovers(mode: str, writes: frozenset[str], family: IPFamily, netns: str | None, live: object) -> list[Survey]:
    """What modes other than `mode` left in the kernel (netkit.rules.cleanup.leftovers); `writes`:
    what the mode's kernel edge writes (Kernel.writes); `live`: that edge's dump."""
    return cleanup.leftovers(mode, family, netns, writes=writes, known=live)


def leftover_lines(mode: str, surveys: list[Survey]) -> list[str]:
    """`diff`'s lines for other modes' leftovers and what blocks their removal."""
    out = [f"another mode's {d}: apply removes it once the {mode} rules are in place"
           for s in surveys for d in s.describe()]
    out += [f"{b}: refers to another mode's chains, so apply refuses until it is gone"
            for s in surveys for b in s.blockers]
    return out


def cmd_cleanup(args: argparse.Namespace) -> int:
    """Every mode's objects (or `--mode`'s), all or nothing: see netkit.rules.cleanup."""
    _check_netns(args)
    modes = (args.mode,) if args.mode else cleanup.MODES
    backends = cleanup.IPTABLES_BACKENDS if args.iptables_backend == "auto" else (args.iptables_backend,)
    progress = Progress.for_args(args.verbose)
    with progress.running():
        surveys = []
        for f in _families(args):
            with progress.phase(f"{f.value}: survey") as done:
                surveys.append(cleanup.survey(modes, f, args.netns, iptables_backends=backends))
                done("; ".join(surveys[-1].describe()) or "nothing of netkit's")
        with progress.phase("remove"):
            cleanup.execute(surveys)
    if args.output in STRUCTURED:
        emit({"schema": "netkit.cleanup/v1",
              "families": {s.family.value: {"removed": list(s.describe())} for s in surveys}}, args.output)
    for s in surveys:
        what = "; ".join(s.describe()) or "nothing of netkit's was there"
        print(f"netkit: {s.family.value}: removed {what}" if not s.empty else f"netkit: {s.family.value}: {what}",
              file=sys.stderr)
    return 0


# --- trace ---------------------------------------------------------------------------------------


def cmd_trace(args: argparse.Namespace) -> int:
    from netkit.cli.tracing import run_trace
    return run_trace(args)
