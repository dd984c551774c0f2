"""Every write path leaves no data file behind when its commit fails, and keeps every file
when the commit landed or may have landed (``ops.driver``, ``engine.commit.outcome``).

Each path's commit is held at its claim while another writer commits something it conflicts
with, or the claim is refused, or the claim is made and its answer lost, or it simply lands;
then every data file in the table's folder must be named by a version of the log and every
file the newest version names must exist (``Rig.check``).  Spark's writer and compaction are
in ``tests/spark/test_write_driver_spark.py``, group commit across processes in
``tests/coalesce/test_processes.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

import deltacommit as dc
from deltacommit.engine.commit.outcome import RULES, Outcome, outcome_of
from deltacommit.errors import (
    CommitFailedError,
    ConcurrentAppendException,
    ConcurrentTransactionException,
    CoordinationMismatchError,
    InvalidArgumentError,
    LogStoreError,
    MetadataChangedException,
    StorageError,
    TableReplacedError,
)
from deltacommit.io.storage.faults import SimulatedCrash
from deltacommit.io.storage.memory import MemoryStore
from deltacommit.ops.driver import run
from deltacommit.ops.write import ArrowWrite
from deltacommit.testing.stress import _append as stress_append

from .write_paths import Rig, race, rows


@pytest.fixture
def rig() -> Rig:
    name = f"wd-{uuid.uuid4().hex[:12]}"
    r = Rig(f"memory://{name}", MemoryStore(name))
    r.create()
    return r


@dataclass(frozen=True)
class WritePath:
    """One write path: how it writes rows ``10..12``, a concurrent commit it conflicts with,
    and what that conflict ends in (None: the path writes again and commits)."""

    name: str
    write: Callable[[Rig], Any]
    conflict: Callable[[dc.DeltaTable], Any]
    conflict_raises: type[BaseException] | None
    #: Raised when the claim's answer is lost (None: the path commits the same transaction
    #: again and finds its own version by txnId).
    ambiguous_raises: type[BaseException] | None = StorageError
    #: The ids the table holds before the write.
    before: tuple[int, ...] = (0,)


def _overwrite(table: dc.DeltaTable) -> Any:
    return dc.write(table, rows("a", [10, 11, 12]), mode="overwrite", predicate="p = 'a'",
                    target_file_rows=1)


def _append_to_a(other: dc.DeltaTable) -> Any:
    return dc.write(other, rows("a", [1]))


def _same_app_older(other: dc.DeltaTable) -> Any:
    return dc.write(other, rows("b", [1]), app_id="app", app_version=3)


def _appender(rig: Rig) -> Any:
    a = dc.Appender(rig.writer(), "app", flush_interval=None, background=False)
    a.append(rows("a", [10, 11]), 5)
    a.append(rows("b", [12]), 6)
    return a.flush()


def _compact(rig: Rig) -> Any:
    return rig.writer().optimize.compact()


def _stress(rig: Rig) -> Any:
    result = stress_append(rig.writer(), rows("a", [10, 11, 12]), "w0#0")
    assert result is not None, "the stress writer gave the write up"
    return result


PATHS = [
    WritePath("dc.write", lambda rig: _overwrite(rig.writer()), _append_to_a,
              ConcurrentAppendException),
    WritePath("dc.append", lambda rig: dc.append(rig.writer(group_commit=True),
                                                 rows("a", [10, 11, 12]), app_id="app",
                                                 app_version=5),
              _same_app_older, ConcurrentTransactionException),
    WritePath("Appender", _appender, _same_app_older, None),
    WritePath("group commit", lambda rig: _overwrite(rig.writer(group_commit=True)),
              _append_to_a, ConcurrentAppendException),
    WritePath("compaction", _compact, lambda other: other.delete("p = 'a'"), None,
              before=(0, 1, 2, 3, 4, 5)),
    WritePath("stress writer", _stress,
              lambda other: other.set_properties({"delta.appendOnly": "false"}),
              MetadataChangedException, ambiguous_raises=None),
]


def _prepare(rig: Rig, path: WritePath) -> None:
    """The table's rows before the write: one file each (several small files per partition
    for compaction)."""
    other = rig.other()
    for i in path.before:
        dc.write(other, rows("a" if i % 2 == 0 else "b", [i]))


def _written(path: WritePath) -> set[int]:
    return set() if path.name == "compaction" else {10, 11, 12}


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_a_landed_write_keeps_every_file_it_wrote(rig: Rig, path: WritePath) -> None:
    _prepare(rig, path)
    files_before = rig.data_files()
    path.write(rig)
    rig.check()
    assert set(rig.ids()) >= _written(path)
    assert rig.data_files() - files_before, "the write wrote no file"


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_a_refused_commit_leaves_no_data_file_behind(rig: Rig, path: WritePath) -> None:
    _prepare(rig, path)
    version = rig.other().version
    ids = rig.ids()
    rule = rig.refuse_claim()
    with pytest.raises(CoordinationMismatchError, match="refused by the test"):
        path.write(rig)
    assert rule.fired == 1
    assert rig.other().version == version
    assert rig.ids() == ids
    rig.check()


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_a_conflict_leaves_no_data_file_behind(rig: Rig, path: WritePath) -> None:
    _prepare(rig, path)
    other = rig.other()
    writer = race(rig, lambda: path.write(rig), lambda: path.conflict(other))
    if path.conflict_raises is None:
        writer.join()  # the path wrote (or staged) again and committed
        assert set(rig.ids()) >= _written(path)
    else:
        with pytest.raises(path.conflict_raises):
            writer.join()
        assert not set(rig.ids()) & _written(path)
    rig.check()


@pytest.mark.parametrize("path", PATHS, ids=[p.name for p in PATHS])
def test_an_unknown_outcome_keeps_the_files_and_the_retry_finds_the_commit(
        rig: Rig, path: WritePath) -> None:
    _prepare(rig, path)
    version = rig.other().version
    rule = rig.lose_answer()
    if path.ambiguous_raises is None:
        result = path.write(rig)  # committed again as the same transaction: found by txnId
        assert result.version == version + 1
        ids = [i for c in rig.other().history() if c["version"] > version
               for i in [c.get("txnId")]]
        assert ids == [result.txn_id]
    else:
        with pytest.raises(path.ambiguous_raises, match="after the operation"):
            path.write(rig)
    assert rule.fired == 1
    assert rig.other().version == version + 1  # it landed, once
    assert set(rig.ids()) >= _written(path)
    rig.check()
    if path.name in ("dc.append", "Appender"):
        # The retry of the write is recognised by its app id: nothing is written twice.
        retried = _appender(rig) if path.name == "Appender" else \
            dc.append(rig.writer(group_commit=True), rows("a", [10, 11, 12]), app_id="app",
                      app_version=5)
        assert retried is None or retried.skipped
        assert rig.other().version == version + 1
        rig.check()


def test_compaction_loses_every_bin_to_a_change_of_metadata(rig: Rig) -> None:
    """A concurrent change of metadata conflicts with every bin: all new files are deleted."""
    _prepare(rig, PATHS[4])
    other = rig.other()
    writer = race(rig, lambda: _compact(rig),
                  lambda: other.set_properties({"delta.appendOnly": "false"}))
    with pytest.raises(MetadataChangedException):
        writer.join()
    assert len(other.files()) == 6
    rig.check()


def test_the_driver_commits_the_same_transaction_again_after_an_unknown_outcome(rig: Rig
                                                                                ) -> None:
    """``unknown_tries``: the write's own version, landed although its answer was lost, is
    found by its txnId instead of committed twice; the files are kept."""
    t = rig.writer()
    rig.lose_answer()
    result = run(ArrowWrite(t, rows("a", [10, 11]), mode="append", predicate=None,
                            partition_by=None, app_id=None, app_version=None,
                            target_file_rows=1, reopen=None), unknown_tries=2)
    assert result.version == 1 and result.num_files == 2
    assert [c.get("txnId") for c in rig.other().history(limit=1)] == [result.txn_id]
    rig.check()


def test_an_unknown_outcome_that_persists_is_raised_with_the_files_kept(rig: Rig) -> None:
    """Every try fails without an answer (here: before the claim, which the writer cannot
    tell): the error is raised and the files stay, as a claim in flight may still name them
    (VACUUM removes them if none does)."""
    t = rig.writer()
    rule = rig.plan.fail("put_if_absent", "_delta_log/0*.json", times=3)
    with pytest.raises(StorageError):
        run(ArrowWrite(t, rows("a", [10, 11]), mode="append", predicate=None,
                       partition_by=None, app_id=None, app_version=None, target_file_rows=1,
                       reopen=None), unknown_tries=3)
    assert rule.fired == 3
    assert rig.other().version == 0
    assert len(rig.data_files()) == 2


def test_a_write_failing_part_way_leaves_none_of_its_files(rig: Rig) -> None:
    """A data file that cannot be written fails the write before its commit: the files it did
    write go too (``datafiles.write_data_files``)."""
    rule = rig.plan.fail("put", "p=b/*")
    with pytest.raises(StorageError):
        _appender(rig)
    assert rule.fired == 1
    assert rig.data_files() == set()
    assert rig.other().version == 0


# --------------------------------------------------------------------------- the table


@pytest.mark.parametrize(("error", "outcome"), [
    (ConcurrentAppendException("x"), Outcome.NOT_COMMITTED),
    (TableReplacedError("x"), Outcome.NOT_COMMITTED),
    (CoordinationMismatchError("x"), Outcome.NOT_COMMITTED),
    (InvalidArgumentError("x"), Outcome.NOT_COMMITTED),
    (StorageError("put", "_delta_log/1.json"), Outcome.UNKNOWN),
    (LogStoreError("x"), Outcome.UNKNOWN),
    (CommitFailedError("x"), Outcome.UNKNOWN),
    (OSError("x"), Outcome.UNKNOWN),
    (SimulatedCrash("put", "x", "after"), Outcome.UNKNOWN),
])
def test_the_cleanup_table(error: BaseException, outcome: Outcome) -> None:
    assert outcome_of(error) is outcome
    # Before the commit starts, nothing can have been committed, whatever the error.
    assert outcome_of(error, committing=False) is Outcome.NOT_COMMITTED


def test_every_rule_of_the_table_is_reachable() -> None:
    """A rule below a rule for its base class would never decide anything."""
    for i, rule in enumerate(RULES):
        assert not any(issubclass(rule.error, earlier.error) for earlier in RULES[:i]), rule
