"""Exactly-once pipeline stages: (app_id, app_version) across crashes, re-runs and races."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import deltacommit as dc
from deltacommit import spark as dcs
from deltacommit.engine.transaction.transaction import Transaction
from deltacommit.protocol.partitions import decode_add_path
from tests.spark.conftest import parquet_files

pytestmark = pytest.mark.spark


class Crash(BaseException):
    """Stands for the driver dying: nothing in the writer may catch or clean up after it."""


def stage(spark: Any, n: int) -> Any:
    return spark.sql(f"select id, {n} as stage, date'2026-11-22' as day "
                     f"from range({n * 100}, {n * 100 + 50})")


def stages_in_table(spark: Any, uri: str) -> dict[int, int]:
    counts: dict[int, int] = {}
    for r in dcs.read(spark, uri, columns=["stage"]).collect():
        counts[r["stage"]] = counts.get(r["stage"], 0) + 1
    return dict(sorted(counts.items()))


def referenced(uri: str) -> set[str]:
    return {decode_add_path(a.path) for a in dc.DeltaTable(uri).files()}


def test_rerun_of_a_committed_stage_is_skipped_without_running_a_job(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "t"
    uri = str(root)
    first = dcs.write(stage(spark, 1), uri, partition_by=["day"], app_id="ingest", app_version=1)
    files = parquet_files(root)
    again = dcs.write(stage(spark, 1), uri, app_id="ingest", app_version=1)
    assert (first.skipped, again.skipped) == (False, True)
    assert again.version == first.version == dc.DeltaTable(uri).version
    assert parquet_files(root) == files  # no Spark job ran: no new data files
    # An older version of the stage is skipped too; the next one is written.
    assert dcs.write(stage(spark, 0), uri, app_id="ingest", app_version=0).skipped
    assert not dcs.write(stage(spark, 2), uri, app_id="ingest", app_version=2).skipped
    assert stages_in_table(spark, uri) == {1: 50, 2: 50}
    assert dc.DeltaTable(uri).app_version("ingest") == 2


def test_crash_before_commit_then_rerun_writes_the_stage_once(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "t"
    uri = str(root)
    dcs.write(stage(spark, 1), uri, app_id="ingest", app_version=1)

    def crash(self: Transaction) -> Any:
        raise Crash("driver died before committing")

    monkeypatch.setattr(Transaction, "commit", crash)
    with pytest.raises(Crash):
        dcs.write(stage(spark, 2), uri, app_id="ingest", app_version=2)
    monkeypatch.undo()
    orphans = parquet_files(root) - referenced(uri)
    assert orphans  # the crashed run's data files exist but are not part of the table

    rerun = dcs.write(stage(spark, 2), uri, app_id="ingest", app_version=2)
    assert not rerun.skipped and rerun.version == 2
    assert stages_in_table(spark, uri) == {1: 50, 2: 50}
    assert not orphans & referenced(uri)


def test_crash_after_commit_then_rerun_is_skipped(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = str(tmp_path / "t")
    dcs.write(stage(spark, 1), uri, app_id="ingest", app_version=1)
    real_commit = Transaction.commit

    def commit_then_crash(self: Transaction) -> Any:
        real_commit(self)
        raise Crash("driver died right after committing")

    monkeypatch.setattr(Transaction, "commit", commit_then_crash)
    with pytest.raises(Crash):
        dcs.write(stage(spark, 2), uri, app_id="ingest", app_version=2)
    monkeypatch.undo()

    rerun = dcs.write(stage(spark, 2), uri, app_id="ingest", app_version=2)
    assert rerun.skipped and rerun.version == 2
    assert stages_in_table(spark, uri) == {1: 50, 2: 50}


def test_two_concurrent_runs_of_one_stage_commit_it_once(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "t"
    uri = str(root)
    dcs.write(stage(spark, 0), uri, app_id="ingest", app_version=0)
    start = threading.Barrier(2)
    results: list[dc.WriteResult] = []
    failures: list[BaseException] = []

    def run() -> None:
        try:
            start.wait()
            results.append(dcs.write(stage(spark, 1), uri, app_id="ingest", app_version=1))
        except BaseException as e:  # reported below
            failures.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert sorted(r.skipped for r in results) == [False, True]
    assert dc.DeltaTable(uri).version == 2
    assert stages_in_table(spark, uri) == {0: 50, 1: 50}
    # The losing run deleted its files (or never wrote any): nothing is left over.
    assert parquet_files(root) == referenced(uri)


def test_concurrent_writers_in_one_application_lose_no_commit(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dcs.write(stage(spark, 0).limit(0), uri, partition_by=["stage"])
    writers, commits = 3, 3
    start = threading.Barrier(writers)
    results: dict[int, list[dc.WriteResult]] = {}
    failures: list[BaseException] = []

    def run(w: int) -> None:
        try:
            start.wait()
            results[w] = [dcs.write(stage(spark, w * 10 + i), uri, app_id=f"writer-{w}", app_version=i)
                          for i in range(commits)]
        except BaseException as e:  # reported below
            failures.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    table = dc.DeltaTable(uri)
    assert table.version == 1 + writers * commits  # version 1 is the empty first write
    versions = sorted(r.version for rs in results.values() for r in rs)
    assert versions == list(range(2, writers * commits + 2))
    assert stages_in_table(spark, uri) == {w * 10 + i: 50 for w in range(writers) for i in range(commits)}
    assert all(table.app_version(f"writer-{w}") == commits - 1 for w in range(writers))
