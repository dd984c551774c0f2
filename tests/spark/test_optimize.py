"""dcs.optimize: compaction whose bins Spark tasks rewrite, with the guarantees of
DeltaTable.optimize.compact (every row once, dataChange=false, deletion vectors applied,
deltalake reads the result)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit import spark as dcs

pytestmark = pytest.mark.spark


def _small_files(uri: str, files: int) -> None:
    for i in range(files):
        dc.write(uri, pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64()),
                                "day": [f"d{i % 2}"] * 10}), partition_by=["day"])


def test_compacts_with_spark_tasks(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _small_files(uri, 12)
    before = dc.DeltaTable(uri)
    assert len(before.files()) == 12
    metrics = dcs.optimize(spark, uri)
    after = dc.DeltaTable(uri)
    assert metrics["numFilesRemoved"] == 12 and metrics["numFilesAdded"] == 2
    assert metrics["partitionsOptimized"] == 2 and metrics["version"] == after.version
    assert len(after.files()) == 2 and all(not a.data_change for a in after.files())
    ids = Counter(after.to_arrow().column("id").to_pylist())
    assert ids == Counter(range(120))
    assert Counter(deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist()) == ids
    log = (Path(uri) / "_delta_log" / f"{after.version:020d}.json").read_text().splitlines()
    info = json.loads(log[0])["commitInfo"]
    assert info["operation"] == "OPTIMIZE"


def test_applies_deletion_vectors_and_respects_the_filter(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, pa.schema([("id", pa.int64()), ("day", pa.string())]),
                         partition_by=["day"],
                         configuration={"delta.enableDeletionVectors": "true"})
    _small_files(uri, 6)
    dc.DeltaTable(uri).delete("id IN (0, 10, 20, 30, 40, 50)")
    assert len([a for a in dc.DeltaTable(uri).files() if a.deletion_vector]) == 6
    metrics = dcs.optimize(spark, uri, partition_filters=[("day", "=", "d0")])
    after = dc.DeltaTable(uri)
    assert metrics["partitionsOptimized"] == 1
    assert not [a for a in after.files() if a.partition_values["day"] == "d0" and
                a.deletion_vector]
    expected = Counter(i for i in range(60) if i % 10)
    assert Counter(after.to_arrow().column("id").to_pylist()) == expected
