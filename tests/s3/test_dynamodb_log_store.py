"""The S3DynamoDBLogStore protocol as Spark and delta-rs write it, against moto and dynalite.

Items are inspected with a plain boto3 client, so these tests check the wire format (what a
Spark writer will find in the table), not just that this library reads back what it wrote.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pyarrow as pa
import pytest
from botocore.config import Config

import deltacommit as dc
from deltacommit.engine.snapshot import state_cache
from deltacommit.errors import (
    CoordinationMismatchError,
    CorruptLogError,
    LogStoreError,
    VersionExistsError,
)
from deltacommit.io.logstore import COORDINATION_KEY, ConditionalPutLogStore, open_log_store
from deltacommit.io.logstore.base import DYNAMODB_MARKER
from deltacommit.io.logstore.s3_dynamodb.entry import CommitEntry
from deltacommit.io.logstore.s3_dynamodb.fleet import TABLE_NAME_KEY, TABLE_PATH_KEY
from deltacommit.io.logstore.s3_dynamodb.log_store import STEPS, DynamoDBLogStore
from deltacommit.io.logstore.s3_dynamodb.repair import TEMP_SWEEP_BATCH
from deltacommit.protocol.log.names import LOG_DIR, commit_name, commit_path
from deltacommit.runtime.clock import ManualClock, RandomSource
from deltacommit.testing import Fault, FaultInjectingProxy, MotoServer

from .helpers import EACH_AWS_CLIENT, SCHEMA, DynamoSetup, batch, new_log_table

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}"
TEMP_PATH = re.compile(rf"^\.tmp/(\d{{20}}\.json)\.{UUID}$")


class Stop(Exception):
    """Raised by a fault hook: the writer stops at that step, as if its process died."""


def stop_at(step: str) -> Any:
    assert step in STEPS

    def hook(name: str, version: int) -> None:
        if name == step:
            raise Stop(f"{name} {version}")

    return hook


def create(dynamo: DynamoSetup, name: str = "t", **extra: str) -> dc.DeltaTable:
    return dc.DeltaTable.create(dynamo.uri(name), SCHEMA, storage_options={**dynamo.options, **extra})


def stopped_writer(dynamo: DynamoSetup, step: str, name: str = "t") -> DynamoDBLogStore:
    return DynamoDBLogStore.open(dynamo.uri(name), dynamo.options, hook=stop_at(step))


def append_stopped(dynamo: DynamoSetup, step: str, writer: int = 7, name: str = "t") -> int:
    """Append one batch with a writer that stops at ``step``; the version it claimed."""
    ls = stopped_writer(dynamo, step, name)
    table = dc.DeltaTable(dynamo.uri(name), storage_options=dynamo.options, log_store=ls)
    with pytest.raises(Stop):
        dc.write(table, batch(writer, 0))
    return table.version + 1


def rows(table: dc.DeltaTable) -> list[tuple[int, int]]:
    data = table.to_arrow()
    return sorted(zip(data.column("writer").to_pylist(), data.column("batch").to_pylist(), strict=True))


# --------------------------------------------------------------------------- items


def test_items_are_written_as_spark_writes_them(dynamo: DynamoSetup) -> None:
    table = create(dynamo)
    before = int(time.time())
    dc.write(table, batch(0, 0))
    after = int(time.time())
    ls = table.log_store
    assert isinstance(ls, DynamoDBLogStore)
    assert ls.table_path == dynamo.uri() == f"s3://{dynamo.bucket.name}/t"
    items = dynamo.items(ls.table_path)
    assert [i["fileName"] for i in items] == [{"S": commit_name(0)}, {"S": commit_name(1)}]
    for v, item in enumerate(items):
        assert set(item) == {"tablePath", "fileName", "tempPath", "complete", "expireTime"}
        assert item["tablePath"] == {"S": ls.table_path}
        assert item["complete"] == {"S": "true"}
        m = TEMP_PATH.match(item["tempPath"]["S"])
        assert m is not None and m.group(1) == commit_name(v)
        assert set(item["expireTime"]) == {"N"}
    expire = int(items[1]["expireTime"]["N"])
    assert before + 86_400 <= expire <= after + 86_400
    # The temp file (relative to _delta_log) is deleted once N.json holds the commit, before
    # the entry is completed, so a delta-rs repairer never finds both (it moves temp files).
    store = ls.store
    temp = f"{LOG_DIR}/{items[1]['tempPath']['S']}"
    assert not store.exists(temp) and store.exists(commit_path(1))


def test_the_expiry_delay_is_configurable(dynamo: DynamoSetup) -> None:
    table = create(dynamo, DELTACOMMIT_DYNAMO_TTL_SECONDS="7200")
    before = int(time.time())
    dc.write(table, batch(0, 0), storage_options={**dynamo.options, "DELTACOMMIT_DYNAMO_TTL_SECONDS": "7200"})
    entry = dynamo.entries(dynamo.uri())[-1]
    assert entry.expire_time is not None and before + 7200 <= entry.expire_time <= int(time.time()) + 7200


def test_table_path_has_no_trailing_slash_and_can_use_spark_s3a_scheme(dynamo: DynamoSetup) -> None:
    plain = open_log_store(dynamo.uri("a") + "/", dynamo.options)
    assert isinstance(plain, DynamoDBLogStore)
    assert plain.table_path == f"s3://{dynamo.bucket.name}/a"
    spark = open_log_store(dynamo.uri("b"), {**dynamo.options,
                                             "DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME": "s3a"})
    assert isinstance(spark, DynamoDBLogStore)
    assert spark.table_path == f"s3a://{dynamo.bucket.name}/b"
    dc.DeltaTable.create(dynamo.uri("b"), SCHEMA, log_store=spark)
    assert [e.file_name for e in dynamo.entries(f"s3a://{dynamo.bucket.name}/b")] == [commit_name(0)]
    assert dynamo.entries(dynamo.uri("b")) == []
    # A Spark table addressed as s3a:// shares its keys with s3a:// writers by default.
    s3a = open_log_store(f"s3a://{dynamo.bucket.name}/b", dynamo.options)
    assert isinstance(s3a, DynamoDBLogStore) and s3a.table_path == spark.table_path


def test_locking_provider_selects_the_dynamodb_log_store_only_on_s3(dynamo: DynamoSetup,
                                                                   tmp_path: Any) -> None:
    assert isinstance(open_log_store(dynamo.uri(), dynamo.options), DynamoDBLogStore)
    assert isinstance(open_log_store(dynamo.uri(), dynamo.bucket.storage_options),
                      ConditionalPutLogStore)
    # Local tables create files atomically themselves; the AWS options are not consulted.
    assert isinstance(open_log_store(str(tmp_path), dynamo.options), ConditionalPutLogStore)


# --------------------------------------------------------------------------- requests


def test_an_uncontended_commit_costs_five_requests(dynamo: DynamoSetup) -> None:
    table = create(dynamo)
    ls = table.log_store
    assert isinstance(ls, DynamoDBLogStore)
    store = ls.store
    for b in range(3):
        ls.reset_requests()
        store.reset_requests()  # type: ignore[attr-defined]
        dc.write(table, batch(0, b))
        assert ls.requests == {"PutItem": 1, "UpdateItem": 1}
        # Data file, temp file, commit file, then the temp file deleted: no HEAD, no GET.
        assert store.requests == {"PutObject": 3, "DeleteObject": 1}  # type: ignore[attr-defined]


def test_temp_files_of_lost_claims_are_deleted_together(dynamo: DynamoSetup) -> None:
    """A claim lost to another writer leaves a temp file no entry names; a writer deletes its
    own TEMP_SWEEP_BATCH at a time with one DeleteObjects (Spark's never deletes them)."""
    table = create(dynamo)
    state_cache.clear()  # rival stands for another process
    rival = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    ls = table.log_store
    assert isinstance(ls, DynamoDBLogStore)
    store = ls.store

    def temps() -> set[str]:
        return {m.path for m in store.list(f"{LOG_DIR}/.tmp/") if m.path != DYNAMODB_MARKER}

    assert temps() == set()
    store.reset_requests()  # type: ignore[attr-defined]
    lost: list[str] = []
    for i in range(TEMP_SWEEP_BATCH):
        rival.update()
        assert dc.write(rival, batch(1, i)).attempts == 1  # table's next attempt loses
        assert "DeleteObjects" not in store.requests  # type: ignore[attr-defined]
        assert temps() == set(lost)    # committed temp files are deleted at once
        r = dc.write(table, batch(0, i))
        assert r.attempts == 2
        lost = [p for p in temps() if p not in lost] + lost
    assert store.requests["DeleteObjects"] == 1  # type: ignore[attr-defined]
    assert temps() == set()
    assert [e.complete for e in dynamo.entries(ls.table_path)] == [True] * (2 * TEMP_SWEEP_BATCH + 1)
    assert rows(dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)) == sorted(
        [(w, i) for w in (0, 1) for i in range(TEMP_SWEEP_BATCH)])


