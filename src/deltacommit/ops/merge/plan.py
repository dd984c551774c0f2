"""What a MERGE does to rows: its clauses, and the work on one target file.  Pure: pyarrow and
the one expression language, no I/O, so Spark tasks run it on executors with only pyarrow.

A MERGE joins the target's rows with the source's on its condition (``ON``), then, as Spark
and deltalake do:

* each matched pair (target row, source row) takes the first ``WHEN MATCHED`` clause whose
  condition is TRUE: the target row is updated or deleted; a pair no clause takes leaves it;
* each target row no source row matches takes the first ``WHEN NOT MATCHED BY SOURCE`` clause
  whose condition is TRUE (update or delete);
* each source row no target row matches takes the first ``WHEN NOT MATCHED`` clause whose
  condition is TRUE: it is inserted.

A target row that several source rows match is refused where a matched clause could change it
(Spark's ``multipleSourceRowMatchingTargetRowInMergeException``): with only matched clauses the
pairs some clause takes count, otherwise every matched pair does; a lone unconditional
``WHEN MATCHED DELETE`` deletes such a row once.

``merge_file`` does the work of one target file (its matched, deleted and updated rows, and
which source rows it matched); ``insert_rows`` the inserts, once every file has said which
source rows it matched.  Positions are row numbers of the rows given.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import InvalidArgumentError, MergeCardinalityError
from deltacommit.io.datafiles import WriteTarget, conform_rows
from deltacommit.protocol.expressions.ast import And, Column, Comparison, Expr
from deltacommit.protocol.expressions.evaluator import (
    AliasScope,
    EvaluationFailed,
    Scope,
    TableScope,
    evaluate,
    predicate_mask,
)
from deltacommit.protocol.expressions.parser import parse_expression

Positions = npt.NDArray[np.int64]

#: Pairs of rows judged at once where the condition has no equality to join on (a
#: nested-loop join, chunked); a MERGE needing more pairs than ``MAX_PAIRS`` is refused.
_PAIRS_PER_STEP = 1 << 20
MAX_PAIRS = 1 << 31

ACTIONS = ("update", "delete", "insert")


@dataclass(frozen=True, slots=True)
class Clause:
    """One ``WHEN`` clause: its action, its condition (None: always) and, for an update or an
    insert, the value of each target column it sets."""

    action: str
    condition: Expr | None = None
    assignments: tuple[tuple[str, Expr], ...] = ()

    def describe(self) -> dict[str, str]:
        """The clause as Spark records it in ``operationParameters``."""
        out = {"actionType": self.action}
        if self.condition is not None:
            out["predicate"] = self.condition.to_sql()
        return out


@dataclass(frozen=True, slots=True)
class MergePlan:
    """A MERGE, checked against the table's and the source's schemas (``check``); small and
    picklable, so Spark ships it with its tasks."""

    #: The table's URI, named by every error.
    table: str
    #: What rows are conformed to (schema, constraints, generated and identity columns).
    target: WriteTarget
    on: Expr
    source_alias: str
    target_alias: str
    matched: tuple[Clause, ...] = ()
    not_matched: tuple[Clause, ...] = ()
    not_matched_by_source: tuple[Clause, ...] = ()
    #: Generated columns set by no update clause: recomputed from the updated rows.
    recomputed: frozenset[str] = field(default=frozenset())

    @property
    def schema(self) -> pa.Schema:
        return self.target.schema

    @property
    def what(self) -> str:
        return f"MERGE into table {self.table}"

    @property
    def matched_only(self) -> bool:
        return not self.not_matched and not self.not_matched_by_source

    @property
    def lone_unconditional_delete(self) -> bool:
        """A lone ``WHEN MATCHED DELETE`` without condition: a row several source rows match
        is deleted once, unambiguously."""
        return (len(self.matched) == 1 and self.matched[0].action == "delete"
                and self.matched[0].condition is None)

    def check(self, source_schema: pa.Schema) -> None:
        """InvalidArgumentError naming the table and the expression, before any file is read,
        for a column neither side has, an expression that cannot be evaluated or gives a value
        its column cannot hold, or a clause that references the side it cannot see."""
        target = self.schema.empty_table()
        source = source_schema.empty_table()
        both = AliasScope({self.target_alias: target, self.source_alias: source})
        self._check_condition(self.on, both, "the merge condition")
        for clauses, scope, kind in (
                (self.matched, both, "WHEN MATCHED"),
                (self.not_matched, AliasScope({self.source_alias: source}), "WHEN NOT MATCHED"),
                (self.not_matched_by_source, AliasScope({self.target_alias: target}),
                 "WHEN NOT MATCHED BY SOURCE")):
            for c in clauses:
                if c.condition is not None:
                    self._check_condition(c.condition, scope, f"the {kind} condition")
                for name, expr in c.assignments:
                    to = self.schema.field(name).type
                    try:
                        evaluate(expr, scope, to=to)
                    except EvaluationFailed as e:
                        raise InvalidArgumentError(
                            f"{self.what}: {kind} {c.action} of column {name!r} = "
                            f"{expr.to_sql()!r}: {e.message}") from None

    def _check_condition(self, expr: Expr, scope: Scope, what: str) -> None:
        try:
            predicate_mask(expr, scope)
        except EvaluationFailed as e:
            raise InvalidArgumentError(f"{self.what}: {what} {expr.to_sql()!r}: "
                                       f"{e.message}") from None


@dataclass(slots=True)
class FileMerge:
    """What a MERGE does to the rows of one target file (positions into the rows given)."""

    #: Rows deleted, ascending.
    deleted: Positions
    #: Rows updated, ascending.
    updated: Positions
    #: The updated rows' new values, in the table's schema, conformed, in ``updated``'s order.
    new_rows: pa.Table
    #: Source rows this file's rows match (by the merge condition alone), ascending.
    matched_source: Positions
    #: This file's rows some source row matches (by the merge condition alone), ascending.
    matched_target: Positions
    #: Of ``matched_target``, those left as they were where the MERGE inserts: each keeps the
    #: source rows it matches from being inserted, so its outcome depends on them as on the
    #: rows it changes (a concurrent delete of one would have the MERGE insert its source
    #: row).  Without a ``WHEN NOT MATCHED`` clause a matched row that is left decides
    #: nothing else: none.
    read: Positions = field(default_factory=lambda: _empty())
    matched_updated: int = 0
    matched_deleted: int = 0
    not_matched_by_source_updated: int = 0
    not_matched_by_source_deleted: int = 0


def parse_assignments(updates: Any, schema: pa.Schema, what: str,
                      target_alias: str | None = None, identity: Sequence[str] = ()
                      ) -> tuple[tuple[str, Expr], ...]:
    """``{column: SQL expression}`` as assignments to the table's columns.  A column may be
    written ```col```, or ``t.col`` with the target's alias (as deltalake's ``*_all``
    builders write them), and is matched exactly, else ignoring case, as Spark resolves
    names.  InvalidArgumentError naming ``what`` for anything else: not a mapping of strings,
    a column the table lacks (or a nested field), one set twice, an identity column (Spark
    does not update them), an expression that does not parse."""
    if not isinstance(updates, Mapping) or not updates:
        raise InvalidArgumentError(f"{what}: updates must be a non-empty dict of column name "
                                   f"to SQL expression, got {updates!r}")
    names = schema.names
    out: dict[str, Expr] = {}
    for key, text in updates.items():
        if not isinstance(key, str) or not isinstance(text, str):
            raise InvalidArgumentError(f"{what}: updates must map column names to SQL "
                                       f"expression strings, got {key!r}: {text!r}")
        try:
            node = parse_expression(key)
        except InvalidArgumentError:
            node = None
        path = node.path if isinstance(node, Column) else None
        if path is not None and target_alias is not None and len(path) > 1 \
                and path[0] == target_alias:
            path = path[1:]
        found = None
        if path is not None and len(path) == 1:
            found = path[0] if path[0] in names else next(
                iter([n for n in names if n.lower() == path[0].lower()][:1]), None)
        if found is None:
            spelled = [n for n in names if n.lower() == key.lower()] if "." in key else []
            hint = f"; a column whose name holds a dot is written quoted: `{spelled[0]}`" \
                if spelled else ""
            raise InvalidArgumentError(
                f"{what}: {key!r} is not a column of the table (columns are {names}); "
                f"updates set top-level columns{hint}")
        if found in out:
            raise InvalidArgumentError(f"{what}: column {found!r} is set twice")
        if found in identity:
            raise InvalidArgumentError(
                f"{what}: column {found!r} is an identity column, whose values are generated; "
                "Spark does not update them either")
        out[found] = parse_expression(text, f"{what}: column {found!r}")
    return tuple(out.items())


def _empty() -> Positions:
    return np.zeros(0, np.int64)


def _fail(e: EvaluationFailed, what: str) -> Exception:
    return e.error(what)


def _mask(expr: Expr | None, scope: Scope, n: int, what: str) -> npt.NDArray[np.bool_]:
    if expr is None:
        return np.ones(n, np.bool_)
    try:
        m = predicate_mask(expr, scope)
    except EvaluationFailed as e:
        raise _fail(e, what) from None
    return np.asarray(m.to_numpy(zero_copy_only=False), dtype=np.bool_)


def conjuncts(e: Expr) -> Iterator[Expr]:
    if isinstance(e, And):
        for c in e.children:
            yield from conjuncts(c)
    else:
        yield e


def without_alias(e: Any, alias: str) -> Any:
    """``e`` with its columns named without the target's alias (``t.p`` is ``p``), so that
    partition values and statistics can judge it."""
    if isinstance(e, Column):
        return Column(e.path[1:]) if len(e.path) > 1 and e.path[0] == alias else e
    if isinstance(e, tuple):
        return tuple(without_alias(x, alias) for x in e)
    if not isinstance(e, Expr):
        return e
    node: Any = e  # every node is a frozen dataclass
    changes = {f.name: without_alias(getattr(node, f.name), alias) for f in fields(node)
               if f.init}
    changed = {k: v for k, v in changes.items() if v is not getattr(node, k)}
    return replace(node, **changed) if changed else node


def side_of(column: Column, plan: MergePlan, target: pa.Table, source: pa.Table
          ) -> tuple[str, tuple[str, ...]] | None:
    """Which side (``target`` or ``source``) a column of the condition is on, and its path
    there; None if ambiguous or on neither."""
    p = column.path
    if len(p) > 1 and p[0] == plan.target_alias and TableScope(target).type_of(p[1:]):
        return "target", p[1:]
    if len(p) > 1 and p[0] == plan.source_alias and TableScope(source).type_of(p[1:]):
        return "source", p[1:]
    in_t = TableScope(target).type_of(p) is not None
    in_s = TableScope(source).type_of(p) is not None
    if in_t != in_s:
        return ("target", p) if in_t else ("source", p)
    return None


def _key_normaliser(tt: pa.DataType, st: pa.DataType) -> Any:
    """How both sides of an equality between a ``tt`` and an ``st`` column are made into
    arrays a join matches exactly as Spark's ``=`` does (-0.0 is 0.0, NaN is NaN, NULL
    matches nothing), and whether that join is the equality itself (True: a pair it gives
    holds the equality, so the pair need not be judged again; False for floating point,
    where the evaluator has the last word); None where their types would need Spark's
    coercions (the condition is then judged pair by pair)."""
    ints = pa.types.is_integer
    floats = pa.types.is_floating
    if ints(tt) and ints(st):
        return (lambda a: a.cast(pa.int64())), True
    if (floats(tt) or ints(tt)) and (floats(st) or ints(st)):
        return _normal_float, False
    strings = (pa.string(), pa.large_string())
    if tt in strings and st in strings:
        return (lambda a: a.cast(pa.large_string())), True
    binaries = (pa.binary(), pa.large_binary())
    if tt in binaries and st in binaries:
        return (lambda a: a.cast(pa.large_binary())), True
    if tt == st and (pa.types.is_date(tt) or pa.types.is_timestamp(tt)
                     or pa.types.is_boolean(tt) or pa.types.is_decimal(tt)):
        return (lambda a: a), True
    return None


def _normal_float(a: pa.Array[Any]) -> pa.Array[Any]:
    x = a.cast(pa.float64())
    x = pc.if_else(pc.equal(x, pa.scalar(0.0)), pa.scalar(0.0), x)  # -0.0 joins 0.0
    out: pa.Array[Any] = pc.if_else(pc.is_nan(x), pa.scalar(float("nan")), x)  # one NaN
    return out


def _column(table: pa.Table, path: tuple[str, ...]) -> pa.Array[Any]:
    value = TableScope(table).resolve(path)
    return value  # type: ignore[no-any-return]


def _flat(a: Any) -> Any:
    """One chunk: what numpy and the set lookups take."""
    if isinstance(a, pa.ChunkedArray):
        return a.combine_chunks() if a.num_chunks != 1 else a.chunk(0)
    return a


def _as_numbers(a: Any) -> npt.NDArray[Any] | None:
    """A key array (one chunk, nulls already left out) as numbers that sort and compare as
    its values do, or None for a type numpy does not order so (strings, decimals)."""
    t = a.type
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return np.asarray(a.to_numpy(zero_copy_only=False))
    if pa.types.is_date32(t):
        return np.asarray(a.cast(pa.int32()).to_numpy(zero_copy_only=False))
    if pa.types.is_date64(t) or pa.types.is_timestamp(t):
        return np.asarray(a.cast(pa.int64()).to_numpy(zero_copy_only=False))
    if pa.types.is_boolean(t):
        return np.asarray(a.to_numpy(zero_copy_only=False), dtype=np.int8)
    return None


@dataclass(frozen=True, slots=True)
class _Equality:
    """An equality of the merge condition between a target and a source column."""

    target_path: tuple[str, ...]
    normalise: Any
    exact: bool


@dataclass(frozen=True, slots=True)
class SourceIndex:
    """The source side of a MERGE's join, built once for every target file it is joined
    with (``index_source``): the keys of the condition's equalities between a target and a
    source column, normalised as the join compares them, and with one key, the source rows
    sorted by it, so a file's rows find their source rows by binary search (numbers) or by
    a set lookup in the distinct keys (any other type), without rebuilding a hash table of
    the whole source per file."""

    source: pa.Table
    equalities: tuple[_Equality, ...]
    #: The source's keys as joined, one array per equality.
    keys: tuple[Any, ...]
    #: Whether a pair the keys match holds the whole merge condition (the condition is the
    #: equalities and nothing else, each exact), so it is not judged again pair by pair.
    exact: bool
    #: One key: the source rows with a non-NULL key, sorted by it (stable).
    order: Positions | None = None
    #: One key of a type numpy orders: the keys in ``order``'s order.
    sorted_numbers: npt.NDArray[Any] | None = None
    #: One key of another type: the distinct keys, and where each one's run starts in
    #: ``order`` (one more entry: the end).
    distinct: Any = None
    run_starts: Positions | None = None
    #: Several keys: the source's keys as a table to hash join with (``__s``: row number).
    right: pa.Table | None = None

    @property
    def key_columns(self) -> list[tuple[str, ...]]:
        """The target columns (paths) the join reads."""
        return [e.target_path for e in self.equalities]

    @property
    def distinct_keys(self) -> int:
        """How many distinct keys the source has (at most): no more target files than this
        can hold a matching row, as a file holds a key's rows at least."""
        if self.sorted_numbers is not None:
            n = self.sorted_numbers
            return int(np.count_nonzero(n[1:] != n[:-1])) + 1 if len(n) else 0
        if self.run_starts is not None:
            return len(self.run_starts) - 1
        return self.source.num_rows

    def may_match(self, target: pa.Table) -> bool:
        """Whether a row of ``target`` (holding at least the key columns) has a key some
        source row has: False proves no row of it matches."""
        if not self.equalities:
            return bool(target.num_rows and self.source.num_rows)
        return bool(target.num_rows and self.source.num_rows
                    and len(_candidates(self, target)[0]))


