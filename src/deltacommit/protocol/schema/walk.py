"""Walking the fields of a nested Arrow schema: every struct field at every depth, below
lists and maps too.  Pure.

Column mapping gives each struct field, at any depth, an id and a physical name; type
widening records type changes on any of them.  Visiting and rebuilding the fields is the same
walk each time, so it lives here once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

import pyarrow as pa


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def schema_fields(schema: pa.Schema) -> Iterator[tuple[pa.Field[Any], str]]:
    """Every struct field of ``schema`` with its dotted path (``a.b``, ``l.element.c``,
    ``m.key.d``, ``m.value.e``), parents before their children."""

    def fields_below(t: pa.DataType, path: str) -> Iterator[tuple[pa.Field[Any], str]]:
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                yield from field_and_below(t.field(i), f"{path}.{t.field(i).name}")
        elif _is_list(t):
            yield from fields_below(cast(Any, t).value_type, f"{path}.element")
        elif pa.types.is_map(t):
            yield from fields_below(t.key_type, f"{path}.key")
            yield from fields_below(t.item_type, f"{path}.value")

    def field_and_below(f: pa.Field[Any], path: str) -> Iterator[tuple[pa.Field[Any], str]]:
        yield f, path
        yield from fields_below(f.type, path)

    for f in schema:
        yield from field_and_below(f, f.name)


def rebuild_type(t: pa.DataType, field_fn: Callable[[pa.Field[Any]], pa.Field[Any]]
                 ) -> pa.DataType:
    """``t`` with ``field_fn`` applied to each of its struct fields (``field_fn`` rebuilds the
    field's own type with ``rebuild_type`` to reach deeper ones); lists (of any kind) become
    ``list`` and maps keep their key and value nullability."""
    if pa.types.is_struct(t):
        return pa.struct([field_fn(t.field(i)) for i in range(t.num_fields)])
    if _is_list(t):
        vf = cast(Any, t).value_field
        return pa.list_(pa.field(vf.name, rebuild_type(vf.type, field_fn), nullable=vf.nullable))
    if pa.types.is_map(t):
        mapped: pa.DataType = pa.map_(  # type: ignore[call-overload]
            pa.field("key", rebuild_type(t.key_type, field_fn), nullable=False),
            pa.field("value", rebuild_type(t.item_type, field_fn),
                     nullable=t.item_field.nullable))
        return mapped
    return t
