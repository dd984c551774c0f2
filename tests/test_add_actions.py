"""``DeltaTable.get_add_actions``: the file list as Arrow, checked against deltalake 1.6.0's
``get_add_actions`` on Delta's test tables and on tables written here (a checkpoint, commits
after it, files removed after it), and its statistics parsing against the per-row parser."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.engine.snapshot import state_cache
from deltacommit.protocol.add_actions import (
    add_actions_table,
    parse_stats,
    partition_strings,
    stats_columns,
    stats_type,
)
from deltacommit.protocol.checkpoint import decode as checkpoint_decode
from deltacommit.protocol.files.lazy_files import LazyActionMap
from deltacommit.protocol.schema.column_mapping import mapping_mode, physical_name
from deltacommit.protocol.stats import arrays as stats_arrays
from deltacommit.protocol.stats.arrays import stats_from_struct
from deltacommit.protocol.stats.parsed import (
    stats_json_from_struct,
    stats_json_texts,
    stats_struct_array,
    stats_struct_type,
)
from tests.delta_tables import DATA
from tests.stats_parsing import json_parsed_rows

#: Extra columns deltacommit adds to deltalake 1.6.0's.
EXTRA = ("data_change", "deletion_vector")

TABLES = [
    "kernel/table-without-dv-small",
    "kernel/basic_partitioned",  # a null partition value
    "delta-golden/data-reader-partition-values",  # every partition type, nulls, no stats
    "delta-golden/data-skipping-basic-stats-all-types",
    "delta-golden/data-skipping-basic-stats-all-types-checkpoint",
    "delta-golden/data-reader-nested-struct",
    "delta-golden/basic-with-inserts-deletes-checkpoint",  # checkpoint, commits and removes after
    "delta-golden/multi-part-checkpoint",
    "delta-golden/data-reader-timestamp_ntz",
    "delta-golden/kernel-timestamp-partition-col-ISO8601",
    "delta-golden/decimal-various-scale-precision",
    "delta-golden/type-widening",
    "kernel/table-with-dv-small",  # deletion vectors
    "delta-golden/dv-partitioned-with-checkpoint",
    "kernel/v1-single-part-struct-stats-only",  # stats only as stats_parsed in the checkpoint
    "kernel/v2-checkpoints-parquet-with-sidecars",
    "kernel/v2-checkpoints-json-with-sidecars",
    "kernel/parsed-stats",
    "kernel/timestamp-partitioned-table",
    "delta-kernel-java/basic-dv-with-checkpoint",
]

#: Column-mapping tables: deltalake 1.6.0 keys their statistics by physical name.
MAPPED_TABLES = [
    "delta-golden/table-with-columnmapping-mode-name",
    "delta-golden/table-with-columnmapping-mode-id",
    "delta-golden/dv-with-columnmapping",
    "delta-golden/data-reader-timestamp_ntz-name-mode",
    "delta-kernel-java/data-reader-partition-values-column-mapping-name",
]


def theirs(uri: str, flatten: bool) -> pa.Table:
    return pa.table(deltalake.DeltaTable(uri).get_add_actions(flatten=flatten)).sort_by("path")


def ours(uri: str, flatten: bool, **kw: Any) -> pa.Table:
    out = dc.DeltaTable(uri).get_add_actions(flatten=flatten, **kw)
    return out.drop([c for c in out.column_names if c.startswith(EXTRA)]).sort_by("path")


def plain(schema: pa.Schema) -> pa.Schema:
    """``schema`` without field metadata (deltalake keeps the table's column-mapping metadata
    on its ``min``/``max`` fields)."""
    def strip(t: pa.DataType) -> pa.DataType:
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, strip(f.type), f.nullable) for f in t])
        return t
    return pa.schema([pa.field(f.name, strip(f.type), f.nullable) for f in schema])


def renamed(t: pa.DataType, names: dict[str, str]) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([pa.field(names.get(f.name, f.name), renamed(f.type, names), f.nullable)
                          for f in t])
    return t


def logical_of(uri: str) -> dict[str, str]:
    """Physical -> logical name of every field of a column-mapping table, however nested."""
    table = dc.DeltaTable(uri)
    mode = mapping_mode(table.configuration)
    out: dict[str, str] = {}

    def walk(fields: Any) -> None:
        for f in fields:
            out[physical_name(f, mode)] = f.name
            if pa.types.is_struct(f.type):
                walk(list(f.type))

    walk(list(table.schema))
    return out


@pytest.mark.parametrize("flatten", [False, True])
@pytest.mark.parametrize("name", TABLES)
def test_same_table_as_deltalake(name: str, flatten: bool) -> None:
    uri = str(DATA / name)
    mine, peer = ours(uri, flatten), theirs(uri, flatten)
    assert plain(mine.schema) == plain(peer.schema)
    assert mine.num_rows > 0
    assert mine.to_pylist() == peer.to_pylist()


def values(v: Any) -> Any:
    """A row's values with struct field names left out (they differ by design)."""
    if isinstance(v, dict):
        return tuple(values(x) for x in v.values())
    return v


