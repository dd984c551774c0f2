"""File pruning by partition values and statistics never drops a file holding a matching row.

The oracle is the evaluator itself: a file must be kept wherever one of its live rows makes the
predicate TRUE.  Files come with statistics as deltacommit writes them, as Spark writes them
(timestamps truncated to milliseconds, a string max truncated at 32 UTF-16 units then given
the tie-breaker), without statistics, or with a deletion vector over statistics of the
physical rows (``tightBounds`` false, absent, or wrongly left true).  The bounds an UPDATE's or
a DELETE's predicate puts on a column (``predicate_bounds``) admit every row the predicate
matches, whatever kind of literal meets the column.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.errors import DeltaCommitError
from deltacommit.ops.pruning import predicate_bounds
from deltacommit.ops.rowlevel import bound_condition
from deltacommit.protocol.actions import Add
from deltacommit.protocol.add_actions import add_actions_table
from deltacommit.protocol.checkpoint.encode import adds_to_arrow
from deltacommit.protocol.expressions.ast import (
    And,
    Between,
    Case,
    Column,
    Comparison,
    Expr,
    InList,
    IsNull,
    Like,
    Not,
    Or,
    lit,
)
from deltacommit.protocol.expressions.evaluator import (
    EvaluationFailed,
    evaluate_condition,
    predicate_mask,
)
from deltacommit.protocol.expressions.parser import parse_expression, parse_predicate
from deltacommit.protocol.file_pruning import LITERALS_JUDGED_ONE_BY_ONE, may_match
from deltacommit.protocol.stats.compute import compute_stats

UTC = dt.UTC
SCHEMA = pa.schema([
    ("i", pa.int64()), ("f", pa.float64()), ("s", pa.string()), ("d", pa.decimal128(9, 2)),
    ("ts", pa.timestamp("us", tz="UTC")), ("day", pa.date32()), ("p", pa.int32()),
])
DATA = pa.schema([f for f in SCHEMA if f.name != "p"])

INTS = [-3, -1, 0, 1, 2, 7, 2**40]
FLOATS = [-1.5, -0.0, 0.0, 2.5, math.nan, math.inf, -math.inf]
STRINGS = ["", "a", "b", "\ufffd", "a" * 31 + "b", "a" * 32 + "\U0001F600",
           "a" * 32 + "\ufffe", "\U0001F600" * 20, "a" * 33]
DECIMALS = [Decimal("-1.50"), Decimal("0.00"), Decimal("0.01"), Decimal("2.50"), Decimal("99.99")]
TIMES = [dt.datetime(2026, 1, 1, tzinfo=UTC), dt.datetime(2026, 1, 1, 0, 0, 0, 500, tzinfo=UTC),
         dt.datetime(2026, 1, 1, 0, 0, 0, 999, tzinfo=UTC),
         dt.datetime(2026, 1, 1, 0, 0, 0, 1000, tzinfo=UTC), dt.datetime(2025, 6, 1, tzinfo=UTC)]
DAYS = [dt.date(2025, 6, 1), dt.date(2026, 1, 1), dt.date(2026, 1, 2)]
POOLS: dict[str, list[Any]] = {"i": INTS, "f": FLOATS, "s": STRINGS, "d": DECIMALS, "ts": TIMES,
                               "day": DAYS, "p": [0, 1, 2]}
#: Literals of other kinds each column is compared with (Spark coerces them).
CROSS: dict[str, list[Any]] = {"i": [Decimal("2.5"), 1.5, Decimal("-0.5")],
                               "f": [2, Decimal("0.5")], "d": [1, 2.5, 0],
                               "ts": DAYS, "day": TIMES, "s": [], "p": [Decimal("1.5")]}


def _value(name: str) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), st.sampled_from(POOLS[name]))


STYLES = ["ours", "spark", "spark", "none", "dv-wide", "dv-absent", "dv-claims-tight"]


@st.composite
def files(draw: st.DrawFn, styles: list[str] = STYLES
          ) -> tuple[pa.Table, list[pa.Table], list[Any]]:
    """Files (their rows), their add actions as the file list, and each file's live mask."""
    n_files = draw(st.integers(1, 3))
    adds: list[Add] = []
    tables: list[pa.Table] = []
    masks: list[Any] = []
    for k in range(n_files):
        rows = draw(st.integers(0, 4))
        data = pa.table({f.name: pa.array([draw(_value(f.name)) for _ in range(rows)], f.type)
                         for f in DATA}, schema=DATA)
        part = draw(st.one_of(st.none(), st.sampled_from([0, 1, 2])))
        style = draw(st.sampled_from(styles))
        stats: str | None = compute_stats(data)
        if style == "spark":
            stats = _spark_style(stats, data)
        if style == "none":
            stats = None
        dv = None
        live = np.ones(rows, dtype=bool)
        if style.startswith("dv") and rows:
            deleted = draw(st.lists(st.integers(0, rows - 1), unique=True, max_size=rows))
            live[deleted] = False
            dv = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 1,
                  "sizeInBytes": 10, "cardinality": len(deleted)}
            parsed = json.loads(stats or "{}")
            if style == "dv-wide":
                parsed["tightBounds"] = False
            elif style == "dv-claims-tight":
                parsed["tightBounds"] = True
            stats = json.dumps(parsed)
        adds.append(Add(f"f{k}.parquet", {"p": None if part is None else str(part)}, 1, 1,
                        stats=stats, deletion_vector=dv))
        full = data.append_column("p", pa.array([part] * rows, pa.int32()))
        tables.append(full)
        masks.append(live)
    listing = add_actions_table([adds_to_arrow(adds)], SCHEMA, ["p"], {},
                                deletion_vectors=True, tight_bounds=True)
    return listing, tables, masks