def test_a_new_writer_learns_the_table_from_one_query(dynamo: DynamoSetup) -> None:
    table = create(dynamo)
    dc.write(table, batch(0, 0))
    state_cache.clear()  # a new process: it knows nothing of the table
    fresh = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    ls = fresh.log_store
    assert isinstance(ls, DynamoDBLogStore)
    assert ls.requests["Query"] == 1 and "GetItem" not in ls.requests
    ls.reset_requests()
    dc.write(fresh, batch(0, 1))
    # Its first commit looks for the table's entries under every tablePath spelling (s3, s3a,
    # s3n: one Query each, once per process); later ones cost the protocol's minimum.
    assert ls.requests == {"Query": 3, "PutItem": 1, "UpdateItem": 1}
    ls.reset_requests()
    dc.write(fresh, batch(0, 2))
    assert ls.requests == {"PutItem": 1, "UpdateItem": 1}


def test_opening_by_uri_again_reuses_what_the_process_learnt(dynamo: DynamoSetup) -> None:
    """``dc.write(uri)`` opens a new log store object on every call: the fleet's spelling, the
    previous entry's completion and the newest version are known from the calls before, so a
    call costs the protocol's commit plus the open's proof (a GET of the last known commit),
    its Query of the newest entry and the HEAD that no other mechanism wrote past it."""
    create(dynamo)
    dc.write(dynamo.uri(), batch(0, 0), storage_options=dynamo.options)
    opened = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    ls = opened.log_store
    store = ls.store
    assert isinstance(ls, DynamoDBLogStore)
    ls.reset_requests()
    store.reset_requests()  # type: ignore[attr-defined]
    for b in range(1, 4):
        again = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
        assert again.log_store is not ls  # a new object, sharing the process's knowledge
        dc.write(again, batch(0, b))
    # Each counter belongs to its object; the shared client carries every request, so count
    # the last object's requests alone: one open and one commit.
    last = again.log_store
    assert isinstance(last, DynamoDBLogStore)
    assert last.requests == {"Query": 1, "PutItem": 1, "UpdateItem": 1}
    assert last.store.requests == {"GetObject": 1, "HeadObject": 1,  # type: ignore[attr-defined]
                                   "PutObject": 3, "DeleteObject": 1}


