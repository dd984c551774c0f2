"""Partition values, Hive directory names, add.path encoding, row grouping; checked against delta-rs."""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltacommit.errors import CorruptLogError, InvalidArgumentError, SchemaMismatchError
from deltacommit.protocol.partitions import (
    HIVE_DEFAULT_PARTITION,
    check_partition_columns,
    decode_add_path,
    encode_add_path,
    escape_path_name,
    parse_partition_value,
    partition_column_arrays,
    partition_path,
    serialize_partition_value,
    split_by_partition,
    unescape_path_name,
)

UTC = dt.UTC

# (arrow type, python value, serialized text, parsed back)
CASES: list[tuple[pa.DataType, Any, str | None, Any]] = [
    (pa.string(), "a b/c", "a b/c", "a b/c"),
    (pa.large_string(), "ünï", "ünï", "ünï"),
    (pa.string(), "", None, None),
    (pa.bool_(), True, "true", True),
    (pa.bool_(), False, "false", False),
    (pa.int8(), -128, "-128", -128),
    (pa.int64(), 2**63 - 1, "9223372036854775807", 2**63 - 1),
    (pa.uint32(), 4_294_967_295, "4294967295", 4_294_967_295),
    (pa.float64(), 1.5, "1.5", 1.5),
    (pa.float64(), 1e20, "1e+20", 1e20),
    (pa.float32(), float("inf"), "Infinity", float("inf")),
    (pa.float32(), pa.scalar(0.1, pa.float32()).as_py(), "0.1", 0.1),  # shortest float32 form
    (pa.float32(), 3.0, "3.0", 3.0),
    (pa.float64(), float("-inf"), "-Infinity", float("-inf")),
    (pa.decimal128(5, 2), Decimal("1.50"), "1.50", Decimal("1.50")),
    (pa.decimal128(38, 10), Decimal("-0.0000000001"), "-0.0000000001", Decimal("-0.0000000001")),
    (pa.date32(), dt.date(2026, 11, 22), "2026-11-22", dt.date(2026, 11, 22)),
    (pa.date32(), dt.date(1, 1, 1), "0001-01-01", dt.date(1, 1, 1)),
    (pa.timestamp("us", tz="UTC"), dt.datetime(2026, 11, 22, 10, 0, tzinfo=UTC), "2026-11-22 10:00:00",
     dt.datetime(2026, 11, 22, 10, 0, tzinfo=UTC)),
    (pa.timestamp("us", tz="UTC"), dt.datetime(2026, 11, 22, 12, 0, 0, 5,
                                               tzinfo=dt.timezone(dt.timedelta(hours=2))),
     "2026-11-22 10:00:00.000005", dt.datetime(2026, 11, 22, 10, 0, 0, 5, tzinfo=UTC)),
    (pa.timestamp("us"), dt.datetime(1969, 12, 31, 23, 59, 59, 999999), "1969-12-31 23:59:59.999999",
     dt.datetime(1969, 12, 31, 23, 59, 59, 999999)),
    (pa.binary(), b"\x01\x02\xff", "\\u0001\\u0002\\u00FF", b"\x01\x02\xff"),
    (pa.binary(), b"\x01\x02\x03", "\x01\x02\x03", b"\x01\x02\x03"),  # UTF-8 text, as Spark
    (pa.binary(), "é/x".encode(), "é/x", "é/x".encode()),
    (pa.binary(), b"\\u0041", "\\u005C\\u0075\\u0030\\u0030\\u0034\\u0031", b"\\u0041"),
]


@pytest.mark.parametrize(("t", "value", "text", "back"), CASES, ids=lambda x: repr(x)[:30])
def test_serialize_and_parse(t: pa.DataType, value: Any, text: str | None, back: Any) -> None:
    assert serialize_partition_value(value, t) == text
    assert parse_partition_value(text, t) == back
    assert serialize_partition_value(None, t) is None
    assert parse_partition_value(None, t) is None
    assert parse_partition_value("", t) is None


