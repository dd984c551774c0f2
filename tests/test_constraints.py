"""Column invariants, CHECK constraints and NOT NULL partition values on every write path:
a violating write names the constraint and a row and commits nothing."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.errors import SchemaMismatchError, UnsupportedProtocolError
from deltacommit.protocol.expressions.constraints import Constraint, check_constraints


def _invariant_schema() -> pa.Schema:
    meta = {"delta.invariants": json.dumps({"expression": {"expression": "id > 0"}})}
    return pa.schema([pa.field("id", pa.int64(), metadata=meta), pa.field("day", pa.string())])


def _paths(t: dc.DeltaTable) -> list[str]:
    return sorted(p.name for p in Path(t.uri.removeprefix("file://")).rglob("*.parquet"))


def test_an_invariant_is_enforced_by_write_append_and_the_appender(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = dc.DeltaTable.create(uri, _invariant_schema())
    bad = pa.table({"id": [1, -5], "day": ["a", "b"]})
    with pytest.raises(dc.InvariantViolationError, match=r"column 'id' \(id > 0\).*'id': -5"):
        dc.write(uri, bad)
    with pytest.raises(dc.InvariantViolationError, match="id > 0"):
        dc.append(dc.DeltaTable(uri, group_commit=True), bad)
    with dc.Appender(uri, "ingest", flush_rows=10**6) as app:
        app.append(bad, offset=1)
        with pytest.raises(dc.InvariantViolationError, match="id > 0"):
            app.flush()
        app._buffer.clear()  # the bad batch stays refused; close without it
    assert dc.DeltaTable(uri).version == 0 and _paths(t) == []
    dc.write(uri, pa.table({"id": [1, 2], "day": ["a", "b"]}))
    assert dc.DeltaTable(uri).to_arrow().num_rows == 2


def test_check_constraints_from_table_properties(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("day", pa.string())])
    dc.DeltaTable.create(uri, schema, partition_by=["day"], configuration={
        "delta.constraints.positive": "id > 0 AND id < 100",
        "delta.constraints.known_day": "day IN ('a', 'b')"})
    with pytest.raises(dc.CheckConstraintViolationError, match=r"'positive'.*'id': 100"):
        dc.write(uri, pa.table({"id": [5, 100], "day": ["a", "a"]}))
    with pytest.raises(dc.CheckConstraintViolationError, match=r"'known_day'.*'day': 'c'"):
        dc.write(uri, pa.table({"id": [5], "day": ["c"]}))
    # NULL makes the expression NULL, not TRUE: a violation, as Delta defines it.
    with pytest.raises(dc.CheckConstraintViolationError, match="positive"):
        dc.write(uri, pa.table({"id": pa.array([None], pa.int64()), "day": ["a"]}))
    assert dc.DeltaTable(uri).version == 0
    dc.write(uri, pa.table({"id": [5], "day": ["b"]}))
    assert dc.DeltaTable(uri).version == 1


def test_an_expression_that_cannot_be_evaluated_refuses_the_write(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64())])
    with pytest.raises(dc.InvalidArgumentError, match=r"'delta.constraints.c' cannot be enforced"):
        dc.DeltaTable.create(uri, schema, configuration={
            "delta.constraints.c": "md5(CAST(id AS STRING)) <> ''"})
    # A table whose constraint another engine added: refused at write, never skipped.
    deltalake.write_deltalake(uri, pa.table({"id": [1]}))
    deltalake.DeltaTable(uri).alter.add_constraint({"c": "md5(CAST(id AS STRING)) <> ''"})
    with pytest.raises(UnsupportedProtocolError, match=r"cannot be evaluated.*refusing to write"):
        dc.write(uri, pa.table({"id": [1]}))
    assert dc.DeltaTable(uri).version == 1


def test_deltalake_constraints_are_enforced_and_the_result_reads_back(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    deltalake.write_deltalake(uri, pa.table({"id": [1, 2]}))
    deltalake.DeltaTable(uri).alter.add_constraint({"id_gt_0": "id > 0"})
    with pytest.raises(dc.CheckConstraintViolationError, match="id_gt_0"):
        dc.write(uri, pa.table({"id": [3, -1]}))
    r = dc.write(uri, pa.table({"id": [3]}))
    assert r.version == 2
    theirs = deltalake.DeltaTable(uri)
    assert sorted(theirs.to_pyarrow_table()["id"].to_pylist()) == [1, 2, 3]


def test_empty_string_in_a_not_null_partition_column_is_refused(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), pa.field("day", pa.string(), nullable=False)])
    dc.DeltaTable.create(uri, schema, partition_by=["day"])
    with pytest.raises(SchemaMismatchError, match=r"partition column 'day' is not nullable.*empty"):
        dc.write(uri, pa.table({"id": [1], "day": [""]}, schema=schema))
    assert dc.DeltaTable(uri).version == 0
    dc.write(uri, pa.table({"id": [1], "day": ["x"]}, schema=schema))
    assert deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == 1


# --------------------------------------------------------------------------- the evaluator

_OPS = {"=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def _py(expr: tuple[Any, ...], row: dict[str, Any]) -> bool | None:
    """A straightforward evaluation with SQL's three-valued logic."""
    kind = expr[0]
    if kind == "cmp":
        _, col, op, value = expr
        v = row[col]
        return None if v is None else _OPS[op](v, value)
    if kind == "in":
        _, col, values = expr
        return None if row[col] is None else row[col] in values
    if kind == "null":
        return row[expr[1]] is None
    if kind == "not":
        inner = _py(expr[1], row)
        return None if inner is None else not inner
    a, b = _py(expr[1], row), _py(expr[2], row)
    if kind == "and":
        if a is False or b is False:
            return False
        return None if a is None or b is None else True
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def _sql(expr: tuple[Any, ...]) -> str:
    kind = expr[0]
    if kind == "cmp":
        return f"{expr[1]} {expr[2]} {expr[3]}"
    if kind == "in":
        return f"{expr[1]} IN ({', '.join(str(v) for v in expr[2])})"
    if kind == "null":
        return f"{expr[1]} IS NULL"
    if kind == "not":
        return f"NOT ({_sql(expr[1])})"
    return f"({_sql(expr[1])}) {kind.upper()} ({_sql(expr[2])})"


