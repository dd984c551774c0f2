"""A cold process's append loads the expression evaluator only for a table that declares
something to evaluate, and still enforces what it declares: a fresh process (nothing imported
before, as in a Lambda function) appending to a table with a CHECK constraint refuses a
violating row and commits nothing, and one appending to a table with a generated column fills
it in and refuses a supplied value that disagrees."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

import deltacommit as dc

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
                  in sys.modules}), flush=True)
"""


def _append_in_fresh_process(uri: str, rows: dict[str, list[Any]]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", CHILD, uri, json.dumps(rows)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_a_cold_append_enforces_a_check_constraint(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, pa.schema([("id", pa.int64())]),
                         configuration={"delta.constraints.positive": "id > 0"})
    refused = _append_in_fresh_process(uri, {"id": [1, -5]})
    assert refused == {"error": "CheckConstraintViolationError", "evaluator": True}
    accepted = _append_in_fresh_process(uri, {"id": [7]})
    assert accepted == {"error": None, "evaluator": True}
    assert dc.DeltaTable(uri).to_arrow().column("id").to_pylist() == [7]


def test_a_cold_append_fills_and_checks_a_generated_column(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    doubled = pa.field("doubled", pa.int64(),
                       metadata={b"delta.generationExpression": b"id * 2"})
    dc.DeltaTable.create(uri, pa.schema([("id", pa.int64()), doubled]))
    refused = _append_in_fresh_process(uri, {"id": [1], "doubled": [3]})
    assert refused == {"error": "GeneratedColumnMismatchError", "evaluator": True}
    filled = _append_in_fresh_process(uri, {"id": [4]})
    assert filled == {"error": None, "evaluator": True}
    assert dc.DeltaTable(uri).to_arrow().to_pylist() == [{"id": 4, "doubled": 8}]
