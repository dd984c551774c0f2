"""A Spark application whose executors run a Python without deltacommit.

Run as its own process (a SparkContext per process): ``--master`` for a classic session (the
tests use ``local-cluster``: executors are separate JVMs whose Python workers run
``PYSPARK_PYTHON``) or ``--remote`` for a Spark Connect server.  It appends, re-runs the same
stage (which must be skipped), overwrites one partition, reads the table back through Spark, and
prints one JSON line with what happened.  With ``--stream SOURCE --checkpoint CHECKPOINT`` it
instead streams the folder SOURCE into the table (``dcs.write_stream``, one micro-batch per
file, ``availableNow``) and prints the query's id and the batch ids it ran.  With
``--rowlevel`` it runs a MERGE, an UPDATE and a DELETE whose rewrites are tasks and prints the
rows left (in a plan, ``rowlevel-tracked`` runs them on a table with deletion vectors and row
tracking, each beside a concurrent append it must not abort on).  With ``--plan`` it runs
several of those jobs (the pipeline, or the row-level run) in this one application, each on
its own table with its own storage options, and prints one line for each, named: one cluster
serves them all, as it would a user's application of several jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--uri")
    ap.add_argument("--plan", help="a JSON list of jobs ({name, job: pipeline or rowlevel, "
                    "uri, options}) run one after the other in this application")
    ap.add_argument("--master")
    ap.add_argument("--remote")
    ap.add_argument("--no-ship", action="store_true",
                    help="turn shipping off and print the error the write meets")
    ap.add_argument("--stream", help="a folder of Parquet files (id long, day int) to stream")
    ap.add_argument("--checkpoint", help="the streaming query's checkpoint location")
    ap.add_argument("--rowlevel", action="store_true",
                    help="MERGE, UPDATE and DELETE a table of 30 rows, print its rows")
    args = ap.parse_args()
    opts = json.loads(os.environ.get("DC_STORAGE_OPTIONS", "{}"))

    from pyspark.sql import SparkSession

    from deltacommit import spark as dcs

    if args.remote:
        spark = SparkSession.builder.remote(args.remote).getOrCreate()
    else:
        spark = dcs.local_session("shipped", args.master, {
            "spark.executor.memory": "512m", "spark.sql.shuffle.partitions": "2",
        }, quick_start=True)
    if args.plan:
        for job in json.loads(args.plan):
            run = {"rowlevel": _row_level, "rowlevel-tracked": _row_level_tracked,
                   "pipeline": _pipeline}[job["job"]]
            print(json.dumps({"job": job["name"], **run(spark, job["uri"], job["options"])}),
                  flush=True)
        spark.stop()
        return 0
    if args.stream:
        stream = (spark.readStream.schema("id long, day int").option("maxFilesPerTrigger", 1)
                  .parquet(args.stream))
        query = dcs.write_stream(stream, args.uri, checkpoint_location=args.checkpoint,
                                 trigger={"availableNow": True}, storage_options=opts)
        query.awaitTermination()
        failure = query.exception()
        print(json.dumps({"query_id": str(query.id),
                          "batches": [p["batchId"] for p in query.recentProgress],
                          "error": str(failure) if failure is not None else None}), flush=True)
        spark.stop()
        return 0
    if args.rowlevel:
        print(json.dumps(_row_level(spark, args.uri, opts)), flush=True)
        spark.stop()
        return 0
    if args.no_ship:
        from deltacommit.errors import DeltaCommitError

        spark.conf.set("spark.deltacommit.shipPackage", "false")
        try:
            dcs.write(spark.sql("select 1 as id"), args.uri, storage_options=opts)
        except DeltaCommitError as e:
            print(json.dumps({"error": str(e)}), flush=True)
            return 0
        print(json.dumps({"error": None}), flush=True)
        return 1
    print(json.dumps(_pipeline(spark, args.uri, opts)), flush=True)
    spark.stop()
    return 0


def _pipeline(spark, uri, opts):  # type: ignore[no-untyped-def]
    """An append, the same stage re-run (skipped), one partition overwritten, the table read."""
    from deltacommit import spark as dcs

    first = spark.sql("select id, cast(id % 3 as int) as day from range(30)")
    r1 = dcs.write(first, uri, partition_by=["day"], app_id="job", app_version=1,
                   storage_options=opts)
    again = dcs.write(first, uri, partition_by=["day"], app_id="job", app_version=1,
                      storage_options=opts)
    day0 = spark.sql("select 1000 + id as id, 0 as day from range(5)")
    r3 = dcs.write(day0, uri, mode="overwrite", predicate="day = 0", storage_options=opts)
    rows = dcs.read(spark, uri, storage_options=opts).orderBy("id").collect()
    worker = spark.range(1).mapInArrow(_worker_python, "exe string, has_package boolean").collect()
    return {"first_version": r1.version, "rerun_skipped": again.skipped,
            "overwrite_version": r3.version, "rows": [[r["id"], r["day"]] for r in rows],
            "worker_python": worker[0]["exe"],
            "worker_has_installed_package": worker[0]["has_package"]}


def _row_level(spark, uri, opts, configuration=None):  # type: ignore[no-untyped-def]
    """An upsert MERGE (with a matched delete), an UPDATE and a DELETE, all in tasks."""
    from deltacommit import spark as dcs

    dcs.write(spark.sql("select id, cast(id % 3 as int) as day, 0L as n from range(30)"), uri,
              partition_by=["day"], storage_options=opts, configuration=configuration)
    source = spark.sql("select id, cast(id % 3 as int) as day, 1L as n from range(20, 40)")
    merged = (dcs.merge(source, uri, "t.id = s.id", source_alias="s", target_alias="t",
                        storage_options=opts)
              .when_matched_delete("s.id = 25").when_matched_update_all()
              .when_not_matched_insert_all().execute())
    updated = dcs.update(uri, {"n": "n + 10"}, "id < 5", spark=spark, storage_options=opts)
    deleted = dcs.delete(uri, "id >= 35", spark=spark, storage_options=opts)
    rows = dcs.read(spark, uri, storage_options=opts).orderBy("id").collect()
    worker = spark.range(1).mapInArrow(_worker_python, "exe string, has_package boolean").collect()
    return {"merged": [merged["num_target_rows_updated"], merged["num_target_rows_deleted"],
                       merged["num_target_rows_inserted"]],
            "updated": updated["num_updated_rows"], "deleted": deleted["num_deleted_rows"],
            "rows": [[r["id"], r["day"], r["n"]] for r in rows],
            "worker_python": worker[0]["exe"],
            "worker_has_installed_package": worker[0]["has_package"]}


def _row_level_tracked(spark, uri, opts):  # type: ignore[no-untyped-def]
    """The row-level run on a table with deletion vectors and row tracking, each verb
    committing just after a concurrent append of a row it does not match (ids 10, 11, 12,
    outside every verb's rows): checked row by row, from the rows its tasks reported (on
    executors or Connect workers without deltacommit installed), none aborts."""
    import pyarrow as pa

    import deltacommit as dc
    from deltacommit.engine.transaction.transaction import Transaction

    real = Transaction.commit
    appended: dict[str, int] = {}

    def commit(txn):  # type: ignore[no-untyped-def]
        if txn.operation in ("MERGE", "UPDATE", "DELETE") and txn.operation not in appended:
            appended[txn.operation] = key = 10 + len(appended)
            dc.write(uri, pa.table({"id": pa.array([key], pa.int64()),
                                    "day": pa.array([key % 3], pa.int32()),
                                    "n": pa.array([7], pa.int64())}),
                     mode="append", storage_options=opts)
        return real(txn)

    Transaction.commit = commit
    try:
        result = _row_level(spark, uri, opts, {"delta.enableDeletionVectors": "true",
                                               "delta.enableRowTracking": "true"})
    finally:
        Transaction.commit = real
    history = dc.DeltaTable(uri, storage_options=opts).history()
    result["rebased"] = sorted(h["operation"] for h in history
                               if h.get("operation") in appended
                               and int(h["readVersion"]) < int(h["version"]) - 1)
    result["appended"] = sorted(appended.values())
    return result


def _worker_python(batches):  # type: ignore[no-untyped-def]
    """Which Python the executor runs, and whether deltacommit is installed in it (as opposed
    to shipped by the job: the shipped zip is on sys.path under Spark's files directory)."""
    import importlib.util
    import sys

    import pyarrow as pa

    for _ in batches:
        spec = importlib.util.find_spec("deltacommit")
        installed = spec is not None and ".zip" not in (spec.origin or "")
        yield pa.RecordBatch.from_pydict({"exe": [sys.executable], "has_package": [installed]})


if __name__ == "__main__":
    sys.exit(main())
