"""A table rolled back under a writer: its newest commit files deleted after the writer read it.

A writer that read version N and claims N + 1 after an operator deleted ``N.json`` would put a
commit after a gap (every reader of the table then fails) on a state the log no longer holds.
Before a commit is built on a snapshot last known current more than
``CommitPolicy.recheck_after`` seconds ago, the commit at its version is read back
(``TableLog.recheck_newest``): a commit gone or written again refuses the operation with
nothing committed, and the table object reads the table afresh for its next one.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.commit.policy import CommitPolicy
from deltacommit.errors import TableReplacedError
from deltacommit.runtime.clock import ManualClock

NOW = CommitPolicy(recheck_after=0)
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.float64())])
#: The newest version of ``_table``: 0 creates it, 1 to 3 append.
NEWEST = 3


def _rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "v": pa.array([float(i) for i in ids], pa.float64())})


def _commit(path: Path, version: int) -> Path:
    return path / "_delta_log" / f"{version:020d}.json"


def _table(path: Path, **config: str) -> str:
    """A table whose newest version (``NEWEST``) adds ids 6-8, after versions adding ids 0-2
    and 3-5."""
    uri = str(path)
    dc.DeltaTable.create(uri, SCHEMA, configuration=config or None)
    for ids in ([0, 1, 2], [3, 4, 5], [6, 7, 8]):
        dc.write(uri, _rows(ids))
    assert dc.DeltaTable(uri).version == NEWEST
    return uri


def _data_files(path: Path) -> set[str]:
    return {n for n in os.listdir(path) if n.endswith(".parquet")}


def _ids(uri: str) -> list[int]:
    return sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist())


OPERATIONS: dict[str, Callable[[Any], object]] = {
    "append": lambda t: dc.write(t, _rows([100])),
    "delete": lambda t: t.delete("id = 1"),
    "update": lambda t: t.update({"v": "v + 1"}, predicate="id = 1"),
    "merge": lambda t: t.merge(_rows([1, 100]), "t.id = s.id", source_alias="s",
                               target_alias="t")
    .when_matched_update_all().when_not_matched_insert_all().execute(),
    "overwrite": lambda t: dc.write(t, _rows([50]), mode="overwrite"),
}
#: The rows each operation leaves on the version before the newest (ids 0-5).
AFTER = {"append": [0, 1, 2, 3, 4, 5, 100], "delete": [0, 2, 3, 4, 5],
         "update": [0, 1, 2, 3, 4, 5], "merge": [0, 1, 2, 3, 4, 5, 100], "overwrite": [50]}


@pytest.mark.parametrize("deletion_vectors", [False, True], ids=["copy-on-write", "dv"])
@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_an_operation_on_a_rolled_back_version_commits_nothing_then_runs_on_the_log(
        tmp_path: Path, op: str, deletion_vectors: bool) -> None:
    config = {"delta.enableDeletionVectors": "true"} if deletion_vectors else {}
    uri = _table(tmp_path, **config)
    t = dc.DeltaTable(uri, policy=NOW)
    before = _data_files(tmp_path)
    _commit(tmp_path, NEWEST).unlink()  # the operator rolls the newest version back

    with pytest.raises(TableReplacedError) as e:
        OPERATIONS[op](t)
    assert str(tmp_path) in str(e.value) and f"version {NEWEST}," in str(e.value)
    assert "nothing was committed" in str(e.value)
    assert not _commit(tmp_path, NEWEST).exists()
    assert not _commit(tmp_path, NEWEST + 1).exists()
    # What the operation wrote went with its refusal; the table reads as the version before.
    assert _data_files(tmp_path) == before
    assert _ids(uri) == [0, 1, 2, 3, 4, 5]

    # The same object read the table afresh: the operation runs on the rows the log holds.
    assert t.version == NEWEST - 1
    OPERATIONS[op](t)
    assert _commit(tmp_path, NEWEST).exists() and not _commit(tmp_path, NEWEST + 1).exists()
    assert _ids(uri) == AFTER[op]


def test_a_version_written_again_since_it_was_read_is_refused(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    t = dc.DeltaTable(uri, policy=NOW)
    read = _commit(tmp_path, NEWEST).read_bytes()
    # Rolled back, then another writer committed the version again, with other rows.
    _commit(tmp_path, NEWEST).unlink()
    dc.write(uri, _rows([7000]))
    assert hashlib.sha256(_commit(tmp_path, NEWEST).read_bytes()).digest() != \
        hashlib.sha256(read).digest()

    with pytest.raises(TableReplacedError, match="no longer the commit this writer read"):
        t.delete("id = 6")
    assert not _commit(tmp_path, NEWEST + 1).exists()
    assert _ids(uri) == [0, 1, 2, 3, 4, 5, 7000]
    t.delete("id = 7000")
    assert _ids(uri) == [0, 1, 2, 3, 4, 5]


def test_a_checkpoint_without_its_commit_file_is_no_rollback(tmp_path: Path) -> None:
    """The newest version read from its checkpoint, its commit file gone: the log still
    holds the version, so the commit goes on after it."""
    uri = _table(tmp_path)
    dc.DeltaTable(uri).checkpoint()
    _commit(tmp_path, NEWEST).unlink()
    t = dc.DeltaTable(uri, policy=NOW)
    assert t.version == NEWEST
    t.delete("id = 7")
    assert _commit(tmp_path, NEWEST + 1).exists()
    assert _ids(uri) == [0, 1, 2, 3, 4, 5, 6, 8]


def test_the_default_rechecks_a_snapshot_older_than_a_second(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    clock = ManualClock()
    t = dc.DeltaTable(uri, clock=clock)
    assert CommitPolicy().recheck_after == 1.0
    _commit(tmp_path, NEWEST).unlink()
    clock.advance(1.5)  # the operation took a second and a half since the table was read
    with pytest.raises(TableReplacedError):
        t.delete("id = 1")
    assert not _commit(tmp_path, NEWEST + 1).exists()


@pytest.mark.parametrize("bad", [-1, True, "1", float("nan")])
def test_recheck_after_must_be_seconds(bad: object) -> None:
    with pytest.raises(dc.InvalidArgumentError, match="recheck_after"):
        CommitPolicy(recheck_after=bad)  # type: ignore[arg-type]


def test_a_wall_clock_set_back_does_not_spare_the_recheck(tmp_path: Path) -> None:
    """The recheck measures the time since the snapshot was last known current on the
    monotonic clock: a wall clock set back an hour (NTP stepping it) after the table was
    read must not make the snapshot look fresh for the next hour."""
    uri = _table(tmp_path)
    clock = ManualClock()
    t = dc.DeltaTable(uri, clock=clock)
    clock.skew = -3600.0  # the machine's wall clock is set back an hour
    clock.advance(5)
    _commit(tmp_path, NEWEST).unlink()
    with pytest.raises(TableReplacedError):
        t.delete("id = 1")
    assert not _commit(tmp_path, NEWEST + 1).exists()
    assert _ids(uri) == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("written_again", [False, True], ids=["rolled-back", "written-again"])
def test_a_transaction_begun_before_its_table_object_read_the_table_afresh_is_refused(
        tmp_path: Path, written_again: bool) -> None:
    """One operation of a table object finds the newest version rolled back, and the object
    reads the table afresh; another transaction of the object, begun on the rolled-back
    version before, must not commit what it read there on the state read afresh (it would
    remove a file the log never added, or rewrite rows the log no longer holds)."""
    uri = _table(tmp_path)
    t = dc.DeltaTable(uri, policy=NOW)
    txn = t.transaction("DELETE")
    before = {a.path for a in dc.DeltaTable(uri, version=NEWEST - 1).files()}
    newest = [a for a in t.files() if a.path not in before]
    assert len(newest) == 1
    txn.remove(newest)  # deletes ids 6-8, which only the newest version holds
    _commit(tmp_path, NEWEST).unlink()
    with pytest.raises(TableReplacedError):
        dc.write(t, _rows([100]))
    if written_again:
        dc.write(uri, _rows([7000]))  # another writer commits the version again
    t.refresh()

    with pytest.raises(TableReplacedError, match="read afresh"):
        txn.commit()
    assert not _commit(tmp_path, NEWEST + int(written_again)).exists()
    assert _ids(uri) == [0, 1, 2, 3, 4, 5] + ([7000] if written_again else [])


def test_a_rollback_found_while_a_transaction_commits_refuses_its_claim(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread of the table object finds the rollback after this transaction's own
    check and before its claim: the claim would be built on the state read afresh, below
    what the transaction read.  The claim's wait refuses it (a member read past the log's
    newest version)."""
    uri = _table(tmp_path)
    t = dc.DeltaTable(uri, policy=NOW)
    txn = t.transaction("DELETE")
    before = {a.path for a in dc.DeltaTable(uri, version=NEWEST - 1).files()}
    txn.remove([a for a in t.files() if a.path not in before])
    _commit(tmp_path, NEWEST).unlink()

    def another_thread_finds_it() -> None:
        with pytest.raises(TableReplacedError):
            t.log.recheck_newest()  # reads the table afresh, at the version before

    monkeypatch.setattr(t.log, "refresh_if_stale", another_thread_finds_it)
    with pytest.raises(TableReplacedError, match="past the newest version"):
        txn.commit()
    assert not _commit(tmp_path, NEWEST).exists()
    assert _ids(uri) == [0, 1, 2, 3, 4, 5]


