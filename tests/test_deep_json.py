"""JSON nested deeper than Python's decoder can go (a few kilobytes of brackets) wherever a table
holds JSON: a commit line is corrupt (a clear error naming the file and line, nothing written on
it); ``_last_checkpoint`` is a hint (ignored with a warning, the log listed); ``add.stats`` is
optional (treated as absent, with a warning: reads, listings, checkpoints, deletes and writes go
on); ``schemaString`` is a corrupt log.  Never a RecursionError."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.snapshot import state_cache
from deltacommit.protocol.json_values import loads

DEPTH = 100_000
DEEP = '{"a":' * DEPTH + "1" + "}" * DEPTH
SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string())])


def test_loads_turns_deep_nesting_into_a_value_error() -> None:
    for text in (DEEP, "[" * DEPTH + "]" * DEPTH):
        with pytest.raises(ValueError, match="nested too deeply"):
            loads(text)
    assert loads('{"a": [1]}') == {"a": [1]}


def _table(tmp_path: Path, configuration: dict[str, str] | None = None) -> str:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [1, 2, 3], "day": ["a", "b", "c"]}, schema=SCHEMA),
             partition_by=["day"], configuration=configuration or {})
    return uri


def _newest_commit(uri: str) -> Path:
    return sorted((Path(uri) / "_delta_log").glob("*.json"))[-1]


def test_a_deeply_nested_commit_line_is_a_corrupt_log_naming_file_and_line(
        tmp_path: Path) -> None:
    uri = _table(tmp_path)
    table = dc.DeltaTable(uri)
    commit = _newest_commit(uri).with_name(f"{table.version + 1:020d}.json")
    commit.write_text('{"commitInfo":{}}\n{"txn":' + DEEP + "}\n")
    for attempt in (lambda: dc.DeltaTable(uri),
                    lambda: dc.write(table, pa.table({"id": [4], "day": ["d"]}, schema=SCHEMA),
                                     mode="append")):
        with pytest.raises(dc.CorruptLogError, match=rf"{commit.name}: line 2: .*nested too deeply"):
            attempt()
    assert _newest_commit(uri) == commit  # nothing committed on it


def test_a_deeply_nested_last_checkpoint_is_ignored_and_the_log_listed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    uri = _table(tmp_path)
    dc.DeltaTable(uri).checkpoint()
    dc.write(uri, pa.table({"id": [4], "day": ["d"]}, schema=SCHEMA), mode="append")
    (Path(uri) / "_delta_log" / "_last_checkpoint").write_text('{"version":' + DEEP + "}")
    state_cache.clear()  # a new process opens the table
    with caplog.at_level(logging.WARNING):
        table = dc.DeltaTable(uri)
    assert "ignoring" in caplog.text and "nested too deeply" in caplog.text
    assert sorted(table.to_arrow().column("id").to_pylist()) == [1, 2, 3, 4]
    dc.write(uri, pa.table({"id": [5], "day": ["e"]}, schema=SCHEMA), mode="append")
    assert sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist()) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("configuration", [
    {"delta.enableDeletionVectors": "true"},
    {"delta.checkpoint.writeStatsAsStruct": "true", "delta.enableRowTracking": "true"},
], ids=["deletion vectors", "struct stats and row tracking"])
def test_deeply_nested_statistics_are_treated_as_absent(
        configuration: dict[str, str], tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    uri = _table(tmp_path, configuration)
    commit = _newest_commit(uri)
    lines = []
    for line in commit.read_text().splitlines():
        action = json.loads(line)
        if "add" in action and action["add"]["partitionValues"]["day"] == "b":
            # numRecords last: the fast path does not find it, the text must be decoded.
            action["add"]["stats"] = '{"minValues":{"id":' + DEEP + '},"numRecords":1}'
        lines.append(json.dumps(action))
    commit.write_text("\n".join(lines) + "\n")
    with caplog.at_level(logging.WARNING):
        listed = dc.DeltaTable(uri).get_add_actions(flatten=True)
        assert listed.num_rows == 3
        day_b = listed.filter(pa.compute.equal(listed.column("partition.day"), "b"))
        assert day_b.column("num_records").to_pylist() == [None]  # absent, not a crash
        dc.write(uri, pa.table({"id": [4], "day": ["b"]}, schema=SCHEMA), mode="append")
        dc.DeltaTable(uri).checkpoint()
        if "delta.enableDeletionVectors" in configuration:
            dc.DeltaTable(uri).delete("id = 2")  # file skipping cannot rule the file out
            expected = [1, 3, 4]
        else:
            dc.DeltaTable(uri).delete("day = 'c'")
            expected = [1, 2, 4]
    assert "treated as absent" in caplog.text
    assert sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist()) == expected


def test_a_deeply_nested_schema_string_is_a_corrupt_log(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    first = Path(uri) / "_delta_log" / f"{0:020d}.json"
    lines = []
    for line in first.read_text().splitlines():
        action = json.loads(line)
        if "metaData" in action:
            nested = ('{"type":"array","containsNull":true,"elementType":' * 20_000 + '"long"'
                      + "}" * 20_000)
            action["metaData"]["schemaString"] = (
                '{"type":"struct","fields":[{"name":"x","nullable":true,"metadata":{},"type":'
                + nested + "}]}")
        lines.append(json.dumps(action))
    first.write_text("\n".join(lines) + "\n")
    state_cache.clear()  # a new process opens the damaged table
    with pytest.raises(dc.CorruptLogError, match=r"schemaString .*nested too deeply"):
        dc.DeltaTable(uri)


def test_a_file_without_statistics_is_listed_without_them(tmp_path: Path) -> None:
    # Beside a text Arrow's reader refuses ("NaN" for a float), so each row is decoded alone.
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"x": [1.0, 2.0]}))
    dc.write(uri, pa.table({"x": [5.0, 6.0]}), mode="append")
    commits = sorted((Path(uri) / "_delta_log").glob("*.json"))
    for commit in commits:
        lines = []
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                action["add"]["stats"] = None if commit == commits[-1] else (
                    '{"numRecords":2,"minValues":{"x":"NaN"},"maxValues":{"x":2.0}}')
            lines.append(json.dumps(action))
        commit.write_text("\n".join(lines) + "\n")
    state_cache.clear()
    listed = dc.DeltaTable(uri).get_add_actions(flatten=True)
    rows = sorted(listed.select(["num_records", "min.x", "max.x"]).to_pylist(),
                  key=lambda r: r["num_records"] is None)
    assert rows == [{"num_records": 2, "min.x": None, "max.x": 2.0},
                    {"num_records": None, "min.x": None, "max.x": None}]
