"""The syntax tree of deltacommit's SQL expressions: one tree for partition predicates, row
predicates (DELETE), CHECK constraints, column invariants and generated columns.  Pure.

Nodes are immutable, hashable and compare by structure.  Literals are typed as Spark's parser
types them (``Literal.type``): an integer is an INT when it fits, a BIGINT when it fits that,
else a DECIMAL(p, 0); a number with a fraction is a DECIMAL of its own digits; one with an
exponent is a DOUBLE.  A column is a path: ``a.b`` is field ``b`` of struct ``a``, and a
backquoted name (```a.b```) is one part, whatever it holds.

A tree has two interpretations, both outside this module's node classes except for a hook:

- over Arrow data, with Spark's semantics (``evaluator``): values, conditions, failures;
- over partition values, the serialized strings of ``add.partitionValues`` (``evaluate`` and
  ``compile`` here, built by ``partition_values.PartitionPrograms``): does a file's partition
  match?  Only predicates over partition columns have this meaning.

Trees may be deep (an operator chain thousands of terms long is a tree as deep), so every walk
here is iterative; recursion is left to the partition programs, whose predicates the parser
bounds.  ``and_``, ``or_`` and ``not_`` build the normalized predicates partition filters and
``parse_predicate`` give (flattened, constants folded, double negation cancelled).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import pyarrow as pa

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.expressions import like as like_patterns
from deltacommit.protocol.expressions.partition_values import (
    OPERATORS,
    PartitionPrograms,
    Program,
    Types,
    Values,
    datetime_us,
)
from deltacommit.protocol.expressions.spark_types import TIMESTAMP_LTZ, sql_type
from deltacommit.protocol.expressions.sql_semantics import MAX_DECIMAL_PRECISION
from deltacommit.protocol.partitions import format_timestamp_us

#: Words that end an operand, so a column named by one must be backquoted.
KEYWORDS = frozenset({"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE", "DATE",
                      "TIMESTAMP", "BETWEEN", "AS", "CASE", "WHEN", "THEN", "ELSE", "END"})
COMPARISON_OPS = ("=", "!=", "<", "<=", ">", ">=", "<=>")
ARITHMETIC_OPS = ("+", "-", "*", "/", "%")
FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "<=>": "<=>"}

# Binding strength, loosest first: what a child needs to be written without parentheses.
_OR, _AND, _NOT, _PREDICATE, _ADDITIVE, _MULTIPLICATIVE, _UNARY, _PRIMARY = range(1, 9)

R = TypeVar("R")


class _Memo:
    """What a node computes once about itself: its columns and its partition programs."""

    __slots__ = ("columns", "facts", "last", "paths", "programs", "sorted_columns", "sql")

    def __init__(self, paths: frozenset[tuple[str, ...]]) -> None:
        self.paths = paths
        self.columns = frozenset(p[0] if len(p) == 1 else ".".join(p) for p in paths)
        self.sorted_columns = tuple(sorted(self.columns))
        #: What callers derived from the node once (``Expr.remembered``): an IN list of
        #: 100,000 literals is judged against every file of every concurrent commit.
        self.facts: dict[Any, Any] = {}
        #: The tree's SQL text, where asked (``sql_once``).
        self.sql: str | None = None
        self.programs: dict[tuple[tuple[str, pa.DataType], ...], Program] = {}
        # The last compilation and the exact mapping and type objects it was made for: callers
        # pass the same types mapping for every file, so identity checks skip hashing types.
        self.last: tuple[Types, tuple[tuple[str, pa.DataType], ...], Program] | None = None


class Expr:
    """A node of the tree.  Subclasses are frozen dataclasses; pickling and copying keep the
    structure only (what ``_memo`` holds is recomputed)."""

    __slots__ = ("_memo",)
    precedence: ClassVar[int] = _PRIMARY

    def operands(self) -> tuple[Expr, ...]:
        """The operands, in the order the SQL text has them."""
        return ()

    def _sql(self, parts: list[str]) -> str:
        """This node's SQL, given its operands' (``parts``, in ``operands()`` order)."""
        raise NotImplementedError

    def _partition(self, programs: PartitionPrograms) -> Program:
        """This node's program over partition values."""
        programs.unsupported(self, f"{type(self).__name__} is not a predicate over partition "
                                   "columns")

    # ---- structure

    def walk(self) -> Iterator[Expr]:
        """Every node of the tree, this one first (without recursion)."""
        stack: list[Expr] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.operands()))

    def to_sql(self) -> str:
        """SQL text that parses back to this tree."""
        return fold(self, lambda node, parts: node._sql(parts))

    def __str__(self) -> str:
        return self.to_sql()

    def sql_once(self) -> str:
        """``to_sql()``, computed once and kept with the tree (not beyond it): a MERGE's
        recorded reads hold every source key, and their text keys the answers of every file
        of every winner checked against them."""
        memo = self._memo_of()
        if memo.sql is None:
            memo.sql = self.to_sql()  # two threads may both compute it: the same text
        return memo.sql

    def _memo_of(self) -> _Memo:
        memo: _Memo | None = getattr(self, "_memo", None)
        if memo is None:
            memo = _Memo(self._columns_below())
            object.__setattr__(self, "_memo", memo)
        return memo

    def remembered(self, key: Any, compute: Callable[[], R]) -> R:
        """``compute()``, computed once per node and ``key`` and kept with the tree (two
        threads may both compute it: the same answer)."""
        facts = self._memo_of().facts
        if key not in facts:
            facts[key] = compute()
        out: R = facts[key]
        return out

    def column_paths(self) -> frozenset[tuple[str, ...]]:
        """The paths of the columns the tree references (``columns`` joins them by dots)."""
        return self._memo_of().paths

    def _columns_below(self) -> frozenset[tuple[str, ...]]:
        """The columns of the tree, walked without recursion, but for the subtrees that know
        theirs already and the IN lists (remembered on their own: a MERGE's recorded reads
        hold one of 100,000 source keys, judged under several trees built around it)."""
        found: set[tuple[str, ...]] = set()
        stack: list[Expr] = [self]
        while stack:
            node = stack.pop()
            known: _Memo | None = getattr(node, "_memo", None) if node is not self else None
            if known is None and isinstance(node, InList) and node is not self:
                known = node._memo_of()
            if known is not None:
                found |= known.paths
            elif isinstance(node, Column):
                found.add(node.path)
            else:
                stack.extend(node.operands())
        return frozenset(found)

    def columns(self) -> frozenset[str]:
        """The names of the columns the tree references (``a.b`` for a path)."""
        return self._memo_of().columns

    def check_columns(self, partition_columns: Sequence[str], table: str) -> None:
        """Refuse a predicate that references columns other than the partition columns."""
        unknown = sorted(self.columns() - set(partition_columns))
        if unknown:
            which = ", ".join(repr(c) for c in unknown)
            parts = (f"the partition columns are {list(partition_columns)}" if partition_columns
                     else "the table is not partitioned")
            raise InvalidArgumentError(
                f"predicate {self.to_sql()!r} on table {table} references {which}, which "
                f"{'is not a partition column' if len(unknown) == 1 else 'are not partition columns'}; "
                f"{parts}")

    # ---- over partition values

    def compile(self, types: Types) -> Program:
        """A function of partition values giving True, False or None (unknown), made once
        per set of column types."""
        memo = self._memo_of()
        last = memo.last  # one tuple: read atomically
        if last is not None and last[0] is types:
            for c, t in last[1]:
                if types.get(c) is not t:
                    break
            else:
                return last[2]
        missing = [c for c in memo.sorted_columns if c not in types]
        if missing:
            raise InvalidArgumentError(
                f"predicate {self.to_sql()!r} references {missing}, for which no column type "
                f"is known (known: {sorted(types)})")
        key = tuple((c, types[c]) for c in memo.sorted_columns)
        found = memo.programs.get(key)
        if found is None:
            found = self._partition(PartitionPrograms(types))
            memo.programs[key] = found
        memo.last = (types, key, found)
        return found

    def evaluate(self, values: Values, types: Types) -> bool:
        """Whether partition values (serialized strings, None or '' for null) make it TRUE."""
        return self.compile(types)(values) is True


