"""The dynamo-commit log store: selection by ``conditional_put = dynamo:<table>``, the table-level
coordination check, and many processes committing to one table on an S3 without conditional
writes.
"""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.errors import CoordinationMismatchError, StorageConfigError
from deltacommit.io.logstore import COORDINATION_KEY, ConditionalPutLogStore, open_log_store
from deltacommit.io.logstore.dynamo_commit.leases import DynamoCommitStore
from deltacommit.io.logstore.dynamo_commit.log_store import LEASE_TABLE_KEY, DynamoCommitLogStore
from deltacommit.protocol.log.names import LOG_DIR
from deltacommit.testing import S3Bucket

from .conftest import lease_items

SCHEMA = pa.schema([("writer", pa.int64()), ("n", pa.int64())])
PROCESSES = 8
APPENDS = 25


def dynamo_options(bucket: S3Bucket, table: str, **extra: str) -> dict[str, str]:
    """DynamoCommit on an S3 store whose own conditional writes are off."""
    return {**bucket.storage_options, "conditional_put": f"dynamo:{table}",
            "DELTACOMMIT_S3_CONDITIONAL_WRITES": "false", **extra}


def test_conditional_put_dynamo_selects_the_lease_log_store(s3_bucket: S3Bucket) -> None:
    ls = open_log_store(f"{s3_bucket.uri}/t", {**s3_bucket.storage_options,
                                               "aws_conditional_put": " dynamo: locks : 1300"})
    assert isinstance(ls, DynamoCommitLogStore)
    assert isinstance(ls.store, DynamoCommitStore)
    assert (ls.lease_table, ls.store.timeout_ms, ls.store.max_clock_skew_rate) == ("locks", 1300, 3)
    assert ls.coordination_config() == {COORDINATION_KEY: "dynamo-commit", LEASE_TABLE_KEY: "locks"}
    assert dict(ls.describe())["lease timeout"] == "1300 ms (stale after 3.9 s)"
    default = open_log_store(f"{s3_bucket.uri}/t", {**s3_bucket.storage_options,
                                                    "conditional_put": "dynamo:locks"})
    assert isinstance(default, DynamoCommitLogStore) and default.store.timeout_ms == 20_000
    plain = open_log_store(f"{s3_bucket.uri}/t", s3_bucket.storage_options)
    assert isinstance(plain, ConditionalPutLogStore)


def test_the_log_store_hook_leaves_the_given_store_as_it_was() -> None:
    from deltacommit.io.storage.memory import MemoryStore
    from deltacommit.testing import unique_name

    steps: list[tuple[str, int]] = []
    store = DynamoCommitStore(MemoryStore(unique_name("hooked")), "leases", client=None)  # type: ignore[arg-type]
    ls = DynamoCommitLogStore(store, hook=lambda step, version: steps.append((step, version)))
    assert store.hook is None
    assert ls.store is not store and ls.store.hook is not None
    assert (ls.store.inner, ls.store.stats, ls.store.table_name) == (store.inner, store.stats, "leases")
    ls.store.hook("after_lock", "_delta_log/00000000000000000007.json")  # type: ignore[misc]
    ls.store.hook("after_lock", "_delta_log/_last_checkpoint")  # type: ignore[misc]
    assert steps == [("after_lock", 7)]
    assert DynamoCommitLogStore(store).store is store


def test_two_dynamodb_mechanisms_at_once_are_refused(s3_bucket: S3Bucket) -> None:
    with pytest.raises(StorageConfigError, match=r"both AWS_S3_LOCKING_PROVIDER=dynamodb .* and "
                       r"conditional_put=dynamo:locks:20000 .* choose one"):
        open_log_store(f"{s3_bucket.uri}/t", {**s3_bucket.storage_options,
                                              "AWS_S3_LOCKING_PROVIDER": "dynamodb",
                                              "conditional_put": "dynamo:locks"})


