"""Host turns on DynamoDB (``engine/commit/host_turn.py``), on moto and dynalite.

The next holder of a table's turn reads the version the record names from the log and checks
its entry itself (step 1), whatever the record says: a record that is wrong, stale, forged or
names a rolled-back commit costs nothing more than one that is right, and never skips a
check.  Step 1's consistent read of the entry also spares step 0, and the GET of N.json the
HEAD of step 1.  A holder that died between its copy and its completion is not waited for:
the next one completes the entry (step 1) and goes on.  Other processes are real ones;
requests are counted on the wire.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any

import pytest

import deltacommit as dc
from deltacommit.engine.commit import host_turn
from deltacommit.engine.commit.host_turn import HostTurn, Record
from deltacommit.io.datafiles import write_data_files
from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore
from deltacommit.protocol.log.names import commit_name, commit_path

from .helpers import (
    CRASH_EXIT,
    SCHEMA,
    DynamoSetup,
    batch,
    context,
    deltacommit_appender,
    run_crashing_commit,
    run_writers,
)


@pytest.fixture(autouse=True)
def turns_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turns as they are by default, in the suite's folder (a fork server started by an
    earlier test keeps the environment it started with, so the folder is not changed)."""
    monkeypatch.delenv(host_turn.SWITCH, raising=False)


def private(uri: str, options: dict[str, str]) -> dc.DeltaTable:
    """A table object whose log store keeps what it establishes to itself (its own hook), as
    another process's would: it knows only what it reads and what a turn hands it."""
    ls = DynamoDBLogStore.open(uri, options, hook=lambda step, version: None)
    return dc.DeltaTable(uri, storage_options=options, log_store=ls)


def requests_of(table: dc.DeltaTable) -> dict[str, int]:
    ls = table.log_store
    assert isinstance(ls, DynamoDBLogStore)
    store: Any = ls.store
    return {**store.requests, **{f"dynamodb.{k}": n for k, n in ls.requests.items()}}


def reset(table: dc.DeltaTable) -> None:
    ls = table.log_store
    assert isinstance(ls, DynamoDBLogStore)
    ls.reset_requests()
    ls.store.reset_requests()  # type: ignore[attr-defined]


def test_after_another_processs_commit_the_next_checks_it_on_storage(dynamo: DynamoSetup) -> None:
    uri, options = dynamo.uri("a"), dynamo.options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    mine = private(uri, options)
    assert dc.write(mine, batch(0, 0)).version == 1  # joined the fleet; knows version 1
    [(_, v, attempts, _)] = run_writers([(deltacommit_appender, uri, options, 1, 1)])[1]
    assert (v, attempts) == (2, 1)
    reset(mine)
    r = dc.write(mine, batch(0, 1))
    assert (r.version, r.attempts) == (3, 1)
    # Version 2 is read from the log (the record only named it) and its entry checked
    # (step 1, whatever its writer said): the GET stands for the HEAD of 2.json, and the
    # entry read consistently for the HEAD of 3.json (step 0).  Nothing is lost to a race.
    assert requests_of(mine) == {"GetObject": 1, "dynamodb.GetItem": 1, "PutObject": 3,
                                 "DeleteObject": 1, "dynamodb.PutItem": 1,
                                 "dynamodb.UpdateItem": 1}
    assert [e.complete for e in dynamo.entries(mine.log_store.table_path)] == [True] * 4  # type: ignore[attr-defined]


def test_a_record_whose_commit_is_not_the_one_read_changes_nothing(dynamo: DynamoSetup) -> None:
    uri, options = dynamo.uri("b"), dynamo.options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    mine = private(uri, options)
    assert dc.write(mine, batch(0, 0)).version == 1
    run_writers([(deltacommit_appender, uri, options, 1, 1)])
    # The record now names version 2 with another commit's digest (a table deleted and
    # created again, a record gone stale), settled.
    publish_as_another(mine, Record(2, "00" * 32, settled=True, pid=os.getpid() + 1))
    reset(mine)
    r = dc.write(mine, batch(0, 1))
    assert (r.version, r.attempts) == (3, 1)
    got = requests_of(mine)
    # Version 2 read from the log and its entry checked, as for a record that was right.
    assert got["GetObject"] == 1 and got["dynamodb.GetItem"] == 1
    rows = dc.DeltaTable(uri, storage_options=options).to_arrow()
    assert sorted(rows.column("writer").to_pylist()) == [0, 0, 1]