def test_a_checkpoint_is_not_written_for_a_rolled_back_version(tmp_path: Path) -> None:
    """A checkpoint at a version stands for it: written by a table object still on the
    rolled-back version, it would bring that version back for every reader."""
    uri = _table(tmp_path)
    t = dc.DeltaTable(uri)
    _commit(tmp_path, NEWEST).unlink()
    with pytest.raises(TableReplacedError):
        t.checkpoint()
    assert not any(".checkpoint." in n for n in os.listdir(tmp_path / "_delta_log"))
    assert dc.DeltaTable(uri).version == NEWEST - 1
    assert _ids(uri) == [0, 1, 2, 3, 4, 5]
    assert t.version == NEWEST - 1  # read afresh: the next checkpoint is of what the log holds
    t.checkpoint()
    assert (tmp_path / "_delta_log" / f"{NEWEST - 1:020d}.checkpoint.parquet").exists()



def test_vacuum_keeps_the_files_a_rolled_back_version_removed(tmp_path: Path) -> None:
    """A table object still on a rolled-back version that removed files would take those
    files, which the version rolled back to still names, for unreferenced ones."""
    uri = _table(tmp_path)
    dc.DeltaTable(uri).delete("id <= 2")  # version NEWEST + 1 removes the file of ids 0-2
    t = dc.DeltaTable(uri)
    _commit(tmp_path, NEWEST + 1).unlink()  # the operator rolls the delete back
    before = _data_files(tmp_path)
    with pytest.raises(TableReplacedError):
        t.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False,
                 protect_uncommitted=False)
    assert _data_files(tmp_path) == before
    assert _ids(uri) == list(range(9))
    assert t.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False,
                    protect_uncommitted=False) == []  # read afresh: nothing is unreferenced
    assert _ids(uri) == list(range(9))