@pytest.mark.parametrize("name", MAPPED_TABLES)
def test_column_mapping_tables_use_logical_names(name: str) -> None:
    _check_mapped(str(DATA / name))


def _written_table(tmp_path: Path, configuration: dict[str, str] | None = None) -> str:
    """A partitioned table with a checkpoint, commits after it that add files, and an
    overwrite after it that removes files the checkpoint holds."""
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("value", pa.string()), ("score", pa.float64()),
                        ("when", pa.timestamp("us", tz="UTC")), ("day", pa.string())])
    dc.DeltaTable.create(uri, schema, partition_by=["day"], configuration=configuration)
    when = dt.datetime(2026, 11, 25, 12, 30, tzinfo=dt.UTC)
    for i in range(6):
        day = None if i == 5 else f"2026-11-{20 + i % 3}"
        dc.write(uri, pa.table({"id": [i, i + 100], "value": [f"v{i}", None],
                                "score": [i / 2, None], "when": [when, when],
                                "day": [day, day]}, schema=schema))
    dc.DeltaTable(uri).checkpoint()
    for i in range(6, 9):
        dc.write(uri, pa.table({"id": [i], "value": ["late"], "score": [1.5], "when": [when],
                                "day": ["2026-11-23"]}, schema=schema))
    dc.write(uri, pa.table({"id": [42], "value": ["new"], "score": [0.0], "when": [when],
                            "day": ["2026-11-20"]}, schema=schema),
             mode="overwrite", predicate="day = '2026-11-20'")
    return uri


@pytest.mark.parametrize("flatten", [False, True])
def test_checkpoint_then_adds_and_removes(tmp_path: Path, flatten: bool) -> None:
    uri = _written_table(tmp_path)
    state_cache.clear()  # loaded from the checkpoint, not the writer's snapshot
    table = dc.DeltaTable(uri)
    files = table.snapshot.state.files
    assert isinstance(files, LazyActionMap) and files.is_lazy
    got = table.get_add_actions(flatten=flatten)
    # No Add object was built for the checkpoint's rows.
    assert files.is_lazy
    # files() is what it was, and lists the same files.
    state_cache.clear()
    fresh = dc.DeltaTable(uri).files()
    assert table.files() == fresh
    assert sorted(a.path for a in fresh) == sorted(got.column("path").to_pylist())
    assert len(fresh) == 8
    mine, peer = ours(uri, flatten), theirs(uri, flatten)
    assert plain(mine.schema) == plain(peer.schema)
    assert mine.to_pylist() == peer.to_pylist()
    assert got.column("data_change").to_pylist() == [True] * got.num_rows
    assert "deletion_vector" not in got.column_names


@pytest.mark.parametrize("configuration", [
    {"delta.dataSkippingNumIndexedCols": "2"},
    {"delta.dataSkippingNumIndexedCols": "-1"},
    {"delta.dataSkippingStatsColumns": "score,`when`"},
    {"delta.checkpoint.writeStatsAsStruct": "true", "delta.checkpoint.writeStatsAsJson": "false"},
])
def test_stats_columns_follow_table_properties(tmp_path: Path, configuration: dict[str, str]
                                               ) -> None:
    uri = _written_table(tmp_path, configuration)
    mine, peer = ours(uri, False), theirs(uri, False)
    assert plain(mine.schema) == plain(peer.schema)
    assert mine.to_pylist() == peer.to_pylist()


def test_partition_filters(tmp_path: Path) -> None:
    uri = _written_table(tmp_path)
    table = dc.DeltaTable(uri)
    for filters in ([("day", "=", "2026-11-21")], [("day", "=", None)],
                    [("day", "in", ["2026-11-20", "2026-11-23"])],
                    [[("day", "=", "2026-11-22")], [("day", "!=", None)]]):
        got = table.get_add_actions(partition_filters=filters)
        assert sorted(got.column("path").to_pylist()) == \
            sorted(a.path for a in table.files(partition_filters=filters))
    with pytest.raises(dc.InvalidArgumentError, match="id"):
        table.get_add_actions(partition_filters=[("id", "=", 1)])


@pytest.mark.parametrize("name", [
    "delta-golden/data-reader-partition-values",
    "delta-kernel-java/data-reader-partition-values-column-mapping-name",  # physical keys
])
def test_partition_filters_on_many_columns(name: str) -> None:
    table = dc.DeltaTable(str(DATA / name))
    for filters in ([("as_int", "=", "0")], [("as_int", "=", None)],
                    [("as_boolean", "=", "false"), ("as_string", "!=", "0")],
                    [("as_date", ">", "2021-09-01"), ("as_big_decimal", "in", ["0", "1"])]):
        got = table.get_add_actions(partition_filters=filters, flatten=True)
        expected = sorted(a.path for a in table.files(partition_filters=filters))
        assert sorted(got.column("path").to_pylist()) == expected
        assert 0 < len(expected) < len(table.files())


def test_deletion_vectors_are_listed() -> None:
    got = dc.DeltaTable(str(DATA / "kernel/table-with-dv-small")).get_add_actions(flatten=True)
    assert got.column("deletion_vector.cardinality").to_pylist() == [2]
    assert got.column("deletion_vector.storageType").to_pylist() == ["u"]


