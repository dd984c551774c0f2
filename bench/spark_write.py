"""deltacommit.spark.write versus Spark's own partitioned Parquet writer, same session, same data.

Both sides write the same cached DataFrame (``--rows`` rows over ``--days`` dates) partitioned by
its date column, alternating so that load on the machine hits both alike.  Two pairings:

* ``deltacommit`` (``repartition=False``) against ``df.write.partitionBy("day").parquet``: the same
  layout, one file per date per task.  This is the like-for-like cost of writing through Python
  tasks plus the Delta commit.
* ``deltacommit_rebalanced`` (the default, ``repartition=True``) against
  ``df.hint("rebalance", "day").write.partitionBy("day").parquet``: both shuffle first, so each
  date is written by one task (a few files per date instead of one per task and date).

Prints one JSON line per measurement, then one summary line per pairing with median seconds and
the ratio (target: deltacommit within 1.15x of Spark).  Each measurement also reports the CPU
seconds used by the Spark JVM, its Python workers and this driver: on a shared machine whose load
varies, wall-clock times wander by 2x between runs while CPU seconds stay comparable.

    .venv/bin/python bench/spark_write.py --rows 10000000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deltacommit as dc
from deltacommit import spark as dcs
from deltacommit.testing import proc_stat

PAIRS = (("deltacommit", "spark_parquet"), ("deltacommit_rebalanced", "spark_parquet_rebalanced"))


def make_frame(spark: Any, rows: int, days: int) -> Any:
    from pyspark.sql import functions as F

    return spark.range(rows).select(
        F.col("id"),
        F.expr(f"date_add(date'2026-01-01', cast(id % {days} as int))").alias("day"),
        (F.col("id") % 1000).alias("user_id"),
        (F.rand(7) * 100).alias("amount"),
        F.concat(F.lit("category-"), (F.col("id") % 17).cast("string")).alias("category"),
    )


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds used so far by ``root`` (the Spark JVM) and every process below it (the
    Python daemon and workers), plus this driver process: comparable under a noisy load where
    wall-clock times are not."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st is not None:
                stats[int(entry)] = (st[0], st[1] + st[2])  # with its reaped children
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        if pid in stats:
            total += stats[pid][1]
        stack.extend(children.get(pid, []))
    me = os.times()
    return total + me.user + me.system


def tree_size(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*.parquet") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--shuffle-partitions", type=int, default=8)
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    args = ap.parse_args()

    spark = dcs.local_session("deltacommit-bench", args.master, {
        "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
        "spark.driver.memory": args.driver_memory,
    })
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="deltacommit-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    df = make_frame(spark, args.rows, args.days).cache()
    assert df.count() == args.rows

    def target(name: str) -> Path:
        path = base / name
        shutil.rmtree(path, ignore_errors=True)
        return path

    variants: dict[str, Callable[[Any, Path], None]] = {
        "spark_parquet": lambda d, p: d.write.mode("overwrite").partitionBy("day").parquet(str(p)),
        "deltacommit": lambda d, p: _dc(d, p, repartition=False),
        "spark_parquet_rebalanced": lambda d, p: d.hint("rebalance", "day").write.mode("overwrite")
        .partitionBy("day").parquet(str(p)),
        "deltacommit_rebalanced": lambda d, p: _dc(d, p, repartition=True),
    }
    # Warm up the JVM and the Python workers on a small write of each kind (not measured).
    small = df.limit(100_000)
    for name, fn in variants.items():
        fn(small, target(f"warmup-{name}"))

    jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpus: dict[str, list[float]] = {name: [] for name in variants}
    for run in range(args.repeats):
        for name, fn in variants.items():
            path = target(name)
            load = os.getloadavg()[0]
            cpu0 = tree_cpu_seconds(jvm)
            t0 = time.perf_counter()
            fn(df, path)
            secs = time.perf_counter() - t0
            cpu = tree_cpu_seconds(jvm) - cpu0
            files, size = tree_size(path)
            times[name].append(secs)
            cpus[name].append(cpu)
            print(json.dumps({"bench": "spark_write", "variant": name, "run": run, "rows": args.rows,
                              "days": args.days, "seconds": round(secs, 3), "cpu_seconds": round(cpu, 2),
                              "files": files, "bytes": size, "load_avg_1m": round(load, 2),
                              "master": args.master}), flush=True)
    for ours, theirs in PAIRS:
        mine, spark_s = statistics.median(times[ours]), statistics.median(times[theirs])
        mine_cpu, spark_cpu = statistics.median(cpus[ours]), statistics.median(cpus[theirs])
        print(json.dumps({"bench": "spark_write", "summary": f"{ours} vs {theirs}", "rows": args.rows,
                          "median_seconds": {ours: round(mine, 3), theirs: round(spark_s, 3)},
                          "ratio": round(mine / spark_s, 3),
                          "median_cpu_seconds": {ours: round(mine_cpu, 2), theirs: round(spark_cpu, 2)},
                          "cpu_ratio": round(mine_cpu / spark_cpu, 3), "target_ratio": 1.15,
                          "within_target": mine / spark_s <= 1.15}), flush=True)
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    spark.stop()
    return 0


def _dc(df: Any, path: Path, *, repartition: bool) -> None:
    result = dcs.write(df, str(path), partition_by=["day"], repartition=repartition)
    if result.version != 1 or dc.DeltaTable(str(path)).version != 1:
        raise SystemExit(f"unexpected table version after the write to {path}: {result}")


if __name__ == "__main__":
    sys.exit(main())
