"""Row-level operations: deltacommit against deltalake 1.6.0 on copies of one table, one run.

A table of ``--rows`` rows (``id``, a float, a string; ``--files`` files, one per 5,000 rows by
default, see ``merge_of``) is written once and
copied for each library and each round.  Measured, interleaved (deltacommit then deltalake,
``--rounds`` times, each on a fresh copy), as wall time of the call:

* ``merge_upsert``: MERGE of a source of 1% of the rows by key (half existing ids spread over
  the table, updated; half new, inserted): ``when_matched_update_all`` +
  ``when_not_matched_insert_all``;
* ``update``: UPDATE of 1% of the rows (``id % 100 = 7``);
* ``merge_upsert_dv``, ``update_dv`` (on request, ``--ops``): the same with deletion vectors
  enabled on deltacommit's copy (deltalake 1.6.0 still copies on write): not like with like;
* ``update_plain``, ``merge_upsert_plain``: deltacommit's copy with
  ``deltacommit.parquet.deltaEncodedIntegers=false``, so both write ``id`` PLAIN after the
  dictionary, as deltalake does by default: the same encodings on both sides;
* ``update_delta_ids``, ``merge_upsert_delta_ids``: deltalake told to write ``id``
  DELTA_BINARY_PACKED (``ColumnProperties(encoding=...)``), as deltacommit does by default:
  the same encodings on both sides;
* ``merge_few_keys``: MERGE of 100 existing keys into the table (ids ordered across files, so
  file statistics admit a few files): files rewritten by each library.

One JSON line per measurement (each library's median seconds of wall time, the ratio
deltacommit / deltalake, and the same for the CPU time of the process during the call, steadier
on a shared machine), and per library the files the few-keys MERGE removed.

    .venv/bin/python bench/merge.py                  # 1M rows, about half a minute
    .venv/bin/python bench/merge.py --rows 10000000  # the 10M-row table (2,000 files)

Each line names the Arrow memory pool the process used (``arrow_memory_pool``): pyarrow's
default is mimalloc, and ``ARROW_DEFAULT_MEMORY_POOL=jemalloc`` in the environment chooses
jemalloc, which allocates the freshly read and rewritten columns with fewer page faults here.
deltalake's own (Rust) allocations do not use that pool.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def table_rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "v": (ids % 1000).astype(np.float64),
                     "s": pa.array(np.char.add("s", (ids % 97).astype(str)))})


#: Files each commit of the generated table adds: a 10M-row table of 2,000 files is then
#: written in 20 commits instead of 2,000.
FILES_PER_COMMIT = 100


def build(path: str, rows: int, files: int) -> None:
    """``files`` files of consecutive ids, ``FILES_PER_COMMIT`` of them per commit, written
    with PLAIN and dictionary encodings only (as deltalake and Spark write them, and as the
    table was before deltacommit chose DELTA_BINARY_PACKED for ids), so the files read are
    the same whatever the writers measured choose."""
    import deltacommit as dc

    per = -(-rows // files)
    step = per * FILES_PER_COMMIT
    plain = {DELTA_INTEGERS: "false"}
    for start in range(0, rows, step):
        dc.write(path, table_rows(start, min(step, rows - start)), target_file_rows=per,
                 configuration=plain if start == 0 else None)
    dc.DeltaTable(path).set_properties({DELTA_INTEGERS: "true"})


#: deltacommit's table property choosing DELTA_BINARY_PACKED for integer columns of close,
#: mostly distinct values (true unless set).
DELTA_INTEGERS = "deltacommit.parquet.deltaEncodedIntegers"


def delta_ids() -> Any:
    """deltalake's writer properties that write ``id`` DELTA_BINARY_PACKED."""
    from deltalake import ColumnProperties, WriterProperties

    return WriterProperties(column_properties={"id": ColumnProperties(
        dictionary_enabled=False, encoding="DELTA_BINARY_PACKED")})


def open_table(lib: str, path: str) -> Any:
    if lib == "deltacommit":
        import deltacommit as dc

        return dc.DeltaTable(path)
    import deltalake

    return deltalake.DeltaTable(path)


def merge_of(table: Any, source: pa.Table, writer_properties: Any = None) -> Any:
    """The MERGE builder.  deltalake 1.6.0 reports matches of one source row per target row
    as duplicates when its target files hold more than a few thousand rows (delta-rs issue
    4572, streamed or not), hence files of 5,000 rows by default."""
    if isinstance(table, __import__("deltalake").DeltaTable):
        return table.merge(source, "t.id = s.id", source_alias="s", target_alias="t",
                           streamed_exec=False, writer_properties=writer_properties)
    return table.merge(source, "t.id = s.id", source_alias="s", target_alias="t")


