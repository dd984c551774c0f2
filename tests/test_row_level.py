"""UPDATE, MERGE and row-level DELETE: bad input refused with a clear error that loses
nothing, Spark's MERGE rules, the table's rules kept (generated columns, constraints,
identity columns, row tracking), change data files deltalake's ``load_cdf`` reads, pruning
by file statistics, the proof before the commit, and conflicts with concurrent writers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import deltalake
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.errors import (
    ConcurrentDeleteReadException,
    ConstraintViolationError,
    ExpressionValueError,
    InvalidArgumentError,
    MergeCardinalityError,
    RewriteCheckError,
)
from tests.arrow_strategies import canonical_rows
from tests.delta_tables import peer_read
from tests.test_row_tracking import stable_ids

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.float64()), ("p", pa.string())])


def _table(tmp_path: Path, configuration: dict[str, str] | None = None,
           partitioned: bool = True, name: str = "t") -> str:
    uri = str(tmp_path / name)
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"] if partitioned else None,
                         configuration=configuration)
    dc.write(uri, pa.table({"id": [1, 2, 3], "v": [1.0, 2.0, None], "p": ["a", "a", "b"]},
                           schema=SCHEMA))
    dc.write(uri, pa.table({"id": [4, 5], "v": [4.0, 5.0], "p": ["b", "c"]}, schema=SCHEMA))
    return uri


def _files(uri: str) -> set[str]:
    return {str(p.relative_to(uri)) for p in Path(uri).rglob("*") if p.is_file()
            and "_delta_log" not in p.parts}


def _state(uri: str) -> tuple[int, list[str], set[str]]:
    t = dc.DeltaTable(uri)
    return t.version, canonical_rows(t.to_arrow()), _files(uri)


def _source(ids: list[int], vs: list[float | None], ps: list[str]) -> pa.Table:
    return pa.table({"id": ids, "v": vs, "p": ps}, schema=SCHEMA)


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("call, error, match", [
    (lambda t: t.update({"nope": "1"}), InvalidArgumentError, r"'nope' is not a column"),
    (lambda t: t.update({"v": "v +"}), InvalidArgumentError, r"v \+"),
    (lambda t: t.update({"v": "nope + 1"}), InvalidArgumentError, r"nope"),
    (lambda t: t.update({"v": "1"}, "nope > 1"), InvalidArgumentError, r"nope"),
    (lambda t: t.update({"v": "'abc'"}), InvalidArgumentError, r"STRING to DOUBLE"),
    (lambda t: t.update({"id": "id * 9223372036854775807"}), ExpressionValueError,
     r"column 'id' = .*overflow"),
    (lambda t: t.update({}), InvalidArgumentError, r"non-empty dict"),
    (lambda t: t.delete("nope = 1"), InvalidArgumentError, r"nope"),
    (lambda t: t.merge(_source([1], [0.0], ["a"]), "t.id = s.id", "s", "t")
     .when_matched_update({"nope": "s.v"}).execute(), InvalidArgumentError, r"'nope'"),
    (lambda t: t.merge(_source([1], [0.0], ["a"]), "t.id = s.nope", "s", "t")
     .when_matched_delete().execute(), InvalidArgumentError, r"merge condition.*nope"),
    (lambda t: t.merge(_source([1], [0.0], ["a"]), "t.id = s.id", "s", "t")
     .when_not_matched_insert({"id": "t.id"}).execute(), InvalidArgumentError,
     r"WHEN NOT MATCHED insert of column 'id'"),
    (lambda t: t.merge(_source([1], [0.0], ["a"]), "t.id = s.id", "s", "t")
     .when_not_matched_by_source_delete("s.v > 0").execute(), InvalidArgumentError,
     r"WHEN NOT MATCHED BY SOURCE condition"),
    (lambda t: t.merge(pa.table({"id": [1], "w": [2]}), "t.id = s.id", "s", "t")
     .when_not_matched_insert_all().execute(), InvalidArgumentError,
     r"source column 'w' is not a column"),
    (lambda t: t.merge(_source([1], [0.0], ["a"]), "t.id = s.id", "s", "t").execute(),
     InvalidArgumentError, r"at least one clause"),
    (lambda t: t.merge(_source([1, 1], [0.0, 9.0], ["a", "a"]), "t.id = s.id", "s", "t")
     .when_matched_update_all().execute(), MergeCardinalityError,
     r"MERGE into table .*/t: 1 target row\(s\) are matched by more than one source row"),
    (lambda t: t.merge(_source([1, 1], [0.0, 9.0], ["a", "a"]), "t.id = s.id", "s", "t")
     .when_matched_delete("s.v >= 0").execute(), MergeCardinalityError, r"more than one"),
])
def test_bad_input_is_refused_and_loses_nothing(tmp_path: Path, call: Any, error: type,
                                                match: str) -> None:
    uri = _table(tmp_path)
    before = _state(uri)
    with pytest.raises(error, match=match):
        call(dc.DeltaTable(uri))
    assert _state(uri) == before


def test_a_pinned_table_refuses_row_level_operations(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    old = dc.DeltaTable(uri, version=0)
    with pytest.raises(InvalidArgumentError, match="read-only"):
        old.update({"v": "0"})
    with pytest.raises(InvalidArgumentError, match="read-only"):
        old.merge(_source([1], [0.0], ["a"]), "t.id = s.id", "s", "t")


# --------------------------------------------------------------------------- MERGE semantics

def test_a_lone_unconditional_delete_takes_rows_several_source_rows_match(
        tmp_path: Path) -> None:
    uri = _table(tmp_path)
    m = (dc.DeltaTable(uri).merge(_source([1, 1, 4], [0.0, 9.0, 0.0], ["a", "a", "b"]),
                                  "t.id = s.id", "s", "t").when_matched_delete().execute())
    assert m["num_target_rows_deleted"] == 2
    assert sorted(dc.DeltaTable(uri).to_arrow()["id"].to_pylist()) == [2, 3, 5]


def test_first_matching_clause_wins_and_source_rows_matching_nothing_else_are_inserted(
        tmp_path: Path) -> None:
    uri = _table(tmp_path)
    m = (dc.DeltaTable(uri).merge(_source([1, 2, 9, 10], [10.0, -1.0, 3.0, None],
                                          ["a", "a", "a", "c"]), "t.id = s.id", "s", "t")
         .when_matched_update({"v": "s.v"}, "s.v > 5")
         .when_matched_delete()
         .when_not_matched_insert({"id": "s.id", "p": "'new'"}, "s.v IS NULL")
         .when_not_matched_insert_all()
         .execute())
    rows = {r["id"]: (r["v"], r["p"]) for r in dc.DeltaTable(uri).to_arrow().to_pylist()}
    assert rows == {1: (10.0, "a"), 3: (None, "b"), 4: (4.0, "b"), 5: (5.0, "c"),
                    9: (3.0, "a"), 10: (None, "new")}
    assert (m["num_target_rows_updated"], m["num_target_rows_deleted"],
            m["num_target_rows_inserted"], m["num_source_rows"]) == (1, 1, 2, 4)


def test_a_merge_of_a_few_keys_rewrites_only_the_files_their_statistics_admit(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "many")
    dc.DeltaTable.create(uri, SCHEMA)
    for i in range(20):
        dc.write(uri, pa.table({"id": list(range(i * 100, i * 100 + 100)), "v": [0.0] * 100,
                                "p": ["a"] * 100}, schema=SCHEMA))
    m = (dc.DeltaTable(uri).merge(_source([150, 1999, 5000], [1.0, 1.0, 1.0], ["a"] * 3),
                                  "t.id = s.id", "s", "t")
         .when_matched_update_all().when_not_matched_insert_all().execute())
    assert (m["num_target_files_scanned"], m["num_target_files_skipped_during_scan"]) == (2, 18)
    assert m["num_target_files_removed"] == 2
    assert (m["num_target_rows_updated"], m["num_target_rows_inserted"]) == (2, 1)
    got = dc.DeltaTable(uri).to_arrow()
    assert got.num_rows == 2001 and sorted(got.filter(
        pa.compute.equal(got["v"], 1.0))["id"].to_pylist()) == [150, 1999, 5000]


def test_a_merge_of_a_few_keys_reads_whole_only_the_files_holding_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys spread over every file (statistics admit them all): the key column of each file
    is read first, and only the files holding a source key are read whole and rewritten; a
    key held only by a deleted row of another file changes nothing there."""
    from deltacommit.ops.rowlevel import rewrite as rowlevel

    uri = str(tmp_path / "spread")
    dc.DeltaTable.create(uri, SCHEMA, configuration={"delta.enableDeletionVectors": "true"})
    for i in range(20):
        dc.write(uri, pa.table({"id": list(range(i, 2000, 20)), "v": [0.0] * 100,
                                "p": ["a"] * 100}, schema=SCHEMA))
    dc.DeltaTable(uri).delete("id = 7")  # file 7 keeps id 7 as a deleted row
    whole: list[str] = []
    read = rowlevel.RowRewrite.read

    def counted(self: rowlevel.RowRewrite, add: Any) -> rowlevel.ReadFile:
        whole.append(add.path)
        return read(self, add)

    monkeypatch.setattr(rowlevel.RowRewrite, "read", counted)
    m = (dc.DeltaTable(uri).merge(_source([150, 1999, 7, 5000], [1.0, 1.0, 1.0, 1.0],
                                          ["a"] * 4), "t.id = s.id", "s", "t")
         .when_matched_update_all().when_not_matched_insert_all().execute())
    assert (m["num_target_rows_updated"], m["num_target_rows_inserted"]) == (2, 2)
    assert m["num_target_files_scanned"] == 20
    assert 2 <= len(whole) <= 3  # the holders of 150 and 1999 (and of the deleted 7)
    got = dc.DeltaTable(uri).to_arrow()
    assert got.num_rows == 2001 and sorted(got.filter(
        pa.compute.equal(got["v"], 1.0))["id"].to_pylist()) == [7, 150, 1999, 5000]


