"""Cold start: what a fresh process (a Lambda function, a queue consumer) pays, against deltalake.

``write``
    A fresh Python process imports the library and appends one small batch by URI
    (``dc.write(uri, data)`` vs ``deltalake.write_deltalake(uri, data, mode="append")``) to a
    table of 20 versions on one single-threaded moto, with S3 conditional writes
    (``s3-conditional``) and with the DynamoDB log store (``s3-dynamodb``).  Each library
    appends to its own table (created alike, so both grow by one version a run).  pyarrow is
    imported and the batch built before the clock starts (a handler has its data either way),
    and modules load from compiled bytecode, as an installed package's do (each library's
    first run, untimed, compiles it where ``PYTHONDONTWRITEBYTECODE`` would have prevented it);
    ``import_s`` is the library's import, ``write_s`` the first write, ``seconds`` both.  The
    runs alternate between the libraries, ``--runs`` of each (7), and the line gives medians
    and ``ratio`` = deltacommit's median over deltalake's.  ``requests`` counts what one cold
    write sends to the server (seen by a counting proxy in front of moto, one extra run each,
    not timed).
``get_add_actions``
    A fresh process imports the library's ``DeltaTable`` (not timed: ``from deltacommit import
    DeltaTable`` loads the table facade, which ``import deltacommit`` alone defers) and calls
    ``DeltaTable(path).get_add_actions()`` once on a local table of ``--files`` live files
    (100,000), its state in one checkpoint (``snapshot_load.build_wide``), then a second time
    (``warm_s``).  Same alternation, medians and ratio.

Each measurement is one JSON line on stdout.

    .venv/bin/python bench/cold_start.py [--runs 7] [--files 100000] [--only write,get_add_actions]
        [--baseline-src OTHER/src]   # also an earlier deltacommit (another checkout's src), as
                                     # "baseline", in the same alternation
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LIBRARIES = ("deltacommit", "deltalake")
BACKENDS = ("s3-conditional", "s3-dynamodb")
VERSIONS = 20

#: One cold write; prints its timings as JSON.  It imports only the library it measures.
WRITE_CHILD = """
import json, sys, time
import pyarrow as pa
library, uri, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
batch = pa.table({"writer": pa.array([1], pa.int64()), "seq": pa.array([1], pa.int64()),
                  "payload": pa.array(["cold"], pa.string())})
t0 = time.perf_counter()
if library == "deltacommit":
    import deltacommit as dc
    t1 = time.perf_counter()
    dc.write(uri, batch, storage_options=options)
else:
    import deltalake
    t1 = time.perf_counter()
    deltalake.write_deltalake(uri, batch, mode="append", storage_options=options)
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "write_s": t2 - t1, "seconds": t2 - t0}))
"""

#: One cold ``get_add_actions`` (import not timed), then a second call of the same process.
ADD_ACTIONS_CHILD = """
import json, sys, time
import pyarrow as pa
library, path = sys.argv[1], sys.argv[2]
if library == "deltacommit":
    from deltacommit import DeltaTable
    call = lambda: DeltaTable(path).get_add_actions().num_rows
else:
    from deltalake import DeltaTable
    call = lambda: pa.table(DeltaTable(path).get_add_actions()).num_rows
t0 = time.perf_counter()
rows = call()
t1 = time.perf_counter()
call()
t2 = time.perf_counter()
print(json.dumps({"rows": rows, "seconds": t1 - t0, "warm_s": t2 - t1}))
"""


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def child_env(env: dict[str, str], label: str, baseline_src: str | None) -> dict[str, str]:
    """The environment of a child measuring ``label``: the baseline imports deltacommit from
    ``baseline_src``."""
    if label != "baseline" or baseline_src is None:
        return env
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [baseline_src,
                                                               env.get("PYTHONPATH")]))}


def library_of(label: str) -> str:
    return "deltacommit" if label == "baseline" else label


def child(script: str, *args: str, env: dict[str, str]) -> tuple[dict[str, Any], float]:
    """Run ``script`` in a fresh interpreter (outside the repository, so nothing is imported
    from the working folder by accident); its JSON line and the process's wall time."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", script, *args], check=True, capture_output=True,
                         text=True, env=env, cwd=tempfile.gettempdir()).stdout
    return json.loads(out.strip().splitlines()[-1]), time.perf_counter() - t0


def medians(runs: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in runs), 4) for k in keys}


# --------------------------------------------------------------------------- writes on moto


def prepare_tables(moto: Any, backend: str,
                   labels: tuple[str, ...]) -> dict[str, tuple[str, dict[str, str]]]:
    """A 20-version table per label on ``moto``, and the options that reach it."""
    import pyarrow as pa

    import deltacommit as dc
    from deltacommit.testing.locations import new_s3_location

    bucket_uri, options = new_s3_location(moto.endpoint, "cold",
                                          dynamodb=backend == "s3-dynamodb")
    batch = pa.table({"writer": pa.array([0], pa.int64()), "seq": pa.array([0], pa.int64()),
                      "payload": pa.array(["seed"], pa.string())})
    tables = {}
    for label in labels:
        uri = f"{bucket_uri}/{label}"
        table = dc.DeltaTable.create(uri, batch.schema, storage_options=options)
        for _ in range(VERSIONS - 1):
            dc.write(table, batch)
        tables[label] = (uri, options)
    return tables


