"""Expressions evaluated over Arrow data with Spark 4's semantics (ANSI mode, a UTC session):
the one evaluator of generated columns, CHECK constraints, invariants and row predicates.
Pure.

``evaluate`` gives an expression's value for every row (a column), ``evaluate_condition`` a
condition's TRUE, FALSE or NULL, ``predicate_mask`` the rows where a predicate is TRUE.  Columns
resolve against a ``Scope``: a table (``TableScope``), or several tables side by side under
aliases (``AliasScope``: ``t.id`` and ``s.id`` in a MERGE condition).

Where this package cannot follow Spark exactly it refuses the expression (``EvaluationFailed``
saying why); where Spark itself fails on a row's values it fails naming the row.  It never
computes a value Spark would not.

Evaluation order is Spark's, row by row: ``AND``, ``OR``, ``coalesce``, ``IN`` and ``CASE``
evaluate a later operand only for the rows whose result it decides, an arithmetic operation or a
comparison stops at a NULL operand, a division at a NULL divisor, so ``x = 0 OR 10 / x > 1``
does not fail where x is 0.  An operand that cannot fail (columns, literals, conditions over
them) is evaluated for every row, which is cheaper and gives the same answer.  The tree is
walked without recursion: an operator chain thousands of terms long is a tree as deep.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from deltacommit.errors import (
    DeltaCommitError,
    ExpressionValueError,
    InvalidArgumentError,
    UnsupportedProtocolError,
)
from deltacommit.protocol.expressions import functions, operators
from deltacommit.protocol.expressions import like as like_patterns
from deltacommit.protocol.expressions.arrow_values import (
    RowFailure,
    Value,
    first_true,
    is_scalar,
    null_where_not,
    pcx,
    type_of,
)
from deltacommit.protocol.expressions.ast import (
    And,
    Arithmetic,
    Between,
    Case,
    Cast,
    Column,
    Comparison,
    Expr,
    Function,
    InList,
    IsNull,
    Like,
    Literal,
    Negate,
    Not,
    Or,
)
from deltacommit.protocol.expressions.casts import ansi_cast, implicit_cast, to_string
from deltacommit.protocol.expressions.spark_types import (
    Unsupported,
    common_type,
    is_string,
    is_temporal,
)

# --------------------------------------------------------------------------- columns


class Scope(Protocol):
    """Where an expression's columns come from."""

    @property
    def num_rows(self) -> int: ...

    def resolve(self, path: tuple[str, ...]) -> Value:
        """The column at ``path`` (an array); Unsupported naming the columns if none is."""
        ...

    def type_of(self, path: tuple[str, ...]) -> pa.DataType | None:
        """The type of the column at ``path``, None if none is."""
        ...


def _field(t: pa.DataType, parts: Sequence[str]) -> list[str] | None:
    """The field names of the struct path ``parts`` under type ``t``, as the schema spells
    them (exactly, else the one field equal ignoring case); None if there is none."""
    out: list[str] = []
    for part in parts:
        if not pa.types.is_struct(t):
            return None
        names = [t.field(i).name for i in range(t.num_fields)]
        found = part if part in names else _single([n for n in names if n.lower() == part.lower()])
        if found is None:
            return None
        out.append(found)
        t = t.field(found).type
    return out


def _single(names: list[str]) -> str | None:
    return names[0] if len(names) == 1 else None


