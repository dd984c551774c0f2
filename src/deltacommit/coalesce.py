"""Group commit: concurrent transactions of one process merged into one Delta version.

Only one writer can create version N, so a table's commit rate is bounded by the latency of
one commit.  Threads of one process that commit to the same table object need not queue for
versions one by one: while one commit is in flight, the others wait, and the next commit
carries all of them.  That is group commit, as databases do it for their write-ahead logs.

Leader and followers.  The first transaction to arrive becomes the leader; transactions that
arrive while it commits queue behind it.  When its version is written, the leader wakes every
member it carried with its own result, and hands leadership to the oldest queued
transaction, which takes everything queued by then as the next group.  Nothing sleeps on the
hot path: groups form from whoever arrived during the previous commit
(``GroupCommitPolicy.max_wait`` adds a deliberate linger, off by default).

Who may share a version.  Members are checked with the conflict rules Delta applies between
versions (``conflicts.check_conflicts``): each member accepted into the group counts as a
concurrent winner for the members after it, so the group is equivalent to its members
committing one after another in that order.  A member that would conflict with an accepted
one is not failed but moved to the next group, where the accepted member is committed history
and the ordinary checks decide (it then fails only if it truly conflicts).  A member that
conflicts with history, or with a concurrent version of another process, fails alone; the
rest of its group carries on.  So a conflicting transaction never fails an innocent one.
Members also share one ``commitInfo``, so a group holds only members with the same operation,
operation parameters and isolation level: the ``commitInfo`` then describes every member
truthfully.  Application transaction ids stay exactly-once: two members touching the same
app id never share a group (the later one sees the earlier one's ``txn`` as history, and
``write`` skips a version already recorded).

What a group's version records.  A group of one is written exactly as a lone transaction
would write it.  A group of several has one ``commitInfo`` whose ``txnId`` is the group's own
id and whose ``deltacommit.memberTxnIds`` lists each member's ``txnId`` in serial order, so a
history checker maps every acknowledged transaction (``CommitResult.txn_id``) to its version
(``committed_txn_ids``).  ``readVersion`` is the oldest snapshot a member read,
``isBlindAppend`` holds if it holds for every member, ``operationMetrics`` are the members'
summed.  Other engines ignore fields they do not know, as the Delta protocol requires.

Coalesced appends (``append``).  A transaction carries data files it wrote itself, and on S3
each file is a request; for many tiny appends that request, not the commit, is the cost.
``append`` therefore hands its rows to the committer instead: the leader writes the rows of
every append in the group as one Parquet file per partition, then commits them in one version.
The rows are kept until the commit is decided, so if one of those appends fails (its app id
was committed concurrently by another process) the files are written again without its rows.

Across processes (``GroupCommitPolicy(processes=True)``).  Writers in separate processes
cannot share a version by themselves, and each must read every version the others write (a
Delta writer checks every intervening commit), so N optimistic writers pay about N requests per
commit between them.  Processes of one host that open the same table with ``processes=True``
instead share one committer: the first to take the table's lock file serves on a Unix socket,
the others send it their transactions (their data files already written) and get back their
result together with the commits they have not seen, so they never read the log to stay
current.  If the serving process exits, another one takes over; if it dies holding a
transaction, the sender finds its ``txnId`` in the log or commits the transaction itself (see
``_HostLink``).  Writers on other hosts are excluded as usual.

Costs.  An uncontended group costs what one commit costs (one conditional put on S3, see
``logstore/``), plus for coalesced appends one PUT per partition written.  A lost race costs
one read per concurrent version, for the whole group.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import pickle
import socket
import struct
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from deltacommit.conflicts import TransactionSummary, WinningCommit, check_conflicts
from deltacommit.errors import (
    CommitFailedError,
    ConcurrentModificationException,
    ConcurrentTransactionException,
    InvalidArgumentError,
    VersionExistsError,
)
from deltacommit.log.actions import Action, Add, CommitInfo, Metadata, Protocol, Remove, Txn, serialize_commit
from deltacommit.snapshot import Commit, Snapshot
from deltacommit.transaction import ENGINE_INFO, CommitResult, Transaction

if TYPE_CHECKING:
    from deltacommit.table import DeltaTable
    from deltacommit.writer import WriteResult

__all__ = ["MEMBERS_KEY", "GroupCommitPolicy", "GroupCommitStats", "GroupCommitter", "append",
           "committed_txn_ids"]

T = TypeVar("T")
#: A version as the catch-up checks see it: its conflict view and the txnIds it holds.
_Seen = tuple[WinningCommit, frozenset[str]]

#: ``commitInfo`` field listing the ``txnId`` of every transaction a group's version holds.
MEMBERS_KEY = "deltacommit.memberTxnIds"


def committed_txn_ids(commit_info: Mapping[str, Any] | CommitInfo | None) -> tuple[str, ...]:
    """The ``txnId`` of every transaction a version holds, from its ``commitInfo``.

    One for an ordinary commit; each member's for a group's version (see the module docstring).
    """
    if commit_info is None:
        return ()
    values = commit_info.values if isinstance(commit_info, CommitInfo) else commit_info
    members = values.get(MEMBERS_KEY)
    if isinstance(members, list):
        return tuple(m for m in members if isinstance(m, str))
    tid = values.get("txnId")
    return (tid,) if isinstance(tid, str) else ()


@dataclass(frozen=True, slots=True)
class GroupCommitPolicy:
    """How groups form.

    ``max_members`` bounds a group (and so the size of its commit file).  ``max_wait`` is how
    long, in seconds, a new leader lingers for more members before committing; 0 (the default)
    never waits: groups form from the transactions that arrive while the previous group commits.
    """

    max_members: int = 1000
    max_wait: float = 0.0
    #: Share one committer with the other processes of this host that open the same table
    #: (same location, store endpoint and commit mechanism) with ``processes=True``.
    processes: bool = False
    #: Where those processes meet (a lock file and a Unix socket per table); default: a
    #: directory of this user's under the system's temporary directory.
    socket_dir: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_members, bool) or not isinstance(self.max_members, int) \
                or self.max_members < 1:
            raise InvalidArgumentError(
                f"GroupCommitPolicy.max_members must be a positive integer, got {self.max_members!r}")
        if isinstance(self.max_wait, bool) or not isinstance(self.max_wait, int | float) \
                or not 0 <= self.max_wait <= 60:
            raise InvalidArgumentError(
                f"GroupCommitPolicy.max_wait must be between 0 and 60 seconds, got {self.max_wait!r}")


@dataclass(slots=True)
class GroupCommitStats:
    """Counters of one committer (read them for benchmarks and monitoring)."""

    submitted: int = 0
    versions: int = 0
    transactions: int = 0
    deferred: int = 0
    failed: int = 0
    attempts: int = 0
    largest_group: int = 0

    def snapshot(self) -> dict[str, int]:
        return {"submitted": self.submitted, "versions": self.versions, "transactions": self.transactions,
                "deferred": self.deferred, "failed": self.failed, "attempts": self.attempts,
                "largest_group": self.largest_group}


# --------------------------------------------------------------------------- members


def _parameters_key(txn: Transaction) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(txn._rendered_parameters().items()))


class _Member:
    """One transaction waiting for, or being carried by, a group."""

    __slots__ = ("app_ids", "attempts", "checked", "deferred", "error", "event", "files", "key",
                 "lead", "queued", "result", "rows", "summary", "txn", "winners")

    def __init__(self, txn: Transaction, summary: TransactionSummary, rows: pa.Table | None) -> None:
        self.txn = txn
        self.summary = summary
        #: Rows for the leader to write (coalesced appends); None for a transaction that
        #: carries its own files.
        self.rows = rows
        self.key = (txn.operation, _parameters_key(txn), summary.effective_isolation)
        self.app_ids = frozenset(txn._txns) | summary.read_app_ids
        #: Every version up to this one has been checked against this transaction.
        self.checked = txn.read_version
        self.winners: list[int] = []
        self.attempts = 0
        #: Data files the group wrote for its coalesced appends (set when they commit).
        self.files = 0
        self.result: CommitResult | None = None
        self.error: BaseException | None = None
        self.lead = False
        self.queued = False
        self.deferred = False
        self.event = threading.Event()

    @property
    def done(self) -> bool:
        return self.result is not None or self.error is not None

    def resolve(self, result: CommitResult) -> None:
        self.txn._done = True
        self.txn.result = result
        self.result = result
        self.event.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.event.set()

    def outcome(self) -> CommitResult:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def _extend_view(view: WinningCommit, txn: Transaction) -> None:
    """Add an accepted member's actions to the stand-in winner the next members are checked
    against.  One stand-in per kind (blind appends, others) is equivalent to checking against
    each accepted member: every check looks for any one action of the winner that conflicts."""
    view.added.extend(txn._adds)
    view.removed.extend(txn._removes)
    view.txns.extend(txn._txns.values())
    if txn._metadata is not None:
        view.metadata = txn._metadata
    if txn._protocol is not None:
        view.protocol = txn._protocol


def _sum_metrics(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Metrics of several transactions: counts summed, anything else from the first member."""
    out: dict[str, Any] = {}
    for part in parts:
        for k, v in part.items():
            if k not in out:
                out[k] = v
                continue
            with contextlib.suppress(TypeError, ValueError):
                out[k] = str(int(out[k]) + int(v))
    return out


