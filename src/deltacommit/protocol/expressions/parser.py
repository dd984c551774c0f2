"""The parser of deltacommit's SQL expressions: one grammar, read whole or as the predicates
over partition columns.  Pure.

Spark's precedence, tightest first: a sign, ``* / %``, ``+ - ||``, comparisons (and ``IS
NULL``, ``IN``, ``BETWEEN``, ``LIKE``), ``NOT``, ``AND``, ``OR``::

    disjunction    := conjunction ("OR" conjunction)*
    conjunction    := negation ("AND" negation)*
    negation       := "NOT" negation | predicate
    predicate      := additive [ cmp additive | "IS" ["NOT"] "NULL"
                               | ["NOT"] "IN" "(" additive ("," additive)* ")"
                               | ["NOT"] "BETWEEN" additive "AND" additive
                               | ["NOT"] ("LIKE" | "ILIKE") additive ["ESCAPE" 'c'] ]
    cmp            := "=" | "==" | "!=" | "<>" | "<" | "<=" | ">" | ">=" | "<=>"
    additive       := multiplicative (("+" | "-" | "||") multiplicative)*
    multiplicative := unary (("*" | "/" | "%") unary)*
    unary          := ("-" | "+") unary | primary        (a sign before a number is the literal's)
    primary        := "(" disjunction ")" | literal | column | function "(" [args] ")"
                    | "CAST" "(" disjunction "AS" type ")"
                    | "CASE" [disjunction] ("WHEN" disjunction "THEN" disjunction)+
                      ["ELSE" disjunction] "END"
    literal        := 'string' ('' for a quote) | number | TRUE | FALSE | NULL
                    | DATE 'YYYY-MM-DD' | TIMESTAMP 'YYYY-MM-DD HH:MM:SS[.ffffff][Z|+hh:mm]'
    column         := name ("." name)*      name := word | "double quoted" | `backquoted`

A text Spark wrote into a table's metadata (``parse_spark_expression``) is read with Spark's
lexical rules instead (``lexer``: backslash escapes, ``"..."`` a string, raw strings), and
string literals side by side are one (Spark's ``stringLit+``: ``'a' 'b'`` is ``'ab'``), so the
value enforced is the one Spark enforces; its literals are marked ``spark`` for the evaluator.

Keywords are case-insensitive; ``LIKE``, ``ILIKE`` and ``ESCAPE`` are keywords only where
they follow an operand (a column may still be named by one).  A ``LIKE`` pattern must be a
string literal (or NULL), checked as Spark checks it (``like``): anything else is a syntax
error pointing at the pattern.  Number literals are typed as Spark types them
(``sql_semantics.parse_number``).

A *partition predicate* (``parse_predicate``: what a scan, an overwrite or a conflict check
decides from partition values) is read with the same grammar restricted to what partition
values decide: each comparison has a column on one side and a literal on the other (written
either way round; the tree has the column on the left), ``IN`` and ``BETWEEN`` take literals,
``[NOT] LIKE``/``ILIKE`` has a column on the left, and ``TRUE``/``FALSE`` stand alone.  Its
tree is normalized (``ast.and_``/``or_``/``not_``: flattened, constants folded) and ``BETWEEN``
becomes two comparisons.  Its syntax errors speak
of a predicate.

Nesting (parentheses, ``NOT``, signs, function calls) is bounded at ``MAX_DEPTH`` levels: far
beyond any written by hand, and far below Python's recursion limit, so that deep nesting is a
clear error, never a RecursionError.  Operator chains (``a + b + ...``, ``x = 1 OR ...``) do
not nest in the parser and are not bounded by it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.expressions.ast import (
    FALSE,
    FLIPPED,
    KEYWORDS,
    NULL,
    TRUE,
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
    and_,
    not_,
    or_,
)
from deltacommit.protocol.expressions.lexer import Token, syntax_error, token_text, tokenize
from deltacommit.protocol.expressions.like import DEFAULT_ESCAPE
from deltacommit.protocol.expressions.spark_types import CAST_TYPES
from deltacommit.protocol.expressions.sql_semantics import (
    MAX_DECIMAL_PRECISION,
    LiteralError,
    parse_date_literal,
    parse_number,
    parse_timestamp_literal,
)

MAX_DEPTH = 100
MAX_CHARS = 1_000_000
_COMPARISONS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">",
                ">=": ">="}
#: Words that cannot name a column without quotes in an expression.
_RESERVED = frozenset({"AND", "OR", "NOT", "IS", "IN", "BETWEEN", "AS"})
_CASE_WORDS = frozenset({"WHEN", "THEN", "ELSE", "END"})
#: Words ``NOT`` may precede after an operand.
_NEGATABLE = ("IN", "BETWEEN", "LIKE", "ILIKE")

#: The functions the evaluator computes, with their argument counts (min, max), and the names
#: Spark also gives them.
FUNCTIONS: dict[str, tuple[int, int]] = {
    "year": (1, 1), "month": (1, 1), "day": (1, 1), "dayofmonth": (1, 1), "hour": (1, 1),
    "minute": (1, 1), "second": (1, 1), "to_date": (1, 1), "date": (1, 1),
    "date_format": (2, 2), "substring": (2, 3), "substr": (2, 3), "concat": (1, 64),
    "lower": (1, 1), "upper": (1, 1), "lcase": (1, 1), "ucase": (1, 1), "trim": (1, 1),
    "ltrim": (1, 1), "rtrim": (1, 1), "abs": (1, 1), "coalesce": (1, 64),
    "date_trunc": (2, 2), "trunc": (2, 2), "length": (1, 1), "char_length": (1, 1),
}
_ALIASES = {"dayofmonth": "day", "substr": "substring", "lcase": "lower", "ucase": "upper",
            "date": "to_date", "char_length": "length"}


@dataclass(frozen=True, slots=True)
class _Dialect:
    """How a text is read: whole (an expression) or as a partition predicate."""

    what: str
    operand: str  # the error where an operand is missing
    end: str  # the error where the text goes on after a whole expression
    depth: str  # what nests, in the error beyond MAX_DEPTH
    partition: bool
    spark: bool = False  # Spark's lexical rules (a text Spark wrote)


_EXPRESSION = _Dialect("expression", "expected a column, a literal or a function",
                       "expected an operator or the end of the expression", "levels", False)
_PREDICATE = _Dialect("predicate", "expected a column or a literal",
                      "expected AND, OR or the end of the predicate",
                      "levels of parentheses and NOT", True)
_SPARK_EXPRESSION = _Dialect("expression", _EXPRESSION.operand, _EXPRESSION.end,
                             _EXPRESSION.depth, False, spark=True)


class _Parser:
    def __init__(self, text: str, dialect: _Dialect) -> None:
        self.text = text
        self.dialect = dialect
        self.tokens = tokenize(text, dialect.what, dialect.spark)
        self.i = 0
        self.depth = 0
        self.cases = 0  # CASE expressions open: WHEN, THEN, ELSE and END end an operand

    # ---- tokens

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def next(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind != "end":
            self.i += 1
        return tok

    def is_kw(self, word: str, ahead: int = 0) -> bool:
        tok = self.peek(ahead)
        return tok.kind == "word" and tok.text.upper() == word

    def accept_kw(self, word: str) -> bool:
        if self.is_kw(word):
            self.i += 1
            return True
        return False

    def expect_kw(self, word: str) -> None:
        if not self.accept_kw(word):
            raise self.fail(f"expected {word}")

    def is_op(self, *ops: str) -> bool:
        tok = self.peek()
        return tok.kind == "op" and tok.text in ops

    def expect_op(self, op: str) -> None:
        if not self.is_op(op):
            raise self.fail(f"expected {op!r}")
        self.next()

    def comparison_op(self) -> str | None:
        """The comparison operator at the current token (``<=>`` from its two tokens)."""
        tok = self.peek()
        if tok.kind != "op" or tok.text not in _COMPARISONS:
            return None
        nxt = self.peek(1)
        if (tok.text == "<=" and not self.dialect.partition and nxt.kind == "op"
                and nxt.text == ">" and nxt.pos == tok.pos + 2):
            return "<=>"
        return _COMPARISONS[tok.text]

    def take_comparison_op(self) -> str:
        op = self.comparison_op()
        assert op is not None
        self.next()
        if op == "<=>":
            self.next()
        return op

    def fail(self, message: str, tok: Token | None = None) -> InvalidArgumentError:
        tok = tok or self.peek()
        found = "end of input" if tok.kind == "end" else token_text(tok)
        return syntax_error(self.text, tok.pos, f"{message}, found {found}", self.dialect.what)

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"the {self.dialect.what} nests deeper than {MAX_DEPTH} "
                            f"{self.dialect.depth}")

    def leave(self) -> None:
        self.depth -= 1

    # ---- conditions

    def parse(self) -> Expr:
        if self.peek().kind == "end":
            raise syntax_error(self.text, 0, f"empty {self.dialect.what}", self.dialect.what)
        node = self.disjunction()
        if self.peek().kind != "end":
            raise self.fail(self.dialect.end)
        return node

    def disjunction(self) -> Expr:
        items = [self.conjunction()]
        while self.accept_kw("OR"):
            items.append(self.conjunction())
        if self.dialect.partition:
            return or_(*items)
        return items[0] if len(items) == 1 else Or(tuple(items))

    def conjunction(self) -> Expr:
        items = [self.negation()]
        while self.accept_kw("AND"):
            items.append(self.negation())
        if self.dialect.partition:
            return and_(*items)
        return items[0] if len(items) == 1 else And(tuple(items))

    def negation(self) -> Expr:
        if self.accept_kw("NOT"):
            self.enter()
            inner = self.negation()
            self.leave()
            return not_(inner) if self.dialect.partition else Not(inner)
        if self.dialect.partition:
            return self.partition_predicate()
        return self.predicate()

    def predicate(self) -> Expr:
        left = self.additive()
        if self.comparison_op() is not None:
            op = self.take_comparison_op()
            return Comparison(left, op, self.additive())
        if self.accept_kw("IS"):
            negated = self.accept_kw("NOT")
            self.expect_kw("NULL")
            return IsNull(left, negated)
        negated = self.is_kw("NOT") and any(self.is_kw(w, 1) for w in _NEGATABLE)
        if negated:
            self.next()
        if self.is_kw("LIKE") or self.is_kw("ILIKE"):
            return self.like(left, negated, self.additive)
        if self.accept_kw("IN"):
            return InList(left, self.in_list(self.additive), negated)
        if self.accept_kw("BETWEEN"):
            low = self.additive()
            self.expect_kw("AND")
            return Between(left, low, self.additive(), negated)
        return left

    def like(self, value: Expr, negated: bool, pattern_of: Callable[[], Expr]) -> Like:
        """``value [NOT] LIKE|ILIKE pattern [ESCAPE 'c']`` from the LIKE or ILIKE word on."""
        case_insensitive = self.next().text.upper() == "ILIKE"
        pattern_tok = self.peek()
        pattern = pattern_of()
        escape = DEFAULT_ESCAPE
        if self.accept_kw("ESCAPE"):
            escape_tok = self.next()
            if escape_tok.kind != "string":
                raise self.fail("expected a quoted character after ESCAPE", escape_tok)
            escape = escape_tok.text
        try:
            return Like(value, pattern, negated, case_insensitive, escape)
        except InvalidArgumentError as e:
            raise syntax_error(self.text, pattern_tok.pos, str(e), self.dialect.what) from None

    def in_list(self, item: Callable[[], Expr]) -> tuple[Expr, ...]:
        self.expect_op("(")
        items = [item()]
        while self.is_op(","):
            self.next()
            items.append(item())
        self.expect_op(")")
        return tuple(items)

    # ---- values

    def additive(self) -> Expr:
        node = self.multiplicative()
        while self.is_op("+", "-", "||"):
            op = self.next().text
            right = self.multiplicative()
            node = Function("concat", (node, right)) if op == "||" else Arithmetic(node, op, right)
        return node

    def multiplicative(self) -> Expr:
        node = self.unary()
        while self.is_op("*", "/", "%"):
            op = self.next().text
            node = Arithmetic(node, op, self.unary())
        return node

    def unary(self) -> Expr:
        if not self.is_op("-", "+"):
            return self.primary()
        sign = self.next().text
        # Spark's grammar reads a sign right before a number as part of the literal
        # (``number: MINUS? INTEGER_VALUE``): -2147483648 is an INT.  Anything else is an
        # operator: -(2147483648) is a BIGINT, -(-2147483648) overflows.
        number = self.peek().kind == "number"
        self.enter()
        inner = self.unary()
        self.leave()
        if sign == "+":
            return inner
        if number and isinstance(inner, Literal):
            return self.lit(inner.kind, -inner.value)
        return Negate(inner)

    def primary(self) -> Expr:
        tok = self.next()
        if tok.kind == "op" and tok.text == "(":
            self.enter()
            node = self.disjunction()
            self.expect_op(")")
            self.leave()
            return node
        if tok.kind == "number":
            return self.number(tok.text, tok)
        if tok.kind == "string":
            return self.lit("string", self.joined(tok.text))
        if tok.kind == "ident":
            return self.column(tok.text)
        upper = tok.text.upper()
        if tok.kind != "word" or upper in _RESERVED or (self.cases and upper in _CASE_WORDS):
            raise self.fail(self.dialect.operand, tok)
        if upper in ("TRUE", "FALSE"):
            return self.lit("bool", upper == "TRUE")
        if upper == "NULL":
            return NULL
        if upper in ("DATE", "TIMESTAMP") and self.peek().kind == "string":
            return self.typed_literal(upper, self.next())
        if upper == "CASE" and (self.peek().kind in ("word", "ident", "number", "string")
                                or self.is_op("(")):
            return self.case()
        if self.is_op("("):
            self.next()
            self.enter()
            node = self.cast() if upper == "CAST" else self.call(tok)
            self.leave()
            return node
        return self.column(tok.text)

    def lit(self, kind: str, value: object) -> Literal:
        """A literal of this text, marked as Spark's in Spark's dialect."""
        if self.dialect.spark:
            return Literal(kind, value, spark=True)
        if kind == "bool":
            return TRUE if value else FALSE
        return Literal(kind, value)

    def joined(self, first: str) -> str:
        """A string literal's value, with the string literals right after it in Spark's
        dialect (Spark's ``stringLit+``: ``'a' "b"`` is ``ab``)."""
        if not self.dialect.spark or self.peek().kind != "string":
            return first
        parts = [first]
        while self.peek().kind == "string":
            parts.append(self.next().text)
        return "".join(parts)

    def column(self, first: str) -> Column:
        path = [first]
        while self.is_op("."):
            self.next()
            tok = self.next()
            if tok.kind not in ("word", "ident"):
                raise self.fail("expected a field name after '.'", tok)
            path.append(tok.text)
        return Column(tuple(path))

    def number(self, text: str, tok: Token) -> Literal:
        """A number literal, typed as Spark types it; refused where Spark's parser refuses it
        (a DECIMAL beyond 38 digits, a DOUBLE beyond its range)."""
        negative = text.startswith("-")
        try:
            typed = parse_number(text.lstrip("+-"))
        except LiteralError as e:
            raise self.fail(str(e), tok) from None
        value: int | float | Decimal
        if pa.types.is_floating(typed.type):
            kind, value = "double", float(typed.value)
        elif "." in text:  # a DECIMAL of its digits, 1. included (DECIMAL(1, 0))
            kind, value = "decimal", typed.exact
        else:
            kind, value = "int", int(typed.value)
        return self.lit(kind, -value if negative else value)

    def typed_literal(self, kind: str, tok: Token) -> Literal:
        try:
            if kind == "DATE":
                return self.lit("date", parse_date_literal(tok.text))
            return self.lit("timestamp", parse_timestamp_literal(tok.text))
        except LiteralError as e:
            raise syntax_error(self.text, tok.pos, f"invalid {kind.lower()} literal: {e}",
                               self.dialect.what) from None

    def cast(self) -> Cast:
        child = self.disjunction()
        tok = self.next()
        if tok.kind != "word" or tok.text.upper() != "AS":
            raise self.fail("expected AS in CAST", tok)
        name_tok = self.next()
        if name_tok.kind != "word":
            raise self.fail("expected a type name", name_tok)
        name = name_tok.text.lower()
        if name in ("decimal", "numeric"):
            to = self.decimal_type()
        elif name in CAST_TYPES:
            to = CAST_TYPES[name]
            if name in ("varchar", "char") and self.is_op("("):
                # Spark 4 casts to CHAR(n)/VARCHAR(n) as to STRING
                # (spark.sql.preserveCharVarcharTypeInfo is off by default).
                self.next()
                self.int_token()
                self.expect_op(")")
        else:
            raise self.fail("expected a type deltacommit can cast to "
                            f"({', '.join(sorted([*CAST_TYPES, 'decimal']))})", name_tok)
        self.expect_op(")")
        return Cast(child, to)

    def decimal_type(self) -> pa.DataType:
        precision, scale = 10, 0
        if self.is_op("("):
            self.next()
            precision_tok = self.peek()
            precision = int(self.int_token())
            if self.is_op(","):
                self.next()
                scale = int(self.int_token())
            if not 1 <= precision <= MAX_DECIMAL_PRECISION or scale > precision:
                raise self.fail(f"DECIMAL({precision}, {scale}) is not a Spark type "
                                f"(precision 1 to {MAX_DECIMAL_PRECISION}, scale at most "
                                "the precision)", precision_tok)
            self.expect_op(")")
        return pa.decimal128(precision, scale)

    def int_token(self) -> str:
        tok = self.next()
        if tok.kind != "number" or not tok.text.isdigit() or len(tok.text) > 6:
            raise self.fail("expected an integer", tok)
        return tok.text

    def call(self, name_tok: Token) -> Function:
        name = name_tok.text.lower()
        if name not in FUNCTIONS:
            raise self.fail("expected a function deltacommit evaluates "
                            f"({', '.join(sorted(FUNCTIONS))})", name_tok)
        args: list[Expr] = []
        if not self.is_op(")"):
            args.append(self.disjunction())
            while self.is_op(","):
                self.next()
                args.append(self.disjunction())
        self.expect_op(")")
        lo, hi = FUNCTIONS[name]
        if not lo <= len(args) <= hi:
            raise self.fail(f"{name} takes {lo if lo == hi else f'{lo} to {hi}'} argument(s), "
                            f"not {len(args)}", name_tok)
        return Function(_ALIASES.get(name, name), tuple(args))

    def case(self) -> Case:
        self.enter()
        self.cases += 1
        operand = None if self.is_kw("WHEN") else self.disjunction()
        branches: list[tuple[Expr, Expr]] = []
        while self.accept_kw("WHEN"):
            when = self.disjunction()
            self.expect_kw("THEN")
            branches.append((when, self.disjunction()))
        if not branches:
            raise self.fail("expected WHEN")
        otherwise = self.disjunction() if self.accept_kw("ELSE") else None
        self.expect_kw("END")
        self.cases -= 1
        self.leave()
        return Case(operand, tuple(branches), otherwise)

    # ---- partition predicates

    def partition_predicate(self) -> Expr:
        tok = self.peek()
        if tok.kind == "op" and tok.text == "(":
            self.next()
            self.enter()
            p = self.disjunction()
            self.expect_op(")")
            self.leave()
            return p
        if (self.is_kw("TRUE") or self.is_kw("FALSE")) and not self.starts_comparison(1):
            return TRUE if self.next().text.upper() == "TRUE" else FALSE
        left_tok = self.peek()
        left = self.operand()
        if isinstance(left, Column):
            return self.column_tail(left)
        # A literal on the left: only a comparison with a column can follow.
        if self.comparison_op() is None:
            raise self.fail("expected a comparison operator after a literal")
        op = self.take_comparison_op()
        right = self.operand()
        if not isinstance(right, Column):
            raise self.fail("a comparison needs a column on one side", left_tok)
        return Comparison(right, FLIPPED[op], left)

    def starts_comparison(self, ahead: int) -> bool:
        """Whether the token ``ahead`` continues an operand into a comparison, which makes a
        TRUE/FALSE before it a literal rather than a constant predicate."""
        tok = self.peek(ahead)
        if tok.kind == "op":
            return tok.text in _COMPARISONS
        if self.is_kw("NOT", ahead):
            return any(self.is_kw(w, ahead + 1) for w in _NEGATABLE)
        return any(self.is_kw(w, ahead) for w in ("IN", "IS", "BETWEEN", "LIKE", "ILIKE"))

    def column_tail(self, column: Column) -> Expr:
        if self.comparison_op() is not None:
            op = self.take_comparison_op()
            right_tok = self.peek()
            right = self.operand()
            if isinstance(right, Column):
                raise self.fail("comparing two columns is not supported; compare a column "
                                "with a literal", right_tok)
            return Comparison(column, op, right)
        if self.accept_kw("IS"):
            negated = self.accept_kw("NOT")
            self.expect_kw("NULL")
            return IsNull(column, negated)
        negated = self.accept_kw("NOT")
        if self.is_kw("LIKE") or self.is_kw("ILIKE"):
            return self.like(column, negated, self.literal)
        if self.accept_kw("IN"):
            return InList(column, self.in_list(self.literal), negated)
        if self.accept_kw("BETWEEN"):
            low = self.literal()
            self.expect_kw("AND")
            both = And((Comparison(column, ">=", low), Comparison(column, "<=", self.literal())))
            return not_(both) if negated else both
        raise self.fail("expected a comparison, IN, IS NULL, BETWEEN or LIKE after column "
                        + repr(column.name))

    def operand(self) -> Column | Literal:
        """A column or a literal (a predicate over partition values compares nothing else)."""
        tok = self.peek()
        if tok.kind == "end" or (tok.kind == "op" and tok.text not in ("-", "+")):
            raise self.fail(self.dialect.operand)
        if tok.kind == "ident":
            self.next()
            return self.column(tok.text)
        if tok.kind == "word":
            upper = tok.text.upper()
            typed = upper in ("DATE", "TIMESTAMP") and self.peek(1).kind == "string"
            if typed or upper in ("TRUE", "FALSE", "NULL"):
                return self.literal()
            if upper in KEYWORDS and upper not in ("DATE", "TIMESTAMP", "AS", "CASE", "WHEN",
                                                   "THEN", "ELSE", "END"):
                raise self.fail(self.dialect.operand)
            self.next()
            return self.column(tok.text)
        return self.literal()

    def literal(self) -> Literal:
        tok = self.next()
        if tok.kind == "string":
            return Literal("string", tok.text)
        if tok.kind == "number":
            return self.number(tok.text, tok)
        if tok.kind == "op" and tok.text in ("-", "+"):
            num = self.next()
            if num.kind != "number":
                raise self.fail("expected a number after the sign", num)
            return self.number(tok.text + num.text, num)
        if tok.kind == "word":
            upper = tok.text.upper()
            if upper == "NULL":
                return NULL
            if upper in ("TRUE", "FALSE"):
                return TRUE if upper == "TRUE" else FALSE
            if upper in ("DATE", "TIMESTAMP"):
                s = self.next()
                if s.kind != "string":
                    raise self.fail(f"expected a quoted {upper.lower()} after {upper}", s)
                return self.typed_literal(upper, s)
        raise self.fail("expected a literal", tok)


def _parse(text: object, dialect: _Dialect) -> Expr:
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{dialect.what} must be a string, got {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise InvalidArgumentError(f"{dialect.what} is {len(text)} characters long; at most "
                                   f"{MAX_CHARS} are accepted")
    try:
        return _Parser(text, dialect).parse()
    except RecursionError:  # only from a caller already deep in its stack: the depth is bounded
        raise syntax_error(text, 0, f"the {dialect.what} nests too deeply to parse",
                           dialect.what) from None


@functools.lru_cache(maxsize=256)
def _parse_expression(text: str) -> Expr:
    return _parse(text, _EXPRESSION)


def parse_expression(text: str, where: str | None = None) -> Expr:
    """The tree of a SQL expression (a generation expression, a CHECK constraint, a column
    invariant, a row predicate); InvalidArgumentError pointing at what does not parse, after
    ``where`` (the operation and its table: an operator running many tables needs to know
    which one refused).  The trees of the texts parsed last are kept: every write parses its
    table's expressions."""
    try:
        if not isinstance(text, str):
            raise InvalidArgumentError(
                f"expression must be a string, got {type(text).__name__}")
        return _parse_expression(text)
    except InvalidArgumentError as e:
        if where is None:
            raise
        raise InvalidArgumentError(f"{where}: {e}") from None


@functools.lru_cache(maxsize=256)
def _parse_spark_expression(text: str) -> Expr:
    return _parse(text, _SPARK_EXPRESSION)


def parse_spark_expression(text: str) -> Expr:
    """The tree of an expression Spark wrote (a CHECK constraint, an invariant, a generation
    expression), read as Spark's parser reads it (the module docstring; ``lexer``): Spark
    enforces the text with its own lexical rules, so reading a literal any other way would
    enforce another value than Spark's, refusing valid writes or letting through rows Spark
    refuses.  What cannot be read as Spark reads it is a syntax error naming the text."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"expression must be a string, got {type(text).__name__}")
    return _parse_spark_expression(text)


def parse_predicate(text: str) -> Expr:
    """The normalized tree of a predicate over partition columns (see the module docstring);
    InvalidArgumentError pointing at what does not parse."""
    return _parse(text, _PREDICATE)


__all__ = ["FUNCTIONS", "MAX_CHARS", "MAX_DEPTH", "parse_expression", "parse_predicate",
           "parse_spark_expression"]