@dataclass(frozen=True)
class TableScope:
    """The columns of one table.  A name is a top-level column (matched exactly, else the one
    equal ignoring case, as Spark resolves names), or a path into struct columns; a backquoted
    name with dots (```a.b```) names a top-level column so named, else the struct path.  An
    unquoted ``a.b`` (or ```a`.`b```) is, as in Spark, field ``b`` of struct ``a`` wherever
    there is one, even beside a top-level column named ``a.b``; that column only where there
    is no such field."""

    table: pa.Table

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def _locate(self, path: tuple[str, ...]) -> list[str] | None:
        names = self.table.column_names
        if len(path) == 1 and path[0] in names:
            return [path[0]]
        joined = ".".join(path)
        nested = self._nested(list(path) if len(path) > 1 else path[0].split("."))
        if nested is None and len(path) > 1 and joined in names:
            return [joined]
        return nested

    def _nested(self, parts: list[str]) -> list[str] | None:
        """``parts`` as a path into a struct column, if there is one."""
        names = self.table.column_names
        top = parts[0] if parts[0] in names else _single(
            [n for n in names if n.lower() == parts[0].lower()])
        if top is None:
            return None
        rest = _field(self.table.schema.field(top).type, parts[1:])
        return None if rest is None else [top, *rest]

    def holding(self, path: tuple[str, ...]) -> str | None:
        """The top-level column holding what ``path`` names (itself or a field of it); None
        where it names no column."""
        found = self._locate(path)
        return None if found is None else found[0]

    def top_level(self, path: tuple[str, ...]) -> str | None:
        """The top-level column ``path`` names; None where it names a struct field or no
        column."""
        found = self._locate(path)
        return found[0] if found is not None and len(found) == 1 else None

    def type_of(self, path: tuple[str, ...]) -> pa.DataType | None:
        found = self._locate(path)
        if found is None:
            return None
        t: Any = self.table.schema.field(found[0]).type
        for part in found[1:]:
            t = t.field(part).type
        out: pa.DataType = t
        return out

    def resolve(self, path: tuple[str, ...]) -> Value:
        found = self._locate(path)
        if found is None:
            shown = ".".join(path)
            raise Unsupported(f"no column {shown!r}; columns are {self.table.column_names}")
        column: Any = self.table.column(found[0]).combine_chunks()
        for part in found[1:]:
            column = pcx.struct_field(column, [part])
        return column


@dataclass(frozen=True)
class AliasScope:
    """Tables side by side (rows aligned, as a join gives them), each under an alias: ``t.id``
    is column ``id`` of the table aliased ``t``; a name without an alias is the column of the
    one table that has it."""

    tables: Mapping[str, pa.Table]

    @property
    def num_rows(self) -> int:
        return next(iter(self.tables.values())).num_rows if self.tables else 0

    def _scope(self, path: tuple[str, ...]) -> tuple[TableScope, tuple[str, ...]] | None:
        if len(path) > 1 and path[0] in self.tables:
            return TableScope(self.tables[path[0]]), path[1:]
        having = [a for a, t in self.tables.items() if TableScope(t).type_of(path) is not None]
        if len(having) > 1:
            raise Unsupported(f"column {'.'.join(path)!r} is ambiguous: it is in "
                              f"{', '.join(f'{a}.' + '.'.join(path) for a in having)}")
        return (TableScope(self.tables[having[0]]), path) if having else None

    def type_of(self, path: tuple[str, ...]) -> pa.DataType | None:
        found = self._scope(path)
        return None if found is None else found[0].type_of(found[1])

    def resolve(self, path: tuple[str, ...]) -> Value:
        found = self._scope(path)
        if found is None:
            names = [f"{a}.{c}" for a, t in self.tables.items() for c in t.column_names]
            raise Unsupported(f"no column {'.'.join(path)!r}; columns are {names}")
        return found[0].resolve(found[1])


def names_top_level_columns(expr: Expr, schema: pa.Schema) -> bool:
    """Whether every column ``expr`` reads is, resolved as its rows resolve it
    (``TableScope``), the top-level column of ``schema`` that its name (``Column.name``)
    spells.  Partition values and programs over them are keyed by those names, so only then
    may they stand for the rows: unquoted ``a.b`` beside a struct ``a`` with a field ``b`` is
    that field, even where a partition column is named ``a.b``."""
    scope = TableScope(schema.empty_table())
    return all(scope.top_level(node.path) == node.name for node in expr.walk()
               if isinstance(node, Column))


def columns_read(expr: Expr, schema: pa.Schema) -> frozenset[str]:
    """The top-level columns of ``schema`` that ``expr`` reads, spelled as the schema spells
    them: what a scan must read for ``expr`` to be evaluated over its rows (``ID`` reads
    ``id``, a dotted ``x.y`` reads the column ``x.y`` or the struct ``x``, as ``TableScope``
    resolves it).  A column that names nothing is left out, for the evaluator to refuse."""
    scope = TableScope(schema.empty_table())
    found = (scope.holding(path) for path in expr.column_paths())
    return frozenset(name for name in found if name is not None)


def scope_of(data: pa.Table | Scope) -> Scope:
    return TableScope(data) if isinstance(data, pa.Table) else data


# --------------------------------------------------------------------------- literals


def literal_value(node: Literal) -> pa.Scalar[Any]:
    """A literal as the Arrow scalar of its Spark type (a naive TIMESTAMP is in UTC, the
    session time zone)."""
    t, v = node.type, node.value
    if node.kind == "timestamp" and v.tzinfo is None:
        v = v.replace(tzinfo=dt.UTC)
    elif pa.types.is_floating(t) and node.kind != "double":
        try:  # an exact number beyond a DECIMAL (from partition filters)
            v = float(v)
        except OverflowError:
            v = float("inf") if v > 0 else float("-inf")
    out: pa.Scalar[Any] = pa.scalar(v, t)
    return out


