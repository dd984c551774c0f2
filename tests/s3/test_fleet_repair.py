"""Repair beside peers: deltacommit's in-flight state never looks like a conflict to delta-rs,
and a live delta-rs writer's fresh entry is left to it for the repair grace.

delta-rs (deltalake 1.6.0) finishes a commit by moving ``_delta_log/_commit_<uuid>.json.tmp`` to
N.json and reads an N.json that appeared under it as a lost race.  Its in-flight state is
modelled here item for item (temp file, incomplete entry); the grace is measured on a
``ManualClock`` whose ``sleep`` advances it, so nothing sleeps.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

import deltacommit as dc
from deltacommit.engine.snapshot import state_cache
from deltacommit.io.aws.resolve import resolve_aws_config
from deltacommit.io.logstore.s3_dynamodb.fleet import LOOK_KEPT_S, table_path_spellings
from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore
from deltacommit.io.storage import open_store as open_store_at
from deltacommit.io.storage.faults import FaultPlan, FaultyStore
from deltacommit.protocol.log.names import LOG_DIR, commit_name, commit_path
from deltacommit.runtime.clock import ManualClock

from .helpers import SCHEMA, DynamoSetup, batch

COMMIT = b'{"commitInfo":{"timestamp":1700000000000,"operation":"WRITE"}}\n'


class Stop(Exception):
    """Raised by a fault hook: the writer stops there, as if its process died."""


def delta_rs_in_flight(dynamo: DynamoSetup, ls: DynamoDBLogStore, version: int) -> str:
    """A delta-rs writer between its PutItem and its move: the temp file and an incomplete
    entry naming it.  Returns the temp file's key relative to the table root."""
    temp = f"_commit_{uuid.uuid4()}.json.tmp"
    ls.store.put(f"{LOG_DIR}/{temp}", COMMIT)
    dynamo.client.put_item(TableName=dynamo.table, Item={
        "tablePath": {"S": ls.table_path}, "fileName": {"S": commit_name(version)},
        "tempPath": {"S": temp}, "complete": {"S": "false"}})
    return f"{LOG_DIR}/{temp}"


def open_store(dynamo: DynamoSetup, clock: ManualClock, grace_ms: int) -> DynamoDBLogStore:
    options = {**dynamo.options, "DELTACOMMIT_DYNAMO_REPAIR_GRACE_MS": str(grace_ms)}
    ls = DynamoDBLogStore.open(dynamo.uri(), options, clock=clock)
    assert ls.repair_grace_ms == grace_ms
    return ls


def test_a_live_delta_rs_writer_finishes_its_own_commit_within_the_grace(dynamo: DynamoSetup) -> None:
    dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=dynamo.options)
    clock = ManualClock()
    ls = open_store(dynamo, clock, 500)
    temp = delta_rs_in_flight(dynamo, ls, 1)

    class MovingWhileWeWait(ManualClock):
        """The delta-rs writer moves its temp file and completes its entry while the reader
        waits out its first poll."""

        def sleep(self, seconds: float) -> None:
            clock.sleep(seconds)
            if ls.store.exists(temp):
                ls.store.put(commit_path(1), ls.store.get(temp))
                ls.store.delete(temp)
                dynamo.client.update_item(
                    TableName=dynamo.table, Key={"tablePath": {"S": ls.table_path},
                                                 "fileName": {"S": commit_name(1)}},
                    UpdateExpression="SET complete = :t", ExpressionAttributeValues={
                        ":t": {"S": "true"}})

    ls._clock = MovingWhileWeWait()
    ls.reset_requests()
    assert ls.read_commit(1) == COMMIT
    # One poll, and the writer's own completion: the reader never copied or completed anything.
    assert clock.monotonic() == pytest.approx(0.025)
    assert "UpdateItem" not in ls.requests
    assert [(e.version, e.complete) for e in dynamo.entries(ls.table_path)] == [(0, True), (1, True)]
    assert ls._k.first_seen == {}  # a settled entry is no longer remembered


