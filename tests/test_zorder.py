"""Z-order: the Morton code over column ranks (pure), and optimize.z_order rewriting
partitions in that order with deltalake's arguments and metrics."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.protocol.zorder import z_sorted, z_values


def _interleave(x: int, y: int, bits: int) -> int:
    z = 0
    for b in range(bits - 1, -1, -1):
        z = (z << 1) | ((x >> b) & 1)
        z = (z << 1) | ((y >> b) & 1)
    return z


def test_two_columns_interleave_their_ranks_bit_by_bit() -> None:
    xs, ys = [0, 1, 2, 3, 3, 0], [3, 2, 1, 0, 3, 0]
    z = z_values(pa.table({"x": xs, "y": ys}), ["x", "y"])
    assert z.tolist() == [_interleave(x, y, 32) for x, y in zip(xs, ys, strict=True)]


@given(st.lists(st.one_of(st.none(), st.integers(-5, 5)), min_size=1, max_size=50))
def test_one_column_is_a_plain_sort_nulls_first(values: list[int | None]) -> None:
    got = z_sorted(pa.table({"v": values}), ["v"]).column("v").to_pylist()
    assert got == sorted(values, key=lambda v: (v is not None, v or 0))


@given(st.lists(st.tuples(st.text(max_size=3), st.integers(0, 3)), min_size=1, max_size=40))
def test_z_sort_is_a_permutation(rows: list[tuple[str, int]]) -> None:
    t = pa.table({"s": [r[0] for r in rows], "i": [r[1] for r in rows]})
    out = z_sorted(t, ["s", "i"])
    assert Counter(zip(out.column("s").to_pylist(), out.column("i").to_pylist(),
                       strict=True)) == Counter(rows)


def _points(uri: str, files: int, per_file: int) -> None:
    rng = random.Random(7)
    for _ in range(files):
        dc.write(uri, pa.table({"x": [rng.randrange(1000) for _ in range(per_file)],
                                "y": [rng.randrange(1000) for _ in range(per_file)],
                                "p": ["a"] * per_file}), partition_by=["p"])


def test_z_order_rewrites_the_partition_with_tight_boxes(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _points(uri, 16, 500)
    before = Counter(zip(*dc.DeltaTable(uri).to_arrow().select(["x", "y"]).to_pydict().values(),
                         strict=True))
    t = dc.DeltaTable(uri)
    size = sum(a.size for a in t.files())
    metrics = t.optimize.z_order(["x", "y"], target_size=size // 8)
    after = dc.DeltaTable(uri)
    assert metrics["numFilesRemoved"] == 16 and metrics["numFilesAdded"] == len(after.files())
    assert len(after.files()) >= 4
    rows = after.to_arrow().select(["x", "y"]).to_pydict()
    assert Counter(zip(*rows.values(), strict=True)) == before
    peer = deltalake.DeltaTable(uri).to_pyarrow_table().select(["x", "y"]).to_pydict()
    assert Counter(zip(*peer.values(), strict=True)) == before
    # Each new file covers a small box: the x and y ranges of a file are on average far
    # narrower than the whole range (random input files each span nearly all of it).
    for col in ("x", "y"):
        spans = [json.loads(a.stats)["maxValues"][col] - json.loads(a.stats)["minValues"][col]
                 for a in after.files() if a.stats]
        assert sum(spans) / len(spans) < 700
    log = Path(uri) / "_delta_log" / f"{after.version:020d}.json"
    info = json.loads(log.read_text().splitlines()[0])["commitInfo"]
    assert info["operation"] == "OPTIMIZE"
    assert json.loads(info["operationParameters"]["zOrderBy"]) == ["x", "y"]
    assert all(not a.data_change for a in after.files())


@pytest.mark.parametrize(("columns", "needle"), [
    ([], "1 to 64 distinct data columns"),
    (["nope"], "1 to 64 distinct data columns"),
    (["x", "x"], "1 to 64 distinct data columns"),
    (["p"], "partition columns"),
])
def test_bad_columns_are_refused_before_any_write(tmp_path: Path, columns: list[str],
                                                  needle: str) -> None:
    uri = str(tmp_path / "t")
    _points(uri, 2, 10)
    before = sorted(p.name for p in Path(uri).rglob("*"))
    with pytest.raises(dc.InvalidArgumentError, match=needle):
        dc.DeltaTable(uri).optimize.z_order(columns)
    assert sorted(p.name for p in Path(uri).rglob("*")) == before
