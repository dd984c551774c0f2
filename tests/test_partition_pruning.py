"""Partition pruning judges a checkpoint's files column-wise: the files it selects are exactly
those the partition predicate accepts, in the order ``files()`` lists them, and the files of
other partitions never become ``Add`` objects."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.snapshot import state_cache
from deltacommit.protocol.expressions.predicates import from_partition_filters, parse_predicate
from deltacommit.protocol.files.lazy_files import LazyActionMap

REGIONS = ["eu", "us", "a b/c%d", "", None]


def _table(tmp_path: Path, configuration: dict[str, str] | None = None) -> str:
    """A table partitioned by (region, day): its first files in a checkpoint, one checkpoint
    file replaced after it (so its row is hidden), and more files committed after it."""
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("region", pa.string()), ("day", pa.int32())])
    dc.DeltaTable.create(uri, schema, partition_by=["region", "day"],
                         configuration=configuration)
    n = 0
    for day in (1, 2, 3):
        for region in REGIONS:
            dc.write(uri, pa.table({"id": [n], "region": [region], "day": [day]}, schema=schema))
            n += 1
    t = dc.DeltaTable(uri)
    t.checkpoint()
    # Replace partition (eu, 2): its checkpoint row is shadowed by the remove.
    dc.write(uri, pa.table({"id": [100], "region": ["eu"], "day": [2]}, schema=schema),
             mode="overwrite", predicate="region = 'eu' AND day = 2")
    for region in ("eu", None):
        dc.write(uri, pa.table({"id": [200 + n], "region": [region], "day": [3]}, schema=schema))
        n += 1
    state_cache.clear()
    return uri


FILTERS = [
    [("region", "=", "eu")],
    [("region", "in", ["us", "a b/c%d"]), ("day", ">=", 2)],
    [("region", "=", None)],
    [("day", "!=", 3)],
    [("region", "not in", ["eu"])],
]


@pytest.mark.parametrize("filters", FILTERS, ids=[str(f) for f in FILTERS])
@pytest.mark.parametrize("mapping", [None, "name"])
def test_checkpoint_rows_pruned_as_arrow_match_the_per_file_filter(
        tmp_path: Path, filters: list[tuple[str, str, object]], mapping: str | None) -> None:
    config = {"delta.columnMapping.mode": mapping} if mapping else None
    uri = _table(tmp_path, config)
    t = dc.DeltaTable(uri)
    files = t.snapshot._state.files
    assert isinstance(files, LazyActionMap) and files.is_lazy

    selected = t.files(partition_filters=filters)

    # Nothing was built for the rows left out: the checkpoint part is still Arrow.
    assert files.is_lazy
    # The same files, in the same order, as the predicate judging every Add object.
    pred = from_partition_filters(filters)
    types = {c: t.schema.field(c).type for c in t.partition_columns}
    physical = {c: t.schema.field(c).metadata[b"delta.columnMapping.physicalName"].decode()
                for c in t.partition_columns} if mapping else {c: c for c in t.partition_columns}
    expected = [a for a in dc.DeltaTable(uri).files()
                if pred.evaluate({c: a.partition_values.get(physical[c])
                                  for c in t.partition_columns}, types)]
    assert [a.path for a in selected] == [a.path for a in expected]
    assert selected == expected
    assert selected, "each filter selects some files"


def test_a_pruned_read_returns_the_rows_deltalake_returns(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    filters = [("region", "in", ["eu", "us"]), ("day", "<", 3)]
    ours = dc.DeltaTable(uri).to_arrow(partition_filters=filters).sort_by("id").to_pylist()
    theirs = (deltalake.DeltaTable(uri).to_pyarrow_table(partitions=filters)
              .sort_by("id").to_pylist())
    assert ours == theirs
    assert {r["id"] for r in ours} == {0, 1, 6, 100}


def test_pruning_a_table_without_a_checkpoint_filters_its_objects(tmp_path: Path) -> None:
    uri = str(tmp_path / "plain")
    schema = pa.schema([("id", pa.int64()), ("p", pa.string())])
    dc.DeltaTable.create(uri, schema, partition_by=["p"])
    for i, p in enumerate(["x", "y", "x", None]):
        dc.write(uri, pa.table({"id": [i], "p": [p]}, schema=schema))
    t = dc.DeltaTable(uri)
    got = t.files(predicate="p = 'x'")
    assert sorted(a.partition_values["p"] or "" for a in got) == ["x", "x"]
    assert len(t.files(predicate="p IS NULL")) == 1
    assert parse_predicate("p = 'x'") is not None
