"""Errors peers raise in mixed fleets on Spark's DynamoDB protocol, against peer-only baselines.

Fleets of writer processes append 15 one-row batches each to one S3 table on a single-threaded
moto (DynamoDB log table on the same server) while a deltalake reader loads it in a loop; the
writers of deltalake 1.6.0 call ``write_deltalake(uri, ...)`` as its users do.  Every error is
counted by class (``version-already-exists``: a repair that met deltacommit's or Spark's
in-flight state; ``gave-up-after-retries``: deltalake's own limit of 15 lost races), and every
acknowledged row is checked exactly once.  One JSON line per fleet:

- ``deltalake-only``: 6 deltalake writers (the baseline);
- ``mixed``: 3 deltacommit + 3 deltalake writers;
- ``spark-deltalake``: 1 emulated Spark + 5 deltalake writers (the baseline with Spark);
- ``spark-mixed``: 3 deltacommit + 2 deltalake + 1 emulated Spark writer.

    .venv/bin/python bench/mixed_fleet.py [--appends 15]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3
from tests.compat.test_mixed_fleet_errors import (
    _deltacommit_writer,
    _deltalake_reader,
    _deltalake_writer,
    run_fleet,
)
from tests.peers.test_spark_emulator import _spark_writer
from tests.s3.helpers import SCHEMA

import deltacommit as dc
from deltacommit.io.logstore.s3_dynamodb.admin import create_log_table
from deltacommit.protocol.schema.arrow import schema_to_json
from deltacommit.testing import (
    MotoServer,
    apply_test_aws_environment,
    s3_storage_options,
    unique_name,
)
from deltacommit.testing.spark_emulator import SparkEmulatorWriter, SparkS3DynamoDBLogStore


def _fleet(moto: MotoServer, kinds: list[str], appends: int) -> dict[str, Any]:
    bucket = unique_name("fleet")
    boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    table = unique_name("delta-log")
    create_log_table(boto3.client("dynamodb", endpoint_url=moto.endpoint, region_name="us-east-1"),
                     table)
    options = {**s3_storage_options(moto.endpoint), "AWS_S3_LOCKING_PROVIDER": "dynamodb",
               "DELTA_DYNAMO_TABLE_NAME": table, "AWS_ENDPOINT_URL_DYNAMODB": moto.endpoint}
    spark = "spark" in kinds
    # With Spark in the fleet every peer spells the table as Spark does (its fleet key).
    peer_uri = f"s3a://{bucket}/t" if spark else f"s3://{bucket}/t"
    if spark:
        SparkEmulatorWriter(SparkS3DynamoDBLogStore(bucket, "t", moto.endpoint, table)).create(
            schema_to_json(SCHEMA))
    else:
        dc.DeltaTable.create(f"s3://{bucket}/t", SCHEMA, storage_options=options)
    targets = {"deltacommit": _deltacommit_writer, "deltalake": _deltalake_writer,
               "spark": _spark_writer}
    plan = [(targets[k], f"s3://{bucket}/t" if k == "deltacommit" else peer_uri, w, appends)
            for w, k in enumerate(kinds)]
    plan.append((_deltalake_reader, peer_uri, 99, len(kinds) * appends))
    results = run_fleet(plan, options)
    data = dc.DeltaTable(f"s3://{bucket}/t", storage_options=options).to_arrow()
    pairs = Counter(zip(data["writer"].to_pylist(), data["batch"].to_pylist(), strict=True))
    expected = Counter({(w, b): 1 for w in range(len(kinds)) for b in range(appends)})
    errors: dict[str, Counter[str]] = {}
    for name, (_, errs) in results.items():
        kind = name.rsplit("-", 1)[0] if not name.endswith("reader") else name
        errors.setdefault(kind, Counter()).update(errs)
    return {"errors": {k: dict(v) for k, v in errors.items()},
            "rows_exactly_once": pairs == expected, "rows": data.num_rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--appends", type=int, default=15)
    args = ap.parse_args()
    apply_test_aws_environment()
    fleets = {
        "deltalake-only": ["deltalake"] * 6,
        "mixed": ["deltacommit"] * 3 + ["deltalake"] * 3,
        "spark-deltalake": ["spark"] + ["deltalake"] * 5,
        "spark-mixed": ["deltacommit"] * 3 + ["deltalake"] * 2 + ["spark"],
    }
    with MotoServer() as moto:
        for name, kinds in fleets.items():
            doc = {"bench": "mixed_fleet", "fleet": name, "writers": dict(Counter(kinds)),
                   "appends_each": args.appends, **_fleet(moto, kinds, args.appends)}
            print(json.dumps(doc), flush=True)


if __name__ == "__main__":
    main()
