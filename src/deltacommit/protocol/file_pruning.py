"""Which files may hold rows a predicate makes TRUE, from partition values and statistics.  Pure.

A read with a filter, a row-level operation choosing the files it rewrites and the row-level
conflict check (is a concurrent writer's new row one this operation would have acted on?) all
ask the same question of a file list: may this file hold a live row where the predicate is
TRUE?  A wrong "no" loses rows silently; a wrong "yes" only costs a file read.  So every rule
here errs towards "yes":

- The answer is computed per AST node as three possibilities (may some live row make it
  TRUE, FALSE, NULL?), combined with SQL's three-valued logic (``NOT`` swaps TRUE and FALSE,
  ``AND``/``OR`` over-approximate).  A file is kept when TRUE is possible.
- Partition columns hold one value per file: a subtree over partition columns only is
  evaluated exactly, by the one evaluator, on the file's values.
- A data column's leaf uses ``minValues``/``maxValues``/``nullCount``, only for a column
  compared with a literal of a kind whose order the column's order preserves (numbers with
  numbers, strings with strings, dates and timestamps with either); the comparison itself is
  the evaluator's, so coercion (an integer beside ``2.5``, a date beside a timestamp) is
  Spark's.  ``column LIKE 'prefix...'`` is TRUE only where the bounds admit a string starting
  with the pattern's literal prefix.  Anything else (functions, arithmetic, two columns, ILIKE,
  a column without statistics) is "any answer".
- Bounds as Delta writers write them: a string max Spark truncated (it ends with the
  tie-breaker U+FFFD, or is 32 characters or more) bounds only a prefix: a value may be any
  string starting with it.  A timestamp max written in milliseconds may be up to 1 ms below
  the true max (Spark truncates), so 1 ms is added.  Floating bounds ignore NaN, which Spark
  orders above every number, so a float max bounds nothing.
- ``nullCount`` counts the file's physical rows, a bound on its live rows' nulls: "no null"
  (0) holds for the live rows; "all null" (``nullCount == numRecords``) is used only for a file
  without a deletion vector.  Where ``tightBounds`` is false, ``nullCount`` is not used at all.
- A file with no live rows (``numRecords`` equal to its deletion vector's cardinality) holds
  nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as arrow_compute

from deltacommit.protocol.expressions.ast import (
    And,
    Between,
    Column,
    Comparison,
    Expr,
    InList,
    IsNull,
    Like,
    Literal,
    Not,
    Or,
)
from deltacommit.protocol.expressions.evaluator import (
    EvaluationFailed,
    evaluate_condition,
    names_top_level_columns,
)
from deltacommit.protocol.expressions.like import literal_prefix
from deltacommit.protocol.expressions.sql_semantics import INTEGER_RANGES

pc: Any = arrow_compute  # pyarrow.compute's stubs do not cover every use here

#: An IN list of more items than this, beside a column whose statistics cannot decide each
#: exactly at once (integers can), is judged by the range of its items (``_member_of_many``).
LITERALS_JUDGED_ONE_BY_ONE = 1_000
#: Strings of at least this many characters may be a truncated bound (Spark's default
#: ``spark.databricks.io.skipping.stringPrefixLength``).
STRING_PREFIX_LENGTH = 32
TIE_BREAKER = "\ufffd"
#: The characters from which a max (high) or a min (low) no longer orders alike by UTF-16 code
#: units (Spark) and by code points (Arrow).
_UTF16_DISAGREES_HIGH = "[\\x{E000}-\\x{10FFFF}]"
_UTF16_DISAGREES_LOW = "[\\x{10000}-\\x{10FFFF}]"
_MS_IN_UNIT = {"s": 1, "ms": 1, "us": 1_000, "ns": 1_000_000}

#: Literal kinds a column of each kind is compared with in its own order.
_ORDERED_LITERALS = {
    "number": frozenset({"int", "decimal", "double"}),
    "string": frozenset({"string"}),
    "temporal": frozenset({"date", "timestamp"}),
}

Mask = np.ndarray[Any, np.dtype[np.bool_]]


@dataclass(frozen=True, slots=True)
class _Possible:
    """Per file: whether some live row may make the node TRUE, FALSE, NULL."""

    true: Mask
    false: Mask
    null: Mask


@dataclass(frozen=True, slots=True)
class _Leaf:
    """What the statistics say about one data column, per file."""

    type: pa.DataType
    low: Any  # lower bounds (null: unknown)
    high: Any  # upper bounds (null: unknown)
    #: Rows whose ``high`` is a truncated string: values may be any string starting with it.
    prefix_high: Mask
    no_nulls: Mask
    all_null: Mask


def _kind(t: pa.DataType) -> str | None:
    types = pa.types
    if types.is_integer(t) or types.is_floating(t) or types.is_decimal(t):
        return "number"
    if types.is_string(t) or types.is_large_string(t):
        return "string"
    if types.is_date(t) or types.is_timestamp(t):
        return "temporal"
    return None


def _np(arr: Any) -> Mask:
    out: Mask = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)
    return out


class FilePruner:
    """Decides a predicate over one file list (``add_actions_table(..., tight_bounds=True)``,
    not flattened) of a table with ``schema``."""

    def __init__(self, files: pa.Table, schema: pa.Schema) -> None:
        self.files = files
        self.schema = schema
        self.n = files.num_rows
        names = files.schema.names
        self.partition: Any = (files.column("partition").combine_chunks()
                               if "partition" in names else None)
        self.partition_names = (frozenset(f.name for f in self.partition.type)
                                if self.partition is not None else frozenset())
        records = files.column("num_records").combine_chunks()
        self.has_stats = _np(pc.is_valid(records))
        self.records = records
        cardinality = None
        if "deletion_vector" in names:
            dv = files.column("deletion_vector").combine_chunks()
            self.has_dv = _np(pc.is_valid(dv))
            cardinality = pc.fill_null(pc.struct_field(dv, "cardinality"), 0)
        else:
            self.has_dv = np.zeros(self.n, dtype=bool)
        tight = (files.column("tight_bounds").combine_chunks() if "tight_bounds" in names
                 else pa.nulls(self.n, pa.bool_()))
        self.wide = _np(pc.fill_null(pc.equal(tight, False), False))
        live = records if cardinality is None else pc.subtract(records, cardinality)
        # Exactly none live; a cardinality above the rows is a forged entry, which reading
        # the file reports.
        self.empty = _np(pc.fill_null(pc.equal(live, 0), False))
        self.true = np.ones(self.n, dtype=bool)
        self.false = np.zeros(self.n, dtype=bool)

    # ------------------------------------------------------------------ the answer

    def may_match(self, predicate: Expr) -> Mask:
        """Which files may hold a live row where ``predicate`` is TRUE."""
        if self.n == 0:
            return np.zeros(0, dtype=bool)
        out = self._possible(predicate).true & ~self.empty
        return out

    def _unknown(self) -> _Possible:
        return _Possible(self.true, self.true, self.true)

    def _possible(self, node: Expr) -> _Possible:
        if isinstance(node, Literal):
            return self._constant(node)
        if node.columns() and node.columns() <= self.partition_names \
                and names_top_level_columns(node, self.schema):
            return self._exact(node)
        if isinstance(node, Not):
            child = self._possible(node.child)
            return _Possible(child.false, child.true, child.null)
        if isinstance(node, And | Or):
            return self._junction([self._possible(c) for c in node.children],
                                  isinstance(node, Or))
        if isinstance(node, Between):
            both = And((Comparison(node.value, ">=", node.low),
                        Comparison(node.value, "<=", node.high)))
            return self._possible(Not(both) if node.negated else both)
        if isinstance(node, IsNull) and isinstance(node.operand, Column):
            leaf = self._leaf(node.operand)
            if leaf is None:
                return self._unknown()
            is_null = _Possible(~leaf.no_nulls, ~leaf.all_null, self.false)
            return _Possible(is_null.false, is_null.true, self.false) if node.negated else is_null
        items = node.literal_items() if isinstance(node, InList) else None
        if isinstance(node, InList) and isinstance(node.value, Column) and items is not None:
            found = self._member_of_many(node)
            if found is None:
                equal = [self._comparison(node.value, "=", x) for x in items]
                found = self._junction(equal, disjunction=True)
            has_null = "null" in node.item_kinds()
            # IN is NULL where no item equals and one is NULL (or the value is NULL).
            member = _Possible(found.true, self.false if has_null else found.false, self.true)
            return _Possible(member.false, member.true, member.null) if node.negated else member
        if isinstance(node, Like):
            like = self._like(node)
            return _Possible(like.false, like.true, like.null) if node.negated else like
        if isinstance(node, Comparison):
            left, op, right = node.left, node.op, node.right
            if isinstance(left, Literal) and isinstance(right, Column):
                left, op, right = right, {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op), left
            if isinstance(left, Column) and isinstance(right, Literal):
                return self._comparison(left, op, right)
        return self._unknown()

    def _like(self, node: Like) -> _Possible:
        """``column LIKE pattern`` (not negated): TRUE only in a file that may hold a string
        starting with the pattern's literal prefix (``'abc%'``, ``'ab_d'``: ``ab``).  Those
        strings are the ones from the prefix up to, not including, the first string above it
        that does not start with it, so the file's max must reach the prefix (the ``>=``
        comparison's rule, truncated maxima included) and its min must not lie beyond them: a
        min above the prefix that does not start with it (a truncated min is a prefix of the
        true one, so it only errs low).  ILIKE, a value that is not a column, a column that
        is not a string or a pattern without a literal prefix: any answer."""
        if node.text is None:
            return _Possible(self.false, self.false, self.true)
        parts = node.parts
        if node.case_insensitive or not isinstance(node.value, Column) or parts is None:
            return self._unknown()
        prefix = literal_prefix(parts)
        leaf = self._leaf(node.value)
        if not prefix or leaf is None or _kind(leaf.type) != "string":
            return self._unknown()
        reaches = self._comparison(node.value, ">=", Literal("string", prefix)).true
        beyond = self.false
        if leaf.low is not None:
            above = pc.and_(pc.greater(leaf.low, pa.scalar(prefix, leaf.low.type)),
                            pc.invert(pc.starts_with(leaf.low, pattern=prefix)))
            beyond = _np(pc.fill_null(above, False))
        return _Possible(reaches & ~beyond, ~leaf.all_null, ~leaf.no_nulls)

    def _constant(self, node: Literal) -> _Possible:
        if node.kind == "null":
            return _Possible(self.false, self.false, self.true)
        if node.kind == "bool":
            return (_Possible(self.true, self.false, self.false) if node.value
                    else _Possible(self.false, self.true, self.false))
        return self._unknown()

    @staticmethod
    def _junction(children: Sequence[_Possible], disjunction: bool) -> _Possible:
        if not children:
            raise AssertionError("a junction without children")
        t = [c.true for c in children]
        f = [c.false for c in children]
        n = [c.null for c in children]
        if disjunction:
            true = np.logical_or.reduce(t)
            false = np.logical_and.reduce(f)
            null = np.logical_or.reduce(n) & np.logical_and.reduce(
                [fi | ni for fi, ni in zip(f, n, strict=True)])
        else:
            true = np.logical_and.reduce(t)
            false = np.logical_or.reduce(f)
            null = np.logical_or.reduce(n) & np.logical_and.reduce(
                [ti | ni for ti, ni in zip(t, n, strict=True)])
        return _Possible(true, false, null)

    # ------------------------------------------------------------------ partition columns

    def _exact(self, node: Expr) -> _Possible:
        """A condition over partition columns only: its value for each file."""
        assert self.partition is not None
        data = pa.Table.from_arrays(
            [self.partition.field(i) for i in range(self.partition.type.num_fields)],
            names=[f.name for f in self.partition.type])
        try:
            result = evaluate_condition(node, data).combine_chunks()
        except EvaluationFailed:
            return self._unknown()
        valid = _np(pc.is_valid(result))
        value = _np(pc.fill_null(result, False))
        return _Possible(valid & value, valid & ~value, ~valid)

    # ------------------------------------------------------------------ data columns

    def _leaf(self, column: Column) -> _Leaf | None:
        """The statistics of ``column`` (a path into structs), or None without any."""
        t = self._schema_type(column.path)
        if t is None or pa.types.is_struct(t):
            return None
        counts = self._stat("null_count", column.path)
        if counts is None:
            no_nulls, all_null = self.false, self.false
        else:
            usable = ~self.wide & self.has_stats
            no_nulls = usable & _np(pc.fill_null(pc.equal(counts, 0), False))
            same = pc.fill_null(pc.equal(counts.cast(pa.int64()), self.records), False)
            all_null = usable & ~self.has_dv & _np(same)
        low = self._stat("min", column.path)
        high = self._stat("max", column.path)
        low = self._typed(low, t)
        high = self._typed(high, t)
        prefix = self.false
        if high is not None and pa.types.is_floating(t):
            high = None  # NaN, above every number in Spark's order, is not in the bound
        if high is not None and pa.types.is_timestamp(t):
            step = _MS_IN_UNIT[t.unit]
            ticks = pc.add_checked(high.cast(pa.int64()), pa.scalar(step, pa.int64()))
            high = ticks.cast(t)
        if high is not None and _kind(t) == "string":
            long = pc.or_(pc.ends_with(high, TIE_BREAKER),
                          pc.greater_equal(pc.utf8_length(high), STRING_PREFIX_LENGTH))
            prefix_high = pc.fill_null(long, False)
            high = pc.if_else(prefix_high, pc.utf8_rtrim(high, characters=TIE_BREAKER), high)
            # Spark orders strings by UTF-16 code units, in which a character above U+FFFF
            # (a surrogate pair) sorts below U+E000-U+FFFF; Arrow orders by code point.  The
            # orders agree up to the first such character of a bound, so a max is cut before
            # its first character from U+E000 (and bounds only that prefix), a min before its
            # first character above U+FFFF (a shorter prefix is a lower bound still).
            cut = pc.fill_null(pc.match_substring_regex(high, _UTF16_DISAGREES_HIGH), False)
            high = pc.replace_substring_regex(high, _UTF16_DISAGREES_HIGH + "(?s:.*)", "")
            prefix = _np(pc.or_(prefix_high, cut))
        if low is not None and _kind(t) == "string":
            low = pc.replace_substring_regex(low, _UTF16_DISAGREES_LOW + "(?s:.*)", "")
        return _Leaf(t, low, high, prefix, no_nulls, all_null)

    def _schema_type(self, path: tuple[str, ...]) -> pa.DataType | None:
        i = self.schema.get_field_index(path[0])
        if i < 0:
            return None
        t: pa.DataType = self.schema.field(i).type
        for part in path[1:]:
            if not pa.types.is_struct(t) or t.get_field_index(part) < 0:
                return None
            t = t.field(t.get_field_index(part)).type
        return t

    def _stat(self, section: str, path: tuple[str, ...]) -> Any:
        if section not in self.files.schema.names:
            return None
        arr: Any = self.files.column(section).combine_chunks()
        for part in path:
            if not pa.types.is_struct(arr.type) or arr.type.get_field_index(part) < 0:
                return None
            arr = pc.struct_field(arr, [arr.type.get_field_index(part)])
        return arr

    @staticmethod
    def _typed(arr: Any, t: pa.DataType) -> Any:
        if arr is None:
            return None
        if arr.type == t:
            return arr
        try:
            return arr.cast(t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None

    def _compare(self, bounds: Any, t: pa.DataType, op: str, literal: Literal) -> Mask:
        """Where ``bounds op literal`` may be TRUE (unknown bounds: it may)."""
        if bounds is None:
            return self.true
        data = pa.Table.from_arrays([bounds], schema=pa.schema([pa.field("v", t)]))
        try:
            result = evaluate_condition(Comparison(Column(("v",)), op, literal), data)
        except EvaluationFailed:
            return self.true
        return _np(pc.fill_null(result.combine_chunks(), True))

    def _compare_high(self, leaf: _Leaf, op: str, literal: Literal) -> Mask:
        """``high op literal`` for ``op`` in ``>``, ``>=``, ``!=``, where a truncated string
        max stands for every string starting with it."""
        out = self._compare(leaf.high, leaf.type, op, literal)
        if not leaf.prefix_high.any():
            return out
        out = out.copy()
        value = str(literal.value)
        for i in np.flatnonzero(leaf.prefix_high):
            if op == "!=":
                out[i] = True
                continue
            p = leaf.high[i].as_py()
            # Some string starting with p is above ``value`` unless p sorts below it and is
            # not a prefix of it.
            out[i] = p is None or value.startswith(p) or p.encode() > value.encode()
        return out

    def _member_of_many(self, node: InList) -> _Possible | None:
        """``column IN (literals)`` (not negated) judged at once, or None where the items are
        judged one by one (``column = item`` each): a MERGE's recorded reads hold every source
        key, and one comparison per key per file list would cost seconds for 100,000 keys.

        Integers beside a signed integer column are decided exactly as those comparisons
        decide them: a file may hold a row equal to one where some key lies between its
        bounds (an unknown bound: unbounded), and holds none equal to any only where its
        bounds hold one value that is not a key.  Beyond ``LITERALS_JUDGED_ONE_BY_ONE``
        items, numbers beside a number column, strings beside a string column and dates
        beside a date or timestamp column are judged by their range: TRUE is possible where
        ``column >= least`` and ``column <= greatest`` both may be, FALSE is taken as always
        possible (a looser answer, never an unsound one)."""
        column = cast(Column, node.value)
        kinds = node.item_kinds() - {"null"}
        if not kinds:
            return None
        leaf = self._leaf(column)
        if leaf is None:
            return self._unknown()
        t = leaf.type
        some = ~leaf.all_null
        null = ~leaf.no_nulls
        if pa.types.is_signed_integer(t) and kinds == {"int"}:
            least, greatest = INTEGER_RANGES[t]
            keys = node.integer_items()
            keys = keys[(keys >= least) & (keys <= greatest)]
            low = self._ints(leaf.low, least)
            high = self._ints(leaf.high, greatest)
            true = np.searchsorted(keys, low, "left") < np.searchsorted(keys, high, "right")
            one_value = (self._known(leaf.low) & self._known(leaf.high) & (low == high)
                         & np.isin(low, keys))
            return _Possible(true & some, ~one_value & some, null)
        if len(node.items) <= LITERALS_JUDGED_ONE_BY_ONE:
            return None
        kind = _kind(t)
        if kind == "number" and kinds <= {"int", "decimal"}:
            order: Callable[[Literal], Any] = lambda x: Decimal(x.value)  # noqa: E731
        elif kind == "string" and kinds == {"string"}:
            order = lambda x: str(x.value)  # noqa: E731
        elif kind == "temporal" and kinds == {"date"}:
            # A MERGE's date keys, which order as a date or timestamp column compares with them.
            order = lambda x: x.value  # noqa: E731
        else:
            return None

        def ends() -> tuple[Literal, Literal]:
            values = [x for x in node.literals if x.kind != "null"]
            return min(values, key=order), max(values, key=order)

        first, last = node.remembered(("ends", kind), ends)
        above = self._comparison(column, ">=", first)
        below = self._comparison(column, "<=", last)
        return _Possible(above.true & below.true, self.true, null)

    def _known(self, bounds: Any) -> Mask:
        """Where ``bounds`` (None: none known) holds a bound."""
        if bounds is None:
            return self.false
        return _np(pc.is_valid(bounds))

    def _ints(self, bounds: Any, unknown: int) -> npt.NDArray[np.int64]:
        """Integer ``bounds`` as int64, ``unknown`` where a file has none."""
        if bounds is None:
            return np.full(self.n, unknown, dtype=np.int64)
        filled = pc.fill_null(bounds.cast(pa.int64()), pa.scalar(unknown, pa.int64()))
        out: npt.NDArray[np.int64] = np.asarray(filled.to_numpy(zero_copy_only=False),
                                                dtype=np.int64)
        return out

    def _comparison(self, column: Column, op: str, literal: Literal) -> _Possible:
        leaf = self._leaf(column)
        if leaf is None:
            return self._unknown()
        if literal.kind == "null":
            if op == "<=>":
                return _Possible(~leaf.no_nulls, ~leaf.all_null, self.false)
            return _Possible(self.false, self.false, self.true)
        kind = _kind(leaf.type)
        if kind is None or literal.kind not in _ORDERED_LITERALS[kind]:
            return self._unknown()
        some = ~leaf.all_null
        null = ~leaf.no_nulls
        low = leaf.low
        t = leaf.type
        if op == "<":
            true = self._compare(low, t, "<", literal)
            false = self._compare_high(leaf, ">=", literal)
        elif op == "<=":
            true = self._compare(low, t, "<=", literal)
            false = self._compare_high(leaf, ">", literal)
        elif op == ">":
            true = self._compare_high(leaf, ">", literal)
            false = self._compare(low, t, "<=", literal)
        elif op == ">=":
            true = self._compare_high(leaf, ">=", literal)
            false = self._compare(low, t, "<", literal)
        elif op in ("=", "<=>"):
            true = self._compare(low, t, "<=", literal) & self._compare_high(leaf, ">=", literal)
            false = self._compare(low, t, "!=", literal) | self._compare_high(leaf, "!=", literal)
        elif op == "!=":
            true = self._compare(low, t, "!=", literal) | self._compare_high(leaf, "!=", literal)
            false = self._compare(low, t, "<=", literal) & self._compare_high(leaf, ">=", literal)
        else:
            return self._unknown()
        if pa.types.is_floating(t):
            false = self.true  # NaN rows, which no bound shows
            if op in (">", ">=", "!="):
                true = self.true
        if op == "<=>":
            return _Possible(true & some, self.true, self.false)
        return _Possible(true & some, false & some, null)


def may_match(predicate: Expr, files: pa.Table, schema: pa.Schema) -> Mask:
    """Which files of ``files`` (``add_actions_table(..., tight_bounds=True)``, not flattened;
    the ``deletion_vector`` column where the table has them) may hold a live row where
    ``predicate`` is TRUE: a boolean per file, False only where partition values or
    statistics prove it holds none (see the module docstring)."""
    return FilePruner(files, schema).may_match(predicate)


__all__ = ["STRING_PREFIX_LENGTH", "FilePruner", "may_match"]
