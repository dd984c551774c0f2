"""Compaction beside appenders: deltacommit's optimize.compact against deltalake's, in one run.

For each backend (local disk, S3 on one single-threaded moto) and each library, N appender
processes each write a small append every few milliseconds for ``--seconds`` while the main
process compacts every ``--every`` seconds.  Reported per run (one JSON line each):
appender failures (a write that raised), compaction commits and failures, live files at the
end against the bound 2 x ceil(data size / target size), every acknowledged row exactly once
(read back by both libraries).  deltalake runs the same workload with its own writers and its
own ``optimize.compact``.  Then compaction throughput: the same table of many small files,
copied twice on local disk, compacted once by each library (MB of input rewritten per second,
ratio deltacommit / deltalake).

    .venv/bin/python bench/compaction.py                     # about 3 minutes
    .venv/bin/python bench/compaction.py --seconds 120 --backends local,s3
    .venv/bin/python bench/compaction.py --backends ""       # compaction throughput only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

TARGET = 64 * 1024


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def rows(writer: int, seq: int) -> pa.Table:
    return pa.table({"writer": pa.array([writer], pa.int64()), "seq": pa.array([seq], pa.int64()),
                     "payload": ["x" * 64]})


def worker(lib: str, uri: str, options: dict[str, str], writer: int, seconds: float,
           pause: float) -> None:
    """Append (writer, seq) rows until the time is up; print what was acknowledged."""
    acked: list[int] = []
    failures: list[str] = []
    deadline = time.monotonic() + seconds
    seq = 0
    if lib == "deltacommit":
        import deltacommit as dc

        table: Any = dc.DeltaTable(uri, storage_options=options)
    else:
        import deltalake

        table = deltalake.DeltaTable(uri, storage_options=options)
    while time.monotonic() < deadline:
        seq += 1
        try:
            if lib == "deltacommit":
                dc.write(table, rows(writer, seq))
            else:
                deltalake.write_deltalake(table, rows(writer, seq), mode="append")
            acked.append(seq)
        except Exception as e:  # a failed append is the figure this benchmark counts
            failures.append(f"{type(e).__name__}: {e}"[:300])
            if lib != "deltacommit":
                table.update_incremental()
        time.sleep(pause)
    print(json.dumps({"acked": acked, "failures": failures}), flush=True)


def compact(lib: str, uri: str, options: dict[str, str]) -> tuple[bool, str]:
    """One compaction; (committed something, error or "")."""
    try:
        if lib == "deltacommit":
            import deltacommit as dc

            m = dc.DeltaTable(uri, storage_options=options).optimize.compact(target_size=TARGET)
            return bool(m["versions"]), ""
        import deltalake

        m = deltalake.DeltaTable(uri, storage_options=options).optimize.compact(
            target_size=TARGET)
        return m["numFilesAdded"] > 0, ""
    except Exception as e:
        return False, f"{type(e).__name__}: {e}"[:300]


def run(lib: str, backend: str, uri: str, options: dict[str, str], env: dict[str, str],
        writers: int, seconds: float, every: float, pause: float) -> None:
    schema = pa.schema([("writer", pa.int64()), ("seq", pa.int64()), ("payload", pa.string())])
    if lib == "deltacommit":
        import deltacommit as dc

        dc.DeltaTable.create(uri, schema, storage_options=options)
    else:
        import deltalake

        deltalake.DeltaTable.create(uri, schema, storage_options=options)
    procs = [subprocess.Popen(
        [sys.executable, __file__, "--worker", lib, "--uri", uri, "--options", json.dumps(options),
         "--id", str(w), "--seconds", str(seconds), "--pause", str(pause)],
        stdout=subprocess.PIPE, text=True, env=env) for w in range(writers)]
    compactions = commits = 0
    errors: list[str] = []
    durations: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(every)
        compactions += 1
        t0 = time.perf_counter()
        committed, error = compact(lib, uri, options)
        durations.append(time.perf_counter() - t0)
        commits += committed
        if error:
            errors.append(error)
    acked: dict[int, list[int]] = {}
    failures: list[str] = []
    for w, p in enumerate(procs):
        out, _ = p.communicate(timeout=600)
        report = json.loads(out.strip().splitlines()[-1])
        acked[w] = report["acked"]
        failures += report["failures"]
    # A last compaction with the appenders stopped: the live-file figure of a settled table.
    compact(lib, uri, options)
    import deltalake

    import deltacommit as dc

    ours = dc.DeltaTable(uri, storage_options=options)
    data = ours.to_arrow(columns=["writer", "seq"])
    seen: dict[tuple[int, int], int] = {}
    for wr, sq in zip(data.column("writer").to_pylist(), data.column("seq").to_pylist(),
                      strict=True):
        seen[(wr, sq)] = seen.get((wr, sq), 0) + 1
    expected = {(w, s) for w, seqs in acked.items() for s in seqs}
    lost = len(expected - seen.keys())
    duplicated = sum(1 for k, n in seen.items() if n > 1)
    peer_rows = deltalake.DeltaTable(uri, storage_options=options).to_pyarrow_table().num_rows
    live = ours.files()
    total = sum(a.size for a in live)
    bound = 2 * max(1, math.ceil(total / TARGET))
    emit(bench="compaction_beside_appenders", library=lib, backend=backend, writers=writers,
         seconds=seconds, compact_every_s=every, appends=len(expected),
         appender_failures=len(failures), first_appender_failure=failures[0] if failures else None,
         compactions=compactions, compaction_commits=commits,
         compaction_s_max=round(max(durations), 3) if durations else None, compaction_failures=len(errors),
         first_compaction_failure=errors[0] if errors else None, live_files=len(live),
         live_files_bound=bound, within_bound=len(live) <= bound, lost=lost,
         duplicated=duplicated, deltalake_reads_rows=peer_rows,
         deltalake_reads_all=peer_rows == len(seen))


def throughput(tmp: Path, files: int) -> None:
    """Both libraries compact identical copies of a table of ``files`` small files."""
    import deltalake

    import deltacommit as dc

    src = tmp / "many-small"
    t = dc.DeltaTable.create(str(src), pa.schema([("id", pa.int64()), ("v", pa.string())]))
    for i in range(files):
        dc.write(t, pa.table({"id": pa.array(range(i * 1000, i * 1000 + 1000), pa.int64()),
                              "v": [f"value-{j % 97}" for j in range(1000)]}))
    size = sum(a.size for a in dc.DeltaTable(str(src)).files())
    timings: dict[str, list[float]] = {"deltacommit": [], "deltalake": []}
    for _ in range(3):
        for lib in ("deltacommit", "deltalake"):
            copy = tmp / f"copy-{lib}"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(src, copy)
            t0 = time.perf_counter()
            if lib == "deltacommit":
                dc.DeltaTable(str(copy)).optimize.compact(target_size=256 * 1024 * 1024)
            else:
                deltalake.DeltaTable(str(copy)).optimize.compact(target_size=256 * 1024 * 1024)
            timings[lib].append(time.perf_counter() - t0)
            assert len(dc.DeltaTable(str(copy)).files()) == 1
    best = {k: min(v) for k, v in timings.items()}
    emit(bench="compaction_throughput", files=files, input_mb=round(size / 1e6, 2),
         deltacommit_mb_per_s=round(size / 1e6 / best["deltacommit"], 2),
         deltalake_mb_per_s=round(size / 1e6 / best["deltalake"], 2),
         ratio=round(best["deltalake"] / best["deltacommit"], 2), runs=3, measure="best of 3")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", default="")
    ap.add_argument("--uri", default="")
    ap.add_argument("--options", default="{}")
    ap.add_argument("--id", type=int, default=0)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--every", type=float, default=3.0, help="seconds between compactions")
    ap.add_argument("--pause", type=float, default=0.005, help="seconds between one writer's appends")
    ap.add_argument("--backends", default="local,s3")
    ap.add_argument("--libraries", default="deltacommit,deltalake")
    ap.add_argument("--throughput-files", type=int, default=300)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.uri, json.loads(args.options), args.id, args.seconds,
               args.pause)
        return 0
    import boto3

    from deltacommit.testing import (
        TEST_AWS_ENV,
        MotoServer,
        apply_test_aws_environment,
        s3_storage_options,
        unique_name,
    )

    apply_test_aws_environment()
    env = dict(os.environ)
    env.update(TEST_AWS_ENV)
    env["AWS_ALLOW_HTTP"] = "true"
    with MotoServer() as moto, tempfile.TemporaryDirectory(prefix="dc-compaction-") as tmpdir:
        tmp = Path(tmpdir)
        for backend in [b for b in args.backends.split(",") if b]:  # "" : throughput only
            for lib in args.libraries.split(","):
                if backend == "local":
                    uri, options = str(tmp / f"{lib}-{backend}"), {}
                else:
                    moto.reset()
                    bucket = unique_name("compaction")
                    boto3.client("s3", endpoint_url=moto.endpoint,
                                 region_name="us-east-1").create_bucket(Bucket=bucket)
                    uri, options = f"s3://{bucket}/t", s3_storage_options(moto.endpoint)
                try:
                    run(lib, backend, uri, options, env, args.writers, args.seconds,
                        args.every, args.pause)
                except Exception as e:
                    emit(bench="compaction_beside_appenders", library=lib, backend=backend,
                         error=f"{type(e).__name__}: {e}"[:1000])
        if args.throughput_files:
            throughput(tmp, args.throughput_files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