def test_nan_and_scalars() -> None:
    assert serialize_partition_value(float("nan"), pa.float64()) == "NaN"
    assert str(parse_partition_value("NaN", pa.float64())) == "nan"
    ts = pa.scalar(1_000_000_123_000, pa.timestamp("ns", tz="UTC"))
    assert serialize_partition_value(ts, ts.type) == "1970-01-01 00:16:40.000123"
    secs = pa.scalar(3, pa.timestamp("s"))
    assert serialize_partition_value(secs, secs.type) == "1970-01-01 00:00:03"
    assert serialize_partition_value(pa.scalar(-1, pa.date32()), pa.date32()) == "1969-12-31"
    assert serialize_partition_value(pa.scalar(None, pa.int32()), pa.int32()) is None
    assert serialize_partition_value(pa.scalar(Decimal("2.10"), pa.decimal128(4, 2)),
                                     pa.decimal128(4, 2)) == "2.10"
    assert serialize_partition_value(dt.datetime(2026, 1, 2, 3), pa.date32()) == "2026-01-02"


@pytest.mark.parametrize(("text", "t", "expected"), [
    # forms other writers use
    ("2026-11-22 10:00:00.000000", pa.timestamp("us", tz="UTC"), dt.datetime(2026, 11, 22, 10, tzinfo=UTC)),
    ("2026-11-22T10:00:00.123456Z", pa.timestamp("us", tz="UTC"),
     dt.datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=UTC)),
    ("2026-11-22T12:00:00+02:00", pa.timestamp("us", tz="UTC"), dt.datetime(2026, 11, 22, 10, tzinfo=UTC)),
    ("2026-11-22 10:00:00.1234", pa.timestamp("us"), dt.datetime(2026, 11, 22, 10, 0, 0, 123400)),
    ("2026-11-22 10:00:00.123456789", pa.timestamp("us"), dt.datetime(2026, 11, 22, 10, 0, 0, 123456)),
    ("2026-11-22", pa.timestamp("us"), dt.datetime(2026, 11, 22)),
    ("1", pa.float64(), 1.0),
    ("1.0E10", pa.float64(), 1e10),
    ("TRUE", pa.bool_(), True),
    ("ab", pa.binary(), b"ab"),  # Spark writes binary as its UTF-8 text
    ("1.5", pa.decimal128(5, 2), Decimal("1.5")),
])
def test_parse_other_writers_forms(text: str, t: pa.DataType, expected: Any) -> None:
    assert parse_partition_value(text, t) == expected


@pytest.mark.parametrize(("text", "t"), [
    ("abc", pa.int32()), ("128", pa.int8()), ("-1", pa.uint8()), ("yes", pa.bool_()),
    ("2026-13-01", pa.date32()), ("2026-11-22 25:00:00", pa.timestamp("us")), ("x", pa.decimal128(5, 2)),
    ("NaN", pa.decimal128(5, 2)), ("1.5", pa.int64()), ("nope", pa.float64()),
])
def test_parse_errors(text: str, t: pa.DataType) -> None:
    with pytest.raises(InvalidArgumentError, match="partition value"):
        parse_partition_value(text, t)


@pytest.mark.parametrize(("value", "t"), [
    ("1", pa.int32()), (True, pa.int32()), (1, pa.bool_()), (1, pa.string()), ("2026-01-01", pa.date32()),
    (1.5, pa.timestamp("us")), (pa.scalar(1001, pa.timestamp("ns")), pa.timestamp("ns")),
    (float("nan"), pa.decimal128(5, 2)), ("x", pa.binary()), (1e300, pa.float32()),
])
def test_serialize_errors(value: Any, t: pa.DataType) -> None:
    with pytest.raises(InvalidArgumentError):
        serialize_partition_value(value, t)