def test_a_dead_delta_rs_writer_is_repaired_by_moving_once_the_grace_is_over(
        dynamo: DynamoSetup) -> None:
    dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=dynamo.options)
    clock = ManualClock()
    ls = open_store(dynamo, clock, 500)
    temp = delta_rs_in_flight(dynamo, ls, 1)
    before = {m.path for m in ls.store.list(LOG_DIR)}
    assert ls.read_commit(1) == COMMIT
    assert clock.monotonic() == pytest.approx(0.5)
    assert ls.store.get(commit_path(1)) == COMMIT
    assert {m.path for m in ls.store.list(LOG_DIR)} == before - {temp} | {commit_path(1)}
    assert [(e.version, e.complete) for e in dynamo.entries(ls.table_path)] == [(0, True), (1, True)]
    assert ls._k.first_seen == {}


def test_a_grace_of_zero_repairs_at_once(dynamo: DynamoSetup) -> None:
    dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=dynamo.options)
    clock = ManualClock()
    ls = open_store(dynamo, clock, 0)
    temp = delta_rs_in_flight(dynamo, ls, 1)
    assert ls.read_commit(1) == COMMIT
    assert clock.monotonic() == 0.0
    assert not ls.store.exists(temp)


def test_the_grace_counts_from_when_the_entry_was_first_seen(dynamo: DynamoSetup) -> None:
    """A writer that must commit N+1 waits out the rest of the grace only, not a fresh one."""
    table = dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=dynamo.options)
    clock = ManualClock()
    ls = open_store(dynamo, clock, 400)
    delta_rs_in_flight(dynamo, ls, 1)
    assert ls.latest_entry() is not None
    ls._k.first_seen[ls.latest_entry().temp_path] = -0.3  # type: ignore[union-attr]
    writer = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options, log_store=ls)
    assert dc.write(writer, batch(1, 0)).version == 2
    assert clock.monotonic() == pytest.approx(0.1)
    assert table.version == 0


class SignalsCompletion:
    """A DynamoDB client whose ``UpdateItem`` (the completion) sets ``completed`` once done."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.meta = client.meta
        self.completed = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def update_item(self, **kwargs: Any) -> Any:
        response = self._client.update_item(**kwargs)
        self.completed.set()
        return response


def test_our_temp_file_is_deleted_without_waiting_for_the_completion(dynamo: DynamoSetup) -> None:
    """The delete that rescues a delta-rs repair already under way is sent as soon as N.json
    holds the commit, and the completion at the same time: the temp file's delete is held here
    until the entry is complete, which a writer sending them one after the other never gets."""
    dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=dynamo.options)
    plan = FaultPlan()
    delete = plan.hang("delete", f"{LOG_DIR}/.tmp/*", limit=30)
    client = SignalsCompletion(dynamo.client)
    ls = DynamoDBLogStore(FaultyStore(open_store_at(dynamo.uri(), dynamo.options), plan),
                          resolve_aws_config(dynamo.options), client=client)
    table = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options, log_store=ls)
    writer = threading.Thread(target=dc.write, args=(table, batch(7, 0)))
    writer.start()
    delete.wait_reached()
    assert client.completed.wait(30)          # completed while the delete is still held
    entry = dynamo.entries(ls.table_path)[1]
    assert entry.complete and ls.store.exists(entry.temp_key)
    delete.release()
    writer.join(30)
    assert not ls.store.exists(entry.temp_key) and ls.store.exists(commit_path(1))
    assert dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options).version == 1


def test_a_copied_entry_whose_temp_file_is_gone_is_completed_as_moved(
        dynamo: DynamoSetup) -> None:
    """What a delta-rs repairer also does: N.json holds the commit, the temp file was deleted
    (by its writer, or moved by delta-rs) and the entry is still incomplete."""
    dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=dynamo.options)

    def stop(name: str, version: int) -> None:
        if name == "after_copy":
            raise Stop(name)

    ls = DynamoDBLogStore.open(dynamo.uri(), dynamo.options, hook=stop)
    with pytest.raises(Stop):
        dc.write(dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options, log_store=ls),
                 batch(7, 0))
    entry = dynamo.entries(ls.table_path)[1]
    ls.store.delete(entry.temp_key)
    assert not entry.complete and ls.store.exists(commit_path(1))
    reader = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    assert reader.version == 1
    assert [(e.version, e.complete) for e in dynamo.entries(ls.table_path)] == [(0, True), (1, True)]
    assert not ls.store.exists(entry.temp_key)


def test_a_bucket_root_fleet_on_spark_s_key_is_joined(dynamo: DynamoSetup) -> None:
    """Spark keys a bucket-root table ``s3a://bkt/``; a writer given ``s3://bkt`` joins it."""
    bucket = dynamo.bucket.name
    assert table_path_spellings(f"s3://{bucket}") == [
        f"s3://{bucket}", f"s3://{bucket}/", f"s3a://{bucket}", f"s3a://{bucket}/",
        f"s3n://{bucket}", f"s3n://{bucket}/"]
    ls = DynamoDBLogStore.open(f"s3://{bucket}", dynamo.options)
    dynamo.client.put_item(TableName=dynamo.table, Item={
        "tablePath": {"S": f"s3a://{bucket}/"}, "fileName": {"S": commit_name(0)},
        "tempPath": {"S": f".tmp/{commit_name(0)}.{uuid.uuid4()}"}, "complete": {"S": "true"}})
    ls.join_fleet()
    assert ls.table_path == f"s3a://{bucket}/"
    assert ls.requests.get("Query") == 6