def test_a_writer_behind_by_several_versions_pays_one_query_and_one_get_per_commit(
        dynamo: DynamoSetup) -> None:
    """Its first lost claim returns the entry that beat it (moto, like DynamoDB; dynalite
    returns none), so that version alone is read and the next one claimed at once; the second
    loss in a row finds the newest version with one Query.  Either way each commit is read
    once."""
    a = create(dynamo)
    state_cache.clear()  # b stands for another process: it shares nothing a learns
    b = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    for i in range(3):
        dc.write(a, batch(0, i))
    ls = b.log_store
    assert isinstance(ls, DynamoDBLogStore)
    store = ls.store
    ls.join_fleet()  # once per log store object (see test_a_new_writer_learns_the_table...)
    ls.reset_requests()
    store.reset_requests()  # type: ignore[attr-defined]
    r = dc.write(b, batch(1, 0))
    claims = 3 if dynamo.backend == "moto" else 2
    assert (r.version, r.attempts) == (4, claims)
    assert ls.requests == {"PutItem": claims, "Query": 1, "UpdateItem": 1}
    # The data file, a temp file per claim, the commit file and its marker; the three commits
    # read back once each.  The commit's temp file is deleted; lost claims' wait to be deleted
    # with others.
    assert store.requests == {"PutObject": claims + 3,  # type: ignore[attr-defined]
                              "GetObject": 3, "DeleteObject": 1}
    assert rows(b) == [(0, 0), (0, 1), (0, 2), (1, 0)]


def test_a_lost_race_is_caught_up_without_a_query(dynamo: DynamoSetup) -> None:
    """Two writers one version apart: the loser reads the version that beat it (by the entry
    its failed PutItem returned) and claims the next one; no Query, no probe of the one after.
    Without the entry (dynalite) the catch-up Queries as before."""
    a = create(dynamo)
    state_cache.clear()
    b = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    dc.write(a, batch(0, 0))
    ls = b.log_store
    assert isinstance(ls, DynamoDBLogStore)
    ls.join_fleet()
    ls.reset_requests()
    ls.store.reset_requests()  # type: ignore[attr-defined]
    r = dc.write(b, batch(1, 0))
    assert (r.version, r.attempts) == (2, 2)
    queries = 0 if dynamo.backend == "moto" else 1
    assert ls.requests == {"PutItem": 2, "UpdateItem": 1, **({"Query": 1} if queries else {})}
    assert ls.store.requests["GetObject"] == 1  # type: ignore[attr-defined]
    assert "HeadObject" not in ls.store.requests  # type: ignore[attr-defined]
    assert rows(b) == [(0, 0), (1, 0)]


def test_the_version_lost_to_a_writer_still_copying_is_read_from_its_temp_file(
        dynamo: DynamoSetup) -> None:
    """The entry that beat the claim is incomplete and N.json absent (its writer stopped after
    PutItem): the loser reads the commit from the temp file the returned entry names, checks
    it, and its next claim's step 1 copies it to N.json before claiming N+1."""
    create(dynamo)
    state_cache.clear()
    b = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    claimed = append_stopped(dynamo, "after_put_entry", writer=7)
    assert claimed == 1
    assert not dynamo.entries(dynamo.uri())[-1].complete
    r = dc.write(b, batch(1, 0))
    assert (r.version, r.attempts) == (2, 2)
    entries = dynamo.entries(dynamo.uri())
    assert [(e.version, e.complete) for e in entries] == [(0, True), (1, True), (2, True)]
    assert rows(dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)) == [(1, 0), (7, 0)]


def test_a_conflict_in_the_version_lost_is_found_by_the_cheap_catch_up(
        dynamo: DynamoSetup) -> None:
    """Reading only the version that beat the claim still checks it: a change of the table's
    metadata there fails an append that read the metadata before it."""
    a = create(dynamo)
    state_cache.clear()
    b = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    a.set_properties({"delta.checkpointInterval": "7"})
    with pytest.raises(dc.MetadataChangedException):
        dc.write(b, batch(1, 0))
    after = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    assert after.version == 1 and rows(after) == []


def test_a_complete_entry_that_beat_a_claim_spares_the_existence_check_only_briefly(
        dynamo: DynamoSetup) -> None:
    """The entry a failed claim of N returns, complete, does not show that N is the newest
    version (its writer may have gone on): only that no newer entry can expire within the
    expiry margin.  So step 0's HEAD of N+1.json is skipped within that margin and made after
    it.  An incomplete one is the newest (only the latest entry can be), and its knowledge
    lasts half the TTL, as every other proof of the newest version does.  Without the entry
    (dynalite returns none) the catch-up Queries the newest entry, a proof that lasts as long."""
    options = {**dynamo.options, "DELTACOMMIT_DYNAMO_TTL_SECONDS": "3600"}

    def lost_claim_then_next(advance: float, complete: bool, name: str) -> bool:
        """Whether the claim after a lost one, ``advance`` seconds later, looked for N.json."""
        clock = ManualClock()

        def log_store(hook: Any = None) -> DynamoDBLogStore:
            return DynamoDBLogStore.open(dynamo.uri(name), options, clock=clock, hook=hook)

        log_store().write_commit(0, b'{"commitInfo":{}}\n')
        # Each object with its own clock keeps what it establishes to itself, so the loser
        # knows only what it reads, as another process would.
        loser = log_store()
        assert [v for v, _ in loser.read_commits_after(-1)] == [0]  # the newest is 0
        if complete:
            log_store().write_commit(1, b'{"commitInfo":{"w":1}}\n')
        else:
            with pytest.raises(Stop):
                log_store(stop_at("after_put_entry")).write_commit(1, b'{"commitInfo":{"w":1}}\n')
        with pytest.raises(VersionExistsError):
            loser.write_commit(1, b'{"commitInfo":{"w":2}}\n')
        assert [v for v, _ in loser.read_after_loss(1)] == [1]
        clock.advance(advance)
        loser.store.reset_requests()  # type: ignore[attr-defined]
        loser.write_commit(2, b'{"commitInfo":{"w":2}}\n')
        return "HeadObject" in loser.store.requests  # type: ignore[attr-defined]

    returned = dynamo.backend == "moto"
    assert not lost_claim_then_next(299, complete=True, name="a")
    assert lost_claim_then_next(301, complete=True, name="b") is returned
    assert not lost_claim_then_next(301, complete=False, name="c")