# --------------------------------------------------------------------------- evaluation order


def _evaluated(node: Expr) -> tuple[Expr, ...]:
    """The operands of ``node`` evaluated one by one: all of them, but the items of a column
    IN a list of literals, which no row's value can make fail and ``operators.member`` takes
    as one set (a MERGE's recorded reads hold every source key)."""
    if isinstance(node, InList) and node.literal_items() is not None:
        return (node.value,)
    return node.operands()


def _order(node: Expr) -> tuple[int, ...] | None:
    """The order Spark evaluates the operands of ``node`` in where it is not as written
    (None): a division's divisor first (``DivModLike``)."""
    if isinstance(node, Arithmetic) and node.op in ("/", "%"):
        return (1, 0)
    return None


def _types_mix_text_and_time(types: Sequence[pa.DataType | None]) -> bool:
    """Whether comparing values of ``types`` reads text as a date or timestamp, row by row
    (which can fail), or may (a type unknown)."""
    if any(t is None for t in types):
        return True
    return any(is_string(t) for t in types if t) and any(is_temporal(t) for t in types if t)


def _static_type(node: Expr, scope: Scope) -> pa.DataType | None:
    if isinstance(node, Literal):
        return node.type
    if isinstance(node, Column):
        return scope.type_of(node.path)
    return None


def _static_operand_types(node: Expr, scope: Scope) -> list[pa.DataType | None]:
    """The types of ``node``'s operands known before evaluation (columns, literals; None for
    the others), an IN list of literals' items by their distinct types."""
    def static(n: Expr) -> pa.DataType | None:
        return _static_type(n, scope) if isinstance(n, Column | Literal) else None

    if isinstance(node, InList) and node.literal_items() is not None:
        return [static(node.value), *node.item_types()]
    return [static(n) for n in node.operands()]


def _may_fail(root: Expr, scope: Scope, known: dict[int, bool]) -> bool:
    """Whether evaluating ``root`` may fail on some row's values (or may refuse one): only
    columns, literals and conditions over them cannot."""
    answer = known.get(id(root))
    if answer is not None:
        return answer
    answer = False
    stack: list[Expr] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, Column | Literal):
            continue
        # An IN list's literal items, which cannot fail, are not walked (``_evaluated``): a
        # list of 100,000 keys is judged by the types of its items.
        stack.extend(_evaluated(node))
        if isinstance(node, IsNull | Not | And | Or):
            continue
        if isinstance(node, Comparison | InList | Between) and not _types_mix_text_and_time(
                _static_operand_types(node, scope)):
            continue
        if isinstance(node, Like) and not _like_may_fail(node, _static_type(node.value, scope)):
            continue
        answer = True
        break
    known[id(root)] = answer
    return answer


def _operation_may_fail(node: Expr, operands: Sequence[Value]) -> bool:
    """Whether ``node``'s own operation on ``operands`` may fail on a row."""
    if isinstance(node, IsNull | Not | And | Or):
        return False
    if isinstance(node, Comparison | InList | Between):
        types = [type_of(v) for v in operands]
        if isinstance(node, InList) and len(operands) == 1:
            types += node.item_types()
        return _types_mix_text_and_time(types)
    if isinstance(node, Like):
        return _like_may_fail(node, type_of(operands[0]))
    return True


def _like_may_fail(node: Like, t: pa.DataType | None) -> bool:
    """Whether ``node`` may fail (or refuse) on a row whose value is of type ``t``: LIKE on text
    never does; ILIKE lowers it (which may refuse), another type is cast to text first."""
    return node.case_insensitive or t is None or not (is_string(t) or pa.types.is_null(t))


def _open(mask: Value) -> Value | None:
    """``mask`` as the rows still to evaluate, None when that is every row (of at least one:
    over no rows, a constant operand is not evaluated either)."""
    if not is_scalar(mask) and len(mask) == 0:
        return mask
    if first_true(pcx.invert(pcx.fill_null(mask, False))) is None:
        return None
    return pcx.fill_null(mask, False)


def _truth(v: Value) -> Value:
    """Where a condition is TRUE (not FALSE, not NULL)."""
    return pcx.fill_null(operators.boolean(v, "a condition"), False)


