"""Identity columns: values ``start + k * step`` beyond the high-water mark, unique across
concurrent writers.

A write that generates values commits them with a ``metaData`` update raising the mark; two
such writers conflict, and the loser allocates again above the winner's mark.  The racing
writer tests below start N writers at once (a barrier, each with its own table object, so
they race through the log store's conditional put) and check that no value repeats and
that the mark is the largest value.  deltalake 1.6.0 reads every table.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.errors import (
    InvalidArgumentError,
    MetadataChangedException,
    UnsupportedProtocolError,
)
from deltacommit.io.datafiles import WriteTarget, conform_rows, write_rows
from deltacommit.protocol.actions import MAX_LONG, CommitInfo, Metadata
from deltacommit.protocol.conflicts import WinningCommit, check_conflicts
from deltacommit.protocol.features.identity import (
    SCHEMA_UPDATE_TAG,
    Allocation,
    IdentityColumn,
    allocate,
    identity_columns,
    next_value,
    only_marks_changed,
    with_high_water_marks,
)

MIN_LONG = -MAX_LONG - 1


def _id_field(start: int = 1, step: int = 1, explicit: bool = False,
              mark: int | None = None) -> pa.Field[Any]:
    meta = {"delta.identity.start": str(start), "delta.identity.step": str(step),
            "delta.identity.allowExplicitInsert": "true" if explicit else "false"}
    if mark is not None:
        meta["delta.identity.highWaterMark"] = str(mark)
    return pa.field("id", pa.int64(), metadata=meta)


def _schema(**kw: Any) -> pa.Schema:
    return pa.schema([_id_field(**kw), pa.field("v", pa.string()), pa.field("p", pa.int32())])


def _data(n: int, tag: str = "x") -> pa.Table:
    return pa.table({"v": pa.array([f"{tag}{i}" for i in range(n)], pa.string()),
                     "p": pa.array([i % 3 for i in range(n)], pa.int32())})


def _mark(path: str) -> int | None:
    raw = (dc.DeltaTable(path).schema.field("id").metadata or {}).get(
        b"delta.identity.highWaterMark")
    return None if raw is None else int(raw)


# --------------------------------------------------------------------------- pure rules


@pytest.mark.parametrize("start, step, mark, expected", [
    (1, 1, None, 1), (1, 1, 1, 2), (1, 1, 10, 11), (1, 5, 10, 11), (1, 5, 11, 16),
    (1, 5, -100, 1), (100, -3, None, 100), (100, -3, 100, 97), (100, -3, 95, 94),
    (100, -3, 500, 100), (-5, 2, -5, -3), (0, 10, 7, 10)])
def test_next_value(start: int, step: int, mark: int | None, expected: int) -> None:
    assert next_value(IdentityColumn("id", start, step, mark, False)) == expected


@given(st.integers(-10**6, 10**6), st.integers(-50, 50).filter(bool),
       st.one_of(st.none(), st.integers(-10**6, 10**6)))
def test_next_value_is_on_the_grid_and_beyond_the_mark(start: int, step: int,
                                                       mark: int | None) -> None:
    v = next_value(IdentityColumn("id", start, step, mark, False))
    assert (v - start) % step == 0 and (v - start) // step >= 0
    if mark is not None:
        assert (v > mark) if step > 0 else (v < mark)
        before = v - step  # the previous value of the grid is not beyond the mark
        assert (v - start) // step == 0 or ((before <= mark) if step > 0 else (before >= mark))


def test_allocation_refuses_overflow_and_explicit_values() -> None:
    near = IdentityColumn("id", MAX_LONG - 5, 2, None, False)
    assert allocate([near], ["v"], 3, "t")["id"].last == MAX_LONG - 1
    with pytest.raises(InvalidArgumentError, match="overflow"):
        allocate([near], ["v"], 4, "t")
    low = IdentityColumn("id", MIN_LONG + 1, -1, None, False)
    with pytest.raises(InvalidArgumentError, match="overflow"):
        allocate([low], ["v"], 3, "t")
    with pytest.raises(InvalidArgumentError, match="GENERATED ALWAYS"):
        allocate([IdentityColumn("id", 1, 1, None, False)], ["id", "v"], 3, "t")
    assert allocate([IdentityColumn("id", 1, 1, None, True)], ["id", "v"], 3, "t") == {}
    assert allocate([near], ["v"], 0, "t") == {}
    assert Allocation("id", 10, -3, 4).values().to_pylist() == [10, 7, 4, 1]


def test_high_water_mark_update_keeps_the_rest_of_the_schema() -> None:
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {
            "delta.identity.start": 1, "delta.identity.step": 1,
            "delta.identity.allowExplicitInsert": False, "comment": "x"}},
        {"name": "v", "type": "string", "nullable": True, "metadata": {}}]}
    before = Metadata("m", json.dumps(schema), [], {"a": "b"})
    after = with_high_water_marks(before, [Allocation("id", 1, 1, 10)])
    fields = json.loads(after.schema_string)["fields"]
    assert fields[0]["metadata"]["delta.identity.highWaterMark"] == 10
    assert fields[0]["metadata"]["comment"] == "x" and fields[1] == schema["fields"][1]
    assert only_marks_changed(before, after)
    assert not only_marks_changed(before, Metadata("m", json.dumps(schema), [], {"a": "c"}))


def test_winner_that_only_raised_marks_passes_a_writer_without_metadata(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = dc.DeltaTable.create(path, _schema())
    read = table.snapshot.metadata
    raised = with_high_water_marks(read, [Allocation("id", 1, 1, 5)])
    plain = table.transaction("WRITE").summary()
    with_md = table.transaction("WRITE")
    with_md.update_metadata(raised)
    winner = WinningCommit(1, "WRITE", metadata=raised)
    check_conflicts(plain, winner, path)  # a plain append or a compaction carries on
    with pytest.raises(MetadataChangedException):
        check_conflicts(with_md.summary(), winner, path)  # another identity writer does not
    other = Metadata(read.id, read.schema_string, [], {"delta.appendOnly": "true"})
    with pytest.raises(MetadataChangedException):
        check_conflicts(plain, WinningCommit(1, "SET TBLPROPERTIES", metadata=other), path)
    tagged = WinningCommit.from_actions(1, [
        CommitInfo({"operation": "WRITE", "tags": {SCHEMA_UPDATE_TAG: "true"}}),
        raised])
    assert tagged.identity_mark_update


# --------------------------------------------------------------------------- tables


def test_create_records_the_feature(tmp_path: Path) -> None:
    legacy = dc.DeltaTable.create(str(tmp_path / "a"), _schema())
    assert legacy.protocol.min_writer_version == 6
    v7 = dc.DeltaTable.create(str(tmp_path / "b"), _schema(),
                              configuration={"delta.minWriterVersion": "7"})
    assert "identityColumns" in (v7.protocol.writer_features or [])
    assert identity_columns(v7.schema, "t") == [IdentityColumn("id", 1, 1, None, False)]
    with pytest.raises(UnsupportedProtocolError, match="non-zero"):
        dc.DeltaTable.create(str(tmp_path / "c"), _schema(step=0))


def test_writes_generate_values_and_raise_the_mark(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = dc.DeltaTable.create(path, _schema(start=-5, step=-3), partition_by=["p"])
    dc.write(table, _data(4))
    assert _mark(path) == -14
    result = dc.append(table, _data(2, "y"))
    assert _mark(path) == -20
    log = json.loads((Path(path) / "_delta_log" / f"{result.version:020d}.json")
                     .read_text().splitlines()[0])
    assert log["commitInfo"]["tags"] == {SCHEMA_UPDATE_TAG: "true"}
    dc.write(table, _data(1, "z"), mode="overwrite", predicate="p = 0")
    ids = sorted(dc.DeltaTable(path).to_arrow().column("id").to_pylist())
    peer = sorted(deltalake.DeltaTable(path).to_pyarrow_table().column("id").to_pylist())
    assert ids == peer == [-23, -20, -11, -8]  # the p=0 rows (-5, -14, -17) replaced by -23
    assert _mark(path) == -23
    dc.write(table, _data(0))  # no rows: no values, no metadata change
    assert _mark(path) == -23


def test_explicit_values(tmp_path: Path) -> None:
    always = dc.DeltaTable.create(str(tmp_path / "a"), _schema())
    data = _data(2).append_column("id", pa.array([100, 200], pa.int64()))
    with pytest.raises(InvalidArgumentError, match="'id' is an identity column GENERATED "
                       "ALWAYS"):
        dc.write(always, data)
    assert always.version == 0
    by_default = dc.DeltaTable.create(str(tmp_path / "b"), _schema(explicit=True))
    dc.write(by_default, data)
    assert _mark(by_default.uri) is None  # explicit values do not move the mark
    dc.write(by_default, _data(2))
    assert sorted(dc.DeltaTable(by_default.uri).to_arrow().column("id").to_pylist()) == [
        1, 2, 100, 200]


def test_a_spark_table_with_a_high_water_mark(tmp_path: Path) -> None:
    """A log as Spark writes it (JSON numbers and booleans in the field metadata, writer
    version 6): values continue past its mark on its grid."""
    path = tmp_path / "t"
    (path / "_delta_log").mkdir(parents=True)
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": False, "metadata": {
            "delta.identity.start": 3, "delta.identity.step": 4,
            "delta.identity.highWaterMark": 15, "delta.identity.allowExplicitInsert": False}},
        {"name": "v", "type": "string", "nullable": True, "metadata": {}}]}
    actions = [
        {"commitInfo": {"timestamp": 1, "operation": "CREATE TABLE", "isBlindAppend": True}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 6}},
        {"metaData": {"id": "5f0c1a3e-0000-4000-8000-000000000000",
                      "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(schema), "partitionColumns": [],
                      "configuration": {}, "createdTime": 1}}]
    (path / "_delta_log" / f"{0:020d}.json").write_text(
        "\n".join(json.dumps(a) for a in actions) + "\n")
    dc.write(str(path), pa.table({"v": ["a", "b", "c"]}))
    assert sorted(dc.DeltaTable(str(path)).to_arrow().column("id").to_pylist()) == [19, 23, 27]
    assert deltalake.DeltaTable(str(path)).to_pyarrow_table().num_rows == 3
    field = json.loads(dc.DeltaTable(str(path)).metadata.schema_string)["fields"][0]
    assert field["metadata"] == {"delta.identity.start": 3, "delta.identity.step": 4,
                                 "delta.identity.highWaterMark": 27,
                                 "delta.identity.allowExplicitInsert": False}


def test_the_appender_allocates_across_its_buffer(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    dc.DeltaTable.create(path, _schema(start=100, step=10))
    appender = dc.Appender(path, "app", background=False)
    appender.append(_data(2, "a"), 0)
    appender.append(_data(3, "b"), 1)
    appender.flush()
    appender.append(_data(1, "c"), 2)
    appender.flush()
    rows = sorted((r["id"], r["v"]) for r in dc.DeltaTable(path).to_arrow().to_pylist())
    assert rows == [(100, "a0"), (110, "a1"), (120, "b0"), (130, "b1"), (140, "b2"),
                    (150, "c0")]
    assert _mark(path) == 150
    # A writer outside the protocol gets no allocation and refuses the rows.
    target = WriteTarget.of(path, dc.DeltaTable(path).snapshot)
    with pytest.raises(InvalidArgumentError, match=r"lacks identity column 'id'"):
        conform_rows(target, _data(1))


def test_racing_appenders_and_writers_never_duplicate_a_value(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    dc.DeltaTable.create(path, _schema())
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def appender(i: int) -> None:
        try:
            app = dc.Appender(dc.DeltaTable(path), f"app{i}", background=False)
            barrier.wait()
            for j in range(3):
                app.append(_data(4, f"a{i}-{j}-"), j)
                app.flush()
        except BaseException as e:  # reported below
            errors.append(e)

    def writer(i: int) -> None:
        try:
            table = dc.DeltaTable(path)
            barrier.wait()
            for j in range(3):
                dc.write(table, _data(4, f"w{i}-{j}-"))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=f, args=(i,)) for i, f in
               enumerate([appender, appender, writer, writer])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ids = dc.DeltaTable(path).to_arrow().column("id").to_pylist()
    assert sorted(ids) == list(range(1, 49))
    assert _mark(path) == 48


def _race(path: str, writers: int, rows: int, *, group_commit: bool = False) -> None:
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []
    shared = dc.DeltaTable(path, group_commit=True) if group_commit else None

    def run(i: int) -> None:
        try:
            table = shared or dc.DeltaTable(path)
            barrier.wait()
            for j in range(2):
                (dc.append if group_commit else dc.write)(table, _data(rows, f"w{i}-{j}-"))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize("group_commit", [False, True])
def test_racing_writers_never_duplicate_a_value(tmp_path: Path, group_commit: bool) -> None:
    path = str(tmp_path / "t")
    dc.DeltaTable.create(path, _schema(start=10, step=5), partition_by=["p"])
    writers, rows = 6, 7
    _race(path, writers, rows, group_commit=group_commit)
    ids = dc.DeltaTable(path).to_arrow().column("id").to_pylist()
    assert len(ids) == writers * 2 * rows
    assert len(set(ids)) == len(ids)
    assert all((v - 10) % 5 == 0 and v >= 10 for v in ids)
    assert _mark(path) == max(ids)
    peer = deltalake.DeltaTable(path).to_pyarrow_table().column("id").to_pylist()
    assert sorted(peer) == sorted(ids)


def test_a_compaction_is_not_failed_by_identity_writers(tmp_path: Path) -> None:
    """A winner that only raised the mark passes transactions without metadata changes (as
    in Spark): a compaction that read before an identity write still commits."""
    path = str(tmp_path / "t")
    table = dc.DeltaTable.create(path, _schema())
    for i in range(3):
        dc.write(table, _data(2, f"a{i}"))
    stale = dc.DeltaTable(path)
    txn = stale.transaction("OPTIMIZE", isolation_level="WriteSerializable")
    files = txn.scan()
    rows = stale.to_arrow()
    dc.write(dc.DeltaTable(path), _data(2, "b"))  # the winner: an identity write
    adds = write_rows(stale.log_store.store, WriteTarget.of(path, txn.snapshot), rows,
                      clock=stale.clock, random=stale.random)
    txn.remove(files, data_change=False)
    txn.add([replace(a, data_change=False) for a in adds])
    txn.commit()
    ids = dc.DeltaTable(path).to_arrow().column("id").to_pylist()
    assert sorted(ids) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert _mark(path) == 8  # the compaction kept the winner's metadata


def test_a_stale_writer_passes_a_cleaned_log_of_identity_writes() -> None:
    """Commits a stale blind append would be checked against are gone (log cleanup); the
    table's metadata differs from its snapshot's only in the high-water mark, which passes it
    as checking the commits one by one would have."""
    from deltacommit.io.logstore.conditional import ConditionalPutLogStore
    from deltacommit.io.storage.memory import MemoryStore
    from deltacommit.protocol.log.names import commit_path
    from deltacommit.runtime.clock import ManualClock, RandomSource

    clock = ManualClock(1_800_000_000.0)
    store = MemoryStore("identity-stale", clock=clock)
    active = dc.DeltaTable.create("memory://identity-stale", _schema(explicit=True),
                                  configuration={"delta.checkpointInterval": "5"},
                                  log_store=ConditionalPutLogStore(store), clock=clock,
                                  random=RandomSource(7))
    dc.write(active, _data(1))
    stale = dc.DeltaTable(active.uri, log_store=active.log_store, clock=clock,
                          random=RandomSource(11))
    for _ in range(7):
        dc.write(active, _data(1))
    clock.advance(31 * 86_400.0)
    for _ in range(4):  # the checkpoint at 10 lets cleanup delete the commits before 5
        dc.write(active, _data(1))
    assert not store.exists(commit_path(2))
    explicit = _data(1, "late").append_column("id", pa.array([1000], pa.int64()))
    assert dc.write(stale, explicit).version == 13
    ids = sorted(dc.DeltaTable(active.uri, log_store=active.log_store).to_arrow()
                 .column("id").to_pylist())
    assert ids == [*range(1, 13), 1000]


_PROCESS_WRITER = """
import sys
import pyarrow as pa
import deltacommit as dc
path, tag = sys.argv[1], sys.argv[2]
sys.stdin.readline()  # start together
for j in range(3):
    dc.write(path, pa.table({"v": pa.array([f"{tag}-{j}-{i}" for i in range(5)], pa.string()),
                             "p": pa.array([i % 3 for i in range(5)], pa.int32())}))
"""


def test_racing_processes_never_duplicate_a_value(tmp_path: Path) -> None:
    """Writers in separate processes, each with its own view of the log."""
    import subprocess
    import sys

    path = str(tmp_path / "t")
    dc.DeltaTable.create(path, _schema(start=0, step=3), partition_by=["p"])
    procs = [subprocess.Popen([sys.executable, "-c", _PROCESS_WRITER, path, f"w{i}"],
                              stdin=subprocess.PIPE, text=True) for i in range(4)]
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    assert [p.wait(300) for p in procs] == [0, 0, 0, 0]
    ids = dc.DeltaTable(path).to_arrow().column("id").to_pylist()
    assert sorted(ids) == list(range(0, 4 * 3 * 5 * 3, 3))
    assert _mark(path) == max(ids)
    assert sorted(deltalake.DeltaTable(path).to_pyarrow_table().column("id").to_pylist()) == \
        sorted(ids)
