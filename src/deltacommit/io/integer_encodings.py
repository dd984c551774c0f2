"""Which integer columns of a data file are written DELTA_BINARY_PACKED.  Pure.

Arrow's writer stores an integer column as a dictionary while its distinct values fit the
dictionary page, and as PLAIN values (8 bytes each for 64 bits, then snappy) after that.  Ids,
sequence numbers, dates and event times are mostly many distinct values close to their
neighbours: PLAIN stores them whole, and writing them, proving the file and every read after
decompress and copy every byte.  DELTA_BINARY_PACKED (Parquet's encoding for such columns)
stores the differences between neighbours in the few bits they need: the unique increasing
``id`` of a 5M-row file takes 29 KB instead of 20 MB, and writes and reads in a fraction of
the time.

A column is written so where a sample of its values says they are mostly distinct (so the
dictionary would not hold them) and the differences are narrow: at most a quarter of the
type's width on average over blocks of 128 values, the encoding's own unit (its miniblocks
take the width of the widest difference from the block's smallest).  Other integer columns
keep the dictionary and PLAIN: few distinct values are smaller and faster as a dictionary.

Every Parquet reader of Delta tables in use reads the encoding: Spark from 3.3 (whose vectorized
reader refused it before, SPARK-36879), parquet-mr, Arrow, parquet-rs (deltalake, the Delta
kernels), Trino and DuckDB.  A table read by an older Spark sets
``deltacommit.parquet.deltaEncodedIntegers=false``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

#: Rows below which a file's columns keep Arrow's encodings: the choice then saves little.
MIN_ROWS = 4096
#: Windows of the column sampled, spread over it, and the values in each.
SAMPLE_WINDOWS = 8
SAMPLE_VALUES = 1024
#: Values per block of DELTA_BINARY_PACKED (the width of a block's differences is its widest).
BLOCK_VALUES = 128


def delta_encoded_columns(data: pa.Table) -> list[str]:
    """The columns of ``data`` to write DELTA_BINARY_PACKED (module docstring): integer,
    date, time and timestamp columns whose sampled differences are narrow; none for a table
    of nested columns (whose dictionary settings would need each leaf's path) or of fewer than
    ``MIN_ROWS`` rows."""
    if data.num_rows < MIN_ROWS or any(pa.types.is_nested(f.type) for f in data.schema):
        return []
    out = []
    for field, column in zip(data.schema, data.columns, strict=True):
        bits = _physical_bits(field.type)
        if bits and _narrow(column, bits):
            out.append(field.name)
    return out


def writer_options(data: pa.Table) -> dict[str, Any]:
    """Arrow writer options that write ``delta_encoded_columns(data)`` so, every other column
    keeping its dictionary (Arrow takes no encoding for a column with a dictionary); none
    when there is no such column."""
    delta = delta_encoded_columns(data)
    if not delta:
        return {}
    chosen = set(delta)
    return {"use_dictionary": [n for n in data.column_names if n not in chosen],
            "column_encoding": dict.fromkeys(delta, "DELTA_BINARY_PACKED")}


def _physical_bits(t: pa.DataType) -> int:
    """The width of the Parquet integer ``t`` is stored as (32 or 64), 0 if it is none."""
    if pa.types.is_integer(t):
        return 64 if t.bit_width == 64 else 32
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return 32
    if pa.types.is_timestamp(t) or pa.types.is_time64(t):
        return 64
    return 0


def _narrow(column: pa.ChunkedArray[Any], bits: int) -> bool:
    """Whether sampled windows of ``column`` (stored as ``bits``-bit integers) hold mostly
    distinct values (at least half of those sampled, each counted within its window) whose
    neighbouring differences take at most a quarter of ``bits`` on average over blocks.

    The widths are looked at first: a column of wide differences (random ids, hashes,
    measurements) is decided without sorting its sample, which would otherwise cost more than
    writing a small file of many such columns.  A window whose values only rise or only fall
    (ids, times) is distinct without a sort either."""
    windows = _sampled(column, pa.int64() if bits == 64 else pa.int32())
    # Each window's differences, taken once for the widths and the distinct count.
    steps_of = [np.diff(stored) for stored in windows]  # wraps as the encoding's arithmetic
    total = blocks = 0
    for steps in steps_of:
        widths = _step_widths(steps)
        total += sum(widths)
        blocks += len(widths)
    if not blocks or total * 4 > bits * blocks:
        return False
    sampled = distinct = 0
    for stored, steps in zip(windows, steps_of, strict=True):
        sampled += len(stored)
        if bool((steps > 0).all()) or bool((steps < 0).all()):
            distinct += len(stored)
        else:
            # One more than the steps between its sorted values (a sort of 1,024 values
            # costs a quarter of ``np.unique``'s hashing).
            distinct += int(np.count_nonzero(np.diff(np.sort(stored)))) + 1
    return distinct * 2 >= sampled


def _sampled(column: pa.ChunkedArray[Any], stored: pa.DataType) -> list[np.ndarray[Any, Any]]:
    """Up to ``SAMPLE_WINDOWS`` windows of ``SAMPLE_VALUES`` consecutive values of
    ``column``, spread evenly over it, without their nulls and as the integers Parquet stores
    (``stored``: unsigned values reinterpreted), as int64 arrays of at least two values."""
    n = len(column)
    span = min(SAMPLE_VALUES, n)
    count = min(SAMPLE_WINDOWS, max(n // span, 1))
    starts = [(n - span) * i // (count - 1) for i in range(count)] if count > 1 else [0]
    out = []
    for start in starts:
        window = column.slice(start, span)
        if window.null_count:
            window = window.drop_null()
        if len(window) < 2:
            continue
        if window.type != stored:
            window = window.cast(stored, safe=False)
        out.append(window.to_numpy().astype(np.int64, copy=False))
    return out


def block_widths(values: np.ndarray[Any, Any]) -> list[int]:
    """The bits DELTA_BINARY_PACKED gives the differences of each block of ``BLOCK_VALUES``
    consecutive ``values`` (int64): the width of the widest difference from the block's
    smallest, with the wrap-around of 64-bit arithmetic the encoding uses."""
    return _step_widths(np.diff(values))  # wraps as the encoding's arithmetic does


def _step_widths(diffs: np.ndarray[Any, Any]) -> list[int]:
    """``block_widths`` of values whose neighbouring differences are ``diffs``."""
    whole = len(diffs) // BLOCK_VALUES * BLOCK_VALUES
    blocks = diffs[:whole].reshape(-1, BLOCK_VALUES)
    highs, lows = blocks.max(axis=1).tolist(), blocks.min(axis=1).tolist()
    if whole < len(diffs):  # the last, shorter block
        highs.append(int(diffs[whole:].max()))
        lows.append(int(diffs[whole:].min()))
    # As Python integers: the range of two int64 differences may not fit in one.
    return [(high - low).bit_length() for high, low in zip(highs, lows, strict=True)]
