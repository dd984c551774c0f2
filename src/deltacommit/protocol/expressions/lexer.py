"""The tokens of SQL expression texts, and the syntax errors that point into them.  Pure.

Two dialects share every token but the string literal:

- deltacommit's own (a user's predicate: ``delete``, ``update``, ``merge``, a scan's or an
  overwrite's partition predicate), read as deltalake's DataFusion reads it: ``'...'`` a string
  in which ``''`` stands for a quote and a backslash is itself, ``"..."`` a quoted identifier;
- Spark's (``spark=True``: a text Spark wrote into a table's metadata, a CHECK constraint, an
  invariant, a generation expression, which Spark enforces as its own parser reads it), read
  as Spark 4.3.0's lexer and ``unescapeSQLString`` read it.  Sources, apache/spark at the
  revision pyspark 4.3.0 was built from (98bc0212c94705434471627068f41e374ccab143, per its
  ``spark-version-info.properties``): ``STRING_LITERAL`` and ``DOUBLEQUOTED_STRING`` in
  sql/api/src/main/antlr4/org/apache/spark/sql/catalyst/parser/SqlBaseLexer.g4 and
  ``unescapeSQLString`` in sql/api/src/main/scala/org/apache/spark/sql/catalyst/util/
  SparkParserUtils.scala (read at commits 00e2e62d49d13160174b7a338d8106b5ecd0d25c and
  166f183474f8bcc14b9f9f2cfde1b533cd1282d4), with the doubled quote of SPARK-52545
  (apache/spark#51242), checked against the running Spark by
  tests/spark/test_spark_literals.py:

  - ``'...'`` and ``"..."`` are both string literals (``spark.sql.ansi.doubleQuotedIdentifiers``
    is off by default); inside one, the quote that opened it doubled stands for itself
    (``'it''s'`` is ``it's``; ``"a''b"`` keeps both quotes);
  - a backslash escapes the next character: ``\\uXXXX`` (four hex digits) and
    ``\\UXXXXXXXX`` (eight) a code point, ``\\NNN`` (three octal digits, the first 0 or 1)
    a character, ``\\0 \\b \\n \\r \\t \\Z`` NUL, backspace, line feed, carriage
    return, tab and U+001A, ``\\%`` and ``\\_`` themselves with their backslash (so a LIKE
    pattern still sees the escape), any other ``\\c`` the character ``c``;
  - ``r'...'`` / ``R"..."`` is raw: no escapes, ending at the first quote of its kind;
  - string literals side by side are one (``'a' "b"`` is ``ab``): the parser joins them, as
    Spark's ``stringLit+`` does.

  What Spark's lexer reads into a value no Python text holds is refused with a syntax error
  rather than read otherwise: a ``\\U`` escape beyond U+10FFFF and a lone UTF-16 surrogate
  (which Spark's strings hold as ``?``).

Arithmetic operators are tokens even where a grammar refuses them.  SQL comments are refused in
both dialects: Spark reads the rest of the line (``--``) or up to ``*/`` as one, and reading
them as operators instead (``x --5`` as ``x - -5``) would compute another value.
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


_HEX = frozenset("0123456789abcdefABCDEF")
_OCTAL = frozenset("01234567")
#: What Spark's ``unescapeSQLString`` makes of a backslash and one character (anything else
#: is the character itself).
_ESCAPED = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a",
            "%": "\\%", "_": "\\_"}


def _spark_quoted(text: str, i: int, what: str) -> tuple[Token, int]:
    """The Spark string literal starting at the quote ``text[i]``, unescaped, and the offset
    after it: a backslash takes the next character with it, the opening quote doubled stands
    for itself, the opening quote alone ends the literal."""
    q, n = text[i], len(text)
    j = i + 1
    while j < n:
        c = text[j]
        if c == "\\" or (c == q and j + 1 < n and text[j + 1] == q):
            j += 2  # an escape, or a quote doubled
        elif c == q:
            return Token("string", _unescape(text, i, j, what), i), j + 1
        else:
            j += 1
    raise syntax_error(text, i, "unterminated string", what)


def _unescape(text: str, start: int, end: int, what: str) -> str:
    """The value of the Spark string literal ``text[start:end + 1]`` (quotes included), as
    ``unescapeSQLString`` computes it."""
    q = text[start]
    out: list[str] = []
    i = start + 1
    while i < end:
        c = text[i]
        if c == q:  # the scan took only doubled quotes inside the literal
            out.append(q)
            i += 2
            continue
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        e = text[i]
        if e == "u" and i + 5 <= end and all(h in _HEX for h in text[i + 1:i + 5]):
            out.append(chr(int(text[i + 1:i + 5], 16)))
            i += 5
        elif e == "U" and i + 9 <= end and all(h in _HEX for h in text[i + 1:i + 9]):
            point = int(text[i + 1:i + 9], 16)
            if point > 0x10FFFF:
                raise syntax_error(text, i - 1, f"the escape \\U{text[i + 1:i + 9]} is beyond "
                                   "U+10FFFF, which Spark reads as no character", what)
            out.append(chr(point))
            i += 9
        elif (i + 3 <= end and e in "01" and text[i + 1] in _OCTAL
              and text[i + 2] in _OCTAL):
            out.append(chr(int(text[i:i + 3], 8)))
            i += 3
        else:
            out.append(_ESCAPED.get(e, e))
            i += 1
    value = "".join(out)
    try:  # Java strings are UTF-16: escaped surrogate pairs make one character
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeDecodeError:
        raise syntax_error(text, start, "the string holds a lone UTF-16 surrogate, which "
                           "Spark reads as '?'", what) from None


def _raw(text: str, i: int, what: str) -> tuple[Token, int]:
    """The Spark raw string ``r'...'`` starting at ``text[i]`` (the ``r``), and the offset after
    it: its characters as written, up to the first quote of its kind."""
    q = text[i + 1]
    k = text.find(q, i + 2)
    if k < 0:
        raise syntax_error(text, i, "unterminated string", what)
    return Token("string", text[i + 2:k], i), k + 1


def tokenize(text: str, what: str = "predicate", spark: bool = False) -> list[Token]:
    """The tokens of ``text``, ending with an ``end`` token; errors name it as a ``what``.
    ``spark`` reads string literals as Spark does (the module docstring)."""
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if spark and c in "'\"":
            tok, i = _spark_quoted(text, i, what)
            tokens.append(tok)
            continue
        if c in "'\"`":
            tok, i = _quoted(text, i, what)
            tokens.append(tok)
            continue
        if text.startswith("--", i) or text.startswith("/*", i):
            raise syntax_error(text, i, "SQL comments are not supported", what)
        if spark and c in "rR" and text[i + 1:i + 2] in ("'", '"'):
            tok, i = _raw(text, i, what)
            tokens.append(tok)
            continue
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
