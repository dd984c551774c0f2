"""``create``, ``append``, ``show`` and ``history`` from the command line, on a local table."""

from __future__ import annotations

import json
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import deltacommit as dc
from deltacommit.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_create_append_each_input_format_show_and_history(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "events")
    out = run(capsys, "create", uri, "--schema", "id:long,amount:decimal(10,2),day:string",
              "--partition-by", "day", "--property", "delta.checkpointInterval=5")
    assert out.strip() == f"created file://{uri} at version 0"

    parquet = tmp_path / "a.parquet"
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()),
                             "amount": pa.array([None, None], pa.decimal128(10, 2)),
                             "day": ["2026-11-21", "2026-11-22"]}), parquet)
    csv = tmp_path / "b.csv"
    csv.write_text("id,amount,day\n3,1.50,2026-11-22\n4,,2026-11-23\n")
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"id": 5, "amount": "2.25", "day": "2026-11-23"}\n'
                     '{"id": 6, "amount": null, "day": "2026-11-23"}\n')

    out = run(capsys, "append", uri, str(parquet))
    assert out.strip() == "appended 2 rows in 2 files as version 1 (1 attempt)"
    out = run(capsys, "append", uri, str(csv), str(jsonl), "--app-id", "loader", "--app-version", "7")
    assert out.strip() == "appended 4 rows in 2 files as version 2 (1 attempt)"
    out = run(capsys, "append", uri, str(csv), "--app-id", "loader", "--app-version", "7")
    assert out.strip() == "skipped: loader version 7 is already committed (table at version 2)"

    info = json.loads(run(capsys, "show", uri, "--json", "--files"))
    assert info["version"] == 2
    assert info["partition_columns"] == ["day"]
    assert [f["name"] for f in info["schema"]["fields"]] == ["id", "amount", "day"]
    assert info["num_records"] == 6 and info["num_files"] == 4 == len(info["files"])
    assert info["partitions"] == {"day=2026-11-21": 1, "day=2026-11-22": 2, "day=2026-11-23": 1}
    assert info["configuration"]["delta.checkpointInterval"] == "5"
    text = run(capsys, "show", uri)
    assert "version    2" in text and "  day=2026-11-23: 1 file" in text and "  id: int64" in text

    history = json.loads(run(capsys, "history", uri, "--json"))
    assert [h["version"] for h in history] == [2, 1, 0]
    assert [h["operation"] for h in history] == ["WRITE", "WRITE", "CREATE TABLE"]
    assert len(json.loads(run(capsys, "history", uri, "--json", "--limit", "1"))) == 1
    lines = run(capsys, "history", uri).splitlines()
    assert len(lines) == 3 and lines[0].split()[0] == "2" and "CREATE TABLE" in lines[2]

    # What the commands wrote is an ordinary Delta table.
    rows = sorted(dc.DeltaTable(uri).to_arrow().select(["id", "day"]).to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": i, "day": d} for i, d in enumerate(
        ["2026-11-21", "2026-11-22", "2026-11-22", "2026-11-23", "2026-11-23", "2026-11-23"], start=1)]
    amounts = {r["id"]: r["amount"] for r in dc.DeltaTable(uri).to_arrow().to_pylist()}
    assert (str(amounts[3]), amounts[4], str(amounts[5]), amounts[6]) == ("1.50", None, "2.25", None)
    assert deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == 6


def test_append_creates_the_table_from_its_first_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    data = tmp_path / "in.json"
    data.write_text('{"k": "x", "v": 1.5}\n{"k": "y", "v": 2.5}\n')
    out = run(capsys, "append", uri, str(data), "--partition-by", "k")
    assert out.strip() == "appended 2 rows in 2 files as version 1 (1 attempt)"
    t = dc.DeltaTable(uri)
    assert t.partition_columns == ["k"] and t.to_arrow().num_rows == 2


def test_files_whose_guessed_types_disagree_are_refused_naming_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With no table to take types from, CSV reads a date-like column as a date and JSON lines
    as a timestamp: the append stops with both files named, and nothing is created."""
    uri = str(tmp_path / "t")
    csv = tmp_path / "a.csv"
    csv.write_text("id,day\n1,2026-11-22\n")
    jsonl = tmp_path / "b.jsonl"
    jsonl.write_text('{"id": 2, "day": "2026-11-22"}\n')
    assert main(["append", uri, str(csv), str(jsonl)]) != 0
    err = capsys.readouterr().err
    assert "incompatible schemas" in err and str(csv) in err and str(jsonl) in err
    assert not (tmp_path / "t").exists()
