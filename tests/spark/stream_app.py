"""A separate Spark application streaming a folder of files into a Delta table.

Started as its own process (its own driver, as a separate cluster would be).  It prints
``ready`` once Spark and its Python workers are warm, waits for ``go`` on stdin (so that several
applications start together, without sleeps), runs ``dcs.write_stream`` with the
``availableNow`` trigger (one micro-batch per file) and prints a final JSON line with the batch
ids Spark ran.  Storage options come as JSON in ``DC_STORAGE_OPTIONS``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--uri", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--name", required=True)
    args = ap.parse_args()
    options = json.loads(os.environ.get("DC_STORAGE_OPTIONS", "{}"))

    from deltacommit import spark as dcs

    spark = dcs.local_session(f"stream-{args.name}", "local[1]",
                              {"spark.sql.shuffle.partitions": "1"}, quick_start=True)
    with tempfile.TemporaryDirectory() as scratch:
        dcs.write(spark.sql("select 0L as writer, 0L as batch"), scratch)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 2
    stream = (spark.readStream.schema("writer long, batch long").option("maxFilesPerTrigger", 1)
              .parquet(args.source))
    query = dcs.write_stream(stream, args.uri, checkpoint_location=args.checkpoint,
                             trigger={"availableNow": True}, query_name=args.name,
                             storage_options=options)
    query.awaitTermination()
    print(json.dumps({"done": args.name, "batches": [p["batchId"] for p in query.recentProgress]}),
          flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
