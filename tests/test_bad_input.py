"""Bad input gets a clear error naming what is wrong, and the table is left unchanged."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.snapshot import state_cache
from deltacommit.ops.merge import TableMerger
from deltacommit.protocol.log.names import commit_path

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string())])


def _log_digest(uri: str) -> dict[str, str]:
    log = Path(uri) / "_delta_log"
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(log.glob("*.json"))}


@pytest.fixture
def table(tmp_path: Path) -> str:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["day"])
    dc.write(uri, pa.table({"id": [1, 2], "day": ["a", "b"]}, schema=SCHEMA))
    return uri


def test_path_that_is_not_a_table(tmp_path: Path) -> None:
    with pytest.raises(dc.TableNotFoundError) as e:
        dc.DeltaTable(str(tmp_path / "nothing"))
    assert "nothing" in str(e.value) and "_delta_log" in str(e.value)


def test_plain_directory_is_not_a_table(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "file.parquet").write_bytes(b"x")
    with pytest.raises(dc.TableNotFoundError, match="no commit files"):
        dc.DeltaTable(str(tmp_path / "d"))


def test_create_over_existing_table(table: str) -> None:
    before = _log_digest(table)
    with pytest.raises(dc.TableExistsError) as e:
        dc.DeltaTable.create(table, SCHEMA)
    assert table in str(e.value)
    assert _log_digest(table) == before


def test_append_with_mismatched_schema(table: str) -> None:
    before = _log_digest(table)
    bad = pa.table({"id": ["not a number"], "day": ["a"]})
    with pytest.raises(dc.SchemaMismatchError) as e:
        dc.write(table, bad)
    msg = str(e.value)
    assert "id" in msg and table in msg
    assert _log_digest(table) == before
    extra = pa.table({"id": [1], "day": ["a"], "surprise": [1.0]})
    with pytest.raises(dc.SchemaMismatchError, match="surprise"):
        dc.write(table, extra)
    assert _log_digest(table) == before
    assert dc.DeltaTable(table).to_arrow().num_rows == 2


def test_corrupt_json_line_names_file_and_line(table: str) -> None:
    path = Path(table) / commit_path(1)
    lines = path.read_bytes().split(b"\n")
    lines[1] = b'{"add": {"path": '  # truncated JSON on line 2
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(dc.CorruptLogError) as e:
        dc.DeltaTable(table)
    msg = str(e.value)
    assert "00000000000000000001.json" in msg and "line 2" in msg


def test_missing_version_in_the_log(table: str) -> None:
    dc.write(table, pa.table({"id": [3], "day": ["c"]}, schema=SCHEMA))
    (Path(table) / commit_path(1)).unlink()
    state_cache.clear()  # a new process opens the damaged table
    with pytest.raises(dc.MissingVersionError) as e:
        dc.DeltaTable(table)
    assert "1" in str(e.value) and table in str(e.value)


def test_missing_first_version(table: str) -> None:
    (Path(table) / commit_path(0)).unlink()
    state_cache.clear()  # a new process opens the damaged table
    with pytest.raises(dc.MissingVersionError, match=r"00000000000000000000\.json"):
        dc.DeltaTable(table)


def test_partition_column_not_in_schema(tmp_path: Path) -> None:
    uri = str(tmp_path / "p")
    with pytest.raises(dc.InvalidArgumentError) as e:
        dc.DeltaTable.create(uri, SCHEMA, partition_by=["month"])
    assert "month" in str(e.value) and "id" in str(e.value)
    assert not (Path(uri) / "_delta_log").exists()
    with pytest.raises(dc.InvalidArgumentError, match="month"):
        dc.write(uri, pa.table({"id": [1], "day": ["a"]}), partition_by=["month"])
    assert not (Path(uri) / "_delta_log").exists()


def test_write_with_other_partitioning_than_the_table(table: str) -> None:
    before = _log_digest(table)
    with pytest.raises(dc.InvalidArgumentError, match="partitioned by"):
        dc.write(table, pa.table({"id": [1], "day": ["a"]}, schema=SCHEMA), partition_by=["id"])
    assert _log_digest(table) == before


def test_unsupported_protocol_is_refused(table: str) -> None:
    path = Path(table) / commit_path(2)
    path.write_text('{"protocol":{"minReaderVersion":3,"minWriterVersion":7,'
                    '"readerFeatures":["geospatial"],"writerFeatures":["geospatial"]}}\n')
    with pytest.raises(dc.UnsupportedProtocolError, match="geospatial"):
        dc.DeltaTable(table)


def test_bad_mode_and_predicate(table: str) -> None:
    data = pa.table({"id": [1], "day": ["a"]}, schema=SCHEMA)
    with pytest.raises(dc.InvalidArgumentError, match="mode"):
        dc.write(table, data, mode="upsert")
    with pytest.raises(dc.InvalidArgumentError, match="overwrite"):
        dc.write(table, data, predicate="day = 'a'")
    with pytest.raises(dc.InvalidArgumentError, match="does not select"):
        dc.write(table, data, mode="overwrite", predicate="day = 'b'")
    with pytest.raises(dc.InvalidArgumentError, match="id"):
        dc.write(table, data, mode="overwrite", predicate="id = 1")


def test_unknown_table_property_is_refused(tmp_path: Path) -> None:
    with pytest.raises(dc.InvalidArgumentError, match="checkpointInterval"):
        dc.DeltaTable.create(str(tmp_path / "x"), SCHEMA,
                             configuration={"delta.checkpointIntervall": "10"})


def _replace_schema(table: str, schema_string: str) -> None:
    import json

    path = Path(table) / commit_path(0)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for a in lines:
        if "metaData" in a:
            a["metaData"]["schemaString"] = schema_string
    path.write_text("".join(json.dumps(a) + "\n" for a in lines))


def test_unsupported_column_type_is_refused_on_open(table: str) -> None:
    _replace_schema(table, '{"type":"struct","fields":[{"name":"v","type":"variant",'
                           '"nullable":true,"metadata":{}},{"name":"day","type":"string",'
                           '"nullable":true,"metadata":{}}]}')
    state_cache.clear()  # a new process opens the damaged table
    with pytest.raises(dc.UnsupportedProtocolError, match="variant") as e:
        dc.DeltaTable(table)
    assert table in str(e.value) and "'v'" in str(e.value)


def test_malformed_schema_string_is_a_corrupt_log(table: str) -> None:
    _replace_schema(table, '{"type":"struct","fields":[{"name":')
    state_cache.clear()  # a new process opens the damaged table
    with pytest.raises(dc.CorruptLogError, match="schemaString") as e:
        dc.DeltaTable(table)
    assert table in str(e.value)



_SOURCE = pa.table({"id": [1, 9], "day": ["a", "z"]})


def _merge(t: dc.DeltaTable, on: str = "t.id = s.id") -> TableMerger:
    return t.merge(_SOURCE, on, source_alias="s", target_alias="t")


#: Each place a row-level verb or a read takes a text, given one that does not parse, and
#: what its error starts with.
UNPARSABLE = [
    ("UPDATE of table", lambda t: t.update({"day": "nope(day)"})),
    ("UPDATE of table", lambda t: t.update({"day": "'x'"}, predicate="id = = 1")),
    ("filter of a read of table", lambda t: t.to_arrow(filter="id = = 1")),
    ("MERGE into table", lambda t: _merge(t, "t.id = = s.id")),
    ("MERGE into table", lambda t: _merge(t).when_matched_delete("t.day = = 1")),
    ("MERGE into table", lambda t: _merge(t).when_matched_update({"day": "nope(1)"})),
    ("MERGE into table", lambda t: _merge(t).when_not_matched_insert(
        {"id": "s.id", "day": "'a"})),
]


@pytest.mark.parametrize(("where", "call"), UNPARSABLE,
                         ids=["set", "predicate", "filter", "on", "clause", "merge-set",
                              "insert"])
def test_a_text_that_does_not_parse_names_the_table_and_the_operation(
        table: str, where: str, call: Callable[[dc.DeltaTable], object]) -> None:
    """As a DELETE's predicate does: the error names the operation and the table, then the
    text and where it stops parsing (before, only the text was named)."""
    before = _log_digest(table)
    with pytest.raises(dc.InvalidArgumentError) as e:
        call(dc.DeltaTable(table))
    assert str(e.value).startswith(where) and table in str(e.value).split(": ")[0], \
        str(e.value)
    assert _log_digest(table) == before


@pytest.mark.parametrize("text", ["CAST(day AS INT) = 1", "id + 9223372036854775807 > 0"])
def test_a_filter_that_fails_on_a_row_says_the_read_failed_not_a_write(
        table: str, text: str) -> None:
    """A read's filter failing on a row as Spark's ANSI mode fails it names the read; only a
    write's errors say that nothing was written."""
    with pytest.raises(dc.ExpressionValueError) as read:
        dc.DeltaTable(table).to_arrow(filter=text)
    message = str(read.value)
    assert message.startswith("filter of a read of table ") and table in message, message
    assert "written" not in message and "write" not in message, message
    before = _log_digest(table)
    with pytest.raises(dc.ExpressionValueError, match="Nothing was written") as write:
        dc.DeltaTable(table).delete(text)
    assert str(write.value).startswith("DELETE"), str(write.value)
    assert _log_digest(table) == before