def fold(root: Expr, combine: Callable[[Expr, list[R]], R]) -> R:
    """``combine(node, results of its children)`` for every node, children first, without
    recursion; the root's result."""
    results: list[R] = []
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        kids = node.operands()
        if expanded:
            start = len(results) - len(kids)
            parts = results[start:]
            del results[start:]
            results.append(combine(node, parts))
            continue
        stack.append((node, True))
        stack.extend((k, False) for k in reversed(kids))
    return results[0]


def _binding(node: Expr) -> int:
    if isinstance(node, Arithmetic):
        return _ADDITIVE if node.op in ("+", "-") else _MULTIPLICATIVE
    return node.precedence


def _wrap(child: Expr, text: str, tightest: int) -> str:
    """``text`` of ``child``, in parentheses unless it binds at least as ``tightest``."""
    return text if _binding(child) >= tightest else f"({text})"


def _as_node(x: Expr | str) -> Expr:
    """A node, or a column given by its name (a convenience of the predicate builders)."""
    return Column((x,)) if isinstance(x, str) else x


# --------------------------------------------------------------------------- leaves

LITERAL_KINDS = frozenset({"null", "bool", "int", "decimal", "double", "string", "date",
                           "timestamp"})


def _digits_type(digits: int, scale: int) -> pa.DataType:
    """DECIMAL(digits, scale), or DOUBLE beyond a DECIMAL (a value from partition filters; its
    SQL text is a DOUBLE literal)."""
    if digits > MAX_DECIMAL_PRECISION:
        return pa.float64()
    return pa.decimal128(digits, scale)