def _spark_max(s: str) -> str:
    """Spark's truncation of a string max: 32 UTF-16 units, past characters >= U+FFFD as Java
    compares them (a surrogate is below U+FFFD), then the tie-breaker."""
    units = s.encode("utf-16-le")
    if len(units) <= 64:
        return s
    cut = units[:64].decode("utf-16-le", errors="ignore")
    rest = s[len(cut):]
    while rest and rest[0] >= "\ufffd" and ord(rest[0]) <= 0xFFFF:
        cut, rest = cut + rest[0], rest[1:]
    return cut + "\ufffd"


def _spark_style(stats: str, data: pa.Table) -> str:
    """Statistics as Spark writes them: timestamps truncated down to milliseconds (ours round
    the max up), strings truncated by UTF-16 units."""
    parsed = json.loads(stats)
    strings = [v for v in data.column("s").to_pylist() if v is not None]
    if strings:
        # Spark compares strings as Java does, by UTF-16 units.
        top = max(strings, key=lambda v: v.encode("utf-16-be"))
        parsed.setdefault("maxValues", {})["s"] = _spark_max(top)
    for section in ("minValues", "maxValues"):
        bounds = parsed.get(section, {})
        if "ts" in bounds:
            t = dt.datetime.fromisoformat(bounds["ts"].replace("Z", "+00:00"))
            if section == "maxValues" and t.microsecond % 1000 == 0:
                t -= dt.timedelta(milliseconds=1)  # ours rounded up what Spark truncates
            bounds["ts"] = t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
    return json.dumps(parsed)


def _literal_for(draw: st.DrawFn, name: str) -> Any:
    choices = POOLS[name] + CROSS[name]
    return draw(st.sampled_from(choices))


@st.composite
def predicates(draw: st.DrawFn, focus: str, depth: int = 0) -> Expr:
    """Mostly conditions on ``focus`` (so that a literal often meets a value of a file)."""
    kinds = ["cmp", "cmp", "cmp", "in", "between", "null"] + (
        ["not", "and", "or"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    name = focus if draw(st.integers(0, 4)) else draw(st.sampled_from(list(POOLS)))
    column = Column((name,))
    if kind == "cmp":
        op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "<=>"]))
        value = draw(st.one_of(st.just(None), st.just(_literal_for(draw, name))))
        left, right = column, lit(value)
        if draw(st.booleans()):
            flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
            return Comparison(right, flipped, left)
        return Comparison(left, op, right)
    if kind == "in":
        items = draw(st.lists(st.sampled_from(POOLS[name] + [None]), min_size=1, max_size=3))
        return InList(column, tuple(lit(v) for v in items), draw(st.booleans()))
    if kind == "between":
        low, high = (lit(_literal_for(draw, name)) for _ in range(2))
        return Between(column, low, high, draw(st.booleans()))
    if kind == "null":
        return IsNull(column, draw(st.booleans()))
    if kind == "not":
        return Not(draw(predicates(focus, depth + 1)))
    children = tuple(draw(st.lists(predicates(focus, depth + 1), min_size=2, max_size=3)))
    return And(children) if kind == "and" else Or(children)


@st.composite
def cases(draw: st.DrawFn) -> tuple[tuple[pa.Table, list[pa.Table], list[Any]], Expr]:
    focus = draw(st.sampled_from(list(POOLS)))
    return draw(files()), draw(predicates(focus))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_pruning_never_drops_a_file_with_a_matching_row(
        case: tuple[tuple[pa.Table, list[pa.Table], list[Any]], Expr]) -> None:
    _keeps_every_file_with_a_match(case)


def _keeps_every_file_with_a_match(
        case: tuple[tuple[pa.Table, list[pa.Table], list[Any]], Expr]) -> None:
    (table, datas, masks), predicate = case
    try:
        truth = [evaluate_condition(predicate, d.filter(pa.array(m))).to_pylist()
                 if len(d) else [] for d, m in zip(datas, masks, strict=True)]
    except EvaluationFailed:
        reject()
    kept = may_match(predicate, table, SCHEMA)
    for k, values in enumerate(truth):
        if any(v is True for v in values):
            assert kept[k], (f"file {k} holds a row where {predicate.to_sql()} is TRUE but was "
                             f"pruned; rows {datas[k].filter(pa.array(masks[k])).to_pylist()}, "
                             f"listing {table.slice(k, 1).to_pylist()}")


