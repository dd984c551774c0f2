"""Delta's conflict matrix: may this transaction commit after a concurrent winner?  Pure.

When a commit loses the race for version N, each winning commit is checked against what this
transaction read and wrote, in Spark's order (``ConflictChecker.checkConflicts``): protocol,
metadata, application transaction ids, files added where this transaction read, files it read
that were removed, files both removed.  If every winner passes, the transaction is rebased and
retried; otherwise the named exception tells the caller which concurrent commit invalidated its
reads, so it can redo its work.

Where delta-rs and Spark disagree, this module follows Spark, because a table shared with
Spark writers must not accept a commit that Spark would have refused (each difference is
marked ``Spark:`` below).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from deltacommit.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentModificationException,
    ConcurrentTransactionException,
    DeltaCommitError,
    MetadataChangedException,
    ProtocolChangedException,
)
from deltacommit.protocol.actions import (
    Action,
    Add,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    Remove,
    Txn,
)
from deltacommit.protocol.features.identity import SCHEMA_UPDATE_TAG, is_mark_update
from deltacommit.protocol.features.row_tracking import DOMAIN as ROW_TRACKING_DOMAIN
from deltacommit.protocol.replay import file_key
from deltacommit.protocol.row_changes import RowConflict, RowLevelReads, RowRebase, WinnerRows
from deltacommit.protocol.schema.column_mapping import logical_values
from deltacommit.protocol.table_config.feature_requests import supported_features
from deltacommit.protocol.table_config.features import check_writable
from deltacommit.protocol.table_config.properties import IsolationLevel as IsolationLevel

if TYPE_CHECKING:
    import pyarrow as pa

    from deltacommit.protocol.expressions.predicates import Predicate

__all__ = ["IsolationLevel", "TransactionSummary", "WinningCommit", "check_conflicts",
           "new_row_candidates"]


# Operations that rewrite files without changing what the table contains (Spark's
# ``Operation.changesData == false``).  Only consulted under WriteSerializable, where a
# transaction without data changes also needs such an operation to run at snapshot isolation.
# An operation missing from this set is assumed to change data: the safe direction.
NON_DATA_CHANGING_OPERATIONS = frozenset({
    "OPTIMIZE", "SET TBLPROPERTIES", "UNSET TBLPROPERTIES", "ADD COLUMNS", "CHANGE COLUMN",
    "ADD CONSTRAINT", "DROP CONSTRAINT", "VACUUM START", "VACUUM END", "UPGRADE PROTOCOL",
})


@dataclass(frozen=True, slots=True)
class TransactionSummary:
    """What the committing transaction read and what it writes (Spark's CurrentTransactionInfo).

    File sets hold decoded paths (``replay.file_key`` without a deletion vector): Spark
    matches removes against reads by path alone.
    """

    operation: str
    partition_columns: tuple[str, ...]
    partition_types: Mapping[str, pa.DataType]
    isolation_level: IsolationLevel
    read_predicates: tuple[Predicate, ...] = ()
    read_files: frozenset[str] = frozenset()
    read_whole_table: bool = False
    read_app_ids: frozenset[str] = frozenset()
    added_files: tuple[Add, ...] = ()
    removed_files: frozenset[str] = frozenset()
    has_metadata: bool = False
    has_protocol: bool = False
    #: Actions other than add, remove, metaData and protocol (``txn``): they keep a transaction
    #: from running at snapshot isolation.
    has_other_actions: bool = False
    #: Whether any add or remove has ``dataChange=true``.
    data_change: bool = True
    #: The protocol and metadata of the snapshot this transaction read.
    read_protocol: Protocol | None = None
    read_metadata: Metadata | None = None
    #: Metadata domains this transaction sets or removes (two writers of one domain conflict).
    domains: frozenset[str] = frozenset()
    #: Logical -> physical name of each partition column of a column-mapping table, whose
    #: files' ``partitionValues`` are keyed by physical name (empty without column mapping).
    partition_physical_names: Mapping[str, str] = field(default_factory=dict)
    #: Set by a row-level operation on a table with deletion vectors and row tracking: the
    #: rows it changed and its predicate, checked row by row instead of file by file
    #: (``row_conflicts``).
    row_level: RowLevelReads | None = None

    @property
    def is_blind_append(self) -> bool:
        """Spark's definition: every file action is an add and no file or predicate was read.

        A transaction that only changes metadata or the protocol (no file actions at all) is a
        blind append too, as Spark records it: it did not read any data files, so files added
        concurrently cannot invalidate it (a concurrent metadata change still can).  Reading an
        application id does not count as reading the table.
        """
        return (not self.removed_files and not self.read_predicates and not self.read_files
                and not self.read_whole_table)

    @property
    def effective_isolation(self) -> IsolationLevel:
        """Spark's ``getIsolationLevelToUse``: a transaction of file actions none of which
        changes data (compaction, an empty commit) runs at snapshot isolation; under
        WriteSerializable its operation must also be one that does not change data."""
        if self.has_metadata or self.has_protocol or self.has_other_actions:
            return self.isolation_level
        if self.data_change:
            return self.isolation_level
        if (self.isolation_level is IsolationLevel.WRITE_SERIALIZABLE
                and self.operation not in NON_DATA_CHANGING_OPERATIONS):
            return self.isolation_level
        return IsolationLevel.SNAPSHOT_ISOLATION


@dataclass(slots=True)
class WinningCommit:
    """The parts of a concurrent commit that matter for conflict checks."""

    version: int
    operation: str = "UNKNOWN"
    #: ``commitInfo.isBlindAppend``; a commit that does not say so is not one (as in Spark).
    is_blind_append: bool = False
    #: ``commitInfo.txnId``, which lets a writer recognise its own earlier attempt.
    txn_id: str | None = None
    added: list[Add] = field(default_factory=list)
    removed: list[Remove] = field(default_factory=list)
    metadata: Metadata | None = None
    protocol: Protocol | None = None
    txns: list[Txn] = field(default_factory=list)
    domains: set[str] = field(default_factory=set)
    #: ``commitInfo.tags`` say its metadata change only raises identity high-water marks.
    identity_mark_update: bool = False
    #: What the engine read of its files for a row-level check (``row_conflicts``).
    rows: WinnerRows = field(default_factory=WinnerRows)

    @classmethod
    def from_actions(cls, version: int, actions: Sequence[Action]) -> WinningCommit:
        w = cls(version)
        for a in actions:
            if isinstance(a, Add):
                w.added.append(a)
            elif isinstance(a, Remove):
                w.removed.append(a)
            elif isinstance(a, Metadata):
                w.metadata = a
            elif isinstance(a, Protocol):
                w.protocol = a
            elif isinstance(a, Txn):
                w.txns.append(a)
            elif isinstance(a, DomainMetadata):
                w.domains.add(a.domain)
            elif isinstance(a, CommitInfo):
                w.operation = a.operation or "UNKNOWN"
                w.is_blind_append = bool(a.is_blind_append)
                tid = a.values.get("txnId")
                w.txn_id = tid if isinstance(tid, str) else None
                tags = a.values.get("tags")
                w.identity_mark_update = isinstance(tags, dict) and str(
                    tags.get(SCHEMA_UPDATE_TAG)).lower() == "true"
        return w


def _describe_partition(values: Mapping[str, str | None] | None) -> str:
    if not values:
        return "the table"
    return "partition " + ", ".join(f"{k}={v!r}" for k, v in values.items())


def _describe_metadata_change(old: Metadata | None, new: Metadata) -> str:
    if old is None:
        return "the table metadata"
    parts = []
    if old.schema_string != new.schema_string:
        parts.append("the schema")
    if list(old.partition_columns) != list(new.partition_columns):
        parts.append(f"the partition columns (to {list(new.partition_columns)})")
    keys = sorted(k for k in set(old.configuration) | set(new.configuration)
                  if old.configuration.get(k) != new.configuration.get(k))
    if keys:
        parts.append(f"table properties {keys}")
    if old.id != new.id:
        parts.append("the table id (the table was replaced)")
    return " and ".join(parts) if parts else "the table metadata"


def check_conflicts(current: TransactionSummary, winner: WinningCommit, table: str
                    ) -> RowRebase | None:
    """Raise the Delta exception if ``winner`` invalidates ``current``; return if it may retry.

    The checks run in Spark's order (``ConflictChecker.checkConflicts``), so the exception
    raised is the one Spark would raise.  Each message names the winning version, its
    operation and the file, partition or application id at stake, because the reader is an
    operator deciding what to rerun.

    A row-level transaction (``current.row_level``) is checked row by row after the checks of
    protocol, metadata, domains and application ids (``row_conflicts``): what is returned
    then says how its retry moves its changes onto the files the winner replaced (None when
    there is nothing to move).
    """
    who = f"concurrent commit version {winner.version} ({winner.operation}) of table {table}"
    _check_protocol(current, winner, who, table)  # 1
    _check_metadata(current, winner, who)  # 2
    _check_domains(current, winner, who)  # 2b
    _check_app_ids(current, winner, who)  # 3
    if current.row_level is not None:
        return _check_rows(current, current.row_level, winner, who)
    _check_added_files(current, winner, who)  # 4
    _check_removed_read_files(current, winner, who)  # 5
    _check_removed_twice(current, winner, who)  # 6
    return None


def new_row_candidates(current: TransactionSummary, winner: WinningCommit) -> list[Add]:
    """The winner's adds that count as new rows at the transaction's isolation level (Spark's
    rule: under WriteSerializable a blind append does not)."""
    level = current.effective_isolation
    if level is IsolationLevel.SERIALIZABLE or (
            level is IsolationLevel.WRITE_SERIALIZABLE and current.has_metadata):
        return winner.added
    if level is IsolationLevel.WRITE_SERIALIZABLE:
        return [] if winner.is_blind_append else winner.added
    return []


def _check_rows(current: TransactionSummary, reads: RowLevelReads, winner: WinningCommit,
                who: str) -> RowRebase | None:
    """4-6, row by row: new rows the predicate may match, rows both changed, rows the winner
    removed that this transaction changed (``row_conflicts.check_rows``)."""
    # Imported here, not at module level: the row-level check reads file statistics with the
    # expression evaluator (``file_pruning``), which only a row-level transaction needs; a
    # blind append (a cold writer's one commit) checks its conflicts without loading them.
    from deltacommit.protocol.row_conflicts import check_rows

    try:
        return check_rows(reads, winner.added, winner.removed, winner.rows,
                          new_row_candidates(current, winner))
    except RowConflict as e:
        cls: type[ConcurrentModificationException] = {
            "append": ConcurrentAppendException, "delete": ConcurrentDeleteDeleteException,
        }.get(e.kind, ConcurrentDeleteReadException)
        raise _fail(cls, winner, f"{who} {e.message}") from None


def _fail(cls: type[ConcurrentModificationException], winner: WinningCommit,
          message: str) -> ConcurrentModificationException:
    return cls(message, winning_version=winner.version, operation=winner.operation)


def _check_protocol(current: TransactionSummary, winner: WinningCommit, who: str,
                    table: str) -> None:
    """1. Protocol: this writer must be able to write the winner's protocol (the retry commits
    under it); two protocol changes, or a winner that drops a feature, cannot be merged."""
    if winner.protocol is None:
        return
    try:
        check_writable(table, winner.protocol, winner.metadata or current.read_metadata)
    except DeltaCommitError as e:
        raise _fail(ProtocolChangedException, winner, f"{who} changed the protocol to one this "
                    f"writer cannot write: {e}") from None
    if current.has_protocol:
        raise _fail(ProtocolChangedException, winner,
                    f"{who} changed the protocol, which this transaction also changes")
    if current.read_protocol is not None:
        dropped = supported_features(current.read_protocol) - supported_features(winner.protocol)
        if dropped:
            raise _fail(ProtocolChangedException, winner,
                        f"{who} dropped table feature(s) {sorted(dropped)} since this "
                        "transaction read the table")


def _check_metadata(current: TransactionSummary, winner: WinningCommit, who: str) -> None:
    """2. Metadata.  Spark reconciles a winner's change to an allow list of properties (row
    tracking, column mapping, deletion vectors), all features this writer does not support,
    so every winning metaData conflicts here.

    Spark's one exception, followed here: a winner that only raised identity high-water marks
    (tagged so, or found so) passes a transaction that changes no metadata itself; one that
    does (an identity writer) conflicts, and allocates its values again."""
    if winner.metadata is not None and not (
            not current.has_metadata
            and (winner.identity_mark_update
                 or is_mark_update(current.read_metadata, winner.metadata))):
        raise _fail(MetadataChangedException, winner,
                    f"{who} changed {_describe_metadata_change(current.read_metadata, winner.metadata)}"
                    " since this transaction read it")


def _check_domains(current: TransactionSummary, winner: WinningCommit, who: str) -> None:
    """2b. Metadata domains both write (Spark's ``checkIfDomainMetadataConflict``).  The row-id
    high-water mark is not a conflict: the commit loop assigns ids again above the winner's
    mark (engine/commit/stamps.py)."""
    both = sorted((current.domains & winner.domains) - {ROW_TRACKING_DOMAIN})
    if both:
        raise _fail(ConcurrentModificationException, winner,
                    f"{who} changed metadata domain(s) {both}, which this transaction also "
                    "changes")


def _check_app_ids(current: TransactionSummary, winner: WinningCommit, who: str) -> None:
    """3. Application transaction ids this transaction read (two writers with one app id)."""
    for txn in winner.txns:
        if txn.app_id in current.read_app_ids:
            raise _fail(ConcurrentTransactionException, winner,
                        f"{who} committed application transaction {txn.app_id!r} version "
                        f"{txn.version}, which this transaction read and depends on (two writers "
                        "with the same app id)")


def _check_added_files(current: TransactionSummary, winner: WinningCommit, who: str) -> None:
    """4. Files added where this transaction read.  Spark: the winner's adds count whatever
    their dataChange flag (a compaction's rewritten files too); only the winner's
    commitInfo.isBlindAppend decides whether WriteSerializable may ignore them."""
    level = current.effective_isolation
    if level is IsolationLevel.SERIALIZABLE or (
            level is IsolationLevel.WRITE_SERIALIZABLE and current.has_metadata):
        candidates = winner.added
    elif level is IsolationLevel.WRITE_SERIALIZABLE:
        candidates = [] if winner.is_blind_append else winner.added
    else:
        candidates = []
    if candidates:
        hit = _first_matching(current, candidates)
        if hit is not None:
            add, why = hit
            raise _fail(ConcurrentAppendException, winner,
                        f"{who} added file {add.path} to {_describe_partition(add.partition_values)},"
                        f" which this transaction read ({why}) at {level.value} isolation")


def _check_removed_read_files(current: TransactionSummary, winner: WinningCommit,
                              who: str) -> None:
    """5. Files this transaction read that the winner removed.  Spark: removes with
    dataChange=false (compaction) count as well; delta-rs only counts dataChange=true."""
    if not winner.removed:
        return
    if current.read_files:
        for r in winner.removed:
            if file_key(r.path) in current.read_files:
                raise _fail(ConcurrentDeleteReadException, winner,
                            f"{who} removed file {r.path} ({_describe_partition(r.partition_values)})"
                            ", which this transaction read")
    if current.read_whole_table:
        raise _fail(ConcurrentDeleteReadException, winner,
                    f"{who} removed file {winner.removed[0].path} "
                    f"({_describe_partition(winner.removed[0].partition_values)}) while this "
                    "transaction read the whole table")


def _check_removed_twice(current: TransactionSummary, winner: WinningCommit, who: str) -> None:
    """6. Files both removed."""
    if winner.removed and current.removed_files:
        for r in winner.removed:
            if file_key(r.path) in current.removed_files:
                raise _fail(ConcurrentDeleteDeleteException, winner,
                            f"{who} removed file {r.path} ({_describe_partition(r.partition_values)})"
                            ", which this transaction also removes")


def _first_matching(current: TransactionSummary, added: Iterable[Add]) -> tuple[Add, str] | None:
    """Spark's ``getFirstFileMatchingPartitionPredicates``: the first added file this
    transaction should have read, with the reason."""
    if current.is_blind_append:
        return None
    if current.read_whole_table:
        return next(((a, "the whole table") for a in added), None)
    if not current.partition_columns:
        # Nothing to prune by: any read of an unpartitioned table covers every new file.
        return next(((a, "the unpartitioned table") for a in added), None)
    physical = current.partition_physical_names
    for a in added:
        values = logical_values(a.partition_values, physical) if physical else a.partition_values
        for p in current.read_predicates:
            if p.evaluate(values, current.partition_types):
                return a, f"predicate {p.to_sql()}"
    return None