def test_unsupported_partition_types() -> None:
    for t in (pa.list_(pa.int32()), pa.struct([("a", pa.int32())]), pa.time64("us")):
        with pytest.raises(InvalidArgumentError, match="cannot be a partition column type"):
            serialize_partition_value(1, t)
        with pytest.raises(InvalidArgumentError, match="cannot be a partition column type"):
            parse_partition_value("1", t)


_TYPED_VALUES = st.one_of(
    st.tuples(st.just(pa.int64()), st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    st.tuples(st.just(pa.int16()), st.integers(min_value=-(2**15), max_value=2**15 - 1)),
    st.tuples(st.just(pa.float64()), st.floats(allow_nan=False)),
    st.tuples(st.just(pa.string()), st.text(min_size=1)),
    st.tuples(st.just(pa.date32()), st.dates()),
    st.tuples(st.just(pa.timestamp("us")), st.datetimes()),
    st.tuples(st.just(pa.timestamp("us", tz="UTC")),
              st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30),
                           timezones=st.just(UTC))),
    st.tuples(st.just(pa.decimal128(12, 3)),
              st.decimals(min_value=-(10**8), max_value=10**8, places=3, allow_nan=False)),
    st.tuples(st.just(pa.bool_()), st.booleans()),
    st.tuples(st.just(pa.binary()), st.binary(min_size=1, max_size=8)),
)


@settings(max_examples=400, deadline=None)
@given(_TYPED_VALUES)
def test_round_trip_property(typed: tuple[pa.DataType, Any]) -> None:
    t, value = typed
    text = serialize_partition_value(value, t)
    assert text is not None
    assert parse_partition_value(text, t) == value
    # arrow agrees with the parsed value
    assert pa.scalar(parse_partition_value(text, t), t).as_py() == pa.scalar(value, t).as_py()


