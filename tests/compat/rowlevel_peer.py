"""The newest deltalake's side of ``test_rowlevel_latest.py``, run by that deltalake's Python.

    python rowlevel_peer.py '{"read": [uri, ...], "change": [uri, ...], "create": {...}}'

One process does every step of a round, so that a round costs one interpreter start:

* ``read``: each table's rows (its query engine, which applies deletion vectors and column
  mapping; ``to_pyarrow_table`` too where it reads the table), its change data feed from
  version 1 where the table has one, and ``history()``;
* ``change``: on each table, an append, a MERGE, a compaction and a vacuum (retention 0, its
  check disabled, dry run first), then its rows again;
* ``create``: new tables (name -> configuration, partition columns, a seed), each written in
  three appends and changed by MERGE, UPDATE, DELETE, Z-order and DELETE again, then read as in
  ``read``.

It prints one JSON object: per table, the rows, change data, history and any error met.  It
imports only the standard library, pyarrow and deltalake.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

import deltalake
import pyarrow as pa

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.float64()), ("s", pa.string()),
                    ("p", pa.string())])


def rows_of(ids: list[int], seed: int) -> pa.Table:
    """The rows of ``ids``: nulls in every column for some ids (the test builds its rows with
    this too)."""
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "v": pa.array([None if i % 5 == 0 else i + seed / 10 for i in ids], pa.float64()),
        "s": pa.array([None if i % 7 == 0 else f"s{(i + seed) % 3}" for i in ids]),
        "p": pa.array([None if i % 11 == 0 else f"p{i % 2}" for i in ids])}, schema=SCHEMA)


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.select(SCHEMA.names).to_pylist(), key=lambda r: r["id"])


def engine_rows(t: deltalake.DeltaTable) -> list[dict[str, Any]]:
    return sorted_rows(pa.table(deltalake.QueryBuilder().register("t", t)
                                .execute("select * from t").read_all()))


def read(uri: str) -> dict[str, Any]:
    t = deltalake.DeltaTable(uri)
    out: dict[str, Any] = {"version": t.version(), "rows": engine_rows(t),
                           "history": [{k: h.get(k) for k in ("version", "operation",
                                                              "operationMetrics")}
                                       for h in t.history()]}
    protocol = t.protocol()
    if not (protocol.reader_features or protocol.min_reader_version == 2):
        out["pyarrow_rows"] = sorted_rows(t.to_pyarrow_table())
    if t.metadata().configuration.get("delta.enableChangeDataFeed") == "true":
        try:
            feed = pa.table(t.load_cdf(starting_version=1)).drop_columns(["_commit_timestamp"])
            out["cdf"] = feed.to_pylist()
        except Exception as e:  # a refusal of deltalake's own, which the test judges
            out["cdf_error"] = str(e)
    return out


def change(uri: str) -> dict[str, Any]:
    """Each step is tried in turn; a step deltalake refuses is reported by its message."""
    out: dict[str, Any] = {"refused": {}}

    def append() -> None:
        deltalake.write_deltalake(uri, rows_of([500, 501, 502], 9), mode="append")

    def merge() -> None:
        out["merge"] = (deltalake.DeltaTable(uri)
                        .merge(rows_of([2, 300, 501, 600], 7), "t.id = s.id", source_alias="s",
                               target_alias="t")
                        .when_matched_update_all().when_not_matched_insert_all().execute())

    def optimize() -> None:
        out["optimize"] = deltalake.DeltaTable(uri).optimize.compact()["numFilesRemoved"]

    def vacuum() -> None:
        t = deltalake.DeltaTable(uri)
        out["dry"] = sorted(t.vacuum(retention_hours=0, dry_run=True,
                                     enforce_retention_duration=False))
        out["vacuumed"] = sorted(t.vacuum(retention_hours=0, dry_run=False,
                                          enforce_retention_duration=False))

    for step in (append, merge, optimize, vacuum):
        try:
            step()
        except Exception as e:
            out["refused"][step.__name__] = str(e)
    t = deltalake.DeltaTable(uri)
    out.update(version=t.version(), rows=engine_rows(t))
    return out


def create(uri: str, configuration: dict[str, str], partition_by: list[str] | None,
           seed: int) -> dict[str, Any]:
    for k in range(3):
        deltalake.write_deltalake(uri, rows_of(list(range(k * 40, (k + 1) * 40)), seed),
                                  partition_by=partition_by, mode="append",
                                  configuration=configuration if k == 0 else None)
    t = deltalake.DeltaTable(uri)
    (t.merge(rows_of([5, 6, 7, 8, 200, 201, 77], seed + 3), "t.id = s.id", source_alias="s",
             target_alias="t")
     .when_matched_update_all(predicate="s.id <> 8").when_matched_delete(predicate="s.id = 8")
     .when_not_matched_insert_all().execute())
    t.update({"v": "v * 2", "s": "NULL"}, predicate="id % 4 = 1")
    t.delete("s = 's1' or id > 110")
    t.optimize.z_order(["id", "v"])
    t.delete("id = 3")
    return read(uri)


def guarded(step: Any, *args: Any) -> dict[str, Any]:
    try:
        result: dict[str, Any] = step(*args)
        return result
    except Exception:
        return {"error": traceback.format_exc()[-3000:]}


def main() -> None:
    spec = json.loads(sys.argv[1])
    out: dict[str, Any] = {"deltalake": deltalake.__version__, "read": {}, "change": {},
                           "create": {}}
    for uri in spec.get("read", []):
        out["read"][uri] = guarded(read, uri)
    for uri in spec.get("change", []):
        out["change"][uri] = guarded(change, uri)
    for uri, (configuration, partition_by, seed) in spec.get("create", {}).items():
        out["create"][uri] = guarded(create, uri, configuration, partition_by, seed)
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
