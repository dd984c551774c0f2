"""Vacuum and log cleanup on S3 delete in batches: one DeleteObjects request per 1,000 objects
(several at once for vacuum), not one request per object; what they delete is unchanged."""

from __future__ import annotations

import time

import pyarrow as pa

import deltacommit as dc
from deltacommit.protocol.log.names import LOG_DIR
from deltacommit.runtime.clock import ManualClock
from deltacommit.testing import S3Bucket

DAY = 86_400.0


def test_vacuum_and_log_cleanup_delete_with_one_request(s3_bucket: S3Bucket) -> None:
    uri, options = f"{s3_bucket.uri}/t", dict(s3_bucket.storage_options)
    for i in range(12):  # a checkpoint at version 10
        dc.write(uri, pa.table({"id": [i]}), storage_options=options)
    dc.write(uri, pa.table({"id": [100]}), storage_options=options, mode="overwrite")
    later = dc.DeltaTable(uri, storage_options=options, clock=ManualClock(time.time() + 40 * DAY))
    store = later.log_store.store
    store.reset_requests()  # type: ignore[attr-defined]
    deleted = later.vacuum(dry_run=False)
    assert len(deleted) == 12 and not any(p.startswith(f"{LOG_DIR}/") for p in deleted)
    assert store.requests.get("DeleteObjects") == 1  # type: ignore[attr-defined]
    assert "DeleteObject" not in store.requests  # type: ignore[attr-defined]
    assert not any(store.exists(p) for p in deleted)
    store.reset_requests()  # type: ignore[attr-defined]
    removed = later.cleanup_log()
    assert f"{LOG_DIR}/{0:020d}.json" in removed and f"{LOG_DIR}/{9:020d}.json" in removed
    assert store.requests.get("DeleteObjects") == 1  # type: ignore[attr-defined]
    assert "DeleteObject" not in store.requests  # type: ignore[attr-defined]
    assert not any(store.exists(p) for p in removed)
    fresh = dc.DeltaTable(uri, storage_options=options)
    assert fresh.to_arrow().column("id").to_pylist() == [100]