@pytest.mark.parametrize("counted_rows", ["true", "none", "zero", "huge", "negative"])
@pytest.mark.parametrize("batch_rows", [1, 3, 1 << 18])
def test_files_judged_in_batches_change_as_judged_one_by_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_rows: int,
        counted_rows: str) -> None:
    """Batches of one file's rows, of rows of several files, and of every file give each
    file its own rows back (``ReadBatch.split``): the same table whatever the batch, and
    whatever row counts the files' statistics claim (local files are cut into batches by
    them before they are read: missing, zero, huge and negative counts change the batches,
    never the rows)."""
    from deltacommit.ops.rowlevel import rewrite as rowlevel
    from deltacommit.protocol.actions import Add

    monkeypatch.setattr(rowlevel, "BATCH_ROWS", batch_rows)
    claims = {"none": None, "zero": 0, "huge": 1 << 40, "negative": -5}
    if counted_rows != "true":
        monkeypatch.setattr(Add, "num_records", lambda self: claims[counted_rows])
    uri = _table(tmp_path, partitioned=False)
    dc.write(uri, pa.table({"id": [6, 7, 8], "v": [6.0, None, 8.0], "p": ["c", "c", "d"]},
                           schema=SCHEMA))
    t = dc.DeltaTable(uri)
    assert t.update({"v": "v * 10"}, "id % 2 = 0")["num_updated_rows"] == 4
    m = (dc.DeltaTable(uri).merge(_source([1, 5, 8, 9], [0.5, 0.5, None, 0.5],
                                          ["x", "x", "x", "x"]), "t.id = s.id", "s", "t")
         .when_matched_update({"v": "s.v"}, "t.id < 8").when_matched_delete()
         .when_not_matched_insert_all().execute())
    assert (m["num_target_rows_updated"], m["num_target_rows_deleted"],
            m["num_target_rows_inserted"]) == (2, 1, 1)
    got = sorted(dc.DeltaTable(uri).to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["v"]) for r in got] == [
        (1, 0.5), (2, 20.0), (3, None), (4, 40.0), (5, 0.5), (6, 60.0), (7, None),
        (9, 0.5)]


