"""Z-order: the row order that keeps rows close in several columns at once.  Pure.

Sorting by one column gives tight min/max statistics for it and useless ones for the rest.
Interleaving the bits of each column's rank (a Morton code) orders rows along a Z-shaped curve,
so each file of the result covers a small box in every Z-ordered column and data skipping
works for filters on any of them.  Ranks rather than raw values put every type (strings,
dates, decimals) on one integer scale; each column gets ``64 // k`` bits of the 64-bit code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MAX_COLUMNS = 64

#: What ``unorderable_reason`` tells a user Z-order accepts.
ORDERABLE = ("numbers (integers, floats, decimals), booleans, strings, binaries, dates, "
             "timestamps, times and durations")


def unorderable_reason(t: pa.DataType) -> str | None:
    """Why a column of type ``t`` cannot be Z-ordered (None when it can): only values with one
    total order get a rank; structs, lists and maps have none Delta defines."""
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
            or pa.types.is_boolean(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_binary(t) or pa.types.is_large_binary(t)
            or pa.types.is_fixed_size_binary(t) or pa.types.is_temporal(t)
            or pa.types.is_null(t)):
        return None
    if pa.types.is_struct(t):
        kind = "a struct"
    elif pa.types.is_map(t):
        kind = "a map"
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        kind = "a list"
    else:
        kind = "a type without an order"
    return f"it is {kind} ({t}); Z-order ranks {ORDERABLE}"


def z_values(data: pa.Table, columns: Sequence[str]) -> np.ndarray[Any, np.dtype[np.uint64]]:
    """The Z-order code of each row over ``columns`` (nulls first in each column)."""
    k = len(columns)
    if not 0 < k <= MAX_COLUMNS:
        raise ValueError(f"Z-order needs 1 to {MAX_COLUMNS} columns, got {k}")
    n = data.num_rows
    bits = 64 // k
    top = np.uint64((1 << bits) - 1)
    scaled: list[np.ndarray[Any, np.dtype[np.uint64]]] = []
    for name in columns:
        col = data.column(name)
        if pa.types.is_null(col.type):  # all nulls: one rank
            scaled.append(np.zeros(n, dtype=np.uint64))
            continue
        # Dense ranks from 1; nulls (ranked last by Arrow) become 0, so they sort first.
        ranks = pc.rank(col, sort_keys="ascending", tiebreaker="dense").to_numpy().astype(
            np.uint64)
        if col.null_count:
            ranks[col.is_null().to_numpy(zero_copy_only=False)] = 0
        else:
            ranks -= np.uint64(1)
        high = ranks.max() if n else np.uint64(0)
        if high > top:  # more distinct values than bits: keep the order, lose resolution
            ranks = (ranks.astype(np.float64) * (float(top) / float(high))).astype(np.uint64)
        scaled.append(ranks)
    z = np.zeros(n, dtype=np.uint64)
    one = np.uint64(1)
    for bit in range(bits - 1, -1, -1):
        shift = np.uint64(bit)
        for ranks in scaled:
            z = (z << one) | ((ranks >> shift) & one)
    return z


def z_sorted(data: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``data`` in Z-order over ``columns`` (stable: equal codes keep their order)."""
    if data.num_rows < 2:
        return data
    order = np.argsort(z_values(data, columns), kind="stable")
    return data.take(order)