_leaf = st.one_of(
    st.tuples(st.just("cmp"), st.sampled_from(["a", "b"]), st.sampled_from(list(_OPS)),
              st.integers(-3, 3)),
    st.tuples(st.just("in"), st.sampled_from(["a", "b"]),
              st.lists(st.integers(-3, 3), min_size=1, max_size=3)),
    st.tuples(st.just("null"), st.sampled_from(["a", "b"])),
)
_expr = st.recursive(_leaf, lambda inner: st.one_of(
    st.tuples(st.just("not"), inner),
    st.tuples(st.sampled_from(["and", "or"]), inner, inner)), max_leaves=6)
_rows = st.lists(st.fixed_dictionaries({"a": st.one_of(st.none(), st.integers(-3, 3)),
                                        "b": st.one_of(st.none(), st.integers(-3, 3))}),
                 min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(expr=_expr, rows=_rows)
def test_the_evaluator_agrees_with_sql_three_valued_logic(expr: tuple[Any, ...],
                                                          rows: list[dict[str, Any]]) -> None:
    data = pa.Table.from_pylist(rows, schema=pa.schema([("a", pa.int64()), ("b", pa.int64())]))
    expected_ok = all(_py(expr, r) is True for r in rows)
    c = Constraint("check", "c", _sql(expr))
    if expected_ok:
        check_constraints(data, [c], "t")
    else:
        with pytest.raises(dc.CheckConstraintViolationError):
            check_constraints(data, [c], "t")
    assert not math.isnan(0.0)


# Beyond predicates: conditions over two columns and arithmetic, evaluated as expressions
# (``generated.evaluate_condition``), with the same three-valued logic.

def _py2(expr: tuple[Any, ...], row: dict[str, Any]) -> bool | None:
    kind = expr[0]
    if kind == "cols":
        a, b = row["a"], row["b"]
        return None if a is None or b is None else _OPS[expr[1]](a, b)
    if kind == "sum":
        a, b = row["a"], row["b"]
        return None if a is None or b is None else _OPS[expr[1]](a + 2 * b, expr[2])
    if kind == "nullsafe":
        return row["a"] == row["b"]
    if kind == "between":
        v = row[expr[1]]
        return None if v is None else expr[2] <= v <= expr[3]
    if kind in ("not", "and", "or"):
        parts = [_py2(e, row) for e in expr[1:]]
        if kind == "not":
            return None if parts[0] is None else not parts[0]
        if kind == "and":
            return False if False in parts else (None if None in parts else True)
        return True if True in parts else (None if None in parts else False)
    return _py(expr, row)


def _sql2(expr: tuple[Any, ...]) -> str:
    kind = expr[0]
    if kind == "cols":
        return f"a {expr[1]} b"
    if kind == "sum":
        return f"a + 2 * b {expr[1]} {expr[2]}"
    if kind == "nullsafe":
        return "a <=> b"
    if kind == "between":
        return f"{expr[1]} BETWEEN {expr[2]} AND {expr[3]}"
    if kind == "not":
        return f"NOT ({_sql2(expr[1])})"
    if kind in ("and", "or"):
        return f"({_sql2(expr[1])}) {kind.upper()} ({_sql2(expr[2])})"
    return _sql(expr)


_leaf2 = st.one_of(
    _leaf,
    st.tuples(st.just("cols"), st.sampled_from(list(_OPS))),
    st.tuples(st.just("sum"), st.sampled_from(list(_OPS)), st.integers(-9, 9)),
    st.tuples(st.just("nullsafe")),
    st.tuples(st.just("between"), st.sampled_from(["a", "b"]), st.integers(-3, 0),
              st.integers(0, 3)),
)
_expr2 = st.recursive(_leaf2, lambda inner: st.one_of(
    st.tuples(st.just("not"), inner),
    st.tuples(st.sampled_from(["and", "or"]), inner, inner)), max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(expr=_expr2, rows=_rows)
def test_the_expression_evaluator_agrees_with_sql_three_valued_logic(
        expr: tuple[Any, ...], rows: list[dict[str, Any]]) -> None:
    from deltacommit.protocol.expressions.generated import evaluate_condition

    data = pa.Table.from_pylist(rows, schema=pa.schema([("a", pa.int64()), ("b", pa.int64())]))
    assert evaluate_condition(_sql2(expr), data).to_pylist() == [_py2(expr, r) for r in rows]
    c = Constraint("check", "c", _sql2(expr))
    if all(_py2(expr, r) is True for r in rows):
        check_constraints(data, [c], "t")
    else:
        with pytest.raises(dc.CheckConstraintViolationError):
            check_constraints(data, [c], "t")


def test_check_constraints_beyond_predicates(tmp_path: Path) -> None:
    """Constraints Spark users write that compare two columns or use functions: enforced on
    tables created by deltacommit and by deltalake, whose rows read back in deltalake."""
    import datetime as dt

    uri = str(tmp_path / "t")
    schema = pa.schema([("start", pa.date32()), ("end", pa.date32()), ("name", pa.string()),
                        ("qty", pa.int64())])
    dc.DeltaTable.create(uri, schema, configuration={
        "delta.constraints.ordered": "`end` >= start",
        "delta.constraints.lower_name": "lower(name) = name",
        "delta.constraints.in_year": "year(start) BETWEEN 2000 AND 2099",
        "delta.constraints.qty": "qty * 2 < 100 OR qty IS NULL"})
    d = dt.date

    def rows(start: dt.date, end: dt.date, name: str, qty: int | None) -> pa.Table:
        return pa.table({"start": [start], "end": [end], "name": [name],
                         "qty": pa.array([qty], pa.int64())}, schema=schema)

    dc.write(uri, rows(d(2020, 1, 1), d(2020, 1, 2), "abc", None))
    for bad, name in [(rows(d(2020, 1, 3), d(2020, 1, 2), "abc", 1), "ordered"),
                      (rows(d(2020, 1, 1), d(2020, 1, 2), "Abc", 1), "lower_name"),
                      (rows(d(1999, 1, 1), d(2020, 1, 2), "abc", 1), "in_year"),
                      (rows(d(2020, 1, 1), d(2020, 1, 2), "abc", 50), "qty")]:
        with pytest.raises(dc.CheckConstraintViolationError, match=f"'{name}'"):
            dc.write(uri, bad)
    assert dc.DeltaTable(uri).version == 1
    # deltalake adds such a constraint to its table; deltacommit enforces it.
    other = str(tmp_path / "u")
    deltalake.write_deltalake(other, rows(d(2020, 1, 1), d(2020, 1, 2), "abc", 1))
    deltalake.DeltaTable(other).alter.add_constraint({"ordered": "\"end\" >= start"})
    with pytest.raises(dc.CheckConstraintViolationError, match="ordered"):
        dc.write(other, rows(d(2020, 1, 3), d(2020, 1, 2), "abc", 1))
    dc.write(other, rows(d(2020, 1, 2), d(2020, 1, 2), "abc", 2))
    assert deltalake.DeltaTable(other).to_pyarrow_table().num_rows == 2


def test_a_constraint_added_by_another_writer_binds_the_next_write_of_a_kept_table(
        tmp_path: Path) -> None:
    """What a write checks follows from the version's ``metaData``: writes of one metadata
    share their checks, and a constraint committed by another writer (another table object)
    binds the next write of a kept table object as soon as it has read that version."""
    from deltacommit.io.datafiles import WriteTarget

    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, pa.schema([("id", pa.int64())]))
    kept = dc.DeltaTable(uri)
    dc.write(kept, pa.table({"id": [5]}))
    first = WriteTarget.of(kept.uri, kept.snapshot)
    dc.write(kept, pa.table({"id": [6]}))
    assert WriteTarget.of(kept.uri, kept.snapshot) is first
    dc.DeltaTable(uri).set_properties({"delta.constraints.small": "id < 100"})
    kept.update()
    assert [c.name for c in WriteTarget.of(kept.uri, kept.snapshot).constraints] == ["small"]
    with pytest.raises(dc.CheckConstraintViolationError, match="small"):
        dc.write(kept, pa.table({"id": [700]}))
    dc.write(kept, pa.table({"id": [7]}))
    assert sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist()) == [5, 6, 7]