def test_the_existence_check_returns_once_knowledge_is_older_than_half_the_ttl(
        dynamo: DynamoSetup) -> None:
    """Step 0's HEAD is skipped only while an entry created since the last look would still
    be alive (half the entry TTL); after that the writer looks again."""
    options = {**dynamo.options, "DELTACOMMIT_DYNAMO_TTL_SECONDS": "3600"}
    clock = ManualClock()
    base = open_log_store(dynamo.uri(), options)
    assert isinstance(base, DynamoDBLogStore)
    ls = DynamoDBLogStore(base.store, base.config, clock=clock)
    table = dc.DeltaTable.create(dynamo.uri(), SCHEMA, log_store=ls, clock=clock)
    store = ls.store
    dc.write(table, batch(0, 0))
    clock.advance(1799)
    store.reset_requests()  # type: ignore[attr-defined]
    dc.write(table, batch(0, 1))
    assert "HeadObject" not in store.requests  # type: ignore[attr-defined]
    clock.advance(1801)
    store.reset_requests()  # type: ignore[attr-defined]
    dc.write(table, batch(0, 2))
    assert store.requests["HeadObject"] == 1  # type: ignore[attr-defined]
    entry = dynamo.entries(dynamo.uri())[-1]
    assert entry.expire_time == int(clock.time()) + 3600


# --------------------------------------------------------------------------- exclusion


@EACH_AWS_CLIENT
def test_a_claimed_version_is_refused_to_a_second_writer(dynamo: DynamoSetup, aws_client: str) -> None:
    create(dynamo)
    first = open_log_store(dynamo.uri(), dynamo.options)
    second = open_log_store(dynamo.uri(), dynamo.options)
    first.write_commit(1, b'{"commitInfo":{"n":1}}\n')
    with pytest.raises(VersionExistsError, match=r"version 1 of table s3://.*/t already exists"):
        second.write_commit(1, b'{"commitInfo":{"n":2}}\n')
    assert first.read_commit(1) == second.read_commit(1) == b'{"commitInfo":{"n":1}}\n'
    entries = dynamo.entries(dynamo.uri())
    assert [(e.version, e.complete) for e in entries] == [(0, True), (1, True)]


@EACH_AWS_CLIENT
def test_an_existing_commit_file_is_never_replaced(dynamo: DynamoSetup, aws_client: str) -> None:
    """An N.json whose entry TTL already removed: the HEAD of step 0 refuses the version."""
    table = create(dynamo)
    dc.write(table, batch(0, 0))
    dynamo.client.delete_item(TableName=dynamo.table, Key={
        "tablePath": {"S": dynamo.uri()}, "fileName": {"S": commit_name(1)}})
    # A writer that knows nothing of the table, a TTL later (as long as it takes TTL to remove
    # an entry: a younger N.json without its entry would be another mechanism's).
    stale = DynamoDBLogStore.open(dynamo.uri(), dynamo.options,
                                  clock=ManualClock(time.time() + 86_400))
    body = table.log_store.read_commit(1)
    with pytest.raises(VersionExistsError):
        stale.write_commit(1, b'{"commitInfo":{}}\n')
    assert table.log_store.read_commit(1) == body
    assert [e.version for e in dynamo.entries(dynamo.uri())] == [0]


def test_an_expired_latest_entry_is_not_trusted_for_the_latest_version(dynamo: DynamoSetup) -> None:
    """TTL removes expired entries in no particular order: if the newest entry is gone and an
    older one is expired but still there, the log (not DynamoDB) says what is latest."""
    table = create(dynamo)
    for i in range(3):
        dc.write(table, batch(0, i))
    key = {"tablePath": {"S": dynamo.uri()}}
    dynamo.client.delete_item(TableName=dynamo.table, Key={**key, "fileName": {"S": commit_name(3)}})
    dynamo.client.update_item(TableName=dynamo.table, Key={**key, "fileName": {"S": commit_name(2)}},
                              UpdateExpression="SET expireTime = :e",
                              ExpressionAttributeValues={":e": {"N": str(int(time.time()) - 10)}})
    reader = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    assert reader.version == 3
    behind = dc.DeltaTable(dynamo.uri(), version=1, storage_options=dynamo.options)
    assert [v for v, _ in behind.log_store.read_commits_after(1)] == [2, 3]
    # A writer that read version 1 loses at 2 and 3 and lands at 4.  Its clock is a TTL ahead:
    # TTL removes an entry only a TTL after its commit, and a commit younger than half the TTL
    # without an entry is another mechanism's (refused, see test_fleet_repair.py).
    late = DynamoDBLogStore.open(dynamo.uri(), dynamo.options,
                                 clock=ManualClock(start=time.time() + 86_400))
    r = dc.write(dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options, log_store=late),
                 batch(1, 0))
    assert r.version == 4
    assert rows(dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)) == sorted(
        [(0, 0), (0, 1), (0, 2), (1, 0)])


