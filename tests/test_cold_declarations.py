"""A cold process's append loads the expression evaluator only for a table that declares
something to evaluate, and still enforces what it declares: a fresh process (nothing imported
before, as in a Lambda function) appending to a table with a CHECK constraint refuses a
violating row and commits nothing, and one appending to a table with a generated column fills
it in and refuses a supplied value that disagrees.  What a table stamps on every append
(identity values, row ids, in-commit timestamps, partition values) a cold append stamps too,
loading none of the modules appends do without (``tests/cold_modules.py``); and the read verbs,
which load with a table's first read, load without pandas."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

import deltacommit as dc
from deltacommit.protocol.actions import CommitInfo, parse_commit
from tests.cold_modules import NOT_LOADED_BY_APPENDS

CHILD = r"""
import json, sys
import pyarrow as pa
import deltacommit as dc
uri, rows = sys.argv[1], json.loads(sys.argv[2])
try:
    dc.write(uri, pa.table(rows), mode="append")
    error = None
except dc.DeltaCommitError as e:
    error = type(e).__name__
print(json.dumps({"error": error, "evaluator": "deltacommit.protocol.expressions.evaluator"
                  in sys.modules, "loaded": sorted(m for m in json.loads(sys.argv[3])
                                                   if m in sys.modules)}), flush=True)
"""


def _append_in_fresh_process(uri: str, rows: dict[str, list[Any]]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", CHILD, uri, json.dumps(rows),
                           json.dumps(NOT_LOADED_BY_APPENDS)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _evaluating(check: str) -> list[str]:
    """What checking a declared expression loads of the modules appends do without: the
    check, the parser and the evaluator, nothing of the reads."""
    return sorted(f"deltacommit.protocol.expressions.{m}"
                  for m in (check, "ast", "evaluator", "lexer", "parser"))


def test_a_cold_append_enforces_a_check_constraint(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, pa.schema([("id", pa.int64())]),
                         configuration={"delta.constraints.positive": "id > 0"})
    refused = _append_in_fresh_process(uri, {"id": [1, -5]})
    assert refused.pop("loaded") == _evaluating("constraints")
    assert refused == {"error": "CheckConstraintViolationError", "evaluator": True}
    accepted = _append_in_fresh_process(uri, {"id": [7]})
    assert accepted.pop("loaded") == _evaluating("constraints")
    assert accepted == {"error": None, "evaluator": True}
    assert dc.DeltaTable(uri).to_arrow().column("id").to_pylist() == [7]


def test_a_cold_append_fills_and_checks_a_generated_column(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    doubled = pa.field("doubled", pa.int64(),
                       metadata={b"delta.generationExpression": b"id * 2"})
    dc.DeltaTable.create(uri, pa.schema([("id", pa.int64()), doubled]))
    refused = _append_in_fresh_process(uri, {"id": [1], "doubled": [3]})
    assert refused.pop("loaded") == _evaluating("generated")
    assert refused == {"error": "GeneratedColumnMismatchError", "evaluator": True}
    filled = _append_in_fresh_process(uri, {"id": [4]})
    assert filled.pop("loaded") == _evaluating("generated")
    assert filled == {"error": None, "evaluator": True}
    assert dc.DeltaTable(uri).to_arrow().to_pylist() == [{"id": 4, "doubled": 8}]


def test_a_cold_append_stamps_identity_row_ids_and_commit_timestamps_by_partition(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    identity = pa.field("id", pa.int64(), metadata={
        "delta.identity.start": "1", "delta.identity.step": "1",
        "delta.identity.allowExplicitInsert": "false"})
    dc.DeltaTable.create(uri, pa.schema([identity, ("v", pa.string()), ("p", pa.int64())]),
                         partition_by=["p"],
                         configuration={"delta.enableRowTracking": "true",
                                        "delta.enableInCommitTimestamps": "true"})
    out = _append_in_fresh_process(uri, {"v": ["a", "b", "c"], "p": [0, 1, 0]})
    assert out == {"error": None, "evaluator": False, "loaded": []}
    table = dc.DeltaTable(uri)
    assert table.version == 1
    assert sorted(table.to_arrow().column("id").to_pylist()) == [1, 2, 3]
    assert table.schema.field("id").metadata[b"delta.identity.highWaterMark"] == b"3"
    files = table.files()
    assert sorted(a.partition_values["p"] for a in files) == ["0", "1"]
    assert all(a.path.startswith(f"p={a.partition_values['p']}/") for a in files)
    assert sorted((a.base_row_id, a.num_records()) for a in files) in (
        [(0, 1), (1, 2)], [(0, 2), (2, 1)])
    assert {a.default_row_commit_version for a in files} == {1}
    data = (Path(uri) / "_delta_log" / f"{1:020}.json").read_bytes()
    assert data.startswith(b'{"commitInfo":{"inCommitTimestamp":')
    info = next(a for a in parse_commit(data, "1") if isinstance(a, CommitInfo))
    assert isinstance(info.values["inCommitTimestamp"], int)


def test_loading_the_read_verbs_imports_no_pandas() -> None:
    """pyarrow imports pandas (0.2 s) the first time an array is built from Python values;
    no module of the read path does so when it loads (a module-level ``pa.scalar`` did)."""
    done = subprocess.run([sys.executable, "-c", "import sys, deltacommit.ops.read; "
                           "print('pandas' in sys.modules)"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "False"


def test_a_first_listing_imports_no_pandas(tmp_path: Path) -> None:
    """A fresh process's first ``get_add_actions`` on a partitioned table whose files are all in
    a checkpoint with statistics builds its columns without pyarrow's conversion from Python
    values, which imports pandas (0.2 s, about twice deltalake's whole first listing).  Files
    added after the checkpoint are still converted from Python values."""
    uri = str(tmp_path / "t")
    for day in ("2026-01-01", "2026-01-02", "", "2026-01-03"):
        dc.write(uri, pa.table({"day": pa.array([day or None], pa.string()), "id": [1]}),
                 partition_by=["day"])
    dc.DeltaTable(uri).checkpoint()
    done = subprocess.run([sys.executable, "-c", (
        "import sys; from deltacommit import DeltaTable; "
        "t = DeltaTable(sys.argv[1]).get_add_actions(flatten=True); "
        "print(t.num_rows, sorted(map(str, t.column('partition.day').to_pylist())), "
        "'pandas' in sys.modules)"), uri], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["4", "['2026-01-01',", "'2026-01-02',", "'2026-01-03',",
                                   "'None']", "False"]