def test_a_reader_by_s3_uri_repairs_the_latest_entry_of_a_fleet_on_s3a(dynamo: DynamoSetup) -> None:
    """A writer keying its entries ``s3a://`` (Spark) that stopped after its entry has made its
    commit (Spark reports it made).  A reader given the ``s3://`` URI finds that entry as a
    writer would, repairs it and reads the commit, as Spark's and deltalake's readers on
    ``s3a://`` do, instead of showing the table without it until the next write."""
    spark = {**dynamo.options, "DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME": "s3a"}
    uri = dynamo.uri()
    s3a = "s3a://" + uri.split("://", 1)[1]
    table = dc.DeltaTable.create(uri, SCHEMA, storage_options=spark)
    ls = DynamoDBLogStore.open(uri, spark, hook=_stop_at("after_put_entry"))
    with pytest.raises(Stop):
        dc.write(dc.DeltaTable(uri, storage_options=spark, log_store=ls), batch(1, 0))
    assert [(e.version, e.complete) for e in dynamo.entries(s3a)] == [(0, True), (1, False)]
    assert not table.log_store.store.exists(commit_path(1))
    state_cache.clear()  # a reader in a process of its own
    reader = dc.DeltaTable(uri, storage_options=dynamo.options)
    assert reader.version == 1
    assert reader.to_arrow().column("writer").to_pylist() == [1]
    assert [(e.version, e.complete) for e in dynamo.entries(s3a)] == [(0, True), (1, True)]
    assert dynamo.entries(uri) == []


def _stop_at(step: str) -> Any:
    def hook(name: str, version: int) -> None:
        if name == step:
            raise Stop(f"{name} {version}")
    return hook


