"""Row-level operations against a winner committed between their read and their commit.

The winner commits from inside the loser's run, after the loser read the older version and
staged its changes, just before it commits (``commit_between``), so the loser meets the winner in the
commit loop.  Each case compares the table with the serial result computed on plain Python
rows: the winner first, then the loser as it would run on the winner's table.  A loser that
cannot land so must conflict and leave the winner's table as it was.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteReadException,
    ConcurrentModificationException,
)
from deltacommit.io.storage import LocalStore
from deltacommit.protocol.actions import Add
from deltacommit.protocol.log.names import commit_path
from deltacommit.runtime.clock import ManualClock

from .hooks import HookedLogStore, commit_between
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
        with pytest.raises(ConcurrentDeleteReadException, match="read"):
            merge_larger(uri, source, insert)
        assert _rows(uri) == rows
        # Run again after the winner, it makes the insert a serial run makes.
        merge_larger(uri, source, insert)
        assert _rows(uri) == _serial_merge(rows, source, insert)
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


def _read_version(uri: str, version: int) -> int:
    """The version the commit at ``version`` was built on (its commitInfo's readVersion)."""
    (info,) = [e for e in dc.DeltaTable(uri).history() if e["version"] == version]
    read: int = info["readVersion"]
    return read


def _removed(uri: str, version: int) -> set[str]:
    """The paths the commit at ``version`` removes."""
    text = (Path(uri) / commit_path(version)).read_text()
    return {a["remove"]["path"] for a in map(json.loads, text.splitlines()) if "remove" in a}


@pytest.mark.parametrize("winner", ["value", "key"])
def test_a_merge_conflicts_with_an_update_of_a_row_it_matched_but_left_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, winner: str) -> None:
    """Row 3 matches source row 3 but keeps its larger ``v``, which keeps (3, -1) from being
    inserted.  A winner updates row 3: its ``v`` (the new row, under key 3, is one the MERGE's
    condition matches) or its key (to 103: after it the MERGE would insert (3, -1), and no
    row it changes or new row it matches tells; the row it read is gone from its file).
    Either way the MERGE conflicts and leaves the winner's table."""
    uri, rows = _table(tmp_path)
    if winner == "value":
        commit_between(monkeypatch, lambda: dc.DeltaTable(uri).update({"v": "30"}, "id = 3"))
        rows[3] = 30
    else:
        commit_between(monkeypatch, lambda: dc.DeltaTable(uri).update({"id": "103"}, "id = 3"))
        rows[103] = rows.pop(3)
    expected = ConcurrentAppendException if winner == "value" else ConcurrentDeleteReadException
    with pytest.raises(expected):
        merge_larger(uri, {3: -1, 5: 50}, True)
    assert _rows(uri) == rows


@pytest.mark.parametrize("winner", ["delete 7", "update 8", "delete 13", "update 14"])
@pytest.mark.parametrize("changed", [5, 15])
def test_a_merge_lands_over_changes_of_other_rows_of_the_files_it_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, winner: str, changed: int) -> None:
    """The MERGE reads row 3 (matched and left as it was: it keeps (3, -1) from being
    inserted) and updates row ``changed``, of the same file or of the other.  A winner
    deleting or updating another row of either file changes neither: the MERGE lands after
    it, checked row by row (by Spark's file-level rules it would conflict: the winner
    removed a file it read), and the table is the serial result.  A file where the MERGE
    only read rows keeps the winner's entry: the MERGE does not commit it again."""
    uri, rows = _table(tmp_path)
    verb, row = winner.split()
    key = int(row)
    if verb == "delete":
        commit_between(monkeypatch, lambda: dc.DeltaTable(uri).delete(f"id = {key}"))
        rows.pop(key)
    else:
        commit_between(monkeypatch,
                       lambda: dc.DeltaTable(uri).update({"v": "v * 10"}, f"id = {key}"))
        rows[key] *= 10
    source = {3: -1, changed: 50}
    landed = merge_larger(uri, source, True)
    assert _read_version(uri, landed["version"]) == landed["version"] - 2
    assert _rows(uri) == _serial_merge(rows, source, True)
    assert _removed(uri, landed["version"]) == {_holding(uri, changed).path}


def _compact(uri: str) -> None:
    assert dc.DeltaTable(uri).optimize.compact()["numFilesRemoved"] == 2