def index_source(plan: MergePlan, source: pa.Table) -> SourceIndex:
    """The source side of the join for every target file of ``plan`` (``SourceIndex``)."""
    target = plan.schema.empty_table()
    equalities: list[_Equality] = []
    keys: list[Any] = []
    conditions = list(conjuncts(plan.on))
    exact = True
    for c in conditions:
        if not (isinstance(c, Comparison) and c.op == "="
                and isinstance(c.left, Column) and isinstance(c.right, Column)):
            exact = False
            continue
        a, b = side_of(c.left, plan, target, source), side_of(c.right, plan, target, source)
        if a is None or b is None or a[0] == b[0]:
            exact = False
            continue
        tpath, spath = (a[1], b[1]) if a[0] == "target" else (b[1], a[1])
        skey = _column(source, spath)
        normaliser = _key_normaliser(_column(target, tpath).type, skey.type)
        if normaliser is None:
            exact = False
            continue
        normalise, is_exact = normaliser
        exact = exact and is_exact
        equalities.append(_Equality(tpath, normalise, is_exact))
        keys.append(_flat(normalise(skey)))
    if not equalities:
        return SourceIndex(source, (), (), False)
    if len(keys) > 1:
        names = [f"k{i}" for i in range(len(keys))]
        right = pa.table({**dict(zip(names, keys, strict=True)),
                          "__s": pa.array(np.arange(source.num_rows, dtype=np.int64))})
        return SourceIndex(source, tuple(equalities), tuple(keys), exact, right=right)
    key = keys[0]
    present = np.flatnonzero(np.asarray(pc.is_valid(key).to_numpy(zero_copy_only=False),
                                        dtype=np.bool_)).astype(np.int64)
    valid = key.take(present) if len(present) != len(key) else key
    numbers = _as_numbers(valid)
    if numbers is not None:
        order = np.argsort(numbers, kind="stable")
        return SourceIndex(source, tuple(equalities), tuple(keys), exact,
                           order=present[order], sorted_numbers=numbers[order])
    order = np.asarray(pc.sort_indices(valid).to_numpy(), dtype=np.int64)  # stable
    in_order = valid.take(order)
    if len(in_order):
        change = np.asarray(pc.not_equal(in_order.slice(1), in_order.slice(0, len(in_order) - 1))
                            .to_numpy(zero_copy_only=False), dtype=np.bool_)
        starts = np.concatenate([[0], np.flatnonzero(change) + 1, [len(in_order)]])
    else:
        starts = np.zeros(1, np.int64)
    starts = starts.astype(np.int64)
    return SourceIndex(source, tuple(equalities), tuple(keys), exact, order=present[order],
                       distinct=in_order.take(starts[:-1]), run_starts=starts)