def test_empty_table_has_the_schema(tmp_path: Path) -> None:
    uri = str(tmp_path / "empty")
    dc.DeltaTable.create(uri, pa.schema([("id", pa.int64()), ("day", pa.string())]),
                         partition_by=["day"])
    for flatten in (False, True):
        mine, peer = ours(uri, flatten), theirs(uri, flatten)
        assert mine.num_rows == 0
        assert plain(mine.schema) == plain(peer.schema)


def test_stats_columns_property() -> None:
    assert stats_columns("a, b.c ,`d.e`.f,,`x``y`") == [
        ("a",), ("b", "c"), ("d.e", "f"), ("x`y",)]


# --------------------------------------------------------------------------- stats parsing

SCHEMA = pa.schema([
    ("i8", pa.int8()), ("i64", pa.int64()), ("f", pa.float64()), ("s", pa.string()),
    ("b", pa.bool_()), ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")),
    ("ntz", pa.timestamp("us")), ("dec", pa.decimal128(6, 2)), ("bin", pa.binary()),
    ("nested", pa.struct([("x", pa.int32()), ("y", pa.struct([("z", pa.string())]))])),
    ("arr", pa.list_(pa.int32())),
])

_texts = st.text(alphabet=st.characters(categories=("L", "N", "P", "Zs")),
                 max_size=8)
_values: dict[str, Any] = {
    "i8": st.integers(-200, 200),
    "i64": st.integers(-(2 ** 63), 2 ** 63 - 1),
    "f": st.one_of(st.floats(allow_nan=False, allow_infinity=False, width=64), st.integers(-9, 9),
                   st.just("NaN")),
    "s": _texts,
    "b": st.booleans(),
    "d": st.dates(dt.date(1900, 1, 1), dt.date(2200, 1, 1)).map(dt.date.isoformat),
    "ts": st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1)).map(
        lambda v: v.strftime("%Y-%m-%dT%H:%M:%S.") + f"{v.microsecond // 1000:03d}Z"),
    "ntz": st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1)).map(
        lambda v: v.strftime("%Y-%m-%dT%H:%M:%S.") + f"{v.microsecond // 1000:03d}"),
    "dec": st.decimals(-9999, 9999, places=2).map(float),
    "nested": st.fixed_dictionaries({}, optional={
        "x": st.integers(-1000, 1000), "y": st.fixed_dictionaries({}, optional={"z": _texts})}),
}
_bounds = st.fixed_dictionaries({}, optional=_values)
_counts = st.fixed_dictionaries({}, optional={
    **{k: st.integers(0, 10) for k in _values if k != "nested"},
    "nested": st.fixed_dictionaries({}, optional={
        "x": st.integers(0, 9), "y": st.fixed_dictionaries({}, optional={"z": st.integers(0, 9)})}),
    "bin": st.integers(0, 9), "arr": st.integers(0, 9)})
_stats = st.fixed_dictionaries({}, optional={
    "numRecords": st.integers(0, 10 ** 9), "minValues": _bounds, "maxValues": _bounds,
    "nullCount": _counts, "tightBounds": st.booleans()})
_text = st.one_of(
    st.none(), st.just(""),
    _stats.map(lambda s: json.dumps(s, separators=(",", ":"))),
    _stats.map(lambda s: json.dumps(s, indent=1)),  # spans lines
    st.just("not json"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_text, max_size=12))
def test_parse_stats_matches_the_row_by_row_parser(texts: list[str | None]) -> None:
    type_ = stats_type(SCHEMA, [], {})
    arr = pa.array(texts, pa.string())
    got = parse_stats(arr, type_, type_)
    assert got.type == type_
    assert got.to_pylist() == stats_struct_array(texts, type_).to_pylist()


def test_parse_stats_fast_path_values() -> None:
    type_ = stats_type(SCHEMA, [], {})
    text = json.dumps({"numRecords": 3, "minValues": {
        "i8": 1, "f": 2, "d": "2026-11-25", "ts": "2026-11-25T01:02:03.004Z",
        "ntz": "2026-11-25T01:02:03.004", "dec": 12.5, "b": False, "nested": {"y": {"z": "q"}}},
        "nullCount": {"bin": 1, "arr": 2, "nested": {"x": 0}}})
    [row] = parse_stats(pa.array([text]), type_, type_).to_pylist()
    assert row["numRecords"] == 3
    assert row["minValues"]["d"] == dt.date(2026, 11, 25)
    assert row["minValues"]["ts"] == dt.datetime(2026, 11, 25, 1, 2, 3, 4000, tzinfo=dt.UTC)
    assert row["minValues"]["ntz"] == dt.datetime(2026, 11, 25, 1, 2, 3, 4000)
    assert row["minValues"]["dec"] == Decimal("12.50")
    assert row["minValues"]["nested"] == {"x": None, "y": {"z": "q"}}
    assert row["nullCount"]["arr"] == 2 and row["maxValues"] is None
    assert "bin" not in row["minValues"] and "arr" not in row["minValues"]


