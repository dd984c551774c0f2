"""Snapshot loading at scale: deltacommit versus delta-rs on the same 10,000-version table.

Builds a table of ``--versions`` versions holding ``--files`` live files (commit JSON written
directly with deltacommit's codec: no data files are needed to load metadata), with 1% of the
files replaced along the way so that the checkpoint carries tombstones.  A checkpoint is written
by deltacommit at the last multiple of 10 and the remaining commits follow it, as a writer's
hook would leave the table.  Then, in the same process and alternating the two libraries:

- ``cold``: open the latest snapshot (``dc.DeltaTable(uri)`` vs ``deltalake.DeltaTable(uri)``),
  the process's table-state cache emptied first (deltalake keeps no state between opens);
- ``reopen_cached``: deltacommit opening the same table again in the same process, from its
  table-state cache (no deltalake counterpart, so no ratio);
- ``cold_with_files``: a cold open plus enumerating every live file (``files()`` vs
  ``get_add_actions()``), since deltacommit defers building file objects until asked;
- ``cold_with_add_actions``: a cold open plus the file list as one Arrow table,
  ``get_add_actions(flatten=...)`` for both libraries (deltalake's arro3 table converted with
  ``pa.table``), once with ``flatten=False`` and once with ``flatten=True``;
- ``cold_one_partition``: a cold open of a table of as many files in 336 partitions, all in its
  checkpoint, plus the files of one partition (``files(partition_filters)`` vs
  ``file_uris(partition_filters)``);
- ``kept_appends``: one-row appends through a kept table object of the partitioned table, after
  enumerating its files, per commit (``dc.write`` vs ``write_deltalake``, each on its own copy);
- ``update``: after 10 new commits, ``DeltaTable.update()`` vs ``update_incremental()``.

Each measurement prints one JSON line; ``ratio`` is deltacommit's median time over delta-rs's
(below 1 means deltacommit is faster).

Then ``rss_add_actions``: peak memory of opening a table of ``--rss-files`` live files
(1,000,000 unless set; 0 skips it) and calling ``get_add_actions()``, each library in a fresh
subprocess, as ``ru_maxrss`` (``import_kib``: the same process's peak just after importing the
library, before opening the table).  That table is written cheaply: a commit creating it, an
empty commit, and a checkpoint at that version holding the files, built column-wise (both
libraries read the state from the checkpoint, as after log cleanup).

    .venv/bin/python bench/snapshot_load.py [--versions 10000] [--files 100000] [--repeat 7]
        [--rss-files 1000000]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deltalake
import numpy as np
import pyarrow as pa

import deltacommit as dc
from deltacommit.engine.hooks.checkpoint import write_checkpoint
from deltacommit.engine.snapshot import state_cache
from deltacommit.io.logstore import open_log_store
from deltacommit.protocol.actions import (
    Action,
    Add,
    CommitInfo,
    Metadata,
    Protocol,
    serialize_commit,
)
from deltacommit.protocol.checkpoint.schema import ADD
from deltacommit.protocol.files.action_rows import ActionRows
from deltacommit.protocol.files.from_arrow import adds_from_arrow
from deltacommit.protocol.files.lazy_files import LazyActionMap
from deltacommit.protocol.replay import TableState
from deltacommit.runtime.clock import SYSTEM_CLOCK

SCHEMA_STRING = json.dumps({"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": True, "metadata": {}},
    {"name": "value", "type": "string", "nullable": True, "metadata": {}},
    {"name": "day", "type": "string", "nullable": True, "metadata": {}},
]}, separators=(",", ":"))


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


class Builder:
    """Writes commit files straight into ``_delta_log`` and keeps the replayed state."""

    def __init__(self, root: Path, now_ms: int,
                 configuration: dict[str, str | None] | None = None) -> None:
        self.configuration = dict(configuration or {})
        self.log = root / "_delta_log"
        self.log.mkdir(parents=True)
        self.now_ms = now_ms
        self.state = TableState()
        self.version = -1
        self.n = 0
        self.live: list[Add] = []

    def commit(self, actions: list[Action]) -> None:
        self.version += 1
        (self.log / f"{self.version:020d}.json").write_bytes(serialize_commit(actions))
        self.state.apply(self.version, actions)

    def new_add(self) -> Add:
        n = self.n
        self.n += 1
        day = f"2026-{(n // 28) % 12 + 1:02d}-{n % 28 + 1:02d}"
        stats = json.dumps({"numRecords": 1000, "minValues": {"id": n * 1000, "value": "a"},
                            "maxValues": {"id": n * 1000 + 999, "value": "z"},
                            "nullCount": {"id": 0, "value": 3}}, separators=(",", ":"))
        return Add(path=f"day={day}/part-00000-{uuid.UUID(int=n)}-c000.snappy.parquet",
                   partition_values={"day": day}, size=100_000 + n % 5000,
                   modification_time=self.now_ms, data_change=True, stats=stats)

    def info(self, operation: str) -> CommitInfo:
        return CommitInfo({"timestamp": self.now_ms, "operation": operation,
                           "engineInfo": "bench", "txnId": str(uuid.uuid4())})

    def create(self) -> None:
        self.commit([self.info("CREATE TABLE"), Protocol(1, 2),
                     Metadata(id=str(uuid.uuid4()), schema_string=SCHEMA_STRING,
                              partition_columns=["day"], configuration=self.configuration,
                              created_time=self.now_ms)])

    def append(self, k: int, replace: int = 0) -> None:
        actions: list[Action] = [self.info("WRITE")]
        for _ in range(min(replace, len(self.live))):
            old = self.live.pop(0)
            actions.append(old.to_remove(self.now_ms))
        for _ in range(k):
            a = self.new_add()
            self.live.append(a)
            actions.append(a)
        self.commit(actions)


#: Table properties by ``--checkpoint-stats``: how the checkpoint holds each file's statistics.
CHECKPOINT_STATS: dict[str, dict[str, str | None]] = {
    "json": {},
    "struct": {"delta.checkpoint.writeStatsAsJson": "false",
               "delta.checkpoint.writeStatsAsStruct": "true"},
}


def build(root: Path, versions: int, files: int,
          configuration: dict[str, str | None] | None = None) -> tuple[int, float]:
    """The table; returns (checkpoint version, seconds spent building)."""
    t0 = time.perf_counter()
    b = Builder(root, int(time.time() * 1000), configuration)
    b.create()
    commits = versions - 1
    per, extra = divmod(files, commits)
    checkpoint_version = (versions - 1) // 10 * 10
    for v in range(1, versions):
        k = per + (1 if v <= extra else 0)
        # Every 100th commit also replaces an old file, so the checkpoint carries tombstones.
        replace = 1 if v % 100 == 0 else 0
        b.append(k + replace, replace=replace)
        if v == checkpoint_version:
            log_store = open_log_store(str(root))
            write_checkpoint(log_store, b.state, SYSTEM_CLOCK)
    assert len(b.state.files) == files, len(b.state.files)
    return checkpoint_version, time.perf_counter() - t0


def build_wide(root: Path, files: int) -> float:
    """A table of ``files`` live files whose state is all in one checkpoint (see the module
    docstring), built column-wise; returns the seconds spent."""
    t0 = time.perf_counter()
    b = Builder(root, int(time.time() * 1000))
    b.create()
    b.commit([b.info("WRITE")])
    n = np.arange(files, dtype=np.int64)
    days = [f"2026-{m:02d}-{d:02d}" for m in range(1, 13) for d in range(1, 29)]
    day_idx = (n // 28) % 12 * 28 + n % 28
    day = pa.array(days, pa.string()).take(pa.array(day_idx))
    paths = pa.array([f"day={days[int(i)]}/part-00000-{uuid.UUID(int=k)}-c000.snappy.parquet"
                      for k, i in enumerate(day_idx)], pa.string())
    stats = pa.array([f'{{"numRecords":1000,"minValues":{{"id":{k * 1000},"value":"a"}},'
                      f'"maxValues":{{"id":{k * 1000 + 999},"value":"z"}},'
                      f'"nullCount":{{"id":0,"value":3}}}}' for k in range(files)], pa.string())
    from_arrays: Any = pa.MapArray.from_arrays
    pvs = from_arrays(pa.array(np.arange(files + 1, dtype=np.int32)),
                      pa.array(["day"] * files, pa.string()), day,
                      type=ADD.field("partitionValues").type)
    children: list[Any] = [
        paths, pvs, pa.array(100_000 + n % 5000), pa.array(np.full(files, b.now_ms)),
        pa.array(np.ones(files, dtype=bool)), stats]
    children += [pa.nulls(files, ADD.field(i).type) for i in range(len(children), ADD.num_fields)]
    adds = pa.StructArray.from_arrays(children, fields=list(ADD))
    state = b.state.copy()
    state.files = LazyActionMap(ActionRows(adds, adds_from_arrow))
    write_checkpoint(open_log_store(str(root)), state, SYSTEM_CLOCK)
    return time.perf_counter() - t0


#: What the subprocess of ``measure_rss`` runs: it imports only the library it measures.
RSS_CHILD = """
import json, resource, sys, time
import pyarrow as pa
library, uri = sys.argv[1], sys.argv[2]
if library == "deltacommit":
    import deltacommit as dc
    open_and_list = lambda: dc.DeltaTable(uri).get_add_actions()
