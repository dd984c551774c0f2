"""Tables that record no commit mechanism (created by Spark or delta-rs).

Spark's S3DynamoDBLogStore leaves its temp files in ``_delta_log/.tmp/``: a conditional-put
writer that finds one on a table recording no mechanism refuses, since it would not exclude
those writers.  The operator settles it by pinning the table; a table with no such signs is
written as usual, at the cost of one LIST per table object.
"""

from __future__ import annotations

import deltalake
import pytest

import deltacommit as dc
from deltacommit.errors import CoordinationMismatchError
from deltacommit.ops.coordination import recorded_coordination, set_coordination
from deltacommit.testing import MotoServer, S3Bucket

from ..s3.helpers import batch, dynamo_options, new_log_table


def test_conditional_writer_refuses_a_table_a_dynamodb_fleet_writes_until_it_is_pinned(
        s3_bucket: S3Bucket, moto_server: MotoServer) -> None:
    uri = f"{s3_bucket.uri}/spark"
    dyn = dynamo_options(s3_bucket, moto_server.endpoint, new_log_table(moto_server.endpoint))
    s3 = dict(s3_bucket.storage_options)
    deltalake.write_deltalake(uri, batch(0, 0), storage_options=dyn)  # records nothing
    # A commit through Spark's protocol: its temp file is gone, its marker stays.
    dc.write(uri, batch(0, 1), storage_options=dyn)
    table = dc.DeltaTable(uri, storage_options=s3)
    assert recorded_coordination(table.configuration) == {}
    with pytest.raises(CoordinationMismatchError) as e:
        dc.write(table, batch(1, 0))
    message = str(e.value)
    assert uri in message and "records no commit mechanism" in message
    assert "Spark's S3DynamoDBLogStore protocol (marker _delta_log/.tmp/_deltacommit_dynamodb" \
        in message
    assert "deltacommit coordination set" in message
    assert dc.DeltaTable(uri, storage_options=s3).version == 1  # nothing committed

    # Every writer has moved: pin the table to conditional writes.
    assert set_coordination(uri, storage_options=s3, new_storage_options=s3) is not None
    dc.write(dc.DeltaTable(uri, storage_options=s3), batch(1, 0))
    with pytest.raises(CoordinationMismatchError, match=r"records deltacommit\.coordination="):
        dc.write(uri, batch(2, 0), storage_options=dyn)


def test_an_unpinned_table_without_signs_of_dynamodb_is_written(s3_bucket: S3Bucket) -> None:
    uri = f"{s3_bucket.uri}/plain"
    s3 = dict(s3_bucket.storage_options)
    deltalake.write_deltalake(uri, batch(0, 0), storage_options=s3)
    deltalake.write_deltalake(uri, batch(0, 1), mode="append", storage_options=s3)
    table = dc.DeltaTable(uri, storage_options=s3)
    store = table.log_store.store
    store.reset_requests()  # type: ignore[attr-defined]
    dc.write(table, batch(1, 0))
    looks = store.requests.get("ListObjectsV2", 0)  # type: ignore[attr-defined]
    dc.write(table, batch(1, 1))
    assert store.requests.get("ListObjectsV2", 0) == looks  # type: ignore[attr-defined]
    assert looks <= 1  # one look for this table object (the write itself lists nothing)
    assert table.version == 3


def test_a_dynamodb_writer_refuses_a_table_conditional_writers_are_writing(
        s3_bucket: S3Bucket, moto_server: MotoServer) -> None:
    """Recent commits that no DynamoDB entry explains (under any tablePath spelling) were made
    through S3 conditional writes, which do not exclude Spark's protocol: refused, not joined."""
    uri = f"{s3_bucket.uri}/cond"
    s3 = dict(s3_bucket.storage_options)
    dyn = dynamo_options(s3_bucket, moto_server.endpoint, new_log_table(moto_server.endpoint))
    deltalake.write_deltalake(uri, batch(0, 0), storage_options=s3)  # records nothing
    with pytest.raises(CoordinationMismatchError,
                       match=r"version 0 was committed \d+ s ago but DynamoDB table \S+ has no "
                             r"entry for this table under any tablePath spelling"):
        dc.write(uri, batch(1, 0), storage_options=dyn)
    assert deltalake.DeltaTable(uri, storage_options=s3).version() == 0
