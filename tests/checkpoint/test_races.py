"""Racing checkpoint writers: always exactly one published checkpoint, and it is right."""

from __future__ import annotations

import json
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import deltalake
import pytest

import deltacommit as dc
from deltacommit.engine.hooks.checkpoint import (
    CheckpointCandidate,
    CheckpointInfo,
    read_checkpoint,
)
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.storage.local import LocalStore
from deltacommit.protocol.actions import parse_commit
from deltacommit.protocol.log.names import (
    LAST_CHECKPOINT,
    LOG_DIR,
    checkpoint_path,
    commit_path,
    parse_log_name,
)
from deltacommit.protocol.replay import TableState
from deltacommit.testing import MotoServer, S3Bucket

from ..s3.helpers import new_log_table
from .helpers import SCHEMA, ids_of, local_table, open_table, rows


def replayed(root: Path, version: int) -> TableState:
    """The state at ``version`` from the JSON commits alone."""
    state = TableState()
    for v in range(version + 1):
        state.apply(v, parse_commit((root / commit_path(v)).read_bytes(), str(v)))
    return state


def assert_valid_checkpoint(root: Path, version: int) -> None:
    """The checkpoint at ``version`` reads back as exactly the log's state at that version."""
    name = f"{version:020d}.checkpoint.parquet"
    f = parse_log_name(name, (root / LOG_DIR / name).stat().st_size)
    assert f is not None
    store = ConditionalPutLogStore(LocalStore(root))
    state = read_checkpoint(store, CheckpointCandidate(version, "checkpoint", (f,)))
    expected = replayed(root, version)
    assert state.version == version
    assert state.protocol == expected.protocol and state.metadata == expected.metadata
    assert dict(state.files.items()) == expected.files
    assert state.app_txns == expected.app_txns
    assert set(state.tombstones.keys()) == set(expected.tombstones)


def race_checkpoints(tables: list[dc.DeltaTable], meet: bool = True) -> list[CheckpointInfo]:
    """Each table writes its checkpoint on its own thread, released together by a barrier."""
    barrier = threading.Barrier(len(tables))
    results: list[CheckpointInfo] = []
    errors: list[BaseException] = []

    def race(table: dc.DeltaTable) -> None:
        try:
            if meet:
                barrier.wait(30)
            results.append(table.checkpoint())
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=race, args=(x,)) for x in tables]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    return results


def test_threads_racing_to_write_one_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, _ = local_table(root, configuration={"delta.checkpointInterval": "1000"},
                       partition_by=["day"])
    for r in range(25):
        dc.write(t, rows([r], day=f"d{r % 3}"))
        if r % 5 == 4:
            t.delete(f"day = 'd{r % 3}'")  # tombstones in the checkpoint too
        results = race_checkpoints([open_table(root) for _ in range(3)])
        assert sum(1 for info in results if info.created) == 1
        assert {info.version for info in results} == {t.version}
        assert_valid_checkpoint(root, t.version)
        hint = json.loads((root / LAST_CHECKPOINT).read_text())
        assert hint["version"] == t.version
        winner = next(info for info in results if info.created)
        assert hint["size"] == winner.num_actions
        assert hint["sizeInBytes"] == (root / checkpoint_path(t.version)).stat().st_size
    # No temporary files are left behind by the losers.
    assert sorted(p.name for p in (root / LOG_DIR).iterdir() if p.name.startswith(".")) == []


def _race_in_process(uri: str, barrier: Any) -> bool:
    table = dc.DeltaTable(uri)
    barrier.wait(60)
    return table.checkpoint().created


def test_processes_racing_to_write_one_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, _ = local_table(root, configuration={"delta.checkpointInterval": "1000"})
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ProcessPoolExecutor(2, mp_context=ctx) as pool:
        for r in range(6):
            dc.write(t, rows([r, r + 100]))
            barrier = manager.Barrier(2)
            futures = [pool.submit(_race_in_process, str(root), barrier) for _ in range(2)]
            created = sorted(f.result(timeout=120) for f in futures)
            assert created == [False, True]
            assert_valid_checkpoint(root, t.version)


def test_concurrent_committers_each_checkpointing(tmp_path: Path) -> None:
    """Four writers append with a checkpoint after every commit; every checkpoint matches the
    log at its version, and the table read through them matches the log."""
    root = tmp_path / "t"
    local_table(root, configuration={"delta.checkpointInterval": "1"})
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            table = open_table(root)
            barrier.wait(30)
            for i in range(6):
                dc.write(table, rows([w * 100 + i]))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    final = open_table(root)
    assert final.version == 24
    cps = sorted(int(p.name[:20]) for p in (root / LOG_DIR).glob("*.checkpoint.parquet"))
    assert cps and cps[-1] == 24
    for v in cps:
        assert_valid_checkpoint(root, v)
    assert sorted(final.to_arrow().column("id").to_pylist()) == sorted(
        w * 100 + i for w in range(4) for i in range(6))


