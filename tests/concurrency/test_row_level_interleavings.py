"""Row-level operations against a winner committed between their read and their commit.

The winner commits from inside the loser's run, after the loser read the older version and
staged its changes, just before it commits (``commit_between``), so the loser meets the winner in the
commit loop.  Each case compares the table with the serial result computed on plain Python
rows: the winner first, then the loser as it would run on the winner's table.  A loser that
cannot land so must conflict and leave the winner's table as it was.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.errors import ConcurrentModificationException
from deltacommit.protocol.actions import Add

from .hooks import commit_between
from .row_level import ROW_LEVEL, merge_larger

Rows = dict[int, int]


def _table(tmp_path: Path) -> tuple[str, Rows]:
    """Ids 0..19, ``v`` = id, in two files of ten rows."""
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": pa.array(range(20), pa.int64()),
                            "v": pa.array(range(20), pa.int64())}),
             configuration=ROW_LEVEL, target_file_rows=10)
    return uri, {i: i for i in range(20)}


def _rows(uri: str) -> Rows:
    table = dc.DeltaTable(uri).to_arrow()
    out = {int(r["id"]): int(r["v"]) for r in table.to_pylist()}
    assert len(out) == table.num_rows, "a row is duplicated"
    return out


def _serial_merge(rows: Rows, source: Rows, insert: bool) -> Rows:
    out = dict(rows)
    for k, v in source.items():
        if k in out:
            out[k] = max(out[k], v)
        elif insert:
            out[k] = v
    return out


@pytest.mark.parametrize("insert", [True, False])
def test_a_merge_over_a_deleted_row_it_matched_but_left_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, insert: bool) -> None:
    """Row 3 matches source row 3 but keeps its larger ``v``: it only keeps that source row
    from being inserted.  A winner deletes row 3; the MERGE after it inserts (3, -1).  Landed
    on top of the winner without the insert, the row would be lost: the MERGE must conflict.
    Without a WHEN NOT MATCHED clause the deleted row decides nothing and the MERGE lands."""
    uri, rows = _table(tmp_path)
    commit_between(monkeypatch, lambda: dc.DeltaTable(uri).delete("id = 3"))
    source = {3: -1, 5: 50}
    rows.pop(3)
    if insert:
        with pytest.raises(ConcurrentModificationException):
            merge_larger(uri, source, insert)
        assert _rows(uri) == rows
    else:
        merge_larger(uri, source, insert)
        assert _rows(uri) == _serial_merge(rows, source, insert)


def _holding(uri: str, row: int) -> Add:
    """The live entry of the file holding ``row`` (ids 0..9 are one file, 10..19 the other)."""
    (add,) = [a for a in dc.DeltaTable(uri).files()
              if json.loads(a.stats or "{}")["minValues"]["id"] == row // 10 * 10]
    return add


def _restore(uri: str, entry: Add) -> None:
    """Commit ``entry`` (an earlier entry of a live file) again in place of the live one, as
    RESTORE does: its deletion vector comes back with it."""
    now = _holding(uri, 0)
    with dc.DeltaTable(uri).transaction("RESTORE") as txn:
        txn.remove([now])
        txn.add([entry])


@pytest.mark.parametrize("winner", ["restore", "delete"])
def test_a_delete_over_a_file_committed_again_that_it_did_not_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, winner: str) -> None:
    """The DELETE matches row 2, already deleted when it read the table, and changes only the
    other file.  A ``restore`` winner commits the first file again with a deletion vector as
    large as the one it replaces but over other rows: row 1 deleted again, row 2 brought
    back.  After it the DELETE would delete row 2: it must conflict (or delete it), not land
    with row 2 alive.  A ``delete`` winner only deletes row 4 of that file: no row comes
    back, and the DELETE lands."""
    uri, rows = _table(tmp_path)
    dc.DeltaTable(uri).delete("id = 1")
    deleted_one = _holding(uri, 0)
    _restore(uri, replace(deleted_one, deletion_vector=None))  # back to no row deleted
    dc.DeltaTable(uri).delete("id = 2")
    rows.pop(2)
    if winner == "restore":
        commit_between(monkeypatch, lambda: _restore(uri, deleted_one))
        rows[2] = 2
        rows.pop(1)
    else:
        commit_between(monkeypatch, lambda: dc.DeltaTable(uri).delete("id = 4"))
        rows.pop(4)
    serial = {k: v for k, v in rows.items() if k not in (2, 15)}
    try:
        landed = dc.DeltaTable(uri).delete("id = 2 OR id = 15")
    except ConcurrentModificationException:
        assert winner == "restore"
        assert _rows(uri) == rows
    else:
        assert _rows(uri) == serial
        assert landed["version"] == dc.DeltaTable(uri).version
