"""Idempotent writes: ``txn`` actions carry (app_id, app_version); a write whose version is not
newer than the recorded one is skipped; two writers of one app id never both commit."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.io.storage import LocalStore
from deltacommit.protocol.actions import Txn

from .hooks import Gate, HookedLogStore
from .ops import APP, BLIND, SCHEMA, create_table, data_files


def batch(part: str, *row_ids: int) -> pa.Table:
    return pa.table({"p": [part] * len(row_ids), "id": list(row_ids), "seen": [BLIND] * len(row_ids)},
                    schema=SCHEMA)


def data_file_count(uri: str) -> int:
    return sum(1 for f in Path(uri).rglob("*.parquet") if "_delta_log" not in f.parts)


def ids_in(uri: str) -> list[int]:
    return sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist())


def test_a_version_not_newer_than_the_recorded_one_is_skipped(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    create_table(uri, "Serializable")
    first = dc.write(uri, batch("a", 10), app_id=APP, app_version=5)
    assert not first.skipped and first.version == 2 and first.num_rows == 1
    log = dc.DeltaTable(uri)
    assert log.app_version(APP) == 5
    txns = [a for c in log.log_store.read_commits_after(1) for a in _actions(log, c)
            if isinstance(a, Txn)]
    assert [(t.app_id, t.version) for t in txns] == [(APP, 5)]
    files = data_file_count(uri)

    for replay in (5, 4, 0):
        again = dc.write(uri, batch("a", 11), app_id=APP, app_version=replay)
        assert again.skipped and again.version == 2 and again.attempts == 0
    # Nothing was written: no commit, no data file.
    assert dc.DeltaTable(uri).version == 2 and data_file_count(uri) == files

    newer = dc.write(uri, batch("a", 12), app_id=APP, app_version=6)
    assert not newer.skipped and newer.version == 3
    assert ids_in(uri) == [1, 2, 10, 12]
    # Other app ids are independent.
    assert not dc.write(uri, batch("b", 13), app_id="other", app_version=1).skipped


def _actions(table: dc.DeltaTable, pair: tuple[int, bytes]) -> list[object]:
    from deltacommit.engine.snapshot.snapshot import decode_commit

    return list(decode_commit(table.log_store, pair[0], pair[1]).actions)


def test_two_transactions_with_one_app_id_exactly_one_commits(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    create_table(uri, "WriteSerializable")
    writers = 4
    read = threading.Barrier(writers, timeout=60)
    outcomes: list[object] = [None] * writers

    def run(i: int) -> None:
        table = dc.DeltaTable(uri)
        txn = table.transaction()
        assert txn.app_version(APP) is None
        txn.set_app_version(APP, 1)
        txn.add(data_files(table, [("a", 100 + i, BLIND)]))
        read.wait()
        try:
            outcomes[i] = txn.commit()
        except dc.ConcurrentModificationException as e:
            outcomes[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    committed = [o for o in outcomes if isinstance(o, dc.CommitResult)]
    failed = [o for o in outcomes if isinstance(o, dc.ConcurrentModificationException)]
    assert len(committed) == 1 and len(failed) == writers - 1, outcomes
    for e in failed:
        assert type(e) is dc.ConcurrentTransactionException
        assert f"'{APP}' version 1" in str(e) and "version 2 (WRITE)" in str(e)
    table = dc.DeltaTable(uri)
    assert table.version == 2 and table.app_version(APP) == 1
    assert len([i for i in ids_in(uri) if i >= 100]) == 1


def _gated_write(uri: str, gate: Gate, version: int, row: int,
                 out: dict[str, object]) -> threading.Thread:
    """A write() that reads, writes its data file and then waits at its first commit attempt."""
    def run() -> None:
        table = dc.DeltaTable(uri, log_store=HookedLogStore(LocalStore(uri), gate))
        try:
            out["result"] = dc.write(table, batch("a", row), app_id=APP, app_version=version)
        except BaseException as e:  # reported by the test thread
            out["result"] = e
            gate.arrived.set()

    t = threading.Thread(target=run)
    t.start()
    assert gate.arrived.wait(60)
    return t


@pytest.mark.parametrize(("late", "early", "outcome"), [
    (3, 3, "skipped"),     # the same write, twice: one commits, the other finds it done
    (3, 4, "skipped"),     # a newer version committed meanwhile covers this one
    (4, 3, "conflict"),    # an older version committed meanwhile: this one is not covered
])
def test_concurrent_writes_of_one_app_id(tmp_path: Path, late: int, early: int,
                                         outcome: str) -> None:
    uri = str(tmp_path / "t")
    create_table(uri, "Serializable")
    gate = Gate()
    out: dict[str, object] = {}
    blocked = _gated_write(uri, gate, late, 20, out)   # has read; holds its commit
    done = dc.write(uri, batch("a", 21), app_id=APP, app_version=early)
    assert not done.skipped and done.version == 2
    files_before_release = data_file_count(uri)
    gate.release.set()
    blocked.join(60)
    result = out["result"]
    if outcome == "skipped":
        assert isinstance(result, dc.WriteResult) and result.skipped, result
        # The loser's data file is deleted: it can never become part of the table.
        assert data_file_count(uri) == files_before_release - 1
    else:
        assert type(result) is dc.ConcurrentTransactionException, result
        assert f"'{APP}' version {early}" in str(result)
    table = dc.DeltaTable(uri)
    assert table.version == 2 and table.app_version(APP) == early
    assert ids_in(uri) == [1, 2, 21]