def literal_type(kind: str, value: Any) -> pa.DataType:
    """The type Spark's parser gives the literal whose SQL text ``Literal.to_sql`` writes."""
    if kind == "int":
        if -2**31 <= value < 2**31:
            return pa.int32()
        if -2**63 <= value < 2**63:
            return pa.int64()
        if value.bit_length() > 130:  # beyond 38 digits
            return pa.float64()
        return _digits_type(len(str(abs(value))), 0)
    if kind == "decimal":
        _, digits, exponent = value.as_tuple()
        assert isinstance(exponent, int)
        scale = max(-exponent, 0)
        return _digits_type(max(len(digits) + max(exponent, 0), scale, 1), scale)
    types: dict[str, pa.DataType] = {
        "null": pa.null(), "bool": pa.bool_(), "double": pa.float64(), "string": pa.string(),
        "date": pa.date32(), "timestamp": TIMESTAMP_LTZ}
    return types[kind]


def _number_sql(kind: str, v: Any) -> str:
    if kind == "double":
        text = repr(float(v)).upper()
        return text if "E" in text else text + "E0"
    text = str(v) if kind == "int" else format(v, "f")
    if sum(c.isdigit() for c in text) <= MAX_DECIMAL_PRECISION:
        return text + "." if kind == "decimal" and "." not in text else text
    # Beyond a DECIMAL literal (which Spark's parser refuses): a DOUBLE literal, as the value
    # of a float from partition filters (1e300) was before it.
    return format(Decimal(v).normalize(), "E")


