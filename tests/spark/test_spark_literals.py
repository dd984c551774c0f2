"""Texts Spark wrote into a table's metadata are read as the running Spark reads them.

Spark enforces a CHECK constraint or a generation expression with its own lexer, whatever
engine writes the rows, so deltacommit must read every string literal of such a text to the
value Spark reads: quotes of either kind, backslash escapes, doubled quotes, literals side by
side, raw strings (``lexer``; Spark 4.3.0, apache/spark 98bc0212c94705434471627068f41e374ccab143:
SqlBaseLexer.g4 and SparkParserUtils.unescapeSQLString).  The differential asks the real local
Spark, one batched projection per example, and compares with ``parse_spark_expression``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.protocol.expressions.evaluator import evaluate
from deltacommit.protocol.expressions.parser import parse_spark_expression

pytestmark = pytest.mark.spark

#: Characters written as themselves inside a literal (the quotes and the backslash are atoms).
_PLAIN = "ab1 %_\t\n.é😀"
#: What follows a backslash: every escape unescapeSQLString knows, hex and octal digits that
#: do and do not make a code point, and characters that stand for themselves.
_ESCAPES = ["n", "t", "r", "b", "0", "Z", "%", "_", "\\", "'", '"', "x", "a", "u00e9",
            "u00E9", "U0001F600", "U000000e9", "uD83D\\uDE00", "101", "012", "177", "200",
            "12", "01", "u12", "U12", "é", "😀"]


@st.composite
def _quoted(draw: st.DrawFn) -> str:
    """One string literal in single or double quotes, escapes and doubled quotes included."""
    q = draw(st.sampled_from(["'", '"']))
    atoms = draw(st.lists(st.one_of(
        st.sampled_from(_PLAIN),
        st.sampled_from(_ESCAPES).map(lambda e: "\\" + e),
        st.just(q + q),
        st.just("'" if q == '"' else '"')), max_size=8))
    return q + "".join(atoms) + q


@st.composite
def _raw(draw: st.DrawFn) -> str:
    """A raw string: any character but its closing quote, backslashes kept."""
    q = draw(st.sampled_from(["'", '"']))
    body = draw(st.text(alphabet=_PLAIN + "\\'\"", max_size=6)).replace(q, "")
    return draw(st.sampled_from("rR")) + q + body + q


#: One literal or several side by side (separated or not: ``'a''b'`` is one literal).
_TEXTS = st.lists(st.one_of(_quoted(), _quoted(), _raw()), min_size=1, max_size=3).flatmap(
    lambda parts: st.lists(st.sampled_from(["", " ", "\n"]), min_size=len(parts) - 1,
                           max_size=len(parts) - 1).map(
        lambda seps: parts[0] + "".join(s + p for s, p in zip(seps, parts[1:], strict=True))))


def _spark_values(spark: Any, texts: list[str]) -> list[str]:
    """What Spark reads each text as: one projection of one row, every text a column."""
    one = spark.range(1)
    row = one.selectExpr(*[f"{text} AS v{i}" for i, text in enumerate(texts)]).collect()[0]
    return [row[f"v{i}"] for i in range(len(texts))]


def _ours(text: str) -> Any:
    return evaluate(parse_spark_expression(text), pa.table({"x": [1]})).to_pylist()[0]


# No shrinking: each step would ask Spark again, and the failing text is in the message.
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(texts=st.lists(_TEXTS, min_size=80, max_size=80))
def test_string_literals_read_as_spark_reads_them(spark: Any, texts: list[str]) -> None:
    """Every generated literal text has the value Spark's parser gives it."""
    for text, theirs in zip(texts, _spark_values(spark, texts), strict=True):
        assert _ours(text) == theirs, (text, theirs)


def test_the_forms_the_generator_may_miss_read_as_spark_reads_them(spark: Any) -> None:
    """Escapes at the edges of a literal and of the escape rules, checked every run."""
    texts = ["'a\\\\b'", "'\\u0041\\101\\x\\%\\_'", "r'a\\nb'", "R\"x\\y\"", "'a''b' 'c'",
             "\"a\"\"b\"", "'a\"\"b'", "\"a''b\"", "r'a''b'", "'\\200' '\\12' '\\0' '\\01'",
             "'\\012\\177'", "'\\U0001F600\\uD83D\\uDE00'", "'\\u12' '\\U12'", "'\\Z\\b\\r'",
             "'\\'' \"\\\"\"", "'it''s'", "''", "\"\"", "r''", "'\\\\%\\\\_'"]
    for text, theirs in zip(texts, _spark_values(spark, texts), strict=True):
        assert _ours(text) == theirs, (text, theirs)


