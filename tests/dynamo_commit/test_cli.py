"""``deltacommit dynamodb create-table --schema dynamo-commit``: the lease table
``conditional_put = dynamo:<table>`` names, ready for the first commit."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.cli import main
from deltacommit.testing import S3Bucket, unique_name

from .conftest import lease_items


def _flags(options: dict[str, str]) -> list[str]:
    return [f"--storage-option={k}={v}" for k, v in options.items()]


def _key_schema(client: Any, name: str) -> set[tuple[str, str]]:
    table = client.describe_table(TableName=name)["Table"]
    assert table["TableStatus"] == "ACTIVE"
    return {(k["AttributeName"], k["KeyType"]) for k in table["KeySchema"]}


def test_create_table_makes_the_lease_table_the_options_name(
        s3_bucket: S3Bucket, moto_dynamodb: Any, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("leases")
    options = {**s3_bucket.storage_options, "conditional_put": f"dynamo:{name}",
               "DELTACOMMIT_S3_CONDITIONAL_WRITES": "false"}

    assert main(["dynamodb", "create-table", "--schema", "dynamo-commit", "--json",
                 *_flags(options)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["table"], out["schema"]) == (name, "dynamo-commit")
    assert _key_schema(moto_dynamodb, name) == {("path", "HASH"), ("etag", "RANGE")}
    ttl = moto_dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", "ttl")

    uri = f"{s3_bucket.uri}/t"
    dc.DeltaTable.create(uri, pa.schema([("x", pa.int64())]), storage_options=options)
    assert dc.write(uri, pa.table({"x": [1]}), storage_options=options).version == 1
    assert {p for p, _ in lease_items(moto_dynamodb, name)} == {
        "t/_delta_log/00000000000000000000.json", "t/_delta_log/00000000000000000001.json"}

    # Again: the existing table is accepted as it is.
    assert main(["dynamodb", "create-table", "--schema", "dynamo-commit", *_flags(options)]) == 0
    assert name in capsys.readouterr().out


def test_create_table_on_dynalite(s3_bucket: S3Bucket, dynalite_dynamodb: Any,
                                  dynalite_server: Any,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    """dynalite has no TTL; the table is still made and usable."""
    name = unique_name("leases")
    options = {**s3_bucket.storage_options, "AWS_ENDPOINT_URL_DYNAMODB": dynalite_server.endpoint}
    assert main(["dynamodb", "create-table", "--schema", "dynamo-commit", "--table-name", name,
                 *_flags(options)]) == 0
    assert name in capsys.readouterr().out
    assert _key_schema(dynalite_dynamodb, name) == {("path", "HASH"), ("etag", "RANGE")}
