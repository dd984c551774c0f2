"""Reads with a filter open only the files whose partition values and statistics admit a
matching row: counted through a store wrapper, on a 1,000-file table, from JSON statistics
and from a checkpoint's ``stats_parsed``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.scan import FileScan, prune_files
from deltacommit.io.storage.forwarding import ForwardingStore
from deltacommit.protocol.expressions.parser import parse_expression


class CountingStore(ForwardingStore):
    """Counts the data files opened through it."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.opened: list[str] = []

    def local_path(self, path: str) -> str | None:
        if path.endswith(".parquet"):
            self.opened.append(path)
        return self.inner.local_path(path)

    def open_input(self, path: str) -> Any:
        if path.endswith(".parquet"):
            self.opened.append(path)
        return self.inner.open_input(path)


@pytest.fixture(scope="module")
def thousand_files(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = str(tmp_path_factory.mktemp("pruning") / "t")
    n = 10_000
    data = pa.table({"id": pa.array(range(n), pa.int64()),
                     "name": pa.array([f"n{i:05d}" for i in range(n)]),
                     "part": pa.array([i // 5000 for i in range(n)], pa.int32())})
    dc.write(uri, data, partition_by=["part"], target_file_rows=10)
    return uri


@pytest.mark.parametrize("checkpointed", [False, True])
def test_a_read_of_a_few_keys_opens_only_their_files(
        thousand_files: str, monkeypatch: pytest.MonkeyPatch, checkpointed: bool) -> None:
    t = dc.DeltaTable(thousand_files)
    if checkpointed:
        t.checkpoint()
        t = dc.DeltaTable(thousand_files)
    assert len(t.files()) == 1000
    keys = [17, 4242, 9999]
    bounds = {a.path: json.loads(a.stats or "{}") for a in t.files()}
    holding = {p for p, s in bounds.items()
               if any(s["minValues"]["id"] <= k <= s["maxValues"]["id"] for k in keys)}
    assert len(holding) == 3
    store = CountingStore(t.log_store.store)
    monkeypatch.setattr(dc.DeltaTable, "file_scan", lambda self, schema: replace(
        FileScan(self.uri, self.version, schema, self.partition_columns),
        given_store=store))
    got = t.to_arrow(filter="id IN (17, 4242, 9999)")
    assert sorted(got.column("id").to_pylist()) == keys
    assert sorted(store.opened) == sorted(holding)
    assert len(store.opened) == 3
    # A range over one partition, and a key no file holds.
    store.opened.clear()
    got = t.to_arrow(columns=["name"], filter="id >= 100 AND id < 120 OR part = 1 AND id < 5005")
    assert sorted(got.column("name").to_pylist()) == [
        f"n{i:05d}" for i in [*range(100, 120), *range(5000, 5005)]]
    assert len(store.opened) == 3  # two files of 10 rows in part 0, one in part 1
    store.opened.clear()
    assert t.to_arrow(filter="id = 123456").num_rows == 0
    assert store.opened == []


def test_prune_files_serves_row_level_operations(thousand_files: str) -> None:
    t = dc.DeltaTable(thousand_files)
    files = prune_files(t.snapshot, parse_expression("name = 'n00042' OR id = 9043"))
    assert len(files) == 2
    assert {a.partition_values["part"] for a in files} == {"0", "1"}
    assert prune_files(t.snapshot, parse_expression("part = 1 AND id < 100")) == []
    # Without statistics to decide (a function of a column) every file is kept.
    assert len(prune_files(t.snapshot, parse_expression("upper(name) = 'N00042'"))) == 1000


def test_files_without_statistics_are_always_read(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [1, 2, 3]}), configuration={
        "delta.dataSkippingNumIndexedCols": "0"})
    t = dc.DeltaTable(uri)
    assert t.to_arrow(filter="id = 2").column("id").to_pylist() == [2]
