"""The checkpoint format: schema, round trips, foreign layouts, ``_last_checkpoint``, intervals."""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltacommit.engine.hooks.checkpoint import LastCheckpoint, last_checkpoint_checksum
from deltacommit.errors import CorruptLogError, InvalidArgumentError
from deltacommit.protocol.actions import Add, Metadata, Protocol, Remove, Txn, UnknownAction
from deltacommit.protocol.checkpoint.decode import decode_checkpoint
from deltacommit.protocol.checkpoint.encode import (
    CheckpointOptions,
    adds_to_arrow,
    encode_checkpoint,
)
from deltacommit.protocol.checkpoint.schema import CHECKPOINT_SCHEMA
from deltacommit.protocol.checkpoint.v2 import v2_sidecars
from deltacommit.protocol.files.lazy_files import LazyActionMap
from deltacommit.protocol.replay import TableState
from deltacommit.protocol.stats.parsed import (
    partition_struct_array,
    partition_struct_column,
    partition_struct_type,
    stats_struct_array,
    stats_struct_type,
)
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.intervals import parse_interval_ms
from tests.stats_parsing import json_parsed_rows

NOW = 1_800_000_000_000
WEEK = 7 * 86_400_000


def sample_state() -> TableState:
    s = TableState()
    s.apply(0, [
        Protocol(3, 7, ["timestampNtz"], ["timestampNtz", "appendOnly"]),
        Metadata(id="m-1", schema_string='{"type":"struct","fields":[]}',
                 partition_columns=["day", "region"],
                 configuration={"delta.appendOnly": "false", "k": "v"}, name="events",
                 description="d", created_time=123),
        Txn("app-1", 4, NOW - 10),
        UnknownAction("domainMetadata", {"domain": "delta.rowTracking",
                                         "configuration": '{"rowIdHighWaterMark":3}',
                                         "removed": False}),
    ])
    s.apply(1, [
        Add("day=2026-11-22/region=eu/a%20b.parquet", {"day": "2026-11-22", "region": "eu"}, 10,
            NOW - 5, True, '{"numRecords":3}', tags={"t": "1"}, base_row_id=7,
            default_row_commit_version=1),
        Add("day=2026-11-22/region=__HIVE_DEFAULT_PARTITION__/b.parquet",
            {"day": "2026-11-22", "region": None}, 11, NOW - 5, False, None),
        Add("c.parquet", {"day": "2026-11-23", "region": "us"}, 12, NOW - 5, True, None,
            deletion_vector={"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
                             "offset": 4, "sizeInBytes": 40, "cardinality": 6}),
        Add("old.parquet", {"day": "2026-11-20", "region": "eu"}, 13, NOW - 5, True, None),
        Add("older.parquet", {"day": "2026-11-20", "region": "eu"}, 14, NOW - 5, True, None),
    ])
    s.apply(2, [
        Remove("old.parquet", NOW - 1000, True, True, {"day": "2026-11-20", "region": "eu"}, 13),
        Remove("older.parquet", NOW - WEEK - 1, True, True, {"day": "2026-11-20", "region": "eu"}),
    ])
    return s


def round_trip(state: TableState, cutoff: int = NOW - WEEK) -> TableState:
    encoded = encode_checkpoint(state, cutoff)
    buf = io.BytesIO()
    pq.write_table(encoded.table, buf)
    table = pq.read_table(io.BytesIO(buf.getvalue()))
    return decode_checkpoint(table, state.version, "test")


def test_round_trip_keeps_every_action_and_expires_old_tombstones() -> None:
    state = sample_state()
    back = round_trip(state)
    assert back.version == 2
    assert back.protocol == state.protocol
    assert back.metadata == state.metadata
    assert back.app_txns == state.app_txns
    assert back.domains == state.domains
    assert isinstance(back.files, LazyActionMap) and back.files.is_lazy
    assert dict(back.files.items()) == state.files
    # The tombstone deleted more than a week before "now" is gone; the recent one stays,
    # without stats or tags (checkpoint tombstones only serve VACUUM).
    assert list(back.tombstones) == ["old.parquet"]
    assert back.tombstones["old.parquet"] == state.tombstones["old.parquet"]


