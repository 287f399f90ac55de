"""A Corefile, read as CoreDNS's parser (coredns/caddy's caddyfile) reads it: tokens, server blocks,
directives with their `{}` blocks, snippets, `import` and environment variables. Pure but for the
files an `import` names (read through `read`, so tests can pass a dict).

Tokens are separated by white space; `"…"` quotes one (a backslash escapes a quote only; a quoted
token may span lines); `#` starts a comment to the end of the line, anywhere in a word.
`{$NAME}` and `{%NAME%}` in a token are replaced by the environment variable (empty when unset).

A file is a sequence of server blocks: keys (`.:53`, `example.org:1053`, several separated by
spaces or commas, continued on the next line after a trailing comma) and then a body in braces, or
without braces the rest of the file when it has a single block. A block whose only key is `(name)`
is a snippet, replayed by `import name`. `import PATTERN` at the start of a line anywhere (between
blocks, in a body, in a directive's block) is replaced by the snippet of that name or by the tokens
of the files the glob matches, relative to the importing file (at most one `*`; a pattern without a
wildcard must match a file). A directive is a line of tokens; when the line ends with `{`, the lines
up to the matching `}` are its block, each one an option with its arguments.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

MAX_EXPANSIONS = 1000  # as coredns/caddy: snippet and file imports per parse


@dataclass(frozen=True, slots=True)
class Token:
    text: str
    file: str
    line: int
    col: int
    end_line: int  # a quoted token may span lines
    starts_line: bool = False  # the first token of an import, and the one after it

    def where(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class CorefileError(ValueError):
    """One line: `FILE:LINE:COL: reason`."""

    def __init__(self, token: Token | None, reason: str, file: str = "") -> None:
        super().__init__(f"{token.where()}: {reason}" if token is not None else f"{file}: {reason}")


@dataclass(frozen=True, slots=True)
class Directive:
    """A line: its first token names the plugin (or the option, inside a block), the rest are its
    arguments; `block` holds the lines of a `{}` block that ends the line."""

    name: Token
    args: tuple[Token, ...] = ()
    block: tuple[Directive, ...] = ()
    has_block: bool = False


@dataclass(frozen=True, slots=True)
class ServerBlock:
    keys: tuple[Token, ...]
    directives: tuple[Directive, ...]


def lex(text: str, file: str) -> list[Token]:
    tokens: list[Token] = []
    line, col, i, n = 1, 1, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line, col, i = line + 1, 1, i + 1
            continue
        if ch.isspace():
            i, col = i + 1, col + (0 if ch == "\r" else 1)
            continue
        if ch == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        start_line, start_col = line, col
        if ch == '"':
            i, col, value, line = _quoted(text, i + 1, col + 1, line, file, start_col)
            tokens.append(Token(value, file, start_line, start_col, line))
            continue
        begin = i
        while i < n and not text[i].isspace() and text[i] != "#":
            i += 1
        col += i - begin
        tokens.append(Token(text[begin:i], file, start_line, start_col, start_line))
    return tokens


def _quoted(text: str, i: int, col: int, line: int, file: str, start_col: int) -> tuple[int, int, str, int]:
    out: list[str] = []
    start_line = line
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] == '"':
            out.append('"')
            i, col = i + 2, col + 2
            continue
        if ch == '"':
            return i + 1, col + 1, "".join(out), line
        if ch == "\n":
            line, col = line + 1, 0
        out.append(ch)
        i, col = i + 1, col + 1
    raise CorefileError(Token('"', file, start_line, start_col, start_line), "unterminated quoted string")


def expand_env(text: str, env: Mapping[str, str]) -> str:
    """caddyfile's replaceEnvVars: `{%NAME%}` then `{$NAME}`, each replaced everywhere it occurs."""
    for start, end in (("{%", "%}"), ("{$", "}")):
        index = text.find(start)
        while index != -1:
            stop = text.find(end, index)
            if stop == -1 or stop <= index + len(start):
                break
            ref = text[index:stop + len(end)]
            text = text.replace(ref, env.get(ref[len(start):-len(end)], ""))
            index = text.find(start)
    return text


