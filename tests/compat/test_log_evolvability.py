"""Delta's ``transaction_log_schema_evolvability`` table (Spark's ``EvolvabilitySuite``): a log
whose lines carry keys no reader knows, beside an action (``{"add": {...},
"some_new_action_alongside_add_action": [...]}``), inside one (``some_new_column_in_add_action``)
and alone (``{"some_new_action": {...}}``).  PROTOCOL.md ("Protocol Evolution") says readers
must ignore them; Spark runs every operation on the table, and so does this suite: each version
reads as deltalake reads it, and writes, deletes, compaction, checkpoints and history work."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from tests.delta_tables import DATA, copy_table, peer_read

NAME = "delta-spark/transaction_log_schema_evolvability"


def _keys(t: pa.Table) -> list[int]:
    return sorted(t.column("key").to_pylist())


def test_the_table_has_the_lines_it_is_made_of() -> None:
    log = (DATA / NAME / "_delta_log" / "00000000000000000005.json").read_text()
    assert '"some_new_action_alongside_add_action"' in log
    assert '"some_new_column_in_add_action"' in log
    assert '{"some_new_action":' in (DATA / NAME / "_delta_log"
                                     / "00000000000000000004.json").read_text()


@pytest.mark.parametrize("version", range(6))
def test_every_version_reads_as_deltalake_reads_it(version: int) -> None:
    uri = str(DATA / NAME)
    ours = dc.DeltaTable(uri, version=version).to_arrow()
    assert _keys(ours) == _keys(peer_read(uri, version=version))
    assert ours.column("key").to_pylist() == ours.column("value").to_pylist()


def test_the_latest_version_holds_the_files_re_added_with_unknown_keys() -> None:
    table = dc.DeltaTable(str(DATA / NAME))
    assert table.version == 5
    # Version 2's overwrite and version 5's re-added files of version 3: 1..9 twice.
    assert _keys(table.to_arrow()) == sorted(list(range(1, 10)) * 2)
    assert sorted(a.path[:14] for a in table.files()) == [
        "part-00000-9f4", "part-00000-f65", "part-00001-bfb", "part-00001-d10"]
    assert [h.get("operation") for h in table.history()][-1] == "WRITE"


def test_writes_deletes_compaction_and_checkpoints_work_on_it(tmp_path: Path) -> None:
    uri = copy_table(NAME, tmp_path)
    rows = pa.table({"key": pa.array(range(10, 20), pa.int32()),
                     "value": pa.array(range(10, 20), pa.int32())})
    dc.write(uri, rows, mode="append")
    expected = sorted(list(range(1, 10)) * 2 + list(range(10, 20)))
    assert _keys(dc.DeltaTable(uri).to_arrow()) == expected
    dc.DeltaTable(uri).set_properties({"delta.enableDeletionVectors": "true"})
    dc.DeltaTable(uri).delete("key = 1")
    expected = [k for k in expected if k != 1]
    assert _keys(dc.DeltaTable(uri).to_arrow()) == expected
    dc.DeltaTable(uri).optimize.compact()
    dc.DeltaTable(uri).checkpoint()
    table = dc.DeltaTable(uri)
    assert len(table.files()) == 1
    assert _keys(table.to_arrow()) == expected
    assert _keys(peer_read(uri)) == expected
    assert table.vacuum(dry_run=True) == []  # nothing past the retention
    assert len(table.history()) == table.version + 1
