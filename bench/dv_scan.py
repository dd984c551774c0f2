"""Scanning a table whose deletion vectors delete 10% of its rows: deltacommit versus deltalake.

One run builds a local table of ``--rows`` rows (``id`` int64, ``v`` float64, ``s`` string) in
files of ``--file-rows`` rows, then commits, in one version, a deletion vector per file (one DV
file at the table root, ``'u'`` descriptors, as Spark's DELETE writes them) marking a random
``--deleted`` fraction of each file's rows.  It then times full scans, alternating libraries:

- ``deltacommit``: ``DeltaTable(uri).to_arrow()``;
- ``deltalake``: deltalake 1.6.0's ``QueryBuilder`` ``select * from t`` (its pyarrow dataset
  refuses deletion vectors), collected into one Arrow table.

Each measurement is one JSON line on stdout (best and median of ``--runs`` scans, rows
returned); the last line holds the ratio deltacommit/deltalake of the best times.

    .venv/bin/python bench/dv_scan.py                 # 10M rows, 10% deleted
    .venv/bin/python bench/dv_scan.py --rows 1000000  # quicker
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import deltalake
import numpy as np
import pyarrow as pa

import deltacommit as dc
from deltacommit.protocol.actions import Add, Protocol
from deltacommit.protocol.deletion_vectors import (
    encode_bitmap_array,
    encode_file,
    relative_dv_path_or_inline,
)


def build(uri: str, rows: int, file_rows: int, deleted: float, seed: int) -> int:
    """The table; returns the number of rows left visible."""
    rng = np.random.default_rng(seed)
    ids = np.arange(rows, dtype=np.int64)
    data = pa.table({"id": ids, "v": rng.random(rows),
                     "s": pa.array(np.char.add("row", (ids % 1000).astype(str)))})
    dc.write(uri, data, target_file_rows=file_rows)
    t = dc.DeltaTable(uri)
    files = t.files()
    bitmaps = []
    counts = []
    for a in files:
        n = a.num_records() or 0
        chosen = rng.choice(n, size=int(n * deleted), replace=False)
        bitmaps.append(encode_bitmap_array(chosen))
        counts.append(len(chosen))
    content, offsets = encode_file(bitmaps)
    uid = uuid.uuid4()
    (Path(uri) / f"deletion_vector_{uid}.bin").write_bytes(content)
    key = relative_dv_path_or_inline("", uid)
    with t.transaction("DELETE") as txn:
        txn.update_protocol(Protocol(3, 7, ["deletionVectors"], ["deletionVectors"]))
        txn.remove(files)
        txn.add([Add(a.path, a.partition_values, a.size, a.modification_time, stats=a.stats,
                     deletion_vector={"storageType": "u", "pathOrInlineDv": key, "offset": off,
                                      "sizeInBytes": len(b), "cardinality": c})
                 for a, b, off, c in zip(files, bitmaps, offsets, counts, strict=True)])
    return rows - sum(counts)


def scan_deltacommit(uri: str) -> int:
    return dc.DeltaTable(uri).to_arrow().num_rows


def scan_deltalake(uri: str) -> int:
    table = deltalake.DeltaTable(uri)
    reader = deltalake.QueryBuilder().register("t", table).execute("select * from t")
    return pa.table(reader.read_all()).num_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--file-rows", type=int, default=1_000_000)
    ap.add_argument("--deleted", type=float, default=0.10)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=18)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "dv_table")
        t0 = time.perf_counter()
        visible = build(uri, args.rows, args.file_rows, args.deleted, args.seed)
        print(json.dumps({"stage": "build", "rows": args.rows, "visible_rows": visible,
                          "files": len(dc.DeltaTable(uri).files()),
                          "seconds": round(time.perf_counter() - t0, 3)}), flush=True)
        times: dict[str, list[float]] = {"deltacommit": [], "deltalake": []}
        scans: dict[str, Any] = {"deltacommit": scan_deltacommit, "deltalake": scan_deltalake}
        for _ in range(args.runs):
            for name, scan in scans.items():
                t0 = time.perf_counter()
                n = scan(uri)
                times[name].append(time.perf_counter() - t0)
                if n != visible:
                    raise SystemExit(f"{name} returned {n} rows, expected {visible}")
        for name, ts in times.items():
            print(json.dumps({"library": name, "rows_returned": visible, "runs": len(ts),
                              "best_s": round(min(ts), 4),
                              "median_s": round(statistics.median(ts), 4)}), flush=True)
        print(json.dumps({"ratio_best_deltacommit_over_deltalake":
                          round(min(times["deltacommit"]) / min(times["deltalake"]), 3),
                          "ratio_median": round(statistics.median(times["deltacommit"])
                                                / statistics.median(times["deltalake"]), 3)}),
              flush=True)


if __name__ == "__main__":
    main()
