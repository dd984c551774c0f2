"""Row-level rewrites carry low-cardinality string columns as the dictionaries Parquet stores
them in (``io/dictionary_columns``): read as dictionaries, kept through copy-on-write, written
as dictionary pages without hashing every value again.  What must hold: the rows are exactly
those a plain rewrite makes, the files written are the files plain values make (their Parquet
schema and their ``ARROW:schema``, so no reader sees a dictionary type), files of other
encodings and schemas in the same rewrite are handled, and the proof still decides."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.errors import RewriteCheckError
from deltacommit.io.datafiles import FOOTER_BOUNDS_FROM_ROWS
from deltacommit.io.dictionary_columns import (
    dictionaries_within,
    in_one_dictionary,
    joined,
    plain_table,
    referenced_only,
)
from deltacommit.protocol.stats.compute import compute_stats
from tests.delta_tables import peer_read


def _new_files(uri: str, before: set[str]) -> list[Path]:
    return [Path(uri) / a.path for a in dc.DeltaTable(uri).files() if a.path not in before]


def _peer_rows(uri: str, columns: list[str]) -> list[dict[str, Any]]:
    """deltalake's read of the table, the ``columns`` of each row, by ``id``."""
    rows = peer_read(uri).to_pylist()
    return sorted(({c: r[c] for c in columns} for r in rows), key=lambda r: r["id"])


def _low_cardinality(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids,
                     "s": pa.array([None if i % 11 == 0 else f"s{i % 7}" for i in ids.tolist()]),
                     "b": pa.array([bytes([i % 3]) * 2 for i in ids.tolist()], pa.binary())})


def test_an_update_carries_the_dictionary_and_writes_the_file_plain_values_make(
        tmp_path: Path) -> None:
    """An UPDATE of a low-cardinality column writes its new value into the dictionary read
    (appended after the old values, not hashed into a new one), and the file is the one
    plain values make: the same Parquet schema, an ``ARROW:schema`` of strings, statistics of
    the values; pyarrow reads strings, deltalake reads the same rows."""
    uri = str(tmp_path / "t")
    for k in range(4):
        dc.write(uri, _low_cardinality(5000, 5000 * k))
    before = {a.path for a in dc.DeltaTable(uri).files()}
    dc.DeltaTable(uri).update({"s": "'updated'"}, predicate="id % 5 = 0")
    expected = pa.concat_tables([_low_cardinality(5000, 5000 * k) for k in range(4)])
    s = [("updated" if i % 5 == 0 else v)
         for i, v in zip(expected["id"].to_pylist(), expected["s"].to_pylist(), strict=True)]
    expected = expected.set_column(1, "s", pa.array(s))
    assert expected.num_rows >= FOOTER_BOUNDS_FROM_ROWS
    got = dc.DeltaTable(uri).to_arrow().sort_by("id")
    assert got.equals(expected)
    assert _peer_rows(uri, ["id", "s", "b"]) == expected.to_pylist()
    new = _new_files(uri, before)
    assert len(new) == 1
    meta = pq.read_metadata(new[0])
    reference = pa.BufferOutputStream()
    pq.write_table(expected, reference)
    reference_meta = pq.read_metadata(pa.BufferReader(reference.getvalue()))
    assert meta.schema.equals(reference_meta.schema)
    stored = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(meta.metadata[b"ARROW:schema"])))
    assert stored.equals(expected.schema)
    assert pq.read_table(new[0]).schema.equals(expected.schema)
    # Carried: the row 0 is updated, yet "updated" comes after every value read.
    carried = pq.read_table(new[0], read_dictionary=["s"]).column("s").chunk(0).dictionary
    assert carried.to_pylist()[-1] == "updated" and expected["s"][0].as_py() == "updated"
    stats = next(a for a in dc.DeltaTable(uri).files() if a.path not in before).stats
    assert stats is not None
    # From the footer's bounds (at least FOOTER_BOUNDS_FROM_ROWS rows): those of the values.
    assert json.loads(stats) == json.loads(compute_stats(expected))


def _wide_strings(n: int, start: int) -> pa.Table:
    """A file whose ``s`` has too many distinct values for a dictionary page (plain pages
    after the fallback) and whose ``b`` is unique."""
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids,
                     "s": pa.array([f"wide-{i:08d}-" + "x" * 40 for i in ids.tolist()]),
                     "b": pa.array([i.to_bytes(8, "big") for i in ids.tolist()], pa.binary())})


