"""The row-multiset fingerprint every rewrite proves its output with (``fingerprint.py``):
equal for the same rows in any order and any Arrow layout, different when a value, a row or
the pairing of values into rows changes."""

from __future__ import annotations

import os
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from deltacommit.protocol import fingerprint as fp_module
from deltacommit.protocol.fingerprint import (
    Fingerprint,
    fingerprint,
    row_differences,
    same_values,
    value_hashes,
)
from tests.arrow_strategies import same_value, tables, values

#: ``DELTACOMMIT_HYPOTHESIS_EXAMPLES=2000`` for a long run; the suite's default stays quick.
EXAMPLES = int(os.environ.get("DELTACOMMIT_HYPOTHESIS_EXAMPLES", "40"))


def _parquet_round_trip(t: pa.Table) -> pa.Table:
    sink = pa.BufferOutputStream()
    pq.write_table(t, sink)
    return pq.read_table(pa.BufferReader(sink.getvalue())).cast(t.schema)


@settings(max_examples=EXAMPLES, deadline=None)
@given(tables(), st.data())
def test_order_chunks_and_storage_do_not_change_it(t: pa.Table, data: st.DataObject) -> None:
    fp = fingerprint(t)
    order = data.draw(st.permutations(list(range(t.num_rows))))
    assert fingerprint(t.take(pa.array(order, pa.int64()))) == fp
    cut = data.draw(st.integers(0, t.num_rows))
    assert fingerprint(pa.concat_tables([t.slice(0, cut), t.slice(cut)])) == fp
    # Sliced out of a larger table (offsets into shared buffers).
    padded = pa.concat_tables([t.slice(0, cut), t, t.slice(cut)]).combine_chunks()
    assert fingerprint(padded.slice(cut, t.num_rows)) == fp
    assert fingerprint(_parquet_round_trip(t)) == fp
    assert row_differences(t, t.take(pa.array(order[::-1], pa.int64()))) == []


@settings(max_examples=EXAMPLES, deadline=None)
@given(tables(min_rows=1), st.data())
def test_pieces_add_up(t: pa.Table, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, t.num_rows))
    head, tail = fingerprint(t.slice(0, cut)), fingerprint(t.slice(cut))
    assert head + tail == fingerprint(t)
    assert fingerprint(t) - tail == head


@settings(max_examples=EXAMPLES, deadline=None)
@given(tables(min_rows=1), st.data())
def test_a_changed_value_is_found(t: pa.Table, data: st.DataObject) -> None:
    row = data.draw(st.integers(0, t.num_rows - 1))
    col = data.draw(st.integers(0, t.num_columns - 1))
    column = t.column(col)
    old = column[row].as_py()
    new = data.draw(values(column.type))
    assume(not same_value(old, new) and not (old is None and new is None))
    changed = column.to_pylist()
    changed[row] = new
    other = t.set_column(col, t.field(col), pa.array(changed, column.type))
    problems = fingerprint(t).differences(fingerprint(other))
    assert problems and str([t.column_names[col]]) in " ".join(problems)
    assert row_differences(t, other)


@settings(max_examples=EXAMPLES, deadline=None)
@given(tables(min_rows=1), st.data())
def test_a_lost_or_doubled_row_is_found(t: pa.Table, data: st.DataObject) -> None:
    row = data.draw(st.integers(0, t.num_rows - 1))
    keep = [i for i in range(t.num_rows) if i != row]
    lost = t.take(pa.array(keep, pa.int64()))
    doubled = pa.concat_tables([t, t.slice(row, 1)])
    assert f"{t.num_rows - 1} rows where {t.num_rows} were expected" in \
        row_differences(t, lost)
    assert row_differences(t, doubled)


def test_values_moved_between_rows_are_found() -> None:
    t = pa.table({"id": [1, 2], "v": ["a", "b"]})
    swapped = pa.table({"id": [1, 2], "v": ["b", "a"]})
    assert row_differences(t, swapped) == [
        "the same values of each column combined into other rows"]


def _double(bits: int) -> float:
    value: float = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return value


def test_nan_is_one_value_and_zero_keeps_its_sign() -> None:
    t = pa.table({"x": pa.array([1.0, float("nan"), 0.0])})
    other_nan = pa.table({"x": pa.array([1.0, _double(0x7FF8000000000001), 0.0])})
    assert fingerprint(other_nan) == fingerprint(t)
    assert row_differences(t, other_nan) == []  # Arrow's equality fails on NaN; hashes decide
    negative_zero = pa.table({"x": pa.array([1.0, float("nan"), -0.0])})
    assert row_differences(t, negative_zero) == ["other values in column(s) ['x']"]
    f32 = pa.table({"x": pa.array(np.array([np.nan, 1.5], np.float32))})
    assert fingerprint(f32) == fingerprint(f32.take([1, 0]))


