"""What a table declares for its writers to enforce: invariants, CHECK constraints, generated
columns, NOT NULL partition columns.  Pure.

Reading the declarations needs only the schema's metadata and the table configuration, not the
expression machinery: kept apart from ``constraints`` and ``generated`` (which parse and
evaluate) so that an append to a table that declares nothing never loads the parser and
evaluator (a cold Lambda process pays for every module it imports).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import SchemaMismatchError, UnsupportedProtocolError
from deltacommit.protocol.json_values import loads
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.properties import CONSTRAINT_PREFIX

INVARIANTS_KEY = b"delta.invariants"
GENERATION_KEY = b"delta.generationExpression"


@dataclass(frozen=True, slots=True)
class Constraint:
    """One constraint: ``kind`` is ``invariant`` (named by its column) or ``check``."""

    kind: str
    name: str
    expression: str


@dataclass(frozen=True, slots=True)
class GeneratedColumn:
    """A top-level column and its ``delta.generationExpression``."""

    name: str
    expression: str


def table_constraints(schema: pa.Schema, configuration: Mapping[str, str | None],
                      table: str) -> list[Constraint]:
    """Every invariant (top-level and nested columns) and CHECK constraint of a table."""
    out: list[Constraint] = []

    def visit(field: pa.Field[Any], path: str) -> None:
        meta = field.metadata or {}
        raw = meta.get(INVARIANTS_KEY)
        if raw is not None:
            out.append(Constraint("invariant", path, _invariant_expression(raw, path, table)))
        t = field.type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                visit(t.field(i), f"{path}.{t.field(i).name}")

    for f in schema:
        visit(f, f.name)
    for name, value in TableConfig(configuration, table).constraints.items():
        if not value:
            raise UnsupportedProtocolError(
                f"table {table}: CHECK constraint {CONSTRAINT_PREFIX}{name} has an empty "
                "expression")
        out.append(Constraint("check", name, value))
    return out


def _invariant_expression(raw: bytes, column: str, table: str) -> str:
    try:
        obj = loads(raw)
        expr = obj["expression"]["expression"]
    except (ValueError, KeyError, TypeError):
        raise UnsupportedProtocolError(
            f"table {table}: column {column!r} has delta.invariants {raw!r}, expected "
            '{"expression": {"expression": "<SQL>"}}') from None
    if not isinstance(expr, str) or not expr:
        raise UnsupportedProtocolError(
            f"table {table}: column {column!r} has an empty delta.invariants expression")
    return expr


def generated_columns(schema: pa.Schema) -> list[GeneratedColumn]:
    """The generated columns of a table schema (Delta allows them at the top level only)."""
    out = []
    for f in schema:
        raw = (f.metadata or {}).get(GENERATION_KEY)
        if raw is not None:
            out.append(GeneratedColumn(f.name, raw.decode("utf-8")))
    return out


def check_partition_not_null(data: pa.Table, schema: pa.Schema, partition_columns: list[str],
                             table: str) -> None:
    """An empty string in a partition column is stored as a null partition value (Delta and
    Hive write it as ``__HIVE_DEFAULT_PARTITION__``), so a NOT NULL partition column must refuse
    it like a null, or the table would hold a null where its schema forbids one."""
    for c in partition_columns:
        f = schema.field(c)
        if f.nullable or c not in data.column_names:
            continue
        col = data.column(c)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            mask = pc.cast(pc.equal(col, pa.scalar("", col.type)), pa.int64())
            empty = int(pc.sum(mask).as_py() or 0)
            if empty:
                raise SchemaMismatchError(
                    f"table {table}: partition column {c!r} is not nullable but the data has "
                    f"{empty} empty string value(s), which a partition value stores as null")