# --------------------------------------------------------------------------- repair


@pytest.mark.parametrize("step", ["after_write_temp", "after_put_entry", "after_copy"])
def test_a_stopped_writer_leaves_its_commit_complete_for_the_next_reader(
        dynamo: DynamoSetup, step: str) -> None:
    create(dynamo)
    version = append_stopped(dynamo, step)
    entries = dynamo.entries(dynamo.uri())
    store = open_log_store(dynamo.uri(), dynamo.options).store
    if step == "after_write_temp":
        # Stopped before its PutItem: nothing was committed, nothing needs repair.
        assert [e.version for e in entries] == [0]
        assert dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options).version == 0
        return
    assert [(e.version, e.complete) for e in entries] == [(0, True), (version, False)]
    assert store.exists(commit_path(version)) == (step == "after_copy")
    temp = store.get(entries[-1].temp_key)
    reader = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    assert reader.version == version
    assert rows(reader) == [(7, 0)]
    latest = dynamo.entries(dynamo.uri())[-1]
    assert latest.complete and latest.expire_time is not None
    # The repair completed the entry only once N.json held the commit and the temp was gone.
    assert not store.exists(latest.temp_key)
    assert store.get(commit_path(version)) == temp


@EACH_AWS_CLIENT
def test_the_next_writer_repairs_the_previous_commit(dynamo: DynamoSetup, aws_client: str) -> None:
    table = create(dynamo)
    dc.write(table, batch(0, 0))       # the writer knows version 1 is complete
    version = append_stopped(dynamo, "after_put_entry")
    assert version == 2
    r = dc.write(table, batch(0, 1))   # loses at 2, repairs 2 while catching up, commits 3
    assert r.version == 3
    assert [(e.version, e.complete) for e in dynamo.entries(dynamo.uri())] == [
        (0, True), (1, True), (2, True), (3, True)]
    assert rows(dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)) == [
        (0, 0), (0, 1), (7, 0)]


def test_step_one_repairs_an_incomplete_previous_entry(dynamo: DynamoSetup) -> None:
    """A writer that has not read the log since (it only writes N+1) completes N first."""
    create(dynamo)
    version = append_stopped(dynamo, "after_put_entry")
    fresh = open_log_store(dynamo.uri(), dynamo.options)
    assert isinstance(fresh, DynamoDBLogStore)
    temp = fresh.store.get(dynamo.entries(dynamo.uri())[version].temp_key)
    fresh.join_fleet()
    fresh.reset_requests()
    fresh.write_commit(version + 1, b'{"commitInfo":{}}\n')
    # Step 0 is a HEAD (the store knows nothing yet), step 1 a GetItem of entry N, which is
    # incomplete and so repaired (one UpdateItem) before the new entry is put and completed.
    assert fresh.requests == {"GetItem": 1, "PutItem": 1, "UpdateItem": 2}
    assert dynamo_complete(dynamo) == [(0, True), (version, True), (version + 1, True)]
    assert fresh.store.get(commit_path(version)) == temp


def test_a_version_anyone_was_told_exists_can_be_read(dynamo: DynamoSetup) -> None:
    create(dynamo)
    version = append_stopped(dynamo, "after_put_entry")
    ls = open_log_store(dynamo.uri(), dynamo.options)
    temp = ls.store.get(dynamo.entries(dynamo.uri())[-1].temp_key)
    assert ls.read_commit(version) == temp
    assert ls.store.exists(commit_path(version))
    assert dynamo.entries(dynamo.uri())[-1].complete


@EACH_AWS_CLIENT
def test_concurrent_repairs_are_benign(dynamo: DynamoSetup, aws_client: str) -> None:
    create(dynamo)
    version = append_stopped(dynamo, "after_put_entry")
    repairers = [open_log_store(dynamo.uri(), dynamo.options) for _ in range(4)]
    # Every repairer sees the entry incomplete, then they all repair one after another.
    entry = dynamo.entries(dynamo.uri())[-1]
    assert not entry.complete
    bodies = {ls._repair(entry) for ls in repairers}  # type: ignore[attr-defined]
    assert len(bodies) == 1
    assert dynamo.entries(dynamo.uri())[-1].complete
    assert dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options).version == version


def test_every_dynamodb_read_is_consistent(dynamo: DynamoSetup) -> None:
    """An eventually consistent read can miss the entry that decided a version: a writer would
    then claim a taken version as free of a previous commit, or a reader miss a commit.  So each
    GetItem and Query, by writers, readers, repairers and the status listing, asks for a
    consistent read."""
    reads: list[tuple[str, Any]] = []

    class Recording:
        """The store's client (light or botocore), its reads recorded."""

        def __init__(self, client: Any) -> None:
            self._client = client

        def __getattr__(self, name: str) -> Any:
            method = getattr(self._client, name)
            if name not in ("get_item", "query", "scan", "batch_get_item"):
                return method

            def call(**kwargs: Any) -> Any:
                reads.append((name, kwargs.get("ConsistentRead")))
                return method(**kwargs)

            return call

    table = create(dynamo)
    dc.write(table, batch(0, 0))
    append_stopped(dynamo, "after_put_entry")          # leaves an incomplete latest entry
    stores = [open_log_store(dynamo.uri(), dynamo.options) for _ in range(3)]
    for ls in stores:
        assert isinstance(ls, DynamoDBLogStore)
        ls._client = Recording(ls.client)  # type: ignore[assignment]
    reader, writer, lister = stores
    assert dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options, log_store=reader).version == 2
    w = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options, log_store=writer)
    assert dc.write(w, batch(1, 0)).version == 3
    assert isinstance(lister, DynamoDBLogStore)
    assert [e.version for e in lister.entries()] == [0, 1, 2, 3]
    assert lister.latest_entry() is not None and lister.get_entry(2) is not None
    assert {name for name, _ in reads} >= {"get_item", "query"}
    assert all(consistent is True for _, consistent in reads), reads


