"""SQL ``LIKE`` patterns as Spark reads them, and matching them over Arrow and Python strings.
Pure.

Spark's rules (``org.apache.spark.sql.catalyst.util.StringUtils.escapeLikeRegex``, in
sql/catalyst/src/main/scala/org/apache/spark/sql/catalyst/util/StringUtils.scala, which turns a
pattern into a Java regular expression matched against the whole text):

- ``%`` matches any sequence of characters, the empty one and line breaks included (DOTALL);
- ``_`` matches exactly one character: one Unicode code point (Java's ``.`` over a String,
  Spark 4 reading the pattern by code points);
- the escape character (``\\`` unless ``ESCAPE 'c'`` names another) makes the next ``%``,
  ``_`` or escape character literal; before any other character it is an error
  (``INVALID_LIKE_PATTERN.ESC_IN_THE_MIDDLE``), and so is a pattern ending with it
  (``ESC_AT_THE_END``).  The escape is checked first: with ``ESCAPE '%'``, ``%%`` is a literal
  ``%`` and a lone ``%`` an error;
- every other character is itself (``Pattern.quote``): ``.``, ``*``, ``[`` match only
  themselves.

Spark's parser takes ``ESCAPE`` as a one-character string (a Java ``char``: a character above
U+FFFF is two and refused).  ``ILIKE`` is ``lower(value) LIKE lower(pattern)`` (``ILike`` is
replaced by ``Like(Lower(left), Lower(right), escapeChar)``).

The pattern is the string literal's value as the text's dialect reads it (``lexer``): in a
user's predicate quotes doubled and no backslash escapes (as DataFusion reads it); in a text
Spark wrote (a CHECK constraint, a generation expression) Spark's own reading, which unescapes
a backslash in the literal (``'\\\\'`` is one backslash, ``'\\n'`` a line break) except before
``%`` and ``_``, which it keeps with their backslash, so the matcher sees the pattern Spark
matches.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.expressions.arrow_values import Value, is_scalar, pcx, type_of

DEFAULT_ESCAPE = "\\"
#: The wildcards, as parts of a parsed pattern.
ANY, ONE = "%", "_"

Parts = tuple[tuple[bool, str], ...]  # (wildcard?, text): a wildcard's text is ANY or ONE


def check_escape(escape: object) -> str:
    """``escape`` if Spark's parser takes it as an ESCAPE character: one character, a Java
    ``char`` (at most U+FFFF)."""
    if not isinstance(escape, str) or len(escape) != 1 or ord(escape) > 0xFFFF:
        raise InvalidArgumentError(
            f"the ESCAPE of LIKE must be one character (at most U+FFFF, as Spark's), not "
            f"{escape!r}")
    return escape


@functools.lru_cache(maxsize=1024)
def parse(pattern: str, escape: str = DEFAULT_ESCAPE) -> Parts:
    """The pattern's parts, literal runs and wildcards, by Spark's rules; InvalidArgumentError
    with Spark's reason for a pattern Spark refuses."""
    out: list[tuple[bool, str]] = []
    literal: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == escape:
            if i + 1 == n:
                raise InvalidArgumentError(
                    f"the LIKE pattern {pattern!r} is invalid: it ends with the escape "
                    f"character {escape!r} (Spark's INVALID_LIKE_PATTERN.ESC_AT_THE_END)")
            nxt = pattern[i + 1]
            if nxt not in (ANY, ONE, escape):
                raise InvalidArgumentError(
                    f"the LIKE pattern {pattern!r} is invalid: the escape character {escape!r} "
                    f"is not allowed to precede {nxt!r} (Spark's "
                    "INVALID_LIKE_PATTERN.ESC_IN_THE_MIDDLE)")
            literal.append(nxt)
            i += 2
            continue
        if c in (ANY, ONE):
            if literal:
                out.append((False, "".join(literal)))
                literal = []
            out.append((True, c))
        else:
            literal.append(c)
        i += 1
    if literal:
        out.append((False, "".join(literal)))
    return tuple(out)


def literal_prefix(parts: Parts) -> str:
    """The text every match starts with: the pattern's literal characters before its first
    wildcard."""
    if parts and not parts[0][0]:
        return parts[0][1]
    return ""


def _re2_literal(text: str) -> str:
    # Every character as a code point escape: RE2 reads \x{...} as that character, whatever
    # it is (., *, \, [, a line break), so nothing of the pattern is regex syntax.
    return "".join(f"\\x{{{ord(c):X}}}" for c in text)


@functools.lru_cache(maxsize=1024)
def arrow_regex(parts: Parts) -> str:
    """The RE2 expression (Arrow's ``match_substring_regex``) matching exactly the texts the
    pattern matches: anchored at both ends, ``.`` matching line breaks too."""
    body = "".join(
        (".*" if text == ANY else ".") if wild else _re2_literal(text) for wild, text in parts)
    return f"(?s)^{body}$"


@functools.lru_cache(maxsize=1024)
def matcher(parts: Parts) -> Callable[[str], bool]:
    """Whether a text matches the parsed pattern, in time bounded by the text's length times
    the pattern's, whatever its wildcards (as Arrow's RE2 matches columns; one Python regex
    of the whole pattern would backtrack, taking time exponential in the ``%`` of
    ``'%a%a...%b'`` on a text it does not match): the runs between
    ``%`` are of fixed width (literal characters and ``_``), so the first must start the text,
    the last end it, and each one between is taken where it first occurs after the one before
    it (leftmost leaves the most room for the rest)."""
    runs: list[list[tuple[bool, str]]] = [[]]
    for wild, text in parts:
        if wild and text == ANY:
            runs.append([])
        else:
            runs[-1].append((wild, text))
    compiled = [re.compile("".join("." if wild else re.escape(text) for wild, text in run),
                           re.DOTALL) for run in runs]
    if len(compiled) == 1:
        whole = compiled[0]
        return lambda text: whole.fullmatch(text) is not None
    first, middle, last = compiled[0], compiled[1:-1], compiled[-1]
    first_width = sum(1 if wild else len(text) for wild, text in runs[0])
    last_width = sum(1 if wild else len(text) for wild, text in runs[-1])

    def match(text: str) -> bool:
        end = len(text) - last_width  # where the last run starts
        if end < first_width or first.match(text) is None:
            return False
        at = first_width
        for run in middle:
            found = run.search(text, at, end)
            if found is None:
                return False
            at = found.end()
        return last.fullmatch(text, end) is not None
    return match


def matches(text: str, parts: Parts) -> bool:
    """Whether ``text`` matches the parsed pattern."""
    return matcher(parts)(text)


def match_strings(strings: Value, parts: Parts) -> Value:
    """Where each string (an Arrow string array or scalar) matches: TRUE, FALSE, NULL for a
    NULL string."""
    if not parts:
        return pcx.equal(strings, pa.scalar("", type_of(strings)))
    if len(parts) == 1 and not parts[0][0]:
        return pcx.equal(strings, pa.scalar(parts[0][1], type_of(strings)))
    if is_scalar(strings):
        if not strings.is_valid:
            return pa.scalar(None, pa.bool_())
        return pa.scalar(matches(strings.as_py(), parts))
    out: Any = pcx.match_substring_regex(strings, pattern=arrow_regex(parts))
    return out


__all__ = ["ANY", "DEFAULT_ESCAPE", "ONE", "Parts", "arrow_regex", "check_escape",
           "literal_prefix", "match_strings", "matcher", "matches", "parse"]