# --------------------------------------------------------------------------- the committer


class _Group:
    """The members one leader commits: coalesced appends sharing ``adds``, then the others."""

    __slots__ = ("adds", "appends", "key", "others")

    def __init__(self, key: tuple[Any, ...], appends: list[_Member], adds: list[Add],
                 others: list[_Member]) -> None:
        self.key = key
        self.appends = appends
        self.adds = adds
        self.others = others

    @property
    def members(self) -> list[_Member]:
        return self.appends + self.others


class GroupCommitter:
    """Merges the concurrent transactions committed through one ``DeltaTable`` object.

    Created by ``DeltaTable(..., group_commit=True)``; ``Transaction.commit`` and ``append``
    submit to it.  Thread-safe; asyncio code calls them through ``asyncio.to_thread``.

    Two stages overlap: while one group commits (holding ``_commit_lock``), the next leader
    takes the transactions queued meanwhile and writes their coalesced rows; it then waits for
    the commit stage, passes the first stage on to the next queued transaction, and commits.
    """

    def __init__(self, table: DeltaTable, policy: GroupCommitPolicy) -> None:
        self.table = table
        self.policy = policy
        self.stats = GroupCommitStats()
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._queue: deque[_Member] = deque()
        self._leading = False
        self._commit_lock = threading.Lock()
        self._host = _HostLink(self) if policy.processes else None

    def __repr__(self) -> str:
        return f"GroupCommitter({self.table.uri!r}, {self.policy})"

    def wait_submitted(self, count: int, timeout: float | None = None) -> bool:
        """Block until ``count`` transactions have been submitted in all (False on timeout).

        Lets a caller order submissions from several threads without sleeping, as tests do.
        """
        with self._lock:
            return self._arrived.wait_for(lambda: self.stats.submitted >= count, timeout)

    # ----------------------------------------------------------------- submitting

    def commit(self, txn: Transaction) -> CommitResult:
        """Commit ``txn`` (already validated), possibly in one version with others."""
        if self._host is not None:
            return self._host.commit(txn)
        return self._submit(txn, None).outcome()

    @property
    def shares_processes(self) -> bool:
        return self._host is not None

    @property
    def serving(self) -> bool:
        """Whether this process commits for the other processes of the host (``processes``)."""
        return self._host is not None and self._host.serving

    def close(self) -> None:
        """Stop committing for other processes (they elect another committer); the process
        does so by itself when it exits."""
        if self._host is not None:
            self._host.close()

    def commit_rows(self, txn: Transaction, rows: pa.Table) -> tuple[CommitResult, int]:
        """Commit ``txn`` with ``rows`` that a leader writes, before the commit, into files
        shared with the group's other appends; also returns how many files the group wrote.
        ``rows`` must be in the table schema of ``txn``'s snapshot."""
        member = self._submit(txn, rows)
        return member.outcome(), member.files

    def _submit(self, txn: Transaction, rows: pa.Table | None,
                summary: TransactionSummary | None = None) -> _Member:
        member = _Member(txn, summary if summary is not None else txn.summary(), rows)
        with self._lock:
            self._queue.append(member)
            member.queued = True
            self.stats.submitted += 1
            if not self._leading:
                self._leading = True
                member.lead = True
            self._arrived.notify_all()
        while True:
            if member.lead:
                member.lead = False
                self._lead()
            if member.done:
                return member
            # Set when the member is carried to its end, or made the next leader.
            member.event.wait()
            member.event.clear()

    # ----------------------------------------------------------------- leading

    def _lead(self) -> None:
        """Lead one group through both stages."""
        handed = False
        group: _Group | None = None
        commit: Commit | None = None
        snapshot: Snapshot | None = None
        try:
            batch = self._take()
            group = self._guarded(batch, lambda: self._prepare(batch))
            with self._commit_lock:
                if group is not None:
                    # Transactions that carry their own files and arrived while this group
                    # waited for the commit stage need no first stage: they join now.
                    group.others += self._take_late(group.key, len(batch))
                self._hand_off()
                handed = True
                if group is not None:
                    g = group
                    done = self._guarded(g.members, lambda: self._commit(g))
                    if done is not None:
                        commit, snapshot = done
        finally:
            if not handed:
                self._hand_off()
        if commit is not None:
            # Outside both stages: the next group commits while this version's checkpoint
            # (if it owes one) is written from the snapshot exactly at its version.
            self.table._post_commit(commit, snapshot)

    def _guarded(self, members: Sequence[_Member], stage: Callable[[], T]) -> T | None:
        """Run a stage; if it fails unexpectedly (a storage error writing the commit, most
        likely), each of ``members`` it left unfinished gets that error: the outcome of its
        commit is what the error says, as for a lone transaction."""
        try:
            return stage()
        except Exception as e:
            for m in members:
                if not m.done and not m.queued:
                    m.fail(e)
            return None

    def _take(self) -> list[_Member]:
        policy = self.policy
        with self._lock:
            # Lingering is for fresh arrivals; members moved out of a group have waited once.
            if policy.max_wait > 0 and 0 < len(self._queue) < policy.max_members \
                    and not self._queue[0].deferred:
                deadline = time.monotonic() + policy.max_wait
                while len(self._queue) < policy.max_members:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._arrived.wait(left)
            n = min(len(self._queue), policy.max_members)
            batch = [self._queue.popleft() for _ in range(n)]
            for m in batch:
                m.queued = False
            return batch

    def _take_late(self, key: tuple[Any, ...], taken: int) -> list[_Member]:
        """Queued members without rows to write and with the group's key (up to the limit)."""
        room = self.policy.max_members - taken
        with self._lock:
            if room <= 0 or not self._queue:
                return []
            late = [m for m in self._queue if m.rows is None and m.key == key][:room]
            if late:
                chosen = {id(m) for m in late}
                self._queue = deque(m for m in self._queue if id(m) not in chosen)
                for m in late:
                    m.queued = False
            return late

    def _requeue(self, members: Sequence[_Member]) -> None:
        """Put deferred members back at the head of the queue, in their order; if no one holds
        the first stage (it was passed on while the queue was empty), the first of them does."""
        if not members:
            return
        with self._lock:
            for m in reversed(members):
                m.queued = True
                m.deferred = True
                self._queue.appendleft(m)
            self.stats.deferred += len(members)
            if not self._leading:
                self._leading = True
                head = self._queue[0]
                head.lead = True
                head.event.set()

    def _hand_off(self) -> None:
        """Pass the first stage to the oldest queued transaction (or let the next arrival
        take it)."""
        with self._lock:
            if self._queue:
                nxt = self._queue[0]
                nxt.lead = True
                nxt.event.set()
            else:
                self._leading = False

    # ----------------------------------------------------------------- stage 1: prepare

    def _prepare(self, batch: list[_Member]) -> _Group | None:
        """Choose the group's members and write the rows of its coalesced appends."""
        if not batch:
            return None
        key = batch[0].key
        taken: set[str] = set()
        appends: list[_Member] = []
        others: list[_Member] = []
        deferred: list[_Member] = []
        for m in batch:
            if m.key != key or (m.rows is not None and m.app_ids & taken):
                deferred.append(m)
            elif m.rows is not None:
                appends.append(m)
                taken |= m.app_ids
            else:
                others.append(m)
        self._requeue(deferred)
        adds = self._guarded(appends, lambda: self._write_rows(appends)) or []
        appends = [m for m in appends if not m.done]
        return _Group(key, appends, adds, others)

    def _write_rows(self, appends: Sequence[_Member]) -> list[Add]:
        """One set of data files (a file per partition) holding every coalesced append's rows."""
        if not appends:
            return []
        from deltacommit.datafiles import num_indexed_cols, write_data_files

        table = self.table
        snap = table.snapshot
        schema = snap.schema
        parts = [m.rows if m.rows.schema.equals(schema) else m.rows.cast(schema)
                 for m in appends if m.rows is not None]
        data = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        return write_data_files(table.log_store.store, data, snap.partition_columns,
                                clock=table.clock, random=table.random,
                                indexed_cols=num_indexed_cols(snap.configuration))

    def _rewrite_rows(self, group: _Group) -> None:
        """The group's files must hold exactly the rows of the appends that commit."""
        self._discard_files(group.adds)
        group.adds = []
        group.adds = self._write_rows(group.appends)

    def _discard_files(self, adds: Sequence[Add]) -> None:
        """Delete files written for a group that will never reference them (best effort:
        vacuum removes any left behind)."""
        from deltacommit.partitions import decode_add_path

        store = self.table.log_store.store
        for a in adds:
            with contextlib.suppress(Exception):
                store.delete(decode_add_path(a.path))

    # ----------------------------------------------------------------- stage 2: commit

    def _commit(self, group: _Group) -> tuple[Commit, Snapshot] | None:
        """Check the group against history and each other, then commit it."""
        table = self.table
        base = table.version
        history: dict[int, _Seen] = {}
        appends = [m for m in group.appends if self._catch_up(m, base, history)]
        if len(appends) != len(group.appends):
            group.appends = appends
            self._rewrite_rows(group)
        candidates = [m for m in group.others if self._catch_up(m, base, history)]
        # Coalesced appends go first in the serial order (they read nothing but app ids);
        # each other member is then checked against everything accepted before it.
        blind = WinningCommit(base + 1, operation=group.key[0], is_blind_append=True)
        unread = WinningCommit(base + 1, operation=group.key[0], is_blind_append=False)
        blind.added.extend(group.adds)
        for m in group.appends:
            blind.txns.extend(m.txn._txns.values())
        others: list[_Member] = []
        deferred: list[_Member] = []
        for m in candidates:
            try:
                for view in (blind, unread):
                    check_conflicts(m.summary, view, table.uri)
            except ConcurrentModificationException:
                deferred.append(m)
                continue
            others.append(m)
            _extend_view(blind if m.summary.is_blind_append else unread, m.txn)
        group.others = others
        self._requeue(deferred)
        return self._attempt(group, base)

    def _catch_up(self, m: _Member, base: int, history: dict[int, _Seen]) -> bool:
        """Check ``m`` against the versions after its snapshot up to ``base``; False if it
        failed, or if one of them already holds it (a member resubmitted after the process
        that committed it for another process died before answering)."""
        if m.checked >= base:
            return True
        table = self.table
        missing = [v for v in range(m.checked + 1, base + 1) if v not in history]
        if missing:
            for c in table._known_commits(missing[0], base):
                if c.version not in history:
                    history[c.version] = (WinningCommit.from_actions(c.version, c.actions),
                                          frozenset(committed_txn_ids(c.commit_info)))
        for v in range(m.checked + 1, base + 1):
            winner, ids = history[v]
            if m.txn.txn_id in ids:
                data = table.log_store.read_commit(v)
                m.resolve(CommitResult(v, m.attempts, winners=tuple(m.winners),
                                       txn_id=m.txn.txn_id, digest=hashlib.sha256(data).hexdigest(),
                                       read_version=m.txn.read_version, group_size=len(ids)))
                return False
            try:
                check_conflicts(m.summary, winner, table.uri)
            except ConcurrentModificationException as e:
                self._fail(m, e)
                return False
            m.winners.append(v)
        m.checked = base
        return True

    def _fail(self, m: _Member, error: BaseException) -> None:
        self.stats.failed += 1
        m.fail(error)

    def _attempt(self, group: _Group, base: int) -> tuple[Commit, Snapshot] | None:
        """The commit loop of one group: as ``Transaction.commit``, member by member."""
        table = self.table
        policy = table.policy
        group_id = table.random.uuid()
        attempt = 0
        while group.appends or group.others:
            members = group.members
            attempt += 1
            self.stats.attempts += 1
            for m in members:
                m.attempts += 1
            version = base + 1
            actions = self._actions(group, group_id)
            data = serialize_commit(actions)
            try:
                table.log_store.write_commit(version, data)
            except VersionExistsError:
                ours = {m.txn.txn_id for m in members}
                appends = len(group.appends)
                for c in table._commits_after(base):
                    if ours & set(committed_txn_ids(c.commit_info)):
                        # An earlier attempt of this group is in the log although the store
                        # said the version was taken (an answer lost and the request retried).
                        return self._landed(c, group)
                    winner = WinningCommit.from_actions(c.version, c.actions)
                    for m in group.members:
                        try:
                            check_conflicts(m.summary, winner, table.uri)
                        except ConcurrentModificationException as e:
                            self._fail(m, e)
                            continue
                        m.winners.append(c.version)
                        m.checked = c.version
                    group.appends = [m for m in group.appends if not m.done]
                    group.others = [m for m in group.others if not m.done]
                    base = c.version
                if len(group.appends) != appends:
                    self._rewrite_rows(group)
                left = group.members
                if attempt >= policy.max_attempts and left:
                    error = CommitFailedError(
                        f"gave up committing a group of {len(left)} {group.key[0]} transactions "
                        f"to table {table.uri} after {attempt} attempts: each lost the race for "
                        f"the next version (last tried version {version}). Raise "
                        "CommitPolicy.max_attempts if this many concurrent writers are expected")
                    for m in left:
                        self._fail(m, error)
                    self._discard_files(group.adds)
                    return None
                if left:
                    table.clock.sleep(policy.backoff(attempt, table.random.uniform(0.0, 1.0)))
                continue
            commit = Commit(version, actions)
            table._committed(commit)
            snapshot = table.snapshot
            digest = hashlib.sha256(data).hexdigest()
            self.stats.versions += 1
            self.stats.transactions += len(members)
            self.stats.largest_group = max(self.stats.largest_group, len(members))
            for m in members:
                m.files = len(group.adds) if m.rows is not None else 0
                m.resolve(CommitResult(version, m.attempts, winners=tuple(m.winners),
                                       txn_id=m.txn.txn_id, digest=digest,
                                       read_version=m.txn.read_version, group_size=len(members)))
            return commit, snapshot
        return None

    def _landed(self, commit: Commit, group: _Group) -> tuple[Commit, Snapshot]:
        table = self.table
        digest = hashlib.sha256(table.log_store.read_commit(commit.version)).hexdigest()
        recorded = set(committed_txn_ids(commit.commit_info))
        for m in group.members:
            if m.txn.txn_id in recorded:
                m.files = len(group.adds) if m.rows is not None else 0
                m.resolve(CommitResult(commit.version, m.attempts, winners=tuple(m.winners),
                                       txn_id=m.txn.txn_id, digest=digest,
                                       read_version=m.txn.read_version,
                                       group_size=len(recorded)))
            else:  # pragma: no cover - a group's membership only shrinks after an attempt
                self._requeue([m])
        return commit, table.snapshot

    # ----------------------------------------------------------------- the version's actions

    def _actions(self, group: _Group, group_id: str) -> list[Action]:
        members = group.members
        adds = group.adds
        if len(members) == 1:
            # A group of one is written exactly as the lone transaction would write it.
            txn = members[0].txn
            if group.appends:
                txn._adds = list(adds)
            return txn._actions(txn._commit_info(members[0].summary))
        protocol: Protocol | None = None
        metadata: Metadata | None = None
        txns: list[Txn] = []
        removes: list[Remove] = []
        files: list[Add] = list(adds)
        for m in members:
            txn = m.txn
            protocol = txn._protocol or protocol
            metadata = txn._metadata or metadata
            txns.extend(txn._txns.values())
            removes.extend(txn._removes)
            files.extend(txn._adds)
        metrics = _sum_metrics([m.txn._metrics() for m in members]
                               + [{"numFiles": str(len(adds)),
                                   "numOutputBytes": str(sum(a.size for a in adds))}])
        first = members[0]
        info = CommitInfo({
            "timestamp": int(self.table.clock.time() * 1000),
            "operation": first.txn.operation,
            "operationParameters": first.txn._rendered_parameters(),
            "readVersion": min(m.txn.read_version for m in members),
            "isolationLevel": first.summary.effective_isolation.value,
            "isBlindAppend": all(m.summary.is_blind_append for m in members),
            "operationMetrics": metrics,
            "engineInfo": ENGINE_INFO,
            "txnId": group_id,
            MEMBERS_KEY: [m.txn.txn_id for m in members],
        })
        out: list[Action] = [info]
        if protocol is not None:
            out.append(protocol)
        if metadata is not None:
            out.append(metadata)
        out.extend(txns)
        out.extend(removes)
        out.extend(files)
        return out