#: Filler items that make an IN list long, per column: values no file holds (``POOLS``) but
#: between and beyond them, so that a list's range is wide and its keys sparse.
FILLERS: dict[str, Any] = {
    "i": lambda k: 3 + 1000 * k, "d": lambda k: Decimal(k) + Decimal("0.37"),
    "s": lambda k: f"k{k:05d}", "p": lambda k: 100 + k,
    "day": lambda k: dt.date(1990, 1, 1) + dt.timedelta(days=13 * k)}


@st.composite
def long_lists(draw: st.DrawFn) -> tuple[tuple[pa.Table, list[pa.Table], list[Any]], Expr]:
    """An IN list of over ``LITERALS_JUDGED_ONE_BY_ONE`` items (a MERGE's recorded source
    keys) mixing values files hold with fillers, maybe NULL, maybe negated, maybe under AND."""
    name = draw(st.sampled_from(sorted(FILLERS)))
    held = draw(st.lists(st.sampled_from(POOLS[name] + [None]), max_size=4))
    count = draw(st.sampled_from([LITERALS_JUDGED_ONE_BY_ONE + 1, 1500]))
    items = [FILLERS[name](k) for k in range(count)] + held
    column = Column((name,))
    node: Expr = InList(column, tuple(lit(v) for v in draw(st.permutations(items))),
                        draw(st.booleans()))
    if draw(st.booleans()):
        node = And((node, Comparison(column, ">=", lit(_literal_for(draw, name)))))
    return draw(files()), node


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_lists())
def test_pruning_by_a_long_in_list_never_drops_a_file_with_a_matching_row(
        case: tuple[tuple[pa.Table, list[pa.Table], list[Any]], Expr]) -> None:
    """A long key list is judged at once (exactly for integers, by its range otherwise): still
    never a file holding a row it matches."""
    _keeps_every_file_with_a_match(case)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files(), st.lists(st.one_of(st.none(), st.sampled_from(INTS + [-(2**63), 2**63 - 1]),
                                   st.integers(-(2**70), 2**70)), min_size=1, max_size=40),
       st.booleans())
def test_an_integer_in_list_is_judged_as_its_items_one_by_one(
        case: tuple[pa.Table, list[pa.Table], list[Any]], items: list[int | None],
        negated: bool) -> None:
    """``i IN (...)`` judged at once decides each file as ``i = a OR i = b ...`` does, TRUE and
    FALSE alike (``NOT`` asks the FALSE side).  A key beyond BIGINT equals no value: the list
    drops it where a file's bounds are unknown, which the comparison with it cannot, so there
    the list keeps no file the comparisons drop (and may drop more)."""
    table, _, _ = case
    column = Column(("i",))
    listed: Expr = InList(column, tuple(lit(v) for v in items))
    one_by_one: Expr = Or(tuple(Comparison(column, "=", lit(v)) for v in items)) \
        if len(items) > 1 else Comparison(column, "=", lit(items[0]))
    if negated:
        listed, one_by_one = Not(listed), Not(one_by_one)
    at_once = may_match(listed, table, SCHEMA).tolist()
    each = may_match(one_by_one, table, SCHEMA).tolist()
    if all(v is None or -(2**63) <= v < 2**63 for v in items):
        assert at_once == each, (listed.to_sql(), table.to_pylist())
    else:
        assert not any(a and not e for a, e in zip(at_once, each, strict=True)), \
            (listed.to_sql(), table.to_pylist())


def test_a_long_key_list_prunes_the_files_between_its_keys() -> None:
    """A file whose bounds fall between two of 5,000 integer keys holds none of them; beyond
    ``LITERALS_JUDGED_ONE_BY_ONE`` string keys, the list's range decides."""
    table = _listing(
        '{"numRecords":2,"minValues":{"i":1,"s":"k0"},"maxValues":{"i":9,"s":"k1"},'
        '"nullCount":{"i":0,"s":0}}',
        '{"numRecords":2,"minValues":{"i":10,"s":"x"},"maxValues":{"i":10,"s":"y"},'
        '"nullCount":{"i":0,"s":0}}',
        '{"numRecords":2,"minValues":{"i":11,"s":"a"},"maxValues":{"i":20,"s":"b"},'
        '"nullCount":{"i":0,"s":0}}')
    keys = ", ".join(str(10 * k) for k in range(5000))
    assert _keeps(f"i IN ({keys})", table) == [False, True, True]
    assert _keeps(f"NOT (i IN ({keys}))", table) == [True, False, True]
    words = ", ".join(f"'k{k:05d}'" for k in range(LITERALS_JUDGED_ONE_BY_ONE + 1))
    assert _keeps(f"s IN ({words})", table) == [True, False, False]


