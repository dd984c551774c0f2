"""What one request costs on the benchmarks' single-threaded moto, and what that caps.

Every S3 and DynamoDB figure of ``commits.py`` goes through one moto server thread (its
conditional writes are atomic only that way), so a commit rate there is bounded by the requests
a commit needs times what moto takes to serve each.  This measures the second factor: the
round trip of each request kind the commit protocols send, from one client, one at a time, and
of a LIST by how many keys it returns (a listing of a table's log returns every commit file and
checkpoint since the point it starts from).  Then the ceiling a mix of requests implies.

Prints one JSON line per request kind, per LIST size, and per ceiling.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import boto3

from deltacommit.io.logstore.s3_dynamodb.admin import create_log_table
from deltacommit.testing import MotoServer
from deltacommit.testing.servers import TEST_AWS_ENV, unique_name

#: The requests of one uncontended commit (``tests/coalesce/test_requests.py`` counts them),
#: whose ceilings are printed; a contended run's mix is in ``commits.py``'s ``requests``.
MIXES = {
    "s3-conditional uncontended (data PUT, commit PUT)": {"put": 2},
    "s3-dynamodb uncontended (data, temp and N.json PUT, PutItem, DeleteObject, UpdateItem)":
        {"put": 3, "put_item": 1, "delete": 1, "update_item": 1},
}


def timed(call: Callable[[int], Any], n: int) -> float:
    """Median seconds of ``n`` calls, after one unmeasured call."""
    call(-1)
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        call(i)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200, help="requests per kind")
    ap.add_argument("--list-sizes", default="10,100,1000",
                    help="how many keys the timed LISTs return (at most 1,000: one page)")
    args = ap.parse_args()
    os.environ.update(TEST_AWS_ENV)
    with MotoServer() as moto:
        kw: dict[str, Any] = {"endpoint_url": moto.endpoint, "region_name": "us-east-1"}
        s3 = boto3.client("s3", **kw)
        ddb = boto3.client("dynamodb", **kw)
        bucket = unique_name("bench")
        s3.create_bucket(Bucket=bucket)
        table = unique_name("log")
        create_log_table(ddb, table)
        body = b'{"commitInfo":{}}\n' * 30
        path = {"S": "s3://bucket/t"}

        def key(i: int) -> dict[str, Any]:
            return {"tablePath": path, "fileName": {"S": f"{i + 1:020d}.json"}}

        kinds: dict[str, Callable[[int], Any]] = {
            "put": lambda i: s3.put_object(Bucket=bucket, Key=f"p/{i}", Body=body),
            "put_if_absent": lambda i: s3.put_object(Bucket=bucket, Key=f"c/{i}", Body=body,
                                                     IfNoneMatch="*"),
            "get": lambda i: s3.get_object(Bucket=bucket, Key=f"p/{i}")["Body"].read(),
            "head": lambda i: s3.head_object(Bucket=bucket, Key=f"p/{i}"),
            "delete": lambda i: s3.delete_object(Bucket=bucket, Key=f"p/{i}"),
            "put_item": lambda i: ddb.put_item(
                TableName=table, Item={**key(i), "tempPath": {"S": "x"}, "complete": {"S": "false"}},
                ConditionExpression="attribute_not_exists(fileName)"),
            "update_item": lambda i: ddb.update_item(
                TableName=table, Key=key(i), UpdateExpression="SET #c = :t",
                ConditionExpression="#c = :f", ExpressionAttributeNames={"#c": "complete"},
                ExpressionAttributeValues={":t": {"S": "true"}, ":f": {"S": "false"}}),
            "get_item": lambda i: ddb.get_item(TableName=table, Key=key(i), ConsistentRead=True),
            "query_latest": lambda i: ddb.query(
                TableName=table, KeyConditionExpression="tablePath = :p",
                ExpressionAttributeValues={":p": path}, ConsistentRead=True,
                ScanIndexForward=False, Limit=1),
        }
        cost: dict[str, float] = {}
        for name, call in kinds.items():
            cost[name] = timed(call, args.repeat)
            print(json.dumps({"bench": "moto_request", "kind": name,
                              "median_ms": round(cost[name] * 1000, 2)}), flush=True)
        filled = 0
        for size in sorted(min(1000, int(s)) for s in args.list_sizes.split(",")):
            while filled < size:
                s3.put_object(Bucket=bucket, Key=f"log/{filled:020d}.json", Body=body)
                filled += 1
            seconds = timed(lambda i: s3.list_objects_v2(Bucket=bucket, Prefix="log/"), 20)
            print(json.dumps({"bench": "moto_list", "keys_returned": filled,
                              "median_ms": round(seconds * 1000, 2),
                              "ratio_to_get": round(seconds / cost["get"], 1)}), flush=True)
        for mix, counts in MIXES.items():
            per_commit = sum(cost[k] * n for k, n in counts.items())
            print(json.dumps({"bench": "moto_ceiling", "mix": mix,
                              "requests": sum(counts.values()),
                              "commits_per_s_at_most": round(1 / per_commit, 1)}), flush=True)
        per_request = statistics.median(cost.values())
        print(json.dumps({"bench": "moto_ceiling", "mix": "any request, median kind",
                          "requests_per_s_at_most": round(1 / per_request, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
