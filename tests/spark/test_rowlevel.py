"""``dcs.merge``, ``dcs.update`` and ``dcs.delete``: the rewrites run in Spark tasks and the
result equals deltalake 1.6.0's on a copy of the same table (2,000 rows in several files,
partitioned, NULLs in every column but the partition); a target row two source rows match
fails with Spark's cardinality error and leaves the table and its folder unchanged."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import deltalake
import numpy as np
import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit import spark as dcs
from deltacommit.errors import (
    ConcurrentDeleteReadException,
    InvalidArgumentError,
    MergeCardinalityError,
)
from tests.arrow_strategies import canonical_rows
from tests.delta_tables import mapped_change_data, peer_read

from .conftest import parquet_files

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.float64()),
                    pa.field("s", pa.string()), pa.field("p", pa.string())])


def _rows(ids: np.ndarray[Any, Any], seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = len(ids)
    v = rng.integers(-50, 50, n).astype(float)
    return pa.table({
        "id": pa.array(ids, pa.int64(), mask=rng.random(n) < 0.02),
        "v": pa.array(v, pa.float64(), mask=rng.random(n) < 0.1),
        "s": pa.array(rng.choice(["a", "b", "c", "zz"], n).tolist(), pa.string(),
                      mask=rng.random(n) < 0.1),
        "p": pa.array(rng.choice(["x", "y", "z"], n).tolist(), pa.string()),
    }, schema=SCHEMA)


def _copies(tmp_path: Path, dvs: bool = False) -> tuple[str, str]:
    """Two tables of the same 2,000 rows written in four batches (several files each); with
    ``dvs`` ours allows deletion vectors and theirs (deltalake writes none) does not."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    config = {"delta.enableDeletionVectors": "true"} if dvs else None
    for uri in ([ours, theirs] if dvs else [ours]):
        dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"],
                             configuration=config if uri == ours else None)
        for k in range(4):
            dc.write(uri, _rows(np.arange(k * 500, k * 500 + 500), seed=k))
    if not dvs:
        shutil.copytree(ours, theirs)
    return ours, theirs


def _same(ours: str, theirs: str) -> None:
    expected = canonical_rows(deltalake.DeltaTable(theirs).to_pyarrow_table()
                              .select(SCHEMA.names))
    assert canonical_rows(dc.DeltaTable(ours).to_arrow()) == expected
    assert canonical_rows(peer_read(ours).select(SCHEMA.names)) == expected


