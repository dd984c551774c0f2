"""Upserts of many keys beside a stream of appends of other keys: the change-data-capture case.

A table of ``--rows`` rows holds the even ids; ``--merges`` upserts, one after another in one
process, each MERGE ``--keys`` random even ids (matched rows updated, the keys beyond the table
inserted), while an appender process commits batches of 5 random odd ids (inside the range of
every MERGE's keys, never one of them) as fast as it can.  A MERGE that fails with a
``ConcurrentModificationException`` counts as an aborted attempt and runs again, up to
``--attempts`` times.

Two modes on fresh copies of the same table: ``row-level`` (deletion vectors and row tracking:
a MERGE records every key it read and the check reads the appender's new rows by value) and
``file-level`` (row tracking off: Spark's rules, under which an append to a file list the MERGE
read conflicts).  One JSON line per mode and key count: aborted attempts, MERGEs given up,
the median seconds of one MERGE from its first attempt to its commit (or giving up), appends
committed meanwhile, and whether the final table equals the serial result (every
acknowledged append once, every key carrying the value of the last MERGE of it that landed).

    .venv/bin/python bench/merge_beside_appends.py
    .venv/bin/python bench/merge_beside_appends.py --keys 2000,20000,100000 --merges 5
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import deltacommit as dc
from deltacommit.errors import ConcurrentModificationException

ROW_LEVEL = {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"}
FILE_LEVEL = {"delta.enableDeletionVectors": "true"}
#: Bound on waits for the appender process.
PATIENCE_S = 300.0


def _appender(uri: str, span: int, seed: int, started: Any, stop: Any, out: Any) -> None:
    rng = np.random.default_rng(seed)
    appended: list[int] = []
    started.set()
    while not stop.is_set():
        ids = (rng.choice(span // 2, 5, replace=False) * 2 + 1).astype(np.int64)
        dc.write(uri, pa.table({"id": ids, "v": pa.array([-1] * 5, pa.int64())}),
                 mode="append")
        appended.extend(int(i) for i in ids)
    out.put(appended)


def one_run(uri: str, *, row_level: bool, rows: int, keys: int, merges: int,
            attempts: int, seed: int) -> dict[str, Any]:
    """The workload on a new table at ``uri``; its figures.  A MERGE still aborted after
    ``attempts`` attempts is given up (``merges_given_up``)."""
    span = 2 * rows
    dc.write(uri, pa.table({"id": np.arange(0, span, 2, dtype=np.int64),
                            "v": np.zeros(rows, dtype=np.int64)}),
             configuration=ROW_LEVEL if row_level else FILE_LEVEL, target_file_rows=5_000)
    rng = np.random.default_rng(seed)
    sources = [np.sort(rng.choice(span, keys, replace=False) // 2 * 2).astype(np.int64)
               for _ in range(merges)]
    ctx = multiprocessing.get_context("fork")
    started, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    appender = ctx.Process(target=_appender, args=(uri, span, seed + 1, started, stop, out))
    appender.start()
    aborted = 0
    landed: list[int] = []
    seconds: list[float] = []
    try:
        started.wait(PATIENCE_S)
        for n, ids in enumerate(sources, start=1):
            ids = np.unique(ids)
            source = pa.table({"id": ids, "v": np.full(len(ids), n, dtype=np.int64)})
            begun = time.monotonic()
            for _ in range(attempts):
                try:
                    dc.DeltaTable(uri).merge(source, "t.id = s.id", "s", "t") \
                        .when_matched_update({"v": "s.v"}).when_not_matched_insert_all() \
                        .execute()
                    landed.append(n)
                    break
                except ConcurrentModificationException:
                    aborted += 1
            seconds.append(time.monotonic() - begun)
        stop.set()
        appended: list[int] = out.get(timeout=PATIENCE_S)
    finally:
        stop.set()
        appender.join(PATIENCE_S)
        if appender.is_alive():
            appender.kill()
            appender.join()
    expected: dict[int, int] = {int(i): 0 for i in range(0, span, 2)}
    for n in landed:
        expected.update({int(i): n for i in sources[n - 1]})
    final = dc.DeltaTable(uri).to_arrow().sort_by("id")
    got = list(zip(final.column("id").to_pylist(), final.column("v").to_pylist(), strict=True))
    want = sorted([*expected.items(), *((i, -1) for i in appended)])
    return {"bench": "merge_beside_appends", "mode": "row-level" if row_level else "file-level",
            "rows": rows, "keys": keys, "merges": merges, "aborted_attempts": aborted,
            "merges_given_up": merges - len(landed),
            "merge_p50_s": round(statistics.median(seconds), 3),
            "appends": len(appended) // 5, "equals_serial": got == want}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--keys", default="2000,20000")
    parser.add_argument("--merges", type=int, default=5)
    parser.add_argument("--attempts", type=int, default=10)
    parser.add_argument("--modes", default="row-level,file-level")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    for keys in (int(k) for k in args.keys.split(",")):
        for mode in args.modes.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                line = one_run(str(Path(tmp) / "t"), row_level=mode == "row-level",
                               rows=args.rows, keys=keys, merges=args.merges,
                               attempts=args.attempts, seed=args.seed)
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
