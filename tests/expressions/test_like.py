"""SQL LIKE, NOT LIKE, ILIKE and ESCAPE: deltacommit's evaluator, its partition-value programs
and its parser against a reference matcher written from Spark's rules
(``StringUtils.escapeLikeRegex``) character by character, over random texts and patterns full
of wildcards, escape characters, regex metacharacters, line breaks and non-ASCII text."""

from __future__ import annotations

import functools
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.errors import (
    CheckConstraintViolationError,
    InvalidArgumentError,
    UnsupportedProtocolError,
)
from deltacommit.protocol.expressions.ast import NULL, And, Column, Like, Literal, Not, Or, lit
from deltacommit.protocol.expressions.constraints import Constraint, check_constraints
from deltacommit.protocol.expressions.evaluator import EvaluationFailed, evaluate_condition
from deltacommit.protocol.expressions.parser import parse_expression, parse_predicate

# --------------------------------------------------------------------------- the reference


class BadPattern(Exception):
    """Spark refuses the pattern."""


def reference_tokens(pattern: str, escape: str) -> list[tuple[str, str]]:
    """The pattern as ("any", ""), ("one", "") and ("char", c) tokens, read one character at a
    time as Spark reads it: the escape character first, then the wildcards."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape:
            if i + 1 >= len(pattern):
                raise BadPattern("ends with the escape character")
            nxt = pattern[i + 1]
            if nxt != "%" and nxt != "_" and nxt != escape:
                raise BadPattern(f"escape before {nxt!r}")
            out.append(("char", nxt))
            i += 2
        elif c == "%":
            out.append(("any", ""))
            i += 1
        elif c == "_":
            out.append(("one", ""))
            i += 1
        else:
            out.append(("char", c))
            i += 1
    return out


def reference_like(text: str, pattern: str, escape: str = "\\") -> bool:
    """Whether the whole of ``text`` matches: a wildcard-matching recursion over positions."""
    tokens = reference_tokens(pattern, escape)

    @functools.cache
    def match(i: int, j: int) -> bool:
        if j == len(tokens):
            return i == len(text)
        kind, c = tokens[j]
        if kind == "any":
            return any(match(k, j + 1) for k in range(i, len(text) + 1))
        if i == len(text):
            return False
        if kind == "one":
            return match(i + 1, j + 1)
        return text[i] == c and match(i + 1, j + 1)

    return match(0, 0)


def test_the_reference_follows_sparks_documented_examples() -> None:
    # Spark's own examples (``Like`` and ``ILike`` usage).
    assert reference_like("Spark", "_park")
    assert reference_like("%SystemDrive%\\Users\\John", "\\%SystemDrive\\%\\\\Users%")
    assert reference_like("%SystemDrive%/Users/John", "/%SystemDrive/%//Users%", "/")
    assert not reference_like("Spark", "_Park")
    with pytest.raises(BadPattern):
        reference_like("a", "\\a")
    with pytest.raises(BadPattern):
        reference_like("a", "a\\")


# --------------------------------------------------------------------------- strategies

#: Wildcards, escape characters, regex metacharacters, case pairs, a line break, text beyond
#: ASCII and beyond the BMP.
ALPHABET = list("%_\\!ab.*+?[]()^$|{}AB\n") + ["é", "É", "ß", "\u0130", "😀", "\u00a0", "ǅ"]
TEXTS = st.text(alphabet=st.sampled_from(ALPHABET), max_size=8)
ESCAPES = st.sampled_from(["\\", "\\", "!", "%", "_", "a", "é", "."])


@st.composite
def patterns(draw: st.DrawFn, escape: str) -> str:
    """Patterns that are often valid: escape characters mostly before what they may escape."""
    out: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["text", "any", "one", "escaped", "escaped", "raw"]))
        if kind == "text":
            out.append(draw(TEXTS))
        elif kind == "any":
            out.append("%")
        elif kind == "one":
            out.append("_")
        elif kind == "escaped":
            out.append(escape + draw(st.sampled_from(["%", "_", escape])))
        else:
            out.append(draw(st.sampled_from(ALPHABET)))
    return "".join(out)


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[str | None], str, str, bool, bool]:
    escape = draw(ESCAPES)
    rows = draw(st.lists(st.one_of(st.none(), TEXTS), max_size=6))
    pattern = draw(patterns(escape))
    if rows and draw(st.booleans()):  # a pattern some row matches exactly, escaped
        target = draw(st.sampled_from([r for r in rows if r is not None] or [""]))
        pattern = "".join(escape + c if c in ("%", "_", escape) else c for c in target)
    return rows, pattern, escape, draw(st.booleans()), draw(st.booleans())


def _expected(rows: list[str | None], pattern: str, escape: str, negated: bool,
              insensitive: bool) -> list[bool | None]:
    if insensitive:
        pattern = pattern.lower()
    out: list[bool | None] = []
    for r in rows:
        if r is None:
            out.append(None)
            continue
        found = reference_like(r.lower() if insensitive else r, pattern, escape)
        out.append(found != negated)
    return out


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# --------------------------------------------------------------------------- properties


@settings(max_examples=600, deadline=None)
@given(cases())
def test_like_matches_as_sparks_rules_say(case: tuple[list[str | None], str, str, bool, bool]
                                          ) -> None:
    rows, pattern, escape, negated, insensitive = case
    cased_escape = escape.lower() != escape or escape.upper() != escape
    try:
        reference_tokens(pattern.lower() if insensitive else pattern, escape)
        valid = True
    except BadPattern:
        valid = False
    make = functools.partial(Like, Column(("s",)), lit(pattern), negated, insensitive, escape)
    if insensitive and cased_escape:
        with pytest.raises(InvalidArgumentError, match="cased ESCAPE"):
            make()
        return
    if not valid:
        with pytest.raises(InvalidArgumentError, match=r"LIKE pattern .* is invalid"):
            make()
        return
    node = make()
    data = pa.table({"s": pa.array(rows, pa.string())})
    got = evaluate_condition(node, data).to_pylist()
    assert got == _expected(rows, pattern, escape, negated, insensitive), node.to_sql()
    # The text round-trips through the parser to the same tree, and the SQL it writes parses
    # to the node (ESCAPE written only where it is not the default).
    assert parse_expression(node.to_sql()) == node
    text = (f"s {'NOT ' if negated else ''}{'ILIKE' if insensitive else 'LIKE'} "
            f"{_sql_string(pattern)} ESCAPE {_sql_string(escape)}")
    assert parse_expression(text) == node
    assert Not(node).to_sql() and parse_expression(Not(node).to_sql()) == Not(node)
    if insensitive:
        return
    # Over partition values: the same answers (a NULL or empty value is NULL, never TRUE).
    for r, want in zip(rows, got, strict=True):
        assert node.evaluate({"s": r}, {"s": pa.string()}) is (want is True and r != "")
    assert parse_predicate(node.to_sql()) == node


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), TEXTS), max_size=5), patterns("\\"))
def test_a_like_over_a_literal_or_a_null_pattern_is_three_valued(
        rows: list[str | None], pattern: str) -> None:
    try:
        reference_tokens(pattern, "\\")
    except BadPattern:
        return
    data = pa.table({"s": pa.array(rows, pa.string())})
    for negated in (False, True):
        assert evaluate_condition(Like(Column(("s",)), NULL, negated), data).to_pylist() == \
            [None] * len(rows)
    for r in rows:
        got = evaluate_condition(Like(lit(r), lit(pattern)), data).to_pylist()
        want = None if r is None else reference_like(r, pattern)
        assert got == [want] * len(rows)


# --------------------------------------------------------------------------- examples


@pytest.mark.parametrize("text, rows, want", [
    ("s LIKE 'abc%'", ["abc", "abcd", "xabc", None, ""], [True, True, False, None, False]),
    ("s NOT LIKE '%_x'", ["ax", "x", "a.x", None], [False, True, False, None]),
    ("s LIKE 'a.c'", ["abc", "a.c"], [False, True]),
    ("s LIKE 'a*'", ["aaa", "a*"], [False, True]),
    ("s LIKE '[a]%'", ["a", "[a]b"], [False, True]),
    ("s LIKE '50\\%'", ["50%", "500"], [True, False]),
    ("s LIKE '50!%' ESCAPE '!'", ["50%", "500", "50!%"], [True, False, False]),
    ("s LIKE '%%' ESCAPE '%'", ["%", "a"], [True, False]),
    ("s LIKE 'a_c'", ["a\nc", "a😀c", "ac"], [True, True, False]),
    ("s ILIKE 'ABC%'", ["abcd", "ABCD", "aBc", "xabc"], [True, True, True, False]),
    ("s ILIKE 'STRASSE'", ["straße", "strasse"], [False, True]),
    ("NOT s LIKE 'a%' OR s IS NULL", ["a", "b", None], [False, True, True]),
])
def test_like_examples(text: str, rows: list[str | None], want: list[bool | None]) -> None:
    data = pa.table({"s": pa.array(rows, pa.string())})
    assert evaluate_condition(parse_expression(text), data).to_pylist() == want


def test_like_binds_as_a_comparison() -> None:
    assert parse_expression("s LIKE 'a%' AND NOT t LIKE 'b' OR u NOT ILIKE 'c'") == Or((
        And((Like(Column(("s",)), lit("a%")), Not(Like(Column(("t",)), lit("b"))))),
        Like(Column(("u",)), lit("c"), negated=True, case_insensitive=True)))
    tree = parse_expression("NOT s LIKE 'a%' AND t ILIKE 'b'")
    assert tree.to_sql() == "NOT s LIKE 'a%' AND t ILIKE 'b'"
    assert tree.columns() == {"s", "t"}


def test_a_number_matches_as_its_text_and_binary_is_refused() -> None:
    data = pa.table({"i": pa.array([1, 12, 21, None], pa.int64()),
                     "b": pa.array([b"ab", None, b"x", b"a"], pa.binary())})
    assert evaluate_condition(parse_expression("i LIKE '1%'"), data).to_pylist() == \
        [True, True, False, None]
    with pytest.raises(EvaluationFailed, match="LIKE on a BINARY value"):
        evaluate_condition(parse_expression("b LIKE 'a%'"), data)


@pytest.mark.parametrize("text, message", [
    ("name LIKE other", r"name LIKE other: the pattern other is not a string literal"),
    ("name LIKE 'a' || '%'", r"the pattern concat\('a', '%'\) is not a string literal"),
    ("name LIKE 5", r"the pattern 5 is not a string literal"),
    ("name LIKE 'ab\\c'", r"invalid expression .*name LIKE .*escape character '\\\\' is not "
                          r"allowed to precede 'c'"),
    ("name LIKE 'ab\\'", r"invalid expression .*name LIKE .*ends with the escape character"),
    ("name NOT LIKE 'a!b' ESCAPE '!'", r"name NOT LIKE 'a!b' ESCAPE '!'.*not allowed to "
                                       r"precede 'b'"),
    ("name LIKE 'a' ESCAPE 'xy'", r"ESCAPE of LIKE must be one character"),
    ("name LIKE 'a' ESCAPE name", r"expected a quoted character after ESCAPE"),
    ("name ILIKE 'a' ESCAPE 'A'", r"cased ESCAPE"),
])
def test_what_spark_or_deltacommit_refuses_is_a_syntax_error_naming_the_expression(
        text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as caught:
        parse_expression(text)
    assert "name" in str(caught.value)


def test_a_check_constraint_with_like_is_enforced() -> None:
    data = pa.table({"c": ["xa", "xb"]})
    check_constraints(data, [Constraint("check", "starts_x", "c LIKE 'x%'")], "t")
    with pytest.raises(CheckConstraintViolationError, match=r"starts_x.*violated by 1 row"):
        check_constraints(pa.table({"c": ["xa", "yb"]}),
                          [Constraint("check", "starts_x", "c LIKE 'x%'")], "t")


@pytest.mark.parametrize(("literal", "passes", "violates"), [
    # Spark reads 'a\\%' as a\%: with ESCAPE '!', a backslash then anything.
    ("'a\\\\%' ESCAPE '!'", "a\\xyz", "a%"),
    ("'a\\n%' ESCAPE '!'", "a\nb", "anb"),  # a line break
    ("'a''%' ESCAPE '!'", "a'b", "ab"),  # a quote doubled is one quote
    ("'a' \"%\"", "ab", "ba"),  # literals side by side are one (a%), double quotes a string
    ("'a\\%'", "a%", "ab"),  # Spark keeps the backslash before %: a literal %
    ("r'a\\%'", "a%", "ab"),  # a raw string: as written
])
def test_a_spark_written_pattern_is_the_one_spark_reads(literal: str, passes: str,
                                                        violates: str) -> None:
    """A CHECK constraint's LIKE pattern is the value Spark's lexer reads from its literal
    (backslash escapes, a doubled quote, literals joined), not deltacommit's own reading, so
    the rows Spark passes pass and the rows it refuses are refused."""
    constraint = [Constraint("check", "c1", f"c LIKE {literal}")]
    check_constraints(pa.table({"c": [passes]}), constraint, "t")
    with pytest.raises(CheckConstraintViolationError, match="c1"):
        check_constraints(pa.table({"c": [violates]}), constraint, "t")


def test_a_spark_written_text_spark_cannot_read_is_refused() -> None:
    """``'a\\'`` is unterminated to Spark (the backslash escapes the quote): refused, never
    read as deltacommit's own dialect reads it."""
    with pytest.raises(UnsupportedProtocolError, match=r"cannot be evaluated.*unterminated"):
        check_constraints(pa.table({"c": ["a%"]}),
                          [Constraint("check", "c1", "c LIKE 'a\\'")], "t")


