"""A round's committer: which published transactions it includes, checked as their owners
would check them.

The one invariant that makes a transaction land at most once: whoever claims version V with
member m has read every version in (r_m, V) and found no m.txnId in its ``commitInfo``
(``txnId`` or ``deltacommit.memberTxnIds``), has checked m against those versions as winners
with the conflict function its owner uses, and V <= B_m (m's version bound).  Version creation
is exactly once (the log store), so m lands in at most one version.  The commit loop holds the
first two for every member on every attempt (``CommitLoop.catch_up`` and the rebase after a
lost claim); ``FleetGroup.admit`` holds the third.

A record is a hint; it is included only if it is this table's (``tableId``, and ``readDigest``
is the SHA-256 of the commit at its read version as this writer reads it: a record copied from
another table, or naming a version rolled back and written again, is refused), it describes a
transaction this writer can check (read version at most ``max_back`` versions back, none newer
than the log), and it may share the version with the committer's own transaction (same
operation, parameters and isolation level; no application id in common; no conflict with a
member before it).  Anything else is left to its owner, who commits it itself.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from deltacommit.engine.commit.commit_info import committed_txn_ids
from deltacommit.engine.commit.loop import CommitLoop, Group, Member, Seen
from deltacommit.engine.commit.staged import StagedCommit
from deltacommit.engine.snapshot.snapshot import Commit
from deltacommit.errors import (
    ConcurrentModificationException,
    DeltaCommitError,
    MissingVersionError,
)
from deltacommit.protocol.conflicts import WinningCommit, check_conflicts
from deltacommit.protocol.fleet.record import FleetRecord

log = logging.getLogger(__name__)

#: Snapshots a round's committer tries to read the versions after, oldest first, when log
#: cleanup removed some of them.
_HISTORY_TRIES = 3


class Refused(Exception):
    """A published transaction this committer leaves to its owner (not an error of its)."""


class FleetMember(Member):
    """A member of a round: the committer's own transaction (``bound`` None: its owner may
    land it anywhere), or a published one with its version bound and deadline."""

    def __init__(self, staged: StagedCommit, bound: int | None = None,
                 deadline_ms: int | None = None, path: str = "") -> None:
        super().__init__(staged)
        self.bound = bound
        self.deadline_ms = deadline_ms
        #: The record's store path ("" for the committer's own).
        self.path = path
        # Published (the owner's own too: an earlier attempt of the same txnId may have
        # published it), so versions gone from the log leave its outcome unknown.
        self.published = True


class FleetGroup(Group):
    """A round's members: the committer's own transaction first, then the published ones."""

    def __init__(self, members: list[FleetMember], now_ms: object) -> None:
        super().__init__([], [], list(members))
        self._now_ms = now_ms
        self.vouches = True

    def admit(self, version: int) -> None:
        now = self._now_ms() if callable(self._now_ms) else 0
        for m in self.others:
            if isinstance(m, FleetMember) and m.bound is not None and not m.done and (
                    version > m.bound or (m.deadline_ms is not None and now > m.deadline_ms)):
                m.fail(Refused(f"version {version} is past the bound {m.bound} or deadline"))
        self.prune()


def staged_of(record: FleetRecord) -> StagedCommit:
    """The transaction a record publishes, as the commit engine takes it (its files are
    durable: an owner publishes only then)."""
    return StagedCommit(
        txn_id=record.txn_id, read_version=record.read_version, operation=record.operation,
        parameters=dict(record.parameters), metrics=dict(record.metrics),
        summary=record.summary, adds=record.adds, removes=record.removes, txns=record.txns,
        metadata=record.metadata, protocol=record.protocol, app_ids=record.app_ids,
        domains=record.domains)


def usable(record: FleetRecord, txn_id: str, *, table_id: str, base: int, max_back: int,
           now_ms: int) -> bool:
    """Whether ``record`` (listed under ``txn_id``) is one this committer may try to include
    at ``base + 1``, before any read of the log."""
    return (record.txn_id == txn_id and record.table_id == table_id
            and base - max_back <= record.read_version <= base
            and record.bound > base and record.deadline_ms >= now_ms)


def history_for(loop: CommitLoop, first: int, base: int) -> tuple[dict[int, Seen],
                                                                    dict[int, str]]:
    """Versions ``first+1..base`` as the checks see them, and the SHA-256 of each version
    ``first..base`` (one read of what this object does not hold)."""
    commits: list[Commit] = loop.log.known_commits(first, base)
    history: dict[int, Seen] = {}
    digests: dict[int, str] = {}
    for c in commits:
        digests[c.version] = c.digest
        if c.version > first:
            history[c.version] = (WinningCommit.from_actions(c.version, c.actions),
                                  frozenset(committed_txn_ids(c.commit_info)))
    return history, digests


def _holds(landed: int | None, version: int) -> bool:
    return landed is not None and landed >= version


def choose(loop: CommitLoop, own: FleetMember, candidates: Sequence[tuple[str, FleetRecord]],
           base: int, max_members: int, group: FleetGroup
           ) -> tuple[list[FleetMember], list[str]]:
    """The published transactions to commit with ``own`` at ``base + 1``, in serial order,
    each checked against the versions after its snapshot and against the members before it;
    and the paths of the records found landed already (a committer killed before deleting
    them, or a record replayed): whoever reads them may delete them.  ``own`` must be caught
    up to ``base`` already."""
    landed: list[str] = []
    if not candidates:
        return [], landed
    # The versions since the oldest snapshot, read once for all; where log cleanup removed
    # some, the records that read before them are left to their owners (who cannot be
    # checked against what is gone), and the others still included.
    firsts = sorted({r.read_version for _, r in candidates})
    for first in firsts[:_HISTORY_TRIES]:
        try:
            history, digests = history_for(loop, first, base)
            break
        except MissingVersionError as e:
            log.info("fleet: published transactions read before a version log cleanup "
                     "removed are left to their owners: %s", e)
        except (DeltaCommitError, ValueError) as e:
            log.info("fleet: published transactions left to their owners: %s", e)
            return [], landed
    else:
        return [], landed
    candidates = [(p, r) for p, r in candidates if r.read_version >= first]
    snapshot = loop.log.snapshot
    key = own.staged.group_key
    taken = set(own.staged.app_ids)
    blind = WinningCommit(base + 1, operation=key[0], is_blind_append=True)
    unread = WinningCommit(base + 1, operation=key[0], is_blind_append=False)
    own.staged.extend_view(blind if own.staged.summary.is_blind_append else unread)
    chosen: list[FleetMember] = []
    for path, record in candidates:
        if len(chosen) + 1 >= max_members:
            break
        if not record.read_digest or digests.get(record.read_version) != record.read_digest:
            continue  # not this table's history at its read version
        staged = staged_of(record)
        if staged.group_key != key or staged.app_ids & taken:
            continue
        m = FleetMember(staged, record.bound, record.deadline_ms, path)
        probe = Group([], [], [m])
        if not loop.catch_up(m, base, history, probe) or m.done:
            if m.result is not None:
                landed.append(path)
            continue  # landed already, or conflicts: its owner learns the same from the log
        if snapshot.version == base and any(
                _holds(snapshot.app_version(t.app_id), t.version) for t in staged.txns):
            continue  # an app version the table holds already: left to its owner
        try:
            for view in (blind, unread):
                check_conflicts(staged.summary, view, loop.log.uri)
        except ConcurrentModificationException:
            continue
        taken |= staged.app_ids
        staged.extend_view(blind if staged.summary.is_blind_append else unread)
        chosen.append(m)
    return chosen, landed
