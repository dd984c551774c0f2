"""Row-level concurrency end to end: DELETEs with deletion vectors on a table with row
tracking, against concurrent deletes of other rows of the same files, compaction and appends.

Each case opens the loser's table before the winner commits, so the loser's transaction reads
the older version and meets the winner in the commit loop.  With row tracking the loser lands
after the winner, its deletes moved onto the winner's files, and the table holds what the two
in series leave; without it (Spark's file-level rules) the same pair conflicts.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentModificationException,
)
from deltacommit.protocol.expressions.parser import parse_predicate
from deltacommit.protocol.partitions import decode_add_path

from .row_level import ROW_LEVEL

FILE_LEVEL = {"delta.enableDeletionVectors": "true"}


def _table(tmp_path: Path, configuration: dict[str, str]) -> str:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": pa.array(range(20), pa.int64()),
                            "v": [f"x{i}" for i in range(20)]}),
             configuration=configuration, target_file_rows=10)
    return uri


def _read_version(uri: str, version: int) -> int:
    """The version the commit at ``version`` was built on (its commitInfo's readVersion)."""
    (info,) = [e for e in dc.DeltaTable(uri).history() if e["version"] == version]
    read: int = info["readVersion"]
    return read


def _ids(uri: str) -> list[int]:
    return sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist())


def test_deletes_of_other_rows_of_one_file_both_land(tmp_path: Path) -> None:
    uri = _table(tmp_path, ROW_LEVEL)
    winner, loser = dc.DeltaTable(uri), dc.DeltaTable(uri)
    won = winner.delete("id = 1")
    landed = loser.delete("id = 2 OR id = 12")
    # The loser read the version before the winner's and landed after it, checked row by row.
    assert landed["version"] == won["version"] + 1
    assert _read_version(uri, landed["version"]) == won["version"] - 1
    assert _ids(uri) == [i for i in range(20) if i not in (1, 2, 12)]
    # One entry per file: the winner's delete was merged, not dropped or duplicated.
    files = dc.DeltaTable(uri).files()
    assert len(files) == 2
    assert sorted((a.deletion_vector or {}).get("cardinality", 0) for a in files) == [1, 2]


def test_deletes_of_the_same_row_conflict(tmp_path: Path) -> None:
    uri = _table(tmp_path, ROW_LEVEL)
    winner, loser = dc.DeltaTable(uri), dc.DeltaTable(uri)
    winner.delete("id = 1")
    with pytest.raises(ConcurrentDeleteDeleteException, match="id"):
        loser.delete("id = 1 OR id = 2")
    assert _ids(uri) == [i for i in range(20) if i != 1]


def test_rows_moved_by_compaction_are_deleted_where_they_now_live(tmp_path: Path) -> None:
    uri = _table(tmp_path, ROW_LEVEL)
    dc.DeltaTable(uri).delete("id = 0")  # a deletion vector the compaction drops rows by
    compactor, loser = dc.DeltaTable(uri), dc.DeltaTable(uri)
    assert compactor.optimize.compact()["numFilesRemoved"] == 2
    landed = loser.delete("id = 3 OR id = 15")
    assert _read_version(uri, landed["version"]) < landed["version"] - 1  # landed past the compaction
    assert _ids(uri) == [i for i in range(20) if i not in (0, 3, 15)]
    (only,) = dc.DeltaTable(uri).files()
    assert (only.deletion_vector or {}).get("cardinality") == 2


def test_appends_matching_nothing_pass_and_matching_ones_conflict(tmp_path: Path) -> None:
    uri = _table(tmp_path, {**ROW_LEVEL, "delta.isolationLevel": "Serializable"})
    loser = dc.DeltaTable(uri)
    dc.write(uri, pa.table({"id": pa.array([100, 101], pa.int64()), "v": ["a", "b"]}))
    landed = loser.delete("id = 5")  # the new rows cannot match: no conflict
    assert _read_version(uri, landed["version"]) < landed["version"] - 1
    loser = dc.DeltaTable(uri)
    dc.write(uri, pa.table({"id": pa.array([6], pa.int64()), "v": ["again"]}))
    # The new row 6 matches: in series after the append, the DELETE would delete it too.
    with pytest.raises(ConcurrentAppendException, match="holds rows matching id = 6"):
        loser.delete("id = 6")
    assert 6 in _ids(uri)


def test_the_file_level_rules_stay_without_row_tracking(tmp_path: Path) -> None:
    uri = _table(tmp_path, FILE_LEVEL)
    winner, loser = dc.DeltaTable(uri), dc.DeltaTable(uri)
    winner.delete("id = 1")
    with pytest.raises(ConcurrentModificationException):
        loser.delete("id = 2")
    compactor, loser = dc.DeltaTable(uri), dc.DeltaTable(uri)
    compactor.optimize.compact()
    with pytest.raises(ConcurrentModificationException):  # Spark: the compaction's new file
        loser.delete("id = 3")


def test_a_winner_deletion_vector_that_cannot_be_read_is_a_conflict(tmp_path: Path) -> None:
    """The winner's deletion vector is the only account of which rows it deleted: gone from
    storage, it cannot be merged, so the loser fails instead of guessing."""
    uri = _table(tmp_path, ROW_LEVEL)
    winner, loser = dc.DeltaTable(uri), dc.DeltaTable(uri)
    winner.delete("id = 1")
    for a in dc.DeltaTable(uri).files():
        if a.deletion_vector:
            for dv in (tmp_path / "t").glob("deletion_vector_*.bin"):
                dv.unlink()
    with pytest.raises(ConcurrentDeleteDeleteException, match="not read"):
        loser.delete("id = 2")
    # Nothing of the loser was committed: the log's last version is the winner's.
    assert dc.DeltaTable(uri).version == winner.version


def test_rows_of_a_compaction_that_cannot_be_read_are_a_conflict(tmp_path: Path) -> None:
    uri = _table(tmp_path, ROW_LEVEL)
    compactor, loser = dc.DeltaTable(uri), dc.DeltaTable(uri)
    compactor.optimize.compact()
    (new,) = dc.DeltaTable(uri).files()
    (tmp_path / "t" / decode_add_path(new.path)).unlink()
    with pytest.raises(ConcurrentDeleteReadException, match="none of the files"):
        loser.delete("id = 4")


def test_files_without_row_ids_keep_the_file_level_rules(tmp_path: Path) -> None:
    from dataclasses import replace

    uri = _table(tmp_path, ROW_LEVEL)
    t = dc.DeltaTable(uri)
    txn = t.transaction("DELETE")
    add = t.files()[0]
    assert txn.tracks_rows
    assert not txn.record_row_changes(parse_predicate("id = 1"),
                                      [(replace(add, base_row_id=None), 10, [], [1])])
    assert txn.summary().row_level is None
    # Later changes of the same transaction stay file-level too.
    assert not txn.record_row_changes(parse_predicate("id = 2"), [(add, 10, [], [2])])
    assert txn.summary().row_level is None
