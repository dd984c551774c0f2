"""The Spark S3DynamoDBLogStore emulator: what it writes is what Spark writes, it excludes
deltacommit on the same tablePath, and a fleet of it, deltalake 1.6.0 and deltacommit loses
nothing and raises nothing."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

import deltalake
import pytest

import deltacommit as dc
from deltacommit.protocol.schema.arrow import schema_to_json
from deltacommit.testing import MotoServer, S3Bucket
from deltacommit.testing.spark_emulator import SparkEmulatorWriter, SparkS3DynamoDBLogStore
from tests.compat.test_mixed_fleet_errors import (
    _deltacommit_writer,
    _deltalake_reader,
    _deltalake_writer,
    run_fleet,
)
from tests.s3.helpers import SCHEMA, DynamoSetup, batch, new_log_table

APPENDS = 8


@pytest.fixture
def dynamo(s3_bucket: S3Bucket, moto_server: MotoServer) -> DynamoSetup:
    return DynamoSetup(s3_bucket, "moto", moto_server.endpoint, new_log_table(moto_server.endpoint))


def _spark(dynamo: DynamoSetup) -> SparkEmulatorWriter:
    return SparkEmulatorWriter(SparkS3DynamoDBLogStore(dynamo.bucket.name, "t", dynamo.endpoint,
                                                       dynamo.table))


def test_the_emulator_writes_items_and_files_as_spark_does(dynamo: DynamoSetup) -> None:
    spark = _spark(dynamo)
    spark.create(schema_to_json(SCHEMA))
    assert spark.append(batch(0, 0)) == 1
    s3a = f"s3a://{dynamo.bucket.name}/t"
    items = dynamo.items(s3a)
    assert [i["fileName"]["S"] for i in items] == ["00000000000000000000.json",
                                                    "00000000000000000001.json"]
    for i in items:
        assert set(i) == {"tablePath", "fileName", "tempPath", "complete", "expireTime"}
        assert i["complete"] == {"S": "true"} and set(i["expireTime"]) == {"N"}
        assert i["tempPath"]["S"].startswith(f".tmp/{i['fileName']['S']}.")
        # Spark keeps its temp files.
        assert spark.ls._exists(f"t/_delta_log/{i['tempPath']['S']}")
    assert deltalake.DeltaTable(s3a, storage_options=dynamo.options).version() == 1


def test_the_emulator_and_deltacommit_exclude_each_other(dynamo: DynamoSetup) -> None:
    spark = _spark(dynamo)
    spark.create(schema_to_json(SCHEMA))
    ours = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    versions = []
    for b in range(3):
        versions.append(spark.append(batch(0, b)))
        versions.append(dc.write(ours, batch(1, b)).version)
    assert versions == [1, 2, 3, 4, 5, 6]
    # A Spark writer that has not seen deltacommit's newest commit loses the race and retries.
    assert spark.ls.latest_version() == 6
    assert [e.version for e in dynamo.entries(f"s3a://{dynamo.bucket.name}/t")] == list(range(7))
    data = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options).to_arrow()
    assert Counter(zip(data["writer"].to_pylist(), data["batch"].to_pylist(), strict=True)) == \
        Counter({(w, b): 1 for w in (0, 1) for b in range(3)})


def _spark_writer(uri: str, options: Mapping[str, str], writer: int, appends: int,
                  start: Any, out: Any) -> None:
    errors: Counter[str] = Counter()
    acked = 0
    try:
        bucket, key = uri.split("://", 1)[1].split("/", 1)
        spark = SparkEmulatorWriter(SparkS3DynamoDBLogStore(
            bucket, key, options["AWS_ENDPOINT_URL_DYNAMODB"], options["DELTA_DYNAMO_TABLE_NAME"]))
        start.wait()
        for b in range(appends):
            spark.append(batch(writer, b))
            acked += 1
    except BaseException as e:
        errors[f"{type(e).__name__}: {e}"[:300]] += 1
    out.put((f"spark-{writer}", acked, dict(errors)))


def test_a_fleet_of_spark_deltalake_and_deltacommit(dynamo: DynamoSetup) -> None:
    """2 deltacommit (given s3://), 2 deltalake (given s3a://, as Spark spells the table) and
    1 emulated Spark writer, and a deltalake reader: deltacommit and Spark fail nothing, and
    every acknowledged row is in the table exactly once."""
    spark = _spark(dynamo)
    spark.create(schema_to_json(SCHEMA))
    s3a = f"s3a://{dynamo.bucket.name}/t"
    options = dict(dynamo.options)
    plan: list[tuple[Any, str, int, int]] = [
        (_deltacommit_writer, dynamo.uri(), 0, APPENDS), (_deltacommit_writer, dynamo.uri(), 1, APPENDS),
        (_deltalake_writer, s3a, 2, APPENDS), (_deltalake_writer, s3a, 3, APPENDS),
        (_spark_writer, s3a, 4, APPENDS), (_deltalake_reader, s3a, 99, 5 * APPENDS)]
    results = run_fleet(plan, options)
    print(json.dumps({"fleet": "spark-emulator+deltalake+deltacommit", "results": results}))
    for name, (acked, errors) in results.items():
        if name.startswith(("deltacommit", "spark")):
            assert errors == {} and acked == APPENDS, (name, errors)
        else:
            # Spark keeps its temp file until it completes its entry, so a deltalake repairer
            # meeting a Spark commit in that window fails with "version already exists"
            # (deltalake 1.6.0 beside Spark alone does the same); only those and deltalake's
            # own retry limit may appear, each a failed attempt that committed nothing.
            assert set(errors) <= {"version-already-exists", "gave-up-after-retries"}, (name, errors)
    data = dc.DeltaTable(dynamo.uri(), storage_options=options).to_arrow()
    pairs = Counter(zip(data["writer"].to_pylist(), data["batch"].to_pylist(), strict=True))
    assert pairs == Counter({(w, b): 1 for w in range(5) for b in range(APPENDS)})
    assert deltalake.DeltaTable(s3a, storage_options=options).version() == 5 * APPENDS
    assert dynamo.entries(dynamo.uri()) == []  # one fleet key: Spark's