@pytest.mark.parametrize("verb", ["update", "delete", "merge"])
def test_files_of_other_encodings_and_schemas_rewrite_to_exactly_their_rows(
        verb: str, tmp_path: Path) -> None:
    """One rewrite over files read as dictionaries, files of plain pages (high cardinality),
    and files written before a column existed (read conformed, not as read): the rows are
    exactly what the verb makes of them, and deltalake reads the same."""
    uri = str(tmp_path / "t")
    old = pa.table({"id": pa.array(range(1000, 1300), pa.int64()),
                    "b": pa.array([b"o"] * 300, pa.binary())})
    dc.write(uri, old)
    t = dc.DeltaTable(uri)
    schema = json.loads(t.metadata.schema_string)
    schema["fields"].append({"name": "s", "type": "string", "nullable": True, "metadata": {}})
    with t.transaction("ADD COLUMNS") as txn:  # as Spark's ALTER TABLE ADD COLUMNS commits it
        txn.update_metadata(dataclasses.replace(t.metadata, schema_string=json.dumps(schema)))
    dc.write(uri, _low_cardinality(600, 0).select(["id", "b", "s"]))
    dc.write(uri, _wide_strings(7000, 2000).select(["id", "b", "s"]))
    dc.write(uri, _low_cardinality(400, 600).select(["id", "b", "s"]))
    before = dc.DeltaTable(uri).to_arrow().sort_by("id")
    t = dc.DeltaTable(uri)
    rows = before.to_pylist()
    if verb == "update":
        t.update({"s": "'u'", "b": "b"}, predicate="id % 3 = 0")
        want = [dict(r, s="u") if r["id"] % 3 == 0 else r for r in rows]
    elif verb == "delete":
        t.delete("id < 700 or id >= 8000")
        want = [r for r in rows if not (r["id"] < 700 or r["id"] >= 8000)]
    else:
        source = pa.table({"id": pa.array([0, 5, 1005, 2001, 8999, 50000], pa.int64()),
                           "b": pa.array([b"m"] * 6, pa.binary()),
                           "s": pa.array(["s3", None, "new", "s1", "wide", "ins"])})
        (t.merge(source, "t.id = s.id", source_alias="s", target_alias="t")
         .when_matched_update_all().when_not_matched_insert_all().execute())
        by_id = {r["id"]: r for r in rows}
        for r in source.to_pylist():
            by_id[r["id"]] = r
        want = sorted(by_id.values(), key=lambda r: r["id"])
    got = dc.DeltaTable(uri).to_arrow().sort_by("id")
    assert got.to_pylist() == want
    assert got.schema.field("s").type == pa.string()
    assert _peer_rows(uri, got.column_names) == want
    for a in dc.DeltaTable(uri).files():
        assert not any(pa.types.is_dictionary(f.type)
                       for f in pq.read_schema(Path(uri) / a.path))


def test_a_file_that_stores_a_dictionary_type_itself_is_read_as_its_values(
        tmp_path: Path) -> None:
    """A data file another writer wrote from a dictionary column (its ``ARROW:schema`` says
    dictionary) is read by a scan that keeps dictionaries as the table's type or as a
    dictionary of it, never as anything else, whichever file came first."""
    uri = str(tmp_path / "t")
    dc.write(uri, _low_cardinality(50))
    t = dc.DeltaTable(uri)
    ours = t.files()[0]
    foreign = "part-00000-foreign-c000.snappy.parquet"
    rows = _low_cardinality(30, 100)
    pq.write_table(rows.set_column(1, "s", rows.column("s").dictionary_encode()),
                   Path(uri) / foreign)
    from dataclasses import replace

    for order in ([foreign, ours.path], [ours.path, foreign]):
        scan = replace(t.file_scan(t.schema), physical_rows=True, keep_dictionaries=True)
        for path in order:
            got = scan.read_file(path, {}, None)
            s = got.schema.field("s").type
            assert s == pa.string() or (pa.types.is_dictionary(s) and s.value_type == pa.string())
            want = rows if path == foreign else _low_cardinality(50)
            assert plain_table(got).to_pylist() == want.to_pylist()


@pytest.mark.parametrize("expected", ["same", "another dictionary", "values, not a dictionary",
                                      "a value changed"])
