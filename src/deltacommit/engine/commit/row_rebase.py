"""Row-level transactions in the commit loop: what a winner changed, and the retry's rebase.

A row-level transaction (DELETE with deletion vectors, UPDATE, MERGE on a table with deletion
vectors and row tracking) records the rows it changed and the rows it read that decide its
outcome (``protocol.row_conflicts``).  When a
concurrent commit wins a version first, the commit loop asks this module to read what the
pure check needs of the winner, and nothing more:

- the deleted rows of each file the winner committed again with a deletion vector, where the
  transaction changed rows of that file or read rows its outcome depends on;
- the stable row ids and row commit versions of the live rows of the winner's new files, where
  the winner removed such a file (a compaction moved its rows, or not);
- of each other file the winner committed again with another deletion vector, where the
  predicate may match its rows, whether the new one still deletes every row the old one did
  (else rows came back: new rows to the predicate);
- of each file holding new rows whose statistics admit a row the predicate matches, whether
  one of its live rows does (``holds_match``): statistics only bound a file's values, so a
  winner's file of ids 4 and 14 would otherwise abort an operation on ids 3 and 13.  The rows
  are read from the file as committed (its deletion vector applied, partition values and
  column mapping as any read) and judged with the evaluator the row-level verbs judge their
  own rows with, where NULL is no match.  At most ``MATCH_READ_BYTES`` of files per winner
  are read, and reading stops at the first file that holds a match (the check conflicts
  there whatever the rest hold).

A read that fails leaves the winner's file unread, which the check takes as a conflict.

When the check finds no conflict but the winner replaced files the transaction changed, the
retry cannot commit its staged actions as they are: removing the file entry it read and adding
it back with its own deletion vector would drop the winner's deletes (or bring back a file a
compaction removed).  ``rebase`` moves its deletes onto the winner's entries: one new
deletion-vector file holding, for each such entry, the union of the winner's deleted rows
and the transaction's; the entry removed and added again with it (or removed outright when no
row is left).  An entry where the transaction only read rows (``ChangedFile.read``) is left
as the winner committed it; the record of the rows read moves onto it, so that a later winner
is checked against them there.  The new deletion vectors are read back and compared with the union before the
rebased transaction may commit; otherwise the file is deleted and ``RewriteCheckError`` says so.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from deltacommit.engine.scan import FileScan
from deltacommit.errors import DeltaCommitError, RewriteCheckError
from deltacommit.io.deletion_vectors import deleted_rows
from deltacommit.protocol.actions import Add, Remove
from deltacommit.protocol.deletion_vectors import (
    encode_bitmap_array,
    encode_file,
    relative_dv_path_or_inline,
)
from deltacommit.protocol.expressions.evaluator import columns_read
from deltacommit.protocol.expressions.row_filters import row_filter
from deltacommit.protocol.features import row_tracking
from deltacommit.protocol.log.paths import parse_location
from deltacommit.protocol.replay import file_key
from deltacommit.protocol.row_changes import (
    MovedRows,
    RowLevelReads,
    RowRebase,
    match_key,
    rebased_reads,
    rows,
)
from deltacommit.protocol.table_config.config import TableConfig

if TYPE_CHECKING:
    from deltacommit.engine.commit.staged import StagedCommit
    from deltacommit.io.storage.base import ObjectStore
    from deltacommit.protocol.conflicts import WinningCommit


def deleted_positions(store: ObjectStore, uri: str, add: Add, num_rows: int) -> Any:
    """The sorted positions ``add``'s deletion vector deletes (none without one)."""
    if not add.deletion_vector:
        return rows([])
    return rows(deleted_rows(store, parse_location(uri), uri, add.deletion_vector,
                             data_file=add.path, num_rows=num_rows))


def hidden_columns(configuration: Any) -> tuple[str, str] | None:
    """The table's materialized row-id and row-commit-version column names, if it has them."""
    config = TableConfig(configuration)
    rid, ver = config.row_id_column, config.row_commit_version_column
    return (rid, ver) if rid and ver else None


def stable_rows(store: ObjectStore, uri: str, version: int, add: Add,
                hidden: tuple[str, str] | None) -> tuple[Any, Any, int]:
    """The stable row ids and row commit versions of every physical row of ``add`` (its
    materialized values where the file has them, else ``baseRowId`` plus the position and
    its ``defaultRowCommitVersion``), and the number of physical rows."""
    names = hidden or ("__deltacommit_no_row_id__", "__deltacommit_no_row_version__")
    scan = FileScan(uri, version, pa.schema([pa.field(n, pa.int64()) for n in names]), [],
                    physical_rows=True, given_store=store)
    data = scan.read(add)
    ids, versions = row_tracking.stable_ids(add, data.column(0), data.column(1), uri)
    return (np.asarray(ids.to_numpy(zero_copy_only=False), dtype=np.int64),
            np.asarray(versions.to_numpy(zero_copy_only=False), dtype=np.int64), data.num_rows)