@dataclass(frozen=True, slots=True)
class Literal(Expr):
    """A typed SQL literal.  ``kind`` is one of null, bool, int, decimal, double, string,
    date, timestamp; ``type`` is Spark's type of it.

    ``int`` and ``decimal`` values are exact (``int`` and ``Decimal``), so a number from partition
    filters compares exactly as it was written; a ``double`` is a ``float``.  A timestamp is a
    ``datetime``: naive (a wall clock in the session time zone, UTC), or aware in UTC.

    ``spark`` marks a literal of a text Spark wrote (``parser.parse_spark_expression``): where
    Spark's coercion of it differs from deltalake's, which a user's predicate follows (a number
    beside a string value: Spark casts the string, DataFusion the number), the evaluator
    follows Spark's or refuses.  It does not take part in equality.
    """

    kind: str
    value: Any
    type: pa.DataType = field(init=False, repr=False)
    spark: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in LITERAL_KINDS:
            raise InvalidArgumentError(f"unknown literal kind {self.kind!r}; kinds are "
                                       f"{sorted(LITERAL_KINDS)}")
        object.__setattr__(self, "type", literal_type(self.kind, self.value))

    def _sql(self, parts: list[str]) -> str:
        k, v = self.kind, self.value
        if k == "null":
            return "NULL"
        if k == "bool":
            return "TRUE" if v else "FALSE"
        if k in ("int", "decimal", "double"):
            return _number_sql(k, v)
        if k == "string":
            return "'" + str(v).replace("'", "''") + "'"
        if k == "date":
            return f"DATE '{v.isoformat()}'"
        zone = "Z" if v.tzinfo is not None else ""
        return f"TIMESTAMP '{format_timestamp_us(datetime_us(v))}{zone}'"

    def _partition(self, programs: PartitionPrograms) -> Program:
        if self.kind in ("bool", "null"):
            return programs.constant(self.value)
        programs.unsupported(self, f"a {self.kind} literal is not a condition")


NULL = Literal("null", None)
TRUE = Literal("bool", True)
FALSE = Literal("bool", False)


#: Words a column name is backquoted for: the keywords, and those LIKE reads after an operand.
_QUOTED_WORDS = KEYWORDS | {"LIKE", "ILIKE", "ESCAPE"}


def _quote(part: str) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part) and part.upper() not in _QUOTED_WORDS:
        return part
    return "`" + part.replace("`", "``") + "`"


@dataclass(frozen=True, slots=True)
class Column(Expr):
    """A column: a top-level name, or a path into struct fields (``("a", "b")`` is ``a.b``)."""

    path: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.path or not all(isinstance(p, str) and p for p in self.path):
            raise InvalidArgumentError(f"a column is a path of non-empty names, not {self.path!r}")

    @property
    def name(self) -> str:
        """The column's name; a path's parts joined by dots."""
        return self.path[0] if len(self.path) == 1 else ".".join(self.path)

    def _sql(self, parts: list[str]) -> str:
        return ".".join(_quote(p) for p in self.path)


def col(name: str, *fields: str) -> Column:
    """The column ``name`` (a struct field of it with ``fields``)."""
    return Column((name, *fields))


# --------------------------------------------------------------------------- operations


