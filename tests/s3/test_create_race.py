"""Racing creators of one S3 table: one table, a clear TableExistsError to every loser.

Version 0 is claimed through the commit loop like any version, so on S3 it is decided by the
log store: a conditional put (``If-None-Match``) on moto, or Spark's DynamoDB protocol (entry
0 put under a condition) on moto and on dynalite.  Racers are threads released by one
barrier, each with its own log store and clients, as separate writers would be.
"""

from __future__ import annotations

import pytest

import deltacommit as dc
from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore
from deltacommit.protocol.log.names import commit_path
from deltacommit.testing import S3Bucket
from tests.create_race import check_one_table, race

from .helpers import SCHEMA, DynamoSetup

RACERS = 6

turns = pytest.mark.parametrize("turns", [True, False], ids=["turns", "racing"])


@turns
def test_conditional_put_racing_creators(s3_bucket: S3Bucket, turns: bool) -> None:
    uri = f"{s3_bucket.uri}/t"
    options = s3_bucket.storage_options
    policy = dc.CommitPolicy(host_turns=turns)
    won, lost = race(RACERS, lambda i: dc.DeltaTable.create(
        uri, SCHEMA, storage_options=options, description=f"racer {i}", policy=policy))
    check_one_table(uri, won, lost, RACERS, options)
    table = dc.DeltaTable(uri, storage_options=options)
    assert table.configuration["deltacommit.coordination"] == "conditional"
    assert [f.version for f in table.log_store.list_log(0)] == [0]


@turns
def test_dynamodb_racing_creators(dynamo: DynamoSetup, turns: bool) -> None:
    uri = dynamo.uri()
    policy = dc.CommitPolicy(host_turns=turns)
    won, lost = race(RACERS, lambda i: dc.DeltaTable.create(
        uri, SCHEMA, storage_options=dynamo.options, description=f"racer {i}", policy=policy))
    check_one_table(uri, won, lost, RACERS, dynamo.options)
    table = dc.DeltaTable(uri, storage_options=dynamo.options)
    ls = table.log_store
    assert isinstance(ls, DynamoDBLogStore)
    # One entry, complete, naming the one commit file; no loser's temp file is named by it.
    [entry] = dynamo.entries(ls.table_path)
    assert (entry.version, entry.complete) == (0, True)
    assert ls.store.exists(commit_path(0))
    assert [f.version for f in ls.list_log(0)] == [0]