# --------------------------------------------------------------------------- coalesced appends


def append(table: DeltaTable | str, data: Any, *, app_id: str | None = None,
           app_version: int | None = None,
           storage_options: Mapping[str, str] | None = None) -> WriteResult:
    """Append ``data``; on a group-commit table, concurrent appends share files and a version.

    The same contract as ``write(table, data, mode="append", app_id=..., app_version=...)``:
    an ``(app_id, app_version)`` already recorded is skipped.  On a table opened with
    ``group_commit``, the rows are handed to the group's leader, which writes the rows of every
    append in its group as one file per partition before committing them together; each call
    still returns its own result (``num_files`` counts the files its group wrote).  On any
    other table, or given a URI, this is ``write``.
    """
    from deltacommit.writer import (
        WriteResult,
        already_written,
        check_write_arguments,
        recorded_concurrently,
        start_write,
        write,
    )

    committer = table.group_committer if not isinstance(table, str) else None
    if committer is None or committer.shares_processes:
        # Across processes each append carries its own file (rows are not shipped between
        # processes); the commits are still shared.
        return write(table, data, mode="append", app_id=app_id, app_version=app_version,
                     storage_options=storage_options)
    assert not isinstance(table, str)
    check_write_arguments("append", None, app_id, app_version)
    arrow = _prepare(table, data)
    txn, _ = start_write(table, "append", None, None)
    if already_written(txn, app_id, app_version):
        return WriteResult(txn.read_version, 0, skipped=True)
    if app_id is not None and app_version is not None:
        txn.set_app_version(app_id, app_version)
    rows = arrow.num_rows
    txn.operation_metrics["numOutputRows"] = str(rows)
    txn._validate()
    try:
        result, files = committer.commit_rows(txn, arrow)
    except ConcurrentTransactionException:
        # As in ``write``; these rows were left out of the group's files, so nothing to delete.
        if not recorded_concurrently(table, app_id, app_version):
            raise
        return WriteResult(table.version, 0, skipped=True)
    return WriteResult(result.version, result.attempts, num_files=files, num_rows=rows,
                       txn_id=result.txn_id, digest=result.digest)