# --------------------------------------------------------------------------- partition values

_maps = st.lists(st.one_of(
    st.just([("day", "d1"), ("x", "1")]),  # the common shape: same keys, same order
    st.lists(st.tuples(st.sampled_from(["day", "x", "y"]), st.one_of(st.none(), _texts)),
             max_size=3, unique_by=lambda kv: kv[0])), min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(_maps, st.integers(0, 3), st.integers(0, 3))
def test_partition_strings_match_lookups(rows: list[Any], start: int, cut: int) -> None:
    arr = pa.array(rows, pa.map_(pa.string(), pa.string()))
    start = min(start, len(rows))
    arr = arr.slice(start, max(0, len(rows) - start - cut))
    keys = ["day", "x"]
    got = [a.to_pylist() for a in partition_strings(arr, keys)]
    expected = [[dict(r).get(k) for r in rows[start:start + len(arr)]] for k in keys]
    assert got == expected


@pytest.mark.parametrize("part_bytes", [1, 97, 4096])
def test_parse_stats_in_parts(monkeypatch: pytest.MonkeyPatch, part_bytes: int) -> None:
    """The texts split at row boundaries into parts read on threads come back in order; a
    part Arrow's reader refuses is parsed row by row, the other parts by Arrow."""
    monkeypatch.setattr(stats_arrays, "_PART_BYTES", part_bytes)
    type_ = stats_type(SCHEMA, [], {})
    texts: list[str | None] = [
        None if i % 7 == 0 else "" if i % 11 == 0 else
        json.dumps({"numRecords": i, "minValues": {"i64": -i, "s": f"v{i}",
                                                   "f": "NaN" if i == 100 else i / 4}})
        for i in range(300)]
    arr = pa.array(texts, pa.string()).slice(5, 280)
    slow: list[int] = []
    row_by_row = stats_arrays.stats_struct_array

    def counted(stats: Any, t: Any) -> Any:
        slow.append(len(stats))
        return row_by_row(stats, t)

    monkeypatch.setattr(stats_arrays, "stats_struct_array", counted)
    got = parse_stats(arr, type_, type_)
    assert got.to_pylist() == stats_struct_array(texts[5:285], type_).to_pylist()
    assert got.to_pylist()[95]["minValues"]["f"] is None  # the "NaN" of row 100
    assert len(slow) == 1 and slow[0] < len(arr)  # only the part holding row 100


# --------------------------------------------------------------------------- stats_parsed


def _checkpoint_add_fields(uri: str) -> set[str]:
    cp = max(Path(uri, "_delta_log").glob("*.checkpoint.parquet"))
    return {f.name for f in pq.read_schema(cp).field("add").type}


@pytest.mark.parametrize("flatten", [False, True])
def test_default_checkpoints_carry_stats_parsed_read_alike(
        tmp_path: Path, flatten: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint written with the default settings has typed statistics (as Spark's), which
    ``get_add_actions`` takes instead of parsing the checkpoint files' JSON: the table is
    deltalake's all the same."""
    uri = _written_table(tmp_path, {"delta.checkpointInterval": "100"})
    assert {"stats", "stats_parsed", "partitionValues_parsed"} <= _checkpoint_add_fields(uri)
    state_cache.clear()
    table = dc.DeltaTable(uri)
    [(checkpoint_rows, parsed), (tail, none)] = table.snapshot.add_rows_parsed()
    assert parsed is not None and len(parsed) == len(checkpoint_rows) and none is None
    counts = json_parsed_rows(monkeypatch)
    got = table.get_add_actions(flatten=flatten)
    assert sum(counts) == len(tail) == 4  # only the adds committed after the checkpoint
    mine = got.drop([c for c in got.column_names if c.startswith(EXTRA)]).sort_by("path")
    peer = theirs(uri, flatten)
    assert plain(mine.schema) == plain(peer.schema)
    assert mine.to_pylist() == peer.to_pylist()
    # And as parsing every file's JSON gives it.
    snap = table.snapshot
    from_json = add_actions_table(snap.add_rows(), snap.schema, snap.partition_columns,
                                  snap.configuration, flatten=flatten)
    assert got.sort_by("path").to_pylist() == from_json.sort_by("path").to_pylist()


def test_write_stats_as_struct_false_writes_none(tmp_path: Path) -> None:
    uri = _written_table(tmp_path, {"delta.checkpoint.writeStatsAsStruct": "false"})
    fields = _checkpoint_add_fields(uri)
    assert "stats" in fields and not fields & {"stats_parsed", "partitionValues_parsed"}
    state_cache.clear()
    table = dc.DeltaTable(uri)
    assert all(parsed is None for _, parsed in table.snapshot.add_rows_parsed())
    mine, peer = ours(uri, False), theirs(uri, False)
    assert mine.to_pylist() == peer.to_pylist()


@pytest.mark.parametrize("name", [
    "kernel/v1-single-part-struct-stats-only",
    "kernel/v1-multi-part-partitioned-struct-stats-only",
    "kernel/v2-parquet-sidecars-struct-stats-only",
])
def test_spark_checkpoints_with_only_stats_parsed_give_row_counts(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = str(DATA / name)
    state_cache.clear()
    table = dc.DeltaTable(uri)
    chunks = table.snapshot.add_rows_parsed()
    assert chunks[0][1] is not None
    assert chunks[0][0].field("stats").null_count == 0  # texts made from the structs
    counts = json_parsed_rows(monkeypatch)
    got = table.get_add_actions()
    assert sum(counts) == sum(len(rows) for rows, parsed in chunks if parsed is None)
    assert got.column("num_records").null_count == 0
    peer = theirs(uri, False)
    assert sorted(got.column("num_records").to_pylist()) == sorted(
        peer.column("num_records").to_pylist())
    assert ours(uri, False).to_pylist() == peer.to_pylist()


def _check_mapped(uri: str) -> None:
    """deltacommit's table is deltalake's, keyed by logical names where deltalake's are
    physical."""
    names = logical_of(uri)
    mine, peer = ours(uri, False), theirs(uri, False)
    expected = pa.schema([pa.field(f.name, renamed(f.type, names), f.nullable)
                          for f in plain(peer.schema)])
    assert plain(mine.schema) == expected
    assert [values(r) for r in mine.to_pylist()] == [values(r) for r in peer.to_pylist()]
    flat = ours(uri, True)
    flat_peer = theirs(uri, True)
    assert flat.num_columns == flat_peer.num_columns
    for mine_name, peer_name in zip(flat.column_names, flat_peer.column_names, strict=True):
        assert mine_name == ".".join(names.get(p, p) for p in peer_name.split("."))
    assert [values(r) for r in flat.to_pylist()] == [values(r) for r in flat_peer.to_pylist()]


def test_column_mapping_table_checkpointed_here(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A column-mapping table keys ``stats_parsed`` by physical name; read by logical name."""
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("value", pa.string()),
                        ("nested", pa.struct([("x", pa.int32())])), ("day", pa.string())])
    dc.DeltaTable.create(uri, schema, partition_by=["day"],
                         configuration={"delta.columnMapping.mode": "name"})
    for i in range(4):
        dc.write(uri, pa.table({"id": [i, -i], "value": [f"v{i}", None],
                                "nested": [{"x": i}, None], "day": [f"d{i % 2}"] * 2},
                               schema=schema))
    dc.DeltaTable(uri).checkpoint()
    dc.write(uri, pa.table({"id": [9], "value": ["late"], "nested": [{"x": 9}],
                            "day": ["d2"]}, schema=schema))
    [cp] = Path(uri, "_delta_log").glob("*.checkpoint.parquet")
    parsed_type = pq.read_schema(cp).field("add").type.field("stats_parsed").type
    table = dc.DeltaTable(uri)
    physical = {f.name: physical_name(f, "name") for f in table.schema}
    assert physical["id"] != "id"
    assert {f.name for f in parsed_type.field("minValues").type} == {
        physical["id"], physical["value"], physical["nested"]}
    state_cache.clear()
    counts = json_parsed_rows(monkeypatch)
    got = dc.DeltaTable(uri).get_add_actions(flatten=True)
    assert sum(counts) == 1  # the add after the checkpoint
    assert sorted(got.column("min.id").to_pylist()) == [-3, -2, -1, 0, 9]
    assert sorted(got.column("max.nested.x").to_pylist()) == [0, 1, 2, 3, 9]
    _check_mapped(uri)


def _add_line(path: str, stats: dict[str, Any] | str, day: str = "a") -> str:
    text = stats if isinstance(stats, str) else json.dumps(stats)
    return json.dumps({"add": {"path": path, "partitionValues": {"day": day}, "size": 1,
                               "modificationTime": 1, "dataChange": True, "stats": text}})


def test_stats_arrow_refuses_are_right(tmp_path: Path) -> None:
    """NaN float bounds and decimals with more places than their type: Arrow's JSON reader
    refuses them, so those texts are parsed row by row (the misfit left null), in the
    checkpoint's ``stats_parsed`` and in ``get_add_actions`` alike."""
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("f", pa.float64()), ("g", pa.float32()),
                        ("d", pa.decimal128(6, 2)), ("day", pa.string())])
    dc.DeltaTable.create(uri, schema, partition_by=["day"])
    good = {"numRecords": 2, "minValues": {"id": 1, "f": 0.5, "g": 0.25, "d": 12.5},
            "maxValues": {"id": 2, "f": 1.5, "g": 0.75, "d": 99.99},
            "nullCount": {"id": 0, "f": 0, "g": 0, "d": 0}}
    nan = {**good, "minValues": {"id": 3, "f": "NaN", "g": "NaN", "d": 1.005}}
    lines = [_add_line(f"day=a/{i}.parquet", good if i % 3 else nan) for i in range(9)]
    log = Path(uri, "_delta_log")
    (log / f"{1:020d}.json").write_text("\n".join(lines) + "\n")
    state_cache.clear()
    dc.DeltaTable(uri).checkpoint()
    (log / f"{2:020d}.json").write_text(
        _add_line("day=b/tail.parquet", nan, "b") + "\n" + _add_line("day=b/t2.parquet", good, "b")
        + "\n")
    [cp] = log.glob("*.checkpoint.parquet")
    rows = {r["path"]: r["stats_parsed"] for r in pq.read_table(cp).column("add").to_pylist()
            if r}
    assert rows["day=a/0.parquet"]["minValues"] == {"id": 3, "f": None, "g": None, "d": None}
    assert rows["day=a/0.parquet"]["numRecords"] == 2
    assert rows["day=a/1.parquet"]["minValues"] == {"id": 1, "f": 0.5, "g": 0.25,
                                                    "d": Decimal("12.50")}
    state_cache.clear()
    table = dc.DeltaTable(uri)
    got = table.get_add_actions(flatten=True).sort_by("path")
    snap = table.snapshot
    from_json = add_actions_table(snap.add_rows(), snap.schema, snap.partition_columns,
                                  snap.configuration, flatten=True).sort_by("path")
    assert got.to_pylist() == from_json.to_pylist()
    by_path = {r["path"]: r for r in got.to_pylist()}
    assert by_path["day=a/0.parquet"]["min.f"] is None
    assert by_path["day=a/0.parquet"]["min.d"] is None
    assert by_path["day=a/0.parquet"]["min.id"] == 3
    assert by_path["day=b/tail.parquet"]["min.id"] == 3
    assert by_path["day=a/1.parquet"]["max.d"] == Decimal("99.99")


# --------------------------------------------------------------------------- stats_from_struct

_NTZ = frozenset({("ntz",)})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_text, st.booleans()), max_size=12))
def test_stats_from_struct_is_parse_stats(rows: list[tuple[str | None, bool]]) -> None:
    """The typed path gives what parsing the texts gives, where the checkpoint has the struct
    of every row and where it has only the struct (its texts made from it, as read)."""
    texts = [t for t, _ in rows]
    logical = stats_type(SCHEMA, [], {})
    checkpoint = stats_struct_type(SCHEMA, [])
    parsed = stats_struct_array(texts, checkpoint)
    arr = pa.array(texts, pa.string())
    assert stats_from_struct(parsed, arr, logical, logical).to_pylist() == \
        parse_stats(arr, logical, logical).to_pylist()
    # Rows whose text the checkpoint left out: the reader makes it from the struct.
    only = [stats_json_from_struct(p, _NTZ) if drop else t
            for (t, drop), p in zip(rows, parsed.to_pylist(), strict=True)]
    arr = pa.array(only, pa.string())
    assert stats_from_struct(parsed, arr, logical, logical).to_pylist() == \
        parse_stats(arr, logical, logical).to_pylist()