@pytest.mark.parametrize("column, signed", [
    (pa.array([1.0, 0.0]), pa.array([1.0, -0.0])),
    (pa.array(np.array([0.0, 2.0], np.float32)), pa.array(np.array([-0.0, 2.0], np.float32))),
    (pa.array([[1.0, 0.0], None]), pa.array([[1.0, -0.0], None])),
    (pa.array([{"a": 1, "f": 0.0}]), pa.array([{"a": 1, "f": -0.0}])),
    (pa.array([[(0.0, "k")]], pa.map_(pa.float64(), pa.string())),
     pa.array([[(-0.0, "k")]], pa.map_(pa.float64(), pa.string()))),
    (pa.array([0.0, 1.0]).dictionary_encode(), pa.array([-0.0, 1.0]).dictionary_encode()),
])
def test_a_zero_of_the_other_sign_differs_where_rows_are_in_order(
        column: pa.Array[Any], signed: pa.Array[Any]) -> None:
    """Rows in the same order that Arrow's equality finds equal (it takes ``-0.0`` for
    ``0.0``) are the same rows only if every zero has its sign, at any depth: a rewrite that
    turned one into the other is refused as the fingerprints would refuse it."""
    t = pa.table({"x": column})
    other = pa.table({"x": signed})
    assert t.equals(other)  # what Arrow's equality says
    assert not same_values(t, other)
    assert not same_values(pa.chunked_array([column]), pa.chunked_array([signed[:1], signed[1:]]))
    assert row_differences(t, other) == ["other values in column(s) ['x']"]
    assert same_values(t, pa.table({"x": pa.chunked_array([column[:1], column[1:]])}))
    assert row_differences(t, t) == []


@pytest.mark.parametrize(("a", "b"), [
    (pa.array([None], pa.string()), pa.array([""], pa.string())),
    (pa.array([None], pa.int64()), pa.array([0], pa.int64())),
    (pa.array([None], pa.list_(pa.int64())), pa.array([[]], pa.list_(pa.int64()))),
    (pa.array([[1, 2]]), pa.array([[2, 1]])),
    (pa.array([[None]], pa.list_(pa.int64())), pa.array([[]], pa.list_(pa.int64()))),
    (pa.array([{"a": 1, "b": 2}]), pa.array([{"a": 2, "b": 1}])),
    (pa.array([{"a": None}], pa.struct([("a", pa.int64())])),
     pa.array([None], pa.struct([("a", pa.int64())]))),
    (pa.array(["ab", "c"]), pa.array(["a", "bc"])),
    (pa.array(["a\x00"]), pa.array(["a"])),
    (pa.array([b"12345678x"]), pa.array([b"12345678y"])),
    (pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())),
     pa.array([[("k", 2)]], pa.map_(pa.string(), pa.int64()))),
])
def test_values_that_differ_hash_differently(a: pa.Array[Any], b: pa.Array[Any]) -> None:
    assert value_hashes(a)[0] != value_hashes(b)[0]


def test_layouts_of_one_value_hash_alike() -> None:
    strings = ["x" * n for n in range(20)] * 80  # repeated: dictionary-encoded when hashed
    plain = value_hashes(pa.array(strings))
    assert (value_hashes(pa.array(strings, pa.large_string())) == plain).all()
    assert (value_hashes(pa.array(strings).dictionary_encode()) == plain).all()
    assert (value_hashes(pa.array(strings[:19])) == plain[:19]).all()  # not encoded
    assert (value_hashes(pa.array(strings, pa.string_view())) == plain).all()


def test_big_columns_hash_in_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows and string bytes are hashed a bounded number at a time; the pieces add up."""
    n = 20_000
    t = pa.table({"id": pa.array(np.arange(n)), "s": pa.array(np.arange(n).astype(str)),
                  "l": pa.array([[i, i + 1] for i in range(n)])})
    whole = fingerprint(t)
    monkeypatch.setattr(fp_module, "_ROWS_PER_STEP", 3_000)
    monkeypatch.setattr(fp_module, "_BYTES_PER_STEP", 1_000)
    assert fingerprint(t) == whole
    assert fingerprint(t.slice(0, 7_000)) + fingerprint(t.slice(7_000)) == whole
    assert fingerprint(t).rows == n


def test_fingerprints_of_other_columns_do_not_add() -> None:
    a = fingerprint(pa.table({"x": [1]}))
    b = fingerprint(pa.table({"y": [1]}))
    with pytest.raises(ValueError, match="different columns"):
        _ = a + b
    assert isinstance(a, Fingerprint) and a.differences(b) == ["columns ['y: int64'] where "
                                                               "['x: int64'] were expected"]