def test_rewriting_a_lazily_loaded_checkpoint_needs_no_objects() -> None:
    state = round_trip(sample_state())
    state.apply(3, [Add("new.parquet", {"day": "2026-11-24", "region": "eu"}, 20, NOW, True, None),
                    Remove("c.parquet", NOW, True, True, {}, 12, deletion_vector=dict(
                        state.files["c.parquet#uab^-aqEH.-t@S}K{vb[*k^@4"].deletion_vector or {}))])
    files = state.files
    assert isinstance(files, LazyActionMap)
    again = round_trip(state)
    assert files.is_lazy  # the rewrite went Arrow to Arrow
    assert sorted(again.files) == sorted(
        ["day=2026-11-22/region=eu/a b.parquet",
         "day=2026-11-22/region=__HIVE_DEFAULT_PARTITION__/b.parquet", "new.parquet"])
    assert sorted(again.tombstones) == ["c.parquet#uab^-aqEH.-t@S}K{vb[*k^@4", "old.parquet"]


def test_protocol_features_are_null_below_reader_3_and_writer_7() -> None:
    s = TableState()
    s.apply(0, [Protocol(1, 2, None, ["ignored"]),
                Metadata(id="x", schema_string="{}", partition_columns=[])])
    row = encode_checkpoint(s, 0).table.column("protocol").to_pylist()[0]
    assert row == {"minReaderVersion": 1, "minWriterVersion": 2, "readerFeatures": None,
                   "writerFeatures": None}


def test_schema_matches_what_delta_rs_writes(tmp_path: Path) -> None:
    """Every action column has the fields (names and types) delta-rs writes, except that
    tombstones carry no stats or tags, as PROTOCOL.md says."""
    uri = str(tmp_path / "t")
    deltalake.write_deltalake(uri, pa.table({"x": [1, 2], "p": ["a", "b"]}), partition_by=["p"])
    deltalake.DeltaTable(uri).create_checkpoint()
    theirs = pq.read_schema(next((tmp_path / "t" / "_delta_log").glob("*.checkpoint.parquet")))
    for field in CHECKPOINT_SCHEMA:
        their_type = theirs.field(field.name).type
        ours = {f.name: f for f in field.type}
        their_fields = {f.name: f for f in their_type}
        expected = set(their_fields) - ({"stats", "tags"} if field.name == "remove" else set())
        assert set(ours) == expected, field.name
        for name, f in ours.items():
            t = their_fields[name]
            assert f.nullable == t.nullable, (field.name, name)
            if pa.types.is_map(f.type):
                assert pa.types.is_map(t.type)
            else:
                assert str(f.type).split("<")[0] == str(t.type).split("<")[0], (field.name, name)


def spark_like(table: pa.Table) -> pa.Table:
    """Re-lay a checkpoint the way Spark writes one: every field nullable, map entries named
    ``key_value``, a ``stats_parsed`` struct inside ``add``, columns in another order and a
    ``commitInfo`` column that is always null."""

    def relax(t: pa.DataType) -> pa.DataType:
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, relax(f.type), True) for f in t])
        if pa.types.is_map(t):
            return pa.map_(pa.field("key", pa.string(), False), pa.field("value", pa.string(), True))
        if pa.types.is_list(t):
            return pa.list_(pa.field("element", relax(t.value_type), True))
        return t

    cols: dict[str, Any] = {}
    for name in ["txn", "add", "remove", "metaData", "protocol"]:
        arr = table.column(name).combine_chunks()
        relaxed = arr.cast(relax(arr.type))
        if name == "add":
            # Spark's stats_parsed holds what the JSON stats hold (none where they are null).
            json_stats = arr.field("stats").to_pylist()
            stats = pa.StructArray.from_arrays(
                [pa.array([None if s is None else json.loads(s)["numRecords"]
                           for s in json_stats], pa.int64())], names=["numRecords"],
                mask=pc.or_(arr.is_null(), arr.field("stats").is_null()))
            own = [f.name for f in relaxed.type if not f.name.endswith("_parsed")]
            children = [relaxed.field(n) for n in own] + [stats]
            names = [*own, "stats_parsed"]
            relaxed = pa.StructArray.from_arrays(children, names=names, mask=arr.is_null())
        cols[name] = relaxed
    cols["commitInfo"] = pa.nulls(table.num_rows, pa.struct([("operation", pa.string())]))
    return pa.table(cols)


def test_reads_a_spark_style_checkpoint_layout() -> None:
    state = sample_state()
    table = encode_checkpoint(state, NOW - WEEK).table
    back = decode_checkpoint(spark_like(table), 2, "spark")
    assert back.protocol == state.protocol and back.metadata == state.metadata
    assert dict(back.files.items()) == state.files
    assert list(back.tombstones) == ["old.parquet"]
    assert back.domains == {}  # Spark's layout above has no domainMetadata column


