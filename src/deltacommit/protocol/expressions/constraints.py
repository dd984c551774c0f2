"""Column invariants and CHECK constraints, checked on the data before any file is written.

A table's constraints live in two places (PROTOCOL.md "Column Invariants" and "Check
Constraints"): ``delta.invariants`` in a column's metadata (``{"expression": {"expression":
"id > 0"}}``) and ``delta.constraints.<name>`` table properties.  A writer that skips them
commits rows every other engine refuses, so every write path (``dc.write``, group commit, the
Appender, the CLI, Spark) calls ``check_constraints`` before writing data.

Expressions are parsed by the one parser (``parser.parse_expression``) and evaluated
column-wise with Arrow by the one evaluator (``evaluator``), which compares as Spark does (NaN
equals NaN and is above every other value, so a NaN row violates ``NOT (x > 100)`` and ``x !=
x``) and fails where Spark fails.

A row satisfies a constraint only when the expression is TRUE, so NULL violates it as FALSE
does.  That is Delta's rule, not SQL's CHECK (where only FALSE violates): PROTOCOL.md "Check
Constraints" ("a specified Boolean expression must be true for each input row"), and Delta on
Spark fails a row when ``result == null || result == false`` (``CheckDeltaInvariant.assertRule``
in delta-io/delta, spark/src/main/scala/org/apache/spark/sql/delta/constraints/), tested by
``InvariantEnforcementSuite`` "CHECK constraint is enforced if somehow created", where
``valueA < valueB`` with ``valueB`` NULL is violated.  An expression this evaluator cannot
interpret refuses the write (skipping it would be a silent violation), and one Spark fails on
(an overflow, a division by zero: ANSI mode) fails the write with ExpressionValueError.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import (
    CheckConstraintViolationError,
    InvalidArgumentError,
    InvariantViolationError,
    SchemaMismatchError,
    UnsupportedProtocolError,
)
from deltacommit.protocol.expressions.arrow_values import pcx
from deltacommit.protocol.expressions.evaluator import EvaluationFailed, evaluate_condition
from deltacommit.protocol.expressions.parser import parse_expression
from deltacommit.protocol.json_values import loads
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.properties import CONSTRAINT_PREFIX

INVARIANTS_KEY = b"delta.invariants"


@dataclass(frozen=True, slots=True)
class Constraint:
    """One constraint: ``kind`` is ``invariant`` (named by its column) or ``check``."""

    kind: str
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


def check_constraints(data: pa.Table, constraints: list[Constraint], table: str) -> None:
    """Raise InvariantViolationError / CheckConstraintViolationError naming the constraint and
    the first violating row; UnsupportedProtocolError if an expression cannot be evaluated,
    ExpressionValueError where Spark fails on a row's values."""
    if not constraints or data.num_rows == 0:
        return
    for c in constraints:
        what = f"table {table}: {_describe(c)}"
        try:
            result = evaluate_condition(parse_expression(c.expression), data)
        except EvaluationFailed as failed:
            if failed.row_known:
                raise failed.error(what) from None
            raise _cannot_evaluate(what, failed.message) from None
        except InvalidArgumentError as e:  # it does not parse
            raise _cannot_evaluate(what, str(e)) from None
        # Violated where the expression is FALSE or NULL: only TRUE passes.
        failing = pcx.invert(pcx.fill_null(result, False))
        count = int(pcx.sum(failing).as_py() or 0)
        if count:
            row = int(pcx.index(failing, True).as_py())
            sample = data.slice(row, 1).to_pylist()[0]
            cls = InvariantViolationError if c.kind == "invariant" else CheckConstraintViolationError
            raise cls(f"{what} is violated by {count} row(s), for example {sample!r}; nothing "
                      "was written")


def _cannot_evaluate(what: str, why: str) -> UnsupportedProtocolError:
    return UnsupportedProtocolError(f"{what} cannot be evaluated by deltacommit ({why}); "
                                    "refusing to write rather than skip it")


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


def _describe(c: Constraint) -> str:
    if c.kind == "invariant":
        return f"the invariant of column {c.name!r} ({c.expression})"
    return f"CHECK constraint {c.name!r} ({c.expression})"