else:
    import deltalake
    open_and_list = lambda: pa.table(deltalake.DeltaTable(uri).get_add_actions())
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
rows = open_and_list().num_rows
secs = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"library": library, "rows": rows, "import_kib": before, "max_rss_kib": peak,
                  "seconds": round(secs, 3)}))
"""


def measure_rss(base: Path, files: int) -> None:
    root = base / "wide"
    if root.exists():
        shutil.rmtree(root)
    secs = build_wide(root, files)
    emit(bench="snapshot_load", measure="build_wide", files=files, seconds=round(secs, 2))
    env = dict(os.environ, DELTACOMMIT_TABLE_CACHE="off")
    for library in ("deltacommit", "deltalake"):
        # Linux keeps the peak RSS of a process image across fork and exec: a child forked
        # from this (large) process would report this process's peak.  A shell in between,
        # which forks the child instead of exec'ing it, starts it from the shell's few MB.
        out = subprocess.run(["/bin/sh", "-c", '"$0" -c "$1" "$2" "$3"; exit $?',
                              sys.executable, RSS_CHILD, library, str(root)],
                             check=True, capture_output=True, text=True, env=env).stdout
        got = json.loads(out.strip().splitlines()[-1])
        assert got["rows"] == files, got
        emit(bench="snapshot_load", measure="rss_add_actions", live_files=files, **got)
    shutil.rmtree(root, ignore_errors=True)


def kept_appends(wide: Path, files: int, commits: int) -> None:
    """One-row appends through a kept table object of a table of ``files`` files, after its
    file list was enumerated (both libraries then hold every file): what a long-lived writer
    of a large table pays per commit, checkpoints every 10 versions included.  Each library
    appends to its own copy of the table."""
    data = pa.table({"id": pa.array([1], pa.int64()), "value": ["x"], "day": ["2026-01-01"]})
    mine, peer = wide.with_name("kept-deltacommit"), wide.with_name("kept-deltalake")
    for d in (mine, peer):
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(wide, d)
    ours = dc.DeltaTable(str(mine))
    theirs = deltalake.DeltaTable(str(peer))
    assert len(ours.files()) == theirs.get_add_actions().num_rows == files
    per_o: list[float] = []
    per_t: list[float] = []
    for _ in range(commits):
        gc.collect()
        per_o.append(timed(lambda: dc.write(ours, data))[0])
        gc.collect()
        per_t.append(timed(lambda: deltalake.write_deltalake(theirs, data, mode="append"))[0])
    assert ours.version == theirs.version() == 1 + commits, (ours.version, theirs.version())
    summary("kept_appends", per_o, per_t, live_files=files, commits=commits,
            calls="dc.write(kept table) vs write_deltalake(kept DeltaTable), per commit")
    for d in (mine, peer):
        shutil.rmtree(d, ignore_errors=True)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def summary(kind: str, ours: list[float], theirs: list[float], **extra: Any) -> None:
    mo, mt = statistics.median(ours), statistics.median(theirs)
    emit(bench="snapshot_load", measure=kind, deltacommit_s=round(mo, 4), deltalake_s=round(mt, 4),
         deltacommit_min_s=round(min(ours), 4), deltalake_min_s=round(min(theirs), 4),
         ratio=round(mo / mt, 3), runs=len(ours), **extra)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--versions", type=int, default=10_000)
    p.add_argument("--files", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--dir", help="where to build the table (default: a temporary directory)")
    p.add_argument("--keep", action="store_true", help="keep the table afterwards")
    p.add_argument("--rss-files", type=int, default=1_000_000,
                   help="live files of the table whose peak memory is measured (0: skip)")
    p.add_argument("--checkpoint-stats", choices=sorted(CHECKPOINT_STATS), default="json",
                   help="statistics in the checkpoint as JSON text (Spark's default) or only "
                        "as stats_parsed (delta.checkpoint.writeStatsAsJson=false)")
    args = p.parse_args(argv)
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="dc-bench-snapshot-"))
    root = base / "table"
    if root.exists():
        shutil.rmtree(root)
    uri = str(root)
    try:
        cp, secs = build(root, args.versions, args.files,
                         CHECKPOINT_STATS[args.checkpoint_stats])
        latest = args.versions - 1
        emit(bench="snapshot_load", measure="build", versions=args.versions, files=args.files,
             checkpoint_version=cp, checkpoint_stats=args.checkpoint_stats,
             seconds=round(secs, 2))

        # Both libraries must see the same table.
        ours = dc.DeltaTable(uri)
        theirs = deltalake.DeltaTable(uri)
        assert ours.version == theirs.version() == latest, (ours.version, theirs.version())
        assert len(ours.files()) == theirs.get_add_actions().num_rows == args.files

        cold_o: list[float] = []
        cold_t: list[float] = []
        full_o: list[float] = []
        full_t: list[float] = []
        reopen_o: list[float] = []
        for _ in range(args.repeat):
            # Cold: nothing this process learnt about the table before (deltalake keeps no
            # state between opens either).  Opening it again with the process's cache is
            # measured apart, as ``reopen_cached``: it has no deltalake counterpart.
            state_cache.clear()
            gc.collect()
            cold_o.append(timed(lambda: dc.DeltaTable(uri))[0])
            reopen_o.append(timed(lambda: dc.DeltaTable(uri))[0])
            cold_t.append(timed(lambda: deltalake.DeltaTable(uri))[0])
            state_cache.clear()
            gc.collect()
            full_o.append(timed(lambda: len(dc.DeltaTable(uri).files()))[0])
            full_t.append(timed(lambda: deltalake.DeltaTable(uri).get_add_actions().num_rows)[0])
        summary("cold", cold_o, cold_t, version=latest, live_files=args.files)
        summary("cold_with_files", full_o, full_t, version=latest, live_files=args.files)
        emit(bench="snapshot_load", measure="reopen_cached", library="deltacommit",
             seconds=round(statistics.median(reopen_o), 4), runs=len(reopen_o),
             versus="no deltalake counterpart: deltalake.DeltaTable(uri) always loads cold")

        def ours_actions(flatten: bool) -> int:
            return int(dc.DeltaTable(uri).get_add_actions(flatten=flatten).num_rows)

        def theirs_actions(flatten: bool) -> int:
            return int(pa.table(deltalake.DeltaTable(uri).get_add_actions(flatten=flatten))
                       .num_rows)

        # The tables above hold 100,000 Add objects each: left alive, they would make every
        # full collection of Python's garbage collector during the runs below cost more.
        del ours, theirs
        for flatten in (False, True):
            state_cache.clear()
            assert ours_actions(flatten) == theirs_actions(flatten) == args.files
            acts_o: list[float] = []
            acts_t: list[float] = []
            cpu_o: list[float] = []
            cpu_t: list[float] = []
            for _ in range(args.repeat):
                # Cold: the snapshot the last open left in the process's cache goes first (and
                # the objects of the previous runs with it), outside the time measured.
                state_cache.clear()
                gc.collect()
                c0 = time.process_time()
                acts_o.append(timed(lambda f=flatten: ours_actions(f))[0])
                cpu_o.append(time.process_time() - c0)
                gc.collect()
                c0 = time.process_time()
                acts_t.append(timed(lambda f=flatten: theirs_actions(f))[0])
                cpu_t.append(time.process_time() - c0)
            # CPU time (all threads) too: on a shared machine it varies less than wall time.
            summary("cold_with_add_actions", acts_o, acts_t, flatten=flatten, version=latest,
                    live_files=args.files, checkpoint_stats=args.checkpoint_stats,
                    deltacommit_cpu_s=round(statistics.median(cpu_o), 4),
                    deltalake_cpu_s=round(statistics.median(cpu_t), 4),
                    cpu_ratio=round(statistics.median(cpu_o) / statistics.median(cpu_t), 3))

        # One partition of a partitioned table of as many files, all in its checkpoint.
        wide = base / "partitioned"
        build_wide(wide, args.files)
        one_day = [("day", "=", "2026-03-05")]
        part_o: list[float] = []
        part_t: list[float] = []
        for _ in range(args.repeat):
            state_cache.clear()
            gc.collect()
            dt_o, n_o = timed(lambda: len(dc.DeltaTable(str(wide)).files(one_day)))
            gc.collect()
            dt_t, n_t = timed(lambda: len(deltalake.DeltaTable(str(wide)).file_uris(one_day)))
            assert n_o == n_t, (n_o, n_t)
            part_o.append(dt_o)
            part_t.append(dt_t)
        summary("cold_one_partition", part_o, part_t, live_files=args.files, selected=n_o,
                calls="files(partition_filters) vs file_uris(partition_filters)")
        kept_appends(wide, args.files, 3 * args.repeat)
        shutil.rmtree(wide, ignore_errors=True)

        b = Builder.__new__(Builder)
        b.log = root / "_delta_log"
        b.now_ms = int(time.time() * 1000)
        b.version = latest
        b.n = 10 * args.files  # fresh file names
        b.live = []
        b.state = TableState()
        b.state.version = latest
        upd_o: list[float] = []
        upd_t: list[float] = []
        for _ in range(args.repeat):
            ours = dc.DeltaTable(uri)
            theirs = deltalake.DeltaTable(uri)
            for _ in range(10):
                b.append(10)
            dt_o, v_o = timed(ours.update)
            dt_t, _ = timed(theirs.update_incremental)
            assert v_o == theirs.version() == b.version, (v_o, theirs.version(), b.version)
            upd_o.append(dt_o)
            upd_t.append(dt_t)
        summary("update_10_commits", upd_o, upd_t, version=b.version)
        if args.rss_files > 0:
            measure_rss(base, args.rss_files)
    finally:
        if not args.keep:
            shutil.rmtree(base if not args.dir else root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
