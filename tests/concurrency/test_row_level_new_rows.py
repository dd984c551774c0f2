"""A row-level operation against a winner that added rows: it conflicts only if a row the
winner added matches its predicate, judged by the row's values as the winner committed them.

Statistics only bound a file's values: a winner's file holding ids 4 and 14 has bounds
[4, 14] although neither matches ``id IN (3, 13)``.  So where the statistics of a winner's new
file admit a match, its live rows are read (deletion vector applied, partition values and
column mapping as any read) and the predicate evaluated on them with the operation's own
semantics: NULL is no match.  The winner commits from inside the loser's run, after the loser
read the table and staged its changes (``commit_between``); each case compares the final table with
the serial result computed on plain Python rows (the winner, then the loser on its table), or,
where the loser must conflict, with the winner's table.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.transaction.transaction import Transaction
from deltacommit.errors import ConcurrentAppendException, ConcurrentModificationException
from deltacommit.ops.rowlevel import KEYS_PRUNED_BY
from deltacommit.protocol.actions import Add

from .hooks import commit_between
from .row_level import ROW_LEVEL, merge_larger

if TYPE_CHECKING:
    from deltacommit.engine.commit.policy import CommitResult

#: A row: (id, v, w, p) with None for NULL or an absent column.
Row = tuple[Any, ...]
COLUMNS = ("id", "v", "w", "p")


def _arrow(rows: Sequence[Row], columns: Sequence[str]) -> pa.Table:
    return pa.table({c: pa.array([r[COLUMNS.index(c)] for r in rows], pa.int64())
                     for c in columns})


def _table(tmp_path: Path, rows: Sequence[Row], columns: Sequence[str] = ("id", "v"),
           mode: str = "none", partition_by: Sequence[str] | None = None) -> str:
    """A table of ``rows`` in files of ten rows."""
    uri = str(tmp_path / "t")
    config = dict(ROW_LEVEL)
    if mode != "none":
        config["delta.columnMapping.mode"] = mode
    dc.write(uri, _arrow(rows, columns), configuration=config, target_file_rows=10,
             partition_by=partition_by)
    return uri


def _append(uri: str, rows: Sequence[Row], columns: Sequence[str] = ("id", "v")) -> None:
    dc.write(uri, _arrow(rows, columns), mode="append")


def _rows(uri: str) -> list[Row]:
    """The table's rows, sorted (a duplicated id shows twice)."""
    data = dc.DeltaTable(uri).to_arrow().to_pylist()
    return sorted((tuple(r.get(c) for c in COLUMNS) for r in data),
                  key=lambda r: tuple((x is None, x or 0) for x in r))