def upsert_source(rows: int) -> pa.Table:
    n = max(2, rows // 100)
    rng = np.random.default_rng(7)
    existing = rng.choice(rows, size=n // 2, replace=False).astype(np.int64)
    new = np.arange(rows, rows + n - n // 2, dtype=np.int64)
    ids = np.concatenate([existing, new])
    return pa.table({"id": ids, "v": np.full(len(ids), -1.0),
                     "s": pa.array(["merged"] * len(ids))})


def id_encoding(op: str) -> str:
    """How each side of measurement ``op`` writes the ``id`` column."""
    if op.endswith("_plain"):
        return "both PLAIN (after the dictionary)"
    if op.endswith("_delta_ids"):
        return "both DELTA_BINARY_PACKED"
    return "each its default: deltacommit DELTA_BINARY_PACKED, deltalake PLAIN"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=None,
                        help="data files of the table (default: one per 5,000 rows)")
    parser.add_argument("--few-keys-files", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", default="merge_upsert,update,merge_few_keys",
                        # also merge_upsert_dv, update_dv (deltacommit with deletion vectors)
                        help="comma-separated measurements to make")
    args = parser.parse_args()
    wanted = set(args.ops.split(","))
    if args.files is None:
        args.files = max(1, args.rows // 5000)
    with tempfile.TemporaryDirectory() as tmp:
        base = f"{tmp}/base"
        build(base, args.rows, args.files)
        source = upsert_source(args.rows)
        def upsert(t: Any, props: Any) -> Any:
            return merge_of(t, source, props).when_matched_update_all() \
                .when_not_matched_insert_all().execute()

        def update(t: Any, props: Any) -> Any:
            extra = {"writer_properties": props} if props is not None else {}
            return t.update({"v": "v + 1", "s": "'updated'"}, predicate="id % 100 = 7",
                            **extra)

        # ``*_dv``: deltacommit's copy has deletion vectors enabled (it marks the changed rows
        # and writes those alone); deltalake 1.6.0 rewrites its copy (copy-on-write) as in
        # the others.  Not a like-with-like comparison: a separate line.
        ops = {"merge_upsert": upsert, "update": update,
               "merge_upsert_dv": upsert, "update_dv": update,
               "update_plain": update, "merge_upsert_plain": upsert,
               "update_delta_ids": update, "merge_upsert_delta_ids": upsert}
        for name, op in ops.items():
            if name not in wanted:
                continue
            times: dict[str, list[float]] = {"deltacommit": [], "deltalake": []}
            cpu: dict[str, list[float]] = {"deltacommit": [], "deltalake": []}
            for r in range(args.rounds):
                for lib in ("deltacommit", "deltalake"):
                    path = f"{tmp}/{name}-{lib}-{r}"
                    shutil.copytree(base, path)
                    if lib == "deltacommit" and name.endswith(("_dv", "_plain")):
                        import deltacommit as dc

                        dc.DeltaTable(path).set_properties(
                            {"delta.enableDeletionVectors": "true"} if name.endswith("_dv")
                            else {DELTA_INTEGERS: "false"})
                    props = delta_ids() if lib == "deltalake" and name.endswith("_delta_ids") \
                        else None
                    table = open_table(lib, path)
                    started, cpu_started = time.perf_counter(), time.process_time()
                    op(table, props)
                    times[lib].append(time.perf_counter() - started)
                    cpu[lib].append(time.process_time() - cpu_started)
                    shutil.rmtree(path)
            ours, theirs = (statistics.median(times[k]) for k in ("deltacommit", "deltalake"))
            ours_cpu, theirs_cpu = (statistics.median(cpu[k]) for k in ("deltacommit", "deltalake"))
            emit(bench="merge", op=name, rows=args.rows, files=args.files,
                 source_rows=source.num_rows if name.startswith("merge_upsert") else None,
                 deltacommit_s=round(ours, 3), deltalake_s=round(theirs, 3),
                 ratio=round(ours / theirs, 3), rounds=args.rounds,
                 deltacommit_cpu_s=round(ours_cpu, 3), deltalake_cpu_s=round(theirs_cpu, 3),
                 cpu_ratio=round(ours_cpu / theirs_cpu, 3),
                 deltacommit_mode="deletion vectors" if name.endswith("_dv")
                 else "copy-on-write", deltalake_mode="copy-on-write",
                 id_encoding=id_encoding(name),
                 arrow_memory_pool=pa.default_memory_pool().backend_name,
                 deltacommit_all_s=[round(x, 3) for x in times["deltacommit"]],
                 deltalake_all_s=[round(x, 3) for x in times["deltalake"]])
        if "merge_few_keys" not in wanted:
            return
        few = f"{tmp}/few"
        build(few, args.rows, args.few_keys_files)
        rng = np.random.default_rng(11)
        keys = pa.table({"id": np.sort(rng.choice(args.rows, size=100, replace=False))
                         .astype(np.int64), "v": np.zeros(100), "s": ["few"] * 100})
        per_file = -(-args.rows // args.few_keys_files)
        holding = len({int(k) // per_file for k in keys["id"].to_pylist()})
        for lib in ("deltacommit", "deltalake"):
            path = f"{tmp}/few-{lib}"
            shutil.copytree(few, path)
            table = open_table(lib, path)
            started = time.perf_counter()
            m = merge_of(table, keys).when_matched_update_all().execute()
            emit(bench="merge", op="merge_few_keys", lib=lib, rows=args.rows,
                 files=args.few_keys_files, files_holding_keys=holding,
                 files_removed=m["num_target_files_removed"],
                 seconds=round(time.perf_counter() - started, 3))


if __name__ == "__main__":
    main()
