"""Statistics of a one-row file take the value as its own min and max without a compute call:
they must be exactly what the general path writes for the same value."""

from __future__ import annotations

import datetime
import decimal
import json

import pyarrow as pa
import pytest

from deltacommit.protocol.stats.compute import compute_stats

VALUES = [
    pa.array([5], pa.int64()), pa.array([2**63 - 1], pa.uint64()), pa.array([None], pa.int32()),
    pa.array([float("nan")]), pa.array([1.5], pa.float32()), pa.array([float("inf")]),
    pa.array([-0.0]), pa.array([None], pa.float64()),
    pa.array(["x" * 40]), pa.array(["\U0001F600" * 40]), pa.array([None], pa.string()),
    pa.array(["ab"], pa.string_view()), pa.array(["y"], pa.large_string()),
    pa.array(["a"]).dictionary_encode(),
    pa.array([datetime.datetime(2020, 1, 1, 1, 1, 1, 123456)], pa.timestamp("us", tz="UTC")),
    pa.array([datetime.datetime(2020, 1, 1)], pa.timestamp("ns")),
    pa.array([datetime.date(2020, 1, 2)]), pa.array([datetime.date(2020, 1, 2)], pa.date64()),
    pa.array([decimal.Decimal("1.50")], pa.decimal128(5, 2)),
    pa.array([{"a": 1, "b": None}]), pa.array([True]), pa.array([b"x"]), pa.array([[1]]),
]


@pytest.mark.parametrize("values", VALUES, ids=lambda v: str(v.type))
def test_one_row_bounds_are_those_of_the_general_path(values: pa.Array) -> None:
    one = json.loads(compute_stats(pa.table({"c": values})))
    # Two copies of the row go through ``min_max``; their bounds are the row's.
    two = json.loads(compute_stats(pa.table({"c": pa.concat_arrays([values, values])})))
    assert one.get("minValues") == two.get("minValues")
    assert one.get("maxValues") == two.get("maxValues")
    assert one["numRecords"] == 1


def test_a_one_row_column_in_several_chunks() -> None:
    column = pa.chunked_array([pa.array([], pa.int64()), pa.array([7], pa.int64())])
    stats = json.loads(compute_stats(pa.table({"x": column})))
    assert stats["minValues"] == {"x": 7} and stats["maxValues"] == {"x": 7}
