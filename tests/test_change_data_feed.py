"""Change data feed tables (``delta.enableChangeDataFeed=true``) written by deltacommit.

Spark's CDF tables from delta-kernel-rs's test data (with ``cdc`` actions and
``_change_data/`` files) are copied, appended to, overwritten, compacted and partly deleted
with deltacommit; then deltacommit and deltalake 1.6.0 read every row, and deltalake's
``load_cdf`` reads the change feed of the versions deltacommit wrote.  Operations that only
add or remove whole files need no change data files (a reader derives the changes from the
adds and removes); row-level deletes write them (``ops/rowlevel/rewrite.py``).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import deltacommit as dc
from deltacommit.errors import UnsupportedProtocolError
from deltacommit.protocol.actions import Protocol
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.features import check_writable
from tests.delta_tables import mapped_change_data

DATA = Path(__file__).parent / "data"
CDF_TABLES = ["cdf-table", "cdf-table-non-partitioned", "cdf-table-partitioned",
              "cdf-table-simple", "cdf-table-update-ops", "cdf-table-with-dv",
              "cdf-table-data-change", "cdf-table-delete-conditional-two-rows",
              "cdf-table-with-cdc-and-dvs",
              "../delta-golden/commit-info-containing-arbitrary-operationParams-types"]


def _copy(name: str, tmp_path: Path) -> str:
    """A copy of a kernel test table (or, with ``../delta-golden/``, a golden table)."""
    dst = tmp_path / Path(name).name
    shutil.copytree(DATA / "kernel" / name, dst)
    return str(dst)


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    names = sorted(table.column_names)
    return sorted(tuple(repr(r[n]) for n in names) for r in table.to_pylist())


def _peer_reads(path: str) -> bool:
    """deltalake 1.6.0 reads no table with deletion vectors; those are checked by deltacommit
    alone (``test_deletion_vector_tables.py`` checks its DV reads against Spark's rows)."""
    return "deletionVectors" not in (dc.DeltaTable(path).protocol.reader_features or [])


def _peer(path: str) -> pa.Table:
    return deltalake.DeltaTable(path).to_pyarrow_table()


def _cdf(path: str, start: int, end: int | None = None) -> list[dict[str, Any]]:
    t = deltalake.DeltaTable(path)
    kwargs: dict[str, Any] = {"starting_version": start}
    if end is not None:
        kwargs["ending_version"] = end
    feed = pa.table(t.load_cdf(**kwargs))
    return feed.drop_columns(["_commit_timestamp"]).to_pylist()


def _new_rows(schema: pa.Schema, n: int, seed: int) -> pa.Table:
    """``n`` rows of ``schema`` with values derived from ``seed`` (partition columns too)."""
    cols: dict[str, pa.Array[Any]] = {}
    for f in schema:
        t = f.type
        if pa.types.is_integer(t):
            cols[f.name] = pa.array([seed * 100 + i for i in range(n)], t)
        elif pa.types.is_floating(t):
            cols[f.name] = pa.array([seed + i / 4 for i in range(n)], t)
        elif pa.types.is_string(t):
            cols[f.name] = pa.array([f"s{seed}-{i}" for i in range(n)], t)
        elif pa.types.is_date(t):
            cols[f.name] = pa.array([dt.date(2030, 1, 1 + i) for i in range(n)], t)
        elif pa.types.is_timestamp(t):
            cols[f.name] = pa.array([dt.datetime(2030, 1, 1, i, tzinfo=dt.UTC)
                                     for i in range(n)], t)
        elif pa.types.is_boolean(t):
            cols[f.name] = pa.array([i % 2 == 0 for i in range(n)], t)
        elif pa.types.is_decimal(t):
            from decimal import Decimal
            cols[f.name] = pa.array([Decimal(seed * 100 + i) for i in range(n)], t)
        else:
            cols[f.name] = pa.nulls(n, t)
    return pa.table(cols, schema=schema)


@pytest.mark.parametrize("name", CDF_TABLES)
def test_append_to_a_spark_cdf_table(name: str, tmp_path: Path) -> None:
    path = _copy(name, tmp_path)
    table = dc.DeltaTable(path)
    assert table.table_config.change_data_feed_enabled(table.protocol)
    before = table.to_arrow()
    peer = _peer_reads(path)
    if peer:
        assert _rows(before) == _rows(_peer(path))  # replay ignores the cdc actions
    new = _new_rows(table.schema, 3, seed=7)
    result = dc.write(table, new)
    after = dc.DeltaTable(path).to_arrow()
    expected = _rows(pa.concat_tables([before, new.select(before.column_names)]))
    assert _rows(after) == expected
    log = Path(path) / "_delta_log" / f"{result.version:020d}.json"
    assert '"cdc"' not in log.read_text()
    if not peer:
        return
    assert _rows(_peer(path)) == expected
    feed = _cdf(path, result.version)
    assert {r["_change_type"] for r in feed} == {"insert"}
    assert {r["_commit_version"] for r in feed} == {result.version}
    assert len(feed) == 3


@pytest.mark.parametrize("name", ["cdf-table", "cdf-table-non-partitioned", "cdf-table-partitioned",
                                  "cdf-table-with-dv"])
def test_overwrite_of_a_cdf_table_reads_as_deletes_and_inserts(name: str, tmp_path: Path) -> None:
    path = _copy(name, tmp_path)
    table = dc.DeltaTable(path)
    before = table.to_arrow()
    new = _new_rows(table.schema, 2, seed=3)
    result = dc.write(table, new, mode="overwrite")
    assert _rows(dc.DeltaTable(path).to_arrow()) == _rows(new)
    if not _peer_reads(path):
        return
    assert _rows(_peer(path)) == _rows(new)
    feed = _cdf(path, result.version)
    deletes = [r for r in feed if r["_change_type"] == "delete"]
    inserts = [r for r in feed if r["_change_type"] == "insert"]
    assert len(inserts) == 2
    assert len(deletes) == before.num_rows


def test_partition_delete_and_compaction_of_a_cdf_table(tmp_path: Path) -> None:
    path = _copy("cdf-table", tmp_path)  # partitioned by birthday
    table = dc.DeltaTable(path)
    before = table.to_arrow()
    day = before.column("birthday")[0].as_py()
    gone = [r for r in before.to_pylist() if r["birthday"] == day]
    deleted = table.delete(f"birthday = DATE '{day.isoformat()}'")
    feed = _cdf(path, deleted["version"])
    assert sorted(r["id"] for r in feed if r["_change_type"] == "delete") == sorted(
        r["id"] for r in gone)
    # Compaction rewrites files with dataChange=false: the table's rows are unchanged.
    for i in range(3):
        dc.write(table, _new_rows(table.schema, 1, seed=10 + i))
    rows = _rows(dc.DeltaTable(path).to_arrow())
    before_version = dc.DeltaTable(path).version
    dc.DeltaTable(path).optimize.compact()
    compacted = dc.DeltaTable(path)
    assert compacted.version == before_version + 1
    assert _rows(compacted.to_arrow()) == rows
    assert _cdf(path, compacted.version) == []  # dataChange=false: no change to read
    assert _rows(_peer(path)) == rows


def test_row_level_delete_of_a_cdf_table_writes_change_data(tmp_path: Path) -> None:
    path = _copy("cdf-table-with-dv", tmp_path)  # deletion vectors and change data feed
    table = dc.DeltaTable(path)
    before = table.to_arrow()
    gone = before.filter(pa.compute.greater(before["value"], 3))
    kept = before.filter(pa.compute.invert(pa.compute.greater(before["value"], 3)))
    assert gone.num_rows and kept.num_rows
    version = table.delete("value > 3")["version"]
    assert _rows(dc.DeltaTable(path).to_arrow()) == _rows(kept)
    lines = (Path(path) / "_delta_log" / f"{version:020d}.json").read_text().splitlines()
    cdc = [json.loads(line)["cdc"] for line in lines if '"cdc"' in line]
    changes = pa.concat_tables([pq.read_table(Path(path) / c["path"]) for c in cdc])
    assert set(changes["_change_type"].to_pylist()) == {"delete"}
    assert _rows(changes.drop_columns(["_change_type"])) == \
        _rows(gone.select([n for n in gone.column_names
                           if n in changes.column_names and n != "_change_type"]))


def test_create_a_cdf_table(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    table = dc.DeltaTable.create(path, schema, partition_by=["p"],
                                 configuration={"delta.enableChangeDataFeed": "true"})
    assert table.protocol.min_writer_version == 4
    first = dc.write(table, pa.table({"id": [1, 2], "p": ["a", "b"]}))
    second = dc.write(table, pa.table({"id": [3], "p": ["a"]}), mode="overwrite",
                      predicate="p = 'a'")
    feed = _cdf(path, first.version)
    changes = sorted((r["_commit_version"], r["_change_type"], r["id"]) for r in feed)
    assert changes == [(first.version, "insert", 1), (first.version, "insert", 2),
                       (second.version, "delete", 1), (second.version, "insert", 3)]
    v7 = dc.DeltaTable.create(str(tmp_path / "t7"), schema, configuration={
        "delta.enableChangeDataFeed": "true", "delta.minWriterVersion": "7"})
    assert "changeDataFeed" in (v7.protocol.writer_features or [])


@pytest.mark.parametrize("protocol, config, enabled", [
    (Protocol(1, 4), {"delta.enableChangeDataFeed": "true"}, True),
    (Protocol(1, 3), {"delta.enableChangeDataFeed": "true"}, False),
    (Protocol(1, 7, None, ["appendOnly"]), {"delta.enableChangeDataFeed": "true"}, False),
    (Protocol(1, 7, None, ["changeDataFeed"]), {"delta.enableChangeDataFeed": "TRUE"}, True),
    (Protocol(1, 6), {"delta.enableChangeDataFeed": "false"}, False),
    (Protocol(1, 6), {}, False),
])
def test_change_data_feed_enabled(protocol: Protocol, config: dict[str, str | None],
                                  enabled: bool) -> None:
    assert TableConfig(config).change_data_feed_enabled(protocol) is enabled


@pytest.mark.parametrize("writer, mode, ok", [
    (4, "none", True), (5, "none", True), (6, "none", True), (5, "name", True),
    (8, "none", False)])
def test_writer_versions(writer: int, mode: str, ok: bool) -> None:
    from deltacommit.protocol.actions import Metadata

    metadata = Metadata("id", '{"type":"struct","fields":[]}', [],
                        {"delta.columnMapping.mode": mode})
    protocol = Protocol(1, writer)
    if ok:
        check_writable("t", protocol, metadata)
    else:
        with pytest.raises(UnsupportedProtocolError, match=f"writer version {writer}"):
            check_writable("t", protocol, metadata)




def test_checkpoint_of_a_cdf_table_holds_no_cdc_actions(tmp_path: Path) -> None:
    """cdc actions belong to their version only: a checkpoint (and the state a reader builds)
    leaves them out, and readers starting from it see the same rows."""
    path = _copy("cdf-table", tmp_path)
    table = dc.DeltaTable(path)
    dc.write(table, _new_rows(table.schema, 2, seed=5))
    rows = _rows(dc.DeltaTable(path).to_arrow())
    info = dc.DeltaTable(path).checkpoint()
    checkpoint = pq.read_table(
        next((Path(path) / "_delta_log").glob("*.checkpoint.parquet")))
    assert "cdc" not in checkpoint.column_names or checkpoint.column("cdc").null_count == \
        checkpoint.num_rows
    assert info is not None
    assert _rows(dc.DeltaTable(path).to_arrow()) == rows
    assert _rows(_peer(path)) == rows


def _changes(path: str, version: int) -> list[tuple[Any, ...]]:
    """The change rows of ``version`` of a column-mapping table (``mapped_change_data``):
    sorted (change type, id, v)."""
    rows = mapped_change_data(path, version, version).to_pylist()
    return sorted((r["_change_type"], r["id"], r["v"]) for r in rows)


@pytest.mark.parametrize("deletion_vectors", [False, True], ids=["copy-on-write", "dv"])
@pytest.mark.parametrize("mode", ["name", "id"])
def test_row_level_operations_on_a_cdf_table_with_column_mapping_and_row_tracking(
        tmp_path: Path, mode: str, deletion_vectors: bool) -> None:
    """Change data as on the same table without row tracking: the hidden row-id columns stay
    out of it, and the data columns are stored by physical name."""
    rows = pa.table({"id": pa.array(range(10), pa.int64()),
                     "v": pa.array([float(i) for i in range(10)])})
    source = pa.table({"id": pa.array([1, 20], pa.int64()), "v": [-1.0, -2.0]})
    paths = {}
    for tracked in (True, False):
        path = str(tmp_path / f"tracked-{tracked}")
        dc.write(path, rows, configuration={
            "delta.columnMapping.mode": mode, "delta.enableChangeDataFeed": "true",
            "delta.enableRowTracking": str(tracked).lower(),
            "delta.enableDeletionVectors": str(deletion_vectors).lower()})
        t = dc.DeltaTable(path)
        first = t.version + 1
        assert t.update({"v": "v + 100"}, predicate="id < 3")["version"] == first
        assert t.delete("id = 9")["version"] == first + 1
        assert t.merge(source, "t.id = s.id", source_alias="s", target_alias="t") \
            .when_matched_update_all().when_not_matched_insert_all().execute()["version"] \
            == first + 2
        paths[tracked] = path
    versions = range(first, first + 3)
    for version in versions:
        assert _changes(paths[True], version) == _changes(paths[False], version), version
    assert _changes(paths[True], versions[0])[0] == ("update_postimage", 0, 100.0)
    assert _changes(paths[True], versions[1]) == [("delete", 9, 9.0)]
    assert _changes(paths[True], versions[2]) == [("insert", 20, -2.0), ("update_postimage", 1, -1.0),
                                        ("update_preimage", 1, 101.0)]
    expected = sorted([(i, float(i) + (100 if i < 3 else 0)) for i in range(9)]
                      + [(20, -2.0)])
    expected[1] = (1, -1.0)
    for path in paths.values():
        got = dc.DeltaTable(path).to_arrow()
        assert sorted(zip(got["id"].to_pylist(), got["v"].to_pylist(), strict=True)) == expected
