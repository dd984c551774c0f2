"""Helpers for the S3 tests: DynamoDB log tables, storage options, entries, writer processes.

Writer processes live here (not in a test module) so that both the S3 tests and the deltalake
compatibility tests start the same ones, by module name, in spawned or forkserver children.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import boto3
import pyarrow as pa
import pytest

from deltacommit.io.logstore.s3_dynamodb.admin import create_log_table
from deltacommit.io.logstore.s3_dynamodb.entry import CommitEntry
from deltacommit.testing import S3Bucket, unique_name

SCHEMA = pa.schema([("writer", pa.int64()), ("batch", pa.int64())])

#: Runs a test once on each AWS client (the ``aws_client`` fixture of tests/conftest.py): the
#: light client the suite uses by default and botocore's, which role and profile users get.
EACH_AWS_CLIENT = pytest.mark.parametrize("aws_client", ["light", "botocore"], indirect=True)
#: Runs a test on botocore's clients only (its light-client twin is the test without it).
BOTOCORE = pytest.mark.parametrize("aws_client", ["botocore"], indirect=True)

#: A journal line: (batch, version, attempts, sha256 of the commit file as written).
Acked = tuple[int, int, int, str]


def dynamodb_client(endpoint: str) -> Any:
    return boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")


def new_log_table(endpoint: str) -> str:
    """A fresh, ACTIVE S3DynamoDBLogStore table on ``endpoint``."""
    name = unique_name("delta-log")
    create_log_table(dynamodb_client(endpoint), name)
    return name


@dataclass(frozen=True)
class DynamoSetup:
    """A bucket on moto, a log table on moto or dynalite, and options that reach both."""

    bucket: S3Bucket
    backend: str       # "moto" | "dynalite"
    endpoint: str      # DynamoDB endpoint
    table: str

    @property
    def options(self) -> dict[str, str]:
        return dynamo_options(self.bucket, self.endpoint, self.table)

    @property
    def client(self) -> Any:
        return dynamodb_client(self.endpoint)

    def uri(self, name: str = "t") -> str:
        return f"{self.bucket.uri}/{name}"

    def items(self, table_path: str) -> list[dict[str, Any]]:
        """Every raw item of ``table_path``, oldest first."""
        return query_items(self.client, self.table, table_path)

    def entries(self, table_path: str) -> list[CommitEntry]:
        return [CommitEntry.from_item(i, self.table) for i in self.items(table_path)]

    def delete_entries(self, table_path: str) -> None:
        """Delete every entry of ``table_path``: TTL removing them a day after their commits,
        or an operator emptying the table by hand."""
        for item in self.items(table_path):
            self.client.delete_item(TableName=self.table, Key={
                "tablePath": item["tablePath"], "fileName": item["fileName"]})


def dynamo_options(bucket: S3Bucket, endpoint: str, table: str, **extra: str) -> dict[str, str]:
    """Options as a deltalake 1.6.0 user writes them for its DynamoDB log store."""
    return {**bucket.storage_options, "AWS_S3_LOCKING_PROVIDER": "dynamodb",
            "DELTA_DYNAMO_TABLE_NAME": table, "AWS_ENDPOINT_URL_DYNAMODB": endpoint, **extra}


def query_items(client: Any, table: str, table_path: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    args: dict[str, Any] = {"TableName": table, "KeyConditionExpression": "tablePath = :p",
                            "ExpressionAttributeValues": {":p": {"S": table_path}},
                            "ConsistentRead": True}
    while True:
        page = client.query(**args)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        args["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def batch(writer: int, b: int) -> pa.Table:
    return pa.table({"writer": [writer], "batch": [b]}, schema=SCHEMA)


# --------------------------------------------------------------------------- writer processes


def _report(out: Any, writer: int, work: Callable[[], list[Acked]]) -> None:
    try:
        out.put((writer, work()))
    except BaseException as e:
        out.put((writer, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def deltacommit_appender(uri: str, options: Mapping[str, str], writer: int, appends: int,
                         start: Any, out: Any, *, turns: bool = True) -> None:
    """Append ``appends`` one-row batches with deltacommit, journaling each acknowledged one.
    ``turns=False``: racing the other processes instead of taking turns (``host_turns``)."""
    import deltacommit as dc

    def work() -> list[Acked]:
        policy = dc.CommitPolicy(host_turns=turns, turn_patience=120.0)
        table = dc.DeltaTable(uri, storage_options=dict(options), policy=policy)
        start.wait()
        acked: list[Acked] = []
        for b in range(appends):
            r = dc.write(table, batch(writer, b))
            acked.append((b, r.version, r.attempts, r.digest))
        return acked

    _report(out, writer, work)


#: How often a deltalake writer re-submits a batch after giving up ("Failed to commit
#: transaction: 15"); a limit so a broken setup fails instead of spinning.
DELTALAKE_RESUBMITS = 200


def deltalake_appender(uri: str, options: Mapping[str, str], writer: int, appends: int,
                       start: Any, out: Any) -> None:
    """Append with deltalake (delta-rs), re-submitting a batch whose write failed.

    deltalake 1.6.0 gives up after 15 lost races ("Failed to commit transaction: 15"), and in
    DynamoDB mode its repair of an entry whose N.json a copying writer (Spark, deltacommit)
    has already written fails with "version N already exists" (it expects to move the temp
    file itself).  Both fail a read or a commit attempt before anything is committed, so the
    batch is submitted again, as deltalake's users must; the tests count rows to prove that no
    batch is lost or committed twice.
    """

    def work() -> list[Acked]:
        import deltalake
        from deltalake.exceptions import DeltaError

        # One table object, as a long-running deltalake writer keeps: each write then reads
        # only the commits it has not seen instead of loading the table again.
        table = deltalake.DeltaTable(uri, storage_options=dict(options))
        start.wait()
        acked: list[Acked] = []
        for b in range(appends):
            for attempt in range(1, DELTALAKE_RESUBMITS + 1):
                try:
                    deltalake.write_deltalake(table, batch(writer, b), mode="append")
                    break
                except DeltaError as e:
                    if not _deltalake_gave_up(str(e)):
                        raise
                    time.sleep(0.01 * min(attempt, 20))  # the peer has no backoff of its own
            else:
                raise RuntimeError(f"deltalake writer {writer} could not commit batch {b}")
            acked.append((b, -1, attempt, ""))
        return acked

    _report(out, writer, work)


def _deltalake_gave_up(message: str) -> bool:
    return "Failed to commit transaction" in message or (
        "version" in message and "already exists" in message)


def context(method: str) -> Any:
    """A multiprocessing context.  The fork server imports deltacommit, pyarrow and boto3 once,
    so each writer starts in milliseconds instead of re-importing them (spawn), and, unlike a
    fork of the test process, copies no threads.  deltalake needs spawn: its runtime must not
    be inherited."""
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(["deltacommit", "pyarrow.parquet", "boto3",
                                    "deltacommit.io.logstore.s3_dynamodb.log_store", __name__])
    return ctx


def run_writers(writers: list[tuple[Callable[..., None], str, Mapping[str, str], int, int]],
                *, method: str = "spawn", timeout: float = 600) -> dict[int, list[Acked]]:
    """Start every writer ``(target, uri, options, writer id, appends)`` in its own process,
    release them together, and return each one's journal; any failure fails the caller."""
    ctx = context(method)
    start = ctx.Barrier(len(writers))
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(uri, dict(options), w, n, start, out))
             for target, uri, options, w, n in writers]
    for p in procs:
        p.start()
    try:
        results = dict(out.get(timeout=timeout) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    failures = {w: r for w, r in results.items() if isinstance(r, str)}
    assert not failures, failures
    for p in procs:
        assert p.exitcode == 0
    return results


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- a crashing writer


CRASH_EXIT = 17


def crashing_commit(uri: str, options: Mapping[str, str], step: str, rows: int) -> None:
    """Append one batch with a log store that ends this process at ``step``, as a kill would."""
    import deltacommit as dc
    from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore

    def hook(name: str, version: int) -> None:
        if name == step:
            os._exit(CRASH_EXIT)

    ls = DynamoDBLogStore.open(uri, dict(options), hook=hook)
    table = dc.DeltaTable(uri, storage_options=dict(options), log_store=ls)
    dc.write(table, pa.table({"writer": [99] * rows, "batch": list(range(rows))}, schema=SCHEMA))
    os._exit(0)  # not reached when the hook fires


def run_crashing_commit(uri: str, options: Mapping[str, str], step: str, rows: int = 3) -> int:
    ctx = context("forkserver")
    p = ctx.Process(target=crashing_commit, args=(uri, dict(options), step, rows))
    p.start()
    p.join(timeout=120)
    assert p.exitcode is not None
    return p.exitcode
