"""The one typed reader of an iptables rule: `read(text) → Rule`, for everything that looks inside rules.

A Ruleset keeps each rule as its canonical text (ruleset.py): the planner compares those strings and
never needs more. Whatever asks what a rule *does* — the summaries (summary.py, netkit.rules.summary),
the tracer (trace.py), keeping invalid Services' rules (keep.py), the kernel's jump insertion and
cleanup (kernel.py, netkit.rules.cleanup) — reads it here, once per distinct text (cached), so every
reader sees the same options the same way:

    -d 10.96.0.10/32 -p tcp -m comment --comment "ns/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-…
    └ generic ─────────────┘ └ modules: ("comment", …), ("tcp", …) ───────────────────┘ └ target ───┘

Words are split as the shell does (`"…"` quoting, as iptables-save prints comments); a text without
quotes or backslashes is split on whitespace only. Pure: no IO.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import lru_cache

from netkit.errors import ParseError as ParseError  # re-exported: one class for every reader

Option = tuple[bool, str, str]  # (negated, option, value; "" when the option takes none)
GENERIC = ("-s", "-d", "-p", "-i", "-o")
_WORD = re.compile(r'(?:[^\s"]+|"[^"]*")+')
_OWNER = re.compile(r"([a-z0-9-]+)/([a-z0-9-]+)(?:[:\s]|$)")


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule as iptables reads it: generic matches, `-m` modules with their options, the target."""

    text: str
    words: tuple[str, ...]  # the argv iptables gets for it (`iptables -C CHAIN *words`)
    generic: tuple[Option, ...]  # -s/-d/-p/-i/-o, in the order written
    modules: tuple[tuple[str, tuple[Option, ...]], ...]  # ("tcp", ((False, "--dport", "80"),)), …
    target: str | None  # after -j or -g; None: no target
    goto: bool  # -g (return to the caller's caller) rather than -j
    target_options: tuple[tuple[str, str], ...]  # ("--to-destination", "10.0.0.1:80"), …

    @property
    def protocol(self) -> str | None:
        """`-p`'s value (not negated), else None."""
        return next((v for neg, o, v in self.generic if o == "-p" and not neg), None)

    @property
    def comment(self) -> str | None:
        """The first `-m comment --comment` text, unquoted."""
        for name, opts in self.modules:
            if name == "comment":
                return next((v for _, o, v in opts if o == "--comment"), None)
        return None

    @property
    def first_module(self) -> str | None:
        return self.modules[0][0] if self.modules else None

    def target_option(self, option: str) -> str | None:
        return next((v for o, v in self.target_options if o == option), None)

    @property
    def dnat(self) -> str | None:
        """`-j DNAT --to-destination`'s IP:port."""
        return self.target_option("--to-destination") if self.target == "DNAT" else None

    @property
    def owner(self) -> tuple[str, str] | None:
        """(namespace, service) a rule's comment starts with (`"ns/svc:port cluster IP"`), else None."""
        m = _OWNER.match(self.comment or "")
        return (m.group(1), m.group(2)) if m else None

    @property
    def match_sets(self) -> tuple[str, ...]:
        """The ipsets named by `-m set --match-set NAME …`."""
        return tuple(v for name, opts in self.modules if name == "set" for _, o, v in opts if o == "--match-set")


def read(text: str) -> Rule:
    """The Rule of one rule text (ParseError for unbalanced quotes); cached per distinct text."""
    return _read(text)


def target_of(text: str) -> str | None:
    """The target (`-j`/`-g`) of a rule text."""
    return _read(text).target


def words(text: str) -> list[str]:
    """The words of a rule as the shell splits them."""
    if '"' not in text and "'" not in text and "\\" not in text:
        return text.split()
    if "'" not in text and "\\" not in text and text.count('"') % 2 == 0:
        return [w.replace('"', "") for w in _WORD.findall(text)]
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise ParseError(f"cannot read rule {text!r}: {exc}") from exc


@lru_cache(maxsize=1 << 16)
def _read(text: str) -> Rule:
    tokens = words(text)
    generic: list[Option] = []
    modules: list[tuple[str, list[Option]]] = []
    target, goto = None, False
    target_options: list[tuple[str, str]] = []
    i, neg, count = 0, False, len(tokens)
    while i < count:
        tok = tokens[i]
        nxt = tokens[i + 1] if i + 1 < count else ""
        if tok == "!":
            neg = True
            i += 1
            continue
        if tok in GENERIC:
            generic.append((neg, tok, nxt))
            i += 2
        elif tok == "-m":
            modules.append((nxt, []))
            i += 2
        elif tok in ("-j", "-g"):
            target, goto = nxt, tok == "-g"
            i += 2
        elif target is not None:
            value = nxt if not nxt.startswith("--") else ""
            target_options.append((tok, value))
            i += 2 if value else 1
        else:
            value = nxt if not nxt.startswith(("--", "!")) and nxt != "-j" else ""
            if modules:
                modules[-1][1].append((neg, tok, value))
            i += 2 if value else 1
        neg = False
    return Rule(text, tuple(tokens), tuple(generic), tuple((m, tuple(o)) for m, o in modules), target, goto,
                tuple(target_options))