def test_partition_column_arrays() -> None:
    schema = pa.schema([("x", pa.int64()), ("day", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")),
                        ("s", pa.string())])
    arrays = partition_column_arrays({"day": "2026-11-22", "ts": "2026-11-22 10:00:00", "s": None}, schema, 3)
    assert arrays["day"].type == pa.date32() and arrays["day"].to_pylist() == [dt.date(2026, 11, 22)] * 3
    assert arrays["ts"].type == pa.timestamp("us", tz="UTC")
    assert arrays["ts"].to_pylist() == [dt.datetime(2026, 11, 22, 10, tzinfo=UTC)] * 3
    assert arrays["s"].type == pa.string() and arrays["s"].null_count == 3
    assert partition_column_arrays({"s": ""}, schema, 2)["s"].null_count == 2
    assert len(partition_column_arrays({"x": "5"}, schema, 0)["x"]) == 0
    with pytest.raises(InvalidArgumentError, match="'nope'"):
        partition_column_arrays({"nope": "1"}, schema, 1)


# --------------------------------------------------------------------------- paths


def test_escape_path_name_matches_hive_set() -> None:
    special = "".join(chr(c) for c in range(1, 32)) + "\"#%'*/:=?\\\x7f{[]^"
    assert escape_path_name(special) == "".join(f"%{ord(c):02X}" for c in special)
    untouched = " <>|!$&()+,;@`~}-_.ünï😀"
    assert escape_path_name(untouched) == untouched
    assert escape_path_name("a:b=c/d") == "a%3Ab%3Dc%2Fd"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_escape_round_trip(text: str) -> None:
    assert unescape_path_name(escape_path_name(text)) == text
    assert "/" not in escape_path_name(text)


def test_partition_path() -> None:
    assert partition_path([("day", "2026-11-22"), ("hour", None), ("s", "")]) == (
        f"day=2026-11-22/hour={HIVE_DEFAULT_PARTITION}/s={HIVE_DEFAULT_PARTITION}")
    assert partition_path([("a=b", "x/y: 50%")]) == "a%3Db=x%2Fy%3A 50%25"
    assert partition_path([]) == ""


def test_add_path_encoding() -> None:
    rel = "day=a%3Ab c/ünï=x/part-0.parquet"
    enc = encode_add_path(rel)
    assert enc == "day=a%253Ab%20c/%C3%BCn%C3%AF=x/part-0.parquet"
    assert decode_add_path(enc) == rel
    # Spark's form (raw non-ASCII, %20) and delta-rs's form (everything escaped) decode alike
    assert decode_add_path("p=a%20b/f.parquet") == "p=a b/f.parquet"
    assert decode_add_path("p=a%2520b/f.parquet") == "p=a%20b/f.parquet"
    assert decode_add_path("p=ü/f.parquet") == "p=ü/f.parquet"
    assert decode_add_path("p=a+b/f.parquet") == "p=a+b/f.parquet"  # '+' is not a space in a path
    assert encode_add_path("s3://bucket/t/a b.parquet") == "s3://bucket/t/a%20b.parquet"
    assert encode_add_path("a:b/f") == "a%3Ab/f"
    with pytest.raises(CorruptLogError, match="invalid UTF-8"):
        decode_add_path("p=%FF/f.parquet")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8")))
def test_add_path_round_trip(rel: str) -> None:
    enc = encode_add_path(rel)
    assert enc.isascii() and " " not in enc
    assert decode_add_path(enc) == rel


def test_check_partition_columns() -> None:
    schema = pa.schema([("a", pa.int32()), ("b", pa.string()), ("l", pa.list_(pa.int32())),
                        ("bin", pa.binary())])
    check_partition_columns(schema, ["b"], "t")
    check_partition_columns(schema, [], "t")
    with pytest.raises(InvalidArgumentError, match=r"table t: partition column 'z' is not in the schema"):
        check_partition_columns(schema, ["z"], "t")
    with pytest.raises(InvalidArgumentError, match="'l' has type list"):
        check_partition_columns(schema, ["l"], "t")
    check_partition_columns(schema, ["bin"], "t")
    with pytest.raises(InvalidArgumentError, match="repeat"):
        check_partition_columns(schema, ["a", "a"], "t")
    with pytest.raises(InvalidArgumentError, match="at least one must hold data"):
        check_partition_columns(pa.schema([("a", pa.int32())]), ["a"], "t")


# --------------------------------------------------------------------------- splitting


Groups = dict[tuple[str | None, ...], list[dict[str, Any]]]


def _reference_split(table: pa.Table, partition_by: list[str]) -> Groups:
    out: Groups = {}
    types = {c: table.schema.field(c).type for c in partition_by}
    for row in table.to_pylist():
        key = tuple(serialize_partition_value(row[c], types[c]) for c in partition_by)
        out.setdefault(key, []).append({k: v for k, v in row.items() if k not in partition_by})
    return out


def _as_groups(groups: list[tuple[dict[str, str | None], pa.Table]], partition_by: list[str]) -> Groups:
    out: Groups = {}
    for values, data in groups:
        assert list(values) == partition_by
        assert not set(partition_by) & set(data.column_names)
        out.setdefault(tuple(values[c] for c in partition_by), []).extend(data.to_pylist())
    return out


def test_split_basic() -> None:
    t = pa.table({"day": ["d2", "d1", "d2", None, "d1"], "h": pa.array([1, 1, 2, 1, 1], pa.int8()),
                  "v": [1, 2, 3, 4, 5]})
    groups = split_by_partition(t, ["day", "h"])
    assert [(g, d.column("v").to_pylist()) for g, d in groups] == [
        ({"day": "d2", "h": "1"}, [1]), ({"day": "d2", "h": "2"}, [3]), ({"day": "d1", "h": "1"}, [2, 5]),
        ({"day": None, "h": "1"}, [4])]
    assert split_by_partition(t, []) == [({}, t)]
    assert split_by_partition(t.slice(0, 0), ["day"]) == []


def test_split_single_partition_is_zero_copy() -> None:
    t = pa.table({"day": ["d"] * 4, "v": [1, 2, 3, 4]})
    [(values, data)] = split_by_partition(t, ["day"])
    assert values == {"day": "d"}
    assert data.column("v").chunk(0).buffers()[1].address == t.column("v").chunk(0).buffers()[1].address


def test_split_errors() -> None:
    t = pa.table({"a": [1], "l": [[1]], "b": [b"x"]})
    with pytest.raises(SchemaMismatchError, match="lacks partition column 'z'"):
        split_by_partition(t, ["z"])
    with pytest.raises(SchemaMismatchError, match="'l' has type list"):
        split_by_partition(t, ["l"])
    assert split_by_partition(t, ["b"])[0][0] == {"b": "x"}
    with pytest.raises(SchemaMismatchError, match="repeat"):
        split_by_partition(t, ["a", "a"])
    with pytest.raises(SchemaMismatchError, match="at least one must hold data"):
        split_by_partition(pa.table({"a": [1]}), ["a"])


_PART_COLUMN = st.sampled_from([
    (pa.string(), st.one_of(st.none(), st.sampled_from(["a", "b", "c d", "é"]))),
    (pa.int32(), st.one_of(st.none(), st.integers(min_value=-2, max_value=2))),
    (pa.date32(), st.one_of(st.none(), st.sampled_from([dt.date(2026, 1, 1), dt.date(1999, 12, 31)]))),
    (pa.bool_(), st.one_of(st.none(), st.booleans())),
    (pa.timestamp("us", tz="UTC"), st.one_of(st.none(), st.sampled_from(
        [dt.datetime(2026, 1, 1, tzinfo=UTC), dt.datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=UTC)]))),
])


