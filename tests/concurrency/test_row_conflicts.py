"""Row-level conflict checks (``protocol.row_conflicts`` through ``conflicts.check_conflicts``).

A model of one data file with row ids: a row-level transaction read it with some rows deleted
and deletes (or rewrites) others; a concurrent winner deletes rows of the same file with a new
deletion vector, compacts it into new files (keeping ids and commit versions, perhaps dropping
or updating rows as it goes), appends rows, or touches another file.  The check must conflict
exactly when the winner changed a row the transaction changed or added a row its predicate
matches, and otherwise say how the retry's deletes land on the winner's files so that the
table afterwards holds what the two in series would have left.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deltacommit.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentModificationException,
)
from deltacommit.protocol.actions import Add
from deltacommit.protocol.conflicts import (
    IsolationLevel,
    TransactionSummary,
    WinningCommit,
    check_conflicts,
)
from deltacommit.protocol.expressions.parser import parse_predicate
from deltacommit.protocol.row_changes import (
    ChangedFile,
    MovedRows,
    RowLevelReads,
    RowRebase,
    match_key,
    rows,
)

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
DV = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 1,
      "sizeInBytes": 10}
BASE, VERSION = 1000, 3


def _add(path: str, n: int, ids: list[int] | None = None, deleted: int = 0,
         data_change: bool = True) -> Add:
    values = ids if ids is not None else list(range(n))
    stats = json.dumps({"numRecords": n, "minValues": {"id": min(values)} if values else {},
                        "maxValues": {"id": max(values)} if values else {},
                        "nullCount": {"id": 0}})
    return Add(path, {}, 1, 1, data_change=data_change, stats=stats,
               deletion_vector={**DV, "cardinality": deleted} if deleted else None,
               base_row_id=BASE, default_row_commit_version=VERSION)


def _summary(changed: ChangedFile, predicate: str = "id >= 0 AND id < 10",
             level: IsolationLevel = IsolationLevel.SERIALIZABLE) -> TransactionSummary:
    reads = RowLevelReads(parse_predicate(predicate), SCHEMA, (), {}, {changed.key: changed})
    return TransactionSummary(operation="DELETE", partition_columns=(), partition_types={},
                              isolation_level=level, read_predicates=(parse_predicate("TRUE"),),
                              read_whole_table=True, removed_files=frozenset({changed.key}),
                              row_level=reads)


@st.composite
def reads(draw: st.DrawFn) -> tuple[int, Any, Any]:
    """A file of n rows: the rows deleted when read, and the (live) rows the transaction
    changes."""
    n = draw(st.integers(2, 40))
    before = draw(st.sets(st.integers(0, n - 1), max_size=n - 1))
    live = sorted(set(range(n)) - before)
    changed = draw(st.sets(st.sampled_from(live), min_size=1))
    return n, rows(sorted(before)), rows(sorted(changed))


def _changed(n: int, before: Any, changed: Any) -> ChangedFile:
    return ChangedFile(_add("f.parquet", n, deleted=len(before)), n, before, changed,
                       changed + BASE, np.full(len(changed), VERSION, dtype=np.int64))


def _compaction(n: int, deleted: int, first: list[int], second: list[int],
                updated: set[int]) -> WinningCommit:
    """A compaction of ``f.parquet`` (``n`` rows, ``deleted`` of them deleted) into
    ``g1.parquet`` and ``g2.parquet`` holding its rows ``first`` and ``second`` in that order,
    under their stable ids; the rows ``updated`` with a new row commit version (7)."""
    winner = WinningCommit(5, "OPTIMIZE")
    winner.removed.append(_add("f.parquet", n, deleted=deleted).to_remove(1, False))
    for name, part in (("g1.parquet", first), ("g2.parquet", second)):
        if not part:
            continue
        ids = [BASE + r for r in part]
        winner.added.append(_add(name, len(part), ids, data_change=False))
        versions = [7 if r in updated else VERSION for r in part]
        winner.rows.moved[name] = MovedRows(np.asarray(ids, np.int64),
                                            np.asarray(versions, np.int64),
                                            np.arange(len(part), dtype=np.int64))
    return winner


def _check(summary: TransactionSummary, winner: WinningCommit) -> RowRebase | None:
    return check_conflicts(summary, winner, "t")


@st.composite
def reads_and_kept(draw: st.DrawFn) -> tuple[int, Any, Any, Any]:
    """A file of n rows: the rows deleted when read, the live rows the transaction changes
    (perhaps none: a file it only read) and the live rows it read and left as they were (at
    least one: a MERGE's matched rows that keep their source rows from being inserted)."""
    n = draw(st.integers(2, 40))
    before = draw(st.sets(st.integers(0, n - 1), max_size=n - 1))
    live = sorted(set(range(n)) - before)
    kept = draw(st.sets(st.sampled_from(live), min_size=1))
    others = [r for r in live if r not in kept]
    changed = draw(st.sets(st.sampled_from(others))) if others else set()
    return n, rows(sorted(before)), rows(sorted(changed)), rows(sorted(kept))


def _changed_and_read(n: int, before: Any, changed: Any, kept: Any) -> ChangedFile:
    return dataclasses.replace(_changed(n, before, changed), read=kept, read_ids=kept + BASE,
                               read_versions=np.full(len(kept), VERSION, dtype=np.int64))


@settings(max_examples=300, deadline=None)
@given(reads_and_kept(), st.data())
def test_a_winner_deleting_rows_of_a_file_whose_rows_were_read(
        read: tuple[int, Any, Any, Any], data: st.DataObject) -> None:
    """A winner deleting rows by a new deletion vector over a file where the transaction
    changed some rows and read others: a row read deleted conflicts as a row changed does;
    otherwise the rows read are carried onto the winner's entry, and the retry deletes its
    changed rows alone (a file only read is not written again)."""
    n, before, changed, kept = read
    live = sorted(set(range(n)) - set(before.tolist()))
    theirs = rows(sorted(data.draw(st.sets(st.sampled_from(live), min_size=1))))
    now = np.union1d(before, theirs)
    winner = WinningCommit(5, "DELETE")
    winner.removed.append(_add("f.parquet", n, deleted=len(before)).to_remove(1))
    again = _add("f.parquet", n, deleted=len(now))
    winner.added.append(again)
    winner.rows.deletion_vectors["f.parquet"] = now
    summary = _summary(_changed_and_read(n, before, changed, kept))
    if len(np.intersect1d(theirs, changed)):
        with pytest.raises(ConcurrentDeleteDeleteException):
            _check(summary, winner)
        return
    if len(np.intersect1d(theirs, kept)):
        with pytest.raises(ConcurrentDeleteReadException, match="read"):
            _check(summary, winner)
        return
    plan = _check(summary, winner)
    assert plan is not None
    (f,) = plan.files
    assert f.target is again
    assert f.changed.tolist() == changed.tolist()
    assert f.read.tolist() == kept.tolist() and f.read_ids.tolist() == (kept + BASE).tolist()
    assert f.writes == bool(len(changed))
    assert f.deleted_before.tolist() == now.tolist()


@settings(max_examples=300, deadline=None)
@given(reads_and_kept(), st.data())
def test_a_winner_compacting_a_file_whose_rows_were_read(
        read: tuple[int, Any, Any, Any], data: st.DataObject) -> None:
    """A compaction of the file into new files, perhaps dropping or updating rows: a row read
    dropped or updated (a new row commit version) conflicts as a row changed does; a row
    read moved under its id and commit version is followed to where it lives now."""
    n, before, changed, kept = read
    live = sorted(set(range(n)) - set(before.tolist()))
    dropped = data.draw(st.sets(st.sampled_from(live)))
    updated = data.draw(st.sets(st.sampled_from(live)))
    stay = [r for r in data.draw(st.permutations(live)) if r not in dropped]
    split = data.draw(st.integers(0, len(stay)))
    winner = _compaction(n, len(before), stay[:split], stay[split:], updated)
    summary = _summary(_changed_and_read(n, before, changed, kept))
    gone = set(dropped) | set(updated)
    if gone & (set(changed.tolist()) | set(kept.tolist())):
        with pytest.raises(ConcurrentDeleteReadException):
            _check(summary, winner)
        return
    plan = _check(summary, winner)
    assert plan is not None
    landed: dict[int, str] = {}
    carried: dict[int, str] = {}
    for f in plan.files:
        ids = winner.rows.moved[f.target.path].ids
        landed.update({int(ids[p]) - BASE: f.target.path for p in f.changed})
        carried.update({int(ids[p]) - BASE: f.target.path for p in f.read})
        assert f.read_ids.tolist() == [int(ids[p]) for p in f.read]
        assert f.read_versions.tolist() == [VERSION] * len(f.read)
        assert f.writes == bool(len(f.changed))
    assert sorted(landed) == changed.tolist()
    assert sorted(carried) == kept.tolist()


@settings(max_examples=300, deadline=None)
@given(reads(), st.data())
def test_a_winner_deleting_rows_of_the_same_file(read: tuple[int, Any, Any],
                                                 data: st.DataObject) -> None:
    n, before, changed = read
    live = sorted(set(range(n)) - set(before.tolist()))
    theirs = rows(sorted(data.draw(st.sets(st.sampled_from(live), min_size=1))))
    now = np.union1d(before, theirs)
    winner = WinningCommit(5, "DELETE")
    winner.removed.append(_add("f.parquet", n, deleted=len(before)).to_remove(1))
    again = _add("f.parquet", n, deleted=len(now))
    winner.added.append(again)
    winner.rows.deletion_vectors["f.parquet"] = now
    summary = _summary(_changed(n, before, changed))
    if len(np.intersect1d(theirs, changed)):
        with pytest.raises(ConcurrentDeleteDeleteException):
            _check(summary, winner)
        return
    plan = _check(summary, winner)
    assert plan is not None and len(plan.files) == 1
    (f,) = plan.files
    assert f.target is again
    # The retry deletes the union: the winner's rows are never brought back.
    assert np.union1d(f.deleted_before, f.changed).tolist() == \
        np.union1d(now, changed).tolist()


@settings(max_examples=300, deadline=None)
@given(reads(), st.data())
def test_a_winner_compacting_the_file(read: tuple[int, Any, Any], data: st.DataObject) -> None:
    n, before, changed = read
    live = sorted(set(range(n)) - set(before.tolist()))
    dropped = data.draw(st.sets(st.sampled_from(live)))  # deleted while compacting
    updated = data.draw(st.sets(st.sampled_from(live)))  # rewritten: a new commit version
    kept = [r for r in live if r not in dropped]
    order = data.draw(st.permutations(kept))
    split = data.draw(st.integers(0, len(order)))
    winner = _compaction(n, len(before), order[:split], order[split:], updated)
    summary = _summary(_changed(n, before, changed))
    lost = set(changed.tolist()) & (set(dropped) | set(updated))
    if lost:
        with pytest.raises(ConcurrentDeleteReadException):
            _check(summary, winner)
        return
    plan = _check(summary, winner)
    assert plan is not None
    landed = {}
    for f in plan.files:
        ids = winner.rows.moved[f.target.path].ids
        landed.update({int(ids[p]) - BASE: f.target.path for p in f.changed})
        assert f.changed_ids.tolist() == [int(ids[p]) for p in f.changed]
    # Every row the transaction changed, and only those, is deleted where it now lives.
    assert sorted(landed) == changed.tolist()


@settings(max_examples=200, deadline=None)
@given(reads(), st.lists(st.integers(-20, 40), min_size=1, max_size=8), st.booleans())
def test_a_winner_appending_rows(read: tuple[int, Any, Any], new_ids: list[int],
                                 blind: bool) -> None:
    n, before, changed = read
    winner = WinningCommit(5, "WRITE", is_blind_append=blind)
    winner.added.append(_add("new.parquet", len(new_ids), new_ids))
    for level in (IsolationLevel.SERIALIZABLE, IsolationLevel.WRITE_SERIALIZABLE):
        summary = _summary(_changed(n, before, changed), "id >= 0 AND id < 10", level)
        matches = any(0 <= i < 10 for i in new_ids)
        counted = level is IsolationLevel.SERIALIZABLE or not blind
        disjoint = max(new_ids) < 0 or min(new_ids) >= 10
        if matches and counted:
            with pytest.raises(ConcurrentAppendException):
                _check(summary, winner)
        elif disjoint or not counted:
            assert _check(summary, winner) is None


def test_the_file_level_rules_stay_without_row_level_reads() -> None:
    summary = TransactionSummary(operation="DELETE", partition_columns=(), partition_types={},
                                 isolation_level=IsolationLevel.SERIALIZABLE,
                                 read_files=frozenset({"f.parquet"}),
                                 read_predicates=(parse_predicate("TRUE"),),
                                 removed_files=frozenset({"f.parquet"}))
    winner = WinningCommit(5, "OPTIMIZE")
    winner.removed.append(_add("f.parquet", 4).to_remove(1, False))
    with pytest.raises(ConcurrentDeleteReadException):
        _check(summary, winner)


def test_unread_winner_files_conflict() -> None:
    """What the engine did not read of a winner is taken as changed."""
    n, before, changed = 10, rows([]), rows([3])
    summary = _summary(_changed(n, before, changed))
    winner = WinningCommit(5, "DELETE")
    winner.removed.append(_add("f.parquet", n).to_remove(1))
    winner.added.append(_add("f.parquet", n, deleted=1))
    with pytest.raises(ConcurrentDeleteDeleteException, match="not read"):
        _check(summary, winner)
    compaction = WinningCommit(6, "OPTIMIZE")
    compaction.removed.append(_add("f.parquet", n).to_remove(1, False))
    compaction.added.append(_add("g.parquet", n, data_change=False))
    with pytest.raises(ConcurrentDeleteReadException, match="none of the files"):
        _check(summary, compaction)


def test_a_winner_touching_other_files_needs_nothing() -> None:
    summary = _summary(_changed(10, rows([]), rows([3])))
    winner = WinningCommit(5, "DELETE")
    winner.removed.append(_add("other.parquet", 10).to_remove(1))
    winner.added.append(_add("other.parquet", 10, deleted=2))
    assert _check(summary, winner) is None
    with pytest.raises(ConcurrentModificationException):
        metadata_winner = WinningCommit(6, "SET TBLPROPERTIES")
        from deltacommit.protocol.actions import Metadata

        metadata_winner.metadata = Metadata(id="x", schema_string="{}", partition_columns=[],
                                            configuration={"a": "b"})
        _check(summary, metadata_winner)


def test_a_file_committed_again_with_rows_restored_holds_new_rows() -> None:
    """A winner that commits a file again with fewer deleted rows brings rows back: they are
    new rows to the predicate, unlike a deletion vector that grew."""
    summary = _summary(_changed(10, rows([]), rows([3])), "id >= 0 AND id < 10")
    other = _add("other.parquet", 10, list(range(5, 15)), deleted=2)
    for restored, conflict in ((1, True), (3, False)):
        winner = WinningCommit(5, "RESTORE")
        winner.removed.append(other.to_remove(1))
        winner.added.append(_add("other.parquet", 10, list(range(5, 15)), deleted=restored))
        if conflict:
            with pytest.raises(ConcurrentAppendException):
                _check(summary, winner)
        else:
            assert _check(summary, winner) is None


@settings(max_examples=300, deadline=None)
@given(reads(), st.data())
def test_a_chain_of_winners_never_loses_a_delete(read: tuple[int, Any, Any],
                                                 data: st.DataObject) -> None:
    """Winners one after another, each deleting rows of the file where the transaction's
    rows now live or compacting it into new files (ids and commit versions kept, perhaps
    dropping or updating rows).  The transaction changed some rows and read others (perhaps
    none) whose existence decides its outcome.  It conflicts exactly when a winner changed
    one of either; otherwise, after each rebase, the rows deleted where its rows live are the
    winners' deletes and its own, by row id: nothing restored, nothing lost; and every row
    read is recorded where it lives now, so the next winner is checked against it there."""
    from deltacommit.protocol.row_changes import rebased_reads

    n, before, changed = read
    others = [p for p in range(n) if p not in set(before.tolist()) | set(changed.tolist())]
    kept = rows(sorted(data.draw(st.sets(st.sampled_from(others))))) if others else rows([])
    summary = _summary(_changed_and_read(n, before, changed, kept))
    # The table as the winners leave it: each live id's file and position.
    where = {BASE + p: ("f.parquet", p) for p in range(n) if p not in set(before.tolist())}
    physical = {"f.parquet": n}
    mine = {BASE + int(p) for p in changed}
    depends = mine | {BASE + int(p) for p in kept}
    for step in range(data.draw(st.integers(1, 3))):
        target = data.draw(st.sampled_from(sorted({f for f, _ in where.values()})))
        live_ids = sorted(i for i, (f, _) in where.items() if f == target)
        winner = WinningCommit(10 + step, "DELETE")
        old_deleted = physical[target] - len(live_ids)
        winner.removed.append(_add(target, physical[target], deleted=old_deleted).to_remove(1))
        if data.draw(st.booleans()):  # a delete of some rows, by deletion vector
            theirs = set(data.draw(st.sets(st.sampled_from(live_ids), min_size=1))) \
                if live_ids else set()
            positions = {where[i][1] for i in theirs}
            dead = sorted(set(range(physical[target])) - {where[i][1] for i in live_ids}
                          | positions)
            winner.added.append(_add(target, physical[target], deleted=len(dead)))
            winner.rows.deletion_vectors[target] = rows(dead)
            lost = theirs & depends
            for i in theirs:
                del where[i]
        else:  # compaction into a new file, perhaps dropping or updating rows
            dropped = set(data.draw(st.sets(st.sampled_from(live_ids)))) if live_ids else set()
            updated = set(data.draw(st.sets(st.sampled_from(live_ids)))) if live_ids else set()
            kept = [i for i in data.draw(st.permutations(live_ids)) if i not in dropped]
            name = f"g{step}.parquet"
            if kept:
                winner.operation = "OPTIMIZE"
                winner.added.append(_add(name, len(kept), kept, data_change=False))
                winner.rows.moved[name] = MovedRows(
                    np.asarray(kept, np.int64),
                    np.asarray([7 if i in updated else VERSION for i in kept], np.int64),
                    np.arange(len(kept), dtype=np.int64))
                physical[name] = len(kept)
            lost = (dropped | updated) & depends
            for i in live_ids:
                del where[i]
            for p, i in enumerate(kept):
                where[i] = (name, p)
        if lost:
            with pytest.raises((ConcurrentDeleteDeleteException, ConcurrentDeleteReadException)):
                _check(summary, winner)
            return
        plan = _check(summary, winner)
        if plan is not None:
            assert summary.row_level is not None
            summary = dataclasses.replace(summary,
                                          row_level=rebased_reads(summary.row_level, plan))
        reads_now = summary.row_level
        assert reads_now is not None
        # Every row of the transaction is marked where it lives now, and nothing else.
        marked = set()
        marked_read = set()
        for c in reads_now.files.values():
            key = c.key
            for positions, ids_kept, into in ((c.changed, c.changed_ids, marked),
                                              (c.read, c.read_ids, marked_read)):
                for p, i in zip(positions.tolist(), ids_kept.tolist(), strict=True):
                    held = [j for j, (f, q) in where.items() if f == key and q == p]
                    assert held == [i], (key, p)
                    into.add(i)
            # The rows the retry's deletion vector starts from are exactly those the
            # winners left deleted: none restored, none forgotten.
            live_here = {q for f, q in where.values() if f == key}
            assert set(c.deleted_before.tolist()) == set(range(physical[key])) - live_here
        assert marked == mine
        assert marked_read == depends - mine


def test_a_file_committed_again_with_another_deletion_vector_of_no_fewer_rows() -> None:
    """A deletion vector no smaller than the one it replaces may still bring rows back (it
    deletes other rows): the file holds new rows unless the engine read that it kept every
    row deleted before."""
    summary = _summary(_changed(10, rows([]), rows([3])), "id >= 0 AND id < 10")
    old = _add("other.parquet", 10, list(range(5, 15)), deleted=2)
    other_dv = {**DV, "offset": 99, "cardinality": 2}
    for kept, conflict in ((None, True), (False, True), (True, False)):
        winner = WinningCommit(5, "RESTORE")
        winner.removed.append(old.to_remove(1))
        winner.added.append(dataclasses.replace(old, deletion_vector=other_dv))
        if kept is not None:
            winner.rows.kept_deletes["other.parquet"] = kept
        if conflict:
            with pytest.raises(ConcurrentAppendException):
                _check(summary, winner)
        else:
            assert _check(summary, winner) is None


def test_a_new_file_read_to_hold_no_matching_row_is_no_conflict() -> None:
    """Statistics admit a match in the winner's new file (ids 5..15 against ``id >= 0 AND
    id < 10``); the engine read its live rows: where none matches, it holds no new row to the
    predicate; where one does, or the file was not read, or was read for another predicate,
    it conflicts."""
    summary = _summary(_changed(10, rows([]), rows([3])), "id >= 0 AND id < 10")
    assert summary.row_level is not None
    predicate = summary.row_level.predicate
    new = _add("new.parquet", 2, [5, 15])
    for found, conflict in ((False, False), (True, True), (None, True), ("other", True),
                            ("other entry", True)):
        winner = WinningCommit(5, "WRITE")
        winner.added.append(new)
        if found == "other":
            winner.rows.matching[match_key(parse_predicate("id >= 0"), new)] = False
        elif found == "other entry":
            # the same data file with a deletion vector: another file of the table's set
            winner.rows.matching[match_key(predicate, dataclasses.replace(
                new, deletion_vector=DV))] = False
        elif found is not None:
            winner.rows.matching[match_key(predicate, new)] = bool(found)
        if conflict:
            with pytest.raises(ConcurrentAppendException):
                _check(summary, winner)
        else:
            assert _check(summary, winner) is None


def test_a_predicate_given_as_its_builder_is_built_once_and_carried_built() -> None:
    """A MERGE of many keys gives its predicate as the function that builds it: built at the
    first check that needs it, once, and carried built by the rebase (``rebased_reads``), so a
    chain of winners does not build it again."""
    from deltacommit.protocol.row_changes import rebased_reads

    built: list[int] = []

    def predicate() -> Any:
        built.append(1)
        return parse_predicate("id IN (3, 13)")

    changed = ChangedFile(_add("a.parquet", 20), 20, rows([]), rows([3]), rows([BASE + 3]),
                          rows([VERSION]))
    reads = RowLevelReads(predicate, SCHEMA, (), {}, {changed.key: changed})
    assert not built
    assert reads.predicate.to_sql() == "id IN (3, 13)"
    assert reads.predicate is reads.predicate and len(built) == 1
    again = rebased_reads(reads, RowRebase(()))
    assert again.predicate is reads.predicate and len(built) == 1


def test_a_predicate_s_text_is_kept_with_it_not_beyond_it() -> None:
    """The SQL text keying the value check's answers is computed once per predicate and lives
    as long as the predicate: a process that checked MERGEs of 100,000 keys does not hold
    their trees and texts once they are done."""
    import gc
    import weakref

    from deltacommit.protocol.expressions.ast import Column, InList, lit
    from deltacommit.protocol.row_changes import match_key

    class Probe(InList):  # an IN list that can be watched for collection
        pass

    predicate = Probe(Column(("id",)), tuple(lit(k) for k in range(100)))
    gone = weakref.ref(predicate)
    text = match_key(predicate, _add("a.parquet", 2))[0]
    assert text == predicate.to_sql()
    assert match_key(predicate, _add("b.parquet", 2))[0] is text
    del predicate
    gc.collect()
    assert gone() is None