def test_a_version_written_again_is_refused_where_its_bytes_were_never_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot loaded from a checkpoint at its version never read the commit file there
    (without the process's cached states nothing reads it): the commit read back is then
    judged by its actions, which must be the snapshot's."""
    monkeypatch.setenv("DELTACOMMIT_TABLE_CACHE", "off")
    uri = _table(tmp_path)
    dc.DeltaTable(uri).checkpoint()
    t = dc.DeltaTable(uri, policy=NOW)
    # Rolled back with its checkpoint, then another writer committed the version again.
    for name in (f"{NEWEST:020d}.json", f"{NEWEST:020d}.checkpoint.parquet", "_last_checkpoint"):
        (tmp_path / "_delta_log" / name).unlink()
    dc.write(uri, _rows([7000]))

    with pytest.raises(TableReplacedError, match="no longer the commit this writer read"):
        t.delete("id = 6")  # would rewrite the rolled-back file: ids 7 and 8 back
    assert not _commit(tmp_path, NEWEST + 1).exists()
    assert _ids(uri) == [0, 1, 2, 3, 4, 5, 7000]
    # Loaded from a checkpoint at its version, a commit still holding what it read there is
    # no rollback.
    dc.DeltaTable(uri).checkpoint()
    t2 = dc.DeltaTable(uri, policy=NOW)
    assert t2.log.cached_commits(NEWEST, NEWEST) == []  # its bytes were never read
    t2.delete("id = 7000")
    assert _ids(uri) == [0, 1, 2, 3, 4, 5]


def test_a_transaction_on_a_version_rolled_back_and_written_again_meanwhile_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread of the table object finds the rollback after this transaction's own
    check, and commits the version again (its append, run again on the table read afresh)
    before the claim: the transaction read no more than the object's newest version, but
    what it read there is gone.  Committed, its DELETE would remove a file the log no longer
    names and write back the other rows of it."""
    uri = _table(tmp_path)
    t = dc.DeltaTable(uri, policy=NOW)
    found: list[bool] = []

    def another_thread_finds_it_and_another_writer_commits() -> None:
        if found:
            return
        found.append(True)
        _commit(tmp_path, NEWEST).unlink()
        with pytest.raises(TableReplacedError):
            t.log.recheck_newest()  # reads the table afresh, at the version before
        dc.write(t, _rows([7000]))  # the version rolled back, written again

    monkeypatch.setattr(t.log, "refresh_if_stale",
                        another_thread_finds_it_and_another_writer_commits)
    with pytest.raises(TableReplacedError):
        t.delete("id = 6")  # read ids 6-8 in the version rolled back
    assert not _commit(tmp_path, NEWEST + 1).exists()
    assert _ids(uri) == [0, 1, 2, 3, 4, 5, 7000]


def test_a_fleet_record_names_the_commit_its_transaction_read(tmp_path: Path) -> None:
    """A fleet writer's table object finds the rollback, and commits the version again, after
    a transaction of it read the version rolled back: the transaction's record must name the
    commit it read there (``readDigest``), which includers on other hosts check against the
    log, not the commit written again, or another host's round would commit it on a state
    that is gone (removing a file the log no longer names, writing back rows of it)."""
    from tests.fleet.helpers import FLEET, publish_only

    uri = _table(tmp_path, **FLEET)
    read = hashlib.sha256(_commit(tmp_path, NEWEST).read_bytes()).hexdigest()
    t = dc.DeltaTable(uri, policy=NOW)
    txn = t.transaction("WRITE", {"mode": "Append", "partitionBy": "[]"})
    before = {a.path for a in dc.DeltaTable(uri, version=NEWEST - 1).files()}
    txn.read_whole_table()
    txn.remove([a for a in t.files() if a.path not in before])  # ids 6-8
    staged = txn.staged()
    _commit(tmp_path, NEWEST).unlink()
    with pytest.raises(TableReplacedError):
        t.log.recheck_newest()  # another thread of the object finds the rollback
    dc.write(t, _rows([7000]))  # and commits the version again
    again = hashlib.sha256(_commit(tmp_path, NEWEST).read_bytes()).hexdigest()
    assert again != read

    writer = publish_only(t, staged)  # the transaction's record, as its round publishes it
    assert writer.record is not None
    assert (writer.record.read_version, writer.record.read_digest) == (NEWEST, read)


def _appender_table(path: Path) -> tuple[str, dc.DeltaTable]:
    """A table whose versions 1 to 3 are an appender's flushes of offsets 1, 2 and 3 (ids 1-3),
    and a table object kept on it."""
    uri = str(path)
    dc.DeltaTable.create(uri, SCHEMA)
    t = dc.DeltaTable(uri, policy=NOW)
    with dc.Appender(t, "ingest", flush_interval=None) as app:
        for offset in (1, 2, 3):
            assert app.append(_rows([offset]), offset)
            app.flush()
        assert app.committed_offset == NEWEST
    return uri, t


def test_an_appender_finds_its_offsets_rolled_back_when_it_flushes(tmp_path: Path) -> None:
    uri, t = _appender_table(tmp_path)
    app = dc.Appender(t, "ingest", flush_interval=None, background=False)
    assert app.committed_offset == 3
    _commit(tmp_path, NEWEST).unlink()  # the operator rolls back offset 3's commit
    assert app.append(_rows([4]), 4)

    with pytest.raises(TableReplacedError) as e:
        app.flush()
    message = str(e.value)
    assert uri in message and "'ingest'" in message and "offset 2" in message
    assert "Replay the source from committed_offset + 1 (3)" in message
    assert "append of offset 4 was dropped" in message
    assert not _commit(tmp_path, NEWEST).exists()
    # What the table records is what the appender now knows: the replay of 3 is taken.
    assert app.committed_offset == 2 and app.pending_rows == 0
    assert app.append(_rows([3]), 3) and app.append(_rows([4]), 4)
    app.flush()
    assert _ids(uri) == [1, 2, 3, 4]
    assert dc.DeltaTable(uri).app_version("ingest") == 4


def test_an_appender_does_not_skip_a_replay_of_offsets_rolled_back(tmp_path: Path) -> None:
    uri, t = _appender_table(tmp_path)
    app = dc.Appender(t, "ingest", flush_interval=None, background=False)
    _commit(tmp_path, NEWEST).unlink()

    # The source replays offset 3: not in the table any more, so not skipped as recorded.
    with pytest.raises(TableReplacedError) as e:
        app.append(_rows([3]), 3)
    assert uri in str(e.value) and "offset 2" in str(e.value)
    assert app.committed_offset == 2 and app.skipped == 0
    assert app.append(_rows([3]), 3)
    app.flush()
    assert _ids(uri) == [1, 2, 3]
    # A replay of what the table does hold is still skipped, and commits nothing.
    assert not app.append(_rows([2]), 2) and app.skipped == 1
    assert app.flush() is None and dc.DeltaTable(uri).version == NEWEST


def test_an_appender_whose_table_object_found_the_rollback_first_does_not_commit_on_it(
        tmp_path: Path) -> None:
    _, t = _appender_table(tmp_path)
    app = dc.Appender(t, "ingest", flush_interval=None, background=False)
    _commit(tmp_path, NEWEST).unlink()
    with pytest.raises(TableReplacedError):
        t.delete("id = 1")  # another operation of the same object finds the rollback
    assert t.app_version("ingest") == 2
    assert app.append(_rows([4]), 4)

    # The flush reads offset 2 from the table read afresh, below the 3 it remembers.
    with pytest.raises(TableReplacedError, match="records offset 2 for it"):
        app.flush()
    assert not _commit(tmp_path, NEWEST).exists()
    assert app.committed_offset == 2 and app.pending_rows == 0


def test_an_appender_whose_table_object_found_the_rollback_first_does_not_skip_a_replay(
        tmp_path: Path) -> None:
    """The table object read the table afresh on another operation, so no read-back finds
    the rollback any more: the replay of offset 3 is judged by what the table now records (2),
    not by the 3 the appender remembers, else the source's last offset is lost for good."""
    uri, t = _appender_table(tmp_path)
    app = dc.Appender(t, "ingest", flush_interval=None, background=False)
    _commit(tmp_path, NEWEST).unlink()
    with pytest.raises(TableReplacedError):
        t.delete("id = 1")  # another operation of the same object finds the rollback

    with pytest.raises(TableReplacedError, match="records offset 2 for it"):
        app.append(_rows([3]), 3)
    assert app.committed_offset == 2 and app.skipped == 0
    assert app.append(_rows([3]), 3)
    app.close()
    assert _ids(uri) == [1, 2, 3]
    assert dc.DeltaTable(uri).app_version("ingest") == 3


def test_an_appender_skips_a_replay_another_appender_recorded_again_after_the_rollback(
        tmp_path: Path) -> None:
    """Offset 3's commit rolled back, then offset 3 committed again by another appender of
    the app id (a restarted process): the table records what this appender remembers, so
    its replay of 3 is skipped, with no error, though the commit it read at version 3 was
    replaced."""
    uri, t = _appender_table(tmp_path)
    app = dc.Appender(t, "ingest", flush_interval=None, background=False)
    _commit(tmp_path, NEWEST).unlink()
    with dc.Appender(uri, "ingest", flush_interval=None, background=False) as other:
        assert other.committed_offset == 2
        assert other.append(_rows([3]), 3)
    assert _commit(tmp_path, NEWEST).exists()

    assert not app.append(_rows([3]), 3) and app.skipped == 1
    assert app.committed_offset == 3
    assert app.append(_rows([4]), 4)
    app.close()
    assert _ids(uri) == [1, 2, 3, 4]


def _append_of_five_waits_for_a_drop(monkeypatch: pytest.MonkeyPatch
                                     ) -> tuple[threading.Event, threading.Event]:
    """Make an append of offset 5 stop once past its first check until the Appender drops its
    buffer on a rollback: (set when that append is converting its rows, set when a drop was
    made)."""
    from deltacommit.ops import appender as appender_module
    from deltacommit.ops.write import to_arrow_table

    converting, dropped = threading.Event(), threading.Event()
    rolled_back = dc.Appender._rolled_back

    def slow_to_arrow(data: Any) -> pa.Table:
        if data.column("id").to_pylist() == [5]:  # offset 5: past the first check, then wait
            converting.set()
            assert dropped.wait(30)
        return to_arrow_table(data)

    def report_drop(self: dc.Appender, *args: Any) -> TableReplacedError:
        try:
            return rolled_back(self, *args)
        finally:
            dropped.set()

    monkeypatch.setattr(appender_module, "to_arrow_table", slow_to_arrow)
    monkeypatch.setattr(dc.Appender, "_rolled_back", report_drop)
    return converting, dropped


def test_an_append_racing_the_timer_that_finds_the_rollback_is_not_buffered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An append begun before the background flush found the rollback, and buffered after
    it dropped the buffer, would follow offsets the table no longer records; the timer's next
    flush would record it, and the offsets rolled back would be skipped as replays forever."""
    uri, t = _appender_table(tmp_path)
    converting, _ = _append_of_five_waits_for_a_drop(monkeypatch)
    commit = dc.Appender._commit

    def timer_commit(self: dc.Appender, batch: Any) -> Any:
        assert converting.wait(30)  # the flush runs once offset 5's append has begun
        return commit(self, batch)

    monkeypatch.setattr(dc.Appender, "_commit", timer_commit)
    app = dc.Appender(t, "ingest", flush_interval=0.01)
    _commit(tmp_path, NEWEST).unlink()  # the operator rolls back offset 3's commit
    assert app.append(_rows([4]), 4)  # the timer flushes it, and finds the rollback

    with pytest.raises(TableReplacedError, match="records offset 2 for it"):
        app.append(_rows([5]), 5)
    assert app.committed_offset == 2 and app.pending_rows == 0
    monkeypatch.setattr(dc.Appender, "_commit", commit)
    for offset in (3, 4, 5):  # the replay the error asks for is taken, once
        assert app.append(_rows([offset]), offset)
    app.close()
    assert _ids(uri) == [1, 2, 3, 4, 5]
    assert dc.DeltaTable(uri).app_version("ingest") == 5


def test_a_write_is_not_skipped_on_the_record_of_a_rolled_back_commit(tmp_path: Path) -> None:
    uri = str(tmp_path)
    dc.DeltaTable.create(uri, SCHEMA)
    clock = ManualClock()  # the default policy, and no time passes: the skip reads back anyway
    t = dc.DeltaTable(uri, clock=clock)
    for stage in (1, 2):
        assert not dc.write(t, _rows([stage]), app_id="stage", app_version=stage).skipped
    assert dc.write(t, _rows([2]), app_id="stage", app_version=2).skipped  # a real replay
    _commit(tmp_path, 2).unlink()  # the operator rolls stage 2's commit back

    with pytest.raises(TableReplacedError, match="version 2, the newest this writer read"):
        dc.write(t, _rows([2]), app_id="stage", app_version=2)
    assert not _commit(tmp_path, 2).exists()
    # Its retry on the table read afresh writes the stage, once.
    result = dc.write(t, _rows([2]), app_id="stage", app_version=2)
    assert not result.skipped and result.version == 2
    assert dc.write(t, _rows([2]), app_id="stage", app_version=2).skipped
    assert _ids(uri) == [1, 2]


def test_an_append_racing_a_flush_of_another_thread_that_finds_the_rollback_is_not_buffered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As with the timer: another thread's ``flush()`` finds the rollback and drops the buffer
    while an append is under way; the append is refused with the drop's error, not buffered
    after offsets the table no longer records."""
    uri, t = _appender_table(tmp_path)
    converting, _ = _append_of_five_waits_for_a_drop(monkeypatch)
    app = dc.Appender(t, "ingest", flush_interval=None, background=False)
    _commit(tmp_path, NEWEST).unlink()  # the operator rolls back offset 3's commit
    assert app.append(_rows([4]), 4)
    outcome: list[BaseException | bool] = []

    def append_five() -> None:
        try:
            outcome.append(app.append(_rows([5]), 5))
        except BaseException as e:  # what the thread's caller would see
            outcome.append(e)

    racer = threading.Thread(target=append_five)
    racer.start()
    assert converting.wait(30)
    with pytest.raises(TableReplacedError, match="records offset 2 for it"):
        app.flush()  # this thread's flush finds the rollback and drops offset 4
    racer.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], TableReplacedError), outcome
    assert "records offset 2 for it" in str(outcome[0])
    assert app.committed_offset == 2 and app.pending_rows == 0
    for offset in (3, 4, 5):
        assert app.append(_rows([offset]), offset)
    app.close()
    assert _ids(uri) == [1, 2, 3, 4, 5]
