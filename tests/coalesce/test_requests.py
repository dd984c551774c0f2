"""Requests per uncontended commit, counted on the wire (every HTTP request boto3 sends).

A writer that already holds the table's current snapshot (the usual case after its first
commit) pays only what its log store's protocol requires for a new version:

============  ====  ====================================================================
log store     reqs  requests
============  ====  ====================================================================
conditional   1     ``PutObject N.json`` with ``If-None-Match: *``
dynamodb      5     ``PutObject`` temp file, ``PutItem`` entry (the linearisation point),
                    ``PutObject N.json`` (the bytes are in memory: no copy), ``DeleteObject``
                    temp file (so a delta-rs repairer never finds both), ``UpdateItem``
                    complete
dynamo-commit 3     ``HeadObject N.json`` (the precondition), ``PutItem`` lease, ``PutObject``
============  ====  ====================================================================

Appending data costs one more ``PutObject`` per data file, written before the commit.  Group
commit keeps these costs per version, not per transaction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pyarrow as pa

import deltacommit as dc
from deltacommit.engine.group.threads import GroupCommitPolicy
from deltacommit.engine.snapshot import state_cache
from deltacommit.io.logstore.dynamo_commit.leases import create_lease_table
from deltacommit.io.logstore.dynamo_commit.log_store import DynamoCommitLogStore
from deltacommit.io.logstore.s3_dynamodb.admin import create_log_table
from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore
from deltacommit.io.storage.s3 import S3Store
from deltacommit.testing import MotoServer, S3Bucket, unique_name

from .common import SCHEMA, data_files, rows
from .test_conflicts import submit_in_order


@contextmanager
def requests(table: dc.DeltaTable) -> Iterator[Counter[str]]:
    """Count the requests sent while the block runs, by ``service.Operation``: S3 requests by
    the store's own counter (every HTTP request, writes under a DynamoDB lease included),
    DynamoDB requests as the client sends them (the light client or botocore's)."""
    store = table.log_store.store
    inner = getattr(store, "inner", store)
    assert isinstance(inner, S3Store)
    dynamodb = inner.config.dynamodb_client()
    counts: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        _, service, operation = event_name.split(".", 2)
        counts[f"{service}.{operation}"] += 1

    def count_light(service: str, operation: str) -> None:
        counts[f"{service}.{operation}"] += 1

    light = getattr(dynamodb, "light", False)   # deltacommit.io.aws.light: no botocore events
    before = Counter(inner.requests)
    if light:
        dynamodb.on_request(count_light)
    else:
        dynamodb.meta.events.register("before-send", count, unique_id="deltacommit-request-count")
    try:
        yield counts
    finally:
        if light:
            dynamodb.off_request(count_light)
        else:
            dynamodb.meta.events.unregister("before-send", unique_id="deltacommit-request-count")
        counts.update({f"s3.{k}": n for k, n in (Counter(inner.requests) - before).items()})


def warm_table(uri: str, options: dict[str, str], **kw: Any) -> dc.DeltaTable:
    """A table this process has created and committed to once (its knowledge established)."""
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    table = dc.DeltaTable(uri, storage_options=options, **kw)
    dc.write(table, rows("x", [0]))
    return table


def commit_once(table: dc.DeltaTable, ident: int) -> Counter[str]:
    adds = data_files(table, "x", [ident])
    txn = table.transaction()
    txn.add(adds)
    with requests(table) as counts:
        txn.commit()
    return counts


def test_conditional_put_commits_with_one_request(s3_bucket: S3Bucket) -> None:
    table = warm_table(f"{s3_bucket.uri}/t", s3_bucket.storage_options)
    assert commit_once(table, 1) == {"s3.PutObject": 1}
    with requests(table) as counts:
        dc.write(table, rows("x", [2]))
    assert counts == {"s3.PutObject": 2}  # the data file, then the commit

    # Two transactions from one snapshot on one table object: the second learns of the first
    # from the table (no lost race, no read), checks it and commits at the next version.
    first, second = table.transaction(), table.transaction()
    first.add(data_files(table, "x", [3]))
    second.add(data_files(table, "x", [4]))
    first.commit()
    with requests(table) as counts:
        result = second.commit()
    assert counts == {"s3.PutObject": 1}
    assert result.winners == (first.result.version,)  # type: ignore[union-attr]
    assert table.version < 9  # no checkpoint was due in any of these


def test_group_commit_costs_the_same_per_version(s3_bucket: S3Bucket) -> None:
    table = warm_table(f"{s3_bucket.uri}/t", s3_bucket.storage_options, group_commit=True)
    assert commit_once(table, 1) == {"s3.PutObject": 1}
    with requests(table) as counts:
        r = dc.append(table, rows("x", [2, 3]))
    assert counts == {"s3.PutObject": 2} and r.num_files == 1


def test_dynamodb_log_store_commits_with_five_requests(s3_bucket: S3Bucket,
                                                       moto_server: MotoServer) -> None:
    name = unique_name("delta-log")
    create_log_table(boto3.client("dynamodb", endpoint_url=moto_server.endpoint,
                                  region_name="us-east-1"), name)
    options = {**s3_bucket.storage_options, "AWS_S3_LOCKING_PROVIDER": "dynamodb",
               "DELTA_DYNAMO_TABLE_NAME": name, "AWS_ENDPOINT_URL_DYNAMODB": moto_server.endpoint}
    table = warm_table(f"{s3_bucket.uri}/t", options)
    assert isinstance(table.log_store, DynamoDBLogStore)
    assert commit_once(table, 1) == {"s3.PutObject": 2, "dynamodb.PutItem": 1,
                                     "s3.DeleteObject": 1, "dynamodb.UpdateItem": 1}
    assert commit_once(table, 2) == {"s3.PutObject": 2, "dynamodb.PutItem": 1,
                                     "s3.DeleteObject": 1, "dynamodb.UpdateItem": 1}


def test_dynamodb_fleet_key_discovery_costs_one_query_per_spelling_once(
        s3_bucket: S3Bucket, moto_server: MotoServer) -> None:
    """Looking for the fleet's ``tablePath`` is one Limit-1 Query per spelling (s3, s3a, s3n),
    once per process (its log store objects of the table share what they find): later commits
    and log store objects send none (see above)."""
    name = unique_name("delta-log")
    create_log_table(boto3.client("dynamodb", endpoint_url=moto_server.endpoint,
                                  region_name="us-east-1"), name)
    options = {**s3_bucket.storage_options, "AWS_S3_LOCKING_PROVIDER": "dynamodb",
               "DELTA_DYNAMO_TABLE_NAME": name, "AWS_ENDPOINT_URL_DYNAMODB": moto_server.endpoint}
    dc.DeltaTable.create(f"{s3_bucket.uri}/t", SCHEMA, storage_options=options)
    log_store = DynamoDBLogStore.open(f"{s3_bucket.uri}/t", options)
    log_store.join_fleet()  # the DescribeTable check of a new process, if any, happens here
    state_cache.clear()  # a new process
    fresh = DynamoDBLogStore.open(f"{s3_bucket.uri}/t", options)
    fresh.join_fleet()
    assert fresh.requests == {"Query": 3}
    again = DynamoDBLogStore.open(f"{s3_bucket.uri}/t", options)
    again.join_fleet()
    assert again.requests == {}
    fresh.join_fleet()
    assert fresh.requests == {"Query": 3}


def test_dynamo_commit_log_store_commits_with_three_requests(s3_bucket: S3Bucket,
                                                             moto_server: MotoServer) -> None:
    lease = unique_name("leases")
    create_lease_table(boto3.client("dynamodb", endpoint_url=moto_server.endpoint,
                                    region_name="us-east-1"), lease)
    options = {**s3_bucket.storage_options, "conditional_put": f"dynamo:{lease}",
               "DELTACOMMIT_S3_CONDITIONAL_WRITES": "false"}
    table = warm_table(f"{s3_bucket.uri}/t", options)
    assert isinstance(table.log_store, DynamoCommitLogStore)
    assert commit_once(table, 1) == {"s3.HeadObject": 1, "dynamodb.PutItem": 1,
                                     "s3.PutObject": 1}


def two_parts(ident: int) -> pa.Table:
    return pa.concat_tables([rows("a", [ident]), rows("b", [ident + 100])])


def test_files_of_a_group_written_again_are_deleted_in_one_request(
        s3_bucket: S3Bucket, moto_s3_client: Any) -> None:
    uri, options = f"{s3_bucket.uri}/t", s3_bucket.storage_options
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], storage_options=options)
    table = dc.DeltaTable(uri, storage_options=options,
                          group_commit=GroupCommitPolicy(max_members=2, max_wait=60))
    other = dc.DeltaTable(uri, storage_options=options)
    dc.write(other, rows("c", [40]), app_id="app", app_version=5)  # unknown to `table`
    with requests(table) as counts:
        r_dup, r_new = submit_in_order(table, [
            lambda: dc.append(table, two_parts(41), app_id="app", app_version=5),
            lambda: dc.append(table, two_parts(42), app_id="another", app_version=1)])
    # The group's leader wrote one file per partition (a and b) holding both appends' rows;
    # the first append turned out to be recorded already, so both files were deleted (one
    # request) and written again with the second append's rows.
    assert isinstance(r_dup, dc.WriteResult) and r_dup.skipped
    assert isinstance(r_new, dc.WriteResult) and not r_new.skipped
    assert counts["s3.DeleteObjects"] == 1 and counts["s3.DeleteObject"] == 0
    listed = moto_s3_client.list_objects_v2(Bucket=s3_bucket.name, Prefix="t/p=")
    on_s3 = {o["Key"][len("t/"):] for o in listed.get("Contents", [])}
    assert on_s3 == {f.path for f in dc.DeltaTable(uri, storage_options=options).files()}
    assert sorted(dc.DeltaTable(uri, storage_options=options).to_arrow()["id"].to_pylist()) \
        == [40, 42, 142]