def _prepare(table: DeltaTable, data: Any) -> pa.Table:
    """The checks and casts ``write`` applies to appended data."""
    from deltacommit.schema import cast_to_table_schema, check_write_compatible
    from deltacommit.writer import check_not_null, check_table_constraints, to_arrow_table

    arrow = to_arrow_table(data)
    schema = table.schema
    if not arrow.schema.equals(schema):
        check_write_compatible(schema, arrow.schema, table.uri)
        arrow = cast_to_table_schema(arrow, schema)
    check_not_null(arrow, schema, table.uri)
    check_table_constraints(table, arrow)
    return arrow


# --------------------------------------------------------------------------- across processes


@dataclass(frozen=True, slots=True)
class _Request:
    """A transaction handed to the host's committer by another process (its files written)."""

    txn_id: str
    read_version: int
    operation: str
    operation_parameters: dict[str, Any]
    operation_metrics: dict[str, Any]
    adds: list[Add]
    removes: list[Remove]
    txns: list[Txn]
    metadata: Metadata | None
    protocol: Protocol | None
    summary: TransactionSummary
    #: The version of the sender's snapshot: the answer carries the commits after it.
    known_version: int


@dataclass(frozen=True, slots=True)
class _Reply:
    result: CommitResult | None
    #: (class name, message, attributes) of the error the transaction ended with.
    error: tuple[str, str, dict[str, Any]] | None
    #: Commits after the sender's snapshot up to its version, so it stays current for free.
    commits: list[Commit]