def load_winner_rows(store: ObjectStore, uri: str, version: int, reads: RowLevelReads,
                     winner: WinningCommit,
                     new_row_candidates: Sequence[Add] | None = None) -> None:
    """Read into ``winner.rows`` what the row-level check of ``reads`` needs (see the module
    docstring); a file that cannot be read is left out, which the check takes as a conflict.
    ``new_row_candidates``: the winner's adds that count as new rows at the transaction's
    isolation level (``conflicts.new_row_candidates``; every add when not given)."""
    removed = {file_key(r.path) for r in winner.removed}
    _load_kept_deletes(store, uri, reads, winner)
    _load_matching(store, uri, version, reads, winner,
                   winner.added if new_row_candidates is None else new_row_candidates)
    touched = [c for k, c in reads.files.items() if k in removed]
    if not touched:
        return
    readded = {file_key(a.path): a for a in winner.added if file_key(a.path) in removed}
    moved_away = False
    for c in touched:
        again = readded.get(c.key)
        if again is None:
            moved_away = True
        elif again.deletion_vector and c.key not in winner.rows.deletion_vectors:
            with contextlib.suppress(DeltaCommitError, OSError, ValueError):
                winner.rows.deletion_vectors[c.key] = deleted_positions(store, uri, again,
                                                                        c.num_rows)
    if not moved_away:
        return
    hidden = hidden_columns(reads.configuration)
    for a in winner.added:
        key = file_key(a.path)
        if key in readded or key in winner.rows.moved:
            continue
        try:
            ids, versions, n = stable_rows(store, uri, version, a, hidden)
            gone = deleted_positions(store, uri, a, n)
        except (DeltaCommitError, OSError, ValueError):
            continue
        live = np.setdiff1d(np.arange(n, dtype=np.int64), gone)
        winner.rows.moved[key] = MovedRows(ids[live], versions[live], live)
        if a.deletion_vector:
            winner.rows.deletion_vectors[key] = gone


def _load_kept_deletes(store: ObjectStore, uri: str, reads: RowLevelReads,
                       winner: WinningCommit) -> None:
    """Read into ``winner.rows.kept_deletes``, for each file the winner committed again with
    another deletion vector (not one of the transaction's files, which the check follows row
    by row) where the predicate may match its rows, whether the new deletion vector deletes
    every row the replaced one did.  One that does not brought rows back: new rows to the
    predicate, as a file added."""
    from deltacommit.protocol.row_conflicts import new_rows_matching

    replaced = {file_key(r.path): r for r in winner.removed}
    for a in winner.added:
        key = file_key(a.path)
        r = replaced.get(key)
        if r is None or key in reads.files or key in winner.rows.kept_deletes \
                or not r.deletion_vector or not a.deletion_vector \
                or r.deletion_vector == a.deletion_vector:
            continue
        n = a.num_records()
        if n is None or new_rows_matching(reads, [a]) is None:
            continue
        try:
            before = rows(deleted_rows(store, parse_location(uri), uri, r.deletion_vector,
                                       data_file=r.path, num_rows=n))
            now = deleted_positions(store, uri, a, n)
        except (DeltaCommitError, OSError, ValueError):
            continue
        winner.rows.kept_deletes[key] = not len(np.setdiff1d(before, now))


#: Bytes of a winner's new files (their sizes) read to judge their rows by value against a
#: row-level transaction's predicate; the files beyond are judged by their statistics.
MATCH_READ_BYTES = 64 * 1024 * 1024
#: At most this many of a winner's files are read for it (one request each, inside the
#: commit loop); the others count as holding a match.
MATCH_READ_FILES = 64


def _load_matching(store: ObjectStore, uri: str, version: int, reads: RowLevelReads,
                   winner: WinningCommit, candidates: Sequence[Add]) -> None:
    """Read into ``winner.rows.matching``, for the winner's files holding new rows whose
    statistics admit a match, whether a live row of each matches ``reads.predicate``, while
    ``MATCH_READ_BYTES`` lasts; stop at the first that cannot be read or holds a match: the
    check conflicts there."""
    from deltacommit.protocol.row_conflicts import fresh_rows, stats_matching

    fresh = fresh_rows(reads, winner.added, winner.removed, winner.rows, candidates)
    if not fresh or not _predicate_fields(reads):
        return
    budget, files_left = MATCH_READ_BYTES, MATCH_READ_FILES
    for a in stats_matching(reads, fresh):
        key = match_key(reads.predicate, a)
        found = winner.rows.matching.get(key)
        if found is None:
            # The size an add claims is a hint: one of no bytes is not a Parquet file.
            if not 0 < a.size <= budget or not files_left:
                return
            budget -= a.size
            files_left -= 1
            try:
                found = holds_match(store, uri, version, reads, a)
            except (DeltaCommitError, OSError, ValueError, pa.ArrowException):
                return
            winner.rows.matching[key] = found
        if found:
            return


