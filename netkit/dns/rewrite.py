"""CoreDNS's `rewrite` plugin for the question name (`rewrite [continue|stop] name …`), pure.

A rule matches the question name (lower-case, with its final dot) `exact`ly (the default), by
`prefix`, `suffix`, `substring` or `regex` (Python's `re`, searched as Go's FindStringSubmatch; `{N}`
in the replacement is group N, `{0}` the whole match). As CoreDNS's newNameRule, every FROM and TO but
a regex's FROM is lower-cased and given a final dot (so `prefix foo` matches `foo.`).

Rules apply in order: a rule that matches rewrites the name, then `stop` (the default) ends the list
and `continue` hands the new name to the next rule. The server answers the rewritten question and
the client sees the question it asked; the records of the reply (answer, authority, additional) are
rewritten back with each matching rule's response rules, taken last rule first so a chain of
`continue` rules unwinds:

- `exact` always maps the rewritten name (and names below it) back to the asked one, owner names and
  the names in record data (CNAME, PTR, SRV, NS) alike;
- `answer auto` does the same for `prefix`, `substring` and `regex`; for `suffix` it swaps the
  suffixes back (replacement → original suffix);
- `answer name FROM TO` rewrites owner names matching the regex FROM to TO (`{N}` groups), and
  `answer value FROM TO` the names in record data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from netkit.dns.names import Name, name_from_text, name_to_text
from netkit.dns.resolver import Record, Reply, Srv

MATCHES = ("exact", "prefix", "suffix", "substring", "regex")
_GROUP = re.compile(r"\{(\d+)\}")


class RewriteError(ValueError):
    pass


def normalize(text: str) -> str:
    """CoreDNS's plugin.Name(…).Normalize(): lower case, a final dot."""
    text = text.lower()
    return text if text.endswith(".") else text + "."


def expand(template: str, match: re.Match[str]) -> str:
    """`{N}` → group N (empty when it did not take part), as the rewrite plugin's regex rules."""
    groups = (match.group(0), *match.groups(default=""))
    out = template
    for i, value in enumerate(groups):
        out = out.replace("{" + str(i) + "}", value)
    return out


def compile_pattern(source: str, target: str) -> re.Pattern[str]:
    """CoreDNS's isValidRegexPattern: the pattern compiles and has the groups `target` uses."""
    try:
        pattern = re.compile(source)
    except re.error:
        raise RewriteError(f"invalid regex matching pattern: {source}") from None
    used = {int(n) for n in _GROUP.findall(target) if int(n) <= 100}
    if len(used) > pattern.groups:
        raise RewriteError(f"the rewrite regex pattern ({target}) uses more subexpressions than its "
                           f"corresponding matching regex pattern ({source})")
    return pattern


@dataclass(frozen=True, slots=True)
class Mapping:
    """One response rule: `remap` (a name and the names below it), `suffix`, or `regex`."""

    how: str
    source: str
    target: str
    owner: bool = True  # applies to owner names
    value: bool = True  # applies to names in record data

    def __call__(self, text: str) -> str:
        if self.how == "remap":
            if text == self.source:
                return self.target
            return text[:-len(self.source)] + self.target if text.endswith("." + self.source) else text
        if self.how == "suffix":
            return text.removesuffix(self.source) + self.target if text.endswith(self.source) else text
        found = re.search(self.source, text)
        return expand(self.target, found) if found else text


@dataclass(frozen=True, slots=True)
class NameRule:
    match: str
    source: str
    target: str
    stop: bool = True
    auto: bool = False
    answers: tuple[Mapping, ...] = ()  # `answer name` / `answer value`

    def rewrite(self, name: str) -> str | None:
        """The rewritten name, or None when the rule does not match."""
        if self.match == "exact":
            return self.target if name == self.source else None
        if self.match == "prefix":
            return self.target + name.removeprefix(self.source) if name.startswith(self.source) else None
        if self.match == "suffix":
            return name.removesuffix(self.source) + self.target if name.endswith(self.source) else None
        if self.match == "substring":
            return name.replace(self.source, self.target) if self.source in name else None
        found = re.search(self.source, name)
        return expand(self.target, found) if found else None

    def reverts(self, asked: str, rewritten: str) -> tuple[Mapping, ...]:
        if self.match == "suffix" and self.auto:
            auto: tuple[Mapping, ...] = (Mapping("suffix", self.target, self.source),)
        elif self.match == "exact" or self.auto:
            auto = (Mapping("remap", rewritten, asked),)
        else:
            auto = ()
        return auto + self.answers