def test_missing_protocol_or_metadata_is_corrupt() -> None:
    table = encode_checkpoint(sample_state(), 0).table
    no_protocol = table.set_column(table.schema.get_field_index("protocol"), "protocol",
                                   pa.nulls(table.num_rows, table.schema.field("protocol").type))
    with pytest.raises(CorruptLogError, match="exactly one protocol"):
        decode_checkpoint(no_protocol, 2, "cp")
    doubled = pa.concat_tables([table, table.slice(1, 1)])
    with pytest.raises(CorruptLogError, match="exactly one metaData"):
        decode_checkpoint(doubled, 2, "cp")


def test_v2_checkpoint_metadata_must_name_the_files_version() -> None:
    table = encode_checkpoint(sample_state(), 0).table
    meta = pa.array([None] * (table.num_rows - 1) + [{"version": 2}],
                    pa.struct([("version", pa.int64())]))
    v2 = table.append_column("checkpointMetadata", meta)
    assert v2_sidecars(v2, 2, "cp", uuid_named=True) == []
    assert len(decode_checkpoint(v2, 2, "cp").files) == len(sample_state().files)
    with pytest.raises(CorruptLogError, match="says version 2"):
        v2_sidecars(v2, 3, "cp", uuid_named=False)
    with pytest.raises(CorruptLogError, match="exactly one checkpointMetadata"):
        v2_sidecars(table, 2, "cp", uuid_named=True)
    assert v2_sidecars(table, 2, "cp", uuid_named=False) == []


# --------------------------------------------------------------------------- _last_checkpoint


def test_last_checkpoint_checksum_matches_the_protocol_example() -> None:
    obj = json.loads('{"k0":"\'v 0\'", "checksum": "adsaskfljadfkjadfkj", "k1":{"k2": 2, "k3": '
                     '["v3", [1, 2], {"k4": "v4", "k5": ["v5", "v6", "v7"]}]}}')
    assert last_checkpoint_checksum(obj) == "6a92d155a59bf2eecbd4b4ec7fd1f875"


def test_last_checkpoint_round_trip_and_validation() -> None:
    lc = LastCheckpoint(20, 105, None, 4096, 100)
    data = lc.to_bytes()
    assert json.loads(data)["checksum"]
    assert list(json.loads(data))[:2] == ["version", "size"]
    assert LastCheckpoint.from_bytes(data) == lc
    tampered = json.loads(data)
    tampered["size"] = 104
    with pytest.raises(ValueError, match="checksum"):
        LastCheckpoint.from_bytes(json.dumps(tampered).encode())
    # delta-rs writes no checksum; that is fine.
    assert LastCheckpoint.from_bytes(b'{"version":3,"size":8}').version == 3
    for bad in (b"", b"[]", b'{"size":1}', b'{"version":-1,"size":1}', b'{"version":"x"}'):
        with pytest.raises(ValueError):
            LastCheckpoint.from_bytes(bad)


# --------------------------------------------------------------------------- properties


@pytest.mark.parametrize(("text", "ms"), [
    ("interval 1 week", 604_800_000), ("interval 30 days", 2_592_000_000), ("2 hours", 7_200_000),
    ("interval 1 day 12 hours", 129_600_000), ("INTERVAL 90 MINUTES", 5_400_000),
    ("interval 0 seconds", 0), ("interval 1500 milliseconds", 1500),
])
def test_intervals(text: str, ms: int) -> None:
    assert parse_interval_ms(text) == ms


@pytest.mark.parametrize("text", ["", "interval", "1 month", "interval 2 fortnights", "week",
                                  "interval 1 day garbage", "interval -1 day"])
def test_bad_intervals(text: str) -> None:
    with pytest.raises(ValueError):
        parse_interval_ms(text)


def test_duration_properties_default_and_fail_clearly() -> None:
    assert TableConfig({}, "t").log_retention_ms == 30 * 86_400_000
    assert TableConfig({}, "t").deleted_file_retention_ms == WEEK
    with pytest.raises(InvalidArgumentError, match=r"table t: property delta.logRetentionDuration"):
        _ = TableConfig({"delta.logRetentionDuration": "soon"}, "t").log_retention_ms
    assert TableConfig({}).checkpoint_interval == 10
    assert TableConfig({"delta.checkpointInterval": "3"}).checkpoint_interval == 3