def count_requests(moto: Any, uri: str, options: dict[str, str], library: str,
                   env: dict[str, str]) -> dict[str, int]:
    """What one cold write of ``library`` sends to the server, by method (and DynamoDB
    operation), seen by a counting proxy in front of moto."""
    from deltacommit.testing import FaultInjectingProxy

    with FaultInjectingProxy(moto.endpoint) as proxy:
        proxied = {k: (proxy.endpoint if v == moto.endpoint else v) for k, v in options.items()}
        child(WRITE_CHILD, library, uri, json.dumps(proxied), env=env)
        counts: Counter[str] = Counter()
        for record in proxy.records:
            counts[_kind(record.method, record.path)] += 1
    return dict(sorted(counts.items()))


def _kind(method: str, path: str) -> str:
    if method == "POST" and path in ("/", ""):
        return "DynamoDB"
    if method == "GET" and ("list-type=2" in path or "prefix=" in path):
        return "LIST"
    return method


def labels(baseline_src: str | None) -> tuple[str, ...]:
    return (*LIBRARIES, "baseline") if baseline_src else LIBRARIES


def summary(got: dict[str, list[dict[str, Any]]], keys: tuple[str, ...]) -> dict[str, Any]:
    """Medians per label, and each deltacommit's ratio to deltalake's median ``seconds``."""
    figures: dict[str, Any] = {label: medians(runs, keys) for label, runs in got.items()}
    theirs = figures["deltalake"]["seconds"]
    figures["ratio"] = round(figures["deltacommit"]["seconds"] / theirs, 2)
    if "baseline" in figures:
        figures["baseline_ratio"] = round(figures["baseline"]["seconds"] / theirs, 2)
    return figures


def bench_writes(runs: int, backends: tuple[str, ...], env: dict[str, str],
                 baseline_src: str | None) -> None:
    from deltacommit.testing import MotoServer

    with MotoServer() as moto:
        for backend in backends:
            tables = prepare_tables(moto, backend, labels(baseline_src))
            got: dict[str, list[dict[str, Any]]] = {label: [] for label in tables}
            for label, (uri, options) in tables.items():  # untimed: bytecode, page cache
                child(WRITE_CHILD, library_of(label), uri, json.dumps(options),
                      env=child_env(env, label, baseline_src))
            for _ in range(runs):
                for label, (uri, options) in tables.items():
                    timing, wall = child(WRITE_CHILD, library_of(label), uri, json.dumps(options),
                                         env=child_env(env, label, baseline_src))
                    got[label].append({**timing, "process_s": wall})
            requests = {label: count_requests(moto, uri, options, library_of(label),
                                              child_env(env, label, baseline_src))
                        for label, (uri, options) in tables.items()}
            emit(bench="cold_start", measure="write", backend=backend, versions=VERSIONS,
                 runs=runs, **summary(got, ("seconds", "import_s", "write_s", "process_s")),
                 requests=requests)


# --------------------------------------------------------------------------- get_add_actions


def bench_add_actions(runs: int, files: int, env: dict[str, str],
                      baseline_src: str | None) -> None:
    sys.path.insert(0, str(HERE))
    from snapshot_load import build_wide

    base = Path(tempfile.mkdtemp(prefix="cold-start-"))
    try:
        root = base / "wide"
        build_wide(root, files)
        got: dict[str, list[dict[str, Any]]] = {label: [] for label in labels(baseline_src)}
        for label in got:  # untimed: bytecode, page cache
            child(ADD_ACTIONS_CHILD, library_of(label), str(root),
                  env=child_env(env, label, baseline_src))
        for _ in range(runs):
            for label in got:
                result, _ = child(ADD_ACTIONS_CHILD, library_of(label), str(root),
                                  env=child_env(env, label, baseline_src))
                assert result["rows"] == files, result
                got[label].append(result)
        figures = summary(got, ("seconds", "warm_s"))
        emit(bench="cold_start", measure="get_add_actions", live_files=files, runs=runs,
             **figures, warm_ratio=round(figures["deltacommit"]["warm_s"]
                                         / figures["deltalake"]["warm_s"], 2))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--only", default="write,get_add_actions")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--baseline-src", default=None,
                        help="the src folder of an earlier deltacommit to measure alongside")
    args = parser.parse_args(argv)
    from deltacommit.testing import apply_test_aws_environment

    # Children run as an installed package does: from compiled bytecode (pip compiles modules
    # when it installs them), written by each label's untimed first run.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    apply_test_aws_environment(env)
    apply_test_aws_environment()
    only = set(args.only.split(","))
    if "write" in only:
        bench_writes(args.runs, tuple(args.backends.split(",")), env, args.baseline_src)
    if "get_add_actions" in only:
        bench_add_actions(args.runs, args.files, env, args.baseline_src)
    return 0


if __name__ == "__main__":
    sys.exit(main())
