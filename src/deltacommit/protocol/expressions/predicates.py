"""Predicates over partition columns: SQL text and deltalake's partition filters, as trees of
the one expression AST.  Pure.

A predicate says which partitions a transaction read or overwrites: a scan, an overwrite, an
OPTIMIZE or a partition-only DELETE selects the files whose partition values make it TRUE, and
the conflict checker asks of every file a concurrent writer added whether it could.  Both kinds
of input give the same tree (``ast``), decided over partition values by
``Expr.evaluate(values, types)`` (``partition_values``):

- SQL text, ``parse_predicate``: the one parser, reading the predicate subset (a column
  compared with a literal either way round, ``[NOT] IN``, ``IS [NOT] NULL``, ``[NOT] BETWEEN``,
  ``[NOT] LIKE``/``ILIKE``, ``AND``/``OR``/``NOT``, ``TRUE``/``FALSE``);
- deltalake/pyarrow DNF filters, ``from_partition_filters``: ``(column, op, value)`` tuples
  with Python values (``lit``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.expressions.ast import (
    COMPARISON_OPS,
    FALSE,
    KEYWORDS,
    NULL,
    TRUE,
    And,
    Between,
    Column,
    Comparison,
    Expr,
    InList,
    IsNull,
    Literal,
    Not,
    Or,
    and_,
    col,
    lit,
    not_,
    or_,
)
from deltacommit.protocol.expressions.parser import MAX_CHARS, MAX_DEPTH, parse_predicate

#: A predicate is a tree of the expression AST (a condition).
Predicate: TypeAlias = Expr

MAX_PREDICATE_DEPTH = MAX_DEPTH
MAX_PREDICATE_CHARS = MAX_CHARS
_OP_ALIASES = {"==": "=", "<>": "!="}


def compare(column: str, op: str, value: object) -> Comparison:
    """``column op value`` with deltalake's operator spellings (``==``, ``<>`` accepted)."""
    return Comparison(Column((column,)), _OP_ALIASES.get(op, op), lit(value))


# --------------------------------------------------------------------------- partition filters

_FILTER_OPS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">=",
               "in": "in", "not in": "not in"}


def _is_filter_tuple(f: object) -> bool:
    return (isinstance(f, tuple | list) and len(f) == 3 and isinstance(f[0], str)
            and isinstance(f[1], str))


def _from_filter(f: Sequence[Any]) -> Expr:
    column, raw_op, value = f
    op = _FILTER_OPS.get(" ".join(raw_op.lower().split()))
    if op is None:
        raise InvalidArgumentError(f"partition filter {tuple(f)!r}: unknown operator {raw_op!r}; use one of "
                                   f"{sorted(set(_FILTER_OPS))}")
    if op in ("in", "not in"):
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            raise InvalidArgumentError(f"partition filter {tuple(f)!r}: {raw_op!r} needs a list of values")
        items = list(value)
        if isinstance(value, set | frozenset):
            items.sort(key=repr)
        if not items:
            raise InvalidArgumentError(f"partition filter {tuple(f)!r}: the list of values is empty")
        return InList(Column((column,)), tuple(lit(v) for v in items), op == "not in")
    if value is None:
        if op in ("=", "!="):
            return IsNull(Column((column,)), op == "!=")
        raise InvalidArgumentError(f"partition filter {tuple(f)!r}: {raw_op!r} cannot compare with None")
    return Comparison(Column((column,)), op, lit(value))


def from_partition_filters(filters: Sequence[Any] | None) -> Expr:
    """The predicate of deltalake/pyarrow DNF filters: a list of ``(column, op, value)`` tuples
    (all must hold), or a list of such lists (any list must hold).  ``("c", "=", None)`` means
    ``c IS NULL`` and ``("c", "!=", None)`` means ``c IS NOT NULL``."""
    if not filters:
        return TRUE
    if isinstance(filters, str | bytes):
        raise InvalidArgumentError("partition filters must be a list of (column, op, value) tuples, "
                                   f"got the string {filters!r}; pass a predicate string as predicate=")
    items = list(filters)
    if all(_is_filter_tuple(f) for f in items):
        return and_(*(_from_filter(f) for f in items))
    if all(isinstance(f, list | tuple) and all(_is_filter_tuple(g) for g in f) for f in items):
        return or_(*(and_(*(_from_filter(g) for g in f)) for f in items))
    raise InvalidArgumentError(
        f"partition filters must be a list of (column, op, value) tuples or a list of such lists, "
        f"got {filters!r}")


__all__ = ["COMPARISON_OPS", "FALSE", "KEYWORDS", "MAX_PREDICATE_CHARS", "MAX_PREDICATE_DEPTH",
           "NULL", "TRUE", "And", "Between", "Column", "Comparison", "InList", "IsNull",
           "Literal", "Not", "Or", "Predicate", "and_", "col", "compare",
           "from_partition_filters", "lit", "not_", "or_", "parse_predicate"]