def test_deltalake_s_percent_encoded_table_path_is_joined(dynamo: DynamoSetup) -> None:
    """deltalake 1.6.0 keys a table at ``s3://bkt/café t`` by the URL it parsed,
    ``s3://bkt/caf%C3%A9%20t``, while its objects are at ``café t/``, where deltacommit's are:
    a deltacommit writer given the same URI joins that spelling instead of refusing every
    commit as another mechanism's, and both writers exclude each other."""
    import deltalake

    uri = f"{dynamo.bucket.uri}/café t"
    encoded = f"{dynamo.bucket.uri}/caf%C3%A9%20t"
    assert encoded in table_path_spellings(uri)
    deltalake.write_deltalake(uri, batch(0, 0), storage_options=dynamo.options)
    assert [e.version for e in dynamo.entries(encoded)] == [0]
    assert dc.write(uri, batch(1, 0), storage_options=dynamo.options).version == 1
    assert [e.version for e in dynamo.entries(encoded)] == [0, 1]
    assert dynamo.entries(uri) == []
    deltalake.write_deltalake(uri, batch(0, 1), storage_options=dynamo.options, mode="append")
    assert dc.write(uri, batch(1, 1), storage_options=dynamo.options).version == 3
    assert [(e.version, e.complete) for e in dynamo.entries(encoded)] == [
        (v, True) for v in range(4)]
    data = deltalake.DeltaTable(uri, storage_options=dynamo.options).to_pyarrow_table()
    assert sorted(zip(*(data.column(c).to_pylist() for c in ("writer", "batch")), strict=True)) \
        == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_entries_of_the_location_a_percent_encoded_spelling_names_are_not_joined(
        dynamo: DynamoSetup) -> None:
    """``s3://bkt/a%20b`` is how delta-rs keys the table at ``a b/``, and also how deltacommit
    keys the table whose objects are at ``a%20b/``.  A writer of ``a b`` finding entries
    there whose newest commit is that other table's (in its log, not in this one) does not
    join them: it would claim the other table's versions, be refused as re-creating over
    stale entries, and ``--drop-stale-entries`` would delete the other table's entries."""
    other, uri = dynamo.uri("a%20b"), dynamo.uri("a b")
    for n in (0, 1):
        dc.write(other, batch(0, n), storage_options=dynamo.options)
    assert [e.version for e in dynamo.entries(other)] == [0, 1, 2]
    assert DynamoDBLogStore.open(uri, dynamo.options).drop_stale_entries() == 0
    assert [e.version for e in dynamo.entries(other)] == [0, 1, 2]

    assert dc.write(uri, batch(1, 0), storage_options=dynamo.options).version == 1
    assert dc.write(uri, batch(1, 1), storage_options=dynamo.options).version == 2
    assert [e.version for e in dynamo.entries(uri)] == [0, 1, 2]
    assert dc.write(other, batch(0, 2), storage_options=dynamo.options).version == 3
    assert [e.version for e in dynamo.entries(other)] == [0, 1, 2, 3]
    assert dc.DeltaTable(uri, storage_options=dynamo.options).to_arrow().num_rows == 2
    assert dc.DeltaTable(other, storage_options=dynamo.options).to_arrow().num_rows == 3


def test_a_recent_commit_no_entry_explains_stops_dynamodb_writers(dynamo: DynamoSetup) -> None:
    """A version written by another mechanism (here a plain conditional PUT, as an S3
    conditional-write writer makes it) beside entries of this protocol: younger than half the
    TTL, no TTL can have removed its entry.  The writer that already knew the table and a fresh
    one both refuse, name the file, and commit nothing; no entry is left for that version, and
    no temp file (a refusing writer is about to stop: nothing would sweep it later)."""
    uri = dynamo.uri()
    dc.DeltaTable.create(uri, SCHEMA, storage_options=dynamo.options)
    dc.write(uri, batch(0, 0), storage_options=dynamo.options)
    ours = dc.DeltaTable(uri, storage_options=dynamo.options)
    assert isinstance(ours.log_store, DynamoDBLogStore)
    store = ours.log_store.store
    store.put_if_absent(commit_path(2), COMMIT)
    before = {m.path: store.get(m.path) for m in store.list(LOG_DIR)}
    for writer in (ours, dc.DeltaTable(uri, storage_options=dynamo.options)):
        with pytest.raises(dc.CoordinationMismatchError,
                           match=rf"{commit_name(2)} was written .* no entry for it.*another mechanism"):
            dc.write(writer, batch(1, 0))
    after = {m.path: store.get(m.path) for m in store.list(LOG_DIR)}
    assert after == before
    assert [e.version for e in dynamo.entries(uri)] == [0, 1]


def _a_day_on(dynamo: DynamoSetup, uri: str
              ) -> tuple[DynamoDBLogStore, ManualClock, dc.DeltaTable]:
    """A fresh process a day after the table's last commit: its log store (on a clock of its
    own, to advance), and a table object on it."""
    state_cache.clear()
    clock = ManualClock(time.time() + 86_400)
    log_store = DynamoDBLogStore.open(uri, dynamo.options, clock=clock)
    return log_store, clock, dc.DeltaTable(uri, storage_options=dynamo.options,
                                           log_store=log_store)