def _sorted(rows: Sequence[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: tuple((x is None, x or 0) for x in r))


def _plain(n: int = 20) -> list[Row]:
    """Ids 0..n-1 with ``v`` = id."""
    return [(i, i, None, None) for i in range(n)]


def _updated(rows: Sequence[Row], where: Callable[[Row], bool | None], add: int) -> list[Row]:
    """``UPDATE SET v = v + add WHERE ...`` on plain rows: only where the condition is TRUE
    (None, SQL's NULL, updates nothing)."""
    return [(r[0], r[1] + add, *r[2:]) if where(r) is True else r for r in rows]


def _loser_lands(uri: str, monkeypatch: pytest.MonkeyPatch, winner: Callable[[], object],
                 loser: Callable[[], object], conflict: bool) -> list[Row]:
    """Run ``loser`` with ``winner`` committing in between: it must conflict (``conflict``),
    leaving the winner's table, or land; the table afterwards."""
    commit_between(monkeypatch, winner)
    if conflict:
        with pytest.raises(ConcurrentAppendException):
            loser()
    else:
        loser()
    return _rows(uri)


@pytest.mark.parametrize("mode", ["none", "name", "id"])
def test_updates_of_interleaved_ids_both_land(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              mode: str) -> None:
    """The winner's new file holds ids 4 and 14 (bounds [4, 14]); neither matches the
    loser's ``id IN (3, 13)``, so the loser lands after it (column mapping or not)."""
    uri = _table(tmp_path, _plain(), mode=mode)
    got = _loser_lands(
        uri, monkeypatch,
        lambda: dc.DeltaTable(uri).update({"v": "v + 100"}, "id IN (4, 14)"),
        lambda: dc.DeltaTable(uri).update({"v": "v + 1000"}, "id IN (3, 13)"), False)
    serial = _updated(_updated(_plain(), lambda r: r[0] in (4, 14), 100),
                      lambda r: r[0] in (3, 13), 1000)
    assert got == _sorted(serial)


@pytest.mark.parametrize("mode", ["none", "name", "id"])
@pytest.mark.parametrize(("appended", "conflict"), [((13, 50), True), ((4, 50), False)])
def test_an_update_conflicts_with_an_added_row_by_its_value(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str,
        appended: tuple[int, int], conflict: bool) -> None:
    """The winner appends rows with ``v`` in ``appended``: bounds that admit ``v IN (3, 13)``
    either way.  A row with ``v`` 13 matches: the loser, which did not update it, must
    conflict; rows with ``v`` 4 and 50 match nothing and the loser lands."""
    uri = _table(tmp_path, _plain(), mode=mode)
    new = [(20 + i, v, None, None) for i, v in enumerate(appended)]
    got = _loser_lands(uri, monkeypatch, lambda: _append(uri, new),
                       lambda: dc.DeltaTable(uri).update({"v": "v + 1000"}, "v IN (3, 13)"),
                       conflict)
    after_winner = _plain() + new
    assert got == _sorted(after_winner if conflict else
                          _updated(after_winner, lambda r: r[1] in (3, 13), 1000))


@pytest.mark.parametrize("hidden", [True, False])
def test_a_matching_row_the_winners_deletion_vector_hides(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hidden: bool) -> None:
    """The winner commits a file again (as RESTORE does) whose rows are (20, v 13) and
    (21, v 50): with the deletion vector that deletes row 20, no live row of it matches
    ``v IN (3, 13)`` and the loser lands; without it, row 20 is back and matches."""
    uri = _table(tmp_path, _plain())
    _append(uri, [(20, 13, None, None), (21, 50, None, None)])
    dc.DeltaTable(uri).delete("id = 20")
    (entry,) = [a for a in dc.DeltaTable(uri).files() if a.deletion_vector
                and a.num_records() == 2]
    dc.DeltaTable(uri).delete("id = 21")
    assert _rows(uri) == _sorted(_plain())
    again: Add = entry if hidden else replace(entry, deletion_vector=None)

    def restore() -> None:
        with dc.DeltaTable(uri).transaction("RESTORE") as txn:
            txn.add([again])

    got = _loser_lands(uri, monkeypatch, restore,
                       lambda: dc.DeltaTable(uri).update({"v": "v + 1000"}, "v IN (3, 13)"),
                       not hidden)
    after_winner = _plain() + ([(21, 50, None, None)] if hidden
                               else [(20, 13, None, None), (21, 50, None, None)])
    assert got == _sorted(_updated(after_winner, lambda r: r[1] in (3, 13), 1000)
                          if hidden else after_winner)


@pytest.mark.parametrize("hidden", [True, False])
def test_a_matching_row_a_winners_inline_deletion_vector_hides(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hidden: bool) -> None:
    """As above with the deletion vector stored inline in the winner's log entry (as other
    writers store small ones): the file of rows (20, v 13) and (21, v 50) comes back with
    row 20 deleted, and the loser lands, or with row 21 deleted, and it conflicts."""
    from deltacommit.protocol.deletion_vectors import encode_bitmap_array, z85_encode

    uri = _table(tmp_path, _plain())
    _append(uri, [(20, 13, None, None), (21, 50, None, None)])
    (whole,) = [a for a in dc.DeltaTable(uri).files() if a.num_records() == 2]
    with dc.DeltaTable(uri).transaction("DELETE") as txn:
        txn.remove([whole])
    bitmap = encode_bitmap_array([0 if hidden else 1])
    inline = {"storageType": "i", "sizeInBytes": len(bitmap), "cardinality": 1,
              "pathOrInlineDv": z85_encode(bitmap + bytes(-len(bitmap) % 4))}

    def restore() -> None:
        with dc.DeltaTable(uri).transaction("RESTORE") as txn:
            txn.add([replace(whole, deletion_vector=inline)])

    got = _loser_lands(uri, monkeypatch, restore,
                       lambda: dc.DeltaTable(uri).update({"v": "v + 1000"}, "v IN (3, 13)"),
                       not hidden)
    after_winner = _plain() + [(21, 50, None, None) if hidden else (20, 13, None, None)]
    assert got == _sorted(_updated(after_winner, lambda r: r[1] in (3, 13), 1000)
                          if hidden else after_winner)


@pytest.mark.parametrize(("appended_w", "conflict"), [((None, 21), False), ((None, 22), True)])
def test_a_row_where_the_predicate_is_null_is_no_match(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, appended_w: tuple[int | None, ...],
        conflict: bool) -> None:
    """``w <> v`` (which statistics cannot judge) is NULL where ``w`` is NULL: the winner's
    row (20, v 20, w NULL) matches it no more than (21, v 21, w 21) does, and the loser
    lands; a row (21, v 21, w 22) matches."""
    start = [(i, i, -1 if i in (3, 13) else i, None) for i in range(20)]
    columns = ("id", "v", "w")
    uri = _table(tmp_path, start, columns)
    new = [(20 + i, 20 + i, w, None) for i, w in enumerate(appended_w)]

    def where(r: Row) -> bool | None:
        return None if r[2] is None or r[1] is None else r[2] != r[1]

    got = _loser_lands(uri, monkeypatch, lambda: _append(uri, new, columns),
                       lambda: dc.DeltaTable(uri).update({"v": "v + 1000"}, "w <> v"),
                       conflict)
    after_winner = start + new
    assert got == _sorted(after_winner if conflict else _updated(after_winner, where, 1000))


@pytest.mark.parametrize("mode", ["none", "name"])
@pytest.mark.parametrize(("appended_v", "conflict"), [(4, False), (3, True)])
def test_partition_values_are_the_rows_values(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, appended_v: int,
        conflict: bool, mode: str) -> None:
    """``v + p = 4`` over the partition column ``p``: the winner's row (20, v, p 1) matches
    only with its partition value, 1 (v 3), and not with v 4 (column mapping or not)."""
    start = [(i, i, None, i % 2) for i in range(20)]
    columns = ("id", "v", "p")
    uri = _table(tmp_path, start, columns, mode=mode, partition_by=["p"])
    new = [(20, appended_v, None, 1)]
    got = _loser_lands(uri, monkeypatch, lambda: _append(uri, new, columns),
                       lambda: dc.DeltaTable(uri).update({"v": "v + 1000"}, "v + p = 4"),
                       conflict)
    after_winner = start + new
    assert got == _sorted(after_winner if conflict else
                          _updated(after_winner, lambda r: r[1] + r[3] == 4, 1000))


def _serial_merge(rows: Sequence[Row], source: dict[int, int], insert: bool) -> list[Row]:
    out = [(r[0], max(r[1], source[r[0]]), *r[2:]) if r[0] in source else r for r in rows]
    present = {r[0] for r in rows}
    if insert:
        out += [(k, v, None, None) for k, v in source.items() if k not in present]
    return out


@pytest.mark.parametrize("insert", [True, False])
def test_upserts_of_interleaved_keys_both_land(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               insert: bool) -> None:
    """Two upserts of interleaved keys (3, 13, 23, 33 and 4, 14, 24, 34): the winner's new
    rows fall within the loser's key range but none has a key of the loser's."""
    uri = _table(tmp_path, _plain())
    theirs = {4: 40, 14: 140, 24: 24, 34: 34}
    mine = {3: 30, 13: 130, 23: 23, 33: 33}
    got = _loser_lands(uri, monkeypatch, lambda: merge_larger(uri, theirs, insert),
                       lambda: merge_larger(uri, mine, insert), False)
    assert got == _sorted(_serial_merge(_serial_merge(_plain(), theirs, insert), mine, insert))


@pytest.mark.parametrize("how", ["insert", "append"])
def test_an_upsert_conflicts_with_a_row_added_under_one_of_its_keys(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """The winner adds a row under a key the loser's upsert inserts (23, by its own upsert) or
    matches (13, appended beside the row there): after the winner the upsert would match it,
    so landing as read would duplicate key 23 or leave the new row 13 as it was."""
    uri = _table(tmp_path, _plain())
    mine = {3: 30, 13: 130, 23: 23}
    if how == "insert":
        theirs: dict[int, int] = {4: 40, 23: 99}

        def winner() -> None:
            merge_larger(uri, theirs, True)

        after_winner = _serial_merge(_plain(), theirs, True)
    else:
        def winner() -> None:
            _append(uri, [(13, 5, None, None), (40, 40, None, None)])

        after_winner = [*_plain(), (13, 5, None, None), (40, 40, None, None)]
    got = _loser_lands(uri, monkeypatch, winner, lambda: merge_larger(uri, mine, True), True)
    assert got == _sorted(after_winner)


@pytest.mark.parametrize("keys", [1500, KEYS_PRUNED_BY + 1])
@pytest.mark.parametrize(("appended", "conflict"), [((101, 1001, 2999), False), ((1000,), True)])
def test_an_upsert_of_many_keys_is_checked_against_every_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: int, appended: tuple[int, ...],
        conflict: bool) -> None:
    """An upsert of many even keys (0, 2, 4, ...) records every key it read, not their range,
    whether its files were pruned by the keys or (beyond ``KEYS_PRUNED_BY``) by their range: a
    winner's rows under odd keys between them match none and the upsert lands; a row under
    key 1,000, which the upsert inserts, would be matched after the winner: a conflict."""
    uri = _table(tmp_path, _plain(40))
    mine = {k: k + 1 for k in range(0, 2 * keys, 2)}
    new = [(k, 7, None, None) for k in appended]
    failures: list[str] = []

    def upsert() -> None:
        try:
            merge_larger(uri, mine, True)
        except ConcurrentAppendException as e:
            failures.append(str(e))
            raise

    got = _loser_lands(uri, monkeypatch, lambda: _append(uri, new), upsert, conflict)
    # The error names the file and shows the start of the key list, not all of it.
    assert all(len(f) < 1_500 and "characters in all" in f and ".parquet" in f
               for f in failures)
    after_winner = [*_plain(40), *new]
    assert got == _sorted(after_winner if conflict else _serial_merge(after_winner, mine, True))


def test_a_conflict_with_an_upsert_of_many_keys_names_its_predicate_in_short(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The conflict names the winner's file and the predicate it matched, whose text for an
    upsert of 20,000 keys is cut to its beginning and its length: an error message (and the
    logs it lands in) is not a copy of the source."""
    uri = _table(tmp_path, _plain(40))
    mine = {k: k + 1 for k in range(0, 40_000, 2)}
    commit_between(monkeypatch, lambda: _append(uri, [(1000, 7, None, None)]))
    with pytest.raises(ConcurrentAppendException) as raised:
        merge_larger(uri, mine, True)
    message = str(raised.value)
    assert "added file part-" in message and "id IN (0, 2, 4" in message
    assert len(message) < 2_000
    assert _rows(uri) == _sorted([*_plain(40), (1000, 7, None, None)])


@pytest.mark.parametrize("unread", ["over the budget", "over the file count", "unreadable",
                                    "truncated"])
def test_a_new_file_not_read_is_judged_by_its_statistics(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unread: str) -> None:
    """The winner's file of rows (20, v 4) and (21, v 50) holds no match, but when it is not
    read (beyond the byte budget or the count of files read, missing from storage when the
    check reads it, or cut short there) its statistics, which admit ``v IN (3, 13)``, decide:
    a conflict."""
    from deltacommit.engine.commit import row_rebase

    uri = _table(tmp_path, _plain())
    new = [(20, 4, None, None), (21, 50, None, None)]
    away: list[tuple[Path, Path]] = []
    content: list[tuple[Path, bytes]] = []

    def winner() -> None:
        _append(uri, new)
        (add,) = [a for a in dc.DeltaTable(uri).files() if a.num_records() == 2]
        path = Path(uri) / add.path
        if unread == "unreadable":
            away.append((path, path.rename(path.with_suffix(".away"))))
        elif unread == "truncated":
            data = path.read_bytes()
            content.append((path, data))
            path.write_bytes(data[:len(data) // 2])

    if unread == "over the budget":
        monkeypatch.setattr(row_rebase, "MATCH_READ_BYTES", 0)
    if unread == "over the file count":
        monkeypatch.setattr(row_rebase, "MATCH_READ_FILES", 0)
    commit_between(monkeypatch, winner)
    with pytest.raises(ConcurrentAppendException, match="may hold rows matching"):
        dc.DeltaTable(uri).update({"v": "v + 1000"}, "v IN (3, 13)")
    for path, moved in away:
        moved.rename(path)
    for path, data in content:
        path.write_bytes(data)
    assert _rows(uri) == _sorted(_plain() + new)


@pytest.mark.parametrize("struct", [False, True], ids=["column-a.b", "struct-a-beside-a.b"])
def test_new_rows_are_judged_by_the_column_a_dotted_name_resolves_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, struct: bool) -> None:
    """Unquoted ``a.b`` is the struct ``a``'s field ``b`` where there is one, else the column
    named ``a.b``: the winner's rows are read by the column the name resolves to, so updates
    of interleaved keys land either way (beside the struct, the column ``a.b`` of the
    winner's rows holds values the loser's predicate names: judging it would conflict)."""
    uri = str(tmp_path / "t")
    ids = pa.array(range(20), pa.int64())
    # Beside the struct, the column ``a.b`` of the rows with b 4 and 14 holds 13 and 3.
    columns: dict[str, Any] = {"a.b": pa.array([(i + 9) % 20 for i in range(20)], pa.int64())
                               if struct else ids, "v": pa.array([0] * 20, pa.int64())}
    if struct:
        columns["a"] = pa.StructArray.from_arrays([ids], ["b"])
    dc.write(uri, pa.table(columns), configuration=ROW_LEVEL, target_file_rows=10)
    commit_between(monkeypatch,
             lambda: dc.DeltaTable(uri).update({"v": "v + 1"}, "a.b IN (4, 14)"))
    assert dc.DeltaTable(uri).update({"v": "v + 10"}, "a.b IN (3, 13)")["num_updated_rows"] == 2
    got = dc.DeltaTable(uri).to_arrow()
    keys = got.column("a").combine_chunks().field("b") if struct else got.column("a.b")
    changed = {k: v for k, v in zip(keys.to_pylist(), got.column("v").to_pylist(), strict=True)
               if v}
    assert changed == {3: 10, 13: 10, 4: 1, 14: 1}


def _entries_of_one_file(uri: str) -> tuple[Add, Add]:
    """A table of ``_plain()`` beside a file of rows (20, v 13) and (21, v 50) whose entry
    deletes row 20 (live: row 21): that entry, and the file's entry without a deletion
    vector (which the winner may commit beside it: two files of the table's set)."""
    _append(uri, [(20, 13, None, None), (21, 50, None, None)])
    (whole,) = [a for a in dc.DeltaTable(uri).files() if a.num_records() == 2]
    dc.DeltaTable(uri).delete("id = 20")
    (hiding,) = [a for a in dc.DeltaTable(uri).files() if a.deletion_vector
                 and a.num_records() == 2]
    assert whole.deletion_vector is None and hiding.path == whole.path
    return hiding, whole


@pytest.mark.parametrize("removed", [False, True], ids=["kept", "removed"])
@pytest.mark.parametrize("hiding_first", [True, False], ids=["hiding-first", "hiding-last"])
def test_each_entry_of_a_file_the_winner_commits_twice_is_judged_by_its_own_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, removed: bool,
        hiding_first: bool) -> None:
    """The table's set of files is keyed by path and deletion vector: the winner may commit
    one data file twice, once with the deletion vector hiding row (20, v 13) and once
    without one (the live entry removed first or not), and readers then see the row.  It
    matches ``v IN (3, 13)``: the loser must conflict, not take the entry that hides it
    (read first, or committed again with the deletion vector it had) to speak for the
    other."""
    uri = _table(tmp_path, _plain())
    hiding, whole = _entries_of_one_file(uri)
    before = _rows(uri)

    def winner() -> None:
        with dc.DeltaTable(uri).transaction("RESTORE") as txn:
            if removed:
                txn.remove([hiding])
            txn.add([hiding, whole] if hiding_first else [whole, hiding])

    got = _loser_lands(uri, monkeypatch, winner,
                       lambda: dc.DeltaTable(uri).update({"v": "v + 1000"}, "v IN (3, 13)"),
                       True)
    after_winner = _sorted([*before, (20, 13, None, None), (21, 50, None, None)])
    assert got == after_winner


@pytest.mark.parametrize("data_change", [True, False], ids=["data-change", "no-data-change"])
@pytest.mark.parametrize("order", ["without first", "without last"])
def test_a_changed_file_the_winner_commits_twice_conflicts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: str, data_change: bool) -> None:
    """The loser deletes id 3 of a file whose entry deletes id 5; the winner removes that
    entry and commits the file twice (with that deletion vector and without one): ids 0..9
    but 5 twice, and 5 once.  In series the DELETE removes both rows of id 3; moving its
    delete onto one of the entries would leave the other's.  The row-level check follows a
    file by its path, so a file committed twice is a conflict, also where the winner says
    its entries change no data (as a compaction does: they are no new rows to judge)."""
    uri = _table(tmp_path, _plain())
    (whole,) = [a for a in dc.DeltaTable(uri).files()
                if json.loads(a.stats or "{}")["minValues"]["id"] == 0]
    dc.DeltaTable(uri).delete("id = 5")
    (hiding,) = [a for a in dc.DeltaTable(uri).files() if a.path == whole.path]
    assert hiding.deletion_vector is not None

    def winner() -> None:
        with dc.DeltaTable(uri).transaction("RESTORE") as txn:
            txn.remove([hiding])
            entries = [whole, hiding] if order == "without first" else [hiding, whole]
            txn.add([replace(a, data_change=data_change) for a in entries])

    commit_between(monkeypatch, winner)
    with pytest.raises(ConcurrentModificationException):
        dc.DeltaTable(uri).delete("id = 3")
    after_winner = [r for r in _plain() if r[0] != 5] + [r for r in _plain() if r[0] < 10]
    assert _rows(uri) == _sorted(after_winner)


@pytest.mark.parametrize("live_first", [True, False], ids=["live-first", "live-last"])
def test_a_file_the_winner_removes_twice_is_judged_by_the_rows_it_brings_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, live_first: bool) -> None:
    """The file of rows (20, v 13) and (21, v 50) is live with the deletion vector deleting
    row 20.  The winner removes that entry and the file's entry without a deletion vector
    (not live: a remove of it changes nothing), and commits the file again with a deletion
    vector deleting row 21 alone: row 20 is back.  Beside the remove without a deletion
    vector the new one only adds deletes, but it is the other remove that was live: the
    file holds a row brought back that matches ``v IN (3, 13)``, and the loser conflicts."""
    uri = _table(tmp_path, _plain())
    hiding, whole = _entries_of_one_file(uri)

    def restore(entry: Add, gone: Add) -> None:
        with dc.DeltaTable(uri).transaction("RESTORE") as txn:
            txn.remove([gone])
            txn.add([entry])

    restore(whole, hiding)
    dc.DeltaTable(uri).delete("id = 21")
    (other,) = [a for a in dc.DeltaTable(uri).files() if a.path == whole.path]
    restore(hiding, other)
    before = _rows(uri)
    assert (20, 13, None, None) not in before and (21, 50, None, None) in before

    def winner() -> None:
        with dc.DeltaTable(uri).transaction("RESTORE") as txn:
            txn.remove([hiding, whole] if live_first else [whole, hiding])
            txn.add([other])

    got = _loser_lands(uri, monkeypatch, winner,
                       lambda: dc.DeltaTable(uri).update({"v": "v + 1000"}, "v IN (3, 13)"),
                       True)
    assert got == _sorted(_plain() + [(20, 13, None, None)])