def name_rule(args: list[str], stop: bool = True) -> NameRule:
    """`name [MATCH] FROM TO [answer auto | answer name FROM TO | answer value FROM TO]…` (after `name`)."""
    if len(args) < 2:
        raise RewriteError("too few arguments for a name rule")
    if len(args) == 2:
        match, source, target = "exact", normalize(args[0]), normalize(args[1])
    else:
        match = args[0].lower()
        if match not in MATCHES:
            raise RewriteError(f"name rule supports only exact, prefix, suffix, substring, and regex name "
                               f"matching, received: {args[0]}")
        source = args[1] if match == "regex" else normalize(args[1])
        target = normalize(args[2])
    if match == "regex":
        compile_pattern(source, target)
    auto, answers = _answer_rules(match, args[3:])
    return NameRule(match, source, target, stop, auto, answers)


def _answer_rules(match: str, args: list[str]) -> tuple[bool, tuple[Mapping, ...]]:
    """`answer auto`, `answer name FROM TO`, `answer value FROM TO`, as CoreDNS's parseAnswerRules."""
    if not args:
        return False, ()
    if len(args) < 2:
        raise RewriteError(f"invalid arguments for {match} rule")
    auto, out, i = False, [], 0
    while i < len(args):
        if args[i] != "answer":
            raise RewriteError(f"exceeded the number of arguments for a non-answer rule argument for {match} rule")
        if i + 1 >= len(args):
            raise RewriteError(f"type missing for answer rule for {match} rule")
        kind, i = args[i + 1], i + 2
        if kind == "auto":
            auto = True
            continue
        if kind not in ("name", "value"):
            raise RewriteError(f"invalid type {kind!r} for answer rule for {match} rule")
        if len(args) - i < 2:
            raise RewriteError(f"{kind} answer rule for {match} rule: 2 arguments required")
        try:
            compile_pattern(args[i], args[i + 1])
        except RewriteError as exc:
            raise RewriteError(f"{kind} answer rule for {match} rule: {exc}") from None
        out.append(Mapping("regex", args[i], normalize(args[i + 1]), owner=kind == "name", value=kind == "value"))
        i += 2
    if auto and any(m.owner for m in out):
        raise RewriteError("auto name answer rule cannot be combined with explicit name anwer rules")
    return auto, tuple(out)


@dataclass(frozen=True, slots=True)
class Rewritten:
    name: Name
    reverts: tuple[Mapping, ...]  # applied in order to the answer


def apply(rules: tuple[NameRule, ...], name: Name) -> Rewritten | None:
    """The question as the rules rewrite it (None: no rule matched); RewriteError when the result is
    not a domain name (CoreDNS answers SERVFAIL)."""
    text, matched = name_to_text(name), False
    reverts: list[Mapping] = []
    for rule in rules:
        new = rule.rewrite(text)
        if new is None:
            continue
        _check(new)
        reverts[:0] = rule.reverts(text, new)  # last rule first
        text, matched = new, True
        if rule.stop:
            break
    return Rewritten(name_from_text(text), tuple(reverts)) if matched else None


def _check(text: str) -> None:
    labels = text.removesuffix(".").split(".") if text != "." else []
    if len(text) > 254 or any(not 0 < len(x) < 64 for x in labels):
        raise RewriteError(f"invalid name after rewrite: {text}")


def revert_text(reverts: tuple[Mapping, ...], text: str, owner: bool) -> str:
    for m in reverts:
        if (m.owner if owner else m.value):
            text = m(text)
    return text


def revert_name(reverts: tuple[Mapping, ...], name: Name, owner: bool) -> Name:
    return name_from_text(revert_text(reverts, name_to_text(name), owner))


def revert(reply: Reply, reverts: tuple[Mapping, ...]) -> Reply:
    """The reply with its records rewritten back (answer, authority and additional, as CoreDNS's
    ResponseReverter)."""
    if not reverts:
        return reply
    return replace(reply, answer=tuple(_revert_record(r, reverts) for r in reply.answer),
                   authority=tuple(_revert_record(r, reverts) for r in reply.authority),
                   additional=tuple(_revert_record(r, reverts) for r in reply.additional))


def _revert_record(rec: Record, reverts: tuple[Mapping, ...]) -> Record:
    data = rec.data
    if isinstance(data, tuple):
        data = revert_name(reverts, data, owner=False)
    elif isinstance(data, Srv):
        data = replace(data, target=revert_name(reverts, data.target, owner=False))
    return replace(rec, name=revert_name(reverts, rec.name, owner=True), data=data)