_FRAME = struct.Struct("!Q")


def _send(sock: socket.socket, obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_FRAME.pack(len(data)) + data)


def _recv(sock: socket.socket) -> Any:
    (size,) = _FRAME.unpack(_recv_exactly(sock, _FRAME.size))
    return pickle.loads(_recv_exactly(sock, size))


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(min(size - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        buf += chunk
    return bytes(buf)


def _encode_error(e: BaseException) -> tuple[str, str, dict[str, Any]]:
    attrs = {k: v for k, v in vars(e).items() if isinstance(v, str | int | float | bool | None)}
    return type(e).__name__, str(e), attrs


def _decode_error(encoded: tuple[str, str, dict[str, Any]]) -> BaseException:
    """The error as this process's own exception class, with the same message and attributes
    (errors of other kinds arrive as CommitFailedError naming their kind)."""
    from deltacommit import errors

    name, message, attrs = encoded
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, errors.DeltaCommitError)):
        return CommitFailedError(f"the committer of this host failed: {name}: {message}")
    e = cls.__new__(cls)
    Exception.__init__(e, message)
    e.__dict__.update(attrs)
    return e


def _remote_transaction(table: DeltaTable, req: _Request) -> Transaction:
    """The sender's transaction, rebuilt on this process's table object."""
    txn = Transaction(table, req.operation, req.operation_parameters)
    txn.read_version = req.read_version
    txn.txn_id = req.txn_id
    txn.operation_metrics = dict(req.operation_metrics)
    txn._adds = list(req.adds)
    txn._removes = list(req.removes)
    txn._txns = {t.app_id: t for t in req.txns}
    txn._metadata = req.metadata
    txn._protocol = req.protocol
    return txn


