"""A dotted name where a table has both a top-level column so named and a struct field at that
path.  Spark reads unquoted ``a.b`` (and ```a`.`b```) as field ``b`` of struct ``a``, and
```a.b``` as the column; deltacommit reads them the same in every row-level verb, and its file
pruning by statistics follows the same column (before, the rows were judged by the top-level
column while files were pruned by the field's bounds, so matching rows were skipped)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc

#: Row 1 has column `a.b` = 10, row 3 has field a.b = 10.
BOTH = pa.table({"id": [1, 2, 3], "a.b": [10, 20, 30],
                 "a": pa.array([{"b": 30}, {"b": 20}, {"b": 10}])})


def _table(tmp_path: Path, data: pa.Table = BOTH) -> dc.DeltaTable:
    uri = str(tmp_path / "t")
    for row in range(data.num_rows):  # a file per row: pruning by statistics decides files
        dc.write(uri, data.slice(row, 1))
    return dc.DeltaTable(uri)


@pytest.mark.parametrize("name", ["a.b", "`a`.`b`"])
@pytest.mark.parametrize("verb", ["delete", "update", "merge"])
def test_an_unquoted_dotted_name_is_the_struct_field_as_in_spark(
        tmp_path: Path, verb: str, name: str) -> None:
    t = _table(tmp_path)
    if verb == "delete":
        t.delete(f"{name} = 10")
    elif verb == "update":
        t.update({"id": "0"}, predicate=f"{name} = 10")
    else:
        t.merge(pa.table({"id": [1, 2, 3]}), f"t.id = s.id AND t.{name} = 10", source_alias="s",
                target_alias="t").when_matched_delete().execute()
    ids = dc.DeltaTable(t.uri).to_arrow().column("id").to_pylist()
    assert sorted(ids) == ([0, 1, 2] if verb == "update" else [1, 2])


def test_a_quoted_dotted_name_is_the_top_level_column(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.delete("`a.b` = 10")
    assert sorted(dc.DeltaTable(t.uri).to_arrow().column("id").to_pylist()) == [2, 3]


def test_an_unquoted_dotted_name_without_such_a_field_is_the_column(tmp_path: Path) -> None:
    t = _table(tmp_path, pa.table({"id": [1, 2], "a.b": [1, 2]}))
    t.delete("a.b = 1")
    assert dc.DeltaTable(t.uri).to_arrow().column("id").to_pylist() == [2]


@pytest.mark.parametrize("verb", ["read", "delete", "delete-and", "update", "merge"])
def test_an_unquoted_dotted_name_is_the_field_beside_a_partition_column_so_named(
        tmp_path: Path, verb: str) -> None:
    """With ``a.b`` a partition column, unquoted ``a.b`` still names the struct field: the
    files are not chosen by the partition column's values (before, a DELETE removed the
    partition holding the column's match, and the other verbs and a filtered read found no
    row at all)."""
    uri = str(tmp_path / "t")
    dc.write(uri, BOTH, partition_by=["a.b"])
    t = dc.DeltaTable(uri)
    if verb == "read":
        assert t.to_arrow(filter="a.b = 10").column("id").to_pylist() == [3]
        return
    if verb == "delete":
        t.delete("a.b = 10")
    elif verb == "delete-and":
        t.delete("a.b = 10 AND id > 0")
    elif verb == "update":
        t.update({"id": "0"}, predicate="a.b = 10")
    else:
        t.merge(pa.table({"id": [1, 2, 3]}), "t.id = s.id AND t.a.b = 10", source_alias="s",
                target_alias="t").when_matched_delete().execute()
    ids = dc.DeltaTable(uri).to_arrow().column("id").to_pylist()
    assert sorted(ids) == ([0, 1, 2] if verb == "update" else [1, 2])
    assert dc.DeltaTable(uri).to_arrow(filter="`a.b` = 10").column("id").to_pylist() == [1]


@pytest.mark.parametrize("text", ["`x.y` = 10", "x.y = 10", "ID = 1", "S.b = 1"])
def test_a_filter_reads_the_columns_it_names_beside_the_columns_asked_for(
        tmp_path: Path, text: str) -> None:
    """A read's filter may name a column the read does not return, spelled in another case
    or with dots (before, such a filter was refused as naming no column)."""
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [1, 2], "x.y": [10, 20], "s": pa.array([{"B": 1}, {"B": 2}]),
                            "v": ["a", "b"]}))
    assert dc.DeltaTable(uri).to_arrow(columns=["v"], filter=text).to_pylist() == [{"v": "a"}]


def test_setting_a_dotted_column_unquoted_says_how_to_quote_it(tmp_path: Path) -> None:
    """Updates set top-level columns, so ``x.y`` unquoted names nothing settable; the error
    says the column is set as `x.y`, which then works (deltalake changes nothing instead)."""
    t = _table(tmp_path, pa.table({"id": [1, 2], "x.y": [10, 20]}))
    before = t.version
    with pytest.raises(dc.InvalidArgumentError, match=r"written quoted: `x\.y`"):
        t.update({"x.y": "0"})
    assert dc.DeltaTable(t.uri).version == before
    t.update({"`x.y`": "0"}, predicate="id = 1")
    assert dc.DeltaTable(t.uri).to_arrow().sort_by("id").column("x.y").to_pylist() == [0, 20]
