"""Every write path enforces the table's row rules: invariants, CHECK constraints and
generated columns, each refused before any file is written, leaving the table unchanged.

The paths: ``dc.write`` (append, overwrite, overwrite of a partition), ``dc.append`` on a
table with group commit (rows coalesced into the leader's files, or commits shared across
processes), the ``Appender``, and
Spark's write task (``spark.tasks.WriteTask``, run here on Arrow batches as an executor runs
it; the driver turns its error row into the same exception).  All of them run their rows
through ``datafiles.conform_rows``.  Compaction (``optimize``) copies rows already in the
table, which satisfied the rules when they were written, so it has nothing to check.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit import GroupCommitPolicy
from deltacommit.errors import (
    CheckConstraintViolationError,
    ConstraintViolationError,
    GeneratedColumnMismatchError,
    InvariantViolationError,
)
from deltacommit.io.datafiles import WriteTarget
from deltacommit.protocol.actions import Add
from deltacommit.spark.tasks import WriteTask


def _schema() -> pa.Schema:
    invariant = {"delta.invariants": json.dumps({"expression": {"expression": "id > 0"}})}
    return pa.schema([
        pa.field("id", pa.int64(), metadata=invariant),
        pa.field("amount", pa.int64()),
        pa.field("day", pa.string()),
        pa.field("twice", pa.int64(), metadata={"delta.generationExpression": "amount * 2"}),
    ])


def _table(tmp_path: Path) -> str:
    path = str(tmp_path / "t")
    dc.DeltaTable.create(path, _schema(), partition_by=["day"],
                         configuration={"delta.constraints.small": "amount < 1000"})
    return path


GOOD = {"id": [1, 2], "amount": [10, 20], "day": ["a", "a"]}
BAD: dict[str, tuple[dict[str, list[object]], type[ConstraintViolationError], str]] = {
    "invariant": ({"id": [1, -2], "amount": [10, 20], "day": ["a", "a"]},
                  InvariantViolationError, "id > 0"),
    "check": ({"id": [1, 2], "amount": [10, 2000], "day": ["a", "a"]},
              CheckConstraintViolationError, "amount < 1000"),
    "generated": ({"id": [1, 2], "amount": [10, 20], "day": ["a", "a"], "twice": [20, 41]},
                  GeneratedColumnMismatchError, "amount * 2"),
}


def _arrow(cols: dict[str, list[object]]) -> pa.Table:
    types = {f.name: f.type for f in _schema()}
    return pa.table({k: pa.array(v, types[k]) for k, v in cols.items()})


def _spark_task(path: str, data: pa.Table) -> None:
    """A write task as an executor runs it, and the driver's handling of its result."""
    table = dc.DeltaTable(path)
    task = WriteTask(WriteTarget.of(table.uri, table.snapshot), {}, None)
    docs = [json.loads(v) for b in task(iter(data.to_batches())) for v in
            b.column(0).to_pylist()]
    errors = [d["error"] for d in docs if "error" in d]
    if errors:  # as the driver raises it (spark/writer.py)
        raise getattr(dc.errors, errors[0]["type"])(errors[0]["message"])
    with table.transaction("WRITE", {"mode": "Append"}) as txn:
        txn.add(Add.from_json(d["add"]) for d in docs)


def _append_across_processes(path: str, data: pa.Table) -> None:
    """``dc.append`` on a table whose commits are shared by the processes of a host (this
    process serves them): each append writes its own file through ``dc.write``."""
    with tempfile.TemporaryDirectory(prefix="dc-") as sockets:
        table = dc.DeltaTable(path, group_commit=GroupCommitPolicy(processes=True,
                                                                   socket_dir=sockets))
        try:
            dc.append(table, data)
        finally:
            committer = table.group_committer
            assert committer is not None
            committer.close()


def _appender(path: str, data: pa.Table) -> None:
    app = dc.Appender(path, "ingest", background=False)
    app.append(data, 0)
    app.flush()


PATHS: dict[str, Callable[[str, pa.Table], object]] = {
    "write": lambda p, d: dc.write(p, d),
    "overwrite": lambda p, d: dc.write(p, d, mode="overwrite"),
    "overwrite-partition": lambda p, d: dc.write(p, d, mode="overwrite", predicate="day = 'a'"),
    "append-group-commit": lambda p, d: dc.append(dc.DeltaTable(p, group_commit=True), d),
    "append-across-processes": _append_across_processes,
    "appender": _appender,
    "spark-task": _spark_task,
}


def _files(path: str) -> list[str]:
    return sorted(p.name for p in Path(path).rglob("*.parquet"))


@pytest.mark.parametrize("rule", list(BAD))
@pytest.mark.parametrize("write_path", list(PATHS))
def test_every_write_path_enforces_every_rule(tmp_path: Path, write_path: str, rule: str) -> None:
    path = _table(tmp_path)
    write = PATHS[write_path]
    cols, error, expression = BAD[rule]
    with pytest.raises(error) as raised:
        write(path, _arrow(cols))
    assert expression in str(raised.value) and path in str(raised.value)
    assert dc.DeltaTable(path).version == 0
    assert _files(path) == []  # refused before any file was written
    write(path, _arrow(GOOD))
    rows = dc.DeltaTable(path).to_arrow().sort_by("id").to_pylist()
    assert [(r["id"], r["twice"]) for r in rows] == [(1, 20), (2, 40)]


def test_compaction_keeps_the_rows_that_passed(tmp_path: Path) -> None:
    path = _table(tmp_path)
    for i in range(3):
        dc.write(path, _arrow({"id": [i + 1], "amount": [i], "day": ["a"]}))
    before = dc.DeltaTable(path).to_arrow().sort_by("id")
    dc.DeltaTable(path).optimize.compact()
    after = dc.DeltaTable(path)
    assert after.version == 4
    assert after.to_arrow().sort_by("id").equals(before)