def publish_as_another(table: dc.DeltaTable, record: Record) -> None:
    turn = HostTurn.for_table(table.log_store, 1.0)
    assert turn is not None and turn.take(lambda: None)
    try:
        turn.publish(record)
    finally:
        turn.release()


def _delete_elsewhere(uri: str, options: dict[str, str], predicate: str | None,
                      out: Any) -> None:
    """A DELETE from another machine: it races, and knows nothing of this host's turns."""
    try:
        table = dc.DeltaTable(uri, storage_options=options,
                              policy=dc.CommitPolicy(host_turns=False))
        out.put(table.delete(predicate)["version"])
    except BaseException as e:
        out.put(f"{type(e).__name__}: {e}")


def delete_elsewhere(uri: str, options: dict[str, str], predicate: str | None) -> int:
    ctx = context("forkserver")
    out = ctx.Queue()
    p = ctx.Process(target=_delete_elsewhere, args=(uri, options, predicate, out))
    p.start()
    result = out.get(timeout=120)
    p.join(timeout=60)
    assert isinstance(result, int), result
    return result


def test_a_delete_from_another_machine_after_a_rollback_is_checked_not_missed(
        dynamo: DynamoSetup) -> None:
    uri, options = dynamo.uri("r"), dynamo.options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    service = private(uri, options)
    assert dc.write(service, batch(0, 0)).version == 1   # a live service, kept at 1
    [(_, v, _, _)] = run_writers([(deltacommit_appender, uri, options, 1, 1)])[1]
    assert v == 2                                         # the record names version 2
    # An operator rolls version 2 back (its commit file and its entry), and another machine
    # deletes every row (the service's) at version 2 again.
    ls = service.log_store
    assert isinstance(ls, DynamoDBLogStore)
    ls.store.delete(commit_path(2))
    dynamo.client.delete_item(TableName=dynamo.table, Key={
        "tablePath": {"S": ls.table_path}, "fileName": {"S": commit_name(2)}})
    assert delete_elsewhere(uri, options, None) == 2
    txn = service.transaction()
    assert txn.scan()  # reads the row deleted meanwhile
    txn.add(write_data_files(ls.store, batch(0, 1), [], clock=service.clock,
                             random=service.random))
    with pytest.raises(dc.ConcurrentDeleteReadException) as failed:
        txn.commit()
    assert failed.value.winning_version == 2
    assert dc.write(service, batch(0, 2)).version == 3
    assert [(e.version, e.complete) for e in dynamo.entries(ls.table_path)] == [
        (v, True) for v in range(4)]
    rows = dc.DeltaTable(uri, storage_options=options).to_arrow()
    assert sorted(zip(rows.column("writer").to_pylist(), rows.column("batch").to_pylist(),
                      strict=True)) == [(0, 2)]


def test_a_record_saying_its_writer_is_done_never_skips_completing_its_entry(
        dynamo: DynamoSetup) -> None:
    uri, options = dynamo.uri("d"), dynamo.options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    mine = private(uri, options)
    # A writer dies between copying 1.json and completing its entry; a record (aged,
    # forged, or the writer's own word before it died) says version 1 is settled.
    assert run_crashing_commit(uri, options, "after_copy") == CRASH_EXIT
    ls = mine.log_store
    assert isinstance(ls, DynamoDBLogStore)
    written = ls.store.get(commit_path(1))
    assert [e.complete for e in dynamo.entries(ls.table_path)] == [True, False]
    publish_as_another(mine, Record(1, hashlib.sha256(written).hexdigest(), settled=True,
                                    pid=os.getpid() + 1))
    assert dc.write(mine, batch(0, 0)).version == 2
    # Step 1 completed entry 1 before entry 2 was written: only the latest is ever incomplete.
    assert [e.complete for e in dynamo.entries(ls.table_path)] == [True, True, True]
    rows = dc.DeltaTable(uri, storage_options=options).to_arrow()
    assert sorted(rows.column("writer").to_pylist()) == [0, 99, 99, 99]


