"""Rewrites keep every row exactly: compaction reads each file in its own schema, every rewrite
proves its output before it commits (or deletes it and says why), and a VACUUM with a short
retention landing between a rewrite's writes and its commit cannot delete what it commits."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.errors import InvalidArgumentError, RewriteCheckError
from deltacommit.io.datafiles import WriteTarget, write_rows
from deltacommit.io.storage.memory import MemoryStore
from deltacommit.ops import auto_compact, optimize
from deltacommit.ops import delete as dv_delete
from deltacommit.ops.optimize import CompactionBin
from deltacommit.protocol.actions import Protocol
from deltacommit.protocol.commit_window import COMMIT_WINDOW_MS, UNCOMMITTED_FLOOR_MS
from deltacommit.runtime.clock import ManualClock
from tests.arrow_strategies import canonical_rows

STRUCT_A = pa.struct([("a", pa.int64())])
STRUCT_AB = pa.struct([("a", pa.int64()), ("b", pa.string())])


def _evolve(uri: str) -> None:
    """What Spark commits for ``ALTER TABLE ... CHANGE COLUMN f TYPE double``, ``... d TYPE
    timestamp_ntz`` and ``ADD COLUMNS (s.b string)``: wider types and a nested field."""
    t = dc.DeltaTable(uri)
    schema = json.loads(t.metadata.schema_string)
    for f in schema["fields"]:
        if f["name"] == "f":
            f["type"] = "double"
            f["metadata"]["delta.typeChanges"] = [{"fromType": "float", "toType": "double"}]
        elif f["name"] == "d":
            f["type"] = "timestamp_ntz"
            f["metadata"]["delta.typeChanges"] = [{"fromType": "date",
                                                   "toType": "timestamp_ntz"}]
        elif f["name"] == "s":
            f["type"]["fields"].append({"name": "b", "type": "string", "nullable": True,
                                        "metadata": {}})
    features = ["typeWidening", "timestampNtz"]
    metadata = dataclasses.replace(
        t.metadata, schema_string=json.dumps(schema),
        configuration={**t.metadata.configuration, "delta.enableTypeWidening": "true"})
    with t.transaction("CHANGE COLUMN") as txn:
        txn.update_protocol(Protocol(3, 7, features, features))
        txn.update_metadata(metadata)


def _old_rows(i: int) -> pa.Table:
    return pa.table({"id": [i], "f": pa.array([1.5 + i], pa.float32()),
                     "d": pa.array([dt.date(2024, 1, 2 + i)], pa.date32()),
                     "s": pa.array([{"a": i}], STRUCT_A)})


def _new_rows(i: int) -> pa.Table:
    return pa.table({"id": [i], "f": pa.array([0.1 + i], pa.float64()),
                     "d": pa.array([dt.datetime(2024, 5, 6, 7, 8, 9 + i)], pa.timestamp("us")),
                     "s": pa.array([{"a": i, "b": f"x{i}"}], STRUCT_AB)})


def _history(uri: str, config: dict[str, str] | None = None) -> None:
    """Two files written before the schema changed, two after."""
    dc.write(uri, _old_rows(0), configuration=config)
    dc.write(uri, _old_rows(1))
    _evolve(uri)
    dc.write(uri, _new_rows(2))
    dc.write(uri, _new_rows(3))


def test_compaction_keeps_widened_types_and_nested_fields_added_later(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _history(uri)
    before = dc.DeltaTable(uri).to_arrow()
    assert before.schema.field("s").type == STRUCT_AB  # the reader, file by file, is right
    metrics = dc.DeltaTable(uri).optimize.compact()
    assert metrics["numFilesRemoved"] == 4 and metrics["numFilesAdded"] == 1
    after = dc.DeltaTable(uri).to_arrow()
    assert canonical_rows(after) == canonical_rows(before)
    row3 = next(r for r in after.to_pylist() if r["id"] == 3)
    assert row3 == {"id": 3, "f": 3.1, "d": dt.datetime(2024, 5, 6, 7, 8, 12),
                    "s": {"a": 3, "b": "x3"}}


def test_auto_compaction_after_plain_writes_keeps_them_too(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _history(uri, {"delta.autoOptimize.autoCompact": "true",
                   "delta.autoOptimize.autoCompact.minNumFiles": "6"})
    expected = canonical_rows(dc.DeltaTable(uri).to_arrow())
    for i in range(4, 6):  # the sixth small file starts a compaction
        dc.write(uri, _new_rows(i))
        expected = sorted(expected + canonical_rows(_new_rows(i).cast(
            dc.DeltaTable(uri).to_arrow().schema)))
    assert auto_compact.wait_idle(60)
    t = dc.DeltaTable(uri)
    assert len(t.files()) == 1 and t.history(1)[0]["operation"] == "OPTIMIZE"
    assert canonical_rows(t.to_arrow()) == expected


def test_column_mapping_renames_survive_compaction(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [1], "s": pa.array([{"a": 1}], STRUCT_A)}),
             configuration={"delta.columnMapping.mode": "name"})
    t = dc.DeltaTable(uri)
    t.rename_column("id", "key")
    t.rename_column(["s", "a"], "alpha")
    dc.write(uri, pa.table({"key": [2], "s": pa.array([{"alpha": 2}],
                                                      pa.struct([("alpha", pa.int64())]))}))
    before = canonical_rows(dc.DeltaTable(uri).to_arrow())
    dc.DeltaTable(uri).optimize.compact()
    after = dc.DeltaTable(uri)
    assert len(after.files()) == 1 and canonical_rows(after.to_arrow()) == before


# --------------------------------------------------------------------------- rule 5


def _small_files(uri: str, n: int = 4) -> None:
    for i in range(n):
        dc.write(uri, pa.table({"id": [2 * i, 2 * i + 1], "p": ["a", "a"]}), partition_by=["p"])


def _dropping_first_row(original: Any) -> Any:
    def write(store: Any, target: WriteTarget, rows: pa.Table, **kw: Any) -> Any:
        return original(store, target, rows.slice(1), **kw)
    return write


def _table_files(uri: str) -> set[str]:
    return {str(p.relative_to(uri)) for p in Path(uri).rglob("*.parquet")}


@pytest.mark.parametrize("how", ["compact", "z_order"])
def test_a_rewrite_that_lost_a_row_is_refused_and_its_files_deleted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    uri = str(tmp_path / "t")
    _small_files(uri)
    files, version = _table_files(uri), dc.DeltaTable(uri).version
    monkeypatch.setattr(optimize, "write_rows", _dropping_first_row(write_rows))
    t = dc.DeltaTable(uri)
    with pytest.raises(RewriteCheckError, match=r"7 rows where 8 were expected.*deleted"):
        if how == "compact":
            t.optimize.compact()
        else:
            t.optimize.z_order(["id"])
    assert _table_files(uri) == files  # what it wrote is gone
    after = dc.DeltaTable(uri)
    assert after.version == version
    assert sorted(after.to_arrow().column("id").to_pylist()) == list(range(8))


def test_a_rewriter_that_does_not_check_its_bins_is_checked_before_the_commit(
        tmp_path: Path) -> None:
    """A rewriter of its own (``compact(rewriter=...)``, as Spark's) that reports bins
    unchecked has them checked by the compaction, reading both sides again."""
    uri = str(tmp_path / "t")
    _small_files(uri)
    files = _table_files(uri)
    t = dc.DeltaTable(uri)

    def careless(bins: Sequence[CompactionBin], target: WriteTarget) -> Iterator[CompactionBin]:
        scan = t.file_scan(t.schema)
        for b in bins:
            rows = scan.read_many(b.files)
            b.added = write_rows(t.store, target, rows.slice(0, rows.num_rows - 1),
                                 clock=t.clock, random=t.random)
            yield b

    with pytest.raises(RewriteCheckError, match="7 rows where 8 were expected"):
        t.optimize.compact(rewriter=careless)
    assert _table_files(uri) == files


def test_a_delete_whose_deletion_vector_marks_other_rows_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": list(range(20))}),
             configuration={"delta.enableDeletionVectors": "true"})
    t = dc.DeltaTable(uri)
    t.delete("id < 3")  # an old deletion vector the next delete must keep
    original = dv_delete.encode_bitmap_array
    monkeypatch.setattr(dv_delete, "encode_bitmap_array",
                        lambda rows: original([r + 1 for r in rows]))  # off by one
    version = dc.DeltaTable(uri).version
    vectors = sorted(p.name for p in Path(uri).glob("deletion_vector_*.bin"))
    with pytest.raises(RewriteCheckError, match=r"new deletion vector.*deleted"):
        dc.DeltaTable(uri).delete("id IN (0, 5, 10, 15)")
    assert sorted(p.name for p in Path(uri).glob("deletion_vector_*.bin")) == vectors
    assert dc.DeltaTable(uri).version == version
    monkeypatch.setattr(dv_delete, "encode_bitmap_array", original)
    dc.DeltaTable(uri).delete("id IN (0, 5, 10, 15)")
    assert sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist()) == [
        i for i in range(3, 20) if i % 5]


def test_z_order_names_a_column_it_cannot_order(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [1], "s": pa.array([{"a": 1}], STRUCT_A),
                            "l": pa.array([[1]]), "m": pa.array([[("k", 1)]],
                                                                pa.map_(pa.string(), pa.int64()))}))
    for column, kind in (("s", "a struct"), ("l", "a list"), ("m", "a map")):
        with pytest.raises(InvalidArgumentError,
                           match=rf"column '{column}' cannot be Z-ordered: it is {kind}.*"
                                 "Z-order ranks numbers"):
            dc.DeltaTable(uri).optimize.z_order(["id", column])


# --------------------------------------------------------------------------- VACUUM race


def test_vacuum_with_retention_zero_between_rewrite_and_commit_deletes_none_of_it(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _small_files(uri)
    rewritten, vacuumed = threading.Event(), threading.Event()
    deleted: list[str] = []
    errors: list[BaseException] = []

    def vacuum() -> None:
        try:
            assert rewritten.wait(60)
            deleted.extend(dc.DeltaTable(uri).vacuum(
                retention_hours=0, dry_run=False, enforce_retention_duration=False))
        except BaseException as e:  # reported below
            errors.append(e)
        finally:
            vacuumed.set()

    def between(done: int, total: int) -> None:  # the bin is rewritten, not yet committed
        rewritten.set()
        assert vacuumed.wait(60)

    thread = threading.Thread(target=vacuum)
    thread.start()
    metrics = dc.DeltaTable(uri).optimize.compact(progress=between)
    thread.join()
    assert not errors and deleted == []
    t = dc.DeltaTable(uri)
    assert metrics["versions"] == [t.version] and len(t.files()) == 1
    assert all((Path(uri) / a.path).exists() for a in t.files())
    assert sorted(t.to_arrow().column("id").to_pylist()) == list(range(8))


def test_a_bin_too_old_to_commit_safely_is_deleted_and_left(tmp_path: Path) -> None:
    clock = ManualClock(1_800_000_000.0)
    name = f"rewrite-{tmp_path.name}"
    store = MemoryStore(name, clock=clock)
    from deltacommit.io.logstore.conditional import ConditionalPutLogStore

    t = dc.DeltaTable.create(f"memory://{name}", pa.schema([("id", pa.int64())]),
                             log_store=ConditionalPutLogStore(store), clock=clock)
    for i in range(4):
        dc.write(t, pa.table({"id": [i]}))
    version = t.version

    def stall(done: int, total: int) -> None:  # a rewriter stopped past the window
        clock.advance(COMMIT_WINDOW_MS / 1000)

    metrics = t.optimize.compact(progress=stall)
    assert metrics["versions"] == [] and metrics["binsExpiredBeforeCommit"] == 1
    assert t.version == version and len(t.files()) == 4
    assert sorted(m.path for m in store.list("") if m.path.endswith(".parquet")) == \
        sorted(a.path for a in t.files())
    # Without the stall it commits; and VACUUM keeps an untracked file until the floor.
    assert t.optimize.compact()["versions"] == [version + 1]
    store.put("part-staged.parquet", b"x")
    clock.advance(UNCOMMITTED_FLOOR_MS / 1000 - 1)
    assert t.vacuum(retention_hours=0, enforce_retention_duration=False) == \
        sorted(a.path for a in dc.DeltaTable(t.uri, log_store=t.log_store,
                                             version=version).files())
    clock.advance(2)
    assert "part-staged.parquet" in t.vacuum(retention_hours=0,
                                             enforce_retention_duration=False)


def test_a_write_whose_files_vanished_before_its_late_commit_fails_cleanly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deltacommit.errors import StagedFilesExpiredError
    from deltacommit.io.logstore.conditional import ConditionalPutLogStore
    from deltacommit.ops import write as writer

    clock = ManualClock(1_800_000_000.0)
    name = f"late-{tmp_path.name}"
    store = MemoryStore(name, clock=clock)
    t = dc.DeltaTable.create(f"memory://{name}", pa.schema([("id", pa.int64()), ("p", pa.string())]),
                             partition_by=["p"], log_store=ConditionalPutLogStore(store),
                             clock=clock)
    vacuumed: list[bool] = []

    def slow(*args: Any, **kw: Any) -> Any:  # the write stalls past the window
        adds = write_rows(*args, **kw)
        clock.advance(COMMIT_WINDOW_MS / 1000 + 1)
        if vacuumed:
            store.await_puts([a.path for a in adds])
            store.delete(adds[0].path)  # as a VACUUM of the uncommitted file would
        return adds

    monkeypatch.setattr(writer, "write_rows", slow)
    rows = pa.table({"id": [1, 2], "p": ["a", "b"]})
    assert dc.write(t, rows).version == 1  # late, but whole: committed
    vacuumed.append(True)
    with pytest.raises(StagedFilesExpiredError, match="1 of the 2 files it wrote"):
        dc.write(t, rows)
    assert t.update() == 1 and sorted(t.to_arrow().column("id").to_pylist()) == [1, 2]
    assert sorted(m.path for m in store.list("") if m.path.endswith(".parquet")) == \
        sorted(a.path for a in t.files())  # the other file of the failed write is gone too


@pytest.mark.parametrize("expected", ["same", "one value changed in the last batch",
                                      "a row more", "a row less", "reversed", "with NaN",
                                      "a zero of the other sign"])
def test_a_file_compared_in_order_batch_by_batch_proves_exactly_its_rows(
        expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rewrite's one file is read back a batch at a time and compared with the rows it
    should hold in their order; any difference (or NaN, which Arrow's equality does not
    match) sends it to the comparison as multisets, which decides: the same rows in another
    order pass, anything else (a zero of the other sign too, which Arrow's equality does not
    see) is refused and the file deleted."""
    from deltacommit.engine import rewrite_check

    monkeypatch.setattr(rewrite_check, "CHECK_BATCH_ROWS", 3)
    uri = str(tmp_path / "t")
    values = [float(i) for i in range(10)]
    if expected == "with NaN":
        values[7] = float("nan")
    rows = pa.table({"id": list(range(10)), "x": values})
    dc.write(uri, rows)
    t = dc.DeltaTable(uri)
    written = t.files()
    should = {
        "same": rows, "with NaN": rows, "reversed": rows.take(list(range(9, -1, -1))),
        "one value changed in the last batch": rows.set_column(
            1, "x", pa.array(values[:9] + [99.0])),
        "a row more": pa.concat_tables([rows, rows.slice(0, 1)]),
        "a row less": rows.slice(0, 9),
        # Arrow's equality takes -0.0 for the 0.0 the file holds; the fingerprints do not.
        "a zero of the other sign": rows.set_column(1, "x", pa.array([-0.0] + values[1:])),
    }[expected]
    scan = t.file_scan(t.schema)
    path = Path(uri) / written[0].path
    if expected == "same":
        # Proven in order, batch by batch: never read whole.
        from deltacommit.engine.scan import FileScan

        def whole(*args: Any) -> Any:
            raise AssertionError("read whole")
        monkeypatch.setattr(FileScan, "read_many", whole)
    if expected in ("same", "reversed", "with NaN"):
        rewrite_check.check_rewritten(scan, t.store, should, written, what="test")
        assert path.exists()
    else:
        with pytest.raises(RewriteCheckError):
            rewrite_check.check_rewritten(scan, t.store, should, written, what="test")
        assert not path.exists()
