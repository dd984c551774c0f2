"""A separate Spark application for the multi-application tests: appends ``--commits`` batches.

Started as its own process with its own SparkSession.  It prints ``ready`` once Spark and its
Python workers are warm, waits for ``go`` on stdin (so that several applications start writing
together, without sleeps), then appends one batch per commit and prints one JSON line per commit
and a final ``{"done": ...}`` line.  Storage options come as JSON in ``DC_STORAGE_OPTIONS``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--uri", required=True)
    ap.add_argument("--writer", type=int, required=True)
    ap.add_argument("--commits", type=int, default=10)
    ap.add_argument("--rows", type=int, default=20)
    args = ap.parse_args()
    options = json.loads(os.environ.get("DC_STORAGE_OPTIONS", "{}"))

    from deltacommit import spark as dcs

    spark = dcs.local_session(f"writer-{args.writer}", "local[1]", {"spark.sql.shuffle.partitions": "1"},
                              quick_start=True)
    # Warm the JVM and the Python workers on the same kind of write, to a scratch table, so that
    # the applications' commits (not their start-up) overlap.
    with tempfile.TemporaryDirectory() as scratch:
        warm = spark.sql(f"select {args.writer} as writer, -1 as batch, id from range(1)")
        dcs.write(warm, scratch, partition_by=["writer"])
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 2
    start = time.time()
    for batch in range(args.commits):
        df = spark.sql(f"select {args.writer} as writer, {batch} as batch, id from range({args.rows})")
        r = dcs.write(df, args.uri, mode="append", app_id=f"writer-{args.writer}", app_version=batch,
                      storage_options=options)
        print(json.dumps({"writer": args.writer, "batch": batch, "version": r.version,
                          "attempts": r.attempts, "skipped": r.skipped}), flush=True)
    print(json.dumps({"done": args.writer, "start": start, "end": time.time()}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