@EACH_AWS_CLIENT
def test_the_writer_finishing_after_a_reader_repaired_its_commit_succeeds(
        dynamo: DynamoSetup, aws_client: str) -> None:
    """The reader copies T(N) while the writer is between its PutItem and its copy; the
    writer's copy then finds N.json present with its own bytes, and the commit stands."""
    table = create(dynamo)
    reader = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    seen: list[int] = []

    def repair_now(name: str, version: int) -> None:
        if name == "after_put_entry":
            reader.update()
            seen.append(reader.version)

    ls = DynamoDBLogStore.open(dynamo.uri(), dynamo.options, hook=repair_now)
    writer = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options, log_store=ls)
    r = dc.write(writer, batch(3, 0))
    assert (r.version, r.attempts, seen) == (1, 1, [1])
    assert dynamo.entries(dynamo.uri())[-1].complete
    assert rows(dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)) == [(3, 0)]
    assert table.update() == 1


# --------------------------------------------------------------------------- checks of step 1


def test_a_complete_entry_without_its_commit_file_stops_the_next_writer(dynamo: DynamoSetup) -> None:
    table = create(dynamo)
    dc.write(table, batch(0, 0))
    state_cache.clear()  # the next writer is another process
    ls = open_log_store(dynamo.uri(), dynamo.options)
    ls.store.delete(commit_path(1))
    with pytest.raises(CorruptLogError, match=r"previous commit _delta_log/00000000000000000001.json "
                                              r"does not exist in the object store but DynamoDB table "
                                              r"\S+ has a complete entry for it.*"
                                              r"Restore that file.*roll the table back to "
                                              r"version 0 on this mechanism, delete its entry"):
        ls.write_commit(2, b'{"commitInfo":{}}\n')
    assert [e.version for e in dynamo.entries(dynamo.uri())] == [0, 1]   # nothing claimed


def test_old_entries_of_a_deleted_table_stop_its_re_creation(dynamo: DynamoSetup) -> None:
    table = create(dynamo)
    dc.write(table, batch(0, 0))
    s3 = boto3.client("s3", endpoint_url=dynamo.bucket.storage_options["AWS_ENDPOINT_URL"],
                      region_name="us-east-1")
    for obj in s3.list_objects_v2(Bucket=dynamo.bucket.name, Prefix="t/")["Contents"]:
        s3.delete_object(Bucket=dynamo.bucket.name, Key=obj["Key"])
    with pytest.raises(LogStoreError, match=r"old entries for table s3://\S+/t still exist in "
                                            r"DynamoDB table .*--drop-stale-entries"):
        create(dynamo)
    ls = open_log_store(dynamo.uri(), dynamo.options)
    assert isinstance(ls, DynamoDBLogStore)
    assert ls.drop_stale_entries() == 2
    t = create(dynamo)
    assert t.version == 0 and [e.version for e in dynamo.entries(dynamo.uri())] == [0]


def test_stale_entries_are_only_dropped_from_a_table_without_commits(dynamo: DynamoSetup) -> None:
    create(dynamo)
    ls = open_log_store(dynamo.uri(), dynamo.options)
    assert isinstance(ls, DynamoDBLogStore)
    with pytest.raises(LogStoreError, match=r"has 1 commit files .* not stale and are kept"):
        ls.drop_stale_entries()
    assert len(dynamo.entries(dynamo.uri())) == 1


def test_dropping_stale_entries_leaves_a_creation_in_flight(dynamo: DynamoSetup) -> None:
    """Stale entries are complete; an incomplete entry of version 0 without commit files is a
    creator between its claim and its copy (the table being re-created, perhaps after the
    stale entries were dropped once already).  Dropping it would let a second creator take
    version 0 beside the first, leaving a version 0 without its entry."""
    ls = stopped_writer(dynamo, "after_put_entry")
    with pytest.raises(Stop):
        dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=dynamo.options, log_store=ls)
    [entry] = dynamo.entries(dynamo.uri())
    assert (entry.version, entry.complete) == (0, False)
    cli = open_log_store(dynamo.uri(), dynamo.options)
    assert isinstance(cli, DynamoDBLogStore)
    assert cli.drop_stale_entries() == 0
    assert dynamo.entries(dynamo.uri()) == [entry]
    with pytest.raises(dc.TableExistsError):
        create(dynamo)
    assert dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options).version == 0


# --------------------------------------------------------------------------- coordination


def test_the_table_records_its_dynamodb_table_and_table_path(dynamo: DynamoSetup) -> None:
    table = create(dynamo)
    assert table.configuration[COORDINATION_KEY] == "dynamodb"
    assert table.configuration[TABLE_NAME_KEY] == dynamo.table
    assert table.configuration[TABLE_PATH_KEY] == dynamo.uri()


@pytest.mark.parametrize("change", ["conditional", "other-table", "s3a"])
def test_a_writer_coordinating_elsewhere_refuses_to_commit(dynamo: DynamoSetup, change: str) -> None:
    create(dynamo)
    if change == "conditional":
        options = dynamo.bucket.storage_options
        expect = r"deltacommit.coordination='dynamodb' but this writer is configured for 'conditional'"
    elif change == "other-table":
        other = new_log_table(dynamo.endpoint)
        options = {**dynamo.options, "DELTA_DYNAMO_TABLE_NAME": other}
        expect = (rf"deltacommit.coordination.dynamodbTable='{dynamo.table}' but this writer is "
                  rf"configured for '{other}'")
    else:
        options = {**dynamo.options, "DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME": "s3a"}
        expect = r"the fleet's entries use tablePath 's3://\S+' but this writer is configured for 's3a://"
    with pytest.raises(CoordinationMismatchError, match=expect):
        dc.write(dynamo.uri(), batch(0, 0), storage_options=options)
    assert dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options).version == 0


