"""Fresh S3 table locations on a local server, for benchmarks and torture runs.

A module of its own because it needs boto3 and the DynamoDB administration (botocore), which
the rest of ``deltacommit.testing`` does not.
"""

from __future__ import annotations

import boto3

from deltacommit.io.logstore.s3_dynamodb.admin import create_log_table
from deltacommit.testing.servers import s3_storage_options, unique_name


def new_s3_location(endpoint: str, prefix: str, *, dynamodb: bool = False,
                    client_endpoint: str | None = None) -> tuple[str, dict[str, str]]:
    """A new bucket on the server at ``endpoint`` and the storage options that reach it: with
    ``dynamodb``, also a new DynamoDB log table, selected by ``AWS_S3_LOCKING_PROVIDER``.
    Returns the bucket's URI (``s3://<bucket>``) and the options.  ``client_endpoint`` is where
    the libraries under test reach the server (a proxy before it), if not ``endpoint``."""
    reach = client_endpoint or endpoint
    bucket = unique_name(prefix)
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
        Bucket=bucket)
    options = s3_storage_options(reach)
    if dynamodb:
        log_table = unique_name("delta-log")
        create_log_table(boto3.client("dynamodb", endpoint_url=endpoint,
                                      region_name="us-east-1"), log_table)
        options.update({"AWS_S3_LOCKING_PROVIDER": "dynamodb",
                        "DELTA_DYNAMO_TABLE_NAME": log_table,
                        "AWS_ENDPOINT_URL_DYNAMODB": reach})
    return f"s3://{bucket}", options