@st.composite
def _partitioned_tables(draw: st.DrawFn) -> tuple[pa.Table, list[str]]:
    n_parts = draw(st.integers(min_value=1, max_value=3))
    columns = [draw(_PART_COLUMN) for _ in range(n_parts)]
    n_rows = draw(st.integers(min_value=0, max_value=30))
    data: dict[str, pa.Array[Any]] = {}
    for i, (t, values) in enumerate(columns):
        data[f"p{i}"] = pa.array([draw(values) for _ in range(n_rows)], t)
    data["v"] = pa.array(range(n_rows), pa.int64())
    table = pa.table(data)
    chunks = draw(st.integers(min_value=1, max_value=3))
    if n_rows and chunks > 1:
        batches = table.to_batches(max_chunksize=max(1, n_rows // chunks))
        table = pa.Table.from_batches(batches, schema=table.schema)
    order = draw(st.permutations([f"p{i}" for i in range(n_parts)]))
    return table, list(order)


@settings(max_examples=200, deadline=None)
@given(_partitioned_tables())
def test_split_matches_reference(case: tuple[pa.Table, list[str]]) -> None:
    table, partition_by = case
    groups = split_by_partition(table, partition_by)
    assert _as_groups(groups, partition_by) == _reference_split(table, partition_by)
    assert sum(d.num_rows for _, d in groups) == table.num_rows
    # rows keep their relative order inside a group (stable)
    for _, d in groups:
        vs = d.column("v").to_pylist()
        assert vs == sorted(vs)


def test_split_many_partitions_puts_every_row_in_its_group() -> None:
    n = 200_000
    t = pa.table({"p": pa.array([i % 1000 for i in range(n)], pa.int32()),
                  "q": pa.array([f"k{i % 7}" for i in range(n)]), "v": pa.array(range(n))})
    groups = split_by_partition(t, ["p", "q"])
    assert len(groups) == 7000 and sum(d.num_rows for _, d in groups) == n
    for values, d in groups:
        vs = d.column("v").to_pylist()
        assert vs == sorted(vs)
        assert {(v % 1000, f"k{v % 7}") for v in vs} == {(int(values["p"] or ""), values["q"])}


# --------------------------------------------------------------------------- delta-rs compatibility

WEIRD = ["a b", "x/y", "c:d", "p%q", "e=f", "ünï", None, "h#i", "q?r", "s*t", "a'b", 'd"q', "br[a]",
         "cu{r}", "ca^r", "l<m>|", "tab\tx", "back\\s", "plus+x", "amp&x", "~tilde", "semi;x", "%41",
         "2026-11-22 10:00:00", "😀"]


def test_decode_deltalake_add_paths(tmp_path: Path) -> None:
    t = pa.table({"p": pa.array(WEIRD, pa.string()), "v": pa.array(range(len(WEIRD)), pa.int64())})
    deltalake.write_deltalake(str(tmp_path), t, partition_by=["p"])
    log = (tmp_path / "_delta_log" / "00000000000000000000.json").read_text().splitlines()
    adds = [json.loads(x)["add"] for x in log if '"add"' in x]
    assert len(adds) == len(WEIRD)
    seen = set()
    for add in adds:
        rel = decode_add_path(add["path"])
        assert (tmp_path / rel).is_file(), (add["path"], rel)
        value = parse_partition_value(add["partitionValues"]["p"], pa.string())
        rows = pq.read_table(tmp_path / rel).column("v").to_pylist()
        assert [WEIRD[i] for i in rows] == [value]
        seen.add(value)
    assert seen == set(WEIRD)


def test_deltalake_reads_our_paths(tmp_path: Path) -> None:
    """Files we place with partition_path + encode_add_path are found by delta-rs."""
    schema = pa.schema([("v", pa.int64()), ("p", pa.string()), ("d", pa.date32())])
    deltalake.write_deltalake(str(tmp_path), pa.Table.from_pylist([], schema=schema), partition_by=["p", "d"])
    actions = []
    expected = []
    for i, value in enumerate(WEIRD):
        day = dt.date(2026, 11, 22) + dt.timedelta(days=i)
        values = {"p": serialize_partition_value(value, pa.string()),
                  "d": serialize_partition_value(day, pa.date32())}
        rel = f"{partition_path(list(values.items()))}/part-{uuid.uuid4()}.parquet"
        os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
        pq.write_table(pa.table({"v": pa.array([i], pa.int64())}), tmp_path / rel)
        actions.append({"add": {"path": encode_add_path(rel), "partitionValues": values,
                                "size": (tmp_path / rel).stat().st_size, "modificationTime": 0,
                                "dataChange": True}})
        expected.append({"v": i, "p": value, "d": day})
    (tmp_path / "_delta_log" / "00000000000000000001.json").write_text(
        "\n".join(json.dumps(a) for a in actions) + "\n")
    table = deltalake.DeltaTable(str(tmp_path))
    assert table.version() == 1
    got = table.to_pyarrow_dataset().to_table().to_pylist()
    assert sorted(got, key=lambda r: r["v"]) == expected
    for uri in table.file_uris():
        assert os.path.isfile(uri), uri


def test_parses_deltalake_typed_partition_values(tmp_path: Path) -> None:
    t = pa.table({
        "ts": pa.array([dt.datetime(2026, 11, 22, 10, 0, 0, 123400, tzinfo=UTC)],
                       pa.timestamp("us", tz="UTC")),
        "tn": pa.array([dt.datetime(2026, 1, 2, 3, 4, 5, 6)], pa.timestamp("us")),
        "d": pa.array([dt.date(2026, 11, 22)]), "f": pa.array([1.0]), "b": pa.array([True]),
        "i": pa.array([-2], pa.int16()), "v": pa.array([1])})
    deltalake.write_deltalake(str(tmp_path), t, partition_by=["ts", "tn", "d", "f", "b", "i"])
    log = (tmp_path / "_delta_log" / "00000000000000000000.json").read_text().splitlines()
    [add] = [json.loads(x)["add"] for x in log if '"add"' in x]
    row = t.to_pylist()[0]
    for c in ["ts", "tn", "d", "f", "b", "i"]:
        assert parse_partition_value(add["partitionValues"][c], t.schema.field(c).type) == row[c], c
    assert (tmp_path / decode_add_path(add["path"])).is_file()
