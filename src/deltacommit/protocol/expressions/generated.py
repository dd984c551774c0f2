"""Generated columns: values a SQL expression computes from the row.  Pure: no I/O.

PROTOCOL.md "Generated Columns": a column whose field metadata holds
``delta.generationExpression`` must satisfy ``(column <=> expression) IS TRUE`` in every row
written.  Spark computes the column when an INSERT leaves it out; a writer that skipped the
check would commit rows Spark's readers (partition pruning on ``year(ts)``, say) trust blindly.
So the write stage (``datafiles.conform_rows``) computes the column when the data lacks it and
compares it, NULL-safely, when the data supplies it.

Expressions are parsed by the one parser (``parser.parse_expression``) and evaluated by the one
evaluator (``evaluator``), whose semantics are Spark 4's with ANSI mode on in a session whose
time zone is UTC (``operators``, ``casts``, ``functions`` state each rule and the Spark rule it
follows).  Where deltacommit cannot follow Spark exactly it refuses the expression
(UnsupportedProtocolError naming it); where Spark itself fails on a row's values it fails the
write (ExpressionValueError naming the table, the column, the expression and the value).  It
never writes a value Spark would not.  A table whose generation expression cannot be evaluated
is refused when it is created (``check_expressions``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from deltacommit.errors import GeneratedColumnMismatchError, InvalidArgumentError
from deltacommit.protocol.expressions.arrow_values import pcx
from deltacommit.protocol.expressions.declarations import (
    GENERATION_KEY as GENERATION_KEY,
)
from deltacommit.protocol.expressions.declarations import (
    GeneratedColumn as GeneratedColumn,
)
from deltacommit.protocol.expressions.declarations import (
    generated_columns as generated_columns,
)
from deltacommit.protocol.expressions.evaluator import (
    EvaluationFailed,
    value_type,
)
from deltacommit.protocol.expressions.evaluator import (
    evaluate as evaluate_expression,
)
from deltacommit.protocol.expressions.evaluator import (
    evaluate_condition as condition_values,
)
from deltacommit.protocol.expressions.parser import parse_expression, parse_spark_expression
from deltacommit.protocol.expressions.sql_semantics import null_safe_equal

#: A condition failed on a row or cannot be evaluated (``error(what)`` gives the error).
ConditionFailed = EvaluationFailed


def _describe(table: str, column: GeneratedColumn) -> str:
    return f"table {table}: generated column {column.name!r} ({column.expression})"


def _values(expression: str, data: pa.Table, to: pa.DataType | None) -> pa.ChunkedArray[Any]:
    """The expression's value for each row of ``data`` (as ``to`` if given);
    EvaluationFailed saying why if it does not parse, fails on a row or cannot be evaluated."""
    try:
        tree = parse_spark_expression(expression)
    except InvalidArgumentError as e:
        raise EvaluationFailed(str(e)) from None
    return evaluate_expression(tree, data, to)


def evaluate(column: GeneratedColumn, data: pa.Table, to: pa.DataType, table: str
             ) -> pa.ChunkedArray[Any]:
    """The column's values for the rows of ``data`` (columns in the table's types), as ``to``;
    UnsupportedProtocolError naming the expression if deltacommit cannot evaluate it as Spark
    does, ExpressionValueError naming the row and the value where Spark fails on it."""
    try:
        return _values(column.expression, data, to)
    except EvaluationFailed as e:
        raise e.error(_describe(table, column)) from None


def evaluate_condition(expression: str, data: pa.Table) -> pa.ChunkedArray[Any]:
    """A boolean expression for each row: TRUE, FALSE or NULL; ConditionFailed (an
    InvalidArgumentError) if it fails on a row or cannot be evaluated."""
    try:
        tree = parse_spark_expression(expression)
    except InvalidArgumentError as e:
        raise EvaluationFailed(str(e)) from None
    return condition_values(tree, data)


def expression_type(expression: str, schema: pa.Schema) -> pa.DataType:
    """The type of an expression's values over columns of ``schema`` (Spark's type, which a
    generated column must have); InvalidArgumentError if it cannot be evaluated."""
    try:
        return value_type(parse_spark_expression(expression), schema)
    except EvaluationFailed as e:
        raise InvalidArgumentError(f"{expression!r} cannot be evaluated: {e.message}") from None


def check_expressions(schema: pa.Schema, table: str) -> None:
    """Refuse, when a table is created, generation expressions deltacommit cannot evaluate
    for the schema's types (InvalidArgumentError naming the column), rather than a table every
    later write refuses: each is evaluated over no rows."""
    empty = schema.empty_table()
    for c in generated_columns(schema):
        try:
            _values(c.expression, empty, schema.field(c.name).type)
        except EvaluationFailed as e:
            raise InvalidArgumentError(
                f"table {table}: generated column {c.name!r} has expression {c.expression!r}, "
                f"which deltacommit cannot evaluate: {e.message}") from None


def fill_generated(data: pa.Table, columns: Sequence[GeneratedColumn], schema: pa.Schema,
                   table: str) -> pa.Table:
    """``data`` (the table's other columns, in its types) with the missing generated
    ``columns`` computed and appended."""
    for c in columns:
        values = evaluate(c, data, schema.field(c.name).type, table)
        data = data.append_column(schema.field(c.name), values)
    return data


def check_generated(data: pa.Table, columns: Sequence[GeneratedColumn], table: str) -> None:
    """GeneratedColumnMismatchError unless every supplied value equals its expression's,
    NULL-safely (``(column <=> expression) IS TRUE``, NaN equal to NaN)."""
    if data.num_rows == 0:
        return
    for c in columns:
        supplied = data.column(c.name).combine_chunks()
        expected = evaluate(c, data, supplied.type, table).combine_chunks()
        ok = null_safe_equal(supplied, expected, pa.types.is_floating(supplied.type))
        bad = pcx.invert(ok)
        count = int(pcx.sum(pcx.cast(bad, pa.int64())).as_py() or 0)
        if count:
            i = int(pcx.index(bad, True).as_py())
            raise GeneratedColumnMismatchError(
                f"{_describe(table, c)}: {count} row(s) supply a value other than the "
                f"expression's, for example {supplied[i].as_py()!r} where the expression gives "
                f"{expected[i].as_py()!r} (row {data.slice(i, 1).to_pylist()[0]!r}); leave the "
                "column out to have it computed. Nothing was written")


__all__ = ["GENERATION_KEY", "ConditionFailed", "GeneratedColumn", "check_expressions",
           "check_generated", "evaluate", "evaluate_condition", "expression_type",
           "fill_generated", "generated_columns", "parse_expression"]
