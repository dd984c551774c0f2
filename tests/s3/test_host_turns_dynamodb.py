"""Host turns on DynamoDB (``engine/host_turn.py``), on moto and dynalite.

The next holder of a table's turn takes what the last one established about its version
(entry complete, version newest at a moment) only once the commit is proven the same by its
SHA-256, and then spares step 0 (HEAD of N+1.json) and step 1 (GetItem and HEAD of N), and the
GET of N.json, which travelled with the record.  A holder that died between its copy and its
completion is not waited for: the next one completes the entry (step 1) and goes on.
Other processes are real ones; requests are counted on the wire.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

import deltacommit as dc
from deltacommit.engine import host_turn
from deltacommit.engine.host_turn import HostTurn, Record
from deltacommit.logstore.dynamodb import DynamoDBLogStore

from .helpers import (
    CRASH_EXIT,
    SCHEMA,
    DynamoSetup,
    batch,
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


def test_what_the_last_holder_established_spares_the_next_its_checks(dynamo: DynamoSetup) -> None:
    uri, options = dynamo.uri("a"), dynamo.options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    mine = private(uri, options)
    assert dc.write(mine, batch(0, 0)).version == 1  # joined the fleet; knows version 1
    [(_, v, attempts, _)] = run_writers([(deltacommit_appender, uri, options, 1, 1)])[1]
    assert (v, attempts) == (2, 1)
    reset(mine)
    r = dc.write(mine, batch(0, 1))
    assert (r.version, r.attempts) == (3, 1)
    # Version 2 came with the record (no GET), its entry was known complete (no GetItem, no
    # HEAD of 2.json) and itself the newest (no HEAD of 3.json): an uncontended commit's cost.
    assert requests_of(mine) == {"PutObject": 3, "DeleteObject": 1,
                                 "dynamodb.PutItem": 1, "dynamodb.UpdateItem": 1}
    assert [e.complete for e in dynamo.entries(mine.log_store.table_path)] == [True] * 4  # type: ignore[attr-defined]


def test_a_record_whose_commit_is_not_the_one_read_is_not_trusted(dynamo: DynamoSetup) -> None:
    uri, options = dynamo.uri("b"), dynamo.options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    mine = private(uri, options)
    assert dc.write(mine, batch(0, 0)).version == 1
    run_writers([(deltacommit_appender, uri, options, 1, 1)])
    # The record now names version 2 with another commit's digest (a table deleted and
    # created again, a record gone stale), claimed after version 1, complete and newest.
    turn = HostTurn.for_table(mine.log_store, 1.0)
    assert turn is not None and turn.take(lambda r: None, lambda: None)
    turn.publish(Record(2, "00" * 32, mine.log.cached_commits(1, 1)[0].digest, complete=True,
                        settled=True, latest=(time.monotonic(), time.time()),
                        pid=os.getpid() + 1), b"{}\n")
    turn.release()
    reset(mine)
    r = dc.write(mine, batch(0, 1))
    assert (r.version, r.attempts) == (3, 1)
    got = requests_of(mine)
    # Version 2 read from the log (the bytes carried are not the record's commit), and
    # checked as a writer that knows nothing checks it: entry 2 and 2.json, then 3.json.
    assert got["GetObject"] == 1
    assert got["dynamodb.GetItem"] == 1 and got["HeadObject"] == 2
    rows = dc.DeltaTable(uri, storage_options=options).to_arrow()
    assert sorted(rows.column("writer").to_pylist()) == [0, 0, 1]


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
    assert record is not None and (record.version, record.complete, record.settled) == (
        1, False, False)
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