@pytest.mark.parametrize("later", [None, "delete 3", "delete 7", "update 3"])
@pytest.mark.parametrize("source", [{3: -1, 15: 50}, {3: -1, 25: 25}])
def test_a_merge_follows_a_row_it_read_through_a_compaction(
        tmp_path: Path, later: str | None, source: Rows) -> None:
    """The MERGE reads row 3 (matched, left as it was) and updates row 15 or inserts row
    25.  A compaction moves row 3 and every other row into one new file between the MERGE's
    read and its commit, under the same ids and row commit versions: no conflict, the retry
    lands its change on the new file and records row 3 there.  A ``later`` winner, committed
    as that retry is about to commit, that deletes or updates row 3 there conflicts with the
    retry; one that deletes row 7 does not, and the MERGE lands after both, as in series."""
    uri, rows = _table(tmp_path)
    winners: list[Callable[[], object]] = [lambda: _compact(uri)]
    if later is not None:
        verb, row = later.split()
        key = int(row)
        if verb == "delete":
            winners.append(lambda: dc.DeltaTable(uri).delete(f"id = {key}"))
            rows.pop(key)
        else:
            winners.append(lambda: dc.DeltaTable(uri).update({"id": "103"}, f"id = {key}"))
            rows[103] = rows.pop(key)

    def before_write(version: int) -> None:
        if winners:
            winners.pop(0)()

    log_store = HookedLogStore(LocalStore(uri), before_write)
    table = dc.DeltaTable(uri, log_store=log_store, clock=ManualClock())
    if later is not None and key == 3:
        with pytest.raises(ConcurrentDeleteReadException, match="read"):
            merge_larger(uri, source, True, table)
        assert len(log_store.attempts) == 2  # met the later winner on the retry
        assert _rows(uri) == rows
        return
    landed = merge_larger(uri, source, True, table)
    assert len(log_store.attempts) == 3 if later is not None else 2
    assert _read_version(uri, landed["version"]) == landed["version"] - len(log_store.attempts)
    assert _rows(uri) == _serial_merge(rows, source, True)
    (compacted,) = [a for a in dc.DeltaTable(uri).files() if a.num_records() == 20]
    # The compacted file is committed again only where the MERGE changed a row of it.
    assert (compacted.path in _removed(uri, landed["version"])) == (15 in source)


def _merge_with(uri: str, clauses: str, source: Rows) -> dict[str, Any]:
    """A MERGE by ``id`` of ``source``: ``delete`` deletes the matched rows whose ``v`` the
    source's exceeds (and leaves the others); ``by source`` updates them to the larger ``v``
    and deletes the rows no source row matches from id 18 on; each inserts the source rows
    no target row matches."""
    merger = dc.DeltaTable(uri).merge(
        pa.table({"id": pa.array(list(source), pa.int64()),
                  "v": pa.array(list(source.values()), pa.int64())}), "t.id = s.id", "s", "t")
    if clauses == "delete":
        merger = merger.when_matched_delete("s.v > t.v")
    else:
        merger = merger.when_matched_update_all("s.v > t.v") \
            .when_not_matched_by_source_delete("t.id >= 18")
    return merger.when_not_matched_insert_all().execute()


def _serial_with(rows: Rows, clauses: str, source: Rows) -> Rows:
    out = {k: v for k, v in rows.items()
           if not (clauses == "by source" and k >= 18 and k not in source)}
    for k, v in source.items():
        if k not in out:
            out[k] = v
        elif v > out[k]:
            if clauses == "delete":
                del out[k]
            else:
                out[k] = v
    return out


@pytest.mark.parametrize("winner", [3, 7])
@pytest.mark.parametrize("clauses", ["delete", "by source"])
def test_merges_that_insert_depend_on_every_row_they_matched_and_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clauses: str, winner: int) -> None:
    """A MERGE whose WHEN MATCHED DELETE is false for row 3, or one with a WHEN NOT MATCHED BY
    SOURCE clause beside its update, leaves row 3 matched and unchanged while it changes
    row 5: row 3 keeps (3, -1) from being inserted.  A winner deleting row 3 conflicts (the
    MERGE after it inserts (3, -1)); one deleting row 7 of the same file does not, and the
    MERGE lands after it as in series."""
    uri, rows = _table(tmp_path)
    commit_between(monkeypatch, lambda: dc.DeltaTable(uri).delete(f"id = {winner}"))
    rows.pop(winner)
    source = {3: -1, 5: 50}
    if winner == 3:
        with pytest.raises(ConcurrentDeleteReadException, match="read"):
            _merge_with(uri, clauses, source)
        assert _rows(uri) == rows
        return
    landed = _merge_with(uri, clauses, source)
    assert _read_version(uri, landed["version"]) == landed["version"] - 2
    assert _rows(uri) == _serial_with(rows, clauses, source)
