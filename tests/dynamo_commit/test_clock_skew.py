"""Leases and entry expiry when the writers' clocks disagree.

DynamoCommit: a waiter decides a holder is dead after ``timeout x max_clock_skew_rate`` on its
OWN clock.  While the waiter's clock runs at most ``max_clock_skew_rate`` times faster than the
holder's, that is never before the holder's lease has really ended, so a holder that writes
within its lease always wins and the waiter never reclaims.  The waiter's clock here is a
manual clock running ``rate`` times faster than real time: the holder's write, at a real time
within its lease, lands at ``real x rate`` on the waiter's clock.

Spark's protocol: ``expireTime`` comes from the writer's wall clock, so a skewed clock moves
when DynamoDB's TTL deletes a COMPLETE entry; an incomplete entry never has one, so no skew can
make TTL delete an entry a reader still needs to repair a commit.
"""

from __future__ import annotations

from typing import Any

import pytest

import deltacommit as dc
from deltacommit.errors import ObjectExistsError
from deltacommit.io.logstore import open_log_store
from deltacommit.io.logstore.dynamo_commit.leases import CONDITION_ACQUIRE
from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore
from deltacommit.io.storage.faults import SimulatedCrash, StepFaults
from deltacommit.runtime.clock import ManualClock
from deltacommit.testing import MotoServer, S3Bucket

from ..s3.helpers import SCHEMA, batch, dynamo_options, new_log_table, query_items
from .conftest import Recorder, ScriptedClock, guarded, lease_items

KEY = "_delta_log/00000000000000000007.json"


@pytest.mark.parametrize("rate", [1.0, 2.0, 2.9])
def test_a_fast_clocked_waiter_never_reclaims_a_lease_its_holder_is_still_within(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any, rate: float) -> None:
    holder = guarded(s3_bucket, lease_table, moto_dynamodb, timeout_ms=2000)
    assert holder.take_lease(KEY) is not None
    clock = ScriptedClock()
    ddb = Recorder(moto_dynamodb, clock)
    waiter = guarded(s3_bucket, lease_table, ddb, clock=clock, max_clock_skew_rate=3)
    # The holder writes 1.95 s (real) into its 2 s lease; the waiter's clock reads that as
    # 1.95 x rate seconds, still short of the 2 s x 3 it waits before reclaiming.
    clock.at(1.95 * rate, lambda: holder.inner.put(KEY, b"holder's commit"))

    with pytest.raises(ObjectExistsError):
        waiter.put_if_absent(KEY, b"waiter's commit")

    assert [c.condition for c in ddb.calls] == [CONDITION_ACQUIRE]  # never reclaimed
    assert waiter.get(KEY) == b"holder's commit"
    item = lease_items(moto_dynamodb, lease_table)[(f"t/{KEY}", "*")]
    assert item["generation"] == {"N": "0"}


@pytest.mark.parametrize("skew_days", [-3.0, 0.0, 3.0])
def test_expire_time_follows_the_writers_clock_and_only_complete_entries_have_one(
        s3_bucket: S3Bucket, moto_server: MotoServer, skew_days: float) -> None:
    options = dynamo_options(s3_bucket, moto_server.endpoint, new_log_table(moto_server.endpoint))
    uri = f"{s3_bucket.uri}/skew"
    clock = ManualClock(start=1_800_000_000.0, skew=skew_days * 86_400)
    base = open_log_store(uri, options)
    assert isinstance(base, DynamoDBLogStore)
    ls = DynamoDBLogStore(base.store, base.config, clock=clock)
    table = dc.DeltaTable.create(uri, SCHEMA, log_store=ls, clock=clock)
    dc.write(table, batch(0, 0))
    # A writer with the same skewed clock stops right after its PutItem: an incomplete entry.
    steps = StepFaults()
    steps.crash("after_put_entry")
    crashing = DynamoDBLogStore(base.store, base.config, clock=clock, hook=steps)
    with pytest.raises(SimulatedCrash):
        dc.write(dc.DeltaTable(uri, log_store=crashing, clock=clock), batch(1, 0))

    items = {int(i["fileName"]["S"][:20]): i for i in query_items(
        moto_server_client(moto_server), options["DELTA_DYNAMO_TABLE_NAME"], uri)}
    assert sorted(items) == [0, 1, 2]
    for v in (0, 1):
        assert items[v]["complete"] == {"S": "true"}
        assert int(items[v]["expireTime"]["N"]) == int(clock.time()) + 86_400
    assert items[2]["complete"] == {"S": "false"}
    assert "expireTime" not in items[2]
    # The next writer completes it, and only then does it get an expireTime.
    dc.write(dc.DeltaTable(uri, log_store=ls, clock=clock), batch(2, 0))
    repaired = query_items(moto_server_client(moto_server), options["DELTA_DYNAMO_TABLE_NAME"],
                           uri)[2]
    assert repaired["complete"] == {"S": "true"} and "expireTime" in repaired


def moto_server_client(moto: MotoServer) -> Any:
    import boto3

    return boto3.client("dynamodb", endpoint_url=moto.endpoint, region_name="us-east-1")
