"""Spark's writer (``dcs.write``) and Spark compaction (``dcs.optimize``) on the write driver:
a failed commit leaves no data file behind, a landed one (or one whose outcome is unknown)
keeps every file (``tests/test_write_driver.py`` checks the other paths the same way)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import deltacommit as dc
from deltacommit import spark as dcs
from deltacommit.errors import (
    ConcurrentAppendException,
    CoordinationMismatchError,
    MetadataChangedException,
    StorageError,
)
from deltacommit.io.storage.local import LocalStore
from deltacommit.runtime.clock import ManualClock

from ..write_paths import Rig, race, rows

pytestmark = pytest.mark.spark


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    uri = str(tmp_path / "t")
    r = Rig(uri, LocalStore(uri))
    r.create()
    other = r.other()
    for i in range(6):
        dc.write(other, rows("a" if i % 2 == 0 else "b", [i]))
    return r


def _dcs_write(spark: Any, rig: Rig) -> Any:
    df = spark.createDataFrame([("a", 10), ("a", 11), ("a", 12)], "p string, id long")
    return dcs.write(df.repartition(3), rig.writer(), mode="overwrite", predicate="p = 'a'",
                     app_id="stage", app_version=1, repartition=False)


def _dcs_optimize(spark: Any, rig: Rig) -> Any:
    return dcs.optimize(spark, rig.writer())


def test_spark_write_keeps_every_file_of_a_landed_commit(spark: Any, rig: Rig) -> None:
    before = rig.data_files()
    result = _dcs_write(spark, rig)
    assert result.num_files >= 1
    assert set(rig.ids()) == {1, 3, 5, 10, 11, 12}
    assert rig.data_files() - before
    rig.check()


def test_spark_write_refused_or_beaten_leaves_no_file(spark: Any, rig: Rig) -> None:
    rig.refuse_claim()
    with pytest.raises(CoordinationMismatchError):
        _dcs_write(spark, rig)
    rig.check()
    other = rig.other()
    writer = race(rig, lambda: _dcs_write(spark, rig), lambda: dc.write(other, rows("a", [7])))
    with pytest.raises(ConcurrentAppendException):
        writer.join()
    assert 10 not in rig.ids()
    rig.check()


def test_spark_write_of_unknown_outcome_keeps_its_files(spark: Any, rig: Rig) -> None:
    version = rig.other().version
    rig.lose_answer()
    with pytest.raises(StorageError, match="after the operation"):
        _dcs_write(spark, rig)
    assert rig.other().version == version + 1
    rig.check()
    # Run again, the stage is found committed by its app id: nothing is written twice.
    assert _dcs_write(spark, rig).skipped
    assert sorted(rig.ids()) == [1, 3, 5, 10, 11, 12]


def test_spark_write_checks_the_commit_window(spark: Any, rig: Rig,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A job longer than the commit window commits only files that still exist
    (``commit_window``); a file a VACUUM took meanwhile fails the write, with the rest deleted."""
    from deltacommit.protocol.commit_window import COMMIT_WINDOW_MS
    from deltacommit.spark import writer

    clock = ManualClock(1_800_000_000.0)
    real = writer.write_files

    def slow(*args: Any, **kw: Any) -> Any:  # the job outlasts the window
        adds = real(*args, **kw)
        clock.advance(COMMIT_WINDOW_MS / 1000 + 1)
        rig.store.delete(adds[0].path)  # as a VACUUM of the uncommitted file would
        return adds

    monkeypatch.setattr(writer, "write_files", slow)
    df = spark.createDataFrame([("a", 10), ("a", 11)], "p string, id long")
    with pytest.raises(dc.StagedFilesExpiredError, match="were deleted before it could commit"):
        dcs.write(df.repartition(2), rig.writer(clock=clock), repartition=False)
    assert 10 not in rig.ids()
    rig.check()


def test_spark_compaction_keeps_its_files_only_when_committed(spark: Any, rig: Rig) -> None:
    before = rig.data_files()
    rig.refuse_claim()
    with pytest.raises(CoordinationMismatchError):
        _dcs_optimize(spark, rig)
    assert rig.data_files() == before
    rig.check()
    other = rig.other()
    writer = race(rig, lambda: _dcs_optimize(spark, rig),
                  lambda: other.set_properties({"delta.appendOnly": "false"}))
    with pytest.raises(MetadataChangedException):
        writer.join()
    assert rig.data_files() == before
    rig.check()
    # A concurrent delete of one partition: that bin's files go, the other bin commits.
    writer = race(rig, lambda: _dcs_optimize(spark, rig), lambda: other.delete("p = 'a'"))
    metrics = writer.join()
    assert metrics["binsLostToConcurrentRemoves"] == 1 and metrics["numFilesRemoved"] == 3
    assert sorted(rig.ids()) == [1, 3, 5]
    rig.check()


def test_spark_compaction_of_unknown_outcome_keeps_its_files(spark: Any, rig: Rig) -> None:
    version = rig.other().version
    rig.lose_answer()
    with pytest.raises(StorageError, match="after the operation"):
        _dcs_optimize(spark, rig)
    assert rig.other().version == version + 1
    assert len(rig.other().files()) == 2
    rig.check()