def test_a_constraint_no_write_could_enforce_is_refused_when_set_on_an_empty_table(
        tmp_path: Path) -> None:
    """Setting a CHECK constraint checks the table's rows, which an empty table has none of:
    its text must still be one every later write enforces, or each of them is refused."""
    uri = str(tmp_path / "t")
    schema = pa.schema([("c", pa.string())])
    dc.DeltaTable.create(uri, schema)
    with pytest.raises(InvalidArgumentError, match="cannot be enforced by deltacommit"):
        dc.DeltaTable(uri).set_properties({"delta.constraints.c1": "c <> '\\uD800'"})
    assert dc.DeltaTable(uri).version == 0
    dc.DeltaTable(uri).set_properties({"delta.constraints.c2": "c LIKE 'a\\%'"})
    dc.write(uri, pa.table({"c": ["a%"]}, schema=schema))
    with pytest.raises(CheckConstraintViolationError, match="c2"):
        dc.write(uri, pa.table({"c": ["ab"]}, schema=schema))


def test_a_pattern_of_many_wildcards_is_matched_in_time_linear_in_the_text() -> None:
    """Python's backtracking regex takes time exponential in the ``%`` of ``'%a%a...%b'`` on a
    text it does not match (about 100 s for twelve on 40 characters): a DELETE, a scan or a
    conflict check deciding a partition predicate would hang where Arrow's RE2 does not.  With
    forty, a backtracking matcher would not finish at all; the answers are asserted, not a
    time."""
    pattern = "%a" * 40 + "%b"
    predicate = parse_predicate(f"p LIKE '{pattern}'")
    assert predicate.compile({"p": pa.string()})({"p": "a" * 60}) is False
    assert predicate.compile({"p": pa.string()})({"p": "a" * 60 + "b"}) is True
    assert predicate.compile({"p": pa.string()})({"p": "a" * 39 + "b"}) is False
    assert evaluate_condition(parse_expression(f"'{'a' * 60}' LIKE '{pattern}'"),
                              pa.table({"x": [1]})).to_pylist() == [False]


def test_partition_programs_refuse_what_they_cannot_decide() -> None:
    with pytest.raises(InvalidArgumentError, match="not a string"):
        parse_predicate("p LIKE '1%'").evaluate({"p": "1"}, {"p": pa.int32()})
    with pytest.raises(InvalidArgumentError, match="ILIKE"):
        parse_predicate("s ILIKE 'a%'").evaluate({"s": "a"}, {"s": pa.string()})
    assert parse_predicate("s LIKE NULL").evaluate({"s": "a"}, {"s": pa.string()}) is False
    assert parse_predicate("s NOT LIKE 'a%'").evaluate({"s": "b"}, {"s": pa.string()}) is True


def test_a_like_node_built_in_code_is_checked_as_a_parsed_one() -> None:
    with pytest.raises(InvalidArgumentError, match="not a string literal"):
        Like(Column(("s",)), Column(("t",)))
    with pytest.raises(InvalidArgumentError, match="not allowed to precede"):
        Like(Column(("s",)), Literal("string", "\\x"))
    with pytest.raises(InvalidArgumentError, match="one character"):
        Like(Column(("s",)), lit("a"), escape="\U0001F600")