# --------------------------------------------------------------------------- throttling and lost answers


@pytest.fixture
def dynamodb_proxy(dynamo: DynamoSetup) -> Iterator[FaultInjectingProxy]:
    """A fault-injecting proxy in front of the test's DynamoDB (moto or dynalite)."""
    with FaultInjectingProxy(dynamo.endpoint) as p:
        yield p


@pytest.fixture
def s3_proxy(moto_server: MotoServer) -> Iterator[FaultInjectingProxy]:
    with FaultInjectingProxy(moto_server.endpoint) as p:
        yield p


def _proxied_log_store(dynamo: DynamoSetup, proxy: FaultInjectingProxy, clock: ManualClock,
                       attempts: int = 1) -> DynamoDBLogStore:
    """A log store whose DynamoDB requests pass the proxy; S3 goes straight to moto."""
    options = {**dynamo.options, "AWS_ENDPOINT_URL_DYNAMODB": proxy.endpoint,
               "DELTA_DYNAMO_MAX_ELAPSED_REQUEST_TIME": "30"}
    base = open_log_store(dynamo.uri(), options)
    assert isinstance(base, DynamoDBLogStore)
    # botocore's own retries (which sleep for real) are turned off or bounded: what is tested
    # is the log store's retry policy on the injected clock.
    client = boto3.client("dynamodb", endpoint_url=proxy.endpoint, region_name="us-east-1",
                          config=Config(retries={"mode": "standard", "total_max_attempts": attempts}))
    return DynamoDBLogStore(base.store, base.config, client=client, clock=clock, random=RandomSource(3))


def test_throttling_is_retried_with_backoff_on_the_injected_clock(
        dynamo: DynamoSetup, dynamodb_proxy: FaultInjectingProxy) -> None:
    create(dynamo)
    clock = ManualClock()
    ls = _proxied_log_store(dynamo, dynamodb_proxy, clock)
    ls.join_fleet()   # the table check and fleet key are done; only commit requests follow
    dynamodb_proxy.inject(Fault(status=400, code="ProvisionedThroughputExceededException", times=3))
    ls.reset_requests()
    start = clock.monotonic()
    ls.write_commit(1, b'{"commitInfo":{}}\n')
    assert dynamodb_proxy.pending_faults == 0
    assert ls.requests["GetItem"] + ls.requests["PutItem"] >= 4   # three throttled, then through
    assert clock.monotonic() > start
    assert dynamo_complete(dynamo) == [(0, True), (1, True)]


def dynamo_complete(dynamo: DynamoSetup) -> list[tuple[int, bool]]:
    return [(e.version, e.complete) for e in dynamo.entries(dynamo.uri())]


def test_throttling_for_too_long_is_reported_not_fatal(
        dynamo: DynamoSetup, dynamodb_proxy: FaultInjectingProxy) -> None:
    create(dynamo)
    clock = ManualClock()
    ls = _proxied_log_store(dynamo, dynamodb_proxy, clock)
    ls.latest_entry()
    dynamodb_proxy.inject(Fault(status=400, code="ThrottlingException", times=10_000))
    with pytest.raises(LogStoreError, match=r"was throttled \(ThrottlingException\) for 30\.\d s .* "
                                            r"PAY_PER_REQUEST"):
        ls.write_commit(1, b'{"commitInfo":{}}\n')
    dynamodb_proxy.clear()
    assert dynamo_complete(dynamo) == [(0, True)]


@EACH_AWS_CLIENT
def test_a_put_item_whose_answer_was_lost_is_recognised_as_ours(
        dynamo: DynamoSetup, dynamodb_proxy: FaultInjectingProxy, aws_client: str) -> None:
    """The PutItem reaches DynamoDB but its answer is a 500; botocore retries it, the retry's
    condition fails on our own entry, and the entry's tempPath shows the commit is ours."""
    table = create(dynamo)
    clock = ManualClock()
    ls = _proxied_log_store(dynamo, dynamodb_proxy, clock, attempts=3)
    writer = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options, log_store=ls)
    dc.write(writer, batch(0, 0))  # learns the table: the next commit starts with its PutItem
    dynamodb_proxy.inject(Fault(status=500, code="InternalServerError", forward=True, times=1))
    r = dc.write(writer, batch(0, 1))
    assert (r.version, r.attempts) == (2, 1)
    assert dynamodb_proxy.pending_faults == 0
    table.update()
    assert table.version == 2
    assert rows(table) == [(0, 0), (0, 1)]
    assert dynamo_complete(dynamo) == [(0, True), (1, True), (2, True)]


# --------------------------------------------------------------------------- entries read back


def test_entries_written_by_delta_rs_parse() -> None:
    item = {"tablePath": {"S": "s3://b/t"}, "fileName": {"S": commit_name(3)},
            "tempPath": {"S": "_commit_0b4c5d.json.tmp"}, "complete": {"S": "true"},
            "expireTime": {"N": "1795000000"}}
    entry = CommitEntry.from_item(item, "table x")
    assert (entry.version, entry.temp_key, entry.complete, entry.expire_time) == (
        3, "_delta_log/_commit_0b4c5d.json.tmp", True, 1795000000)
    assert CommitEntry.from_item(entry.to_item(), "x") == entry


