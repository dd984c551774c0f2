"""What a row-level operation's outcome depends on and what a winner's files hold: the
records ``row_conflicts`` checks, kept apart from its checks so that a transaction that is not
row-level (a blind append) builds its summary without loading file statistics or the
expression evaluator.  Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from deltacommit.protocol.actions import Add
from deltacommit.protocol.replay import file_key

if TYPE_CHECKING:
    from deltacommit.protocol.expressions.ast import Expr

Rows = np.ndarray[Any, np.dtype[np.int64]]


def rows(values: Any) -> Rows:
    """Sorted unique int64 positions or ids."""
    out: Rows = np.unique(np.asarray(values, dtype=np.int64))
    return out


def _none() -> Rows:
    return rows([])


@dataclass(frozen=True, eq=False)
class ChangedFile:
    """A file some of whose rows a row-level operation deleted or rewrote, or read and left as
    they were while its outcome depends on them."""

    #: The add as read: its path, deletion vector, ``baseRowId``.
    add: Add
    #: Physical rows of the data file.
    num_rows: int
    #: Positions its deletion vector deleted when read.
    deleted_before: Rows
    #: Positions this operation deletes (rewritten rows are deleted here and written anew).
    changed: Rows
    #: Stable row ids and row commit versions of ``changed``, in the same order.
    changed_ids: Rows
    changed_versions: Rows
    #: Positions it read and left as they were but whose existence and values decide its
    #: outcome (a MERGE's target rows matched but not changed, each keeping its source row
    #: from being inserted), disjoint from ``changed``, with their stable ids and row commit
    #: versions in the same order.  A winner that deletes or changes one conflicts as for
    #: ``changed``; the retry deletes none of them.
    read: Rows = field(default_factory=_none)
    read_ids: Rows = field(default_factory=_none)
    read_versions: Rows = field(default_factory=_none)

    @property
    def key(self) -> str:
        return file_key(self.add.path)


@dataclass(frozen=True, eq=False)
class RowLevelReads:
    """What a row-level operation's outcome depends on (see the module docstring)."""

    #: The operation acts on rows where ``predicate`` is TRUE (a MERGE: its target rows'
    #: condition), given as the tree or as the function that builds it: a MERGE of 100,000
    #: source keys builds their IN list only where a concurrent commit is checked against it.
    predicate_of: Expr | Callable[[], Expr]
    #: The table's schema, partition columns and configuration, to read file statistics.
    schema: pa.Schema
    partition_columns: tuple[str, ...]
    configuration: Mapping[str, str | None]
    #: Files it changed rows of, or read rows of that decide its outcome, by ``file_key``.
    files: Mapping[str, ChangedFile]
    _built: list[Expr] = field(default_factory=list, init=False, repr=False)

    @property
    def predicate(self) -> Expr:
        """The predicate, built once (two threads may both build it: the same tree)."""
        if not self._built:
            given = self.predicate_of
            self._built.append(given() if callable(given) else given)
        return self._built[0]


@dataclass(frozen=True, eq=False)
class MovedRows:
    """The stable ids, row commit versions and positions of a winner's new file's live rows."""

    ids: Rows
    versions: Rows
    positions: Rows


@dataclass(eq=False)
class WinnerRows:
    """What the engine read of a winner for a row-level check: deleted positions of the files
    it committed with a deletion vector, the live rows of the files it added, whether the
    files it committed again only lost rows, and whether its new rows match the predicate."""

    deletion_vectors: dict[str, Rows] = field(default_factory=dict)
    moved: dict[str, MovedRows] = field(default_factory=dict)
    #: Files it committed again with another deletion vector, where the predicate may match
    #: their rows: whether the new one was read to delete every row the one it replaced did
    #: (a file whose entry is absent is taken to hold rows brought back).
    kept_deletes: dict[str, bool] = field(default_factory=dict)
    #: Files it added whose statistics admit a row a predicate matches, read row by row:
    #: whether a live row (its deletion vector applied) of the file is one where the
    #: predicate is TRUE, by ``match_key``.  The predicate is part of the key because one
    #: winner is checked against every transaction of a commit group, each with its own.
    #: A file whose entry is absent was not read: statistics decide (it may hold one).
    matching: dict[tuple[str, str], bool] = field(default_factory=dict)


def match_key(predicate: Expr, add: Add) -> tuple[str, str]:
    """``WinnerRows.matching``'s key for the live rows of the file ``add`` names under
    ``predicate``: its path and its deletion vector, since the table's set of files is keyed
    by both (a winner may commit one data file twice, with two deletion vectors: two files,
    each with its own live rows)."""
    return predicate.sql_once(), file_key(add.path, add.deletion_vector)


@dataclass(frozen=True, eq=False)
class FileRebase:
    """One file of the winner's state where the retry deletes rows."""

    #: The winner's live entry of the file (removed by the retry, added again with a DV).
    target: Add
    #: Physical rows of the file.
    num_rows: int
    #: Positions its deletion vector deletes now.
    deleted_before: Rows
    #: Positions the retry deletes as well, with their stable ids and commit versions.
    changed: Rows
    changed_ids: Rows
    changed_versions: Rows
    #: ``file_key`` of the operation's files whose changed or read rows are here now.
    replaces: tuple[str, ...]
    #: Positions of rows the operation read (``ChangedFile.read``) that are here now, with
    #: their stable ids and commit versions: the retry leaves them as they are, and a later
    #: winner is checked against them here.
    read: Rows = field(default_factory=_none)
    read_ids: Rows = field(default_factory=_none)
    read_versions: Rows = field(default_factory=_none)

    @property
    def writes(self) -> bool:
        """Whether the retry deletes rows of this file (else it only reads rows here)."""
        return bool(len(self.changed))


@dataclass(frozen=True, eq=False)
class RowRebase:
    """How the retry's changes move onto the winner's state."""

    files: tuple[FileRebase, ...]


class RowConflict(Exception):
    """The winner changed a row this operation depends on: ``kind`` is ``append`` (new rows
    the predicate may match), ``delete`` (a row both changed) or ``read`` (a row it changed
    was moved away changed or not at all, or a row it read is gone or changed)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def rebased_reads(reads: RowLevelReads, plan: RowRebase) -> RowLevelReads:
    """``reads`` after the retry moved its changes as ``plan`` says: the files the winner
    replaced give way to the winner's entries, as a later winner will see them (with the
    winner's deletes as the rows deleted when read), carrying the rows changed and the rows
    read that are there now."""
    replaced = {k for f in plan.files for k in f.replaces}
    files = {k: c for k, c in reads.files.items() if k not in replaced}
    for f in plan.files:
        files[file_key(f.target.path)] = ChangedFile(
            f.target, f.num_rows, f.deleted_before, f.changed, f.changed_ids,
            f.changed_versions, f.read, f.read_ids, f.read_versions)
    return replace(reads, predicate_of=reads.predicate, files=files)

__all__ = ["ChangedFile", "FileRebase", "MovedRows", "RowConflict", "RowLevelReads", "RowRebase",
           "Rows", "WinnerRows", "match_key", "rebased_reads", "rows"]