def read_file(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


class _Parser:
    def __init__(self, tokens: list[Token], env: Mapping[str, str], read: Callable[[str], str]) -> None:
        self.tokens = tokens
        self.i = 0
        self.env, self.read = env, read
        self.snippets: dict[str, list[Token]] = {}
        self.expansions = 0

    # --- the token stream, with imports spliced in ------------------------------------------------

    def _new_line(self, i: int) -> bool:
        if i == 0:
            return True
        prev, tok = self.tokens[i - 1], self.tokens[i]
        return tok.starts_line or prev.file != tok.file or prev.end_line < tok.line

    def peek(self) -> Token | None:
        """The next token (with its environment variables replaced), after splicing in imports."""
        while self.i < len(self.tokens):
            tok = self.tokens[self.i]
            if tok.text == "import" and self._new_line(self.i):
                self._import(tok)
                continue
            return replace(tok, text=expand_env(tok.text, self.env))
        return None

    def take(self) -> Token:
        tok = self.peek()
        assert tok is not None
        self.i += 1
        return tok

    def new_line(self) -> bool:
        return self._new_line(self.i)

    def _import(self, tok: Token) -> None:
        args = []
        j = self.i + 1
        while j < len(self.tokens) and not self._new_line(j):
            args.append(self.tokens[j])
            j += 1
        if len(args) != 1:
            raise CorefileError(tok, "import: expected one argument (a snippet, a file or a glob pattern)")
        pattern = expand_env(args[0].text, self.env)
        self.expansions += 1
        if self.expansions > MAX_EXPANSIONS:
            raise CorefileError(tok, f"import: more than {MAX_EXPANSIONS} imports (an import cycle?)")
        spliced = self.snippets[pattern] if pattern in self.snippets else self._import_files(args[0], pattern)
        after = [replace(t, starts_line=True) for t in self.tokens[j:j + 1]]
        self.tokens[self.i:j + len(after)] = [replace(t, starts_line=True) for t in spliced[:1]] + spliced[1:] + after

    def _import_files(self, tok: Token, pattern: str) -> list[Token]:
        path = pattern if os.path.isabs(pattern) else os.path.join(os.path.dirname(tok.file), pattern)
        if path.count("*") > 1 or path.count("?") > 1 or ("[" in path and "]" in path):
            raise CorefileError(tok, f"import: a glob pattern may contain one wildcard (*) only: {pattern}")
        matches = sorted(glob.glob(path))
        if not matches and not any(c in path for c in "*?[]"):
            raise CorefileError(tok, f"import: file to import not found: {pattern}")
        out: list[Token] = []
        for match in matches:
            if os.path.isdir(match):
                raise CorefileError(tok, f"import: {match} is a directory")
            try:
                out += lex(self.read(match), match)
            except OSError as exc:
                raise CorefileError(tok, f"import: cannot read {match}: {exc.strerror or exc}") from None
        return out

    # --- blocks ----------------------------------------------------------------------------------

    def blocks(self) -> list[ServerBlock]:
        out: list[ServerBlock] = []
        while self.peek() is not None:
            keys = self._keys()
            nxt = self.peek()
            if len(keys) == 1 and keys[0].text.startswith("(") and keys[0].text.endswith(")"):
                self._snippet(keys[0])
                continue
            if nxt is not None and nxt.text == "{":
                opening = self.take()
                body = self._lines(opening)
            else:
                if out:
                    raise CorefileError(nxt or keys[-1], "expected '{' after the server block's keys")
                body = self._lines(None)
            out.append(ServerBlock(tuple(keys), tuple(body)))
        return out

    def _keys(self) -> list[Token]:
        keys: list[Token] = []
        more = False
        while True:
            tok = self.peek()
            if tok is None:
                if more:
                    raise CorefileError(keys[-1], "expected another key after the comma")
                return keys
            if tok.text == "{":
                if more or not keys:
                    raise CorefileError(tok, "expected a server block key before '{'")
                return keys
            if keys and not more and self.new_line():
                return keys
            self.i += 1
            text = tok.text
            more = text.endswith(",")
            text = text.removesuffix(",")
            if text:
                keys.append(replace(tok, text=text))

    def _snippet(self, key: Token) -> None:
        opening = self.peek()
        if opening is None or opening.text != "{":
            raise CorefileError(opening or key, "a snippet needs a '{' block")
        name = key.text[1:-1]
        if name in self.snippets:
            raise CorefileError(key, f"redeclaration of previously declared snippet {name}")
        self.i += 1
        depth, start = 1, self.i
        while self.i < len(self.tokens):  # raw tokens: imports in a snippet expand where it is used
            text = self.tokens[self.i].text
            depth += (text == "{") - (text == "}")
            if depth == 0:
                self.snippets[name] = self.tokens[start:self.i]
                self.i += 1
                return
            self.i += 1
        raise CorefileError(opening, "this '{' is never closed")

    def _lines(self, opening: Token | None) -> list[Directive]:
        """Directive lines up to the `}` that closes `opening` (None: to the end of the file)."""
        out: list[Directive] = []
        while True:
            tok = self.peek()
            if tok is None:
                if opening is not None:
                    raise CorefileError(opening, "this '{' is never closed")
                return out
            if tok.text == "}":
                if opening is None:
                    raise CorefileError(tok, "unexpected '}' because no matching opening brace")
                self.i += 1
                return out
            if tok.text == "{":
                raise CorefileError(tok, "unexpected '{'")
            out.append(self._directive())

    def _directive(self) -> Directive:
        name = self.take()
        args: list[Token] = []
        while (tok := self.peek()) is not None and not self.new_line():
            if tok.text == "}":
                break
            self.i += 1
            if tok.text == "{":
                block = self._lines(tok)
                after = self.peek()
                if after is not None and not self.new_line() and after.text != "}":
                    raise CorefileError(after, "expected a new line after '}'")
                return Directive(name, tuple(args), tuple(block), True)
            args.append(tok)
        return Directive(name, tuple(args))


def parse(text: str, file: str, env: Mapping[str, str] | None = None,
          read: Callable[[str], str] = read_file) -> list[ServerBlock]:
    """The server blocks of a Corefile; a CorefileError names the file, line and column of the fault."""
    return _Parser(lex(text, file), os.environ if env is None else env, read).blocks()
