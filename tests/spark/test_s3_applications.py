"""Two Spark applications (two processes, each with its own SparkSession) append to one table on
S3 (moto, single-threaded) through the DynamoDB log store at the same time."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import deltalake
import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit import spark as dcs
from deltacommit.io.logstore.s3_dynamodb.admin import create_log_table
from deltacommit.testing import MotoServer, S3Bucket, unique_name

from .applications import run_writer_apps

pytestmark = pytest.mark.spark

WRITERS, COMMITS, ROWS = 2, 10, 20


def test_two_spark_applications_on_s3_with_the_dynamodb_log_store(
        spark: Any, moto_server: MotoServer, s3_bucket: S3Bucket, tmp_path: Path) -> None:
    dynamodb = boto3.client("dynamodb", endpoint_url=moto_server.endpoint, region_name="us-east-1")
    log_table = unique_name("delta-log")
    create_log_table(dynamodb, log_table)
    options = {**s3_bucket.storage_options, "AWS_S3_LOCKING_PROVIDER": "dynamodb",
               "DELTA_DYNAMO_TABLE_NAME": log_table,
               "AWS_ENDPOINT_URL_DYNAMODB": moto_server.endpoint}
    uri = f"{s3_bucket.uri}/events"
    schema = pa.schema([("writer", pa.int32()), ("batch", pa.int32()), ("id", pa.int64())])
    dc.DeltaTable.create(uri, schema, partition_by=["writer"], storage_options=options)

    env = {**os.environ, "DC_STORAGE_OPTIONS": json.dumps(options)}
    logs = [tmp_path / f"writer-{w}.log" for w in range(WRITERS)]
    lines = run_writer_apps(uri, [env] * WRITERS, logs, commits=COMMITS, rows=ROWS)
    commits = [x for x in lines if "version" in x]
    windows = [x for x in lines if "done" in x]
    assert len(commits) == WRITERS * COMMITS and not any(c["skipped"] for c in commits)
    # Every commit got its own version: none lost, none shared.
    assert sorted(c["version"] for c in commits) == list(range(1, WRITERS * COMMITS + 1))
    # The applications really wrote at the same time.
    assert max(w["start"] for w in windows) < min(w["end"] for w in windows)

    table = dc.DeltaTable(uri, storage_options=options)
    assert table.version == WRITERS * COMMITS
    rows = dcs.read(spark, uri, storage_options=options).collect()
    counts = Counter((r["writer"], r["batch"]) for r in rows)
    assert counts == {(w, b): ROWS for w in range(WRITERS) for b in range(COMMITS)}
    assert all(table.app_version(f"writer-{w}") == COMMITS - 1 for w in range(WRITERS))

    # One complete DynamoDB entry per version decided each commit.
    items = dynamodb.query(TableName=log_table, KeyConditionExpression="tablePath = :p",
                           ExpressionAttributeValues={":p": {"S": uri}}, ConsistentRead=True)["Items"]
    assert sorted(i["fileName"]["S"] for i in items) == [
        f"{v:020d}.json" for v in range(WRITERS * COMMITS + 1)]
    assert all(i["complete"]["S"] == "true" for i in items)

    # deltalake reads the same rows.
    theirs = deltalake.DeltaTable(uri, storage_options=s3_bucket.storage_options).to_pyarrow_table()
    assert Counter(zip(theirs.column("writer").to_pylist(), theirs.column("batch").to_pylist(),
                       strict=True)) == counts
    assert sorted(theirs.column("id").to_pylist()) == sorted(r["id"] for r in rows)