def test_stats_from_struct_parses_what_the_struct_cannot_say(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A timestamp finer than a millisecond (the text rounds it) comes from the text, a
    non-finite float is null (JSON has none); a float stored narrower than the table's type
    sends the whole column to the texts."""
    logical = stats_type(pa.schema([("t", pa.timestamp("us", tz="UTC")), ("f", pa.float64())]),
                         [], {})
    fine = dt.datetime(2026, 1, 1, 0, 0, 0, 1500, tzinfo=dt.UTC)
    whole = dt.datetime(2026, 1, 1, 0, 0, 0, 2000, tzinfo=dt.UTC)
    parsed = pa.array([{"numRecords": 1, "maxValues": {"t": fine, "f": 1.0}},
                       {"numRecords": 2, "maxValues": {"t": whole, "f": float("nan")}},
                       {"numRecords": 3, "maxValues": {"t": whole, "f": 2.5}}], logical)
    texts = pa.array([stats_json_from_struct(r) for r in parsed.to_pylist()])
    counts = json_parsed_rows(monkeypatch)
    got = stats_from_struct(parsed, texts, logical, logical).to_pylist()
    assert counts == [1]  # the first row only
    assert got == parse_stats(texts, logical, logical).to_pylist()
    assert [r["maxValues"] for r in got] == [{"t": whole, "f": 1.0}, {"t": whole, "f": None},
                                             {"t": whole, "f": 2.5}]
    bounds = pa.struct([("t", pa.timestamp("us", tz="UTC")), ("f", pa.float32())])
    narrow = pa.struct([logical.field("numRecords"), logical.field("nullCount"),
                        ("minValues", bounds), ("maxValues", bounds)])
    texts = pa.array(['{"numRecords":1,"maxValues":{"f":0.1}}'])
    parsed = pa.array([{"numRecords": 1, "maxValues": {"t": None, "f": 0.1}}], narrow)
    assert stats_from_struct(parsed, texts, logical, logical).to_pylist()[0][
        "maxValues"]["f"] == 0.1
    assert counts[1:] == [1]


def test_typed_stats_are_read_when_asked_for_or_else_parsed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Listing files does not decode the checkpoint's ``stats_parsed``; ``get_add_actions`` reads
    it then, and if log cleanup took the checkpoint meanwhile, or another writer wrote it
    again, it parses the JSON texts, with the same result."""
    uri = _written_table(tmp_path, {"delta.checkpointInterval": "100"})
    peer = theirs(uri, False)
    state_cache.clear()
    table = dc.DeltaTable(uri)
    assert len(table.files([("day", "=", "2026-11-21")])) == 2  # reads the add rows
    files = table.snapshot.state.files
    assert isinstance(files, LazyActionMap) and files.is_lazy
    [cp] = Path(uri, "_delta_log").glob("*.checkpoint.parquet")
    body = pq.read_table(cp)
    cp.rename(cp.with_name("moved.parquet"))
    counts = json_parsed_rows(monkeypatch)
    got = table.get_add_actions()
    assert sum(counts) == got.num_rows == 8  # every file's text
    mine = got.drop([c for c in got.column_names if c.startswith(EXTRA)]).sort_by("path")
    assert mine.to_pylist() == peer.to_pylist()
    # The same version's checkpoint written again, its rows in another order: not the file
    # the rows came from, so its statistics are not taken for them.
    state_cache.clear()
    cp.with_name("moved.parquet").rename(cp)
    table = dc.DeltaTable(uri)
    assert len(table.files([("day", "=", "2026-11-21")])) == 2
    pq.write_table(body.take(list(reversed(range(body.num_rows)))), cp, compression="none")
    counts.clear()
    got = table.get_add_actions()
    assert sum(counts) == 8
    mine = got.drop([c for c in got.column_names if c.startswith(EXTRA)]).sort_by("path")
    assert mine.to_pylist() == peer.to_pylist()


# --------------------------------------------------------------------------- stats_json_texts

_BOUND = pa.struct([
    ("i", pa.int32()), ("f", pa.float64()), ("g", pa.float32()), ("s", pa.string()),
    ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")), ("ntz", pa.timestamp("us")),
    ("kol", pa.timestamp("us", tz="Asia/Kolkata")), ("tms", pa.timestamp("ms", tz="UTC")),
    ("tns", pa.timestamp("ns", tz="UTC")), ("dec", pa.decimal128(6, 2)),
    ("n", pa.struct([("x", pa.int64()), ("y", pa.struct([("z", pa.string())]))])),
])
_COUNT = pa.struct([("i", pa.int64()), ("s", pa.int64()),
                    ("n", pa.struct([("x", pa.int64())]))])
_PARSED = pa.struct([("numRecords", pa.int64()), ("minValues", _BOUND), ("maxValues", _BOUND),
                     ("nullCount", _COUNT), ("tightBounds", pa.bool_())])
_US = st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _instant(us: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=us)


_bound_values = st.fixed_dictionaries({}, optional={
    "i": st.integers(-(2 ** 31), 2 ** 31 - 1),
    "f": st.floats(), "g": st.floats(width=32),
    "s": st.text(max_size=6),
    "d": st.dates(),
    "ts": st.one_of(_US, st.integers(-10_000, 10_000)).map(_instant),
    "ntz": st.one_of(_US, st.integers(-10_000, 10_000)).map(
        lambda us: _instant(us).replace(tzinfo=None)),
    "kol": st.integers(-62_135_596_800_000_000 + 86_400_000_000,
                       253_402_300_799_999_999 - 86_400_000_000).map(_instant),
    "tms": _US.map(lambda us: _instant(us - us % 1000)),
    "tns": st.integers(-9_000_000_000_000_000, 9_000_000_000_000_000).map(_instant),
    "dec": st.decimals(-9999, 9999, places=2, allow_nan=False),
    "n": st.one_of(st.none(), st.fixed_dictionaries({}, optional={
        "x": st.integers(-5, 5),
        "y": st.one_of(st.none(), st.fixed_dictionaries({}, optional={"z": st.text(max_size=3)})),
    })),
})
_parsed_rows = st.one_of(st.none(), st.fixed_dictionaries({}, optional={
    "numRecords": st.integers(0, 2 ** 40),
    "minValues": st.one_of(st.none(), _bound_values),
    "maxValues": st.one_of(st.none(), _bound_values),
    "nullCount": st.one_of(st.none(), st.fixed_dictionaries({}, optional={
        "i": st.integers(0, 9), "s": st.integers(0, 9),
        "n": st.fixed_dictionaries({}, optional={"x": st.integers(0, 9)})})),
    "tightBounds": st.booleans(),
}))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(_parsed_rows, max_size=10), start=st.integers(0, 3))
def test_stats_texts_column_wise_are_the_row_by_row_texts(rows: list[Any], start: int) -> None:
    """The texts made column by column from ``stats_parsed`` (a checkpoint without JSON
    statistics) are exactly the row-at-a-time ones: sub-millisecond bounds cut down or rounded
    up, instants before 1970 and at the ends of a datetime's range, zones other than UTC,
    time zone-less columns, non-finite floats, nested structs and null rows at every level,
    and a slice of the array."""
    arr = pa.array(rows, _PARSED)
    ntz = frozenset({("ntz",)})
    for part in (arr, arr.slice(min(start, len(arr)))):
        assert stats_json_texts(part, ntz).to_pylist() == \
            [stats_json_from_struct(r, ntz) for r in part.to_pylist()]


