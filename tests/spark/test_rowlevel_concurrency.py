"""``dcs.update``, ``dcs.delete`` and ``dcs.merge`` against concurrent commits: on a table
with deletion vectors and row tracking the Spark verbs are checked row by row, as the Python
verbs are.

The winner commits from inside the Spark verb's run, after its tasks read the table and wrote
their files and the driver staged them, just before its commit (``commit_between``): the verb
meets the winner in its commit loop.  Appends of rows the verb does not act on and a
compaction let it land after the winner, and the table then equals the serial result (the
winner, then the verb); a winner that deleted a row the verb changed or read, or appended a
row it would have acted on, still conflicts.  Without row tracking Spark's file-level rules
stay: the same append aborts it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit import spark as dcs
from deltacommit.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    RewriteCheckError,
)
from deltacommit.ops.rowlevel import Rewritten
from deltacommit.protocol.actions import Add
from deltacommit.spark.rowlevel import TaskResults, reported_rows
from deltacommit.spark.rowlevel_tasks import positions_text, text_positions
from deltacommit.testing import S3Bucket
from tests.concurrency.hooks import commit_between
from tests.concurrency.row_level import ROW_LEVEL

#: Deletion vectors without row tracking: Spark's file-level conflict rules.
FILE_LEVEL = {"delta.enableDeletionVectors": "true"}

Rows = dict[int, int]
#: Every row of a table as (id, v), sorted: an id held twice shows twice.
Listing = list[tuple[int, int]]


def _table(tmp_path: Path, configuration: Mapping[str, str]) -> str:
    """Ids 0..39 with ``v`` = id, in four files of ten rows."""
    uri = str(tmp_path / "t")
    dc.write(uri, _arrow({i: i for i in range(40)}), configuration=dict(configuration),
             target_file_rows=10)
    return uri


def _initial() -> Listing:
    return [(i, i) for i in range(40)]


def _arrow(rows: Rows) -> pa.Table:
    return pa.table({"id": pa.array(list(rows), pa.int64()),
                     "v": pa.array(list(rows.values()), pa.int64())})


def _append(uri: str, rows: Rows) -> Callable[[], None]:
    def append() -> None:
        dc.write(uri, _arrow(rows), mode="append")

    return append


def _rows(uri: str) -> Listing:
    data = dc.DeltaTable(uri).to_arrow().to_pylist()
    return sorted((int(r["id"]), int(r["v"])) for r in data)


def _landed_after_winner(uri: str, operation: str) -> None:
    """The last commit is ``operation``'s, built on the version before the winner's: it
    met the winner in its commit loop and was checked against it."""
    table = dc.DeltaTable(uri)
    (last,) = table.history(1)
    assert last["operation"] == operation
    assert last["readVersion"] == table.version - 2


def _upsert(spark: Any, uri: str, source: Rows, matched: bool = True) -> dict[str, Any]:
    """MERGE on ``id``: matched rows take the source's ``v`` (``matched``: else they are
    left as they are), the source rows no target row matches are inserted."""
    df = spark.createDataFrame([(k, v) for k, v in source.items()], "id long, v long")
    merger: Any = dcs.merge(df, uri, "t.id = s.id", source_alias="s", target_alias="t")
    if matched:
        merger = merger.when_matched_update_all()
    result: dict[str, Any] = merger.when_not_matched_insert_all().execute()
    return result


def _upserted(rows: Listing, source: Rows) -> Listing:
    """The upsert of ``source`` on plain rows."""
    held = {i for i, _ in rows}
    return sorted([(i, source.get(i, v)) for i, v in rows]
                  + [(k, v) for k, v in source.items() if k not in held])


def test_an_update_lands_beside_an_append_of_rows_it_does_not_match(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _table(tmp_path, ROW_LEVEL)
    # The new rows lie inside the statistics of the files the UPDATE read (ids 0..39), and
    # hold ids it changed in other rows; none has an id its predicate matches.
    appended = {7: 1007, 21: 1021}
    commit_between(monkeypatch, _append(uri, appended))
    result = dcs.update(uri, {"v": "v + 100"}, "id IN (3, 13, 25)", spark=spark)
    assert result["num_updated_rows"] == 3
    _landed_after_winner(uri, "UPDATE")
    serial = [(i, v + 100 if i in (3, 13, 25) else v) for i, v in _initial()]
    assert _rows(uri) == sorted(serial + list(appended.items()))


def test_an_upsert_lands_beside_an_append_of_keys_between_its_own(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _table(tmp_path, ROW_LEVEL)
    source = {3: 300, 5: 500, 27: 2700, 50: 5000, 52: 5200}
    appended = {4: 1004, 51: 1051}  # between its keys: inside their range, none of them
    commit_between(monkeypatch, _append(uri, appended))
    result = _upsert(spark, uri, source)
    assert (result["num_target_rows_updated"], result["num_target_rows_inserted"]) == (3, 2)
    _landed_after_winner(uri, "MERGE")
    assert _rows(uri) == _upserted(_initial() + list(appended.items()), source)


def test_an_upsert_conflicts_with_an_append_of_a_key_it_inserts(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # In series after the append, the MERGE would update the new row 50 instead of
    # inserting a second one.
    uri = _table(tmp_path, ROW_LEVEL)
    commit_between(monkeypatch, _append(uri, {50: 1050}))
    with pytest.raises(ConcurrentAppendException):
        _upsert(spark, uri, {3: 300, 50: 5000})
    assert _rows(uri) == sorted([*_initial(), (50, 1050)])


def test_a_delete_lands_beside_a_compaction_of_the_files_it_changed(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _table(tmp_path, ROW_LEVEL)

    def compact() -> None:
        assert dc.DeltaTable(uri).optimize.compact()["numFilesRemoved"] == 4

    commit_between(monkeypatch, compact)
    result = dcs.delete(uri, "id = 7 OR id = 33", spark=spark)
    assert result["num_deleted_rows"] == 2
    _landed_after_winner(uri, "DELETE")
    assert _rows(uri) == [r for r in _initial() if r[0] not in (7, 33)]
    (only,) = dc.DeltaTable(uri).files()  # its deletes moved onto the compacted file
    assert (only.deletion_vector or {}).get("cardinality") == 2


def test_an_update_conflicts_with_a_delete_of_a_row_it_changed(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _table(tmp_path, ROW_LEVEL)
    commit_between(monkeypatch, lambda: dc.DeltaTable(uri).delete("id = 13"))
    with pytest.raises(ConcurrentDeleteDeleteException):
        dcs.update(uri, {"v": "v + 100"}, "id IN (3, 13)", spark=spark)
    assert _rows(uri) == [r for r in _initial() if r[0] != 13]


def test_an_insert_only_merge_conflicts_with_a_delete_of_a_row_it_matched(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Row 3 matched a source row and was left as it was: it kept that source row from being
    # inserted.  In series after the delete, the MERGE would insert it.
    uri = _table(tmp_path, ROW_LEVEL)
    commit_between(monkeypatch, lambda: dc.DeltaTable(uri).delete("id = 3"))
    with pytest.raises(ConcurrentDeleteReadException):
        _upsert(spark, uri, {3: 300, 50: 5000}, matched=False)
    assert _rows(uri) == [r for r in _initial() if r[0] != 3]


def test_an_insert_only_merge_lands_beside_a_delete_of_a_row_it_did_not_match(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _table(tmp_path, ROW_LEVEL)
    commit_between(monkeypatch, lambda: dc.DeltaTable(uri).delete("id = 4"))
    _upsert(spark, uri, {3: 300, 50: 5000}, matched=False)
    _landed_after_winner(uri, "MERGE")
    assert _rows(uri) == sorted([r for r in _initial() if r[0] != 4] + [(50, 5000)])


@pytest.mark.parametrize(("appended", "conflict"), [(4, True), (30, False)])
def test_beyond_the_keys_collected_an_upsert_reads_the_keys_range(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, appended: int,
        conflict: bool) -> None:
    # With more distinct source keys than the driver collects, the MERGE records their range
    # [3, 27]: a new row between two keys conflicts (looser than the keys), one outside lands.
    # The module, not the ``merge`` function ``deltacommit.spark`` exports under its name.
    monkeypatch.setattr(importlib.import_module("deltacommit.spark.merge"), "KEYS_COLLECTED", 2)
    uri = _table(tmp_path, ROW_LEVEL)
    source = {3: 300, 5: 500, 27: 2700}
    commit_between(monkeypatch, _append(uri, {appended: 1000 + appended}))
    if conflict:
        with pytest.raises(ConcurrentAppendException):
            _upsert(spark, uri, source)
        assert _rows(uri) == sorted([*_initial(), (appended, 1000 + appended)])
    else:
        _upsert(spark, uri, source)
        _landed_after_winner(uri, "MERGE")
        assert _rows(uri) == _upserted([*_initial(), (appended, 1000 + appended)], source)


@pytest.mark.parametrize("verb", ["update", "merge"])
def test_the_file_level_rules_stay_without_row_tracking(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verb: str) -> None:
    uri = _table(tmp_path, FILE_LEVEL)
    appended = {7: 1007}
    commit_between(monkeypatch, _append(uri, appended))
    with pytest.raises(ConcurrentAppendException):
        if verb == "update":
            dcs.update(uri, {"v": "v + 100"}, "id IN (3, 13, 25)", spark=spark)
        else:
            _upsert(spark, uri, {3: 300, 50: 5000})
    assert _rows(uri) == sorted([*_initial(), *appended.items()])


def test_row_positions_travel_compactly_and_come_back_exactly() -> None:
    # A dense run and a sparse tail over more than 65,536 rows (several bitmap containers).
    positions = np.r_[np.arange(0, 70_000), np.arange(100_000, 300_000, 7)].astype(np.int64)
    text = positions_text(positions)
    assert len(text) < 4 * len(positions) // 3
    assert np.array_equal(text_positions(text, 300_000, "f"), positions)
    assert len(text_positions(positions_text(np.zeros(0, np.int64)), 10, "f")) == 0
    with pytest.raises(RewriteCheckError, match="do not decode"):
        text_positions(positions_text(np.array([10], np.int64)), 10, "f")  # past the end
    with pytest.raises(RewriteCheckError, match="do not decode"):
        text_positions("not base64!", 10, "f")


def test_a_tasks_report_of_rows_is_checked_before_it_is_recorded() -> None:
    files = [Add(f"f{i}.parquet", {}, 1, 0) for i in range(2)]

    def report(number: int, changed: Sequence[int], before: Sequence[int] = ()
               ) -> dict[str, Any]:
        return {"file": number, "numRows": 10,
                "deletedBefore": positions_text(np.array(before, np.int64)),
                "changed": positions_text(np.array(changed, np.int64)), "read": ""}

    def results(rows: list[dict[str, Any]], removed: list[int]) -> TaskResults:
        return TaskResults(Rewritten(removes=[files[i] for i in removed]), rows=rows)

    (good,) = reported_rows(files, results([report(1, [2, 5], [0])], [1]), "op")
    assert good.add is files[1] and good.changed.tolist() == [2, 5]
    assert good.deleted_before.tolist() == [0] and good.num_rows == 10
    bad = {
        "not given": ([report(2, [1])], []),
        "twice": ([report(0, [1]), report(0, [2])], [0]),
        "deleted when it was read": ([report(0, [1], [1])], [0]),
        "did not remove": ([report(0, [1])], []),
        "no changed rows": ([], [0]),
    }
    for why, (rows, removed) in bad.items():
        with pytest.raises(RewriteCheckError, match=why):
            reported_rows(files, results(rows, removed), "op")


def _lying_tasks(monkeypatch: pytest.MonkeyPatch, key: str,
                 lie: Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]]) -> None:
    """The tasks' reports of rows say ``lie(positions)`` for ``key`` of every file where
    they said ``positions``: what the files they wrote hold is unchanged."""
    rowlevel = importlib.import_module("deltacommit.spark.rowlevel")
    real = rowlevel.run_row_tasks

    def run(*args: Any) -> TaskResults:
        results: TaskResults = real(*args)
        for doc in results.rows:
            told = text_positions(doc[key], int(doc["numRows"]), "report")
            doc[key] = positions_text(lie(told).astype(np.int64))
        return results

    monkeypatch.setattr(rowlevel, "run_row_tasks", run)


@pytest.mark.parametrize(("predicate", "lie", "why"), [
    # Each row after the one the task rewrote: after a compaction the retry would delete
    # rows 4 and 14 and leave the old 3 and 13 beside their updates.
    ("id IN (3, 13)", lambda p: p + 1, "new deletion vector deletes"),
    # A file rewritten whole (ids 0..9), its first row left out: the old row 0 would stay.
    ("id < 10", lambda p: p[1:], "though they removed it"),
])
def test_a_report_of_changed_rows_other_than_those_rewritten_is_refused(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, predicate: str,
        lie: Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]], why: str) -> None:
    # The commit's deletion vectors would be right, but the record is what a retry rebases
    # with, so the report is compared with them first.
    uri = _table(tmp_path, ROW_LEVEL)
    _lying_tasks(monkeypatch, "changed", lie)

    def compact() -> None:
        dc.DeltaTable(uri).optimize.compact()

    commit_between(monkeypatch, compact)
    with pytest.raises(RewriteCheckError, match=why):
        dcs.update(uri, {"v": "v + 100"}, predicate, spark=spark)
    assert _rows(uri) == _initial()


def test_a_report_of_rows_deleted_before_other_than_the_files_deletion_vector_is_refused(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _table(tmp_path, ROW_LEVEL)
    dc.DeltaTable(uri).delete("id = 0")
    _lying_tasks(monkeypatch, "deletedBefore", lambda p: p[:0])
    with pytest.raises(RewriteCheckError, match="deleted when"):
        dcs.update(uri, {"v": "v + 100"}, "id IN (3, 13)", spark=spark)
    assert _rows(uri) == _initial()[1:]


def test_on_s3_reports_of_rows_are_checked_against_the_deletion_vectors_read_in_threads(
        spark: Any, s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    # On an object store the deletion vectors are read in threads: a truthful report of
    # four files lands beside a compaction with the serial result, a false one is refused.
    uri, options = f"{s3_bucket.uri}/t", s3_bucket.storage_options
    dc.write(uri, _arrow({i: i for i in range(40)}), configuration=ROW_LEVEL,
             target_file_rows=10, storage_options=options)
    table = dc.DeltaTable(uri, storage_options=options)

    def listing() -> Listing:
        data = dc.DeltaTable(uri, storage_options=options).to_arrow().to_pylist()
        return sorted((int(r["id"]), int(r["v"])) for r in data)

    def compact() -> None:
        dc.DeltaTable(uri, storage_options=options).optimize.compact()

    commit_between(monkeypatch, compact)
    dcs.update(table, {"v": "v + 100"}, "id IN (3, 13, 23, 33)", spark=spark)
    updated = [(i, v + 100 if i % 10 == 3 else v) for i, v in _initial()]
    assert listing() == updated
    _lying_tasks(monkeypatch, "changed", lambda p: p + 1)
    with pytest.raises(RewriteCheckError, match="new deletion vector deletes"):
        dcs.update(dc.DeltaTable(uri, storage_options=options), {"v": "v + 100"},
                   "id IN (4, 14)", spark=spark)
    assert listing() == updated