def _case_conditions(node: Case, done: Sequence[Value]) -> list[Value]:
    """Where each WHEN evaluated so far holds (``operand = value`` with an operand)."""
    base = 0 if node.operand is None else 1
    whens = done[base::2]
    if node.operand is None:
        return [_truth(w) for w in whens]
    nodes = node.operands()
    return [_truth(operators.compare_values("=", done[0], w, (nodes[0], nodes[base + 2 * j])))
            for j, w in enumerate(whens)]


def _case_gate(node: Case, done: Sequence[Value]) -> Value | None:
    """The rows a CASE's next operand is evaluated for: a WHEN (or ELSE) where no earlier
    WHEN holds, a THEN where its WHEN is the first to hold."""
    base = 0 if node.operand is None else 1
    if len(done) <= base:
        return None
    conditions = _case_conditions(node, done)
    next_is_then = (len(done) - base) % 2 == 1 and len(done) - base < 2 * len(node.branches)
    earlier = conditions[:-1] if next_is_then else conditions
    rows: Value = pa.scalar(True)
    for c in earlier:
        rows = pcx.and_(rows, pcx.invert(c))
    if next_is_then:
        rows = pcx.and_(rows, conditions[-1])
    return _open(rows)


def _gate(node: Expr, done: Sequence[Value]) -> Value | None:
    """The rows Spark evaluates ``node``'s next operand for, given the operands ``done`` (in
    evaluation order), as a mask; None for every row.  Spark evaluates row by row, and an
    operand it does not evaluate for a row cannot fail on it: AND stops at FALSE, OR at TRUE,
    coalesce at a value, IN at an equal item, CASE at the first WHEN that holds, an arithmetic
    operation or a comparison at a NULL operand, a division at a NULL divisor."""
    first = done[0]
    if (isinstance(node, Arithmetic) or (isinstance(node, Comparison) and node.op != "<=>")
            or (isinstance(node, Function) and node.name in functions.NULL_INTOLERANT)):
        return _open(pcx.is_valid(first))
    if isinstance(node, And | Or):
        if not all(pa.types.is_boolean(type_of(v)) or pa.types.is_null(type_of(v)) for v in done):
            return None  # not a condition: the operation refuses it
        running = operators.all_of(done) if isinstance(node, And) else operators.any_of(done)
        decided = pa.scalar(isinstance(node, Or))
        return _open(pcx.fill_null(pcx.not_equal(running, decided), True))
    if isinstance(node, Function) and node.name == "coalesce":
        rows: Value = pa.scalar(True)
        for v in done:
            rows = pcx.and_(rows, pcx.is_null(v))
        return _open(rows)
    if isinstance(node, InList):
        if len(done) == 1:
            return _open(pcx.is_valid(first))
        found = operators.member(done, node.operands()[:len(done)])
        return _open(pcx.and_(pcx.is_valid(first), pcx.invert(pcx.fill_null(found, False))))
    if isinstance(node, Between):
        if len(done) == 1:
            return _open(pcx.is_valid(first))
        # x <= hi is evaluated where x >= lo is not FALSE, and it too stops at a NULL x.
        nodes = node.operands()
        low = operators.compare_values(">=", first, done[1], (nodes[0], nodes[1]))
        return _open(pcx.and_(pcx.is_valid(first),
                              pcx.fill_null(pcx.not_equal(low, pa.scalar(False)), True)))
    if isinstance(node, Case):
        return _case_gate(node, done)
    return None


# --------------------------------------------------------------------------- operations


def _case(node: Case, values: Sequence[Value]) -> Value:
    base = 0 if node.operand is None else 1
    pairs = len(node.branches)
    thens = list(values[base + 1:base + 2 * pairs:2])
    otherwise = values[-1] if node.otherwise is not None else None
    t = common_type([type_of(v) for v in [*thens, *([otherwise] if otherwise is not None else [])]],
                    "CASE")
    result = implicit_cast(otherwise, t) if otherwise is not None else pa.scalar(None, t)
    conditions = _case_conditions(node, values[:base + 2 * pairs])
    for condition, then in zip(reversed(conditions), reversed(thens), strict=True):
        result = pcx.if_else(condition, implicit_cast(then, t), result)
    return result