def test_one_winner_judged_for_two_members_of_a_commit_group(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two upserts of one commit group (one MERGE statement, keys 3 and 13 in files of their
    own) meet one winner whose new file holds ids 2, 13 and 15: its statistics admit both
    members' keys, its rows hold only the second's.  The file is judged once per predicate:
    the first member's answer (no row of id 3) does not speak for the second, which
    conflicts, while the first lands."""
    from deltacommit.engine.group.threads import GroupCommitPolicy

    uri = _table(tmp_path, _plain())
    table = dc.DeltaTable(uri, group_commit=GroupCommitPolicy(max_members=2, max_wait=60))
    committer = table.group_committer
    assert committer is not None
    new = [(2, 20, None, None), (13, 21, None, None), (15, 22, None, None)]
    winning: list[bool] = []

    def winner() -> None:
        winning.append(True)
        _append(uri, new)
        winning.pop()

    staged = threading.Barrier(2, action=winner)
    start = committer.stats.submitted
    real = Transaction.commit

    def commit(txn: Transaction) -> CommitResult:
        if winning:
            return real(txn)
        staged.wait(60)  # both read and staged; the winner commits once, in between
        if threading.current_thread().name == "second":
            assert committer.wait_submitted(start + 1, 60)
        return real(txn)

    monkeypatch.setattr(Transaction, "commit", commit)
    sources = {"first": {3: 30}, "second": {13: 130}}
    out: dict[str, BaseException | None] = {}

    def run(name: str) -> None:
        try:
            merge_larger(uri, sources[name], True, table)
            out[name] = None
        except ConcurrentModificationException as e:
            out[name] = e

    threads = [threading.Thread(target=run, args=(name,), name=name) for name in sources]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert out["first"] is None
    assert isinstance(out["second"], ConcurrentAppendException)
    # One group of both (none moved out of it), checked against the winner's one record.
    stats = committer.stats
    assert (stats.submitted, stats.deferred, stats.failed) == (start + 2, 0, 1)
    assert _rows(uri) == _sorted(_serial_merge(_plain() + new, sources["first"], True))


@pytest.mark.parametrize("partitioned", [False, True])
@pytest.mark.parametrize(("on", "appended", "conflict"), [
    ("t.k = s.k AND t.p = 'x'", [("k010002", "x")], True),
    ("t.k = s.k AND t.p = 'x'", [("k010002", "y")], False),
    ("t.k = s.k AND t.p = s.p", [("k000007", "x"), ("k000014", "y")], False),
    ("t.k = s.k", [(None, "x"), ("k000003", "x")], False),
    ("t.k = s.k", [(None, "x"), ("k019998", "z")], True),
])
def test_an_upsert_of_many_string_keys_is_checked_against_its_keys_and_conjuncts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, partitioned: bool, on: str,
        appended: list[tuple[str | None, str]], conflict: bool) -> None:
    """An upsert of more string keys (k000000, k000002, ...) than prune its files as a list,
    joined on the key alone, beside a target-only conjunct, or with a second key column (a
    partition column or not): a winner's row conflicts only where its key is one of the
    upsert's and the conjunct or the second key admits it; NULL keys match nothing."""
    uri = str(tmp_path / "t")
    schema = pa.schema([("k", pa.string()), ("p", pa.string()), ("v", pa.int64())])
    dc.write(uri, pa.table({"k": [f"k{i:06d}" for i in range(400)],
                            "p": ["x" if i % 2 else "y" for i in range(400)],
                            "v": list(range(400))}, schema=schema),
             configuration=dict(ROW_LEVEL), target_file_rows=50,
             partition_by=["p"] if partitioned else None)
    keys = [f"k{2 * i:06d}" for i in range(KEYS_PRUNED_BY + 1)]
    source = pa.table({"k": keys, "p": ["x"] * len(keys), "v": [-1] * len(keys)}, schema=schema)
    new = pa.table({"k": [k for k, _ in appended], "p": [p for _, p in appended],
                    "v": [-7] * len(appended)}, schema=schema)
    commit_between(monkeypatch, lambda: dc.write(uri, new, mode="append"))

    def upsert() -> object:
        return (dc.DeltaTable(uri).merge(source, on, "s", "t").when_matched_update_all()
                .when_not_matched_insert_all().execute())

    if conflict:
        with pytest.raises(ConcurrentAppendException):
            upsert()
        assert dc.DeltaTable(uri).to_arrow().num_rows == 400 + len(appended)
        return
    upsert()
    rows = dc.DeltaTable(uri).to_arrow().to_pylist()
    # The winner's rows are as it wrote them; every source key is in the table from the
    # upsert (updated where it matched, inserted where not).
    assert sorted((r["k"] or "", r["p"]) for r in rows if r["v"] == -7) == \
        sorted((k or "", p) for k, p in appended)
    assert {r["k"] for r in rows if r["v"] == -1} == set(keys)