def test_a_merge_condition_on_target_partitions_reads_only_those(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    m = (dc.DeltaTable(uri).merge(_source([3, 4], [7.0, 7.0], ["b", "b"]),
                                  "t.id = s.id AND t.p = 'b'", "s", "t")
         .when_matched_update_all().execute())
    assert m["num_target_files_scanned"] == 2 and m["num_target_rows_updated"] == 2


# --------------------------------------------------------------------------- table rules

def test_update_recomputes_generated_columns_and_checks_constraints(tmp_path: Path) -> None:
    uri = str(tmp_path / "g")
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64()),
                        pa.field("w", pa.int64(), metadata={
                            "delta.generationExpression": "v * 10"})])
    dc.DeltaTable.create(uri, schema, configuration={"delta.constraints.v_small": "v < 100"})
    dc.write(uri, pa.table({"id": [1, 2], "v": [1, 2]}))
    dc.DeltaTable(uri).update({"v": "v + 5"}, "id = 2")
    assert sorted(dc.DeltaTable(uri).to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": 1, "w": 10}, {"id": 2, "v": 7, "w": 70}]
    (dc.DeltaTable(uri).merge(pa.table({"id": [1, 3], "v": [3, 4]}), "t.id = s.id", "s", "t")
     .when_matched_update_all().when_not_matched_insert_all().execute())
    assert sorted(dc.DeltaTable(uri).to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": 3, "w": 30}, {"id": 2, "v": 7, "w": 70}, {"id": 3, "v": 4, "w": 40}]
    before = _state(uri)
    with pytest.raises(ConstraintViolationError, match="v_small"):
        dc.DeltaTable(uri).update({"v": "v + 100"})
    assert _state(uri) == before


def test_merge_inserts_take_identity_values_above_the_mark(tmp_path: Path) -> None:
    uri = str(tmp_path / "ident")
    schema = pa.schema([pa.field("k", pa.int64(), metadata={
        "delta.identity.start": "1", "delta.identity.step": "1",
        "delta.identity.allowExplicitInsert": "false"}), pa.field("id", pa.int64())])
    dc.DeltaTable.create(uri, schema)
    dc.write(uri, pa.table({"id": [10, 20]}))
    (dc.DeltaTable(uri).merge(pa.table({"id": [20, 30, 40]}), "t.id = s.id", "s", "t")
     .when_not_matched_insert({"id": "s.id"}).execute())
    rows = sorted((r["k"], r["id"]) for r in dc.DeltaTable(uri).to_arrow().to_pylist())
    assert rows == [(1, 10), (2, 20), (3, 30), (4, 40)]
    with pytest.raises(InvalidArgumentError, match="identity column"):
        dc.DeltaTable(uri).update({"k": "0"})


@pytest.mark.parametrize("dvs", [False, True])
def test_updated_rows_keep_their_row_ids_and_take_the_new_commit_version(
        tmp_path: Path, dvs: bool) -> None:
    config = {"delta.enableRowTracking": "true"}
    if dvs:
        config["delta.enableDeletionVectors"] = "true"
    uri = _table(tmp_path, config)
    before = stable_ids(uri)
    t = dc.DeltaTable(uri)
    m = (t.merge(_source([2, 3, 7], [20.0, 30.0, 70.0], ["a", "b", "c"]), "t.id = s.id", "s",
                 "t").when_matched_update_all().when_not_matched_insert_all().execute())
    after = stable_ids(uri)
    version = m["version"]
    assert any(a.deletion_vector for a in dc.DeltaTable(uri).files()) is dvs
    assert {k: after[k] for k in (1, 4, 5)} == {k: before[k] for k in (1, 4, 5)}  # copied
    assert after[2] == (before[2][0], version) and after[3] == (before[3][0], version)
    assert after[7][0] > max(i for i, _ in before.values()) and after[7][1] == version
    dc.DeltaTable(uri).delete("id = 1")
    dc.DeltaTable(uri).update({"v": "0"}, "id = 4")
    last = stable_ids(uri)
    assert 1 not in last and last[4] == (before[4][0], dc.DeltaTable(uri).version)
    assert last[2] == after[2]


# --------------------------------------------------------------------------- change data

def _cdf(uri: str, start: int) -> list[tuple[Any, ...]]:
    feed = pa.table(deltalake.DeltaTable(uri).load_cdf(starting_version=start))
    return sorted((r["_commit_version"], r["_change_type"], r["id"], r["v"], r["p"])
                  for r in feed.to_pylist())


def test_change_data_files_say_what_each_operation_changed(tmp_path: Path) -> None:
    uri = _table(tmp_path, {"delta.enableChangeDataFeed": "true"})
    start = dc.DeltaTable(uri).version + 1
    merged = (dc.DeltaTable(uri).merge(_source([2, 9], [20.0, 90.0], ["a", "c"]),
                                       "t.id = s.id", "s", "t")
              .when_matched_update_all().when_not_matched_insert_all()
              .when_not_matched_by_source_delete("t.id = 5").execute())["version"]
    updated = dc.DeltaTable(uri).update({"v": "v + 1"}, "id = 4")["version"]
    deleted = dc.DeltaTable(uri).delete("v IS NULL")["version"]
    assert _cdf(uri, start) == sorted([
        (merged, "update_preimage", 2, 2.0, "a"), (merged, "update_postimage", 2, 20.0, "a"),
        (merged, "insert", 9, 90.0, "c"), (merged, "delete", 5, 5.0, "c"),
        (updated, "update_preimage", 4, 4.0, "b"), (updated, "update_postimage", 4, 5.0, "b"),
        (deleted, "delete", 3, None, "b")])
    assert canonical_rows(deltalake.DeltaTable(uri).to_pyarrow_table()) == \
        canonical_rows(dc.DeltaTable(uri).to_arrow())


def test_a_change_data_table_with_deletion_vectors_gets_change_files_too(
        tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    uri = _table(tmp_path, {"delta.enableChangeDataFeed": "true",
                            "delta.enableDeletionVectors": "true"})
    version = dc.DeltaTable(uri).delete("id = 2")["version"]
    cdc = [a for a in _actions(uri, version) if "cdc" in a]
    assert len(cdc) == 1 and cdc[0]["cdc"]["dataChange"] is False
    rows = pq.read_table(Path(uri) / cdc[0]["cdc"]["path"]).to_pylist()
    assert rows == [{"id": 2, "v": 2.0, "_change_type": "delete"}]
    assert any(a.deletion_vector for a in dc.DeltaTable(uri).files())
    assert sorted(dc.DeltaTable(uri).to_arrow()["id"].to_pylist()) == [1, 3, 4, 5]


def _actions(uri: str, version: int) -> list[dict[str, Any]]:
    import json

    with open(os.path.join(uri, "_delta_log", f"{version:020d}.json")) as f:
        return [json.loads(line) for line in f if line.strip()]


# --------------------------------------------------------------------------- proof, conflicts

@pytest.mark.parametrize("dvs", [False, True])
def test_a_rewrite_whose_files_lose_a_row_commits_nothing_and_leaves_no_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dvs: bool) -> None:
    from deltacommit.ops.rowlevel import rewrite as rowlevel

    uri = _table(tmp_path, {"delta.enableDeletionVectors": "true"} if dvs else None)
    before = _state(uri)
    real = rowlevel.write_rows

    def lossy(store: Any, target: Any, rows: pa.Table, **kw: Any) -> Any:
        return real(store, target, rows.slice(1), **kw)

    monkeypatch.setattr(rowlevel, "write_rows", lossy)
    with pytest.raises(RewriteCheckError, match="nothing was committed"):
        (dc.DeltaTable(uri).merge(_source([2, 9], [20.0, 90.0], ["a", "c"]), "t.id = s.id",
                                  "s", "t")
         .when_matched_update_all().when_not_matched_insert_all().execute())
    assert _state(uri) == before


def _many_files(tmp_path: Path, files: int = 6, per: int = 50) -> str:
    """An unpartitioned table of ``files`` files of ``per`` consecutive ids each."""
    uri = str(tmp_path / "many")
    dc.DeltaTable.create(uri, SCHEMA)
    for f in range(files):
        ids = list(range(f * per, (f + 1) * per))
        dc.write(uri, pa.table({"id": ids, "v": [float(i) for i in ids],
                                "p": [f"p{i % 3}" for i in ids]}, schema=SCHEMA))
    return uri


@pytest.fixture
def small_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rewrites of a few hundred bytes cut into one file per copied file, written and
    proven on two threads: the path large rewrites take."""
    from deltacommit.ops.rowlevel import rewrite as rowlevel

    monkeypatch.setattr(rowlevel, "REWRITE_FILE_BYTES", 1)
    monkeypatch.setattr(rowlevel, "REWRITE_PIECE_MIN_BYTES", 1)
    monkeypatch.setattr(rowlevel, "REWRITE_THREADS", 2)
    monkeypatch.setattr(rowlevel.os, "cpu_count", lambda: 2)


def test_a_rewrite_cut_into_groups_writes_each_row_once_in_its_place(
        tmp_path: Path, small_groups: None) -> None:
    uri = _many_files(tmp_path)
    m = dc.DeltaTable(uri).update({"v": "-v"}, predicate="id % 10 = 3")
    assert (m["num_updated_rows"], m["num_copied_rows"]) == (30, 270)
    assert (m["num_removed_files"], m["num_added_files"]) == (6, 6)
    rows = dc.DeltaTable(uri).to_arrow()
    # Each updated row stays where it was, between the rows copied around it.
    assert rows["id"].to_pylist() == list(range(300))
    assert rows["v"].to_pylist() == [-float(i) if i % 10 == 3 else float(i)
                                     for i in range(300)]
    m = (dc.DeltaTable(uri).merge(_source([7, 301], [70.0, 3010.0], ["x", "y"]),
                                  "t.id = s.id", "s", "t")
         .when_matched_update_all().when_not_matched_insert_all().execute())
    assert (m["num_target_rows_updated"], m["num_target_rows_inserted"]) == (1, 1)
    after = dc.DeltaTable(uri).to_arrow()
    assert after.num_rows == 301
    assert deltalake.DeltaTable(uri).to_pyarrow_table().sort_by("id").equals(
        after.sort_by("id"))


@pytest.mark.parametrize("bad_piece", [0, 3])
def test_a_grouped_rewrite_with_one_bad_file_commits_nothing_and_leaves_no_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_groups: None,
        bad_piece: int) -> None:
    from deltacommit.ops.rowlevel import rewrite as rowlevel

    uri = _many_files(tmp_path)
    before = _state(uri)
    real = rowlevel.write_data_file

    def lossy(store: Any, values: Any, pcols: Any, data: pa.Table, **kw: Any) -> Any:
        if kw["index"] == bad_piece:
            data = data.slice(1)
        return real(store, values, pcols, data, **kw)

    monkeypatch.setattr(rowlevel, "write_data_file", lossy)
    with pytest.raises(RewriteCheckError, match="nothing was committed"):
        dc.DeltaTable(uri).update({"v": "v + 1"}, predicate="id % 10 = 3")
    assert _state(uri) == before


def test_a_merge_conflicting_with_a_concurrent_delete_fails_and_deletes_its_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deltacommit.ops.rowlevel import rewrite as rowlevel

    uri = _table(tmp_path)
    real = rowlevel.RowRewrite.stage

    def stage_after_a_concurrent_delete(self: Any, txn: Any, out: Any) -> None:
        dc.DeltaTable(uri).delete("p = 'a'")  # removes the file the merge rewrites
        real(self, txn, out)

    monkeypatch.setattr(rowlevel.RowRewrite, "stage", stage_after_a_concurrent_delete)
    files = _files(uri)
    with pytest.raises(ConcurrentDeleteReadException):
        (dc.DeltaTable(uri).merge(_source([2], [20.0], ["a"]), "t.id = s.id", "s", "t")
         .when_matched_update_all().execute())
    assert _files(uri) == files
    assert sorted(dc.DeltaTable(uri).to_arrow()["id"].to_pylist()) == [3, 4, 5]


def test_copy_on_write_take_of_many_chunks_equals_arrow_take() -> None:
    """The take of copy-on-write (each column made one array first) holds exactly the rows
    of Arrow's take across the chunks: strings, nulls, structs, and dictionary chunks with
    different dictionaries (joined into one dictionary)."""
    import numpy as np

    from deltacommit.ops.rowlevel import taken

    chunks = []
    for i in range(7):
        n = 3 + i
        chunks.append(pa.table({
            "id": pa.array([i * 100 + j for j in range(n)], pa.int64()),
            "s": pa.array([None if j % 3 == 0 else f"s{i}-{j}" for j in range(n)]),
            "st": pa.array([{"a": j, "b": str(i)} for j in range(n)]),
            "d": pa.array([f"d{i}" if j % 2 else f"e{j}" for j in range(n)]).dictionary_encode(),
        }))
    rows = pa.concat_tables(chunks)
    positions = np.array([0, 5, 5, rows.num_rows - 1, 17, 3, 40], dtype=np.int64)
    got = taken(rows, positions)
    assert got.schema == rows.schema
    assert got.to_pylist() == rows.take(positions).to_pylist()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_copy_on_write_replace_in_place_equals_take_with_the_new_rows_after(
        data: st.DataObject) -> None:
    """Replacing the updated rows in place (an UPDATE's copy-on-write, nothing deleted) holds
    exactly the rows of taking every row with the updated ones taken from after them: numbers
    (replaced in place), strings and binary (taken), nulls, structs, lists, dictionaries that
    differ between chunks, numbers and dictionary indices without nulls (set in one copy),
    columns whose new values are their old ones, and any chunking."""
    import numpy as np

    from deltacommit.ops.rowlevel import replaced

    sizes = data.draw(st.lists(st.integers(0, 9), min_size=1, max_size=6))
    chunks = []
    for i, n in enumerate(sizes):
        chunks.append(pa.table({
            "id": pa.array([i * 100 + j for j in range(n)], pa.int64()),
            "v": pa.array([None if j % 4 == 1 else j / 2 for j in range(n)], pa.float64()),
            "s": pa.array([None if j % 3 == 0 else f"s{i}-{j}" for j in range(n)], pa.string()),
            "b": pa.array([bytes([j]) * j for j in range(n)], pa.large_binary()),
            "st": pa.array([{"a": j, "b": str(i)} for j in range(n)],
                           pa.struct([("a", pa.int64()), ("b", pa.string())])),
            "l": pa.array([[j] * (j % 3) for j in range(n)], pa.list_(pa.int64())),
            "d": pa.array([f"d{i}" if j % 2 else f"e{j}" for j in range(n)],
                          pa.string()).dictionary_encode(),
            "n": pa.array([i * 7 + j for j in range(n)], pa.int32()),
            "dn": pa.array([f"k{j % 3}" for j in range(n)], pa.string()).dictionary_encode(),
        }))
    rows = pa.concat_tables(chunks)
    total = rows.num_rows
    assume(total > 0)
    positions = np.array(sorted(data.draw(st.sets(st.integers(0, total - 1), min_size=1))),
                         dtype=np.int64)
    old = rows.take(positions)
    n = len(positions)
    new = pa.table({
        "id": old.column("id"),  # unchanged: kept as it is
        "v": pa.array([None if k % 2 else -k - 0.5 for k in range(n)], pa.float64()),
        "s": pa.array([data.draw(st.one_of(st.none(), st.text(max_size=4))) for _ in range(n)],
                      pa.string()),
        "b": pa.array([data.draw(st.one_of(st.none(), st.binary(max_size=3))) for _ in range(n)],
                      pa.large_binary()),
        "st": pa.array([{"a": -k, "b": None} for k in range(n)], rows.schema.field("st").type),
        "l": pa.array([[k, k] for k in range(n)], pa.list_(pa.int64())),
        "d": pa.array([f"n{k % 2}" for k in range(n)], pa.string()).dictionary_encode(),
        "n": pa.array([-k for k in range(n)], pa.int32()),  # no nulls: set in one copy
        "dn": pa.array([f"k{k % 4}" for k in range(n)], pa.string()).dictionary_encode(),
    })
    got = replaced(rows, positions, new)
    picked = np.arange(total, dtype=np.int64)
    picked[positions] = total + np.arange(n, dtype=np.int64)
    expected = pa.concat_tables([rows, new], promote_options="none").take(picked)
    assert got.schema == rows.schema
    assert got.to_pylist() == expected.to_pylist()


@pytest.mark.parametrize("where", ["id = 3", None])
def test_an_update_that_turns_zeros_negative_writes_negative_zeros(
        where: str | None, tmp_path: Path) -> None:
    """``SET v = -v`` over zeros makes -0.0, which Arrow's equality takes for the 0.0 there:
    copy-on-write must not find the column unchanged and keep the old zeros, whether few
    rows change (taken across the chunks) or all (one array), top-level or in a list."""
    import math

    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("v", pa.float64()),
                        ("l", pa.list_(pa.float64()))])
    dc.DeltaTable.create(uri, schema)
    dc.write(uri, pa.table({"id": list(range(40)), "v": [0.0] * 40,
                            "l": [[0.0, 1.0]] * 40}, schema=schema))
    dc.DeltaTable(uri).update({"v": "-v"}, where)
    rows = dc.DeltaTable(uri).to_arrow().sort_by("id")
    negative = {i for i, v in enumerate(rows.column("v").to_pylist())
                if math.copysign(1.0, v) < 0}
    assert negative == ({3} if where else set(range(40)))

    from deltacommit.ops.rowlevel import replaced
    old = pa.table({"l": pa.chunked_array([[[0.0]] * 20, [[0.0]] * 20])})
    for positions in ([3], list(range(40))):
        new = pa.table({"l": [[-0.0]] * len(positions)})
        got = replaced(old, np.array(positions, np.int64), new).column("l").to_pylist()
        assert [i for i, x in enumerate(got) if math.copysign(1.0, x[0]) < 0] == positions


# --------------------------------------------------------------------------- LIKE

NAMES = pa.schema([("id", pa.int64()), ("name", pa.string()), ("v", pa.int64()),
                   ("p", pa.string())])


def _names_table(tmp_path: Path, dvs: bool) -> str:
    uri = str(tmp_path / "names")
    dc.DeltaTable.create(uri, NAMES, partition_by=["p"], configuration={
        "delta.enableDeletionVectors": "true"} if dvs else None)
    rows = [(1, "abc", "x"), (2, "abcd", "x"), (3, "xabc", "y"), (4, None, "y"),
            (5, "a.c", "x_"), (6, "a%c", "x_"), (7, "ABC", "y"), (8, "zz_x", "y")]
    for chunk in (rows[:3], rows[3:6], rows[6:]):
        dc.write(uri, pa.table({"id": [r[0] for r in chunk], "name": [r[1] for r in chunk],
                                "v": [0] * len(chunk), "p": [r[2] for r in chunk]},
                               schema=NAMES))
    return uri


def _values(uri: str) -> dict[int, int]:
    ours = {r["id"]: r["v"] for r in dc.DeltaTable(uri).to_arrow().to_pylist()}
    theirs = {r["id"]: r["v"] for r in peer_read(uri).to_pylist()}
    assert ours == theirs
    return ours


@pytest.mark.parametrize("dvs", [False, True])
def test_update_and_merge_conditions_with_like_change_exactly_the_matching_rows(
        tmp_path: Path, dvs: bool) -> None:
    uri = _names_table(tmp_path, dvs)
    m = dc.DeltaTable(uri).update({"v": "v + 1"}, "name LIKE 'abc%'")
    assert m["num_updated_rows"] == 2
    assert _values(uri) == {1: 1, 2: 1, 3: 0, 4: 0, 5: 0, 6: 0, 7: 0, 8: 0}
    # '.' and '%' escaped are themselves; a partition column is matched too.
    dc.DeltaTable(uri).update({"v": "v + 10"}, "name LIKE 'a\\%c' OR p LIKE 'x\\_'")
    assert _values(uri) == {1: 1, 2: 1, 3: 0, 4: 0, 5: 10, 6: 10, 7: 0, 8: 0}
    dc.DeltaTable(uri).update({"v": "v + 100"}, "name ILIKE 'abc' OR name NOT LIKE '%_x'")
    # NULL NOT LIKE is NULL: row 4 is left alone; 'zz_x' ends with one character and x.
    assert _values(uri) == {1: 101, 2: 101, 3: 100, 4: 0, 5: 110, 6: 110, 7: 100, 8: 0}
    source = pa.table({"id": [1, 3, 4, 7, 9], "tag": ["a!%", "b", "c", "d", "e"]})
    (dc.DeltaTable(uri).merge(source, "t.id = s.id", "s", "t")
     .when_matched_update({"v": "-1"}, "t.name LIKE 'a!%%' ESCAPE '!' OR t.name ILIKE 'x%'")
     .when_matched_update({"v": "-2"}, "s.tag NOT LIKE 'a%' AND t.name IS NULL")
     .when_not_matched_insert({"id": "s.id", "name": "s.tag", "v": "7", "p": "'y'"},
                              "s.tag LIKE '_'")
     .execute())
    assert _values(uri) == {1: 101, 2: 101, 3: -1, 4: -2, 5: 110, 6: 110, 7: 100, 8: 0, 9: 7}


def test_a_like_condition_with_a_prefix_opens_only_the_files_that_may_match(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "prefixes")
    dc.DeltaTable.create(uri, NAMES)
    for letter in "abcdefgh":
        dc.write(uri, pa.table({"id": [1, 2], "name": [letter + "1", letter + "2"], "v": [0, 0],
                                "p": ["x", "x"]}, schema=NAMES))
    m = dc.DeltaTable(uri).update({"v": "1"}, "name LIKE 'c%'")
    assert (m["num_updated_rows"], m["num_removed_files"]) == (2, 1)
    assert sorted(r["name"] for r in dc.DeltaTable(uri).to_arrow().to_pylist()
                  if r["v"] == 1) == ["c1", "c2"]


def test_a_like_condition_deltacommit_cannot_match_is_refused_and_changes_nothing(
        tmp_path: Path) -> None:
    uri = _names_table(tmp_path, False)
    before = _state(uri)
    with pytest.raises(InvalidArgumentError, match="name LIKE p: the pattern p is not a string"):
        dc.DeltaTable(uri).update({"v": "1"}, "name LIKE p")
    with pytest.raises(InvalidArgumentError, match="not allowed to precede 'b'"):
        (dc.DeltaTable(uri).merge(pa.table({"id": [1]}), "t.id = s.id", "s", "t")
         .when_matched_delete("t.name LIKE 'a\\b'").execute())
    assert _state(uri) == before


#: MERGE sources whose columns the evaluator takes as their plain types, as a write of the
#: same rows takes them: string and binary views (deltalake 1.6.6's query engine and Polars
#: hand them out), and dictionaries (a pandas categorical reaches Arrow as one).  Before, the
#: first was refused as if a view could not be cast to STRING, the second as comparing
#: STRING with a dictionary.
PLAIN_AS_SOURCE = {
    "views": pa.table({"id": pa.array([2, 9], pa.int64()), "v": [20.0, 90.0],
                       "p": pa.array(["a", "z"], pa.string_view())}),
    "dictionaries": pa.table({"id": pa.array([2, 9], pa.int64()).dictionary_encode(),
                              "v": [20.0, 90.0],
                              "p": pa.array(["a", "z"]).dictionary_encode()}),
}


@pytest.mark.parametrize("kind", sorted(PLAIN_AS_SOURCE))
def test_a_merge_source_with_view_or_dictionary_columns_merges_as_plain_ones(
        tmp_path: Path, kind: str) -> None:
    """As a MERGE's source, such columns join, set and insert as plain values."""
    uri = _table(tmp_path, partitioned=False)
    dc.DeltaTable(uri).merge(PLAIN_AS_SOURCE[kind], "t.id = s.id AND t.p = s.p",
                             source_alias="s", target_alias="t") \
        .when_matched_update({"v": "s.v", "p": "concat(s.p, '!')"}) \
        .when_not_matched_insert_all().execute()
    assert sorted(dc.DeltaTable(uri).to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": 1.0, "p": "a"}, {"id": 2, "v": 20.0, "p": "a!"},
        {"id": 3, "v": None, "p": "b"}, {"id": 4, "v": 4.0, "p": "b"},
        {"id": 5, "v": 5.0, "p": "c"}, {"id": 9, "v": 90.0, "p": "z"}]


def test_comparing_whole_structs_is_refused_naming_the_fields_way(tmp_path: Path) -> None:
    """Spark equates structs field by field with NULL fields equal; Arrow has no kernel for
    it.  The MERGE is refused before anything is read, saying to compare fields (before,
    Arrow's "no kernel matching input types" was the message)."""
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"st": pa.array([{"a": 1}, {"a": 2}]), "v": [5, 6]}))
    source = pa.table({"st": pa.array([{"a": 1}]), "v": [50]})
    before = dc.DeltaTable(uri).version
    with pytest.raises(dc.InvalidArgumentError) as e:
        dc.DeltaTable(uri).merge(source, "t.st = s.st", source_alias="s", target_alias="t") \
            .when_matched_update_all().execute()
    message = str(e.value)
    assert message.startswith("MERGE into table") and "t.st = s.st" in message, message
    assert "compare their fields" in message and "kernel" not in message, message
    dc.DeltaTable(uri).merge(source, "t.st.a = s.st.a", source_alias="s", target_alias="t") \
        .when_matched_update_all().execute()
    assert dc.DeltaTable(uri).version == before + 1
    assert sorted(dc.DeltaTable(uri).to_arrow().column("v").to_pylist()) == [6, 50]