@dataclass(frozen=True, slots=True)
class Negate(Expr):
    """Unary minus (of anything but a number literal, which the parser signs)."""

    operand: Expr
    precedence: ClassVar[int] = _UNARY

    def operands(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def _sql(self, parts: list[str]) -> str:
        return f"-{parts[0]}" if isinstance(self.operand, Column) else f"-({parts[0]})"


@dataclass(frozen=True, slots=True)
class Arithmetic(Expr):
    """``left op right`` for ``+ - * / %``."""

    left: Expr
    op: str
    right: Expr

    def __post_init__(self) -> None:
        if self.op not in ARITHMETIC_OPS:
            raise InvalidArgumentError(f"unknown arithmetic operator {self.op!r}")

    def operands(self) -> tuple[Expr, ...]:
        return (self.left, self.right)

    def _sql(self, parts: list[str]) -> str:
        p = _binding(self)
        return f"{_wrap(self.left, parts[0], p)} {self.op} {_wrap(self.right, parts[1], p + 1)}"


@dataclass(frozen=True, slots=True)
class Comparison(Expr):
    """``left op right`` for ``= != < <= > >=`` and the NULL-safe ``<=>``.  A column may be
    given by its name: ``Comparison("day", "=", lit("2026-11-22"))``."""

    left: Expr
    op: str
    right: Expr
    precedence: ClassVar[int] = _PREDICATE

    def __post_init__(self) -> None:
        if self.op not in COMPARISON_OPS:
            raise InvalidArgumentError(f"unknown comparison {self.op!r}; use one of "
                                       f"{list(COMPARISON_OPS)}")
        object.__setattr__(self, "left", _as_node(self.left))
        object.__setattr__(self, "right", _as_node(self.right))

    @property
    def column(self) -> str:
        """The column of a ``column op literal`` comparison."""
        assert isinstance(self.left, Column), self
        return self.left.name

    @property
    def literal(self) -> Literal:
        """The literal of a ``column op literal`` comparison."""
        assert isinstance(self.right, Literal), self
        return self.right

    def operands(self) -> tuple[Expr, ...]:
        return (self.left, self.right)

    def _sql(self, parts: list[str]) -> str:
        left, right = (_wrap(c, t, _ADDITIVE) for c, t in zip(self.operands(), parts, strict=True))
        return f"{left} {self.op} {right}"

    def _partition(self, programs: PartitionPrograms) -> Program:
        left, op, right = self.left, self.op, self.right
        if isinstance(left, Literal) and isinstance(right, Column):
            left, op, right = right, FLIPPED[op], left
        if not (isinstance(left, Column) and isinstance(right, Literal)) or op not in OPERATORS:
            programs.unsupported(self, "only a column compared with a literal is")
        return programs.comparison(self, left.name, op, right)


@dataclass(frozen=True, slots=True)
class InList(Expr):
    """``value [NOT] IN (items)``."""

    value: Expr
    items: tuple[Expr, ...]
    negated: bool = False
    precedence: ClassVar[int] = _PREDICATE

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _as_node(self.value))
        if not self.items:
            raise InvalidArgumentError(f"IN list for {self.value.to_sql()} is empty")
        object.__setattr__(self, "items", tuple(self.items))

    @property
    def column(self) -> str:
        assert isinstance(self.value, Column), self
        return self.value.name

    @property
    def literals(self) -> tuple[Literal, ...]:
        assert all(isinstance(x, Literal) for x in self.items), self
        return self.items  # type: ignore[return-value]

    def operands(self) -> tuple[Expr, ...]:
        return (self.value, *self.items)

    def literal_items(self) -> tuple[Literal, ...] | None:
        """The items where every one is a literal (a list of keys), else None; once."""
        return self.remembered("literal_items", lambda: (
            self.literals if all(isinstance(x, Literal) for x in self.items) else None))

    def item_kinds(self) -> frozenset[str]:
        """The kinds of the literal items (``null``, ``int``, ``string``...); once."""
        return self.remembered("item_kinds", lambda: frozenset(
            x.kind for x in self.items if isinstance(x, Literal)))

    def item_types(self) -> frozenset[pa.DataType]:
        """The types of the literal items; once."""
        return self.remembered("item_types", lambda: frozenset(
            x.type for x in self.items if isinstance(x, Literal)))

    def integer_items(self) -> npt.NDArray[np.int64]:
        """The items that are integer literals within BIGINT's range, sorted and distinct,
        computed once (a MERGE's recorded read is judged against every concurrent commit)."""
        def compute() -> npt.NDArray[np.int64]:
            import numpy as np

            return np.unique(np.array(
                [x.value for x in self.items if isinstance(x, Literal) and x.kind == "int"
                 and -2**63 <= x.value < 2**63], dtype=np.int64))

        return self.remembered("integer_items", compute)

    def _sql(self, parts: list[str]) -> str:
        kids = self.operands()
        items = ", ".join(_wrap(c, t, _ADDITIVE) for c, t in zip(kids[1:], parts[1:], strict=True))
        return f"{_wrap(kids[0], parts[0], _ADDITIVE)} {'NOT IN' if self.negated else 'IN'} ({items})"

    def _partition(self, programs: PartitionPrograms) -> Program:
        if not isinstance(self.value, Column) or not all(isinstance(x, Literal) for x in self.items):
            programs.unsupported(self, "only a column IN a list of literals is")
        return programs.member(self, self.value.name, self.literals, self.negated)


