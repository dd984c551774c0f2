"""DELETE by any SQL expression UPDATE and MERGE accept: arithmetic, functions, two columns
compared, CASE, over data and partition columns, NULL deleting nothing.  On every path
(copy-on-write, deletion vectors, change data feed, row tracking) the rows left are those
pyarrow's own filtering keeps and deltalake reads the same; a predicate partition values
decide still removes whole files unread, and one they cannot decide (``p % 2 = 0``) never
takes that path; the commitInfo records the predicate's SQL; a concurrent writer's new files
are checked against what the DELETE read; bad input is refused naming the table and the
predicate, committing nothing."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.compute as arrow_compute
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.errors import (
    ConcurrentAppendException,
    ExpressionValueError,
    InvalidArgumentError,
)
from deltacommit.protocol.expressions.evaluator import predicate_mask
from deltacommit.protocol.expressions.parser import parse_expression
from tests.arrow_strategies import canonical_rows
from tests.delta_tables import peer_read

pc: Any = arrow_compute  # pyarrow.compute's stubs do not cover every use here

_FIELDS: list[pa.Field[Any]] = [pa.field("id", pa.int64()), pa.field("a", pa.int64()),
                                pa.field("b", pa.int64()), pa.field("s", pa.string()),
                                pa.field("p", pa.int64())]
SCHEMA = pa.schema(_FIELDS)

#: Table properties of each DELETE path.
LAYOUTS: dict[str, dict[str, str]] = {
    "copy-on-write": {},
    "deletion-vectors": {"delta.enableDeletionVectors": "true"},
    "change-data-feed": {"delta.enableChangeDataFeed": "true"},
    "change-data-feed-with-dvs": {"delta.enableChangeDataFeed": "true",
                                  "delta.enableDeletionVectors": "true"},
    "row-tracking-with-dvs": {"delta.enableDeletionVectors": "true",
                              "delta.enableRowTracking": "true"},
}

Mask = Callable[[pa.Table], Any]


def _rem(x: Any, k: int) -> Any:
    """SQL's ``x % k``: the remainder truncated toward zero (pyarrow's ``remainder``)."""
    return pc.remainder(x, k)


#: Each predicate and the same condition in pyarrow (TRUE, FALSE or NULL per row).
PREDICATES: list[tuple[str, Mask]] = [
    ("id % 3 = 0", lambda t: pc.equal(_rem(t["id"], 3), 0)),
    ("a + b > 4", lambda t: pc.greater(pc.add(t["a"], t["b"]), 4)),
    ("lower(s) = 'x'", lambda t: pc.equal(pc.utf8_lower(t["s"]), "x")),
    ("a < b", lambda t: pc.less(t["a"], t["b"])),
    ("NOT (a >= b)", lambda t: pc.invert(pc.greater_equal(t["a"], t["b"]))),
    ("coalesce(a, b) = 2", lambda t: pc.equal(pc.coalesce(t["a"], t["b"]), 2)),
    ("p % 2 = 0 AND a IS NOT NULL",
     lambda t: pc.and_kleene(pc.equal(_rem(t["p"], 2), 0), pc.is_valid(t["a"]))),
    ("p = 1 OR a * 2 > b + 6",
     lambda t: pc.or_kleene(pc.equal(t["p"], 1),
                            pc.greater(pc.multiply(t["a"], 2), pc.add(t["b"], 6)))),
    ("CASE WHEN a IS NULL THEN id > 20 ELSE abs(a - b) = 1 END",
     lambda t: pc.if_else(pc.is_null(t["a"]), pc.greater(t["id"], 20),
                          pc.equal(pc.abs(pc.subtract(t["a"], t["b"])), 1))),
    ("s LIKE 'x%' AND NOT s ILIKE 'X_'",
     lambda t: pc.and_kleene(pc.match_like(t["s"], "x%"),
                             pc.invert(pc.match_like(t["s"], "X_", ignore_case=True)))),
    ("p % 2 = 0", lambda t: pc.equal(_rem(t["p"], 2), 0)),
]


def _rows(start: int, n: int) -> pa.Table:
    """``n`` rows with NULLs in every column, negative numbers and four partitions (one NULL)."""
    ids = list(range(start, start + n))
    a = [None if i % 7 == 3 else (i * 5) % 11 - 4 for i in ids]
    b = [None if i % 5 == 1 else (i * 3) % 9 - 3 for i in ids]
    s = [None if i % 6 == 2 else ["x", "X", "y", "xy", ""][i % 5] for i in ids]
    p = [None if i % 9 == 4 else [-2, -1, 1, 2][i % 4] for i in ids]
    return pa.table({"id": ids, "a": a, "b": b, "s": s, "p": p}, schema=SCHEMA)


def _table(root: Path, configuration: dict[str, str], partitioned: bool = True) -> str:
    uri = str(root / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"] if partitioned else None,
                         configuration=configuration or None)
    dc.write(uri, _rows(0, 20))
    dc.write(uri, _rows(20, 15))
    return uri


def _kept(rows: pa.Table, mask: Mask) -> pa.Table:
    """The rows a DELETE keeps: those where the condition is FALSE or NULL."""
    return rows.filter(pc.invert(pc.fill_null(mask(rows), False)))


def _commit_info(uri: str, version: int) -> dict[str, Any]:
    path = Path(uri) / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    info: dict[str, Any] = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    return info


def _state(uri: str) -> tuple[int, list[str], set[str]]:
    files = {str(p.relative_to(uri)) for p in Path(uri).rglob("*") if p.is_file()
             and "_delta_log" not in p.parts}
    return dc.DeltaTable(uri).version, canonical_rows(dc.DeltaTable(uri).to_arrow()), files


# --------------------------------------------------------------------------- every path

@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("predicate, mask", PREDICATES, ids=[p for p, _ in PREDICATES])
def test_a_delete_by_expression_leaves_the_rows_pyarrow_keeps(
        tmp_path: Path, layout: str, predicate: str, mask: Mask) -> None:
    uri = _table(tmp_path, LAYOUTS[layout])
    before = dc.DeltaTable(uri).to_arrow()
    expected = _kept(before, mask)
    deleted = before.num_rows - expected.num_rows
    assert 0 < deleted < before.num_rows  # the data exercises the predicate both ways
    paths = {a.path for a in dc.DeltaTable(uri).files()}

    result = dc.DeltaTable(uri).delete(predicate)

    ours = dc.DeltaTable(uri)
    assert canonical_rows(ours.to_arrow()) == canonical_rows(expected)
    assert canonical_rows(peer_read(uri).select(SCHEMA.names)) == canonical_rows(expected)
    info = _commit_info(uri, result["version"])
    assert info["operation"] == "DELETE"
    [sql] = json.loads(info["operationParameters"]["predicate"])
    assert parse_expression(sql) == parse_expression(predicate)
    assert info["operationMetrics"]["numDeletedRows"] == str(deleted)
    if "delta.enableDeletionVectors" in LAYOUTS[layout]:
        # Rows are deleted by deletion vectors (a file left empty is removed): no data file
        # is written.
        assert {a.path for a in ours.files()} <= paths
        assert int(info["operationMetrics"]["numDeletionVectorsAdded"]) > 0 or \
            predicate == "p % 2 = 0"
    else:
        assert not any(a.deletion_vector for a in ours.files())
    if "delta.enableChangeDataFeed" in LAYOUTS[layout]:
        feed = pa.table(deltalake.DeltaTable(uri).load_cdf(starting_version=result["version"]))
        assert set(feed["_change_type"].to_pylist()) == {"delete"}
        gone = before.filter(pc.fill_null(mask(before), False))
        assert canonical_rows(feed.select(SCHEMA.names)) == canonical_rows(gone)


@pytest.mark.parametrize("layout", ["copy-on-write", "deletion-vectors"])
@pytest.mark.parametrize("predicate, mask", PREDICATES[:6], ids=[p for p, _ in PREDICATES[:6]])
def test_an_unpartitioned_table_deletes_by_expression_too(
        tmp_path: Path, layout: str, predicate: str, mask: Mask) -> None:
    uri = _table(tmp_path, LAYOUTS[layout], partitioned=False)
    expected = _kept(dc.DeltaTable(uri).to_arrow(), mask)
    dc.DeltaTable(uri).delete(predicate)
    assert canonical_rows(dc.DeltaTable(uri).to_arrow()) == canonical_rows(expected)
    assert canonical_rows(peer_read(uri)) == canonical_rows(expected)


# --------------------------------------------------------------------------- random tables

_COLUMNS = ["id", "a", "b", "p"]


def _atoms() -> st.SearchStrategy[tuple[str, Mask]]:
    column = st.sampled_from(_COLUMNS)
    number = st.integers(-4, 4)

    def modulo(c: str, k: int, r: int) -> tuple[str, Mask]:
        return f"{c} % {k} = {r}", lambda t: pc.equal(_rem(t[c], k), r)

    def summed(c: str, d: str, x: int) -> tuple[str, Mask]:
        return f"{c} + {d} > {x}", lambda t: pc.greater(pc.add(t[c], t[d]), x)

    def ordered(c: str, d: str) -> tuple[str, Mask]:
        return f"{c} < {d}", lambda t: pc.less(t[c], t[d])

    def null(c: str) -> tuple[str, Mask]:
        return f"{c} IS NULL", lambda t: pc.is_null(t[c])

    def absolute(c: str, x: int) -> tuple[str, Mask]:
        return f"abs({c}) <= {x}", lambda t: pc.less_equal(pc.abs(t[c]), x)

    def member(c: str, xs: list[int]) -> tuple[str, Mask]:
        return (f"{c} IN ({', '.join(map(str, xs))})",
                lambda t: pc.if_else(pc.is_null(t[c]), None, pc.is_in(t[c], pa.array(xs))))

    def compared(c: str, x: int) -> tuple[str, Mask]:
        return f"{c} >= {x}", lambda t: pc.greater_equal(t[c], x)

    return st.one_of(
        st.builds(modulo, column, st.integers(2, 4), st.integers(-1, 2)),
        st.builds(summed, column, column, number),
        st.builds(ordered, column, column),
        st.builds(null, column),
        st.builds(absolute, column, st.integers(0, 3)),
        st.builds(member, column, st.lists(number, min_size=1, max_size=3)),
        st.builds(compared, column, number))


def _combined(children: st.SearchStrategy[tuple[str, Mask]]
              ) -> st.SearchStrategy[tuple[str, Mask]]:
    def both(x: tuple[str, Mask], y: tuple[str, Mask]) -> tuple[str, Mask]:
        return f"({x[0]}) AND ({y[0]})", lambda t: pc.and_kleene(x[1](t), y[1](t))

    def either(x: tuple[str, Mask], y: tuple[str, Mask]) -> tuple[str, Mask]:
        return f"({x[0]}) OR ({y[0]})", lambda t: pc.or_kleene(x[1](t), y[1](t))

    def negated(x: tuple[str, Mask]) -> tuple[str, Mask]:
        return f"NOT ({x[0]})", lambda t: pc.invert(x[1](t))

    return st.one_of(st.builds(both, children, children), st.builds(either, children, children),
                     st.builds(negated, children))


_PREDICATE = st.recursive(_atoms(), _combined, max_leaves=4)
_VALUE = st.one_of(st.none(), st.integers(-5, 5))


@st.composite
def _random_table(draw: st.DrawFn) -> list[pa.Table]:
    """One to three commits of up to eight rows each, NULLs and negative values anywhere."""
    commits = []
    start = 0
    for _ in range(draw(st.integers(1, 3))):
        n = draw(st.integers(0, 8))
        commits.append(pa.table({
            "id": list(range(start, start + n)),
            "a": draw(st.lists(_VALUE, min_size=n, max_size=n)),
            "b": draw(st.lists(_VALUE, min_size=n, max_size=n)),
            "s": [None] * n,
            "p": draw(st.lists(st.one_of(st.none(), st.integers(-2, 2)), min_size=n,
                               max_size=n))}, schema=SCHEMA))
        start += n
    return commits


@settings(max_examples=60, deadline=None)
@given(_random_table(), _PREDICATE, st.sampled_from(["copy-on-write", "deletion-vectors"]))
def test_a_delete_by_a_random_expression_keeps_exactly_the_rows_it_is_not_true_for(
        commits: list[pa.Table], predicate: tuple[str, Mask], layout: str) -> None:
    text, mask = predicate
    with tempfile.TemporaryDirectory() as root:
        uri = str(Path(root) / "t")
        dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], configuration=LAYOUTS[layout])
        for rows in commits:
            if rows.num_rows:
                dc.write(uri, rows)
        rows = dc.DeltaTable(uri).to_arrow()
        expected = _kept(rows, mask)
        dc.DeltaTable(uri).delete(text)
        assert canonical_rows(dc.DeltaTable(uri).to_arrow()) == canonical_rows(expected), text


# --------------------------------------------------------------------------- partitions

def _data_file(uri: str, p: int) -> Path:
    [add] = [a for a in dc.DeltaTable(uri).files() if a.partition_values["p"] == str(p)]
    return Path(uri) / add.path


def _single_file_partitions(tmp_path: Path) -> str:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    dc.write(uri, _rows(0, 40))
    return uri


@pytest.mark.parametrize("predicate, gone", [
    ("p = 2", {2}), ("p IN (-1, 2)", {-1, 2}), ("p BETWEEN 0 AND 5 AND NOT p = 1", {2}),
    ("2 = p OR p IS NULL", {2, None}),
])
def test_a_predicate_partition_values_decide_removes_whole_files_unread(
        tmp_path: Path, predicate: str, gone: set[int | None]) -> None:
    uri = _single_file_partitions(tmp_path)
    rows = dc.DeltaTable(uri).to_arrow()
    _data_file(uri, 2).write_bytes(b"not parquet")  # never opened by the DELETE
    result = dc.DeltaTable(uri).delete(predicate)
    info = _commit_info(uri, result["version"])
    assert info["operationMetrics"]["numRemovedFiles"] == str(len(gone))
    assert "numCopiedRows" not in info["operationMetrics"]  # no row was read or copied
    assert {a.partition_values["p"] for a in dc.DeltaTable(uri).files()} == \
        {None if p is None else str(p) for p in {-2, -1, 1, 2, None} - gone}
    kept = rows.filter(pc.invert(pc.is_in(rows["p"], pa.array(list(gone), pa.int64()))))
    assert canonical_rows(dc.DeltaTable(uri).to_arrow()) == canonical_rows(kept)
    assert canonical_rows(peer_read(uri)) == canonical_rows(kept)


def test_an_expression_over_partition_columns_they_cannot_decide_reads_rows_not_files(
        tmp_path: Path) -> None:
    uri = _single_file_partitions(tmp_path)
    rows = dc.DeltaTable(uri).to_arrow()
    # The evaluator rules p = 1 out by its partition value: that file is never opened.
    _data_file(uri, 1).write_bytes(b"not parquet")
    result = dc.DeltaTable(uri).delete("p % 2 = 0")
    expected = rows.filter(pc.invert(pc.fill_null(pc.equal(_rem(rows["p"], 2), 0), False)))
    info = _commit_info(uri, result["version"])
    assert info["operationMetrics"]["numCopiedRows"] == "0"
    assert info["operationMetrics"]["numRemovedFiles"] == "2"  # p = -2 and p = 2
    left = dc.DeltaTable(uri)
    assert {a.partition_values["p"] for a in left.files()} == {"-1", "1", None}
    _data_file(uri, 1).unlink()
    dc.write(uri, expected.filter(pc.equal(expected["p"], 1)), mode="overwrite",
             predicate="p = 1")
    assert canonical_rows(dc.DeltaTable(uri).to_arrow()) == canonical_rows(expected)
    assert canonical_rows(peer_read(uri)) == canonical_rows(expected)


@pytest.mark.parametrize("predicate, gone", [
    ("b = '\\u0061'", {b"\\u0061"}),      # the six characters' bytes, not b'a'
    ("NOT (b = '\\u0061')", {b"a", b"\x01"}),
    ("b <> ''", {b"a", b"\x01", b"\\u0061"}),  # every non-empty value, not NULL ones
    ("b > ''", {b"a", b"\x01", b"\\u0061"}),
    ("b IN ('\\u0001', 'a')", {b"a"}),
])
@pytest.mark.parametrize("layout", ["copy-on-write", "deletion-vectors"])
def test_a_binary_partition_compared_with_text_loses_the_rows_the_text_matches(
        tmp_path: Path, predicate: str, gone: set[bytes], layout: str) -> None:
    """A string literal beside a BINARY column is its UTF-8 bytes, for whole partitions as for
    rows: the partition values' own escapes (``\\u0061`` for b'a') and their empty text (NULL)
    must not make the literal another value."""
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("b", pa.binary())])
    dc.DeltaTable.create(uri, schema, partition_by=["b"],
                         configuration=LAYOUTS[layout] or None)
    dc.write(uri, pa.table({"id": [1, 2, 3, 4], "b": [b"a", b"\x01", b"\\u0061", None]},
                           schema=schema))
    rows = dc.DeltaTable(uri).to_arrow()
    # The rows' own answer, which the whole-partition path must give too.
    matched = predicate_mask(parse_expression(predicate), rows).to_pylist()
    assert {b for b, m in zip(rows["b"].to_pylist(), matched, strict=True) if m} == gone
    dc.DeltaTable(uri).delete(predicate)
    left = dc.DeltaTable(uri).to_arrow()
    assert sorted(left["b"].to_pylist(), key=repr) == sorted(
        [v for v in rows["b"].to_pylist() if v not in gone], key=repr)
    # deltalake reads the kept rows (by id: it leaves a binary partition value's escapes as
    # text).
    assert sorted(peer_read(uri)["id"].to_pylist()) == sorted(left["id"].to_pylist())


def test_false_and_null_delete_nothing_from_an_unpartitioned_table(tmp_path: Path) -> None:
    uri = _table(tmp_path, {}, partitioned=False)
    rows = canonical_rows(dc.DeltaTable(uri).to_arrow())
    for predicate in ("FALSE", "NULL", "1 = 0", "NOT TRUE"):
        dc.DeltaTable(uri).delete(predicate)
        assert canonical_rows(dc.DeltaTable(uri).to_arrow()) == rows, predicate
    dc.DeltaTable(uri).delete("1 = 1")
    assert dc.DeltaTable(uri).to_arrow().num_rows == 0


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("partitioned", [True, False])
def test_a_delete_that_deletes_nothing_commits_nothing_on_every_path_as_the_peers(
        tmp_path: Path, layout: str, partitioned: bool) -> None:
    """Spark (``commitIfNeeded``) and deltalake commit no version for a DELETE without a row
    to delete; neither does deltacommit, whether partition values decide the predicate
    (whole files), deletion vectors mark rows or files are rewritten."""
    uri = _table(tmp_path, LAYOUTS[layout], partitioned=partitioned)
    before = dc.DeltaTable(uri).version
    rows = canonical_rows(dc.DeltaTable(uri).to_arrow())
    predicates = ["p = 99", "p IN (97, 98)", "id = -1", "p = 1 AND id < 0", "s LIKE 'zz%'"]
    for predicate in predicates:
        result = dc.DeltaTable(uri).delete(predicate)
        assert result == {**result, "version": before, "num_deleted_rows": 0,
                          "num_added_files": 0, "num_removed_files": 0}, predicate
        assert dc.DeltaTable(uri).version == before, predicate
    assert canonical_rows(dc.DeltaTable(uri).to_arrow()) == rows
    assert sorted(p.name for p in (Path(uri) / "_delta_log").glob("*.json")) == \
        [f"{v:020d}.json" for v in range(before + 1)]
    # No deletion-vector file was left behind either.
    assert not list(Path(uri).rglob("deletion_vector_*.bin"))
    peer = str(tmp_path / "peer")
    dc.write(peer, dc.DeltaTable(uri).to_arrow(),
             partition_by=["p"] if partitioned else None)
    peer_before = deltalake.DeltaTable(peer).version()
    for predicate in predicates[:4]:
        deltalake.DeltaTable(peer).delete(predicate)
    assert deltalake.DeltaTable(peer).version() == peer_before


def test_a_delete_that_deletes_rows_after_nothing_commits_them(tmp_path: Path) -> None:
    uri = _table(tmp_path, {}, partitioned=True)
    before = dc.DeltaTable(uri).version
    dc.DeltaTable(uri).delete("p = 99")
    result = dc.DeltaTable(uri).delete("p = 1")
    assert result["version"] == before + 1 and result["num_deleted_rows"] > 0
    assert _commit_info(uri, before + 1)["operation"] == "DELETE"
    assert all(r["p"] != 1 for r in dc.DeltaTable(uri).to_arrow().to_pylist())


# --------------------------------------------------------------------------- conflicts

def _serializable(tmp_path: Path, extra: dict[str, str] | None = None) -> str:
    return _table(tmp_path, {"delta.isolationLevel": "Serializable", **(extra or {})})


def _append(uri: str, p: int) -> None:
    dc.write(uri, pa.table({"id": [100], "a": [9], "b": [9], "s": ["x"], "p": [p]},
                           schema=SCHEMA))


_ALL = frozenset({"cow", "dv", "rt"})


@pytest.mark.parametrize("predicate, appended_to, conflicting", [
    ("p = 1", -2, frozenset()),           # recorded as the partition p = 1
    ("p = 1", 1, _ALL),
    ("p = 1 AND id % 2 = 0", -2, frozenset()),  # the conjunct partition values decide
    ("p = 1 AND id % 2 = 0", 1, _ALL),
    ("p % 2 = 0", 2, _ALL),
    # Undecidable from partition values: the file-level rules read the whole table; row by
    # row (row tracking), the evaluator rules the new file out by its partition value.
    ("p % 2 = 0", -1, frozenset({"cow", "dv"})),
    ("id % 2 = 0", -1, _ALL),
    ("a + b > 4", 2, _ALL),
])
@pytest.mark.parametrize("layout", sorted(_ALL))
def test_a_concurrent_append_is_checked_against_what_the_delete_read(
        tmp_path: Path, predicate: str, appended_to: int, conflicting: frozenset[str],
        layout: str) -> None:
    uri = _serializable(tmp_path, {"cow": {}, "dv": LAYOUTS["deletion-vectors"],
                                   "rt": LAYOUTS["row-tracking-with-dvs"]}[layout])
    stale = dc.DeltaTable(uri)  # reads the table before the append below
    mask = next(m for p, m in [*PREDICATES,
                               ("p = 1", lambda t: pc.equal(t["p"], 1)),
                               ("p = 1 AND id % 2 = 0", lambda t: pc.and_kleene(
                                   pc.equal(t["p"], 1), pc.equal(_rem(t["id"], 2), 0))),
                               ("id % 2 = 0", lambda t: pc.equal(_rem(t["id"], 2), 0))]
                if p == predicate)
    _append(uri, appended_to)
    rows = dc.DeltaTable(uri).to_arrow()
    before = _state(uri)
    if layout in conflicting:
        with pytest.raises(ConcurrentAppendException):
            stale.delete(predicate)
        assert _state(uri) == before
    else:
        stale.delete(predicate)
        assert canonical_rows(dc.DeltaTable(uri).to_arrow()) == canonical_rows(
            _kept(rows, mask))


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("predicate, error, match", [
    ("nope = 1", InvalidArgumentError, r"where nope = 1: no column 'nope'"),
    ("lower(nope) = 'x'", InvalidArgumentError, r"nope"),
    ("id = 'abc'", InvalidArgumentError, r"where id = 'abc': cannot compare"),
    ("s + 1 > 0", InvalidArgumentError, r"where s \+ 1 > 0: arithmetic of STRING"),
    ("p = 'abc'", InvalidArgumentError, r"where p = 'abc': cannot compare"),
    ("id +", InvalidArgumentError, r"'id \+'"),
    ("id % 2 = 0 AND", InvalidArgumentError, r"'id % 2 = 0 AND'"),
    ("id + 1", InvalidArgumentError, r"where id \+ 1"),
    ("", InvalidArgumentError, r"DELETE from table"),
    (7, InvalidArgumentError, r"the predicate must be SQL text, got 7"),
    ("id / (a - a) > 1", ExpressionValueError, r"where id / \(a - a\) > 1"),
])
@pytest.mark.parametrize("layout", ["copy-on-write", "deletion-vectors"])
def test_bad_input_names_the_table_and_the_predicate_and_commits_nothing(
        tmp_path: Path, predicate: Any, error: type[Exception], match: str,
        layout: str) -> None:
    uri = _table(tmp_path, LAYOUTS[layout])
    before = _state(uri)
    with pytest.raises(error, match=match) as raised:
        dc.DeltaTable(uri).delete(predicate)
    assert f"DELETE from table {dc.DeltaTable(uri).uri}" in str(raised.value)
    assert _state(uri) == before


def test_a_deletion_vector_delete_on_a_change_data_table_writes_its_change_data(
        tmp_path: Path) -> None:
    """``delete_with_deletion_vectors`` called on a table with change data feed deletes by
    deletion vectors and writes the deleted rows' change data, as ``delete`` does, instead of
    refusing the table."""
    from deltacommit.ops.delete import delete_with_deletion_vectors

    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": pa.array(range(10), pa.int64())}),
             configuration={"delta.enableDeletionVectors": "true",
                            "delta.enableChangeDataFeed": "true"})
    t = dc.DeltaTable(uri)
    delete_with_deletion_vectors(t, parse_expression("id % 2 = 0"))
    t = dc.DeltaTable(uri)
    assert sorted(t.to_arrow().column("id").to_pylist()) == [1, 3, 5, 7, 9]
    assert any(a.deletion_vector for a in t.files())
    feed = pa.table(deltalake.DeltaTable(uri).load_cdf(starting_version=1)).to_pylist()
    assert sorted(r["id"] for r in feed if r["_change_type"] == "delete") == [0, 2, 4, 6, 8]


# --------------------------------------------------------------------------- what it answers

#: deltalake 1.6.0's keys of ``DeltaTable.delete``; deltacommit adds ``version``.
PEER_METRICS = ["num_added_files", "num_removed_files", "num_deleted_rows", "num_copied_rows",
                "execution_time_ms", "scan_time_ms", "rewrite_time_ms"]


@pytest.mark.parametrize("predicate", ["id % 3 = 0", "p = 1", "p IN (1, 2) AND id > 5",
                                       "id < 0", None],
                         ids=["rows", "partition", "partitions-and-rows", "nothing", "all"])
def test_a_delete_answers_deltalakes_metrics_with_the_same_counts(
        tmp_path: Path, predicate: str | None) -> None:
    uri = _table(tmp_path / "ours", {})
    peer = _table(tmp_path / "peer", {})
    before = dc.DeltaTable(uri).version
    ours = dc.DeltaTable(uri).delete(predicate)
    theirs = deltalake.DeltaTable(peer).delete(predicate)
    assert list(ours) == [*PEER_METRICS, "version"] and list(theirs) == PEER_METRICS
    counts = ["num_deleted_rows", "num_copied_rows", "num_added_files", "num_removed_files"]
    assert {k: ours[k] for k in counts} == {k: theirs[k] for k in counts}, (ours, theirs)
    assert ours["version"] == dc.DeltaTable(uri).version == \
        (before + 1 if ours["num_deleted_rows"] else before)


@pytest.mark.parametrize("layout", ["deletion-vectors", "row-tracking-with-dvs"])
def test_a_delete_by_deletion_vectors_counts_the_rows_and_files_it_marked(
        tmp_path: Path, layout: str) -> None:
    uri = _table(tmp_path, LAYOUTS[layout], partitioned=False)
    rows = dc.DeltaTable(uri).to_arrow().num_rows
    result = dc.DeltaTable(uri).delete("id % 3 = 0")
    assert result["num_deleted_rows"] == 12 == rows - dc.DeltaTable(uri).to_arrow().num_rows
    assert result["num_added_files"] == result["num_copied_rows"] == 0  # no data file written
    assert result["num_deletion_vectors_added"] == 2 and result["num_removed_files"] == 0
    assert _commit_info(uri, result["version"])["operationMetrics"]["numDeletedRows"] == "12"


@pytest.mark.parametrize("predicate", ["c = 5", "c > 10", "c BETWEEN 4 AND 6", "c = TRUE",
                                       "c = -5", "1.50 = c", "c = 1e20", "c IN (5, 9)",
                                       "c = DATE '2020-01-01'"])
def test_a_string_column_against_a_number_deletes_what_deltalake_deletes_or_is_refused(
        tmp_path: Path, predicate: str) -> None:
    """deltalake (DataFusion) compares a string column with a number as the number's text,
    which is deltacommit's text only for BIGINT integers and booleans (1.50 is '1.5', 1e20
    '1e20'), and refuses a number in IN and a date: deltacommit deletes exactly deltalake's
    rows or refuses, never other rows."""
    values = ["5", "abc", " 5 ", "5.0", "10", "9", "1.5", "1.50", "1e20", "-5", "true", None]
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    for uri in (ours, theirs):
        deltalake.write_deltalake(uri, pa.table({"c": pa.array(values, pa.string())}))
    try:
        deltalake.DeltaTable(theirs).delete(predicate)
        expected: list[str | None] | None = sorted(
            deltalake.DeltaTable(theirs).to_pyarrow_table()["c"].to_pylist(), key=str)
    except Exception:
        expected = None
    try:
        dc.DeltaTable(ours).delete(predicate)
    except dc.InvalidArgumentError as e:
        assert "STRING" in str(e), str(e)
        return
    assert expected is not None, f"deltalake refuses {predicate!r}; deltacommit deleted"
    assert sorted(dc.DeltaTable(ours).to_arrow()["c"].to_pylist(), key=str) == expected
