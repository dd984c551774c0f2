"""Exclusion on S3: 8 processes x 15 appends to one table, in each commit mechanism.

Every acknowledged append must own a distinct version whose file holds exactly the bytes its
writer wrote, every batch must be in the table exactly once, and with DynamoDB every entry
must end complete.  moto serves one request at a time, so its conditional writes are atomic
(see tests/test_rig.py): a double winner here would be the log store's fault.
"""

from __future__ import annotations

from collections import Counter

import deltacommit as dc
from deltacommit.log.names import commit_path
from deltacommit.logstore.dynamodb import DynamoDBLogStore
from deltacommit.testing import S3Bucket

from .helpers import SCHEMA, DynamoSetup, deltacommit_appender, run_writers, sha256

WRITERS = 8
APPENDS = 15


def _run_and_check(uri: str, options: dict[str, str]) -> dc.DeltaTable:
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    journals = run_writers([(deltacommit_appender, uri, options, w, APPENDS) for w in range(WRITERS)],
                           method="forkserver")
    table = dc.DeltaTable(uri, storage_options=options)
    total = WRITERS * APPENDS
    assert table.version == total
    versions = Counter(v for j in journals.values() for _, v, _, _ in j)
    assert sorted(versions) == list(range(1, total + 1))
    store = table.log_store.store
    for j in journals.values():
        for _, v, _, digest in j:
            assert sha256(store.get(commit_path(v))) == digest, f"version {v} was replaced"
    rows = table.to_arrow()
    seen = Counter(zip(rows.column("writer").to_pylist(), rows.column("batch").to_pylist(),
                       strict=True))
    assert seen == Counter({(w, b): 1 for w in range(WRITERS) for b in range(APPENDS)})
    # The writers really raced.
    attempts = [a for j in journals.values() for _, _, a, _ in j]
    assert sum(attempts) > total
    return table


def test_conditional_put_eight_processes(s3_bucket: S3Bucket) -> None:
    table = _run_and_check(f"{s3_bucket.uri}/t", s3_bucket.storage_options)
    assert table.configuration["deltacommit.coordination"] == "conditional"


def test_dynamodb_eight_processes(dynamo: DynamoSetup) -> None:
    table = _run_and_check(dynamo.uri(), dynamo.options)
    ls = table.log_store
    assert isinstance(ls, DynamoDBLogStore)
    entries = dynamo.entries(ls.table_path)
    assert [e.version for e in entries] == list(range(WRITERS * APPENDS + 1))
    assert [e.version for e in entries if not e.complete] == []
    # Each temp file was deleted once its commit was in place (before its entry was completed).
    store = ls.store
    for e in entries[-5:]:
        assert not store.exists(e.temp_key) and store.exists(commit_path(e.version))