@pytest.mark.parametrize("change, expect", [
    ({"complete": {"BOOL": True}}, r"not an S3DynamoDBLogStore entry"),
    ({"complete": {"S": "yes"}}, r"complete='yes'; expected the string true or false"),
    ({"fileName": {"S": "3.json"}}, r"does not name a commit file"),
    ({"tempPath": {"S": "../../elsewhere"}}, r"expected a path relative to _delta_log"),
])
def test_malformed_entries_are_named(change: dict[str, Any], expect: str) -> None:
    item = {"tablePath": {"S": "s3://b/t"}, "fileName": {"S": commit_name(3)},
            "tempPath": {"S": ".tmp/x"}, "complete": {"S": "true"}, **change}
    with pytest.raises(LogStoreError, match=expect):
        CommitEntry.from_item(item, "DynamoDB table delta_log")


def test_describe_names_the_dynamodb_table_and_key(dynamo: DynamoSetup) -> None:
    ls = open_log_store(dynamo.uri(), dynamo.options)
    facts = dict(ls.describe())
    assert facts["log store"] == "dynamodb"
    assert facts["dynamodb table"] == dynamo.table
    assert facts["tablePath"] == dynamo.uri()
    assert facts["dynamodb endpoint"] == dynamo.endpoint


def test_a_table_written_in_dynamodb_mode_reads_with_plain_options(dynamo: DynamoSetup) -> None:
    table = create(dynamo)
    dc.write(table, batch(0, 0))
    plain = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.bucket.storage_options)
    assert plain.version == 1 and rows(plain) == [(0, 0)]
    assert pa.Table.equals(plain.to_arrow(), table.to_arrow())


# --------------------------------------------------------------------------- after the entry


@pytest.mark.parametrize("failing", ["copy", "complete"])
def test_failures_after_the_entry_leave_the_commit_made(
        dynamo: DynamoSetup, dynamodb_proxy: FaultInjectingProxy, s3_proxy: FaultInjectingProxy,
        failing: str, caplog: pytest.LogCaptureFixture) -> None:
    """Once the entry exists the commit has happened (as in Spark): a failed copy or a failed
    completion is logged, the writer is told it committed, and the next reader finishes."""
    create(dynamo)
    options = {**dynamo.options, "AWS_ENDPOINT_URL": s3_proxy.endpoint,
               "AWS_ENDPOINT_URL_DYNAMODB": dynamodb_proxy.endpoint}

    def fail_next(name: str, version: int) -> None:
        # Requests are refused outright (403/400 are answers, not retried).
        if failing == "copy" and name == "after_put_entry":
            s3_proxy.inject(Fault(status=403, code="AccessDenied", method="PUT"))
        if failing == "complete" and name == "after_copy":
            dynamodb_proxy.inject(Fault(status=400, code="ValidationException", method="POST"))

    ls = DynamoDBLogStore.open(dynamo.uri(), options, hook=fail_next)
    writer = dc.DeltaTable(dynamo.uri(), storage_options=options, log_store=ls)
    with caplog.at_level("WARNING", logger="deltacommit.io.logstore.s3_dynamodb"):
        r = dc.write(writer, batch(5, 0))
    assert (r.version, r.attempts) == (1, 1)
    assert dynamodb_proxy.pending_faults == s3_proxy.pending_faults == 0
    expected = "copying it to" if failing == "copy" else "marking entry"
    assert any(expected in m for m in caplog.messages), caplog.messages
    assert dynamo_complete(dynamo) == [(0, True), (1, False)]
    assert ls.store.exists(commit_path(1)) == (failing == "complete")
    reader = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    assert reader.version == 1 and rows(reader) == [(5, 0)]
    assert dynamo_complete(dynamo) == [(0, True), (1, True)]


def test_a_claim_deleted_by_hand_and_retaken_is_a_lost_race(dynamo: DynamoSetup) -> None:
    """A writer stopped between its entry and its copy (a pause, a suspended VM) whose
    incomplete entry an operator deletes by hand, after which another writer takes the
    version: the stopped writer, resuming, finds N.json holding the other's commit and the
    entry naming the other's temp file.  Its claim was void, so it lost a race: it commits at
    the next version (its temp file deleted) instead of failing as if another mechanism wrote
    the table."""
    create(dynamo)
    # The other writer commits inside the first one's commit (its hook): taking turns with
    # it on this host would wait for the first to hand the turn on.
    policy = dc.CommitPolicy(host_turns=False)
    uri = dynamo.uri()
    theirs: list[int] = []

    def delete_and_retake(name: str, version: int) -> None:
        if name != "after_put_entry" or theirs:
            return
        dynamo.client.delete_item(TableName=dynamo.table, Key={
            "tablePath": {"S": uri}, "fileName": {"S": commit_name(version)}})
        other = dc.DeltaTable(uri, storage_options=dynamo.options, policy=policy)
        theirs.append(dc.write(other, batch(1, 0)).version)

    ls = DynamoDBLogStore.open(uri, dynamo.options, hook=delete_and_retake)
    mine = dc.DeltaTable(uri, storage_options=dynamo.options, log_store=ls, policy=policy)
    r = dc.write(mine, batch(0, 0))
    assert theirs == [1] and (r.version, r.attempts) == (2, 2)
    assert [(e.version, e.complete) for e in dynamo.entries(uri)] == [(0, True), (1, True), (2, True)]
    assert not [m.path for m in ls.store.list(f"{LOG_DIR}/.tmp/0")]  # no temp file left
    assert rows(dc.DeltaTable(uri, storage_options=dynamo.options)) == [(0, 0), (1, 0)]