def test_a_holder_that_died_before_completing_its_entry_is_not_waited_for(
        dynamo: DynamoSetup) -> None:
    uri, options = dynamo.uri("c"), dynamo.options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    # A minute's patience: only the holder's death can end the wait early.
    ls = DynamoDBLogStore.open(uri, options, hook=lambda step, version: None)
    mine = dc.DeltaTable(uri, storage_options=options, log_store=ls,
                         policy=dc.CommitPolicy(turn_patience=60.0))
    # Killed right after writing 1.json and handing the turn on: the record says so, the
    # entry is incomplete.
    assert run_crashing_commit(uri, options, "after_hand_on") == CRASH_EXIT
    record = HostTurn.for_table(ls, 1.0).record()  # type: ignore[union-attr]
    assert record is not None and (record.version, record.settled) == (1, False)
    assert [e.complete for e in dynamo.entries(ls.table_path)] == [True, False]

    done = threading.Event()
    results: list[dc.WriteResult] = []

    def write() -> None:
        results.append(dc.write(mine, batch(0, 0)))
        done.set()

    threading.Thread(target=write, daemon=True).start()
    assert done.wait(timeout=30), "waited for a dead holder"
    assert (results[0].version, results[0].attempts) == (2, 1)
    # Step 1 completed the dead writer's entry before the entry of version 2 was written.
    assert [e.complete for e in dynamo.entries(ls.table_path)] == [True, True, True]
    rows = dc.DeltaTable(uri, storage_options=options).to_arrow()
    assert sorted(rows.column("writer").to_pylist()) == [0, 99, 99, 99]


def test_an_attempt_built_on_a_forged_handed_on_commit_claims_nothing_and_checks_everything(
        dynamo: DynamoSetup) -> None:
    uri, options = dynamo.uri("f"), dynamo.options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    mine = private(uri, options)
    assert dc.write(mine, batch(0, 0)).version == 1
    run_writers([(deltacommit_appender, uri, options, 1, 1)])
    ls = mine.log_store
    assert isinstance(ls, DynamoDBLogStore)
    real = ls.store.get(commit_path(2))
    # Handed on as version 2 with a record naming it: its bytes with another data file.
    forged = real.replace(b'"path":"', b'"path":"forged-', 1)
    turn = HostTurn.for_table(ls, 1.0)
    assert turn is not None and forged != real and turn.take(lambda: None)
    try:
        carried = host_turn.encode_carried({2: forged})
        with open(turn.path + ".carry", "r+b") as f:
            f.write(carried)
            f.truncate(len(carried))
        turn.publish(Record(2, hashlib.sha256(forged).hexdigest(), settled=True,
                            pid=os.getpid() + 1))
    finally:
        turn.release()
    reset(mine)
    r = dc.write(mine, batch(0, 1))
    assert (r.version, r.attempts) == (3, 1)
    got = requests_of(mine)
    # The attempt built on the forged commit wrote its temp file and claimed nothing: version
    # 2 was read beside it, found to be another commit, and the attempt built again on it,
    # with entry 2 checked (step 1) before the one claim.
    assert got["dynamodb.PutItem"] == 1 and got["dynamodb.GetItem"] >= 1
    assert got["PutObject"] == 4  # two temp files, 3.json, and nothing else
    entries = dynamo.entries(ls.table_path)
    assert [(e.version, e.complete) for e in entries] == [(v, True) for v in range(4)]
    fresh = dc.DeltaTable(uri, storage_options=options)
    assert sorted(a.path for a in mine.snapshot.state.files.values()) == sorted(
        a.path for a in fresh.snapshot.state.files.values())
    rows = fresh.to_arrow()
    assert sorted(rows.column("writer").to_pylist()) == [0, 0, 1]