@pytest.mark.parametrize("deletion_vectors", [False, True])
def test_a_constraint_is_set_only_over_rows_that_satisfy_it(tmp_path: Path,
                                                            deletion_vectors: bool) -> None:
    """A CHECK constraint set on a table with rows is checked against every live row first
    (rows deleted through a deletion vector are not live): refused, naming the constraint
    and the file, while a row violates it, with the table unchanged."""
    uri = str(tmp_path / "t")
    config = {"delta.enableDeletionVectors": "true"} if deletion_vectors else None
    dc.DeltaTable.create(uri, pa.schema([("id", pa.int64()), ("day", pa.string())]),
                         partition_by=["day"], configuration=config)
    dc.write(uri, pa.table({"id": [1, 500, 2], "day": ["a", "a", "b"]}))
    before = dc.DeltaTable(uri).version
    with pytest.raises(dc.CheckConstraintViolationError,
                       match=r"(?s)cannot be set.*day=a/.*unchanged.*'small'") as e:
        dc.DeltaTable(uri).set_properties({"delta.constraints.small": "id < 100"})
    assert uri in str(e.value)
    table = dc.DeltaTable(uri)
    assert table.version == before and "delta.constraints.small" not in table.configuration
    # A constraint on the partition column is checked against the partition values.
    with pytest.raises(dc.CheckConstraintViolationError, match="only_a"):
        table.set_properties({"delta.constraints.only_a": "day = 'a'"})
    if deletion_vectors:
        table.delete("id = 500")
    else:
        dc.write(table, pa.table({"id": [1], "day": ["a"]}), mode="overwrite",
                 predicate="day = 'a'")
    assert (table.to_arrow().num_rows, any(a.deletion_vector for a in table.files())) == \
        (2, deletion_vectors)
    table.set_properties({"delta.constraints.small": "id < 100"})
    with pytest.raises(dc.CheckConstraintViolationError, match="small"):
        dc.write(uri, pa.table({"id": [700], "day": ["a"]}))
    assert sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist()) == [1, 2]