def _runs(lo: Positions, hi: Positions, order: Positions) -> tuple[Positions, Positions]:
    """The target rows and source rows of runs [lo, hi) of ``order``, one run per target row
    (row ``i``'s run is ``lo[i]:hi[i]``)."""
    counts = hi - lo
    total = int(counts.sum())
    if not total:
        return _empty(), _empty()
    ti = np.repeat(np.arange(len(lo), dtype=np.int64), counts)
    firsts = np.cumsum(counts) - counts
    at = np.repeat(lo - firsts, counts) + np.arange(total, dtype=np.int64)
    return ti, order[at]


def _candidates(index: SourceIndex, target: pa.Table) -> tuple[Positions, Positions]:
    """The pairs (target row, source row) whose keys are equal as the join compares them."""
    tkeys = [_flat(e.normalise(_column(target, e.target_path))) for e in index.equalities]
    if index.right is not None:
        names = [f"k{i}" for i in range(len(tkeys))]
        left = pa.table({**dict(zip(names, tkeys, strict=True)),
                         "__t": pa.array(np.arange(target.num_rows, dtype=np.int64))})
        joined = left.join(index.right, keys=names, join_type="inner")
        return (np.asarray(joined.column("__t").to_numpy(), dtype=np.int64),
                np.asarray(joined.column("__s").to_numpy(), dtype=np.int64))
    assert index.order is not None
    key = tkeys[0]
    present = np.flatnonzero(np.asarray(pc.is_valid(key).to_numpy(zero_copy_only=False),
                                        dtype=np.bool_)).astype(np.int64)
    valid = key.take(present) if len(present) != len(key) else key
    if index.sorted_numbers is not None:
        numbers = _as_numbers(valid)
        assert numbers is not None
        keys = index.sorted_numbers
        lo = np.searchsorted(keys, numbers, side="left").astype(np.int64)
        # Most target rows match no source row: only those whose key is found at ``lo``
        # (NaN is found where NaN is, as the join compares) look for the end of their run.
        at = np.minimum(lo, max(len(keys) - 1, 0))
        found = lo < len(keys)
        if len(keys):
            same = keys[at] == numbers
            if numbers.dtype.kind == "f":
                same |= np.isnan(keys[at]) & np.isnan(numbers)
            found &= same
        rows = np.flatnonzero(found).astype(np.int64)
        lo = lo[rows]
        hi = np.searchsorted(keys, numbers[rows], side="right").astype(np.int64)
        ti, si = _runs(lo, hi, index.order)
        return present[rows[ti]], si
    else:
        assert index.run_starts is not None
        if len(index.run_starts) < 2:  # no source key but NULL: nothing matches
            return _empty(), _empty()
        at = pc.index_in(valid, value_set=index.distinct)
        found = np.asarray(pc.is_valid(at).to_numpy(zero_copy_only=False), dtype=np.bool_)
        run = np.asarray(pc.fill_null(at, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
        lo = np.where(found, index.run_starts[run], 0).astype(np.int64)
        hi = np.where(found, index.run_starts[run + 1], 0).astype(np.int64)
    ti, si = _runs(lo, hi, index.order)
    return present[ti], si


def match_pairs(plan: MergePlan, target: pa.Table, source: pa.Table,
                index: SourceIndex | None = None) -> tuple[Positions, Positions]:
    """The pairs (target row, source row) the merge condition is TRUE for, ordered by target
    row then source row.  Equalities between a target and a source column join by the
    source's index (``index``, built here when not given); unless the join is the whole
    condition exactly, the condition is then judged on each candidate pair, so a pair is
    never kept on a join's looser notion of equality."""
    nt, ns = target.num_rows, source.num_rows
    if not nt or not ns:
        return _empty(), _empty()
    if index is None:
        index = index_source(plan, source)
    if index.equalities:
        ti, si = _candidates(index, target)
        order = np.lexsort((si, ti))
        ti, si = ti[order], si[order]
        if index.exact:
            return ti, si
        return _verified(plan, target, source, ti, si)
    if nt * ns > MAX_PAIRS:
        raise InvalidArgumentError(
            f"{plan.what}: the merge condition {plan.on.to_sql()!r} has no equality between a "
            f"target and a source column of the same kind of type, so each of the {nt} target "
            f"rows would be compared with each of the {ns} source rows; give the condition an "
            "equality on a key (t.id = s.id), casting one side if the types differ")
    step = max(1, _PAIRS_PER_STEP // ns)
    tis: list[Positions] = []
    sis: list[Positions] = []
    for start in range(0, nt, step):
        stop = min(nt, start + step)
        ti = np.repeat(np.arange(start, stop, dtype=np.int64), ns)
        si = np.tile(np.arange(ns, dtype=np.int64), stop - start)
        ti, si = _verified(plan, target, source, ti, si)
        tis.append(ti)
        sis.append(si)
    return np.concatenate(tis), np.concatenate(sis)


def _pair_scope(plan: MergePlan, target: pa.Table, source: pa.Table, ti: Positions,
                si: Positions) -> AliasScope:
    return AliasScope({plan.target_alias: target.take(ti),
                       plan.source_alias: source.take(si)})


def _verified(plan: MergePlan, target: pa.Table, source: pa.Table, ti: Positions,
              si: Positions) -> tuple[Positions, Positions]:
    if not len(ti):
        return ti, si
    keep = _mask(plan.on, _pair_scope(plan, target, source, ti, si), len(ti),
                 f"{plan.what}: the merge condition {plan.on.to_sql()!r}")
    return ti[keep], si[keep]


def _first_clause(clauses: Sequence[Clause], scope_of: Any, n: int, what: str
                  ) -> npt.NDArray[np.int64]:
    """For each of ``n`` rows, the index of the first clause whose condition is TRUE (-1 for
    none).  A clause's condition is judged only on the rows no earlier clause took, as Spark
    evaluates them (a condition that would fail on a row taken already does not fail)."""
    chosen = np.full(n, -1, np.int64)
    for k, c in enumerate(clauses):
        open_rows = np.flatnonzero(chosen < 0)
        if not len(open_rows):
            break
        if c.condition is None:
            chosen[open_rows] = k
            break
        m = _mask(c.condition, scope_of(open_rows), len(open_rows),
                  f"{what} condition {c.condition.to_sql()!r}")
        chosen[open_rows[m]] = k
    return chosen


def _assigned(plan: MergePlan, clause: Clause, scope: Scope, base: pa.Table | None, n: int,
              what: str) -> pa.Table:
    """The rows a clause writes: each column it sets evaluated (cast to the column's type as
    Spark's store assignment casts), the others from ``base`` (the target row, for an
    update) or NULL (an insert); generated columns not set are left out, so that conforming
    computes them, and so are identity columns an insert does not set (allocated)."""
    sets = dict(clause.assignments)
    generated = {g.name for g in plan.target.generated}
    identity = {c.name for c in plan.target.identity}
    arrays: list[Any] = []
    fields: list[pa.Field[Any]] = []
    for f in plan.schema:
        if f.name in sets:
            expr = sets[f.name]
            try:
                values = evaluate(expr, scope, to=f.type)
            except EvaluationFailed as e:
                raise _fail(e, f"{what} of column {f.name!r} = {expr.to_sql()!r}") from None
        elif f.name in generated and (base is None or f.name in plan.recomputed):
            continue
        elif base is not None:
            values = base.column(f.name)
        elif f.name in identity:
            continue
        else:
            values = pa.nulls(n, f.type)
        arrays.append(values)
        fields.append(f.with_nullable(True))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def merge_file(plan: MergePlan, target: pa.Table, source: pa.Table,
               index: SourceIndex | None = None) -> FileMerge:
    """What the MERGE does to ``target`` (the live rows of one file, in the table's schema)
    given the whole ``source`` (and its ``index_source``, built once for every file, or here
    when not given): see the module docstring.  MergeCardinalityError for a target row that
    several source rows match where a matched clause could change it."""
    nt = target.num_rows
    ti, si = match_pairs(plan, target, source, index)
    deleted: list[Positions] = []
    updates: list[tuple[Positions, pa.Table]] = []
    out = FileMerge(_empty(), _empty(), plan.schema.empty_table(), np.unique(si), np.unique(ti))
    if plan.matched and len(ti):
        what = f"{plan.what}: WHEN MATCHED"
        chosen = _first_clause(plan.matched,
                               lambda rows: _pair_scope(plan, target, source, ti[rows], si[rows]),
                               len(ti), what)
        counted = ti if not plan.matched_only else ti[chosen >= 0]
        if not plan.lone_unconditional_delete and len(counted) > 1:
            repeated = counted[1:][counted[1:] == counted[:-1]]  # ``ti`` is sorted
            if len(repeated):
                row = target.slice(int(repeated[0]), 1).to_pylist()[0]
                raise MergeCardinalityError(
                    f"{plan.what}: {len(np.unique(repeated))} target row(s) are matched by more "
                    f"than one source row (first: {row!r}), and a WHEN MATCHED clause would "
                    "update or delete them with one of those rows, which is ambiguous; make "
                    "the source unique on the merge key (deduplicate it), or make the merge "
                    "condition match one source row per target row. Nothing was written")
        for k, c in enumerate(plan.matched):
            taken = np.flatnonzero(chosen == k)
            if not len(taken):
                continue
            rows = ti[taken]
            if c.action == "delete":
                rows = np.unique(rows)
                deleted.append(rows)
                out.matched_deleted += len(rows)
            else:
                scope = _pair_scope(plan, target, source, rows, si[taken])
                updates.append((rows, _assigned(plan, c, scope, target.take(rows),
                                                len(rows), f"{what} UPDATE")))
                out.matched_updated += len(rows)
    if plan.not_matched_by_source:
        alone = np.setdiff1d(np.arange(nt, dtype=np.int64), ti, assume_unique=False)
        if len(alone):
            what = f"{plan.what}: WHEN NOT MATCHED BY SOURCE"

            def scope_of(rows: Positions) -> Scope:
                return AliasScope({plan.target_alias: target.take(alone[rows])})

            chosen = _first_clause(plan.not_matched_by_source, scope_of, len(alone), what)
            for k, c in enumerate(plan.not_matched_by_source):
                taken = np.flatnonzero(chosen == k)
                if not len(taken):
                    continue
                rows = alone[taken]
                if c.action == "delete":
                    deleted.append(rows)
                    out.not_matched_by_source_deleted += len(rows)
                else:
                    base = target.take(rows)
                    updates.append((rows, _assigned(plan, c, scope_of(taken), base, len(rows),
                                                    f"{what} UPDATE")))
                    out.not_matched_by_source_updated += len(rows)
    out.deleted = np.sort(np.concatenate(deleted)) if deleted else _empty()
    if updates:
        no_identity = replace(plan.target, identity=())
        positions = np.concatenate([p for p, _ in updates])
        rows_in = [conform_rows(no_identity, t) for _, t in updates]
        new_rows = pa.concat_tables(rows_in) if len(rows_in) > 1 else rows_in[0]
        order = np.argsort(positions, kind="stable")
        out.updated = positions[order]
        out.new_rows = new_rows.take(order)
    if plan.not_matched:
        out.read = np.setdiff1d(out.matched_target, np.union1d(out.deleted, out.updated))
    return out


def insert_rows(plan: MergePlan, source: pa.Table, matched: npt.NDArray[np.bool_]
                ) -> list[pa.Table]:
    """The rows the ``WHEN NOT MATCHED`` clauses insert for the source rows no target row
    matches (``matched`` False), one table per clause that inserts any, not yet conformed:
    identity columns they leave out are allocated by the committing writer."""
    if not plan.not_matched:
        return []
    alone = np.flatnonzero(~matched).astype(np.int64)
    if not len(alone):
        return []
    what = f"{plan.what}: WHEN NOT MATCHED"

    def scope_of(rows: Positions) -> Scope:
        return AliasScope({plan.source_alias: source.take(alone[rows])})

    chosen = _first_clause(plan.not_matched, scope_of, len(alone), what)
    out: list[pa.Table] = []
    for k, c in enumerate(plan.not_matched):
        taken = np.flatnonzero(chosen == k)
        if len(taken):
            out.append(_assigned(plan, c, scope_of(taken), None, len(taken), f"{what} INSERT"))
    return out


__all__ = [
    "ACTIONS",
    "MAX_PAIRS",
    "Clause",
    "FileMerge",
    "MergePlan",
    "SourceIndex",
    "conjuncts",
    "index_source",
    "insert_rows",
    "match_pairs",
    "merge_file",
    "parse_assignments",
    "side_of",
    "without_alias",
]
