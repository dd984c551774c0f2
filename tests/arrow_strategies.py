"""Hypothesis strategies for Arrow types and values, nested ones included (shared by the
fingerprint and rewrite tests)."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

PRIMITIVES: list[pa.DataType] = [
    pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.float64(), pa.bool_(),
    pa.string(), pa.binary(), pa.date32(), pa.timestamp("us"), pa.timestamp("us", tz="UTC"),
    pa.decimal128(10, 2),
]


def types(max_leaves: int = 4) -> st.SearchStrategy[pa.DataType]:
    """Primitive, struct, list and map types, nested a few levels."""
    names = st.sampled_from(["a", "b", "c", "d"])

    def nest(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
        return st.one_of(
            st.lists(st.tuples(names, children), min_size=1, max_size=3,
                     unique_by=lambda f: f[0]).map(lambda fs: pa.struct(fs)),
            children.map(pa.list_),
            st.tuples(st.sampled_from([pa.string(), pa.int32()]), children).map(
                lambda kv: pa.map_(kv[0], kv[1])),
        )

    return st.recursive(st.sampled_from(PRIMITIVES), nest, max_leaves=max_leaves)


_FLOAT32_MAX = 3.4e38


def values(t: pa.DataType, nullable: bool = True) -> st.SearchStrategy[Any]:
    """Python values of type ``t`` (nulls included when ``nullable``)."""
    base: st.SearchStrategy[Any]
    if pa.types.is_integer(t):
        bits = t.bit_width
        base = st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    elif pa.types.is_float32(t):
        base = st.floats(width=32, allow_nan=True, allow_infinity=True)
    elif pa.types.is_floating(t):
        base = st.floats(allow_nan=True, allow_infinity=True)
    elif pa.types.is_boolean(t):
        base = st.booleans()
    elif pa.types.is_string(t):
        base = st.text(max_size=12)
    elif pa.types.is_binary(t):
        base = st.binary(max_size=12)
    elif pa.types.is_date32(t):
        base = st.dates(dt.date(1900, 1, 1), dt.date(2200, 1, 1))
    elif pa.types.is_timestamp(t):
        base = st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1))
        if t.tz is not None:
            base = base.map(lambda d: d.replace(tzinfo=dt.UTC))
    elif pa.types.is_decimal(t):
        base = st.decimals(min_value=-(10 ** 8) + 1, max_value=10 ** 8 - 1, places=2,
                           allow_nan=False, allow_infinity=False)
    elif pa.types.is_struct(t):
        base = st.fixed_dictionaries({f.name: values(f.type) for f in t})
    elif pa.types.is_map(t):
        base = st.lists(st.tuples(values(t.key_type, nullable=False), values(t.item_type)),
                        max_size=3)
    elif pa.types.is_list(t):
        base = st.lists(values(t.value_type), max_size=3)
    else:  # pragma: no cover - a type the strategies above never make
        raise AssertionError(t)
    return st.one_of(st.none(), base) if nullable else base


def tables(min_rows: int = 0, max_rows: int = 12) -> st.SearchStrategy[pa.Table]:
    """Tables of one to four columns of any type of ``types``."""
    @st.composite
    def build(draw: st.DrawFn) -> pa.Table:
        column_types = draw(st.lists(types(), min_size=1, max_size=4))
        n = draw(st.integers(min_rows, max_rows))
        arrays = [pa.array(draw(st.lists(values(t), min_size=n, max_size=n)), type=t)
                  for t in column_types]
        return pa.Table.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])

    return build()


def same_value(a: Any, b: Any) -> bool:
    """Python values equal as a rewrite must keep them: NaN equals NaN, -0.0 is not 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, decimal.Decimal) and isinstance(b, decimal.Decimal):
        return a == b
    return type(a) is type(b) and a == b


def canonical_rows(table: pa.Table) -> list[str]:
    """The rows of ``table`` as a sorted list of canonical strings (a multiset to compare):
    NaN spelled one way, -0.0 kept apart from 0.0."""
    def canon(v: Any) -> Any:
        if isinstance(v, float):
            if math.isnan(v):
                return "NaN"
            return ("-0.0" if v == 0 and math.copysign(1, v) < 0 else v)
        if isinstance(v, dict):
            return {k: canon(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [canon(x) for x in v]
        return v
    return sorted(repr(canon(r)) for r in table.to_pylist())
