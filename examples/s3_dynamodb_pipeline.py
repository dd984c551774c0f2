"""The demo pipeline against S3, committing through Spark's S3DynamoDBLogStore protocol.

Same job as ``demo.py`` (concurrent Spark writer threads appending and overwriting partitions,
exactly-once stages, read back and verified), but the table lives on S3 and every commit is
decided by a conditional ``PutItem`` in a DynamoDB table, as Delta on Spark does with
``spark.delta.logStore.s3.impl=io.delta.storage.S3DynamoDBLogStore``.  Spark's tasks reach S3
through deltacommit's own store (boto3), so no hadoop-aws or Delta jar is involved.

Against local servers (moto, single-threaded, started and stopped by this script)::

    .venv/bin/python examples/s3_dynamodb_pipeline.py --local-servers

Against real S3 and DynamoDB (credentials from the usual AWS environment or profile)::

    .venv/bin/python examples/s3_dynamodb_pipeline.py --bucket my-bucket --prefix demo/events \\
        --region eu-west-1 --log-table delta_log --create-log-table

Every option can also come from the environment under deltalake's names (``AWS_ENDPOINT_URL``,
``AWS_ENDPOINT_URL_DYNAMODB``, ``AWS_REGION``, ``DELTA_DYNAMO_TABLE_NAME``, ...).  Spark writers
sharing the table must use the same DynamoDB table and ``tablePath`` scheme; see
``DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME`` in ``deltacommit.io.aws.options``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import demo  # the pipeline itself, shared with the local demo


@contextlib.contextmanager
def local_servers() -> Iterator[dict[str, str]]:
    """A single-threaded moto serving S3 and DynamoDB on one loopback port, with a new bucket."""
    import boto3

    from deltacommit.testing import MotoServer, apply_test_aws_environment, s3_storage_options

    apply_test_aws_environment()
    with MotoServer() as moto:
        bucket = f"deltacommit-demo-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
        print(f"local servers: moto (S3 and DynamoDB) at {moto.endpoint}, bucket {bucket}")
        yield {**s3_storage_options(moto.endpoint), "bucket": bucket,
               "AWS_ENDPOINT_URL_DYNAMODB": moto.endpoint}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    demo.add_pipeline_arguments(ap)
    ap.add_argument("--local-servers", action="store_true",
                    help="start a local moto for S3 and DynamoDB (implies --create-log-table)")
    ap.add_argument("--bucket", help="S3 bucket (required without --local-servers)")
    ap.add_argument("--prefix", default=None, help="table location inside the bucket "
                    "(default: deltacommit-demo/<random>)")
    ap.add_argument("--endpoint", default=os.environ.get("AWS_ENDPOINT_URL"), help="S3 endpoint URL")
    ap.add_argument("--dynamodb-endpoint", default=os.environ.get("AWS_ENDPOINT_URL_DYNAMODB"),
                    help="DynamoDB endpoint URL (default: the S3 endpoint, or AWS)")
    ap.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    ap.add_argument("--log-table", default=os.environ.get("DELTA_DYNAMO_TABLE_NAME", "delta_log"),
                    help="DynamoDB table of the S3DynamoDBLogStore protocol (default: delta_log)")
    ap.add_argument("--create-log-table", action="store_true",
                    help="create the DynamoDB table (with TTL on expireTime) if it does not exist")
    args = ap.parse_args()
    if not args.local_servers and not args.bucket:
        ap.error("give --bucket (and credentials in the environment), or --local-servers")

    with contextlib.ExitStack() as stack:
        options: dict[str, str] = {}
        if args.local_servers:
            options = stack.enter_context(local_servers())
            bucket = options.pop("bucket")
            create = True
        else:
            bucket = args.bucket
            create = args.create_log_table
            if args.endpoint:
                options["AWS_ENDPOINT_URL"] = args.endpoint
            if args.dynamodb_endpoint:
                options["AWS_ENDPOINT_URL_DYNAMODB"] = args.dynamodb_endpoint
            if args.region:
                options["AWS_REGION"] = args.region
        options["AWS_S3_LOCKING_PROVIDER"] = "dynamodb"
        options["DELTA_DYNAMO_TABLE_NAME"] = args.log_table
        if create:
            create_log_table(options, args.log_table)
        prefix = args.prefix or f"deltacommit-demo/{uuid.uuid4().hex[:12]}"
        uri = f"s3://{bucket}/{prefix.strip('/')}"

        t_start = time.perf_counter()
        spark = demo.start_spark(args.master)
        try:
            ok = demo.run_pipeline(spark, uri, writers=args.writers, stages_per_writer=args.stages,
                                   rows=args.rows, storage_options=options)
        finally:
            spark.stop()
        print(f"total {time.perf_counter() - t_start:.1f} s")
    return 0 if ok else 1


def create_log_table(options: dict[str, str], name: str) -> None:
    from deltacommit.io.aws import resolve_aws_config
    from deltacommit.io.logstore.s3_dynamodb.admin import create_log_table as create

    config: Any = resolve_aws_config(options)
    setup = create(config.dynamodb_client(), name)
    state = "created" if setup.created else "exists"
    print(f"DynamoDB log table {name} at {setup.endpoint}: {state}, {setup.status}, TTL {setup.ttl}"
          + (f" ({setup.ttl_warning})" if setup.ttl_warning else ""))


if __name__ == "__main__":
    sys.exit(main())