def _apply(node: Expr, values: Sequence[Value]) -> Value:
    """The value of ``node`` given its operands' ``values`` (in ``operands()`` order)."""
    nodes = node.operands()
    if isinstance(node, Arithmetic):
        return operators.arithmetic(node.op, values[0], values[1], nodes)
    if isinstance(node, Comparison):
        if node.op == "<=>":
            return operators.null_safe(values[0], values[1], nodes)
        return operators.compare_values(node.op, values[0], values[1], nodes)
    if isinstance(node, And):
        return operators.all_of(values)
    if isinstance(node, Or):
        return operators.any_of(values)
    if isinstance(node, Not):
        return pcx.invert(operators.boolean(values[0], "NOT"))
    if isinstance(node, IsNull):
        return pcx.is_valid(values[0]) if node.negated else pcx.is_null(values[0])
    if isinstance(node, InList | Between):
        found = (operators.member(values, nodes, literal_value, node)
                 if isinstance(node, InList)
                 else operators.between(values, nodes))
        return pcx.invert(found) if node.negated else found
    if isinstance(node, Negate):
        return operators.negate(values[0])
    if isinstance(node, Cast):
        return ansi_cast(values[0], node.to)
    if isinstance(node, Function):
        return functions.call(node, values)
    if isinstance(node, Case):
        return _case(node, values)
    if isinstance(node, Like):
        return _like(node, values[0])
    raise Unsupported(f"{type(node).__name__} nodes")


def _like(node: Like, value: Value) -> Value:
    """``value [NOT] LIKE|ILIKE pattern``: Spark casts a value of another type to STRING (ANSI
    ``canANSIStoreAssign``: any atomic type to STRING) and matches its text; NULL for a NULL
    value or pattern.  A BINARY value, which Spark casts by reading its bytes as UTF-8, is
    refused, as is a type whose text deltacommit does not write as Spark does."""
    t = type_of(value)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        raise Unsupported(f"{node.word} on a BINARY value ({node.to_sql()}: Spark matches its "
                          "bytes read as UTF-8 text)")
    text = to_string(value)
    pattern = node.text
    if pattern is None:
        return pa.scalar(None, pa.bool_()) if is_scalar(text) else pa.nulls(len(text), pa.bool_())
    if node.case_insensitive:  # ILike: Like(Lower(left), Lower(right), escapeChar)
        text = functions.lower(text)
        pattern = functions.lower_text(pattern)
    found = like_patterns.match_strings(text, like_patterns.parse(pattern, node.escape))
    return pcx.invert(found) if node.negated else found


def _evaluate(root: Expr, scope: Scope) -> Value:
    """The value of ``root`` for every row of ``scope``, evaluated without recursion, operand by
    operand in Spark's order, each for the rows Spark evaluates it for (``_gate``)."""
    columns: dict[tuple[str, ...], Value] = {}
    risky: dict[int, bool] = {}
    # A frame: the node, its operands and the order they are evaluated in (None: as written;
    # both taken once per node, so an IN list of n items costs n steps, not n squared), the
    # values of its operands so far (in evaluation order), and the rows it is evaluated for
    # (None: all of them).
    Frame = tuple[Expr, tuple[Expr, ...], tuple[int, ...] | None, list[Value], Value | None]
    stack: list[Frame] = [(root, _evaluated(root), _order(root), [], None)]
    result: Value = None
    while stack:
        node, kids, order, done, active = stack[-1]
        if isinstance(node, Column):
            stack.pop()
            result = columns.get(node.path)
            if result is None:
                result = columns[node.path] = scope.resolve(node.path)
        elif isinstance(node, Literal):
            stack.pop()
            result = literal_value(node)
        else:
            if len(done) < len(kids):
                child = kids[len(done) if order is None else order[len(done)]]
                child_active = active
                if done and _may_fail(child, scope, risky):
                    gate = _gate(node, done)
                    if gate is not None:
                        child_active = gate if active is None else pcx.and_(active, gate)
                stack.append((child, _evaluated(child), _order(child), [], child_active))
                continue
            stack.pop()
            values = done if order is None else [done[order.index(k)] for k in range(len(kids))]
            if active is not None and _operation_may_fail(node, values):
                if isinstance(node, InList) and len(values) == 1:
                    # A column IN literals read as dates or timestamps (which can fail): each
                    # item only for the rows it is evaluated for, as the value is.
                    values = [values[0], *(literal_value(x) for x in node.items
                                           if isinstance(x, Literal))]
                values = [null_where_not(active, v) for v in values]
            result = _apply(node, values)
        if stack:
            stack[-1][3].append(result)
    return result


# --------------------------------------------------------------------------- the interface