def _host_paths(table: DeltaTable, policy: GroupCommitPolicy) -> tuple[Path, Path]:
    """The lock file and socket of a table's committer on this host.

    Keyed by location, store (its endpoint) and commit mechanism, so processes that would not
    exclude each other's commits never share a committer.
    """
    ls = table.log_store
    ident = json.dumps([ls.table_uri, repr(ls.store), sorted(ls.coordination_config().items())])
    key = hashlib.sha256(ident.encode()).hexdigest()[:24]
    base = Path(policy.socket_dir) if policy.socket_dir else \
        Path(tempfile.gettempdir()) / f"deltacommit-{os.getuid()}"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = base.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise InvalidArgumentError(
            f"group commit across processes for table {table.uri}: {base} must be a directory "
            "of this user's that no one else can read or write (mode 0700)")
    sock = base / f"{key}.sock"
    if len(str(sock)) > 100:
        raise InvalidArgumentError(
            f"group commit across processes for table {table.uri}: socket path {sock} is too "
            "long for a Unix socket; give GroupCommitPolicy a shorter socket_dir")
    return base / f"{key}.lock", sock


class _HostLink:
    """This process's way to the host's shared committer for one table.

    The process holding the table's lock file serves: it accepts transactions on a Unix socket
    and commits them with its own (local) transactions, answering each with its result and the
    commits its sender has not seen.  Every other process sends its transactions there.  When
    no process serves, the first to take the lock does; a process that finds the lock taken
    but nobody answering (one is starting or stopping) commits by itself, which is always safe:
    a commit through the host's committer and one made directly exclude each other like any
    two writers.

    If the serving process dies with a transaction in hand, its sender cannot know whether it
    was committed: it looks for its ``txnId`` in the versions after its snapshot and, if absent,
    submits it again with the same ``txnId``.  Every submission first checks the versions after
    the transaction's snapshot for that ``txnId`` (``GroupCommitter._catch_up``), and a commit
    attempt that loses its version checks the winner the same way, so an earlier submission
    landing late is recognised instead of committed twice.  Only this user's processes can
    reach the socket (its directory is 0700); messages are pickled.
    """

    def __init__(self, committer: GroupCommitter) -> None:
        self.committer = committer
        self.lock_path, self.socket_path = _host_paths(committer.table, committer.policy)
        self._lock = threading.Lock()
        self._server: socket.socket | None = None
        self._lock_fd: int | None = None
        self._handlers: set[threading.Thread] = set()
        self._closed = False

    @property
    def serving(self) -> bool:
        return self._server is not None

    # ----------------------------------------------------------------- sending

    def commit(self, txn: Transaction) -> CommitResult:
        committer = self.committer
        if self._server is None and not self._closed:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(self.socket_path))
            except OSError:
                sock.close()
                self._serve()  # serving now, or someone else is starting: commit here either way
            else:
                try:
                    with sock:
                        _send(sock, self._request(txn))
                        reply: _Reply = _recv(sock)
                except (OSError, EOFError, pickle.UnpicklingError):
                    landed = self._find(txn)
                    if landed is not None:
                        return landed
                    # Not in the log (yet): commit it here; a late landing of the lost
                    # submission is recognised by its txnId.
                else:
                    return self._settle(txn, reply)
        return committer._submit(txn, None).outcome()

    def _request(self, txn: Transaction) -> _Request:
        return _Request(
            txn.txn_id, txn.read_version, txn.operation, dict(txn.operation_parameters),
            dict(txn.operation_metrics), list(txn._adds), list(txn._removes),
            list(txn._txns.values()), txn._metadata, txn._protocol, txn.summary(),
            self.committer.table.version)

    def _settle(self, txn: Transaction, reply: _Reply) -> CommitResult:
        table = self.committer.table
        for c in reply.commits:
            table._committed(c)
        if reply.error is not None:
            raise _decode_error(reply.error)
        assert reply.result is not None
        txn._done = True
        txn.result = reply.result
        return reply.result

    def _find(self, txn: Transaction) -> CommitResult | None:
        """The version holding ``txn``, if the process that had it committed it before dying."""
        table = self.committer.table
        for c in table._commits_after(txn.read_version):
            ids = committed_txn_ids(c.commit_info)
            if txn.txn_id in ids:
                data = table.log_store.read_commit(c.version)
                result = CommitResult(c.version, 1, txn_id=txn.txn_id,
                                      digest=hashlib.sha256(data).hexdigest(),
                                      read_version=txn.read_version, group_size=len(ids))
                txn._done = True
                txn.result = result
                return result
        return None

    # ----------------------------------------------------------------- serving

    def _serve(self) -> bool:
        """Become the host's committer for the table if no process is; False if one is."""
        with self._lock:
            if self._server is not None:
                return True
            if self._closed:
                return False
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                with contextlib.suppress(FileNotFoundError):
                    self.socket_path.unlink()  # left by a process that died serving
                server.bind(str(self.socket_path))
                server.listen(256)
            except OSError:
                server.close()
                os.close(fd)
                raise
            self._server, self._lock_fd = server, fd
            threading.Thread(target=self._accept, args=(server,), daemon=True,
                             name="deltacommit-host-committer").start()
            _SERVING.add(self)
            return True

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # closed
            handler = threading.Thread(target=self._handle, args=(conn,), daemon=True,
                                       name="deltacommit-host-member")
            with self._lock:
                self._handlers.add(handler)
            handler.start()

    def _handle(self, conn: socket.socket) -> None:
        table = self.committer.table
        try:
            with conn:
                try:
                    req: _Request = _recv(conn)
                    txn = _remote_transaction(table, req)
                except (OSError, EOFError):
                    return  # the sender went away before sending it all
                except Exception as e:
                    _send(conn, _Reply(None, _encode_error(e), []))
                    return
                member = self.committer._submit(txn, None, req.summary)
                result, error = member.result, member.error
                commits: list[Commit] = []
                if result is not None and result.version > req.known_version:
                    commits = table._cached_commits(req.known_version + 1, result.version)
                _send(conn, _Reply(result, None if error is None else _encode_error(error),
                                   commits))
        except OSError:
            pass  # the sender died: nobody waits for the answer
        finally:
            with self._lock:
                self._handlers.discard(threading.current_thread())

    def close(self) -> None:
        """Stop serving: refuse new senders, answer the ones in hand, release the lock."""
        with self._lock:
            self._closed = True
            server, self._server = self._server, None
            handlers = list(self._handlers)
        if server is None:
            return
        server.close()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        for h in handlers:
            h.join(60)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lock
            self._lock_fd = None
        _SERVING.discard(self)


#: Links serving in this process, closed at exit so that senders are answered first.
_SERVING: set[_HostLink] = set()


@atexit.register
def _close_serving() -> None:
    for link in list(_SERVING):
        link.close()
