"""Bounds of a data file's columns taken from the statistics its Parquet writer computed.
Pure: no I/O (it reads a footer already in memory).

Arrow's Parquet writer computes each column chunk's least and greatest value while it
encodes, and ``compute_stats`` would otherwise find the same two values again with a pass over
every row (for a 10M-row rewrite of an id, a number and a string column, about a fifth of the
encoding's own processor time).  The writer's statistics are only taken where they are exactly
the values ``compute_stats`` would find, so the ``stats`` written do not change:

* signed integers and dates (the same numbers), and strings (Parquet orders UTF-8 bytewise,
  as Arrow's ``min_max`` does; the writer does not truncate them, and leaves out a chunk's
  statistics altogether past 4 KiB, which makes the column computed from its rows);
* 32- and 64-bit floats whose bounds are not zero: both skip NaN (a chunk of only NaN has
  no footer bounds), and an infinite bound is left out of ``stats`` either way; Parquet
  writes a zero bound as ``-0.0`` or ``+0.0`` whatever the sign of the value, so a column
  with a zero bound in any row group is computed from its rows;
* every row group must give its chunk's bounds, or hold only nulls there;
* a column of another type (timestamps, decimals, nested or dictionary columns) is computed
  from its rows as before, and so is a bound pyarrow cannot turn into a Python value (a date
  past year 9999).

A chunk is a top-level column's by its position among the file's leaf columns, not by its
dotted path: a top-level column named ``a.b`` and the field ``b`` of a struct ``a`` have the
same ``path_in_schema``, and their bounds are not each other's.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def _eligible(t: pa.DataType) -> bool:
    return bool(pa.types.is_signed_integer(t) or pa.types.is_string(t)
                or pa.types.is_large_string(t) or pa.types.is_date32(t)
                or pa.types.is_float32(t) or pa.types.is_float64(t))


def _signless(bounds: tuple[Any, Any]) -> bool:
    """Whether a float chunk's footer bounds may stand for its values' own: not a zero
    (written ``-0.0``/``+0.0`` whatever the value's sign) nor a NaN."""
    return all(b is not None and b == b and b != 0 for b in bounds)


def footer_bounds(metadata: pq.FileMetaData, schema: pa.Schema) -> dict[str, tuple[Any, Any]]:
    """``(least, greatest)`` of each top-level column of ``schema`` (the Arrow schema the
    file was written from) whose bounds the footer ``metadata`` gives exactly, as Python
    values (both None where the column holds only nulls); the other columns are left out."""
    if metadata.num_row_groups == 0:
        return {}
    wanted = {f.name: f.type for f in schema if _eligible(f.type)}
    if not wanted:
        return {}
    leaves = _top_level_leaves(schema)
    if leaves is None or metadata.num_columns != len(leaves):
        return {}
    found: dict[str, tuple[Any, Any]] = {}
    lost: set[str] = set()
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for j in range(group.num_columns):
            name = leaves[j]
            if name not in wanted or name in lost:
                continue
            chunk = group.column(j)
            if chunk.path_in_schema != name:
                return {}  # not the file ``schema`` describes: every column from its rows
            bounds = _chunk_bounds(chunk, group.num_rows)
            if bounds is None:
                lost.add(name)
                continue
            if bounds == (None, None):
                found.setdefault(name, (None, None))
                continue
            if pa.types.is_floating(wanted[name]) and not _signless(bounds):
                lost.add(name)
                continue
            lo, hi = found.get(name, (None, None))
            found[name] = (bounds[0] if lo is None or bounds[0] < lo else lo,
                           bounds[1] if hi is None or bounds[1] > hi else hi)
    return {n: b for n, b in found.items() if n not in lost}


def _top_level_leaves(schema: pa.Schema) -> list[str | None] | None:
    """For each leaf column of a Parquet file written from ``schema``, in order, the name of
    the top-level column it is (None for a leaf of a nested column); None for a schema
    whose leaves cannot be counted here."""
    out: list[str | None] = []
    for f in schema:
        n = leaf_count(f.type)
        if n is None:
            return None
        out.extend([f.name] if n == 1 and _eligible(f.type) else [None] * n)
    return out


def leaf_count(t: pa.DataType) -> int | None:
    """How many Parquet leaf columns a column of type ``t`` is written as."""
    types = pa.types
    if isinstance(t, pa.ExtensionType):
        return leaf_count(t.storage_type)
    if types.is_struct(t):
        total = 0
        for i in range(t.num_fields):
            c = leaf_count(t.field(i).type)
            if c is None:
                return None
            total += c
        return total or None
    if types.is_map(t):
        k, v = leaf_count(t.key_type), leaf_count(t.item_type)
        return None if k is None or v is None else k + v
    if types.is_list(t) or types.is_large_list(t) or types.is_fixed_size_list(t) or \
            types.is_list_view(t) or types.is_large_list_view(t):
        return leaf_count(t.value_type)
    if types.is_union(t) or types.is_run_end_encoded(t):
        return None
    return 1


def _chunk_bounds(chunk: pq.ColumnChunkMetaData, rows: int) -> tuple[Any, Any] | None:
    """The chunk's exact ``(least, greatest)``, ``(None, None)`` if it holds only nulls, or
    None where the footer does not tell."""
    stats = chunk.statistics
    if stats is None:
        return None
    try:
        if not stats.has_min_max:
            # (``has_null_count`` is missing from pyarrow's type stubs, not from pyarrow)
            all_null = getattr(stats, "has_null_count", False) and stats.null_count == rows
            return (None, None) if all_null else None
        if getattr(stats, "is_min_exact", True) is False or \
                getattr(stats, "is_max_exact", True) is False:
            return None
        return stats.min, stats.max
    except (ValueError, UnicodeDecodeError, OverflowError, pa.ArrowException):
        # a value pyarrow cannot convert (a date past year 9999): computed from the rows
        return None


__all__ = ["footer_bounds"]
