"""The tokens of SQL expression texts, and the syntax errors that point into them.  Pure.

One lexer serves every expression, so a quoted identifier, a string literal or a number means
the same in a partition predicate, a CHECK constraint and a generation expression.  Arithmetic
operators are tokens even where a grammar refuses them.  SQL comments are refused: Spark reads
the rest of the line (``--``) or up to ``*/`` as one, and reading them as operators instead
(``x --5`` as ``x - -5``) would compute another value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from deltacommit.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True)
class Token:
    """``kind`` is word, ident (quoted), string, number, op or end; ``pos`` its offset."""

    kind: str
    text: str
    pos: int


_TOKEN_RE = re.compile(r"""
    (?P<ws>\s+)
  | (?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<word>[^\W\d]\w*)
  | (?P<op>==|!=|<>|<=|>=|\|\||=|<|>|\(|\)|,|-|\+|\*|/|%|\.)
""", re.VERBOSE)


def syntax_error(text: str, pos: int, message: str, what: str = "predicate"
                 ) -> InvalidArgumentError:
    """The error for a SQL text (a ``what``) that does not parse, pointing at ``pos``."""
    if len(text) <= 200:
        caret = text[:pos] + " >>> " + text[pos:]
        return InvalidArgumentError(
            f"invalid {what} {text!r}: {message} at position {pos}: {caret!r}")
    around = text[max(0, pos - 40):pos] + " >>> " + text[pos:pos + 40]
    return InvalidArgumentError(f"invalid {what} of {len(text)} characters: {message} at "
                                f"position {pos}: ...{around!r}...")


def token_text(tok: Token) -> str:
    """A token as an error message quotes it (its ends only, when it is long)."""
    if len(tok.text) <= 60:
        return repr(tok.text)
    return f"{tok.text[:25]!r}...{tok.text[-25:]!r} ({len(tok.text)} characters)"


def _quoted(text: str, i: int, what: str) -> tuple[Token, int]:
    """The quoted token starting at ``text[i]`` (a doubled quote stands for itself), and the
    offset after it."""
    c, n = text[i], len(text)
    j = i + 1
    parts: list[str] = []
    while True:
        k = text.find(c, j)
        if k < 0:
            kind = "string" if c == "'" else "quoted identifier"
            raise syntax_error(text, i, f"unterminated {kind}", what)
        parts.append(text[j:k])
        if k + 1 < n and text[k + 1] == c:
            parts.append(c)
            j = k + 2
            continue
        break
    value = "".join(parts)
    if c != "'" and not value:
        raise syntax_error(text, i, "empty quoted identifier", what)
    return Token("string" if c == "'" else "ident", value, i), k + 1


def tokenize(text: str, what: str = "predicate") -> list[Token]:
    """The tokens of ``text``, ending with an ``end`` token; errors name it as a ``what``."""
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"`":
            tok, i = _quoted(text, i, what)
            tokens.append(tok)
            continue
        if text.startswith("--", i) or text.startswith("/*", i):
            raise syntax_error(text, i, "SQL comments are not supported", what)
        m = _TOKEN_RE.match(text, i)
        if not m:
            raise syntax_error(text, i, f"unexpected character {c!r}", what)
        kind = m.lastgroup
        assert kind is not None
        if kind != "ws":
            tokens.append(Token(kind, m.group(), i))
        i = m.end()
    tokens.append(Token("end", "", n))
    return tokens


__all__ = ["Token", "syntax_error", "token_text", "tokenize"]