@pytest.mark.parametrize("order", ["adds_first", "reversed"])
def test_decodes_whatever_the_row_order_with_null_feature_lists(order: str) -> None:
    # Spark 3.5 classic checkpoints put the protocol row anywhere, with null feature lists;
    # picking that row out is a slice of list columns that Arrow cannot re-mask in place.
    s = TableState()
    s.apply(0, [Protocol(1, 2), Metadata(id="m", schema_string='{"type":"struct","fields":[]}',
                                         partition_columns=[], configuration={"a": "b"})]
            + [Add(f"f{i}.parquet", {"p": str(i)}, 10, 1) for i in range(3)])
    table = spark_like(encode_checkpoint(s, 0).table)
    rows = table.to_pylist()
    rows = rows[2:] + rows[:2] if order == "adds_first" else rows[::-1]
    shuffled = pa.Table.from_pylist(rows, schema=table.schema)
    pq_buf = io.BytesIO()
    pq.write_table(shuffled, pq_buf)
    back = decode_checkpoint(pq.read_table(io.BytesIO(pq_buf.getvalue())), 0, "spark-3.5")
    assert back.protocol == Protocol(1, 2) and back.metadata == s.metadata
    assert dict(back.files.items()) == s.files


# --------------------------------------------------------------------------- typed statistics


def test_checkpoints_have_stats_parsed_unless_the_table_says_not() -> None:
    protocol = Protocol(1, 2)
    assert CheckpointOptions.of(protocol, TableConfig({})).stats_struct
    assert CheckpointOptions.of(protocol, TableConfig({})).stats_json
    assert not CheckpointOptions.of(
        protocol, TableConfig({"delta.checkpoint.writeStatsAsStruct": "false"})).stats_struct
    assert not CheckpointOptions.of(
        protocol, TableConfig({"delta.checkpoint.writeStatsAsJson": "false"})).stats_json


def test_a_schema_without_types_still_checkpoints_with_json_stats() -> None:
    """``sample_state``'s partition columns are not in its schema: no typed columns can be
    made, and the JSON statistics carry the files' statistics as before."""
    table = encode_checkpoint(sample_state(), 0).table
    assert "stats_parsed" not in {f.name for f in table.schema.field("add").type}
    with pytest.raises(KeyError):
        encode_checkpoint(sample_state(), 0, options=CheckpointOptions(stats_json=False))


_PV_SCHEMA = pa.schema([("s", pa.string()), ("i", pa.int32()), ("d", pa.date32()),
                        ("b", pa.bool_()), ("dec", pa.decimal128(5, 2))])
