"""Row-level conflict detection: which rows a concurrent winner changed.  Pure.

Delta's conflict rules work file by file: an operation that rewrote rows of a file conflicts
with any concurrent commit that removed the file, and a DELETE, UPDATE or MERGE with any
concurrent commit that added files where it read.  On a table with deletion vectors and row
tracking, every row has a stable id (``baseRowId`` plus its position, or the id compaction
materialized in the hidden column) and a row commit version, and a change to some rows of a
file is a new deletion vector over the same file.  So a row-level operation records what its
outcome depends on (``RowLevelReads``): the rows it deleted or rewrote, by position and by
stable id, the rows it read and left as they were but whose existence decides its outcome
(a MERGE's target rows that matched a source row and stayed unchanged: each keeps its
source row from being inserted), and the predicate that chose them.  A concurrent winner
then conflicts with it only if

1. the winner added rows the predicate matches: files with new rows (not a file it
   committed again with a deletion vector deleting more rows, not files a compaction wrote
   with ``dataChange=false``) that partition values and statistics (``file_pruning``) cannot
   prove hold no such row, unless the engine read the file's live rows and found none where
   the predicate is TRUE (``WinnerRows.matching``: bounds [4, 14] admit ``id IN (3, 13)``,
   rows 4 and 14 do not) (``ConcurrentAppendException``).  A data file the winner
   commits more than once (two deletion vectors: two files of the table's set, each with
   its own live rows), or whose entries it removes more than once, holds new rows entry by
   entry, whatever it held before; or
2. the winner changed one of its rows, changed or read alike (where the winner commits a
   data file more than once and removed a file of this operation, that is a conflict: the
   checks below follow a file by its path):

   - the winner committed one of its files again with a new deletion vector: the rows it
     deleted since this operation read the file (its DV less the DV read) must not meet the
     rows this operation changed (``ConcurrentDeleteDeleteException``) nor those it read
     (``ConcurrentDeleteReadException``: a serial run after the winner would not find them,
     and would insert what they kept out), and must include every row deleted when it was
     read (a DV that lost rows is a change this check cannot follow); otherwise the retry
     merges the two: its DV is the union of both on the winner's entry of the file;
   - the winner removed one of its files without committing it again: every row this
     operation changed or read must be in a file the winner added, under the same stable id
     and with the row commit version it had (a row moved by compaction keeps both; a row a
     winner updated gets its commit version); otherwise ``ConcurrentDeleteReadException``.
     The retry deletes its changed rows from the files that now hold them.

The rows read are checked as the rows changed but never written: the retry deletes none of
them, and a file holding only rows read is not committed again.  Its record follows them to
the winner's files (``rebased_reads``), so a later winner is checked against them where they
live now.

The records (``RowLevelReads``, ``WinnerRows``, ``RowRebase``) are in ``row_changes``.
What the winner's deletion vectors and new files hold is read by the engine
(``engine.commit.row_rebase``) and handed in as ``WinnerRows``; what was not read is
taken as a conflict.  The answer is a ``RowRebase``: for every file of the operation that
the winner replaced, the entry it replaced it with and the positions the retry deletes
there (and the positions of the rows read there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacommit.protocol.actions import Add, Remove
from deltacommit.protocol.add_actions import add_actions_table
from deltacommit.protocol.checkpoint.encode import adds_to_arrow
from deltacommit.protocol.expressions.ast import Expr
from deltacommit.protocol.file_pruning import may_match
from deltacommit.protocol.replay import file_key
from deltacommit.protocol.row_changes import (
    ChangedFile,
    FileRebase,
    RowConflict,
    RowLevelReads,
    RowRebase,
    Rows,
    WinnerRows,
    match_key,
    rows,
)

if TYPE_CHECKING:
    from deltacommit.protocol.expressions.ast import Expr



def stats_matching(reads: RowLevelReads, added: Sequence[Add]) -> list[Add]:
    """Those of ``added`` whose partition values and statistics admit a row where the
    predicate is TRUE."""
    if not added:
        return []
    listing = add_actions_table([adds_to_arrow(list(added))], reads.schema,
                                list(reads.partition_columns), reads.configuration,
                                deletion_vectors=True, tight_bounds=True)
    keep = may_match(reads.predicate, listing, reads.schema)
    return [added[int(i)] for i in np.flatnonzero(keep)]


def new_rows_matching(reads: RowLevelReads, added: Sequence[Add],
                      loaded: WinnerRows | None = None) -> Add | None:
    """The first of ``added`` that may hold a row where the predicate is TRUE: statistics
    admit one and, where ``loaded`` says what its live rows hold, one of them is such a row."""
    matching = loaded.matching if loaded is not None else {}
    for a in stats_matching(reads, added):
        if matching.get(match_key(reads.predicate, a), True):
            return a
    return None


def fresh_rows(reads: RowLevelReads, added: Sequence[Add], removed: Sequence[Remove],
               loaded: WinnerRows, new_row_candidates: Sequence[Add]) -> list[Add]:
    """The winner's files (its ``added`` and ``removed``) that hold new rows to ``reads``:
    of ``new_row_candidates`` (its adds that count as new rows at the isolation level), those
    that change data and are not a file of the operation committed again (checked row by row,
    ``_same_file``, where rows brought back conflict) nor a file committed again that only
    lost rows; a file the winner's adds or removes name more than once is neither
    (``named_twice``)."""
    removed_keys = {file_key(r.path) for r in removed}
    readded = {file_key(a.path): a for a in added if file_key(a.path) in removed_keys}
    grown = _deletes_only(removed, readded, loaded) | (readded.keys() & reads.files.keys())
    grown -= named_twice(added) | named_twice(removed)
    return [a for a in new_row_candidates if a.data_change and file_key(a.path) not in grown]


#: The characters of a predicate an error shows (a MERGE's holds every source key).
SHOWN_CHARS = 300


def shown(predicate: Expr) -> str:
    """``predicate``'s SQL text for an error: whole up to ``SHOWN_CHARS``, else its start and
    its length."""
    text = predicate.sql_once()
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}... ({len(text):,} characters in all)"


def named_twice(actions: Sequence[Add] | Sequence[Remove]) -> set[str]:
    """The data files (``file_key`` of their paths) more than one of ``actions`` names: with
    different deletion vectors, each add or remove is of another file of the table's set,
    with its own live rows.  The checks that follow a file by its path cannot tell which
    entry speaks for it: whether one committed again only lost rows (a remove of an entry
    that was not live says nothing of the rows that were), or which holds this operation's
    rows."""
    seen: set[str] = set()
    twice: set[str] = set()
    for a in actions:
        key = file_key(a.path)
        (twice if key in seen else seen).add(key)
    return twice


def check_rows(reads: RowLevelReads, added: Sequence[Add], removed: Sequence[Remove],
               loaded: WinnerRows, new_row_candidates: Sequence[Add]) -> RowRebase | None:
    """RowConflict if the winner (its ``added`` and ``removed`` files, what was ``loaded`` of
    them) changed rows ``reads`` depends on; else how the retry's changes move onto the
    winner's state (None: the winner touched none of its files).  ``new_row_candidates``:
    the winner's adds that count as new rows at this isolation level."""
    removed_keys = {file_key(r.path) for r in removed}
    readded = {file_key(a.path): a for a in added if file_key(a.path) in removed_keys}
    fresh = fresh_rows(reads, added, removed, loaded, new_row_candidates)
    hit = new_rows_matching(reads, fresh, loaded)
    if hit is not None:
        read = match_key(reads.predicate, hit) in loaded.matching
        raise RowConflict("append", f"added file {hit.path}, which "
                                    f"{'holds' if read else 'may hold'} rows matching "
                                    f"{shown(reads.predicate)}")
    touched = [c for k, c in reads.files.items() if k in removed_keys]
    if not touched:
        return None
    twice = named_twice(added)
    if twice:
        # Rows this operation changed or read are followed by path (committed again, or
        # moved by a compaction): where one path is two entries, moving its deletes onto one
        # would leave the rows of the other live.
        raise RowConflict("delete", f"committed data file {min(twice)} more than once (as "
                                    "files of the table with different deletion vectors), "
                                    "where rows this transaction changed or read cannot be "
                                    "followed by path")
    out: dict[str, FileRebase] = {}
    moved_index: tuple[Rows, Rows, list[tuple[str, int]]] | None = None
    for c in touched:
        again = readded.get(c.key)
        if again is not None:
            out[c.key] = _same_file(c, again, loaded)
            continue
        if moved_index is None:
            moved_index = _index_moved(added, loaded)
        for target_key, target, changed_here, read_here in _moved(c, moved_index, added):
            n = target.num_records() or 0
            prior = out.get(target_key) or FileRebase(
                target, n, loaded.deletion_vectors.get(target_key, rows([])), rows([]),
                rows([]), rows([]), ())
            out[target_key] = _landed(prior, c, changed_here, read_here)
    return RowRebase(tuple(out.values()))