@dataclass(frozen=True, slots=True)
class Between(Expr):
    """``value [NOT] BETWEEN low AND high``."""

    value: Expr
    low: Expr
    high: Expr
    negated: bool = False
    precedence: ClassVar[int] = _PREDICATE

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _as_node(self.value))

    def operands(self) -> tuple[Expr, ...]:
        return (self.value, self.low, self.high)

    def _sql(self, parts: list[str]) -> str:
        value, low, high = (_wrap(c, t, _ADDITIVE) for c, t in zip(self.operands(), parts, strict=True))
        return f"{value} {'NOT BETWEEN' if self.negated else 'BETWEEN'} {low} AND {high}"

    def _partition(self, programs: PartitionPrograms) -> Program:
        both = And((Comparison(self.value, ">=", self.low),
                    Comparison(self.value, "<=", self.high)))
        return (Not(both) if self.negated else both)._partition(programs)


@dataclass(frozen=True, slots=True)
class Like(Expr):
    """``value [NOT] LIKE pattern [ESCAPE 'c']`` and ``value [NOT] ILIKE pattern`` (Spark's
    ``Like``/``ILike``; the pattern rules are in ``like``).

    The pattern is a string literal (or NULL, which makes the result NULL): deltacommit does not
    match patterns computed per row, and checks a literal one when the node is built, refusing
    what Spark refuses.  ``ILIKE`` with a cased ESCAPE character is refused: Spark lowers the
    pattern, escape characters included, before reading it with the unlowered one.
    """

    value: Expr
    pattern: Expr
    negated: bool = False
    case_insensitive: bool = False
    escape: str = like_patterns.DEFAULT_ESCAPE
    precedence: ClassVar[int] = _PREDICATE

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _as_node(self.value))
        pattern = self.pattern
        if not (isinstance(pattern, Literal) and pattern.kind in ("string", "null")):
            shown = pattern.to_sql() if isinstance(pattern, Expr) else repr(pattern)
            raise InvalidArgumentError(
                f"{self.value.to_sql()} {self.word} {shown}: the pattern {shown} is not a "
                f"string literal; deltacommit matches {self.word} only against a pattern "
                "written as one")
        like_patterns.check_escape(self.escape)
        if self.case_insensitive and (self.escape.lower() != self.escape
                                      or self.escape.upper() != self.escape):
            raise InvalidArgumentError(
                f"{self.to_sql()}: ILIKE with the cased ESCAPE character {self.escape!r} is not "
                "supported (Spark lowers the pattern's escape characters too)")
        if pattern.kind == "string":
            try:
                like_patterns.parse(pattern.value, self.escape)
            except InvalidArgumentError as e:
                raise InvalidArgumentError(f"{self.to_sql()}: {e}") from None

    @property
    def word(self) -> str:
        """LIKE or ILIKE."""
        return "ILIKE" if self.case_insensitive else "LIKE"

    @property
    def text(self) -> str | None:
        """The pattern's text (None for a NULL pattern)."""
        assert isinstance(self.pattern, Literal)
        value: str | None = self.pattern.value
        return value

    @property
    def parts(self) -> like_patterns.Parts | None:
        """The parsed pattern, None for a NULL pattern (for ILIKE: of the unlowered text)."""
        text = self.text
        return None if text is None else like_patterns.parse(text, self.escape)

    def operands(self) -> tuple[Expr, ...]:
        return (self.value, self.pattern)

    def _sql(self, parts: list[str]) -> str:
        word = f"NOT {self.word}" if self.negated else self.word
        out = f"{_wrap(self.value, parts[0], _ADDITIVE)} {word} {parts[1]}"
        if self.escape != like_patterns.DEFAULT_ESCAPE:
            out += " ESCAPE '" + self.escape.replace("'", "''") + "'"
        return out

    def _partition(self, programs: PartitionPrograms) -> Program:
        if not isinstance(self.value, Column):
            programs.unsupported(self, f"only a column {self.word} a pattern is")
        if self.case_insensitive:
            programs.unsupported(self, "ILIKE lowers values as Spark's ICU does, which is "
                                       "left to the evaluator")
        return programs.like(self, self.value.name, self.parts, self.negated)