@pytest.mark.parametrize("text", ["'\\uD800'", "'\\uDE00\\uD83D'", "'\\UFFFFFFFF'",
                                  "'\\U00110000'"])
def test_what_spark_reads_into_no_python_text_is_refused(text: str) -> None:
    """Spark holds a lone surrogate as '?' and makes garbage of a code point beyond
    U+10FFFF; deltacommit refuses such a literal, naming it, rather than hold another value."""
    with pytest.raises(dc.InvalidArgumentError, match=r"surrogate|beyond U\+10FFFF"):
        parse_spark_expression(f"x = {text}")


# --------------------------------------------------------------------------- end to end

#: As Spark writes them: a table property per CHECK constraint, a generation expression in
#: the column's metadata.  Both depend on Spark's reading of backslashes and double quotes.
_CONSTRAINT = "c <> 'a\\\\b' AND c <> \"x\" AND c NOT LIKE 'it''s%' AND c <> 'tab\\there'"
_GENERATED = "concat(c, '\\t', \"\\u00e9\", r'\\n')"


def test_a_table_spark_constrained_accepts_and_refuses_the_rows_spark_does(
        spark: Any, tmp_path: Path) -> None:
    """Each row is written by deltacommit to a table whose CHECK constraint and generated
    column hold literals Spark reads otherwise than deltacommit's own dialect: a row Spark's
    rule accepts is written with Spark's generated value, a row it refuses is refused naming
    the constraint, and nothing of it is committed."""
    uri = str(tmp_path / "t")
    schema = pa.schema([pa.field("c", pa.string()),
                        pa.field("g", pa.string(),
                                 metadata={"delta.generationExpression": _GENERATED})])
    dc.DeltaTable.create(uri, schema, configuration={"delta.constraints.spark_rule": _CONSTRAINT})
    candidates = ["a\\b", "a\\\\b", "x", "\"x\"", "it's me", "its", "it''s", "tab\there",
                  "tab\\there", "ok"]
    frame = spark.createDataFrame([(c,) for c in candidates], "c string")
    verdicts = {r["c"]: (r["ok"], r["g"]) for r in frame.selectExpr(
        "c", f"coalesce(({_CONSTRAINT}), false) AS ok", f"{_GENERATED} AS g").collect()}
    assert {c for c, (ok, _) in verdicts.items() if not ok} == {
        "a\\b", "x", "it's me", "tab\there"}  # what Spark's reading refuses
    written: list[tuple[str, str]] = []
    for c in candidates:
        ok, generated = verdicts[c]
        before = dc.DeltaTable(uri).version
        if ok:
            dc.write(uri, pa.table({"c": [c]}))
            written.append((c, generated))
        else:
            with pytest.raises(dc.CheckConstraintViolationError, match="spark_rule"):
                dc.write(uri, pa.table({"c": [c]}))
            assert dc.DeltaTable(uri).version == before
    got = dc.DeltaTable(uri).to_arrow()
    assert sorted(zip(got.column("c").to_pylist(), got.column("g").to_pylist(),
                      strict=True)) == sorted(written)


def test_a_spark_text_comparing_a_string_with_a_number_is_refused(spark: Any) -> None:
    """Spark 4 (ANSI) casts the string to the number's type: '5' > 10 is FALSE and 'abc' = 1
    fails, where comparing texts would pass '5' and fail nothing; deltacommit refuses."""
    frame = spark.createDataFrame([("5",)], "c string")
    assert frame.selectExpr("c > 10 AS v").collect()[0]["v"] is False
    table = pa.table({"c": ["5"]})
    for text in ("c > 10", "c = 5.0", "c IN (5, 6)", "c = TRUE", "1e0 < c"):
        with pytest.raises(dc.InvalidArgumentError, match="STRING"):
            evaluate(parse_spark_expression(text), table)
