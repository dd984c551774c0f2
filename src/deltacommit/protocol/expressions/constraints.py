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

import pyarrow as pa

from deltacommit.errors import (
    CheckConstraintViolationError,
    InvalidArgumentError,
    InvariantViolationError,
    UnsupportedProtocolError,
)
from deltacommit.protocol.expressions.arrow_values import pcx
from deltacommit.protocol.expressions.declarations import (
    INVARIANTS_KEY as INVARIANTS_KEY,
)
from deltacommit.protocol.expressions.declarations import (
    Constraint as Constraint,
)
from deltacommit.protocol.expressions.declarations import (
    check_partition_not_null as check_partition_not_null,
)
from deltacommit.protocol.expressions.declarations import (
    table_constraints as table_constraints,
)
from deltacommit.protocol.expressions.evaluator import EvaluationFailed, evaluate_condition
from deltacommit.protocol.expressions.parser import parse_spark_expression


def check_constraints(data: pa.Table, constraints: list[Constraint], table: str) -> None:
    """Raise InvariantViolationError / CheckConstraintViolationError naming the constraint and
    the first violating row; UnsupportedProtocolError if an expression cannot be evaluated,
    ExpressionValueError where Spark fails on a row's values."""
    if not constraints or data.num_rows == 0:
        return
    for c in constraints:
        what = f"table {table}: {_describe(c)}"
        try:
            result = evaluate_condition(parse_spark_expression(c.expression), data)
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


def _describe(c: Constraint) -> str:
    if c.kind == "invariant":
        return f"the invariant of column {c.name!r} ({c.expression})"
    return f"CHECK constraint {c.name!r} ({c.expression})"
