"""The main job: a PySpark pipeline with several concurrent writers on one local Delta table.

Each writer is a thread of one Spark application that owns one event source.  It runs a sequence
of pipeline stages: most stages ingest a batch of generated events for a day (an append); some
re-run the day's processing and replace that day's partition of its source (an overwrite with a
predicate).  Spark tasks write the Parquet files, the driver commits them through deltacommit, and
every stage carries ``(app_id, app_version)`` so that re-running it is a no-op.  The writers run
at the same time, so their commits race for versions and are retried.

Afterwards the job reads the table back through Spark and checks, partition by partition, that
every event is present exactly once, that overwritten partitions hold only the corrected rows,
and that the log holds exactly one version per stage.

A streaming stage follows: a Structured Streaming query over a folder of event files appends one
micro-batch per file to a second table (``dcs.write_stream``); then the job simulates a crash
between a Delta commit and Spark's own commit log (it deletes the log's last entry), restarts
the query, and checks that Spark's replay of that batch was skipped and every event is present
once.  Run it with ``make demo``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import deltacommit as dc
from deltacommit import spark as dcs

DAYS = ("2026-11-20", "2026-11-21", "2026-11-22")


@dataclass
class Stage:
    kind: str  # "append" | "overwrite"
    day: str


@dataclass
class WriterReport:
    source: str
    appends: int = 0
    overwrites: int = 0
    attempts: int = 0
    seconds: float = 0.0
    versions: list[int] = field(default_factory=list)
    error: BaseException | None = None


def plan(stages: int) -> list[Stage]:
    """Appends cycling over the days; every fourth stage corrects an earlier day instead."""
    out: list[Stage] = []
    for i in range(stages):
        if i % 4 == 3:
            out.append(Stage("overwrite", DAYS[(i // 4) % len(DAYS)]))
        else:
            out.append(Stage("append", DAYS[len([s for s in out if s.kind == "append"]) % len(DAYS)]))
    return out


def event_ids(writer: int, stage: int, rows: int) -> range:
    base = writer * 1_000_000_000 + stage * 1_000_000
    return range(base, base + rows)


def events(spark: Any, source: str, day: str, ids: list[range], corrected: bool) -> Any:
    """Generated events (in the JVM, no Python rows): ids from the given ranges."""
    frames = [spark.range(r.start, r.stop) for r in ids]
    df = frames[0]
    for f in frames[1:]:
        df = df.unionByName(f)
    return df.selectExpr(
        "id as event_id",
        f"'{source}' as source",
        f"date'{day}' as day",
        f"timestamp'{day} 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id % 86400) as ts",
        "cast(id % 997 as int) as user_id",
        "element_at(array('view', 'click', 'buy'), cast(id % 3 as int) + 1) as kind",
        "cast((id % 10000) / 100 as decimal(12, 2)) as amount",
        f"{'true' if corrected else 'false'} as corrected",
    )


def run_writer(spark: Any, table: dc.DeltaTable, writer: int, stages: list[Stage], rows: int,
               start: threading.Barrier, report: WriterReport,
               expected: dict[tuple[str, str], dict[int, bool]]) -> None:
    source = report.source
    ingested: dict[str, list[range]] = {d: [] for d in DAYS}
    mine: dict[tuple[str, str], dict[int, bool]] = {}
    try:
        start.wait()
        t0 = time.perf_counter()
        for i, stage in enumerate(stages):
            if stage.kind == "append":
                ids = [event_ids(writer, i, rows)]
                ingested[stage.day].extend(ids)
                df = events(spark, source, stage.day, ids, corrected=False)
                result = dcs.write(df, table, mode="append", app_id=f"ingest-{source}", app_version=i)
                report.appends += 1
                part = mine.setdefault((source, stage.day), {})
                part.update(dict.fromkeys(ids[0], False))
            else:
                ids = ingested[stage.day] or [range(0)]
                df = events(spark, source, stage.day, ids, corrected=True)
                result = dcs.write(df, table, mode="overwrite",
                                   predicate=f"source = '{source}' AND day = '{stage.day}'",
                                   app_id=f"ingest-{source}", app_version=i)
                report.overwrites += 1
                mine[(source, stage.day)] = {e: True for r in ids for e in r}
            report.attempts += result.attempts
            report.versions.append(result.version)
        report.seconds = time.perf_counter() - t0
        expected.update(mine)
    except BaseException as e:  # reported by the main thread
        report.error = e


def verify(spark: Any, uri: str, expected: dict[tuple[str, str], dict[int, bool]],
           storage_options: dict[str, str]) -> list[str]:
    """Problems found reading the table back through Spark (empty when all is well)."""
    rows = dcs.read(spark, uri, columns=["source", "day", "event_id", "corrected"],
                    storage_options=storage_options).collect()
    found: dict[tuple[str, str], Counter[tuple[int, bool]]] = {}
    for r in rows:
        found.setdefault((r["source"], r["day"].isoformat()), Counter())[(r["event_id"], r["corrected"])] += 1
    problems: list[str] = []
    for key in sorted(set(expected) | set(found)):
        want = Counter(expected.get(key, {}).items())
        got = found.get(key, Counter())
        if got != want:
            lost = want - got
            extra = got - want
            problems.append(f"partition source={key[0]}, day={key[1]}: {sum(lost.values())} rows lost, "
                            f"{sum(extra.values())} rows duplicated or unexpected")
    return problems


def run_pipeline(spark: Any, uri: str, *, writers: int, stages_per_writer: int, rows: int,
                 storage_options: dict[str, str] | None = None) -> bool:
    """Run the pipeline on a new table at ``uri``, print what happened; True if verified."""
    options = storage_options or {}
    sources = [f"s{w}" for w in range(writers)]
    print(f"deltacommit demo: PySpark pipeline, {writers} concurrent writers x {stages_per_writer} "
          f"stages -> {uri} (partitioned by source, day)")

    # The table is created by the first write; this empty one fixes the schema and partitioning.
    created = dcs.write(events(spark, "s0", DAYS[0], [range(0)], corrected=False), uri,
                        partition_by=["source", "day"], storage_options=options)
    table = dc.DeltaTable(uri, storage_options=options)
    stages = plan(stages_per_writer)
    expected: dict[tuple[str, str], dict[int, bool]] = {}
    reports = [WriterReport(s) for s in sources]
    start = threading.Barrier(writers)
    threads = [threading.Thread(target=run_writer, name=f"writer-{s}",
                                args=(spark, table, w, stages, rows, start, reports[w], expected))
               for w, s in enumerate(sources)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0

    failed = [r for r in reports if r.error is not None]
    for r in reports:
        if r.error is not None:
            print(f"  writer {r.source}: FAILED: {type(r.error).__name__}: {r.error}")
            continue
        commits = r.appends + r.overwrites
        print(f"  writer {r.source}: {commits} commits ({r.appends} appends, {r.overwrites} overwrites), "
              f"{r.attempts} attempts, {r.seconds:.1f} s, versions {r.versions[0]}..{r.versions[-1]}")
    commits = sum(r.appends + r.overwrites for r in reports)
    print(f"  {commits} commits in {wall:.1f} s ({commits / wall:.1f} commits/s), "
          f"{sum(r.attempts for r in reports) - commits} lost race(s) retried")

    # Exactly-once: re-running a stage that already committed changes nothing.
    last = len(stages) - 1
    rerun = dcs.write(events(spark, "s0", stages[last].day, [event_ids(0, last, rows)], False),
                      uri, mode="append", app_id="ingest-s0", app_version=last,
                      storage_options=options)
    table.update()
    print(f"  exactly-once: re-running stage {last} of s0 -> "
          f"{'skipped' if rerun.skipped else 'WRITTEN AGAIN'}, version stays {table.version}")

    problems = verify(spark, uri, expected, options)
    final = dc.DeltaTable(uri, storage_options=options)
    total_rows = sum(len(v) for v in expected.values())
    one_day = dcs.read(spark, uri, columns=["event_id"], partition_filters=[("day", "=", DAYS[0])],
                       storage_options=options).count()
    want_one_day = sum(len(v) for (_, d), v in expected.items() if d == DAYS[0])
    print(f"final version {final.version} (1 create + {commits} stage commits), {total_rows} rows in "
          f"{len(final.files())} files; day {DAYS[0]} read with partition pruning: {one_day} rows")
    if one_day != want_one_day:
        problems.append(f"pruned read of {DAYS[0]} gave {one_day} rows, expected {want_one_day}")
    if final.version != created.version + commits:
        problems.append(f"table version {final.version}, expected {created.version + commits}")
    if not rerun.skipped:
        problems.append("the re-run stage was written again")
    if failed:
        problems.append(f"{len(failed)} writer(s) failed")
    if problems:
        print("verification: FAILED")
        for p in problems:
            print(f"  {p}")
    else:
        print("verification: OK: every event present exactly once, overwritten partitions hold only "
              "corrected rows, one version per stage, nothing lost or duplicated")
    return not problems


def run_streaming(spark: Any, workdir: Path, *, batches: int = 4, rows: int = 1000) -> bool:
    """The streaming stage; True if verified."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    inbox, uri, checkpoint = workdir / "inbox", str(workdir / "stream"), workdir / "checkpoint"
    inbox.mkdir(parents=True)

    def arrive(batch: int) -> None:  # a file appears whole: written aside, then renamed in
        ids = pa.array(range(batch * rows, (batch + 1) * rows), pa.int64())
        tmp = inbox / f".{batch}.tmp"
        pq.write_table(pa.table({"event_id": ids, "batch": pa.array([batch] * rows, pa.int32())}),
                       tmp)
        tmp.rename(inbox / f"events-{batch:04d}.parquet")

    def run() -> Any:
        stream = (spark.readStream.schema("event_id long, batch int")
                  .option("maxFilesPerTrigger", 1).parquet(str(inbox)))
        query = dcs.write_stream(stream, uri, checkpoint_location=str(checkpoint),
                                 trigger={"availableNow": True}, query_name="events")
        query.awaitTermination()
        return query

    print(f"streaming stage: {batches} files -> {batches} micro-batches -> {uri}")
    for b in range(batches):
        arrive(b)
    first = run()
    print(f"  query ran batches {[p['batchId'] for p in first.recentProgress]}")
    last_commit = max((p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()),
                      key=lambda p: int(p.name))
    # The crash: Delta committed batch N, Spark never recorded it (neither file nor checksum).
    last_commit.unlink()
    last_commit.with_name(f".{last_commit.name}.crc").unlink(missing_ok=True)
    print(f"  simulated crash: Spark's commit log forgets batch {last_commit.name}; one more "
          "file arrives; query restarted")
    arrive(batches)
    second = run()
    ran = [p["batchId"] for p in second.recentProgress]
    table = dc.DeltaTable(uri)
    committed = table.app_version(second.id)  # batches carry the query's id
    ids = Counter(r["event_id"] for r in
                  dcs.read(spark, uri, columns=["event_id"]).collect())
    want = Counter(range((batches + 1) * rows))
    print(f"  restart ran batches {ran}: batch {ran[0]} replayed and skipped (already committed), "
          f"batch {ran[-1]} committed; last committed batch {committed}, table version "
          f"{table.version}")
    problems = []
    if ids != want:
        problems.append(f"{sum((want - ids).values())} events lost, "
                        f"{sum((ids - want).values())} duplicated")
    if committed != batches or table.version != batches + 1:
        problems.append(f"committed batch {committed} at version {table.version}, expected "
                        f"{batches} at {batches + 1}")
    if problems:
        print("streaming verification: FAILED: " + "; ".join(problems))
    else:
        print(f"streaming verification: OK: {(batches + 1) * rows} events, each exactly once, one "
              "version per micro-batch")
    return not problems


def add_pipeline_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--writers", type=int, default=4, help="concurrent writer threads (sources)")
    ap.add_argument("--stages", type=int, default=8, help="pipeline stages per writer")
    ap.add_argument("--rows", type=int, default=5000, help="events per ingested batch")
    ap.add_argument("--master", default="local[2]")


def start_spark(master: str) -> Any:
    return dcs.local_session("deltacommit-demo", master, {"spark.sql.shuffle.partitions": "2"},
                             quick_start=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pipeline_arguments(ap)
    ap.add_argument("--table", default=None, help="table directory (default: a temporary one)")
    args = ap.parse_args()

    workdir = Path(args.table) if args.table else Path(tempfile.mkdtemp(prefix="deltacommit-demo-"))
    if args.table and workdir.exists():
        shutil.rmtree(workdir)
    t_start = time.perf_counter()
    spark = start_spark(args.master)
    try:
        ok = run_pipeline(spark, str(workdir / "events"), writers=args.writers,
                          stages_per_writer=args.stages, rows=args.rows)
        ok = run_streaming(spark, workdir / "streaming") and ok
    finally:
        spark.stop()
        if not args.table:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"total {time.perf_counter() - t_start:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
