"""A table on S3 rolled back under a kept table object (its newest commit files deleted):
the recheck before a claim costs a writer that commits often nothing and a long operation one
GET, and refuses what would follow a gap; on Spark's DynamoDB protocol, a version whose commit
file is gone while its entry is complete is refused by every writer, as Spark's step 1 does."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.snapshot import state_cache
from deltacommit.errors import CorruptLogError, TableReplacedError
from deltacommit.io.storage.s3 import S3Store
from deltacommit.runtime.clock import ManualClock
from deltacommit.testing import S3Bucket

from .helpers import DynamoSetup


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    state_cache.clear()


def _rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def _key(version: int) -> str:
    return f"t/_delta_log/{version:020d}.json"


def _ids(uri: str, options: dict[str, str]) -> list[int]:
    ids = dc.DeltaTable(uri, storage_options=options).to_arrow().column("id").to_pylist()
    return sorted(i for i in ids if i is not None)


def _table(uri: str, options: dict[str, str]) -> None:
    """Version 0 creates it, 1 to 3 append ids 0, 1 and 2."""
    dc.DeltaTable.create(uri, pa.schema([("id", pa.int64())]), storage_options=options)
    for i in range(3):
        dc.write(uri, _rows([i]), storage_options=options)


def _kept(uri: str, options: dict[str, str]) -> tuple[dc.DeltaTable, ManualClock]:
    """``_table``, and a table object kept on it with a clock the test moves."""
    _table(uri, options)
    clock = ManualClock()
    return dc.DeltaTable(uri, storage_options=options, clock=clock), clock


def test_a_kept_table_object_pays_one_get_after_a_second_and_refuses_two_versions_rolled_back(
        s3_bucket: S3Bucket, moto_s3_client: Any) -> None:
    uri, options = f"{s3_bucket.uri}/t", s3_bucket.storage_options
    t, clock = _kept(uri, options)
    store = t.log_store.store
    assert isinstance(store, S3Store)
    store.reset_requests()
    clock.advance(0.5)
    dc.write(t, _rows([10]))  # version 4, within a second of the read: no request more
    assert store.requests == {"PutObject": 2}
    store.reset_requests()
    clock.advance(2)
    dc.write(t, _rows([11]))  # version 5, two seconds on: one GET of version 4
    assert store.requests == {"GetObject": 1, "PutObject": 2}

    for version in (5, 4):  # the operator rolls back both
        moto_s3_client.delete_object(Bucket=s3_bucket.name, Key=_key(version))
    clock.advance(2)
    with pytest.raises(TableReplacedError, match="version 5, the newest this writer read"):
        dc.write(t, _rows([12]))
    assert t.version == 3
    dc.write(t, _rows([12]))
    assert _ids(uri, options) == [0, 1, 2, 12]


def test_a_version_rolled_back_and_written_again_by_another_writer_is_refused(
        s3_bucket: S3Bucket, moto_s3_client: Any) -> None:
    uri, options = f"{s3_bucket.uri}/t", s3_bucket.storage_options
    t, clock = _kept(uri, options)
    moto_s3_client.delete_object(Bucket=s3_bucket.name, Key=_key(3))
    state_cache.clear()
    dc.write(uri, _rows([7000]), storage_options=options)  # another writer's version 3
    clock.advance(2)
    with pytest.raises(TableReplacedError, match="no longer the commit this writer read"):
        t.delete("id = 2")
    assert _ids(uri, options) == [0, 1, 7000]
    t.delete("id = 7000")
    assert _ids(uri, options) == [0, 1]


def test_a_complete_entry_whose_commit_file_was_deleted_is_refused(
        dynamo: DynamoSetup, moto_s3_client: Any) -> None:
    """Spark's protocol takes a complete entry for a committed version: an operator who
    deletes the commit file but not the entry leaves a version no writer may follow."""
    uri, options = dynamo.uri(), dynamo.options
    t, clock = _kept(uri, options)
    moto_s3_client.delete_object(Bucket=dynamo.bucket.name, Key=_key(3))
    clock.advance(2)
    with pytest.raises(CorruptLogError, match="complete entry for version 3"):
        dc.write(t, _rows([12]))
    with pytest.raises(CorruptLogError, match="complete entry for version 3"):
        dc.write(uri, _rows([13]), storage_options=options)
    assert _ids(uri, options) == [0, 1]