def test_a_dynamo_commit_table_refuses_a_conditional_put_writer_and_vice_versa(
        s3_bucket: S3Bucket, lease_table: str) -> None:
    """The documented limitation (guarded and unguarded writes to one path race) is enforced
    per table: the mechanism recorded at creation must match the writer's."""
    leased = f"{s3_bucket.uri}/leased"
    dc.DeltaTable.create(leased, SCHEMA, storage_options=dynamo_options(s3_bucket, lease_table))
    table = dc.DeltaTable(leased, storage_options=dynamo_options(s3_bucket, lease_table))
    assert table.configuration[COORDINATION_KEY] == "dynamo-commit"
    assert table.configuration[LEASE_TABLE_KEY] == lease_table
    with pytest.raises(CoordinationMismatchError,
                       match=r"records deltacommit.coordination='dynamo-commit' but this writer is "
                             r"configured for 'conditional'"):
        dc.write(leased, pa.table({"writer": [0], "n": [0]}), storage_options=s3_bucket.storage_options)

    plain = f"{s3_bucket.uri}/plain"
    dc.DeltaTable.create(plain, SCHEMA, storage_options=s3_bucket.storage_options)
    with pytest.raises(CoordinationMismatchError,
                       match=r"records deltacommit.coordination='conditional' but this writer is "
                             r"configured for 'dynamo-commit'"):
        dc.write(plain, pa.table({"writer": [0], "n": [0]}),
                 storage_options=dynamo_options(s3_bucket, lease_table))

    # Another lease table does not exclude this one's leases either.
    with pytest.raises(CoordinationMismatchError,
                       match=f"records {LEASE_TABLE_KEY}='{lease_table}' but this writer is "
                             "configured for 'other-leases'"):
        dc.write(leased, pa.table({"writer": [0], "n": [0]}),
                 storage_options=dynamo_options(s3_bucket, "other-leases"))
    assert dc.DeltaTable(leased, storage_options=dynamo_options(s3_bucket, lease_table)).version == 0
    assert dc.DeltaTable(plain, storage_options=s3_bucket.storage_options).version == 0


def test_commits_are_guarded_by_leases_on_a_store_without_conditional_writes(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    uri = f"{s3_bucket.uri}/t"
    options = dynamo_options(s3_bucket, lease_table)
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    for n in range(3):
        dc.write(uri, pa.table({"writer": [0], "n": [n]}), storage_options=options)
    leases = lease_items(moto_dynamodb, lease_table)
    assert sorted(path for path, _ in leases) == [f"t/{LOG_DIR}/{v:020d}.json" for v in range(4)]
    # The same writes without the leases are refused by the store itself.
    unguarded = {**s3_bucket.storage_options, "DELTACOMMIT_S3_CONDITIONAL_WRITES": "false"}
    with pytest.raises(StorageConfigError, match="conditional writes to S3 are turned off"):
        dc.DeltaTable.create(f"{s3_bucket.uri}/u", SCHEMA, storage_options=unguarded)


# --------------------------------------------------------------------------- many processes


def _appender(uri: str, options: dict[str, str], worker: int, start: Any, out: Any) -> None:
    try:
        table = dc.DeltaTable(uri, storage_options=options)
        start.wait()
        versions = []
        for n in range(APPENDS):
            result = dc.write(table, pa.table({"writer": [worker], "n": [n]}, schema=SCHEMA))
            versions.append(result.version)
        out.put((worker, versions))
    except BaseException as e:
        out.put((worker, f"{type(e).__name__}: {e}"))


def test_eight_processes_append_without_losing_a_commit(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    uri = f"{s3_bucket.uri}/t"
    options = dynamo_options(s3_bucket, lease_table)
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["deltacommit", "pyarrow.parquet", "boto3"])
    start = ctx.Barrier(PROCESSES)
    out = ctx.Queue()
    procs = [ctx.Process(target=_appender, args=(uri, options, w, start, out))
             for w in range(PROCESSES)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    failures = {w: r for w, r in results.items() if isinstance(r, str)}
    assert not failures, failures

    versions = Counter(v for r in results.values() for v in r)
    assert sorted(versions) == list(range(1, PROCESSES * APPENDS + 1))   # each its own version
    table = dc.DeltaTable(uri, storage_options=options)
    assert table.version == PROCESSES * APPENDS
    rows = Counter(zip(*table.to_arrow().to_pydict().values(), strict=True))
    assert rows == Counter((w, n) for w in range(PROCESSES) for n in range(APPENDS))
    # Every commit, and every checkpoint (each 10 versions), was created under a lease.
    leased = {path for path, _ in lease_items(moto_dynamodb, lease_table)}
    assert {f"t/{LOG_DIR}/{v:020d}.json" for v in range(PROCESSES * APPENDS + 1)} <= leased
    assert f"t/{LOG_DIR}/{PROCESSES * APPENDS:020d}.checkpoint.parquet" in leased
