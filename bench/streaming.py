"""Structured Streaming into a Delta table against the same stream written as plain Parquet.

One Spark session streams a folder of ``--files`` Parquet files (``--rows`` rows each) with the
``availableNow`` trigger and ``maxFilesPerTrigger=1``, so each file is one micro-batch, into:

- ``deltacommit``: ``dcs.write_stream`` (each batch a Delta commit carrying its ``txn``);
- ``parquet``: ``foreachBatch`` writing the batch with ``batch.write.mode("append").parquet``
  (no table, no commit: the floor any sink pays for writing the files).

Runs alternate between the two, ``--runs`` times each, on fresh outputs and checkpoints.  Each
run is one JSON line (rows/s and batches/s over the query's wall time); the last line holds the
ratios deltacommit/parquet of the medians (goal: >= 0.9).

    .venv/bin/python bench/streaming.py
    .venv/bin/python bench/streaming.py --files 40 --rows 100000 --runs 5
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltacommit import spark as dcs


def make_inbox(folder: Path, files: int, rows: int) -> None:
    folder.mkdir(parents=True)
    for n in range(files):
        ids = pa.array(range(n * rows, (n + 1) * rows), pa.int64())
        pq.write_table(pa.table({"id": ids, "day": pa.array([n % 7] * rows, pa.int32()),
                                 "v": pa.compute.multiply(ids, 3)}), folder / f"f-{n:05d}.parquet")


def run_once(spark: Any, library: str, inbox: Path, work: Path) -> float:
    stream = (spark.readStream.schema("id long, day int, v long")
              .option("maxFilesPerTrigger", 1).parquet(str(inbox)))
    checkpoint, out = work / "checkpoint", work / "out"
    t0 = time.perf_counter()
    if library == "deltacommit":
        query = dcs.write_stream(stream, str(out), checkpoint_location=str(checkpoint),
                                 trigger={"availableNow": True})
    else:
        def sink(batch: Any, batch_id: int) -> None:
            batch.write.mode("append").parquet(str(out))

        query = (stream.writeStream.option("checkpointLocation", str(checkpoint))
                 .foreachBatch(sink).trigger(availableNow=True).start())
    query.awaitTermination()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    spark = dcs.local_session("bench-streaming", args.master, {"spark.sql.shuffle.partitions": "2"})
    root = Path(tempfile.mkdtemp(prefix="bench-streaming-"))
    try:
        inbox = root / "inbox"
        make_inbox(inbox, args.files, args.rows)
        # Warm-up: JVM, Python workers and the streaming machinery, not timed.
        run_once(spark, "deltacommit", inbox, root / "warm-dc")
        run_once(spark, "parquet", inbox, root / "warm-pq")
        times: dict[str, list[float]] = {"deltacommit": [], "parquet": []}
        for i in range(args.runs):
            for library in ("deltacommit", "parquet"):
                seconds = run_once(spark, library, inbox, root / f"{library}-{i}")
                times[library].append(seconds)
                total = args.files * args.rows
                print(json.dumps({"library": library, "run": i, "batches": args.files,
                                  "rows": total, "seconds": round(seconds, 3),
                                  "rows_per_s": round(total / seconds),
                                  "batches_per_s": round(args.files / seconds, 2)}), flush=True)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(json.dumps({"ratio_rows_per_s_deltacommit_over_parquet":
                          round(med["parquet"] / med["deltacommit"], 3),
                          "median_s": {k: round(v, 3) for k, v in med.items()}}), flush=True)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