class EvaluationFailed(InvalidArgumentError):
    """An expression failed on a row as Spark fails it (or refused a row's value), or cannot
    be evaluated at all (``failure`` None); ``error(what)`` is the error to raise, naming
    ``what`` (the table and the expression)."""

    def __init__(self, message: str, failure: RowFailure | None = None,
                 scope: Scope | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.failure = failure
        self._scope = scope

    @property
    def row_known(self) -> bool:
        """Whether it failed on the values of a row (rather than on the expression itself)."""
        return self.failure is not None

    def _row_text(self, row: int | None) -> str:
        if row is None or self._scope is None:
            return "for every row"
        return f"in row {_row(self._scope, row)!r}"

    def error(self, what: str, *, writes: bool = True) -> DeltaCommitError:
        """The error to raise, naming ``what`` failed; ``writes``: whether it failed a write
        (which then wrote nothing) rather than a read (which returns no rows)."""
        f = self.failure
        refusing = "refusing to write rather than store a value" if writes else \
            "refusing to read rather than return rows"
        after = " Nothing was written" if writes else ""
        if f is None:
            return UnsupportedProtocolError(
                f"{what} cannot be evaluated by deltacommit ({self.message}); {refusing} that "
                "may differ from Spark's")
        if f.refused:
            return UnsupportedProtocolError(
                f"{what}: {f.message} {self._row_text(f.row)}; {refusing} that may differ from "
                f"Spark's.{after}")
        return ExpressionValueError(
            f"{what} fails {self._row_text(f.row)}: {f.message}, an error in Spark's ANSI mode "
            f"(Spark 4's default).{after}")


def _row(scope: Scope, i: int) -> dict[str, Any]:
    if isinstance(scope, TableScope):
        row: dict[str, Any] = scope.table.slice(i, 1).to_pylist()[0]
        return row
    if isinstance(scope, AliasScope):
        return {f"{alias}.{k}": v for alias, t in scope.tables.items()
                for k, v in t.slice(i, 1).to_pylist()[0].items()}
    return {"row": i}


def evaluate(expression: Expr, data: pa.Table | Scope, to: pa.DataType | None = None
             ) -> pa.ChunkedArray[Any]:
    """The expression's value for each row of ``data`` (as ``to``, by Spark's CAST, if
    given); EvaluationFailed saying why if it fails on a row or cannot be evaluated."""
    scope = scope_of(data)
    try:
        value = _evaluate(expression, scope)
        if to is not None:
            value = ansi_cast(value, to)
        if is_scalar(value):
            value = pa.repeat(value, scope.num_rows)
    except RowFailure as e:
        raise EvaluationFailed(e.message, e, scope) from None
    except InvalidArgumentError as e:
        raise EvaluationFailed(str(e)) from None
    except (Unsupported, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise EvaluationFailed(str(e)) from None
    except (ArithmeticError, ValueError, TypeError, LookupError) as e:
        # A case no rule foresaw: refused, never a raw exception or a guessed value.
        raise EvaluationFailed(f"{type(e).__name__}: {e}") from None
    out: pa.ChunkedArray[Any] = pa.chunked_array([value])
    return out


def evaluate_condition(expression: Expr, data: pa.Table | Scope) -> pa.ChunkedArray[Any]:
    """A condition's TRUE, FALSE or NULL for each row; EvaluationFailed if it fails on a row,
    cannot be evaluated, or is not a condition."""
    values = evaluate(expression, data)
    if pa.types.is_null(values.type):
        return values.cast(pa.bool_())
    if not pa.types.is_boolean(values.type):
        raise EvaluationFailed(f"{expression.to_sql()!r} is a {values.type} value, not a "
                               "condition")
    return values


def predicate_mask(expression: Expr, data: pa.Table | Scope) -> pa.ChunkedArray[Any]:
    """The rows where a predicate is TRUE (FALSE and NULL rows are not)."""
    mask: pa.ChunkedArray[Any] = pcx.fill_null(evaluate_condition(expression, data), False)
    return mask


def value_type(expression: Expr, schema: pa.Schema) -> pa.DataType:
    """The type of an expression's values over columns of ``schema`` (Spark's type);
    EvaluationFailed if it cannot be evaluated (or fails for every row)."""
    found: pa.DataType = evaluate(expression, schema.empty_table()).type
    return found


__all__ = ["AliasScope", "EvaluationFailed", "Scope", "TableScope", "evaluate",
           "evaluate_condition", "literal_value", "predicate_mask", "scope_of", "value_type"]