@dataclass(frozen=True, slots=True)
class IsNull(Expr):
    """``operand IS [NOT] NULL``."""

    operand: Expr
    negated: bool = False
    precedence: ClassVar[int] = _PREDICATE

    def __post_init__(self) -> None:
        object.__setattr__(self, "operand", _as_node(self.operand))

    @property
    def column(self) -> str:
        assert isinstance(self.operand, Column), self
        return self.operand.name

    def operands(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def _sql(self, parts: list[str]) -> str:
        return (f"{_wrap(self.operand, parts[0], _ADDITIVE)} IS "
                f"{'NOT NULL' if self.negated else 'NULL'}")

    def _partition(self, programs: PartitionPrograms) -> Program:
        if not isinstance(self.operand, Column):
            programs.unsupported(self, "only a column IS NULL is")
        return programs.is_null(self.operand.name, self.negated)


@dataclass(frozen=True, slots=True)
class Not(Expr):
    child: Expr
    precedence: ClassVar[int] = _NOT

    def operands(self) -> tuple[Expr, ...]:
        return (self.child,)

    def _sql(self, parts: list[str]) -> str:
        return f"NOT {_wrap(self.child, parts[0], _NOT)}"

    def _partition(self, programs: PartitionPrograms) -> Program:
        return programs.negation(self.child._partition(programs))


@dataclass(frozen=True, slots=True)
class _Junction(Expr):
    """AND or OR of any number of conditions, with SQL's three-valued logic."""

    children: tuple[Expr, ...]
    word: ClassVar[str] = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "children", tuple(self.children))

    def operands(self) -> tuple[Expr, ...]:
        return self.children

    def _sql(self, parts: list[str]) -> str:
        return f" {self.word} ".join(_wrap(c, t, _NOT)
                                     for c, t in zip(self.children, parts, strict=True))

    def _partition(self, programs: PartitionPrograms) -> Program:
        return programs.junction([c._partition(programs) for c in self.children],
                                 decisive=self.word == "OR")


@dataclass(frozen=True, slots=True)
class And(_Junction):
    """Conjunction: FALSE if any condition is, else NULL if any is, else TRUE."""

    word: ClassVar[str] = "AND"
    precedence: ClassVar[int] = _AND


@dataclass(frozen=True, slots=True)
class Or(_Junction):
    """Disjunction: TRUE if any condition is, else NULL if any is, else FALSE."""

    word: ClassVar[str] = "OR"
    precedence: ClassVar[int] = _OR


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    """``CAST(operand AS to)`` (ANSI)."""

    operand: Expr
    to: pa.DataType

    def operands(self) -> tuple[Expr, ...]:
        return (self.operand,)

    def _sql(self, parts: list[str]) -> str:
        return f"CAST({parts[0]} AS {sql_type(self.to)})"


@dataclass(frozen=True, slots=True)
class Function(Expr):
    """A function call; ``name`` is the function's canonical (lower-case) name."""

    name: str
    args: tuple[Expr, ...]

    def operands(self) -> tuple[Expr, ...]:
        return self.args

    def _sql(self, parts: list[str]) -> str:
        return f"{self.name}({', '.join(parts)})"


@dataclass(frozen=True, slots=True)
class Case(Expr):
    """``CASE [operand] WHEN .. THEN .. [ELSE ..] END``: with an operand, each WHEN value is
    compared with it (``=``); without, each WHEN is a condition."""

    operand: Expr | None
    branches: tuple[tuple[Expr, Expr], ...]
    otherwise: Expr | None = None

    def operands(self) -> tuple[Expr, ...]:
        head = () if self.operand is None else (self.operand,)
        tail = () if self.otherwise is None else (self.otherwise,)
        return (*head, *(x for pair in self.branches for x in pair), *tail)

    def _sql(self, parts: list[str]) -> str:
        rest = list(parts)
        out = ["CASE"]
        if self.operand is not None:
            out.append(rest.pop(0))
        for _ in self.branches:
            out += ["WHEN", rest.pop(0), "THEN", rest.pop(0)]
        if self.otherwise is not None:
            out += ["ELSE", rest.pop(0)]
        return " ".join([*out, "END"])