@pytest.mark.parametrize("name", ["day", "ts"])
def test_a_long_list_of_dates_is_judged_by_its_range_at_once(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A MERGE's 10,000 date keys (its recorded reads, judged for every winner) are judged by
    their range, a few evaluations for the whole list, not two per key, beside a date column
    or a timestamp one; still never a file holding one of them."""
    import deltacommit.protocol.file_pruning as file_pruning

    calls: list[int] = []
    real = file_pruning.evaluate_condition

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(file_pruning, "evaluate_condition", counted)
    items = tuple(lit(dt.date(2000, 1, 1) + dt.timedelta(days=2 * k)) for k in range(10_000))
    bounds = (("2000-01-03", "1990-01-01") if name == "day" else
              ("2000-01-03T00:00:00.000Z", "1990-01-01T00:00:00.000Z"))
    table = _listing(*(json.dumps({"numRecords": 1, "minValues": {name: v}, "maxValues": {name: v},
                                   "nullCount": {name: 0}}) for v in bounds))
    assert may_match(InList(Column((name,)), items), table, SCHEMA).tolist() == [True, False]
    assert len(calls) <= 8


def _listing(*stats: str | None, dv: list[int | None] | None = None) -> pa.Table:
    adds = []
    for k, s in enumerate(stats):
        card = (dv or [None] * len(stats))[k]
        adds.append(Add(f"f{k}.parquet", {"p": "1"}, 1, 1, stats=s,
                        deletion_vector=None if card is None else {
                            "storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
                            "offset": 1, "sizeInBytes": 10, "cardinality": card}))
    return add_actions_table([adds_to_arrow(adds)], SCHEMA, ["p"], {}, deletion_vectors=True,
                             tight_bounds=True)


def _keeps(predicate: str, table: pa.Table) -> list[bool]:
    return [bool(x) for x in may_match(parse_predicate(predicate), table, SCHEMA)]


def test_bounds_prune_what_they_prove() -> None:
    table = _listing('{"numRecords":2,"minValues":{"i":1},"maxValues":{"i":5},"nullCount":{"i":0}}',
                     '{"numRecords":2,"minValues":{"i":10},"maxValues":{"i":20},"nullCount":{"i":0}}',
                     None)
    assert _keeps("i = 7", table) == [False, False, True]
    assert _keeps("i BETWEEN 4 AND 10", table) == [True, True, True]
    assert _keeps("i > 5", table) == [False, True, True]
    assert _keeps("NOT (i < 30)", table) == [False, False, True]
    assert _keeps("i IS NULL", table) == [False, False, True]
    assert _keeps("p = 2 OR i = 3", table) == [True, False, True]
    assert _keeps("p = 2", table) == [False, False, False]


def test_truncated_string_max_bounds_only_its_prefix() -> None:
    prefix = "a" * 32
    # Spark's max of "aaa..a\U0001F600": the emoji (a surrogate pair in UTF-16) is below the
    # tie-breaker as Java compares, so the max is the prefix and U+FFFD, below the real value.
    table = _listing(json.dumps({"numRecords": 1, "minValues": {"s": prefix},
                                 "maxValues": {"s": prefix + "\ufffd"}, "nullCount": {"s": 0}}),
                     json.dumps({"numRecords": 1, "minValues": {"s": "b"},
                                 "maxValues": {"s": "c"}, "nullCount": {"s": 0}}))
    assert _keeps(f"s = '{prefix}\U0001F600'", table) == [True, False]
    assert _keeps(f"s > '{prefix}\uffff'", table) == [True, True]
    assert _keeps(f"s < '{prefix}'", table) == [False, False]
    assert _keeps("s > 'ab'", table) == [False, True]


def test_timestamp_max_in_milliseconds_covers_the_microseconds_below() -> None:
    table = _listing(json.dumps({"numRecords": 1, "minValues": {"ts": "2026-01-01T00:00:00.000Z"},
                                 "maxValues": {"ts": "2026-01-01T00:00:00.000Z"},
                                 "nullCount": {"ts": 0}}))
    assert _keeps("ts = TIMESTAMP '2026-01-01 00:00:00.000999Z'", table) == [True]
    assert _keeps("ts > TIMESTAMP '2026-01-01 00:00:00.002Z'", table) == [False]


def test_deletion_vectors_and_wide_bounds_keep_null_checks_safe() -> None:
    all_null = '{"numRecords":2,"nullCount":{"i":2}}'
    wide = '{"numRecords":2,"nullCount":{"i":0},"tightBounds":false}'
    table = _listing(all_null, all_null, wide, '{"numRecords":2,"nullCount":{"i":0}}',
                     dv=[None, 1, 1, 2])
    # all null without a DV: no non-null row; with one, counted only as an upper bound; a
    # file whose DV deletes every row holds nothing.
    assert _keeps("i IS NOT NULL", table) == [False, True, True, False]
    assert _keeps("i IS NULL", table) == [True, True, True, False]


@pytest.mark.parametrize("predicate", ["upper(s) = 'A'", "i + 1 = 3", "i = f", "s = 5"])
def test_what_statistics_cannot_decide_keeps_every_file(predicate: str) -> None:
    table = _listing('{"numRecords":1,"minValues":{"i":9,"s":"z","f":1.0},'
                     '"maxValues":{"i":9,"s":"z","f":1.0},"nullCount":{"i":0,"s":0,"f":0}}')
    assert [bool(x) for x in may_match(parse_expression(predicate), table, SCHEMA)] == [True]


@st.composite
def one_column_cases(draw: st.DrawFn, name: str
                     ) -> tuple[tuple[pa.Table, list[pa.Table], list[Any]], Expr]:
    """Comparisons of one column against files as Spark or deltacommit wrote their bounds:
    the tricky values (truncated strings, sub-millisecond times, NaN) meet often."""
    listing = draw(files(["spark", "spark", "spark", "ours", "dv-wide", "dv-claims-tight"]))
    op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "<=>"]))
    present = [v for d in listing[1] for v in d.column(name).to_pylist() if v is not None]
    if present and draw(st.integers(0, 9)) < 7:
        value = draw(st.sampled_from(present))  # a value some file holds
    else:
        value = _literal_for(draw, name)
    return listing, Comparison(Column((name,)), op, lit(value))


@pytest.mark.parametrize("name", ["s", "ts", "f", "i", "d", "day"])
def test_pruning_of_one_column_never_drops_a_matching_file(name: str) -> None:
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(one_column_cases(name))
    def check(case: tuple[tuple[pa.Table, list[pa.Table], list[Any]], Expr]) -> None:
        test_pruning_never_drops_a_file_with_a_matching_row.hypothesis.inner_test(case)

    check()


def test_string_bounds_ordered_by_utf16_keep_values_above_them_in_code_points() -> None:
    """Spark orders strings by UTF-16 code units: U+1F600 (a surrogate pair) sorts below U+FFFE,
    though above it by code point; a value the file holds must never be pruned for that."""
    prefix = "a" * 32
    table = _listing(json.dumps({"numRecords": 2, "minValues": {"s": prefix},
                                 "maxValues": {"s": prefix + "\ufffe\ufffd"},
                                 "nullCount": {"s": 0}}),
                     json.dumps({"numRecords": 2, "minValues": {"s": "x\U0001F600"},
                                 "maxValues": {"s": "x\uffff"}, "nullCount": {"s": 0}}),
                     json.dumps({"numRecords": 1, "minValues": {"s": "b\ue000"},
                                 "maxValues": {"s": "b\ue000z"}, "nullCount": {"s": 0}}))
    assert _keeps(f"s = '{prefix}\U0001F600'", table) == [True, False, False]
    assert _keeps("s = 'x\ue001'", table) == [False, True, False]
    assert _keeps("s = 'b\U0001F600'", table) == [False, False, True]
    assert _keeps("s = 'c'", table) == [False, False, False]


@st.composite
def like_cases(draw: st.DrawFn) -> tuple[tuple[pa.Table, list[pa.Table], list[Any]], Expr]:
    """``s [NOT] LIKE`` a pattern made from a value some file holds (its prefix, then wildcards
    or more text) against files with bounds as Spark (truncated maxima) or deltacommit wrote
    them."""
    listing = draw(files(["spark", "spark", "spark", "ours", "dv-wide", "dv-claims-tight"]))
    present = [v for d in listing[1] for v in d.column("s").to_pylist() if v is not None]
    base = draw(st.sampled_from(present or STRINGS))
    cut = draw(st.integers(0, len(base)))
    prefix = base[:cut].replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    tail = draw(st.sampled_from(["%", "", "_%", "%a", "_", "\ufffd%", "\U0001F600%", "b%"]))
    pattern = Like(Column(("s",)), lit(prefix + tail), draw(st.booleans()))
    return listing, pattern


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(like_cases())
def test_pruning_by_a_like_prefix_never_drops_a_file_with_a_match(
        case: tuple[tuple[pa.Table, list[pa.Table], list[Any]], Expr]) -> None:
    test_pruning_never_drops_a_file_with_a_matching_row.hypothesis.inner_test(case)


def test_a_like_prefix_prunes_by_both_bounds_and_keeps_truncated_maxima() -> None:
    prefix = "a" * 32
    table = _listing(
        json.dumps({"numRecords": 1, "minValues": {"s": "b"}, "maxValues": {"s": "c"},
                    "nullCount": {"s": 0}}),
        json.dumps({"numRecords": 1, "minValues": {"s": "abd"}, "maxValues": {"s": "abz"},
                    "nullCount": {"s": 0}}),
        json.dumps({"numRecords": 1, "minValues": {"s": "ab"}, "maxValues": {"s": "abc"},
                    "nullCount": {"s": 0}}),
        # Spark's truncated max: any string starting with the prefix, "aaa...az" included.
        json.dumps({"numRecords": 1, "minValues": {"s": prefix},
                    "maxValues": {"s": prefix + "\ufffd"}, "nullCount": {"s": 0}}),
        json.dumps({"numRecords": 2, "minValues": {"s": "abc"}, "maxValues": {"s": "abc"},
                    "nullCount": {"s": 1}}))
    assert _keeps("s LIKE 'abc%'", table) == [False, False, True, False, True]
    assert _keeps(f"s LIKE '{prefix}z%'", table) == [False, False, False, True, False]
    assert _keeps("s LIKE 'ab_'", table) == [False, True, True, False, True]
    assert _keeps("s LIKE '%c'", table) == [True, True, True, True, True]
    assert _keeps("s ILIKE 'ABC%'", table) == [True, True, True, True, True]
    # NOT LIKE is TRUE wherever a value may not match: only a file of NULLs is ruled out.
    assert _keeps("s NOT LIKE 'abc%'", table) == [True, True, True, True, True]
    assert _keeps("s LIKE NULL", table) == [False, False, False, False, False]


# ----------------------------------------------------------- UPDATE and DELETE bounds

_STATS_PREDICATES = [
    "d < TIMESTAMP '2024-01-01 10:00:00'", "TIMESTAMP '2024-01-01 10:00:00' > d",
    "s = TRUE", "s = '1.50'", "s IN ('2024-01-01 00:00:00', 'zz')",
]
#: A string column beside a literal deltalake compares by another text than its own: refused.
_REFUSED = ["s = TIMESTAMP '2024-01-01 00:00:00'",
            "s IN (TIMESTAMP '2024-01-01 00:00:00Z', 'zz')", "s = 1.50"]


def _one_row_per_file(uri: str) -> pa.Table:
    rows = pa.table({"s": ["2024-01-01 00:00:00", "1.50", "true", "m"],
                     "d": [dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 3),
                           dt.date(2024, 1, 4)]})
    for i in range(rows.num_rows):  # one row per file: each file's bounds are its value
        dc.write(uri, rows.slice(i, 1))
    return rows


def _change(uri: str, verb: str, predicate: str) -> None:
    """DELETE the rows ``predicate`` matches, or UPDATE their ``s`` to 'changed'."""
    if verb == "delete":
        dc.DeltaTable(uri).delete(predicate)
    else:
        dc.DeltaTable(uri).update({"s": "'changed'"}, predicate)


@pytest.mark.parametrize("verb", ["delete", "update"])
@pytest.mark.parametrize("predicate", _STATS_PREDICATES)
def test_statistics_skip_only_files_that_cannot_hold_a_matching_row(
        tmp_path: Any, predicate: str, verb: str) -> None:
    uri = str(tmp_path / "t")
    rows = _one_row_per_file(uri)
    matched = {"s = '1.50'": "1.50", "s = TRUE": "true"}.get(predicate, "2024-01-01 00:00:00")
    others = [str(v) for v in rows["s"].to_pylist() if v != matched]
    _change(uri, verb, predicate)
    expected = sorted(others) if verb == "delete" else sorted([*others, "changed"])
    assert sorted(str(v) for v in dc.DeltaTable(uri).to_arrow()["s"].to_pylist()) == expected


@pytest.mark.parametrize("verb", ["delete", "update"])
@pytest.mark.parametrize("predicate", _REFUSED)
def test_a_string_beside_a_literal_deltalake_reads_otherwise_changes_nothing(
        tmp_path: Any, predicate: str, verb: str) -> None:
    uri = str(tmp_path / "t")
    rows = _one_row_per_file(uri)
    before = dc.DeltaTable(uri).version
    with pytest.raises(DeltaCommitError, match="STRING value"):
        _change(uri, verb, predicate)
    assert dc.DeltaTable(uri).version == before
    assert sorted(dc.DeltaTable(uri).to_arrow()["s"].to_pylist()) == sorted(rows["s"].to_pylist())


_BOUNDED = pa.table({
    "s": ["1.50", "1.5", "1000.0", "1E3", "1000", "true", "TRUE", "2024-01-01",
          "2024-01-01 00:00:00", "5", "05", "-1", None, "a", "", "0.1"],
    "i8": pa.array([1, 5, -1, 0, None, 127, -128, 2, 3, 4, 5, 6, 7, 8, 9, 10], pa.int8()),
    "i64": pa.array([1, 5, -1, 0, None, 2**40, -2**40, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
    "f32": pa.array([1.5, 0.1, float("nan"), -0.0, 0.0, None, 1e30, 16777216.0, 2, 3, 4, 5,
                     6, 7, 8, 9], pa.float32()),
    "f64": pa.array([1.5, 0.1, float("nan"), -0.0, 0.0, None, 1e300, 16777217, 2, 3, 4, 5,
                     6, 7, 8, 0.30000000000000004]),
    "d": pa.array([dt.date(2024, 1, 1), dt.date(2024, 1, 2), None, dt.date(1970, 1, 1),
                   *(dt.date(2000, 1, i) for i in range(1, 13))]),
})
_LITERALS = ["1", "5", "-1", "1.5", "1.50", "0.1", "1e3", "1000", "127", "128", "-129",
             "TRUE", "NULL", "'5'", "'05'", "' 5'", "'1.5'", "'NaN'", "'2024-01-01'",
             "'2024-1-1'", "DATE '2024-01-01'", "TIMESTAMP '2024-01-01 00:00:00'",
             "TIMESTAMP '2024-01-01 10:00:00'", "TIMESTAMP '2024-01-01 00:00:00Z'", "'a'",
             "''", "16777217", "0.30000000000000004", "1099511627776"]


@pytest.mark.parametrize("column", _BOUNDED.column_names)
def test_the_bounds_a_predicate_puts_on_a_column_admit_every_row_it_matches(
        column: str) -> None:
    """``predicate_bounds`` (what an UPDATE or DELETE skips files by) against the evaluator,
    for every comparison of each column kind with literals of every kind."""
    texts = [f"{column} {op} {x}" for op in ("=", "<", "<=", ">", ">=") for x in _LITERALS]
    texts += [f"{x} {op} {column}" for op in ("=", "<", ">=") for x in _LITERALS]
    texts += [f"{column} IN ({x}, {y})" for x, y in zip(_LITERALS, _LITERALS[3:], strict=False)]
    bounded = 0
    for text in texts:
        predicate = parse_expression(text)
        try:
            matches = predicate_mask(predicate, _BOUNDED).to_pylist()
        except DeltaCommitError:
            continue  # not a predicate over this column's type
        for bound in predicate_bounds(predicate, _BOUNDED.schema):
            bounded += 1
            admitted = predicate_mask(bound_condition(bound), _BOUNDED).to_pylist()
            assert not any(m and not a for m, a in zip(matches, admitted, strict=True)), \
                (text, bound)
    assert bounded > 20


# ----------------------------------------------------------- IN lists over every column type

#: Columns of every width and kind an IN list meets, and values files hold of each.
WIDE = pa.schema([("a8", pa.int8()), ("a16", pa.int16()), ("a32", pa.int32()),
                  ("a64", pa.int64()), ("f32", pa.float32()), ("f64", pa.float64()),
                  ("d", pa.decimal128(5, 2)), ("dw", pa.decimal128(20, 0)), ("s", pa.string()),
                  ("day", pa.date32()), ("ts", pa.timestamp("us", tz="UTC"))])
WIDE_POOLS: dict[str, list[Any]] = {
    "a8": [-128, 127, 0, 1, -1, 5], "a16": [-32768, 32767, 0, 1, 300],
    "a32": [-2**31, 2**31 - 1, 0, 7, 100000], "a64": [-2**63, 2**63 - 1, 0, 1, 2**53 + 1, -5],
    "f32": [-0.0, 0.0, 1.5, math.nan, math.inf, 16777216.0, 0.1],
    "f64": [-0.0, 0.0, 1.5, math.nan, -math.inf, 2.0**53, 0.1],
    "d": [Decimal("-1.50"), Decimal("0.00"), Decimal("999.99"), Decimal("1.00")],
    "dw": [Decimal(10**19), Decimal(-5), Decimal(0), Decimal(2**63)],
    "s": ["", "a", "b", "ab", "é", "\U0001F600", "a" * 40, "1", "10"],
    "day": [dt.date(2024, 1, 1), dt.date(1970, 1, 1), dt.date(2024, 1, 2)],
    "ts": [dt.datetime(2024, 1, 1, tzinfo=UTC), dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=UTC)]}
#: Items beside a number column: integers beyond each width, fractions, -0.0, NaN, infinity.
NUMBER_ITEMS: list[Any] = [
    None, 0, 1, -1, 5, 127, 128, -128, -129, 300, 32767, 32768, 2**31 - 1, 2**31, 2**53 + 1,
    2**63 - 1, 2**63, -2**63, -2**63 - 1, 10**19, 2**70, Decimal("1.5"), Decimal("1.50"),
    Decimal("0.00"), Decimal("-1.50"), Decimal("999.995"), Decimal("0.1"), -0.0, 1.5, 0.1,
    math.nan, math.inf, 2.0**53, 16777217.0, float(np.float32(0.1))]
WIDE_ITEMS: dict[str, list[Any]] = {
    "s": [None, "", "a", "ab", "\U0001F600", "a" * 40, "10", "2"],
    "day": [None, dt.date(2024, 1, 1), dt.datetime(2024, 1, 1, tzinfo=UTC), "2024-01-01"],
    "ts": [None, dt.date(2024, 1, 1), dt.datetime(2024, 1, 1, tzinfo=UTC), "2024-01-01",
           dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=UTC)]}
#: Fillers that make a list long (beyond ``LITERALS_JUDGED_ONE_BY_ONE``), by kind: inside the
#: range of the values files hold, so that those are often a list's least or greatest item.
LONG_FILLERS: dict[str, Any] = {
    "int": lambda k: 3 + 1000 * k, "decimal": lambda k: Decimal(k) / 8 + 2,
    "string": lambda k: f"k{k:05d}", "date": lambda k: dt.date(1990, 1, 1) + dt.timedelta(k)}


@st.composite
def wide_files(draw: st.DrawFn) -> tuple[pa.Table, list[pa.Table], list[Any]]:
    """Files of ``WIDE`` rows with statistics as written, absent, partly dropped, or over the
    physical rows of a file with a deletion vector."""
    adds: list[Add] = []
    tables: list[pa.Table] = []
    masks: list[Any] = []
    for k in range(draw(st.integers(1, 3))):
        n = draw(st.integers(0, 4))
        data = pa.table({f.name: pa.array([draw(st.one_of(st.none(),
                                                           st.sampled_from(WIDE_POOLS[f.name])))
                                           for _ in range(n)], f.type) for f in WIDE},
                        schema=WIDE)
        style = draw(st.sampled_from(["ours", "ours", "none", "dv-wide", "dv-tight", "no-min",
                                      "no-max", "no-nulls"]))
        parsed: dict[str, Any] | None = json.loads(compute_stats(data) or "{}")
        live = np.ones(n, dtype=bool)
        dv = None
        if style == "none":
            parsed = None
        elif style.startswith("dv") and n:
            deleted = draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
            live[deleted] = False
            dv = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 1,
                  "sizeInBytes": 10, "cardinality": len(deleted)}
            parsed = {**(parsed or {}), "tightBounds": style == "dv-tight"}
        elif parsed is not None and style.startswith("no-"):
            parsed.pop({"no-min": "minValues", "no-max": "maxValues",
                        "no-nulls": "nullCount"}[style], None)
        adds.append(Add(f"f{k}.parquet", {}, 1, 1, deletion_vector=dv,
                        stats=None if parsed is None else json.dumps(parsed)))
        tables.append(data)
        masks.append(live)
    listing = add_actions_table([adds_to_arrow(adds)], WIDE, [], {}, deletion_vectors=True,
                                tight_bounds=True)
    return listing, tables, masks


@st.composite
def wide_in_lists(draw: st.DrawFn) -> Expr:
    """``column [NOT] IN (...)``, short or long, under NOT, OR, AND, CASE or IS NULL."""
    name = draw(st.sampled_from(WIDE.names))
    column = Column((name,))
    pool = WIDE_ITEMS.get(name, NUMBER_ITEMS) + WIDE_POOLS[name]
    items = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=6))
    if draw(st.integers(0, 3)) == 0:  # long: fillers and values files hold
        fill = LONG_FILLERS[draw(st.sampled_from(sorted(LONG_FILLERS)))]
        held = draw(st.lists(st.sampled_from([None, *WIDE_POOLS[name]]), min_size=1, max_size=4))
        items = [fill(k) for k in range(LITERALS_JUDGED_ONE_BY_ONE + 1)] + held
    node: Expr = InList(column, tuple(lit(v) for v in items), draw(st.booleans()))
    around = draw(st.sampled_from(["", "", "not", "or", "and", "case", "is null"]))
    if around == "not":
        return Not(node)
    if around == "or":
        return Or((node, Comparison(column, "=", lit(draw(st.sampled_from(WIDE_POOLS[name]))))))
    if around == "and":
        return And((node, IsNull(column, True)))
    if around == "case":
        return Case(None, ((IsNull(column, False), lit(False)),), node)
    if around == "is null":
        return IsNull(node, draw(st.booleans()))
    return node


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wide_files(), wide_in_lists())
def test_pruning_by_an_in_list_of_any_column_type_never_drops_a_matching_file(
        case: tuple[pa.Table, list[pa.Table], list[Any]], predicate: Expr) -> None:
    """IN lists short and long over integers of every width (keys beyond each), floats (NaN,
    -0.0), decimals, strings, dates and timestamps, their items of every kind (NULL among
    them), against files whose statistics are whole, absent, partial or wide: never a file
    holding a live row where the predicate is TRUE."""
    table, datas, masks = case
    try:
        truth = [evaluate_condition(predicate, d.filter(pa.array(m))).to_pylist()
                 if len(d) else [] for d, m in zip(datas, masks, strict=True)]
    except DeltaCommitError:
        reject()
    kept = may_match(predicate, table, WIDE)
    for k, values in enumerate(truth):
        if any(v is True for v in values):
            assert kept[k], (predicate.to_sql()[:300], datas[k].filter(pa.array(masks[k])),
                             table.slice(k, 1).to_pylist())