_pv_text = st.one_of(st.none(), st.sampled_from(["", "1", "-7", "x", "2026-11-25", "true",
                                                  "False", "1.25", "1.255", "99999999999"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(
    st.fixed_dictionaries({k: _pv_text for k in _PV_SCHEMA.names}),  # the common shape
    st.lists(st.tuples(st.sampled_from(_PV_SCHEMA.names), _pv_text), max_size=4)),
    max_size=10), st.integers(0, 2))
def test_partition_struct_column_is_the_row_by_row_one(rows: list[Any], start: int) -> None:
    maps = [list(r.items()) if isinstance(r, dict) else r for r in rows]
    arr = pa.array(maps, pa.map_(pa.string(), pa.string()))
    arr = arr.slice(min(start, len(maps)))
    type_ = partition_struct_type(_PV_SCHEMA, _PV_SCHEMA.names)
    want = partition_struct_array([dict(m) for m in maps[start:]], type_)
    assert partition_struct_column(arr, type_).to_pylist() == want.to_pylist()


def test_stats_parsed_is_carried_over_from_the_checkpoint_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint written from a state read from a checkpoint takes that checkpoint's
    ``stats_parsed`` for the files it held, parsing only the texts of the files added since;
    what it writes is what parsing every text row by row gives."""
    import deltacommit as dc
    from deltacommit.engine.snapshot import state_cache

    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("v", pa.string()), ("day", pa.date32())])
    dc.DeltaTable.create(uri, schema, partition_by=["day"])
    for i in range(5):
        dc.write(uri, pa.table({"id": [i, -i], "v": [f"v{i}", None],
                                "day": [dt.date(2026, 11, 20 + i % 2)] * 2}, schema=schema))
    dc.DeltaTable(uri).checkpoint()
    for i in range(2):
        dc.write(uri, pa.table({"id": [10 + i], "v": ["late"], "day": [dt.date(2026, 12, 1)]},
                               schema=schema))
    state_cache.clear()
    table = dc.DeltaTable(uri)
    parsed = json_parsed_rows(monkeypatch)
    table.checkpoint()
    assert sum(parsed) == 2
    cp = tmp_path / "t" / "_delta_log" / f"{table.version:020d}.checkpoint.parquet"
    adds = pq.read_table(cp).column("add").combine_chunks()
    adds = adds.filter(adds.is_valid())
    stype = stats_struct_type(schema, ["day"])
    assert adds.field("stats_parsed").to_pylist() == stats_struct_array(
        adds.field("stats").to_pylist(), stype).to_pylist()
    ptype = partition_struct_type(schema, ["day"])
    assert adds.field("partitionValues_parsed").to_pylist() == partition_struct_array(
        [dict(m) for m in adds.field("partitionValues").to_pylist()], ptype).to_pylist()
    assert len(adds) == 7


def test_stats_read_apart_must_fit_the_rows() -> None:
    """Typed statistics read again from a checkpoint's files are used only if they have a
    value for each of the rows."""
    from deltacommit.protocol.checkpoint.decode import _deferred_stats_parsed
    from deltacommit.protocol.files.action_rows import ActionRows
    from deltacommit.protocol.files.from_arrow import adds_from_arrow

    sp = pa.struct([("numRecords", pa.int64())])
    add = pa.struct([("stats_parsed", sp)])

    def table(counts: list[int | None]) -> pa.Table:
        return pa.table({"add": pa.array(
            [None if n is None else {"stats_parsed": {"numRecords": n}} for n in counts], add)})

    rows = adds_to_arrow([Add(p, {}, 1, 1, True, None) for p in ["a", "bb", "ccc"]])
    got = _deferred_stats_parsed([table([None, 1, 2]), table([3, None])])
    assert got is not None and got.field("numRecords").to_pylist() == [1, 2, 3]
    assert _deferred_stats_parsed(None) is None
    for parts, want in (([[None, 1, 2], [3, None]], [1, 2, 3]), ([[1, 2]], None),
                        ([[1, 2, 3, 4]], None)):
        for loaded in (True, False):
            def later(parts: list[list[int | None]] = parts) -> Any:
                return _deferred_stats_parsed([table(p) for p in parts])
            base = ActionRows(rows if loaded else None, adds_from_arrow,
                              None if loaded else (lambda: rows), load_stats_parsed=later)
            parsed = base.stats_parsed
            assert (None if parsed is None else parsed.field("numRecords").to_pylist()) == want


@pytest.mark.parametrize("mode", ["none", "name", "id"])
def test_stats_kept_only_as_structs_read_back_as_the_text_written(tmp_path: Path, mode: str) -> None:
    """A checkpoint without JSON statistics (``writeStatsAsJson=false``) gives each file's text
    back from ``stats_parsed``: ``timestamp_ntz`` bounds without a zone, as they were written,
    also in a column-mapping table, whose struct is keyed by physical names."""
    import deltacommit as dc
    from deltacommit.engine.snapshot import state_cache

    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us")),
                        ("at", pa.timestamp("us", tz="UTC"))])
    config = {"delta.checkpoint.writeStatsAsJson": "false"}
    if mode != "none":
        config["delta.columnMapping.mode"] = mode
    dc.DeltaTable.create(uri, schema, configuration=config)
    rows = {"id": [1, 2],
            "ts": [dt.datetime(2024, 1, 2, 3, 4, 5, 123000), dt.datetime(2024, 5, 6, 7, 8, 9)],
            "at": [dt.datetime(2024, 1, 2, tzinfo=dt.UTC), dt.datetime(2024, 3, 4, tzinfo=dt.UTC)]}
    dc.write(uri, pa.table(rows, schema=schema))
    t = dc.DeltaTable(uri)
    written = json.loads(t.files()[0].stats or "")
    t.checkpoint()
    state_cache.clear()
    [add] = dc.DeltaTable(uri).files()
    assert json.loads(add.stats or "") == written
    bounds = list(written["minValues"].values())
    assert not bounds[1].endswith("Z") and bounds[2].endswith("Z")


def test_null_rows_shared_between_checkpoints_are_whole_null_rows() -> None:
    """Null rows are built once per action type and sliced after: every slice, of every
    length (growing past the rows built so far, and past what is kept), is ``n`` null rows
    whose required children hold placeholders, as Parquet writers need."""
    from deltacommit.protocol.checkpoint.encode import _filler, null_rows
    from deltacommit.protocol.checkpoint.schema import ADD, REMOVE

    for type_ in (ADD, REMOVE):
        for n in (0, 1, 7, 1024, 1025, 5000, 3, (1 << 16) + 1):
            rows = null_rows(n, type_)
            assert len(rows) == n and rows.null_count == n
            assert rows.equals(_filler(n, type_, True))
            sink = io.BytesIO()
            pq.write_table(pa.table({"a": rows}), sink)
            assert pq.read_table(io.BytesIO(sink.getvalue())).column("a").null_count == n