# --------------------------------------------------------------------------- builders

_MAX_EXPONENT = 1000


def _number_literal(d: Decimal) -> Literal:
    if not d.is_finite():
        raise InvalidArgumentError(f"number {d} is not finite")
    if d and not -_MAX_EXPONENT <= d.adjusted() <= _MAX_EXPONENT:
        raise InvalidArgumentError(f"number {d} is out of range (exponent beyond +-{_MAX_EXPONENT})")
    if d == d.to_integral_value():
        return Literal("int", int(d))
    return Literal("decimal", d)


def lit(value: object) -> Literal:
    """The literal for a Python value (None, bool, int, float, Decimal, str, date, datetime):
    numbers exact (a float as the decimal it prints as, an integral one as an integer), NaN
    and infinities as the strings a FLOAT or DOUBLE column reads them from."""
    if isinstance(value, Literal):
        return value
    if value is None:
        return NULL
    if isinstance(value, bool):
        return Literal("bool", value)
    if isinstance(value, int):
        if value.bit_length() > 3 * _MAX_EXPONENT:  # str() of it fails past 4,300 digits
            raise InvalidArgumentError(
                f"integer of {value.bit_length()} bits is out of range (exponent beyond "
                f"+-{_MAX_EXPONENT})")
        return Literal("int", value)
    if isinstance(value, float):
        if value != value:
            return Literal("string", "NaN")  # coerced to NaN for float columns
        if value in (float("inf"), float("-inf")):
            return Literal("string", "Infinity" if value > 0 else "-Infinity")
        return _number_literal(Decimal(repr(value)))
    if isinstance(value, Decimal):
        return _number_literal(value)
    if isinstance(value, str):
        return Literal("string", value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC)
        return Literal("timestamp", value)
    if isinstance(value, dt.date):
        return Literal("date", value)
    raise InvalidArgumentError(f"unsupported literal {value!r} of type {type(value).__name__}; use None, "
                               "bool, int, float, Decimal, str, datetime.date or datetime.datetime")


def and_(*predicates: Expr) -> Expr:
    """Conjunction, flattened; TRUE operands dropped, any FALSE operand gives FALSE."""
    flat: list[Expr] = []
    for p in predicates:
        if p == FALSE:
            return FALSE
        if p == TRUE:
            continue
        flat.extend(p.children if isinstance(p, And) else (p,))
    if not flat:
        return TRUE
    return flat[0] if len(flat) == 1 else And(tuple(flat))


def or_(*predicates: Expr) -> Expr:
    """Disjunction, flattened; FALSE operands dropped, any TRUE operand gives TRUE."""
    flat: list[Expr] = []
    for p in predicates:
        if p == TRUE:
            return TRUE
        if p == FALSE:
            continue
        flat.extend(p.children if isinstance(p, Or) else (p,))
    if not flat:
        return FALSE
    return flat[0] if len(flat) == 1 else Or(tuple(flat))


def not_(p: Expr) -> Expr:
    """Negation; constants fold and a double negation cancels (sound in three-valued logic)."""
    if p == TRUE:
        return FALSE
    if p == FALSE:
        return TRUE
    if isinstance(p, Not):
        return p.child
    return Not(p)


__all__ = ["ARITHMETIC_OPS", "COMPARISON_OPS", "FALSE", "FLIPPED", "KEYWORDS", "LITERAL_KINDS",
           "NULL", "TRUE", "And", "Arithmetic", "Between", "Case", "Cast", "Column", "Comparison",
           "Expr", "Function", "InList", "IsNull", "Like", "Literal", "Negate", "Not", "Or", "and_",
           "col", "fold", "lit", "literal_type", "not_", "or_"]
