"""Loading and verifying a table with a stray commit file far ahead of its log.

A log of ``--commits`` commits gets a copy of one commit at version ``--stray`` (10^12 by
default).  Loading must fail at once with the gap, and ``verify`` must finish and report it:
the cost follows the files listed, never the version numbers.  Measured on local disk and on a
single-threaded moto S3 (conditional writes), each printed as one JSON line with the median of
``--repeat`` runs; targets: under 1 s locally and under 2 s on moto.

    .venv/bin/python bench/stray_versions.py [--commits 20] [--stray 1000000000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

import deltacommit as dc
from deltacommit.errors import MissingVersionError
from deltacommit.ops.verify import verify_table
from deltacommit.protocol.log.names import commit_path
from deltacommit.testing import (
    MotoServer,
    apply_test_aws_environment,
    s3_storage_options,
    unique_name,
)

SCHEMA = pa.schema([("id", pa.int64())])


def _build(uri: str, options: dict[str, str], commits: int, stray: int) -> None:
    t = dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    for i in range(commits):
        dc.write(t, pa.table({"id": [i]}, schema=SCHEMA))
    store = t.log_store.store
    store.put(commit_path(stray), store.get(commit_path(1)))


def _median(fn: Callable[[], None], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _measure(where: str, uri: str, options: dict[str, str], args: argparse.Namespace) -> None:
    _build(uri, options, args.commits, args.stray)

    def load() -> None:
        try:
            dc.DeltaTable(uri, storage_options=options)
        except MissingVersionError:
            return
        raise AssertionError("the stray commit was not reported")

    def check() -> None:
        report = verify_table(uri, storage_options=options)
        assert not report.ok

    for name, fn in (("load", load), ("verify", check)):
        print(json.dumps({"bench": "stray_versions", "store": where, "measure": name,
                          "commits": args.commits, "stray_version": args.stray,
                          "median_s": round(_median(fn, args.repeat), 4),
                          "target_s": 1.0 if where == "local" else 2.0}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--commits", type=int, default=20)
    p.add_argument("--stray", type=int, default=10**12)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    apply_test_aws_environment()
    with tempfile.TemporaryDirectory() as tmp:
        _measure("local", str(Path(tmp) / "t"), {}, args)
    with MotoServer() as moto:
        import boto3

        bucket = unique_name("stray")
        boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1").create_bucket(
            Bucket=bucket)
        _measure("moto-s3", f"s3://{bucket}/t", s3_storage_options(moto.endpoint), args)


if __name__ == "__main__":
    main()