def test_after_the_entries_expired_a_writer_keys_its_entry_as_the_table_records(
        dynamo: DynamoSetup) -> None:
    """A table recording the fleet's spelling (``s3a://``), idle until TTL removed every
    entry: a writer configured with the URI's own spelling (the default) finds no entry to
    join, and follows the record instead of refusing every commit as configured otherwise
    (or keying its entries apart from the fleet's)."""
    uri = dynamo.uri()
    s3a = "s3a://" + uri.split("://", 1)[1]
    spark = {**dynamo.options, "DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME": "s3a"}
    table = dc.DeltaTable.create(uri, SCHEMA, storage_options=spark)
    dc.write(table, batch(0, 0))
    assert table.configuration["deltacommit.coordination.tablePath"] == s3a
    dynamo.delete_entries(s3a)  # expired a day after their commits, and removed by TTL
    *_, writer = _a_day_on(dynamo, uri)
    assert dc.write(writer, batch(1, 0)).version == 2
    assert [e.version for e in dynamo.entries(s3a)] == [2]
    assert dynamo.entries(uri) == []


def test_after_the_entries_expired_a_writer_keys_its_entry_as_its_fleet_last_did(
        dynamo: DynamoSetup) -> None:
    """A table that records no tablePath (deltalake created it, given ``s3a://``), written
    by deltacommit on ``s3://`` (joining ``s3a://``), then idle until TTL removed every
    entry: a writer with the default spelling follows the one deltacommit's writers last
    used (the marker names it) instead of keying its entries ``s3://``, which deltalake's
    writers on ``s3a://`` would not see."""
    import deltalake

    uri = dynamo.uri()
    s3a = "s3a://" + uri.split("://", 1)[1]
    deltalake.write_deltalake(s3a, batch(0, 0), storage_options=dynamo.options)
    assert dc.write(uri, batch(1, 0), storage_options=dynamo.options).version == 1
    assert [e.version for e in dynamo.entries(s3a)] == [0, 1]
    dynamo.delete_entries(s3a)  # expired a day after their commits, and removed by TTL
    *_, writer = _a_day_on(dynamo, uri)
    assert dc.write(writer, batch(1, 1)).version == 2
    assert [e.version for e in dynamo.entries(s3a)] == [2]
    assert dynamo.entries(uri) == []
    deltalake.write_deltalake(s3a, batch(0, 1), storage_options=dynamo.options, mode="append")
    assert [e.version for e in dynamo.entries(s3a)] == [2, 3]


def test_a_write_after_every_entry_expired_looks_under_each_spelling_once(
        dynamo: DynamoSetup) -> None:
    """A writer of a quiet table (TTL removed every entry) finds commits but no latest entry:
    its listing looks under every spelling for the fleet's (``follow_fleet``), and its claim
    decides the spelling to key by from that same look, not from a second one."""
    uri = dynamo.uri()
    newest = dc.write(uri, batch(0, 0), storage_options=dynamo.options).version
    dynamo.delete_entries(uri)
    a_day_on, _, writer = _a_day_on(dynamo, uri)
    assert dc.write(writer, batch(1, 1)).version == newest + 1
    assert [e.version for e in dynamo.entries(uri)] == [newest + 1]
    spellings = len(table_path_spellings(uri))
    # The latest entry under its own spelling (none), then each spelling once.
    assert a_day_on.requests.get("Query") == 1 + spellings, a_day_on.requests


def test_a_write_long_after_a_read_joins_the_spelling_deltalake_wrote_meanwhile(
        dynamo: DynamoSetup) -> None:
    """A process that read a quiet table deltalake writes on ``s3a://`` (TTL removed its
    entries: the read's look under every spelling found none), then writes after deltalake
    wrote again, joins ``s3a://``: the read's look stands for the claim's only within
    ``LOOK_KEPT_S``, and the entry is never keyed by the spelling an old look found free."""
    import deltalake

    uri = dynamo.uri()
    s3a = "s3a://" + uri.split("://", 1)[1]
    deltalake.write_deltalake(s3a, batch(1, 0), storage_options=dynamo.options)
    dynamo.delete_entries(s3a)
    _, clock, reader = _a_day_on(dynamo, uri)
    assert reader.version == 0
    deltalake.write_deltalake(s3a, batch(1, 1), storage_options=dynamo.options, mode="append")
    clock.advance(LOOK_KEPT_S + 1)
    assert dc.write(reader, batch(0, 0)).version == 2
    assert [e.version for e in dynamo.entries(s3a)] == [1, 2]
    assert dynamo.entries(uri) == []