def test_both_racers_reach_the_conditional_put(tmp_path: Path) -> None:
    """Hold each writer at its put-if-absent until both are there: one publishes, the other
    finds the file and leaves it, and neither touches ``_last_checkpoint`` wrongly."""
    from .helpers import WrappedStore

    root = tmp_path / "t"
    t, _ = local_table(root, configuration={"delta.checkpointInterval": "1000"})
    for r in range(5):
        dc.write(t, rows([r]))
        stores = [WrappedStore(LocalStore(root)) for _ in range(2)]
        meeting = threading.Barrier(2)

        def hold(path: str, _m: threading.Barrier = meeting) -> bool:
            if ".checkpoint." in path:
                _m.wait(30)
            return False

        for s in stores:
            s.fail_put = hold
        results = race_checkpoints([open_table(root, s) for s in stores], meet=False)
        assert sorted(info.created for info in results) == [False, True]
        assert_valid_checkpoint(root, t.version)
        hint = json.loads((root / LAST_CHECKPOINT).read_text())
        assert hint["version"] == t.version
        assert hint["size"] == next(i for i in results if i.created).num_actions


def assert_valid_s3_checkpoint(table: dc.DeltaTable, version: int) -> None:
    """As ``assert_valid_checkpoint``, through the table's own log store (S3)."""
    ls = table.log_store
    path = checkpoint_path(version)
    f = parse_log_name(path.rsplit("/", 1)[-1], ls.store.head(path).size)
    assert f is not None
    state = read_checkpoint(ls, CheckpointCandidate(version, "checkpoint", (f,)))
    expected = TableState()
    for v in range(version + 1):
        expected.apply(v, parse_commit(ls.read_commit(v), str(v)))
    assert state.version == version
    assert state.protocol == expected.protocol and state.metadata == expected.metadata
    assert dict(state.files.items()) == expected.files
    assert state.app_txns == expected.app_txns


@pytest.mark.parametrize("mode", ["conditional", "dynamodb-without-conditional-writes"])
def test_racing_checkpoint_writers_on_s3(s3_bucket: S3Bucket, moto_server: MotoServer, mode: str) -> None:
    """Three writers on moto S3 race to checkpoint the same version, five times over.  With
    conditional writes exactly one publishes and the others find its file.  On a store without
    them (the DynamoDB protocol's use case) publishing is a check then a plain put, as Spark does:
    a racer may write the checkpoint again, but every writer writes the same state for a
    version, so the object is always one whole, valid checkpoint that deltalake can load."""
    opts = dict(s3_bucket.storage_options)
    if mode != "conditional":
        opts.update({"AWS_S3_LOCKING_PROVIDER": "dynamodb",
                     "DELTA_DYNAMO_TABLE_NAME": new_log_table(moto_server.endpoint),
                     "DELTACOMMIT_S3_CONDITIONAL_WRITES": "false"})
    uri = f"{s3_bucket.uri}/t"
    t = dc.DeltaTable.create(uri, SCHEMA, partition_by=["day"], storage_options=opts,
                             configuration={"delta.checkpointInterval": "1000"})
    for r in range(5):
        dc.write(t, rows([r, r + 100], day=f"d{r % 2}"))
        results = race_checkpoints([dc.DeltaTable(uri, storage_options=opts) for _ in range(3)])
        assert {info.version for info in results} == {t.version}
        created = sum(1 for info in results if info.created)
        if mode == "conditional":
            assert created == 1
        else:
            assert created >= 1
        assert_valid_s3_checkpoint(t, t.version)
    # Readers load through the last checkpoint: deltalake too, once the commits before it are gone.
    for v in range(t.version):
        t.log_store.store.delete(commit_path(v))
    theirs = deltalake.DeltaTable(uri, storage_options=s3_bucket.storage_options)
    assert theirs.version() == t.version == 5
    assert sorted(theirs.to_pyarrow_table().column("id").to_pylist()) == sorted(
        x for r in range(5) for x in (r, r + 100))


def test_a_checkpoint_due_while_the_table_writes_one_is_left_to_the_next(
        tmp_path: Path, monkeypatch: Any) -> None:
    """Under group commit the next versions commit while a checkpoint is written.  A version
    due for a checkpoint meanwhile gets none (writing both would only repeat the work, twice
    over the whole table); the next version due gets one, and every reader sees every commit."""
    from deltacommit.engine.commit import table_log

    root = tmp_path / "t"
    local_table(root, configuration={"delta.checkpointInterval": "2"})
    table = dc.DeltaTable(str(root), group_commit=True)
    real = table_log.after_commit
    busy: list[int] = []

    def others_commit_meanwhile(log_store: Any, snapshot: Any, clock: Any, version: int) -> None:
        if version % 2 == 0 and not busy:
            busy.append(version)
            for i in (1, 2):  # each its own group: the one before is not done yet
                t = threading.Thread(target=dc.write, args=(table, rows([1000 + i])))
                t.start()
                t.join()
        real(log_store, snapshot, clock, version)

    monkeypatch.setattr(table_log, "after_commit", others_commit_meanwhile)
    dc.write(table, rows([0]))
    while not busy:
        dc.write(table, rows([table.version + 1]))
    [first] = busy
    assert table.version == first + 2
    assert (root / checkpoint_path(first)).exists()
    assert not (root / checkpoint_path(first + 2)).exists()
    dc.write(table, rows([2000]))
    dc.write(table, rows([2001]))
    assert table.version == first + 4
    assert (root / checkpoint_path(first + 4)).exists()
    assert_valid_checkpoint(root, first + 4)
    written = ids_of(dc.DeltaTable(str(root)).to_arrow())
    assert 1001 in written and 1002 in written and 2001 in written
    assert len(written) == len(set(written)) == table.version  # one row per write
