"""deltacommit and deltalake (delta-rs) 1.6.0 writing the same S3 tables.

Two fleets, one per mechanism deltalake 1.6.0 has: its DynamoDB log store (Spark's
S3DynamoDBLogStore protocol) and its default conditional put (``If-None-Match: *``).  In each,
two deltacommit processes and two deltalake processes append 25 batches each at once; the
table must end at version 100 with every batch exactly once, readable by both libraries.

deltalake gives up a write after 15 lost races ("Failed to commit transaction: 15") and, in
DynamoDB mode, fails a read whose repair finds N.json already copied ("version N already
exists"); its processes then submit the batch again, as its users must (see
``tests.s3.helpers.deltalake_appender``).  Nothing was committed by a failed write, so
re-submitting cannot duplicate a batch, and the test counts rows to prove it.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from typing import Any

import deltalake
import pytest

import deltacommit as dc
from deltacommit.io.logstore import open_log_store
from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore
from deltacommit.protocol.log.names import LOG_DIR, commit_path
from deltacommit.testing import Dynalite, MotoServer, S3Bucket
from tests.s3.helpers import (
    SCHEMA,
    DynamoSetup,
    batch,
    deltacommit_appender,
    deltalake_appender,
    new_log_table,
    run_writers,
)
from tests.s3.test_dynamodb_log_store import append_stopped

APPENDS = 25


@pytest.fixture(params=["moto", "dynalite"])
def dynamo(request: pytest.FixtureRequest, s3_bucket: S3Bucket, moto_server: MotoServer) -> DynamoSetup:
    if request.param == "moto":
        endpoint = moto_server.endpoint
    else:
        server: Dynalite = request.getfixturevalue("dynalite_server")
        endpoint = server.endpoint
    return DynamoSetup(s3_bucket, request.param, endpoint, new_log_table(endpoint))


def _pairs(data: Any) -> Counter[tuple[int, int]]:
    return Counter(zip(data.column("writer").to_pylist(), data.column("batch").to_pylist(), strict=True))


def _mixed_fleet(uri: str, options: dict[str, str]) -> None:
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    writers = [(deltacommit_appender, uri, options, 0, APPENDS),
               (deltalake_appender, uri, options, 1, APPENDS),
               (deltacommit_appender, uri, options, 2, APPENDS),
               (deltalake_appender, uri, options, 3, APPENDS)]
    journals = run_writers(writers, method="spawn")
    total = 4 * APPENDS
    expected = Counter({(w, b): 1 for w in range(4) for b in range(APPENDS)})

    ours = dc.DeltaTable(uri, storage_options=options)
    assert ours.version == total
    assert _pairs(ours.to_arrow()) == expected
    theirs = deltalake.DeltaTable(uri, storage_options=options)
    assert theirs.version() == total
    assert _pairs(theirs.to_pyarrow_dataset().to_table()) == expected
    # deltacommit's acknowledged commits each own a version, none replaced.
    store = ours.log_store.store
    ours_versions = [v for w in (0, 2) for _, v, _, _ in journals[w]]
    assert len(set(ours_versions)) == 2 * APPENDS
    for w in (0, 2):
        for _, v, _, digest in journals[w]:
            assert hashlib.sha256(store.get(commit_path(v))).hexdigest() == digest


def test_mixed_fleet_through_dynamodb(dynamo: DynamoSetup) -> None:
    uri = dynamo.uri()
    _mixed_fleet(uri, dynamo.options)
    entries = dynamo.entries(uri)
    assert [e.version for e in entries] == list(range(4 * APPENDS + 1))
    assert [e.version for e in entries if not e.complete] == []
    kinds = Counter("deltalake" if e.temp_path.startswith("_commit_") else "deltacommit" for e in entries)
    assert kinds["deltalake"] >= APPENDS * 2 and kinds["deltacommit"] >= APPENDS * 2


def test_mixed_fleet_with_conditional_put(any_s3_bucket: S3Bucket) -> None:
    """On each S3 implementation: the fleet excludes itself only through the server's
    ``If-None-Match``."""
    _mixed_fleet(f"{any_s3_bucket.uri}/t", any_s3_bucket.storage_options)


# --------------------------------------------------------------------------- one write at a time


def test_each_reads_and_extends_the_others_dynamodb_entries(dynamo: DynamoSetup) -> None:
    uri = dynamo.uri()
    deltalake.write_deltalake(uri, batch(0, 0), storage_options=dynamo.options)
    deltalake.write_deltalake(uri, batch(0, 1), mode="append", storage_options=dynamo.options)
    ours = dc.DeltaTable(uri, storage_options=dynamo.options)
    assert ours.version == 1
    assert dc.write(ours, batch(1, 0)).version == 2
    theirs = deltalake.DeltaTable(uri, storage_options=dynamo.options)
    assert theirs.version() == 2
    deltalake.write_deltalake(uri, batch(0, 2), mode="append", storage_options=dynamo.options)
    assert dc.write(ours, batch(1, 1)).version == 4
    entries = dynamo.entries(uri)
    assert [(e.version, e.complete) for e in entries] == [(v, True) for v in range(5)]
    assert [e.temp_path.startswith("_commit_") for e in entries] == [True, True, False, True, False]
    expected = Counter({(0, 0): 1, (0, 1): 1, (0, 2): 1, (1, 0): 1, (1, 1): 1})
    assert _pairs(deltalake.DeltaTable(uri, storage_options=dynamo.options)
                  .to_pyarrow_dataset().to_table()) == expected
    assert _pairs(dc.DeltaTable(uri, storage_options=dynamo.options).to_arrow()) == expected


def test_deltalake_completes_a_commit_deltacommit_left_incomplete(dynamo: DynamoSetup) -> None:
    uri = dynamo.uri()
    dc.DeltaTable.create(uri, SCHEMA, storage_options=dynamo.options)
    version = append_stopped(dynamo, "after_put_entry")
    assert not dynamo.entries(uri)[-1].complete
    theirs = deltalake.DeltaTable(uri, storage_options=dynamo.options)
    assert theirs.version() == version
    assert _pairs(theirs.to_pyarrow_dataset().to_table()) == Counter({(7, 0): 1})
    assert dynamo.entries(uri)[-1].complete
    ls = open_log_store(uri, dynamo.options)
    assert ls.store.exists(commit_path(version))


def test_deltacommit_completes_a_commit_deltalake_left_incomplete(dynamo: DynamoSetup) -> None:
    """An entry as delta-rs writes it (``_commit_<uuid>.json.tmp`` beside the commits), left
    incomplete as a delta-rs writer killed after its PutItem leaves it."""
    uri = dynamo.uri()
    deltalake.write_deltalake(uri, batch(0, 0), storage_options=dynamo.options)
    deltalake.write_deltalake(uri, batch(0, 1), mode="append", storage_options=dynamo.options)
    ls = open_log_store(uri, dynamo.options)
    assert isinstance(ls, DynamoDBLogStore)
    body = ls.store.get(commit_path(1))
    temp = f"_commit_{uuid.uuid4()}.json.tmp"
    ls.store.put(f"{LOG_DIR}/{temp}", body)
    dynamo.client.put_item(TableName=dynamo.table, Item={
        "tablePath": {"S": uri}, "fileName": {"S": "00000000000000000002.json"},
        "tempPath": {"S": temp}, "complete": {"S": "false"}})
    ours = dc.DeltaTable(uri, storage_options=dynamo.options)
    assert ours.version == 2
    assert ls.store.get(commit_path(2)) == body
    assert dynamo.entries(uri)[-1].complete
    # Moved as delta-rs moves it, so a delta-rs writer still finishing finds it done.
    assert not ls.store.exists(f"{LOG_DIR}/{temp}")
    assert deltalake.DeltaTable(uri, storage_options=dynamo.options).version() == 2