def _predicate_fields(reads: RowLevelReads) -> list[pa.Field[Any]]:
    """The table's top-level columns ``reads.predicate`` reads, as the evaluator resolves its
    names (``columns_read``: regardless of case; a dotted ``a.b`` is the struct ``a``'s field,
    or the column named ``a.b`` where there is no such field)."""
    wanted = columns_read(reads.predicate, reads.schema)
    return [f for f in reads.schema if f.name in wanted]


def holds_match(store: ObjectStore, uri: str, version: int, reads: RowLevelReads,
                add: Add) -> bool:
    """Whether a live row of ``add`` (its deletion vector applied; partition values and
    column mapping as the table's readers take them) is one where ``reads.predicate`` is
    TRUE, judged as a row-level verb judges its own rows (``RowFilter``): NULL is no match.
    Reads the columns the predicate references alone."""
    config = TableConfig(reads.configuration)
    schema = pa.schema(_predicate_fields(reads))
    scan = FileScan(uri, version, schema, list(reads.partition_columns),
                    column_mapping=config.column_mapping_mode.value, file_threads=False,
                    given_store=store)
    data = scan.read(add)
    if not data.num_rows:
        return False
    found = row_filter(reads.predicate, schema, f"new rows of {add.path} in table {uri}",
                       writes=False).matches(data)
    return bool(np.asarray(found.to_numpy(zero_copy_only=False), dtype=np.bool_).any())


def wide_stats(stats: str | None) -> str | None:
    """``stats`` marked as bounds of the physical rows (``tightBounds`` false), as Spark marks
    a file's statistics once a deletion vector hides some of its rows."""
    if not stats:
        return stats
    try:
        parsed = json.loads(stats)
    except ValueError:
        return stats
    if not isinstance(parsed, dict):
        return stats
    parsed["tightBounds"] = False
    return json.dumps(parsed, separators=(",", ":"))


def rebase(store: ObjectStore, uri: str, staged: StagedCommit, plan: RowRebase,
           now_ms: int) -> StagedCommit:
    """``staged`` with its deletes moved onto the files the winner replaced (see the module
    docstring); RewriteCheckError if the new deletion vectors do not read back as the union."""
    reads = staged.summary.row_level
    assert reads is not None
    replaced = {k for f in plan.files for k in f.replaces}
    # A file where the transaction only read rows is not committed again: its rows read are
    # carried in the rebased record alone (``rebased_reads``).
    writes = [f for f in plan.files if f.writes]
    unions = [np.union1d(f.deleted_before, f.changed) for f in writes]
    kept = [(f, u) for f, u in zip(writes, unions, strict=True) if len(u) < f.num_rows]
    new_adds: dict[str, Add] = {}
    dv_file: str | None = None
    if kept:
        content, offsets = encode_file([encode_bitmap_array(u) for _, u in kept])
        uid = uuid.uuid4()
        dv_file = f"deletion_vector_{uid}.bin"
        store.put(dv_file, content)
        key = relative_dv_path_or_inline("", uid)
        root = parse_location(uri)
        for (f, union), off in zip(kept, offsets, strict=True):
            size = len(encode_bitmap_array(union))
            add = replace(f.target, stats=wide_stats(f.target.stats), data_change=True,
                          deletion_vector={"storageType": "u", "pathOrInlineDv": key,
                                           "offset": off, "sizeInBytes": size,
                                           "cardinality": len(union)})
            try:
                found = deleted_rows(store, root, uri, add.deletion_vector or {},
                                     data_file=add.path, num_rows=f.num_rows)
                same = np.array_equal(np.asarray(found, dtype=np.int64), union)
            except (DeltaCommitError, OSError, ValueError) as e:
                store.delete(dv_file)
                raise RewriteCheckError(
                    f"rebase of a row-level change to table {uri}: the deletion vector written "
                    f"for {f.target.path} cannot be read back ({e}); it was deleted and nothing "
                    "was committed") from None
            if not same:
                store.delete(dv_file)
                raise RewriteCheckError(
                    f"rebase of a row-level change to table {uri}: the deletion vector written "
                    f"for {f.target.path} does not read back as the union of the concurrent "
                    "commit's deleted rows and this transaction's; it was deleted and nothing "
                    "was committed")
            new_adds[file_key(f.target.path)] = add
    removes: list[Remove] = [r for r in staged.removes if file_key(r.path) not in replaced]
    removes += [f.target.to_remove(now_ms) for f in writes]
    adds = [a for a in staged.adds if file_key(a.path) not in replaced] + list(new_adds.values())
    summary = replace(staged.summary, row_level=rebased_reads(reads, plan),
                      removed_files=frozenset(file_key(r.path) for r in removes))
    return replace(staged, removes=tuple(removes), adds=tuple(adds), summary=summary)


__all__ = ["MATCH_READ_BYTES", "deleted_positions", "hidden_columns", "holds_match",
           "load_winner_rows", "rebase", "stable_rows", "wide_stats"]