def _landed(prior: FileRebase, c: ChangedFile, changed: tuple[Rows, Rows],
            read: tuple[Rows, Rows]) -> FileRebase:
    """``prior`` with the rows of ``c`` that a winner moved there: for its changed rows and
    for its read rows, their positions there and which of ``c``'s they are."""
    def joined(positions: Rows, ids: Rows, versions: Rows, more: tuple[Rows, Rows],
               more_ids: Rows, more_versions: Rows) -> tuple[Rows, Rows, Rows]:
        at, which = more
        all_at = np.concatenate([positions, at])
        order = np.argsort(all_at, kind="stable")
        return (all_at[order], np.concatenate([ids, more_ids[which]])[order],
                np.concatenate([versions, more_versions[which]])[order])

    ch, ch_ids, ch_versions = joined(prior.changed, prior.changed_ids, prior.changed_versions,
                                     changed, c.changed_ids, c.changed_versions)
    rd, rd_ids, rd_versions = joined(prior.read, prior.read_ids, prior.read_versions, read,
                                     c.read_ids, c.read_versions)
    return FileRebase(prior.target, prior.num_rows, prior.deleted_before, ch, ch_ids,
                      ch_versions, (*prior.replaces, c.key), rd, rd_ids, rd_versions)


def _cardinality(dv: Mapping[str, Any] | None) -> int:
    value = (dv or {}).get("cardinality")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _same_dv(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two deletion vector descriptors name the same stored bitmap."""
    return all(a.get(k) == b.get(k) for k in ("storageType", "pathOrInlineDv", "offset"))


def _deletes_only(removed: Sequence[Remove], readded: Mapping[str, Add],
                  loaded: WinnerRows) -> set[str]:
    """Files committed again that only lost rows (a deletion vector that grew): no new rows.
    A file committed again with fewer deleted rows (rows restored), or whose remove does not
    say which deletion vector it had, may hold rows that were not live before; so may one
    whose new deletion vector is as large or larger but over other rows, unless it was read
    to keep every row deleted before (``loaded.kept_deletes``)."""
    out: set[str] = set()
    for r in removed:
        key = file_key(r.path)
        again = readded.get(key)
        if again is None:
            continue
        known = r.deletion_vector is not None or r.extended_file_metadata is True
        if not known or _cardinality(again.deletion_vector) < _cardinality(r.deletion_vector):
            continue
        if r.deletion_vector and not (again.deletion_vector
                                      and _same_dv(r.deletion_vector, again.deletion_vector)) \
                and not loaded.kept_deletes.get(key, False):
            continue
        out.add(key)
    return out


def _same_file(c: ChangedFile, again: Add, loaded: WinnerRows) -> FileRebase:
    """The winner committed ``c``'s file again (a new deletion vector)."""
    if again.deletion_vector is None:
        now = rows([])
    else:
        found = loaded.deletion_vectors.get(c.key)
        if found is None:
            raise RowConflict("delete", f"committed file {again.path} again with a deletion "
                                        "vector that was not read")
        now = found
    if len(np.setdiff1d(c.deleted_before, now)):
        raise RowConflict("delete", f"committed file {again.path} again with rows restored "
                                    "that were deleted when this transaction read it")
    winner_deleted = np.setdiff1d(now, c.deleted_before)
    both = np.intersect1d(winner_deleted, c.changed)
    if len(both):
        ids = c.changed_ids[np.isin(c.changed, both)]
        raise RowConflict("delete", f"deleted or rewrote row(s) with id(s) "
                                    f"{ids[:5].tolist()} of file {again.path}, which this "
                                    "transaction changes too")
    lost = np.isin(c.read, winner_deleted)
    if lost.any():
        raise RowConflict("read", f"deleted or rewrote row(s) with id(s) "
                                  f"{c.read_ids[lost][:5].tolist()} of file {again.path}, "
                                  "which this transaction read and its outcome depends on")
    return FileRebase(again, c.num_rows, now, c.changed, c.changed_ids, c.changed_versions,
                      (c.key,), c.read, c.read_ids, c.read_versions)


def _index_moved(added: Sequence[Add], loaded: WinnerRows
                 ) -> tuple[Rows, Rows, list[tuple[str, int]]]:
    """Stable ids (sorted), their commit versions, and (file, position) of every live row of
    the winner's new files that were read."""
    ids: list[Rows] = []
    versions: list[Rows] = []
    where: list[tuple[str, int]] = []
    for a in added:
        m = loaded.moved.get(file_key(a.path))
        if m is None:
            continue
        ids.append(m.ids)
        versions.append(m.versions)
        where.extend((file_key(a.path), int(p)) for p in m.positions)
    if not ids:
        return rows([]), rows([]), []
    all_ids = np.concatenate(ids)
    all_versions = np.concatenate(versions)
    order = np.argsort(all_ids, kind="stable")
    return all_ids[order], all_versions[order], [where[i] for i in order]


def _moved(c: ChangedFile, index: tuple[Rows, Rows, list[tuple[str, int]]],
           added: Sequence[Add]
           ) -> list[tuple[str, Add, tuple[Rows, Rows], tuple[Rows, Rows]]]:
    """Where the winner's new files hold ``c``'s changed rows and read rows, unchanged: per
    target file, for each kind its positions there and which of ``c``'s rows they are."""
    ids, _, where = index
    if len(np.unique(np.concatenate([c.changed_ids, c.read_ids]))) != \
            len(c.changed_ids) + len(c.read_ids) or (len(ids) > 1 and (np.diff(ids) == 0).any()):
        raise RowConflict("read", f"removed file {c.add.path}: row ids are not unique among its "
                                  "rows and the files added")
    found = (_found(c, c.changed_ids, c.changed_versions, index, "changes"),
             _found(c, c.read_ids, c.read_versions, index, "read and its outcome depends on"))
    by_key = {file_key(a.path): a for a in added}
    targets: dict[str, tuple[list[int], list[int]]] = {}
    for kind, at in enumerate(found):
        for i, j in enumerate(at):
            targets.setdefault(where[int(j)][0], ([], []))[kind].append(i)
    out = []
    for key, picked in targets.items():
        parts = []
        for kind, which in enumerate(picked):
            idx = np.asarray(which, dtype=np.int64)
            positions = np.asarray([where[int(found[kind][i])][1] for i in which],
                                   dtype=np.int64)
            parts.append((positions, idx))
        out.append((key, by_key[key], parts[0], parts[1]))
    return out


def _found(c: ChangedFile, wanted: Rows, versions_wanted: Rows,
           index: tuple[Rows, Rows, list[tuple[str, int]]], role: str) -> Rows:
    """Where in ``index`` (``_index_moved``) each of the stable ids ``wanted`` of ``c``'s rows
    is; RowConflict if one is in none of the winner's new files, or there with another row
    commit version (the winner changed it).  ``role`` says what this transaction does with
    those rows."""
    ids, versions, _ = index
    if not len(wanted):
        return rows([])
    at = np.searchsorted(ids, wanted)
    found = (at < len(ids)) & (ids[np.minimum(at, max(len(ids) - 1, 0))] == wanted) \
        if len(ids) else np.zeros(len(wanted), dtype=bool)
    if not found.all():
        missing = wanted[~found][:5].tolist()
        raise RowConflict("read", f"removed file {c.add.path} and its rows with id(s) {missing}, "
                                  f"which this transaction {role}, are in none of the files it "
                                  "added")
    other = versions[at] != versions_wanted
    if other.any():
        raise RowConflict("read", f"changed row(s) with id(s) {wanted[other][:5].tolist()} of "
                                  f"file {c.add.path}, which this transaction {role}"
                                  f"{' too' if role == 'changes' else ''}")
    out: Rows = at.astype(np.int64)
    return out


__all__ = ["check_rows", "fresh_rows", "named_twice", "new_rows_matching", "shown", "stats_matching"]