def test_the_proof_decides_with_dictionary_rows(
        expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows a rewrite should hold may carry dictionaries: the same rows in order prove
    the file batch by batch without a whole read, whether under the file's dictionary,
    another one, or as plain values; a changed value is refused and the file deleted."""
    from deltacommit.engine import rewrite_check

    monkeypatch.setattr(rewrite_check, "CHECK_BATCH_ROWS", 70)
    uri = str(tmp_path / "t")
    rows = _low_cardinality(400)
    dc.write(uri, rows)
    t = dc.DeltaTable(uri)
    written = t.files()
    path = Path(uri) / written[0].path
    on_file = pq.read_table(path, read_dictionary=["s"]).column("s").combine_chunks()
    dictionary = on_file.dictionary
    reordered = dictionary.take(pa.array(range(len(dictionary) - 1, -1, -1)))
    should = {
        "same": rows.set_column(1, "s", on_file),
        "another dictionary": rows.set_column(1, "s", pa.DictionaryArray.from_arrays(
            pa.array([None if v is None else reordered.to_pylist().index(v)
                      for v in rows.column("s").to_pylist()], pa.int32()), reordered)),
        "values, not a dictionary": rows,
        "a value changed": rows.set_column(1, "s", pa.DictionaryArray.from_arrays(
            pa.concat_arrays([on_file.indices.slice(0, 399), pa.array([0], pa.int32())]),
            dictionary)),
    }[expected]
    from dataclasses import replace

    scan = replace(t.file_scan(t.schema), physical_rows=True, keep_dictionaries=True)
    kept = scan.read_file(written[0].path, {}, None).schema.field("s").type
    assert pa.types.is_dictionary(kept)  # read back as the file's dictionary
    if expected != "a value changed":
        from deltacommit.engine.scan import FileScan

        def whole(*args: Any) -> Any:
            raise AssertionError("read whole")
        monkeypatch.setattr(FileScan, "read_many", whole)
    if expected == "a value changed":
        assert rows.column("s")[399].as_py() != dictionary[0].as_py()
        with pytest.raises(RewriteCheckError):
            rewrite_check.check_rewritten(scan, t.store, should, written, what="test")
        assert not path.exists()
    else:
        rewrite_check.check_rewritten(scan, t.store, should, written, what="test")
        assert path.exists()


_values = st.one_of(st.none(), st.sampled_from(["a", "b", "cc", "", "é", "zz"]))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(_values, max_size=6), min_size=1, max_size=5),
       st.lists(_values, max_size=8), st.integers(1, 64))
def test_dictionary_columns_join_and_take_values_without_changing_them(
        chunks: list[list[str | None]], more: list[str | None], limit: int) -> None:
    """Chunks of differing dictionaries joined (``joined``), values added to their dictionary
    (``in_one_dictionary``), dictionaries a writer could not keep decoded
    (``dictionaries_within``), and dictionaries cut to the values held
    (``referenced_only``): the values are always the plain ones, in order."""
    tables = [pa.table({"s": pa.array(c, pa.string()).dictionary_encode()}) for c in chunks]
    together = joined(tables)
    flat = [v for c in chunks for v in c]
    assert plain_table(together).column("s").to_pylist() == flat
    one = [c.dictionary for c in together.column("s").chunks]
    assert all(d.equals(one[0]) for d in one)  # one dictionary for every chunk
    column, encoded = in_one_dictionary(together.column("s"), pa.array(more, pa.string()))
    assert column.to_pylist() == flat and encoded.to_pylist() == more
    if column.num_chunks:
        assert encoded.dictionary.equals(column.chunk(0).dictionary)
    both = pa.table({"s": pa.chunked_array([*column.chunks, encoded], type=column.type)})
    kept = dictionaries_within(both, limit)
    assert plain_table(kept).column("s").to_pylist() == flat + more
    big = encoded.dictionary.nbytes > limit
    assert pa.types.is_dictionary(kept.schema.field("s").type) == (not big)
    cut = referenced_only(both)  # as written: with a null, no value that no row holds
    assert plain_table(cut).column("s").to_pylist() == flat + more
    if None in flat + more:
        held = {v for v in flat + more if v is not None}
        assert all(set(c.dictionary.to_pylist()) == held for c in cut.column("s").chunks)


def _predicate_over_kept_column(uri: str, files: int, verb: str, where: str, delete: str,
                                 sets: dict[str, str], named: Callable[[dict[str, Any]], bool],
                                 changed: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """``files`` files of a low-cardinality ``s``, then an UPDATE (``sets`` where ``where``)
    or a DELETE (where ``delete``): exactly the rows ``named`` change (as ``changed`` says)
    or go, by our read and deltalake's."""
    for k in range(files):
        dc.write(uri, _low_cardinality(3000, 3000 * k))
    rows = dc.DeltaTable(uri).to_arrow().sort_by("id").to_pylist()
    if verb == "update":
        dc.DeltaTable(uri).update(sets, predicate=where)
        want = [changed(r) if named(r) else r for r in rows]
    else:
        dc.DeltaTable(uri).delete(delete)
        want = [r for r in rows if not named(r)]
    assert dc.DeltaTable(uri).to_arrow().sort_by("id").to_pylist() == want
    assert _peer_rows(uri, ["id", "s", "b"]) == want


@pytest.mark.parametrize("verb", ["update", "delete"])
def test_a_predicate_on_the_dictionary_column_itself_reads_its_values(
        verb: str, tmp_path: Path) -> None:
    """A predicate that reads a column kept as a dictionary (equality, IS NULL,
    functions) is evaluated over its values: exactly the rows it names change."""
    _predicate_over_kept_column(
        str(tmp_path / "t"), 3, verb,
        "s = 's3' or s is null or substr(s, 1, 2) = 's5' or upper(s) = 'S6'",
        "s = 's3' or s is null or s in ('s5', 's6')", {"s": "concat(s, '!')", "b": "b"},
        lambda r: r["s"] is None or r["s"] in ("s3", "s5", "s6"),
        lambda r: dict(r, s=None if r["s"] is None else r["s"] + "!"))


def test_files_read_together_keeping_dictionaries_in_some_only_read_as_values(
        tmp_path: Path) -> None:
    """Reading several files at once with a scan that keeps dictionaries, where one file's
    column is kept and another's is not (plain pages), gives the rows of both as values."""
    from dataclasses import replace

    uri = str(tmp_path / "t")
    dc.write(uri, _low_cardinality(3000).select(["id", "b", "s"]))
    dc.write(uri, _wide_strings(7000, 5000).select(["id", "b", "s"]))
    t = dc.DeltaTable(uri)
    scan = replace(t.file_scan(t.schema), physical_rows=True, keep_dictionaries=True)
    files = sorted(t.files(), key=lambda a: a.num_records() or 0)
    kinds = {pa.types.is_dictionary(scan.read(a).schema.field("s").type) for a in files}
    assert kinds == {True, False}
    got = scan.read_many(files)
    assert got.schema.field("s").type == pa.string()
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == \
        sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("new", ["'x'", "NULL"])
def test_statistics_stay_tight_when_a_value_leaves_the_dictionary(
        new: str, tmp_path: Path) -> None:
    """An UPDATE that moves every row of one value (``a``) elsewhere, in a column with nulls,
    writes a dictionary whose ``a`` no row holds.  The file's bounds are those of the values
    it holds, in the Delta statistics and in the Parquet footer alike: Arrow's writer takes a
    batch's bounds from the whole dictionary when the batch's distinct indices, its null
    among them, are as many as the dictionary's values."""
    uri = str(tmp_path / "t")
    n = FOOTER_BOUNDS_FROM_ROWS + 1000
    values = [None if i % 13 == 0 else "abc"[i % 3] for i in range(n)]
    dc.write(uri, pa.table({"id": pa.array(range(n), pa.int64()), "s": pa.array(values)}))
    dc.DeltaTable(uri).update({"s": new}, predicate="s = 'a'")
    replacement = None if new == "NULL" else "x"
    want = [replacement if v == "a" else v for v in values]
    got = dc.DeltaTable(uri).to_arrow().sort_by("id")
    assert got.column("s").to_pylist() == want
    (add,) = dc.DeltaTable(uri).files()
    assert add.stats is not None
    present = sorted({v for v in want if v is not None})
    stats = json.loads(add.stats)
    assert (stats["minValues"]["s"], stats["maxValues"]["s"]) == (present[0], present[-1])
    assert stats["nullCount"]["s"] == sum(v is None for v in want)
    meta = pq.read_metadata(Path(uri) / add.path)
    for g in range(meta.num_row_groups):
        footer = meta.row_group(g).column(1).statistics
        assert (footer.min, footer.max) == (present[0], present[-1])
    assert _peer_rows(uri, ["id", "s"]) == got.to_pylist()


@pytest.mark.parametrize("verb", ["update", "delete"])
def test_a_predicate_naming_the_dictionary_column_in_another_case_reads_its_values(
        verb: str, tmp_path: Path) -> None:
    """A predicate names a column as Spark resolves it, ignoring case (``S`` for ``s``): the
    column kept as a dictionary is still decoded for it, and exactly the rows it names
    change."""
    _predicate_over_kept_column(
        str(tmp_path / "t"), 2, verb, "S = 's3' or lower(S) = 's5' or S in ('s6')",
        "S = 's3' or S in ('s5', 's6')", {"s": "'u'"},
        lambda r: r["s"] in ("s3", "s5", "s6"), lambda r: dict(r, s="u"))
