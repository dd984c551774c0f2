"""Row-level concurrency workload: processes updating disjoint keys of shared files, beside an
appender and a compaction, counting the operations that abort.

``run`` builds a table whose every data file holds keys of every worker's range, then starts
(as separate processes, released together by a barrier):

- ``workers`` processes, each running ``operations`` row-level updates of its own keys
  (``DeltaTable.update``, an upsert by ``DeltaTable.merge``, or one transaction deleting
  the rows by deletion vectors, ``stage_dv_delete``, and writing them again with a new
  value);
- an appender whose rows match no update (ids above every range);
- a compaction running over and over.

An update that fails with a ``ConcurrentModificationException`` counts as aborted and is run
again on a fresh read until it commits, so the final table must equal the serial result in
both modes: every key of every range carrying its update's value, every acknowledged append
present once.  With ``row_level`` the table has deletion vectors and row tracking, so updates
are checked row by row (``protocol/row_conflicts.py``) and none should abort; without it,
Spark's file-level rules decide.  ``bench/rowlevel_concurrency.py`` prints the figures;
``tests/concurrency/test_rowlevel_processes.py`` holds them to it.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

import deltacommit as dc
from deltacommit.errors import ConcurrentModificationException
from deltacommit.io.datafiles import WriteTarget, write_rows
from deltacommit.ops.delete import stage_dv_delete
from deltacommit.protocol.expressions.parser import parse_predicate

ROW_LEVEL = {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"}
FILE_LEVEL = {"delta.enableDeletionVectors": "true"}
#: Appended ids start here, above every worker's range.
APPEND_BASE = 1_000_000
#: Bound on waits for the helper processes (a test must never hang on a stuck child).
PATIENCE_S = 300.0


@dataclass(frozen=True)
class Layout:
    workers: int
    operations: int
    keys_per_operation: int

    @property
    def keys_per_worker(self) -> int:
        return self.operations * self.keys_per_operation

    def keys(self, worker: int, operation: int) -> tuple[int, int]:
        """The id range ``[low, high)`` one update of one worker changes."""
        low = worker * self.keys_per_worker + operation * self.keys_per_operation
        return low, low + self.keys_per_operation

    def initial(self) -> pa.Table:
        """Rows ordered so that consecutive rows belong to every worker in turn: a file of
        ``workers * keys_per_operation`` rows holds keys of one operation of each worker."""
        ids = [w * self.keys_per_worker + k for k in range(self.keys_per_worker)
               for w in range(self.workers)]
        return pa.table({"id": pa.array(ids, pa.int64()),
                         "v": pa.array(["initial"] * len(ids))})


def value(worker: int, operation: int) -> str:
    return f"w{worker}-op{operation}"


def update(uri: str, worker: int, operation: int, layout: Layout, kind: str = "update"
           ) -> tuple[int, tuple[int, ...]]:
    """One row-level update of ``worker``'s keys; its commit version and the concurrent
    versions it was checked against (and rebased over).  ``kind``: ``update`` runs
    ``DeltaTable.update``, ``merge`` an upsert of the keys (``DeltaTable.merge``);
    ``delete-insert`` deletes the rows by deletion vectors
    (``stage_dv_delete``) and writes their new versions in the same transaction."""

    low, high = layout.keys(worker, operation)
    predicate = parse_predicate(f"id >= {low} AND id < {high}")
    table = dc.DeltaTable(uri)
    if kind in ("update", "merge"):
        if kind == "update":
            metrics = table.update({"v": f"'{value(worker, operation)}'"}, predicate.to_sql())
        else:
            source = pa.table({"id": pa.array(range(low, high), pa.int64()),
                               "v": pa.array([value(worker, operation)] * (high - low))})
            metrics = (table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
                       .when_matched_update({"v": "s.v"}).when_not_matched_insert_all()
                       .execute())
        version = int(metrics["version"])
        (info,) = [h for h in dc.DeltaTable(uri, version=version).history(1)]
        read = int(info.get("readVersion", version - 1))
        return version, tuple(range(read + 1, version))
    with table.transaction("UPDATE", {"predicate": predicate.to_sql()}) as txn:
        where = f"update of table {uri} where {predicate.to_sql()}"
        old = stage_dv_delete(table, txn, predicate, where)
        new = old.set_column(old.schema.get_field_index("v"), old.schema.field("v"),
                             pa.array([value(worker, operation)] * old.num_rows))
        txn.add(write_rows(table.store, WriteTarget.of(uri, txn.snapshot), new,
                           clock=table.clock, random=table.random))
        txn.operation_metrics["numUpdatedRows"] = str(old.num_rows)
    assert txn.result is not None
    return txn.result.version, txn.result.winners


def _worker(uri: str, worker: int, layout: Layout, kind: str, barrier: Any, out: Any) -> None:

    barrier.wait(PATIENCE_S)
    started = time.time()
    aborts: list[str] = []
    results: list[tuple[int, tuple[int, ...]]] = []
    for op in range(layout.operations):
        while True:
            try:
                results.append(update(uri, worker, op, layout, kind))
                break
            except ConcurrentModificationException as e:
                aborts.append(type(e).__name__)
    out.put(("worker", worker, (aborts, results, started, time.time())))


def _appender(uri: str, barrier: Any, stop: Any, out: Any) -> None:

    barrier.wait(PATIENCE_S)
    appended: list[int] = []
    latencies: list[float] = []
    batch = 0
    while not stop.is_set():
        ids = [APPEND_BASE + batch * 5 + i for i in range(5)]
        started = time.monotonic()
        dc.write(uri, pa.table({"id": pa.array(ids, pa.int64()),
                                "v": pa.array(["appended"] * 5)}))
        latencies.append(time.monotonic() - started)
        appended.extend(ids)
        batch += 1
    out.put(("appender", 0, (appended, latencies)))


def _compactor(uri: str, compaction_target: int, interval: float, barrier: Any, stop: Any,
               out: Any) -> None:

    barrier.wait(PATIENCE_S)
    committed = failed = lost = 0
    while not stop.is_set():
        try:
            metrics = dc.DeltaTable(uri).optimize.compact(target_size=compaction_target)
            committed += 1 if metrics.get("numFilesAdded") else 0
            lost += int(metrics.get("binsLostToConcurrentRemoves") or 0)
        except ConcurrentModificationException:
            failed += 1
        stop.wait(interval)  # one round per interval (pacing, not ordering)
    out.put(("compactor", 0, [committed, failed, lost]))


def run(uri: str, *, row_level: bool, layout: Layout,
        compaction_target: int = 3_000, compaction_interval: float = 1.0,
        kind: str = "update") -> dict[str, Any]:
    """The workload on a new table at ``uri`` (see the module docstring); its figures and
    whether the final table equals the serial result.  ``compaction_target`` (bytes) keeps
    compaction bins to a few files, so that bins no update touched commit beside them;
    a compaction round starts every ``compaction_interval`` seconds; ``kind`` is how each
    update is made (``update``)."""

    dc.write(uri, layout.initial(), configuration=ROW_LEVEL if row_level else FILE_LEVEL,
             target_file_rows=layout.workers * layout.keys_per_operation)
    files_before = len(dc.DeltaTable(uri).files())
    # Forked: the children share nothing with the parent but the table (its thread pools
    # start afresh in a child, engine docs), and start in milliseconds.
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(layout.workers + 2)
    stop = ctx.Event()
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(uri, w, layout, kind, barrier, out))
             for w in range(layout.workers)]
    procs.append(ctx.Process(target=_appender, args=(uri, barrier, stop, out)))
    procs.append(ctx.Process(target=_compactor,
                             args=(uri, compaction_target, compaction_interval, barrier,
                                   stop, out)))
    for p in procs:
        p.start()
    results: dict[str, Any] = {"workers": {}}
    try:
        for _ in range(layout.workers):
            role, index, payload = out.get(timeout=PATIENCE_S)
            results["workers"][index] = payload
        stop.set()
        for _ in range(2):
            role, index, payload = out.get(timeout=PATIENCE_S)
            results[role] = payload
    finally:
        stop.set()
        for p in procs:
            p.join(PATIENCE_S)
            if p.is_alive():
                p.kill()
                p.join()
    workers = list(results["workers"].values())
    aborts = [a for w in workers for a in w[0]]
    elapsed = max(w[3] for w in workers) - min(w[2] for w in workers)
    table = dc.DeltaTable(uri)
    operations = {h["version"]: h.get("operation") for h in table.history()}
    over: dict[str, int] = {}  # operation of a concurrent commit -> updates rebased over one
    for w in workers:
        for _, winners in w[1]:
            for op_name in {str(operations.get(v)) for v in winners}:
                over[op_name] = over.get(op_name, 0) + 1
    final = table.to_arrow().sort_by("id")
    appended, latencies = results["appender"]
    latencies = sorted(latencies) or [0.0]
    expected = _serial(layout, appended)
    return {
        "row_level": row_level, "kind": kind, "workers": layout.workers,
        "operations": layout.operations,
        "compaction_interval_s": compaction_interval,
        "files_before": files_before, "aborted_operations": len(aborts),
        "aborts_by_kind": {k: aborts.count(k) for k in sorted(set(aborts))},
        "appends": len(appended) // 5,
        "append_p50_ms": round(latencies[len(latencies) // 2] * 1000, 1),
        "append_max_ms": round(latencies[-1] * 1000, 1),
        "compactions_committed": results["compactor"][0],
        "compactions_failed": results["compactor"][1],
        "compaction_bins_lost": results["compactor"][2],
        "updates_rebased_over": over,
        "update_seconds": round(elapsed, 3),
        "versions": dc.DeltaTable(uri).version,
        "equals_serial": final.select(["id", "v"]).equals(expected),
        "rows": final.num_rows,
    }


def _serial(layout: Layout, appended: list[int]) -> pa.Table:
    """The table the updates and appends leave when run one after another."""
    rows: dict[int, str] = {}
    for w in range(layout.workers):
        for op in range(layout.operations):
            low, high = layout.keys(w, op)
            rows.update({i: value(w, op) for i in range(low, high)})
    rows.update({i: "appended" for i in appended})
    ids = sorted(rows)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([rows[i] for i in ids])})


def figures(results: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON line of one run."""
    return dict(results)


__all__ = ["FILE_LEVEL", "ROW_LEVEL", "Layout", "run", "update", "value"]
