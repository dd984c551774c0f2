"""Crash recovery: a writer process killed between its PutItem and its copy.

The process ends with ``os._exit`` inside the log store's fault hook, so nothing after the
step runs: no copy, no completion, no exception handling.  Its commit happened (the entry
exists), so the next reader and the next writer must each complete it, and the table must
hold the crashed writer's rows exactly as it wrote them.
"""

from __future__ import annotations

import pytest

import deltacommit as dc
from deltacommit.io.logstore import open_log_store
from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore
from deltacommit.protocol.log.names import commit_path

from .helpers import CRASH_EXIT, SCHEMA, DynamoSetup, batch, run_crashing_commit


def _crash_after_put_entry(dynamo: DynamoSetup) -> tuple[dc.DeltaTable, int, bytes]:
    """Create the table with one commit and crash a writer after its PutItem.

    Returns a writer that read the table before the crash, the crashed version and the bytes
    the crashed writer put in its temp file.
    """
    table = dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=dynamo.options)
    dc.write(table, batch(0, 0))
    assert run_crashing_commit(dynamo.uri(), dynamo.options, "after_put_entry", rows=3) == CRASH_EXIT
    entries = dynamo.entries(dynamo.uri())
    assert [(e.version, e.complete) for e in entries] == [(0, True), (1, True), (2, False)]
    store = table.log_store.store
    assert not store.exists(commit_path(2))
    return table, 2, store.get(entries[-1].temp_key)


def _crashed_rows(table: dc.DeltaTable) -> list[int]:
    data = table.to_arrow()
    return sorted(b for w, b in zip(data.column("writer").to_pylist(), data.column("batch").to_pylist(),
                                    strict=True) if w == 99)


def test_the_next_reader_completes_a_crashed_commit(dynamo: DynamoSetup) -> None:
    _, version, written = _crash_after_put_entry(dynamo)
    reader = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    assert reader.version == version
    assert _crashed_rows(reader) == [0, 1, 2]
    assert reader.log_store.store.get(commit_path(version)) == written
    latest = dynamo.entries(dynamo.uri())[-1]
    assert latest.complete and latest.expire_time is not None


def test_the_next_writer_completes_a_crashed_commit(dynamo: DynamoSetup) -> None:
    writer, version, written = _crash_after_put_entry(dynamo)
    # It read version 1 before the crash: it loses version 2 to the crashed writer, completes
    # it while catching up, and commits at 3.
    r = dc.write(writer, batch(0, 1))
    assert (r.version, r.attempts) == (3, 2)
    assert writer.log_store.store.get(commit_path(version)) == written
    assert [(e.version, e.complete) for e in dynamo.entries(dynamo.uri())] == [
        (0, True), (1, True), (2, True), (3, True)]
    assert _crashed_rows(dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)) == [0, 1, 2]


def test_a_writer_that_only_writes_completes_a_crashed_commit_first(dynamo: DynamoSetup) -> None:
    _, version, written = _crash_after_put_entry(dynamo)
    fresh = open_log_store(dynamo.uri(), dynamo.options)
    assert isinstance(fresh, DynamoDBLogStore)
    fresh.write_commit(version + 1, b'{"commitInfo":{"operation":"WRITE"}}\n')
    assert fresh.store.get(commit_path(version)) == written
    entries = dynamo.entries(dynamo.uri())
    assert [(e.version, e.complete) for e in entries] == [(0, True), (1, True), (2, True), (3, True)]


@pytest.mark.parametrize("step", ["after_copy", "after_complete"])
def test_crashes_after_the_copy_lose_nothing(dynamo: DynamoSetup, step: str) -> None:
    table = dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=dynamo.options)
    assert run_crashing_commit(dynamo.uri(), dynamo.options, step, rows=2) == CRASH_EXIT
    assert [e.complete for e in dynamo.entries(dynamo.uri())] == [True, step == "after_complete"]
    r = dc.write(table, batch(0, 0))
    assert r.version == 2
    reader = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    assert _crashed_rows(reader) == [0, 1]
    assert all(e.complete for e in dynamo.entries(dynamo.uri()))
