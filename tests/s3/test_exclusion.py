"""Exclusion on S3: 8 processes x 15 appends to one table, in each commit mechanism.

Every acknowledged append must own a distinct version whose file holds exactly the bytes its
writer wrote, every batch must be in the table exactly once, and with DynamoDB every entry
must end complete.  Racing (host turns off), the log store alone excludes the writers and
some claims are lost; taking turns (the default), none is.  moto serves one request at a
time, so its conditional writes are atomic (see tests/test_rig.py): a double winner here
would be the log store's fault.  The racing writers on conditional put also run against
LocalStack's S3, whose conditional writes are its own code.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Any

import pytest

import deltacommit as dc
from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore
from deltacommit.protocol.log.names import commit_path
from deltacommit.testing import LocalStackS3, S3Bucket, s3_storage_options, unique_name

from .helpers import BOTOCORE, SCHEMA, DynamoSetup, deltacommit_appender, run_writers, sha256

WRITERS = 8
APPENDS = 15
#: The races through botocore: enough writers and appends that claims are lost (asserted).
BOTOCORE_WRITERS = 3
BOTOCORE_APPENDS = 5


def _run_and_check(uri: str, options: dict[str, str], turns: bool, writers: int = WRITERS,
                   appends: int = APPENDS) -> dc.DeltaTable:
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    appender = partial(deltacommit_appender, turns=turns)
    journals = run_writers([(appender, uri, options, w, appends) for w in range(writers)],
                           method="forkserver")
    table = dc.DeltaTable(uri, storage_options=options)
    total = writers * appends
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
    assert seen == Counter({(w, b): 1 for w in range(writers) for b in range(appends)})
    attempts = [a for j in journals.values() for _, _, a, _ in j]
    if turns:
        assert sum(attempts) == total  # each claimed after the one before it had committed
    else:
        assert sum(attempts) > total  # the writers really raced
    return table


turns = pytest.mark.parametrize("turns", [False, True], ids=["racing", "turns"])


@turns
def test_conditional_put_eight_processes(s3_bucket: S3Bucket, turns: bool) -> None:
    table = _run_and_check(f"{s3_bucket.uri}/t", s3_bucket.storage_options, turns)
    assert table.configuration["deltacommit.coordination"] == "conditional"


@BOTOCORE
def test_conditional_put_racing_processes_through_botocore(s3_bucket: S3Bucket,
                                                            aws_client: str) -> None:
    """The race through botocore's S3 client (DELTACOMMIT_AWS_CLIENT=botocore in every writer),
    smaller: the client is what differs."""
    _run_and_check(f"{s3_bucket.uri}/t", s3_bucket.storage_options, turns=False,
                   writers=BOTOCORE_WRITERS, appends=BOTOCORE_APPENDS)


def test_conditional_put_eight_racing_processes_on_localstack(
        localstack_server: LocalStackS3, localstack_s3_client: Any) -> None:
    """The same race on LocalStack's own S3, which serves requests on many threads: only its
    ``If-None-Match`` excludes the writers (with turns they would not race)."""
    name = unique_name("dc-test")
    localstack_s3_client.create_bucket(Bucket=name)
    bucket = S3Bucket(name, s3_storage_options(localstack_server.endpoint))
    _run_and_check(f"{bucket.uri}/t", bucket.storage_options, turns=False)


@turns
def test_dynamodb_eight_processes(dynamo: DynamoSetup, turns: bool) -> None:
    table = _run_and_check(dynamo.uri(), dynamo.options, turns)
    ls = table.log_store
    assert isinstance(ls, DynamoDBLogStore)
    entries = dynamo.entries(ls.table_path)
    assert [e.version for e in entries] == list(range(WRITERS * APPENDS + 1))
    assert [e.version for e in entries if not e.complete] == []
    # Each temp file was deleted once its commit was in place (before its entry was completed).
    store = ls.store
    for e in entries[-5:]:
        assert not store.exists(e.temp_key) and store.exists(commit_path(e.version))


@BOTOCORE
def test_dynamodb_racing_processes_through_botocore(dynamo: DynamoSetup, aws_client: str) -> None:
    """The race through botocore's S3 and DynamoDB clients, smaller."""
    table = _run_and_check(dynamo.uri(), dynamo.options, turns=False,
                           writers=BOTOCORE_WRITERS, appends=BOTOCORE_APPENDS)
    ls = table.log_store
    assert isinstance(ls, DynamoDBLogStore)
    entries = dynamo.entries(ls.table_path)
    assert [e.version for e in entries if not e.complete] == []