@pytest.mark.parametrize("dvs", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_update_and_delete_equal_deltalakes(spark: Any, tmp_path: Path, dvs: bool) -> None:
    ours, theirs = _copies(tmp_path, dvs)
    result = dcs.update(ours, {"v": "v * 2", "s": "'u'"}, "id > 1500 OR s = 'a'", spark=spark)
    peer = deltalake.DeltaTable(theirs).update({"v": "v * 2", "s": "'u'"},
                                               predicate="id > 1500 OR s = 'a'")
    assert result["num_updated_rows"] == peer["num_updated_rows"] > 0
    _same(ours, theirs)
    result = dcs.delete(ours, "v < 0 AND p = 'y'", spark=spark)
    peer = deltalake.DeltaTable(theirs).delete("v < 0 AND p = 'y'")
    assert result["num_deleted_rows"] == peer["num_deleted_rows"] > 0
    _same(ours, theirs)
    history = dc.DeltaTable(ours).history(2)
    assert [h["operation"] for h in history] == ["DELETE", "UPDATE"]
    marked = [int(h["operationMetrics"]["numDeletionVectorsAdded"]) for h in history]
    assert all(marked) if dvs else not any(marked)


@pytest.mark.parametrize("dvs", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_delete_by_an_expression_equals_deltalakes(spark: Any, tmp_path: Path,
                                                  dvs: bool) -> None:
    ours, theirs = _copies(tmp_path, dvs)
    predicate = "id % 7 = 0 OR abs(v) + id < 60 OR (p = 'z' AND v > id % 50) OR upper(s) = 'ZZ'"
    result = dcs.delete(ours, predicate, spark=spark)
    peer = deltalake.DeltaTable(theirs).delete(predicate)
    assert result["num_deleted_rows"] == peer["num_deleted_rows"] > 0
    _same(ours, theirs)
    with pytest.raises(InvalidArgumentError, match=f"DELETE from table .*{tmp_path.name}.*'id %"):
        dcs.delete(ours, "id % ", spark=spark)


def _source(seed: int) -> pa.Table:
    """1,500 source rows: 1,000 keys of the table (some NULL) and 500 new ones."""
    rng = np.random.default_rng(seed)
    ids = np.concatenate([rng.choice(2000, 1000, replace=False), np.arange(5000, 5500)])
    return _rows(ids, seed)


def _merge(builder: Any, conditional: bool) -> dict[str, Any]:
    if not conditional:
        return dict(builder.when_matched_update_all().when_not_matched_insert_all().execute())
    return dict(builder
                .when_matched_delete("s.v < -40")
                .when_matched_update({"v": "t.v + s.v", "s": "s.s"}, "s.v IS NOT NULL")
                .when_matched_update({"s": "'matched'"})
                .when_not_matched_insert({"id": "s.id", "v": "s.v", "p": "s.p"}, "s.v > 0")
                .when_not_matched_insert_all()
                .when_not_matched_by_source_update({"v": "t.v - 100"}, "t.v > 40")
                .when_not_matched_by_source_delete("t.s = 'c' AND t.v < -45")
                .execute())


_COMPARED = ("num_source_rows", "num_target_rows_inserted", "num_target_rows_updated",
             "num_target_rows_deleted")


@pytest.mark.parametrize("conditional", [False, True], ids=["upsert", "every-clause-kind"])
def test_merge_equals_deltalakes(spark: Any, tmp_path: Path, conditional: bool) -> None:
    ours, theirs = _copies(tmp_path)
    source = _source(7)
    # The key on the source side is a column of another type (int) than the target's (long).
    df = spark.createDataFrame(source.to_pandas()).selectExpr(
        "cast(id as int) as id", "v", "s", "p")
    predicate = "t.id = s.id" if not conditional else "t.id = s.id AND t.p = s.p"
    result = _merge(dcs.merge(df, ours, predicate, source_alias="s", target_alias="t"),
                    conditional)
    peer = _merge(deltalake.DeltaTable(theirs).merge(source, predicate, source_alias="s",
                                                     target_alias="t"), conditional)
    assert {k: result[k] for k in _COMPARED} == {k: peer[k] for k in _COMPARED}
    assert result["num_target_rows_inserted"] > 0 and result["num_target_rows_updated"] > 0
    _same(ours, theirs)
    assert dc.DeltaTable(ours).history(1)[0]["operation"] == "MERGE"


def test_a_target_row_matched_by_two_source_rows_fails_and_changes_nothing(
        spark: Any, tmp_path: Path) -> None:
    # Spark's rule: which source row would update the target row is ambiguous.  The two
    # source rows come from different partitions of the source DataFrame.
    ours, _ = _copies(tmp_path)
    before = dc.DeltaTable(ours)
    version, rows = before.version, canonical_rows(before.to_arrow())
    files = parquet_files(tmp_path / "ours")
    source = _source(3)
    key = next(i for i in source.column("id").to_pylist() if i is not None and i < 2000)
    df = spark.createDataFrame(source.to_pandas()).union(
        spark.sql(f"select {key}L as id, 1.0 as v, 'q' as s, 'x' as p"))
    with pytest.raises(MergeCardinalityError, match="more than one source row"):
        (dcs.merge(df, ours, "t.id = s.id", source_alias="s", target_alias="t")
         .when_matched_update_all().when_not_matched_insert_all().execute())
    after = dc.DeltaTable(ours)
    assert after.version == version and canonical_rows(after.to_arrow()) == rows
    assert parquet_files(tmp_path / "ours") == files


def test_a_merge_losing_to_a_concurrent_delete_fails_and_deletes_the_files_of_its_tasks(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deltacommit.ops import rowlevel

    ours, _ = _copies(tmp_path)
    real = rowlevel.RowRewrite.stage

    def stage_after_a_concurrent_delete(self: Any, txn: Any, out: Any) -> None:
        # The tasks have written their files; a concurrent writer removes files they read.
        dc.DeltaTable(ours).delete("p = 'x'")
        real(self, txn, out)

    monkeypatch.setattr(rowlevel.RowRewrite, "stage", stage_after_a_concurrent_delete)
    files = parquet_files(tmp_path / "ours")
    df = spark.createDataFrame(_source(5).to_pandas())
    with pytest.raises(ConcurrentDeleteReadException):
        (dcs.merge(df, ours, "t.id = s.id", source_alias="s", target_alias="t")
         .when_matched_update_all().when_not_matched_insert_all().execute())
    assert parquet_files(tmp_path / "ours") == files
    assert dc.DeltaTable(ours).history(1)[0]["operation"] == "DELETE"


def _feed(uri: str, start: int) -> list[str]:
    if dc.DeltaTable(uri).configuration.get("delta.columnMapping.mode", "none") != "none":
        feed = mapped_change_data(uri, start)
    else:
        feed = pa.table(deltalake.DeltaTable(uri).load_cdf(starting_version=start))
    return canonical_rows(feed.select([*SCHEMA.names, "_change_type"]))


@pytest.mark.parametrize(("dvs", "mapping"), [(False, "none"), (True, "none"), (True, "name")],
                         ids=["copy-on-write", "deletion-vectors", "column-mapping"])
def test_merge_keeps_row_ids_and_writes_change_data_as_deltacommits_own(
        spark: Any, tmp_path: Path, dvs: bool, mapping: str) -> None:
    # Row tracking and change data are the shared rewrite's: the tasks' MERGE must leave what
    # DeltaTable.merge leaves on an identical copy (rows, stable row ids, change data).  With
    # column mapping the tasks read and write the hidden row-id columns by their own names,
    # and the change data files are read by physical names (``mapped_change_data``).
    config = {"delta.enableRowTracking": "true", "delta.enableChangeDataFeed": "true"}
    if dvs:
        config["delta.enableDeletionVectors"] = "true"
    if mapping != "none":
        config["delta.columnMapping.mode"] = mapping
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    dc.DeltaTable.create(ours, SCHEMA, partition_by=["p"], configuration=config)
    for k in range(3):
        dc.write(ours, _keyed(_rows(np.arange(k * 200, k * 200 + 200), seed=k)))
    shutil.copytree(ours, theirs)
    start = dc.DeltaTable(ours).version + 1
    before = dict(_row_ids(ours))
    source = _keyed(_rows(np.arange(100, 700, 3), seed=11))

    def clauses(builder: Any) -> dict[str, Any]:
        return dict(builder.when_matched_delete("s.v < -40").when_matched_update_all()
                    .when_not_matched_insert_all()
                    .when_not_matched_by_source_delete("t.v > 45").execute())

    result = clauses(dcs.merge(spark.createDataFrame(source.to_pandas()), ours, "t.id = s.id",
                               source_alias="s", target_alias="t"))
    peer = clauses(dc.DeltaTable(theirs).merge(source, "t.id = s.id", "s", "t"))
    assert {k: result[k] for k in _COMPARED} == {k: peer[k] for k in _COMPARED}
    assert canonical_rows(dc.DeltaTable(ours).to_arrow()) == \
        canonical_rows(dc.DeltaTable(theirs).to_arrow())
    assert _feed(ours, start) == _feed(theirs, start) and _feed(ours, start)
    # Rows that were there keep their ids as in the Python MERGE; inserted rows take fresh
    # ids above every earlier one (which depend on how the new files split the rows).
    mine, peers = dict(_row_ids(ours)), dict(_row_ids(theirs))
    assert mine.keys() == peers.keys()
    assert {k: mine[k] for k in mine if k in before} == {k: peers[k] for k in peers if k in before}
    fresh = [mine[k] for k in mine if k not in before]
    assert fresh and min(i for i, _ in fresh) > max(i for i, _ in before.values())
    assert {v for _, v in fresh} == {result["version"]}
    assert len({i for i, _ in mine.values()}) == len(mine)
    assert any(a.deletion_vector for a in dc.DeltaTable(ours).files()) is dvs


def _keyed(rows: pa.Table) -> pa.Table:
    """``rows`` without those whose id is NULL (row ids are looked up by id)."""
    return rows.filter(rows.column("id").is_valid())


def _row_ids(uri: str) -> list[tuple[Any, ...]]:
    """Each live row's id -> its stable row id and row commit version."""
    from tests.test_row_level import stable_ids

    return sorted(stable_ids(uri).items())


def test_a_merge_of_a_few_keys_reads_only_the_files_that_can_hold_them(
        spark: Any, tmp_path: Path) -> None:
    # Files are pruned by the condition's target-only conjunct (a partition) and by the
    # source keys' range against file statistics; the rows still equal deltalake's.
    ours, theirs = _copies(tmp_path)
    source = _keyed(_rows(np.array([10, 11, 12, 9000]), seed=21))
    predicate = "t.id = s.id AND t.p = 'x'"
    df = spark.createDataFrame(source.to_pandas())
    result = (dcs.merge(df, ours, predicate, source_alias="s", target_alias="t")
              .when_matched_update_all().when_not_matched_insert_all().execute())
    peer = (deltalake.DeltaTable(theirs).merge(source, predicate, source_alias="s",
                                               target_alias="t")
            .when_matched_update_all().when_not_matched_insert_all().execute())
    assert {k: result[k] for k in _COMPARED} == {k: peer[k] for k in _COMPARED}
    total = len(deltalake.DeltaTable(theirs).file_uris())
    assert result["num_target_files_scanned"] == 1
    assert result["num_target_files_skipped_during_scan"] > 0
    assert total > 4
    _same(ours, theirs)


def test_bad_input_is_refused_naming_the_table_and_changes_nothing(
        spark: Any, tmp_path: Path) -> None:
    ours, _ = _copies(tmp_path)
    version = dc.DeltaTable(ours).version
    files = parquet_files(tmp_path / "ours")
    df = spark.createDataFrame(_source(1).to_pandas())
    with pytest.raises(InvalidArgumentError, match=f"MERGE into table .*{tmp_path.name}.*nope"):
        (dcs.merge(df, ours, "t.id = s.nope", source_alias="s", target_alias="t")
         .when_matched_update_all().execute())
    with pytest.raises(InvalidArgumentError, match="not a column of the table"):
        dcs.merge(df, ours, "t.id = s.id", source_alias="s", target_alias="t") \
            .when_matched_update({"missing": "s.v"})
    with pytest.raises(InvalidArgumentError, match="__deltacommit_file"):
        dcs.merge(df.withColumnRenamed("s", "__deltacommit_file"), ours, "t.id = s.id",
                  source_alias="s", target_alias="t")
    with pytest.raises(InvalidArgumentError, match=f"UPDATE of table .*{tmp_path.name}"):
        dcs.update(ours, {"v": "nope + 1"}, spark=spark)
    with pytest.raises(InvalidArgumentError, match=f"DELETE from table .*{tmp_path.name}"):
        dcs.delete(ours, "nope > 1", spark=spark)
    assert dc.DeltaTable(ours).version == version
    assert parquet_files(tmp_path / "ours") == files
