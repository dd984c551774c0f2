"""A table opened by the engine alone: its log and how it commits, for the verbs that read a
table's configuration and commit one change (``ops.coordination``) without the facade.

``DeltaTable`` (``deltacommit.table``) is what users open: it adds the reads, the process's
cached state, group commit and the hooks of the layers above (auto-compaction).  A
``LogTable`` is the least a ``Transaction`` needs, loaded afresh from the log: what an
operator's change of a table (its commit mechanism) should read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from deltacommit.engine.commit.policy import CommitPolicy
from deltacommit.engine.commit.table_log import OnTableLog, TableLog
from deltacommit.engine.snapshot.snapshot import Commit, Snapshot
from deltacommit.engine.transaction.transaction import Transaction
from deltacommit.io.logstore import open_log_store
from deltacommit.runtime.clock import DEFAULT_RANDOM, SYSTEM_CLOCK, Clock, RandomSource

if TYPE_CHECKING:
    from deltacommit.engine.group.threads import GroupCommitter
    from deltacommit.io.logstore.base import LogStore

__all__ = ["LogTable", "open_table"]


class LogTable(OnTableLog):
    """A table's log with a commit policy, clock and randomness (a ``TransactionTable``)."""

    def __init__(self, log: TableLog, *, policy: CommitPolicy | None = None,
                 clock: Clock | None = None, random: RandomSource | None = None) -> None:
        self.log = log
        self.policy = policy or CommitPolicy()
        self.clock = clock or log.clock
        self.random = random or DEFAULT_RANDOM

    def __repr__(self) -> str:
        return f"LogTable({self.uri!r}, version={self.version})"

    @property
    def log_store(self) -> LogStore:
        return self.log.log_store

    @property
    def group_committer(self) -> GroupCommitter | None:
        return None

    def transaction(self, operation: str = "WRITE",
                    operation_parameters: Mapping[str, Any] | None = None) -> Transaction:
        return Transaction(self, operation, operation_parameters)


def open_table(uri: str, storage_options: Mapping[str, str] | None = None) -> LogTable:
    """The table at ``uri``, its newest version loaded from the log (TableNotFoundError if
    there is none)."""
    log_store = open_log_store(uri, dict(storage_options or {}))
    read: list[Commit] = []
    snapshot = Snapshot.load(log_store, read=read)
    # The newest commit, known by its bytes, proves what the next one follows (as a
    # DeltaTable's log knows it).
    log = TableLog(log_store, SYSTEM_CLOCK, snapshot,
                   known=tuple(c for c in read if c.version == snapshot.version))
    return LogTable(log)