# --------------------------------------------------------------------------- rows without texts


def _recorded_reads(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The columns of every read of a checkpoint file from now on."""
    from deltacommit.engine.snapshot import checkpoint_reader

    reads: list[list[str]] = []
    real = checkpoint_reader._CheckpointFile.read

    def read(self: Any, columns: list[str]) -> pa.Table:
        reads.append(list(columns))
        return real(self, columns)

    monkeypatch.setattr(checkpoint_reader._CheckpointFile, "read", read)
    return reads


@pytest.mark.parametrize("texts", [True, False], ids=["json-and-struct", "struct-only"])
def test_file_table_from_typed_statistics_never_reads_the_texts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, texts: bool) -> None:
    """Where the checkpoint's ``stats_parsed`` answers for every file, ``get_add_actions``
    reads its rows without the JSON statistics (most of their bytes) and gives the same table
    as from the whole rows; files listed afterwards get their texts by reading that one column,
    not the rows again.  A checkpoint holding statistics only as ``stats_parsed`` does not
    build each file's text for the table; files listed afterwards have them."""
    config = {"delta.checkpointInterval": "100"}
    if not texts:
        config["delta.checkpoint.writeStatsAsJson"] = "false"
    uri = _written_table(tmp_path, config)
    state_cache.clear()
    whole_rows = dc.DeltaTable(uri)
    expected_files = {a.path: a for a in whole_rows.files()}
    assert all(a.stats for a in expected_files.values())
    expected = whole_rows.get_add_actions()
    state_cache.clear()
    reads = _recorded_reads(monkeypatch)
    built: list[int] = []
    real_texts = checkpoint_decode.stats_json_texts
    monkeypatch.setattr(checkpoint_decode, "stats_json_texts",
                        lambda *a, **k: built.append(1) or real_texts(*a, **k))
    table = dc.DeltaTable(uri)
    got = table.get_add_actions()
    assert got.to_pylist() == expected.to_pylist()
    assert got.num_rows == len(expected_files) == 8
    assert reads and not any("add.stats" in cols for cols in reads)
    assert any("add.path" in cols for cols in reads)  # the rows were read, without texts
    assert ["add.stats_parsed"] in reads and built == []
    del reads[:]
    assert {a.path: a for a in table.files()} == expected_files
    if texts:
        assert reads == [["add.path", "add.stats"]]
    else:
        assert len(reads) == 1 and "add.stats_parsed" in reads[0] and built
    del reads[:]
    assert table.get_add_actions().to_pylist() == expected.to_pylist()
    assert reads == []


def test_file_table_reads_the_texts_where_typed_statistics_fall_short(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Delta's ``parsed-stats`` table has rows its ``stats_parsed`` cannot answer for: their
    texts are added to the rows already read (one column), and the table is deltalake's."""
    uri = str(DATA / "kernel/parsed-stats")
    state_cache.clear()
    reads = _recorded_reads(monkeypatch)
    mine = ours(uri, False)
    assert ["add.path", "add.stats"] in reads
    whole = [cols for cols in reads if "add.stats" in cols and cols != ["add.path", "add.stats"]]
    assert whole == []  # the rows were not read again with their texts
    assert mine.to_pylist() == theirs(uri, False).to_pylist()


def test_struct_only_stats_is_stats_from_struct_when_it_answers() -> None:
    """``struct_only_stats`` gives exactly ``stats_from_struct``'s statistics for rows that all
    have a text, and None where some row would need its text."""
    logical = stats_type(pa.schema([("a", pa.int64()), ("s", pa.string())]), [], {})
    parsed_type = pa.struct([("numRecords", pa.int64()),
                             ("minValues", pa.struct([("a", pa.int64()), ("s", pa.string())])),
                             ("maxValues", pa.struct([("a", pa.int64()), ("s", pa.string())])),
                             ("nullCount", pa.struct([("a", pa.int64()), ("s", pa.int64())]))])
    rows = [{"numRecords": 2, "minValues": {"a": 1, "s": "x"}, "maxValues": {"a": 5, "s": "y"},
             "nullCount": {"a": 0, "s": 1}},
            {"numRecords": 1, "minValues": {"a": 7, "s": None}, "maxValues": {"a": 7, "s": None},
             "nullCount": {"a": 0, "s": 1}}]
    parsed = pa.array(rows, parsed_type)
    texts = pa.array([json.dumps(r) for r in rows])
    answer = stats_arrays.struct_only_stats(parsed, logical, logical)
    assert answer is not None
    assert answer.to_pylist() == stats_from_struct(parsed, texts, logical, logical).to_pylist()
    with_null = pa.array([*rows, None], parsed_type)
    assert stats_arrays.struct_only_stats(with_null, logical, logical) is None
    narrow = pa.array([{"numRecords": 2}], pa.struct([("numRecords", pa.int64())]))
    assert stats_arrays.struct_only_stats(narrow, logical, logical) is None
    assert stats_arrays.struct_only_stats(None, logical, logical) is None
