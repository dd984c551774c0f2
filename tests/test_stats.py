"""Delta file statistics: exact JSON per type, nesting, column cutoff, truncation rules, delta-rs."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import struct
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.stats.compute import (
    compute_stats,
    stats_num_records,
    truncate_max_string,
    truncate_min_string,
)
from tests.arrow_strategies import values

UTC = dt.UTC


def test_every_type_exact_json() -> None:
    t = pa.table({
        "i8": pa.array([1, -5, None], pa.int8()),
        "i64": pa.array([2**62, -(2**62), 0], pa.int64()),
        "u32": pa.array([4_000_000_000, 1, None], pa.uint32()),
        "f64": pa.array([1.5, -2.25, 1e20]),
        "f32": pa.array([0.1, 0.2, None], pa.float32()),
        "dec": pa.array([decimal.Decimal("12.30"), decimal.Decimal("-0.05"), None], pa.decimal128(6, 2)),
        "s": pa.array(["b", "a", None]),
        "ls": pa.array(["x", "y", "z"], pa.large_string()),
        "d": pa.array([dt.date(2026, 11, 22), dt.date(1, 1, 1), None]),
        "ts": pa.array([dt.datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=UTC),
                        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), None],
                       pa.timestamp("us", tz="UTC")),
        "tsn": pa.array([dt.datetime(2026, 11, 22, 10, 0, 0, 123000), None, None], pa.timestamp("us")),
        "b": pa.array([True, False, None]),
        "bin": pa.array([b"\x00", None, b"\xff"]),
        "l": pa.array([[1], None, []], pa.list_(pa.int32())),
        "m": pa.array([[("k", 1)], None, None], pa.map_(pa.string(), pa.int32())),
    })
    expected = (
        '{"numRecords":3,'
        '"minValues":{"i8":-5,"i64":-4611686018427387904,"u32":1,"f64":-2.25,"f32":0.1,"dec":-0.05,'
        '"s":"a","ls":"x","d":"0001-01-01","ts":"1969-12-31T23:59:59.999Z",'
        '"tsn":"2026-11-22T10:00:00.123"},'
        '"maxValues":{"i8":1,"i64":4611686018427387904,"u32":4000000000,"f64":1e+20,"f32":0.2,'
        '"dec":12.30,"s":"b","ls":"z","d":"2026-11-22","ts":"2026-11-22T10:00:00.124Z",'
        '"tsn":"2026-11-22T10:00:00.123"},'
        '"nullCount":{"i8":1,"i64":0,"u32":1,"f64":0,"f32":1,"dec":1,"s":1,"ls":0,"d":1,"ts":1,'
        '"tsn":2,"b":1,"bin":1,"l":1,"m":2}}')
    assert compute_stats(t) == expected
    assert json.loads(expected)["maxValues"]["dec"] == 12.3  # a JSON number, not a string


def test_struct_nesting_and_null_parents() -> None:
    inner = pa.struct([("z", pa.string()), ("flag", pa.bool_())])
    st_type = pa.struct([("x", pa.int64()), ("y", inner), ("only_bool", pa.struct([("q", pa.bool_())]))])
    t = pa.table({
        "a": pa.array([1, 2]),
        "st": pa.array([{"x": 5, "y": {"z": "hello", "flag": True}, "only_bool": {"q": True}}, None],
                       st_type),
    })
    assert json.loads(compute_stats(t)) == {
        "numRecords": 2,
        "minValues": {"a": 1, "st": {"x": 5, "y": {"z": "hello"}}},
        "maxValues": {"a": 2, "st": {"x": 5, "y": {"z": "hello"}}},
        # a null struct makes each of its leaves null in that row
        "nullCount": {"a": 0, "st": {"x": 1, "y": {"z": 1, "flag": 1}, "only_bool": {"q": 1}}},
    }


def test_all_null_columns_keep_empty_struct_shape_like_spark() -> None:
    t = pa.table({
        "n": pa.array([None, None], pa.int64()),
        "st": pa.array([None, None], pa.struct([("x", pa.int32())])),
    })
    assert compute_stats(t) == (
        '{"numRecords":2,"minValues":{"st":{}},"maxValues":{"st":{}},'
        '"nullCount":{"n":2,"st":{"x":2}}}')


def test_no_bound_eligible_columns_omit_min_and_max() -> None:
    t = pa.table({"b": [True, False], "raw": [b"a", b"b"]})
    assert compute_stats(t) == '{"numRecords":2,"nullCount":{"b":0,"raw":0}}'


def test_empty_table() -> None:
    t = pa.table({"a": pa.array([], pa.int32()), "s": pa.array([], pa.string())})
    assert compute_stats(t) == '{"numRecords":0,"minValues":{},"maxValues":{},"nullCount":{"a":0,"s":0}}'


def test_multiple_chunks() -> None:
    t = pa.Table.from_batches([pa.record_batch({"a": [3, None]}), pa.record_batch({"a": [-1, 7]})])
    assert compute_stats(t) == '{"numRecords":4,"minValues":{"a":-1},"maxValues":{"a":7},"nullCount":{"a":1}}'


def test_first_32_leaf_columns_only() -> None:
    cols: dict[str, Any] = {f"c{i:02d}": pa.array([i]) for i in range(30)}
    cols["st"] = pa.array([{"a": 1, "b": 2, "c": 3}])
    cols["after"] = pa.array([9])
    stats = json.loads(compute_stats(pa.table(cols)))
    assert list(stats["nullCount"]) == [f"c{i:02d}" for i in range(30)] + ["st"]
    assert stats["nullCount"]["st"] == {"a": 0, "b": 0}  # leaves 31 and 32
    assert stats["maxValues"]["st"] == {"a": 1, "b": 2}
    assert "after" not in stats["minValues"]

    every = json.loads(compute_stats(pa.table(cols), num_indexed_cols=-1))
    assert every["nullCount"]["st"] == {"a": 0, "b": 0, "c": 0} and every["maxValues"]["after"] == 9

    assert compute_stats(pa.table(cols), num_indexed_cols=0) == '{"numRecords":1}'
    two = json.loads(compute_stats(pa.table({"l": [[1]], "b": [True], "x": [1]}), num_indexed_cols=2))
    # lists and booleans count as leaves even though they get no bounds
    assert two == {"numRecords": 1, "nullCount": {"l": 0, "b": 0}}


def test_string_truncation_multibyte() -> None:
    values = ["é" * 40, "ü", "一" * 31 + "😀" * 5]
    stats = json.loads(compute_stats(pa.table({"s": values})))
    assert stats["minValues"]["s"] == "é" * 32
    # the max is cut after 32 code points; the next character (U+1F600) is >= U+FFFD, so it is
    # kept, as are the others like it, and the tie-breaker closes the bound
    assert stats["maxValues"]["s"] == "一" * 31 + "😀" * 5 + "\ufffd"
    raw = compute_stats(pa.table({"s": values}), string_prefix_length=3)
    assert '"minValues":{"s":"ééé"}' in raw  # non-ASCII written as UTF-8, as Spark does


def test_max_string_rule() -> None:
    assert truncate_max_string("abcdef", 3) == "abc\ufffd"
    assert truncate_max_string("abc", 3) == "abc"
    assert truncate_max_string("ab\ufffd\ufffdcd", 2) == "ab\ufffd\ufffd\ufffd"
    assert truncate_max_string("ab\uffff", 2) == "ab\uffff\ufffd"
    assert truncate_min_string("abcdef", 3) == "abc"
    with pytest.raises(InvalidArgumentError, match="at least 1"):
        compute_stats(pa.table({"s": ["a"]}), string_prefix_length=0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=12), min_size=1, max_size=8),
       st.integers(min_value=1, max_value=6))
def test_string_bounds_hold(values: list[str], prefix: int) -> None:
    stats = json.loads(compute_stats(pa.table({"s": values}), string_prefix_length=prefix))
    lo, hi = stats["minValues"]["s"], stats["maxValues"]["s"]
    for v in values:
        assert lo <= v <= hi  # Python orders str by code point, as UTF-8 bytes order
    assert len(lo) <= prefix


@pytest.mark.parametrize(("unit", "values", "lo", "hi"), [
    ("ns", [1_000_000_001, 5_999_999_999], "1970-01-01T00:00:01.000Z", "1970-01-01T00:00:06.000Z"),
    ("ns", [1_001_000_000, 5_999_000_000], "1970-01-01T00:00:01.001Z", "1970-01-01T00:00:05.999Z"),
    ("us", [-1, 1], "1969-12-31T23:59:59.999Z", "1970-01-01T00:00:00.001Z"),
    ("ms", [-1500, 2], "1969-12-31T23:59:58.500Z", "1970-01-01T00:00:00.002Z"),
    ("s", [0, 86_400], "1970-01-01T00:00:00.000Z", "1970-01-02T00:00:00.000Z"),
])
def test_timestamp_min_truncates_down_and_max_rounds_up(unit: str, values: list[int], lo: str,
                                                        hi: str) -> None:
    t = pa.table({"t": pa.array(values, pa.timestamp(unit, tz="Europe/Paris"))})
    stats = json.loads(compute_stats(t))
    assert (stats["minValues"]["t"], stats["maxValues"]["t"]) == (lo, hi)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=-(2**55), max_value=2**55), min_size=1, max_size=6))
def test_timestamp_bounds_hold(values: list[int]) -> None:
    t = pa.table({"t": pa.array(values, pa.timestamp("us", tz="UTC"))})
    stats = json.loads(compute_stats(t))
    if "t" not in stats["minValues"]:
        # only when a bound lies outside years 1..9999, where ISO dates cannot be written
        assert min(values) < -62135596800 * 10**6 or max(values) >= 253402300800 * 10**6
        return

    def us(text: str) -> int:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        return (parsed - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)

    lo, hi = us(stats["minValues"]["t"]), us(stats["maxValues"]["t"])
    assert lo <= min(values) < lo + 1000
    assert hi - 1000 < max(values) <= hi


def test_floats_nan_and_infinity() -> None:
    t = pa.table({
        "nan_mixed": [float("nan"), 1.0, -3.0],
        "all_nan": [float("nan")] * 3,
        "inf": [float("inf"), 1.0, float("-inf")],
        "pos_inf": [float("inf"), 1.0, 2.0],
        "zeros": [-0.0, 0.0, 0.0],
    })
    stats = json.loads(compute_stats(t))
    assert stats["minValues"] == {"nan_mixed": -3.0, "pos_inf": 1.0, "zeros": 0.0}
    assert stats["maxValues"] == {"nan_mixed": 1.0, "zeros": 0.0}
    assert stats["nullCount"] == {"nan_mixed": 0, "all_nan": 0, "inf": 0, "pos_inf": 0, "zeros": 0}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1, max_size=5))
def test_float32_bounds_read_back_exactly(values: list[float]) -> None:
    stats = json.loads(compute_stats(pa.table({"f": pa.array(values, pa.float32())})))

    def f32(v: float) -> bytes:
        return struct.pack("<f", v)

    assert f32(stats["minValues"]["f"]) == f32(min(values)) or min(values) == 0.0
    assert f32(stats["maxValues"]["f"]) == f32(max(values)) or max(values) == 0.0
    assert not math.isnan(stats["minValues"]["f"])


def test_dictionary_and_view_columns() -> None:
    t = pa.table({"d": pa.array(["q", "b", "q"]).dictionary_encode(),
                  "v": pa.array(["m", "n"] + [None], pa.string_view())})
    assert compute_stats(t) == ('{"numRecords":3,"minValues":{"d":"b","v":"m"},"maxValues":{"d":"q","v":"n"},'
                                '"nullCount":{"d":0,"v":1}}')


def test_stats_num_records() -> None:
    assert stats_num_records(None) is None
    assert stats_num_records("") is None
    assert stats_num_records('{"numRecords":42,"minValues":{}}') == 42
    assert stats_num_records('{"numRecords":7}') == 7
    assert stats_num_records('{"minValues":{"numRecords":1},"numRecords":3}') == 3
    assert stats_num_records('{"numRecords": 5 }') == 5
    assert stats_num_records('{"numRecords":1.5}') is None
    assert stats_num_records('{"numRecords":true}') is None
    assert stats_num_records("{not json") is None
    assert stats_num_records("[1]") is None
    assert stats_num_records(compute_stats(pa.table({"a": [1, 2, 3]}))) == 3


# --------------------------------------------------------------------------- delta-rs compatibility


def test_agrees_with_deltalake(tmp_path: Path) -> None:
    """Same data written by delta-rs: every bound we write must be a valid bound of delta-rs's
    exact one.  Deliberate differences (documented in deltacommit.protocol.stats.compute):
    - booleans get no min/max (Spark's rule); delta-rs writes them;
    - timestamps have millisecond precision (min down, max up); delta-rs writes microseconds;
    - strings are truncated to 32 characters (Spark's rule); delta-rs writes longer prefixes;
    - arrays and maps get a nullCount under their own name; delta-rs writes entries named after
      the inner fields ("item", "key", "value") at the top level;
    - float32 bounds are written in shortest float32 form; delta-rs widens to float64 digits.
    """
    rows = [
        {"i": 5, "f": 1.5, "f32": 0.1, "dec": decimal.Decimal("12.34"), "s": "a" * 40, "u": "é" * 3,
         "d": dt.date(2026, 11, 22), "ts": dt.datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=UTC),
         "tsn": dt.datetime(2026, 11, 22, 10, 0, 0, 999999), "b": True, "l": [1, 2],
         "st": {"x": 1, "y": "q"}, "n": None},
        {"i": -3, "f": float("nan"), "f32": 2.5, "dec": decimal.Decimal("-1.00"), "s": "b", "u": "ü",
         "d": dt.date(1970, 1, 1), "ts": dt.datetime(1960, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
         "tsn": dt.datetime(2000, 1, 1), "b": False, "l": None, "st": None, "n": None},
        {"i": None, "f": -2.5, "f32": None, "dec": None, "s": None, "u": None, "d": None, "ts": None,
         "tsn": None, "b": None, "l": [], "st": {"x": None, "y": "r"}, "n": None},
    ]
    schema = pa.schema([("i", pa.int32()), ("f", pa.float64()), ("f32", pa.float32()),
                        ("dec", pa.decimal128(6, 2)), ("s", pa.string()), ("u", pa.string()),
                        ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")), ("tsn", pa.timestamp("us")),
                        ("b", pa.bool_()), ("l", pa.list_(pa.int64())),
                        ("st", pa.struct([("x", pa.int64()), ("y", pa.string())])), ("n", pa.int64())])
    table = pa.Table.from_pylist(rows, schema=schema)
    deltalake.write_deltalake(str(tmp_path), table)
    log = (tmp_path / "_delta_log" / "00000000000000000000.json").read_text().splitlines()
    theirs = json.loads(next(json.loads(x)["add"]["stats"] for x in log if '"add"' in x))
    ours = json.loads(compute_stats(table))

    assert ours["numRecords"] == theirs["numRecords"] == 3
    for col in ["i", "f", "dec", "d", "u"]:
        assert ours["minValues"][col] == theirs["minValues"][col], col
        assert ours["maxValues"][col] == theirs["maxValues"][col], col
    assert ours["minValues"]["st"] == theirs["minValues"]["st"]
    assert ours["maxValues"]["st"] == theirs["maxValues"]["st"]
    for side in ("minValues", "maxValues"):
        assert struct.pack("<f", ours[side]["f32"]) == struct.pack("<f", theirs[side]["f32"])
    assert "b" not in ours["minValues"] and theirs["minValues"]["b"] is False

    assert theirs["minValues"]["s"].startswith(ours["minValues"]["s"]) and len(ours["minValues"]["s"]) == 32
    assert ours["maxValues"]["s"] >= theirs["maxValues"]["s"]

    def us(text: str) -> int:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return (parsed - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)

    for col in ("ts", "tsn"):
        assert 0 <= us(theirs["minValues"][col]) - us(ours["minValues"][col]) < 1000, col
        assert 0 <= us(ours["maxValues"][col]) - us(theirs["maxValues"][col]) < 1000, col
    assert ours["maxValues"]["tsn"] == "2026-11-22T10:00:01.000"

    for col in ["i", "f", "f32", "dec", "s", "u", "d", "ts", "tsn", "b", "n"]:
        assert ours["nullCount"][col] == theirs["nullCount"][col], col
    assert ours["nullCount"]["st"] == theirs["nullCount"]["st"] == {"x": 2, "y": 1}
    assert ours["nullCount"]["l"] == 1 and "item" in theirs["nullCount"]


_FOOTER_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.string(), pa.large_string(),
                 pa.date32(), pa.float64(), pa.float32(), pa.timestamp("us"),
                 pa.struct([("a", pa.int32())])]


def _footer_values(t: pa.DataType) -> st.SearchStrategy[Any]:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        # Any code point, empty strings, strings around the 32-character prefix, and past
        # the 4 KiB beyond which the Parquet writer leaves a chunk's statistics out.
        text = st.one_of(st.text(max_size=40), st.text(alphabet="ab\u00e9\ufffd\U0001f600",
                                                       min_size=30, max_size=36),
                         st.integers(4090, 4200).map(lambda n: "x" * n))
        return st.one_of(st.none(), text)
    return values(t)


@st.composite
def _footer_tables(draw: st.DrawFn) -> pa.Table:
    column_types = draw(st.lists(st.sampled_from(_FOOTER_TYPES), min_size=1, max_size=4))
    n = draw(st.integers(0, 30))
    arrays = [pa.array(draw(st.lists(_footer_values(t), min_size=n, max_size=n)), type=t)
              for t in column_types]
    return pa.Table.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])


@settings(max_examples=300, deadline=None)
@given(_footer_tables(), st.integers(1, 8))
def test_bounds_from_the_parquet_footer_are_the_bounds_computed_from_the_rows(
        table: pa.Table, rows_per_group: int) -> None:
    """The statistics written with bounds taken from the Parquet writer's own (several row
    groups, all-null groups, strings too long for the footer, columns it does not serve)
    are the statistics computed from the rows, to the byte."""
    import pyarrow.parquet as pq

    from deltacommit.protocol.stats.footer import footer_bounds

    footers: list[pq.FileMetaData] = []
    pq.write_table(table, pa.BufferOutputStream(), row_group_size=rows_per_group,
                   metadata_collector=footers, compression="snappy")
    known = footer_bounds(footers[0], table.schema)
    assert compute_stats(table, known_bounds=known) == compute_stats(table)
    for name, t in zip(table.column_names, table.schema.types, strict=True):
        if pa.types.is_timestamp(t) or pa.types.is_struct(t):
            assert name not in known
        if pa.types.is_floating(t) and name in known and known[name] != (None, None):
            # A float column's footer bounds are taken only where no bound is a zero or NaN.
            assert all(b == b and b != 0 for b in known[name])


def test_a_data_file_written_has_the_statistics_of_its_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``write_data_file`` takes bounds from the footer it wrote (here from one row on);
    they are those of the rows."""
    from deltacommit.io import datafiles
    from deltacommit.io.storage.local import LocalStore
    from deltacommit.runtime.clock import RandomSource, SystemClock

    taken: list[dict[str, Any]] = []
    real = datafiles.footer_bounds
    monkeypatch.setattr(datafiles, "FOOTER_BOUNDS_FROM_ROWS", 1)
    monkeypatch.setattr(datafiles, "footer_bounds",
                        lambda *a: taken.append(real(*a)) or taken[-1])
    table = pa.table({"i": pa.array([3, None, -7], pa.int16()), "s": ["b", "a\u00e9", None],
                      "d": pa.array([dt.date(2020, 1, 2), None, dt.date(1999, 5, 6)]),
                      "f": [0.0, -0.0, None]})
    add = datafiles.write_data_file(LocalStore(tmp_path), {}, [], table, index=0,
                                    random=RandomSource(), clock=SystemClock())
    assert sorted(taken[0]) == ["d", "i", "s"]
    assert add.stats == compute_stats(table)
    assert json.loads(add.stats)["minValues"] == {"i": -7, "s": "a\u00e9", "d": "1999-05-06",
                                                  "f": 0.0}


@pytest.mark.parametrize("table", [
    # a top-level string column and a struct's integer field, both at path "a.b"
    pa.table({"a.b": ["x", "y"], "a": pa.array([{"b": 5}, {"b": 9}])}),
    pa.table({"a.b": [1, 2], "a": pa.array([{"b": "q"}, {"b": "z"}])}),
    # an all-null top-level column next to a struct field with values at the same path
    pa.table({"a.b": pa.array([None, None], pa.string()),
              "a": pa.array([{"b": "q"}, {"b": "z"}])}),
    # a list's elements, and a map's keys, at a top-level column's name
    pa.table({"l.list.element": ["x", "y"], "l": pa.array([[1], [2]])}),
    pa.table({"m.key_value.key": [7, 8],
              "m": pa.array([[("k", 1)], [("j", 2)]], pa.map_(pa.string(), pa.int64()))}),
], ids=["string-int", "int-string", "null-string", "list", "map"])
def test_a_column_named_as_a_nested_fields_path_takes_only_its_own_footer_bounds(
        table: pa.Table) -> None:
    """A top-level column whose name is a nested field's dotted Parquet path (``a.b`` and
    the field ``b`` of a struct ``a``) gets the bounds of its own chunks, not those of the
    other column, and the statistics are those computed from the rows."""
    import pyarrow.parquet as pq

    from deltacommit.protocol.stats.footer import footer_bounds

    footers: list[pq.FileMetaData] = []
    pq.write_table(table, pa.BufferOutputStream(), metadata_collector=footers)
    known = footer_bounds(footers[0], table.schema)
    assert compute_stats(table, known_bounds=known) == compute_stats(table)
    name = table.column_names[0]
    column = table.column(0)
    assert known[name] == ((None, None) if column.null_count == len(column)
                           else (min(column.to_pylist()), max(column.to_pylist())))


def test_dates_past_year_9999_have_no_footer_bounds() -> None:
    """A date32 bound pyarrow cannot make a Python date (before year 1, after year 9999)
    leaves its column to the rows, which write no bound for it."""
    import pyarrow.parquet as pq

    from deltacommit.protocol.stats.footer import footer_bounds

    table = pa.table({"d": pa.array([-800_000, 0, 3_000_000], pa.date32()),
                      "e": pa.array([0, 3_000_000, None], pa.date32()), "i": [1, 2, 3]})
    footers: list[pq.FileMetaData] = []
    pq.write_table(table, pa.BufferOutputStream(), metadata_collector=footers)
    known = footer_bounds(footers[0], table.schema)
    assert sorted(known) == ["i"]
    stats = compute_stats(table, known_bounds=known)
    assert stats == compute_stats(table)
    assert json.loads(stats)["minValues"] == {"e": "1970-01-01", "i": 1}


def test_a_large_file_with_a_dotted_column_and_far_dates_is_written_and_read_filtered(
        tmp_path: Path) -> None:
    """A write of FOOTER_BOUNDS_FROM_ROWS rows whose columns include ``a.b`` next to a
    struct ``a`` and dates past year 9999 commits, with the statistics of its rows, and a
    filtered read finds exactly the rows the filter keeps."""
    import deltacommit as dc
    from deltacommit.io.datafiles import FOOTER_BOUNDS_FROM_ROWS

    n = FOOTER_BOUNDS_FROM_ROWS
    table = pa.table({
        "a.b": pa.array([f"s{i:06d}" for i in range(n)]),
        "a": pa.array([{"b": i} for i in range(n)], pa.struct([("b", pa.int64())])),
        "d": pa.array(list(range(n - 1)) + [3_000_000], pa.date32()),
    })
    uri = str(tmp_path / "t")
    dc.write(uri, table)
    t = dc.DeltaTable(uri)
    (add,) = t.snapshot.files()
    assert add.stats == compute_stats(table)
    stats = json.loads(add.stats)
    assert stats["minValues"]["a.b"] == "s000000" and stats["maxValues"]["a.b"] == f"s{n - 1:06d}"
    assert stats["minValues"]["a"] == {"b": 0} and stats["maxValues"]["a"] == {"b": n - 1}
    assert stats["minValues"]["d"] == "1970-01-01" and "d" not in stats["maxValues"]
    got = t.to_arrow(filter="`a.b` = 's000100'")
    assert got.column("a.b").to_pylist() == ["s000100"]
    assert t.to_arrow(filter="d > date'9999-12-31'").column("a.b").to_pylist() == [f"s{n - 1:06d}"]
