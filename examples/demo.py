"""The main job: several writer processes append to one local Delta table at the same time.

Each writer appends batches of events tagged with its id and a batch number; afterwards the job
reads the table back and checks that every batch is present exactly once and that the log has
one version per commit.  Run it with ``make demo``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa

import deltacommit as dc

SCHEMA = pa.schema([
    ("writer", pa.int32()),
    ("batch", pa.int32()),
    ("event_id", pa.int64()),
    ("day", pa.string()),
    ("amount", pa.float64()),
])


def batch(writer: int, n: int, rows: int) -> pa.Table:
    base = (writer * 1_000_000) + n * rows
    return pa.table({
        "writer": pa.array([writer] * rows, pa.int32()),
        "batch": pa.array([n] * rows, pa.int32()),
        "event_id": pa.array(range(base, base + rows), pa.int64()),
        "day": pa.array([f"2026-11-{20 + (n % 3):02d}"] * rows),
        "amount": pa.array([float(i % 97) for i in range(rows)]),
    }, schema=SCHEMA)


def writer_main(uri: str, writer: int, batches: int, rows: int, start: mp.synchronize.Event,
                results: mp.Queue[tuple[int, int, int, float]]) -> None:
    table = dc.DeltaTable(uri)
    start.wait()
    attempts = 0
    t0 = time.perf_counter()
    for n in range(batches):
        r = dc.write(table, batch(writer, n, rows), mode="append")
        attempts += r.attempts
    results.put((writer, batches, attempts, time.perf_counter() - t0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--writers", type=int, default=6)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--table", default=None, help="table directory (default: a temporary one)")
    args = ap.parse_args()

    workdir = Path(args.table) if args.table else Path(tempfile.mkdtemp(prefix="deltacommit-demo-"))
    if workdir.exists() and args.table:
        shutil.rmtree(workdir)
    uri = str(workdir)
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["day"])
    print(f"table {uri}: {args.writers} writer processes x {args.batches} appends")

    ctx = mp.get_context("spawn")
    start = ctx.Event()
    results: mp.Queue[tuple[int, int, int, float]] = ctx.Queue()
    procs = [ctx.Process(target=writer_main, args=(uri, w, args.batches, args.rows, start, results))
             for w in range(args.writers)]
    for p in procs:
        p.start()
    t0 = time.perf_counter()
    start.set()
    per_writer = [results.get() for _ in procs]
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0

    for w, n, attempts, secs in sorted(per_writer):
        print(f"  writer {w}: {n} commits, {attempts} attempts, {secs:.2f} s")
    table = dc.DeltaTable(uri)
    data = table.to_arrow(columns=["writer", "batch"])
    counts = Counter(zip(data.column("writer").to_pylist(), data.column("batch").to_pylist(),
                         strict=True))
    expected = {(w, n) for w in range(args.writers) for n in range(args.batches)}
    missing = expected - set(counts)
    duplicated = {k: c for k, c in counts.items() if c != args.rows}
    commits = args.writers * args.batches
    print(f"final version {table.version} (expected {commits}), {data.num_rows} rows, "
          f"{commits / wall:.0f} commits/s")
    ok = table.version == commits and not missing and not duplicated
    print(f"verification: {'OK' if ok else 'FAILED'}: every batch present exactly once"
          if ok else f"verification: FAILED: missing {sorted(missing)[:5]}, wrong counts {duplicated}")
    if not args.table:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
