"""A transaction's staged changes as one immutable value.

The commit loop, the group committer and the host link between processes all need the same
things of a transaction: what it read (its ``TransactionSummary``), what it writes, and who it
is.  Handing them this value instead of the ``Transaction`` object keeps the transaction's
internals its own, and lets another process send its transaction to the host's committer as
it is (the value pickles).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from deltacommit.protocol.actions import (
    Action,
    Add,
    AddCDCFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    Remove,
    Txn,
)
from deltacommit.protocol.conflicts import TransactionSummary, WinningCommit


@dataclass(frozen=True, slots=True)
class StagedCommit:
    """What one transaction commits, and what it read (``summary``)."""

    txn_id: str
    read_version: int
    operation: str
    #: ``operationParameters`` as Delta writes them: every value a string.
    parameters: Mapping[str, str]
    #: ``operationMetrics`` the caller gave; counts of the actions are added when the
    #: ``commitInfo`` is built (``commit_info.action_metrics``).
    metrics: Mapping[str, Any]
    summary: TransactionSummary
    adds: tuple[Add, ...] = ()
    removes: tuple[Remove, ...] = ()
    txns: tuple[Txn, ...] = ()
    metadata: Metadata | None = None
    protocol: Protocol | None = None
    #: Application ids this transaction records or read: two such never share a version.
    app_ids: frozenset[str] = field(default=frozenset())
    #: Metadata domains this transaction sets or removes.
    domains: tuple[DomainMetadata, ...] = ()
    #: Store paths of data files among ``adds`` written without being made durable: the
    #: commit loop makes them durable (``ObjectStore.make_durable``) before it writes the
    #: version, together with those of the other members of its group.
    unsynced: tuple[str, ...] = ()
    #: Change data files (``cdc`` actions) of a row-level change on a change-data-feed table.
    cdc: tuple[AddCDCFile, ...] = ()
    #: The SHA-256 of the commit at ``read_version`` as the transaction's table object held
    #: it when the transaction began ("" where unknown): a version rolled back and written
    #: again since is no longer what the transaction read (``TableLog.still_holds``).
    read_digest: str = ""

    def with_adds(self, adds: tuple[Add, ...]) -> StagedCommit:
        """The same transaction carrying ``adds`` (files a group leader wrote for its rows)."""
        return replace(self, adds=adds)

    @property
    def group_key(self) -> tuple[Any, ...]:
        """Transactions share a version only if one ``commitInfo`` describes each truthfully:
        same operation, same parameters, same isolation level."""
        # A version with cdc actions is read by change-data readers from its cdc files alone,
        # so a transaction writing them shares it only with others that do.
        return (self.operation, tuple(sorted(self.parameters.items())),
                self.summary.effective_isolation, bool(self.cdc))

    def actions(self, commit_info: CommitInfo) -> list[Action]:
        """The version's actions in the order Delta writers use."""
        out: list[Action] = [commit_info]
        if self.protocol is not None:
            out.append(self.protocol)
        if self.metadata is not None:
            out.append(self.metadata)
        out.extend(self.txns)
        out.extend(self.domains)
        out.extend(self.removes)
        out.extend(self.adds)
        out.extend(self.cdc)
        return out

    def extend_view(self, view: WinningCommit) -> None:
        """Add this transaction's actions to a stand-in winner that later members of a group
        are checked against.  One stand-in per kind (blind appends, others) is equivalent to
        checking against each accepted member: every check looks for any one action of the
        winner that conflicts."""
        view.added.extend(self.adds)
        view.removed.extend(self.removes)
        view.txns.extend(self.txns)
        view.domains.update(d.domain for d in self.domains)
        if self.metadata is not None:
            view.metadata = self.metadata
        if self.protocol is not None:
            view.protocol = self.protocol
