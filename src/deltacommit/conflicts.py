"""Delta's conflict matrix: may this transaction commit after a concurrent winner?  Pure.

When a commit loses the race for version N, the winner's actions are checked against what this
transaction read and wrote, in Delta's order: protocol, metadata, application transaction ids,
files added where this transaction read, files it read that were removed, files both removed.
If every winner passes, the transaction is rebased and retried; otherwise the named exception
tells the caller which concurrent commit invalidated its reads, so it can redo its work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
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
from deltacommit.log.actions import Action, Add, CommitInfo, Metadata, Protocol, Remove, Txn
from deltacommit.log.features import check_writable
from deltacommit.log.replay import file_key

if TYPE_CHECKING:
    import pyarrow as pa

    from deltacommit.predicates import Predicate


class IsolationLevel(StrEnum):
    SERIALIZABLE = "Serializable"
    WRITE_SERIALIZABLE = "WriteSerializable"
    SNAPSHOT_ISOLATION = "SnapshotIsolation"

    @classmethod
    def from_table(cls, configuration: Mapping[str, str | None], table: str) -> IsolationLevel:
        raw = configuration.get("delta.isolationLevel") or cls.SERIALIZABLE.value
        for level in (cls.SERIALIZABLE, cls.WRITE_SERIALIZABLE):
            if raw.lower() == level.value.lower():
                return level
        from deltacommit.errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"table {table}: delta.isolationLevel={raw!r} is not valid; expected "
            "'Serializable' or 'WriteSerializable'")


# Operations that rewrite files without changing what the table contains.
NON_DATA_CHANGING_OPERATIONS = frozenset({
    "OPTIMIZE", "SET TBLPROPERTIES", "UNSET TBLPROPERTIES", "ADD COLUMNS", "CHANGE COLUMN",
    "ADD CONSTRAINT", "DROP CONSTRAINT", "VACUUM START", "VACUUM END", "UPGRADE PROTOCOL",
})


@dataclass(frozen=True, slots=True)
class TransactionSummary:
    """What the committing transaction read and what it writes (Delta's CurrentTransactionInfo)."""

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
    has_other_actions: bool = False
    #: Whether any add or remove has ``dataChange=true``.
    data_change: bool = True

    @property
    def is_blind_append(self) -> bool:
        """Only adds, and nothing read: Delta lets such commits pass any concurrent change."""
        return (not self.removed_files and not self.has_metadata and not self.has_protocol
                and not self.read_predicates and not self.read_files and not self.read_whole_table)

    @property
    def effective_isolation(self) -> IsolationLevel:
        """Transactions that change no data (compaction) run at snapshot isolation."""
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
    is_blind_append: bool = False
    added: list[Add] = field(default_factory=list)
    removed: list[Remove] = field(default_factory=list)
    metadata: Metadata | None = None
    protocol: Protocol | None = None
    txns: list[Txn] = field(default_factory=list)

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
            elif isinstance(a, CommitInfo):
                w.operation = a.operation or "UNKNOWN"
                w.is_blind_append = bool(a.is_blind_append)
        return w


def _describe_partition(values: Mapping[str, str | None]) -> str:
    if not values:
        return "the table"
    return "partition " + ", ".join(f"{k}={v!r}" for k, v in values.items())


def check_conflicts(current: TransactionSummary, winner: WinningCommit, table: str) -> None:
    """Raise the Delta exception if ``winner`` invalidates ``current``; return if it may retry."""
    who = f"concurrent commit version {winner.version} ({winner.operation}) of table {table}"

    def fail(cls: type[ConcurrentModificationException], message: str) -> ConcurrentModificationException:
        return cls(message, winning_version=winner.version, operation=winner.operation)

    # 1. protocol
    if winner.protocol is not None:
        try:
            check_writable(table, winner.protocol, winner.metadata)
        except DeltaCommitError as e:
            raise fail(ProtocolChangedException, f"{who} changed the protocol to one this writer "
                                           f"cannot write: {e}") from None
        if current.has_protocol:
            raise fail(ProtocolChangedException, f"{who} also changed the protocol")

    # 2. metadata
    if winner.metadata is not None:
        raise fail(MetadataChangedException,
            f"{who} changed the table metadata (schema, partitioning or properties) since this "
            "transaction read it")

    # 3. application transaction ids
    for txn in winner.txns:
        if txn.app_id in current.read_app_ids:
            raise fail(ConcurrentTransactionException,
                f"{who} committed application transaction {txn.app_id!r} version {txn.version}, "
                "which this transaction also writes (two writers with the same app id)")

    # 4. files added where this transaction read
    level = current.effective_isolation
    if level is not IsolationLevel.SNAPSHOT_ISOLATION and not current.is_blind_append:
        if level is IsolationLevel.WRITE_SERIALIZABLE and not current.has_metadata:
            candidates = [] if winner.is_blind_append else [a for a in winner.added if a.data_change]
        else:
            candidates = [a for a in winner.added if a.data_change]
        if candidates:
            hit = _first_matching(current, candidates)
            if hit is not None:
                raise fail(ConcurrentAppendException,
                    f"{who} added file {hit.path} to {_describe_partition(hit.partition_values)}, "
                    "which this transaction read")

    # 5. files this transaction read that the winner removed
    if winner.removed:
        if current.read_whole_table:
            raise fail(ConcurrentDeleteReadException,
                f"{who} removed file {winner.removed[0].path} while this transaction read the "
                "whole table")
        if current.read_files:
            for r in winner.removed:
                if file_key(r.path, r.deletion_vector) in current.read_files:
                    raise fail(ConcurrentDeleteReadException,
                        f"{who} removed file {r.path} "
                        f"({_describe_partition(r.partition_values or {})}), which this transaction "
                        "read")

    # 6. files both removed
    if winner.removed and current.removed_files:
        for r in winner.removed:
            if file_key(r.path, r.deletion_vector) in current.removed_files:
                raise fail(ConcurrentDeleteDeleteException,
                    f"{who} removed file {r.path}, which this transaction also removes")


def _first_matching(current: TransactionSummary, added: list[Add]) -> Add | None:
    if current.read_whole_table or not current.partition_columns:
        if current.read_whole_table or current.read_predicates or current.read_files:
            return added[0]
        # Nothing read: only a metadata or protocol change can depend on the table's files.
        return added[0] if current.has_metadata or current.has_protocol else None
    for a in added:
        for p in current.read_predicates:
            if p.evaluate(a.partition_values, current.partition_types):
                return a
    if current.has_metadata or current.has_protocol:
        return added[0]
    return None
