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

Durability.  A data file must be durable before a version names it, but not before: members
write their files unsynced (``dc.write``, and the leader the files of coalesced appends), and
the leader makes the whole group's files durable at once in the first stage, while the previous
group commits (``ObjectStore.make_durable``: one ``syncfs`` on Linux instead of an ``fsync`` per
file, each of which also made every other thread's sync and the commit's own wait).  Members
whose files are not durable yet therefore do not join a group late, in its commit stage; they
lead or join the next one.  The commit loop checks again before every version and syncs
whatever is left (files rewritten after a member dropped out).

Across processes (``GroupCommitPolicy(processes=True)``).  Writers in separate processes
cannot share a version by themselves, and each must read every version the others write (a
Delta writer checks every intervening commit), so N optimistic writers pay about N requests per
commit between them.  Processes of one host that open the same table with ``processes=True``
instead share one committer: the first to take the table's lock file serves on a Unix socket,
the others send it their transactions (their data files already written) and get back their
result together with the commits they have not seen, so they never read the log to stay
current.  If the serving process exits, another one takes over; if it dies holding a
transaction, the sender finds its ``txnId`` in the log or commits the transaction itself (see
``group_host.HostLink``).  Writers on other hosts are excluded as usual.

Costs.  An uncontended group costs what one commit costs (one conditional put on S3, see
``logstore/``), plus for coalesced appends one PUT per partition written.  A lost race costs
one read per concurrent version, for the whole group.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import pyarrow as pa

from deltacommit.engine.commit.commit_info import MEMBERS_KEY, committed_txn_ids
from deltacommit.engine.commit.handle import TableHandle
from deltacommit.engine.commit.loop import CommitLoop, Group, Member, Seen
from deltacommit.engine.commit.outcome import Outcome, outcome_of
from deltacommit.engine.commit.policy import CommitResult
from deltacommit.engine.commit.staged import StagedCommit
from deltacommit.engine.group.fleet.policy import FleetPolicy, fleet_policy
from deltacommit.engine.group.host import HostLink
from deltacommit.engine.snapshot.snapshot import Commit, Snapshot
from deltacommit.errors import ConcurrentModificationException, InvalidArgumentError
from deltacommit.io.datafiles import WriteTarget, delete_files, write_rows
from deltacommit.protocol.actions import Add
from deltacommit.protocol.conflicts import WinningCommit, check_conflicts

__all__ = ["MEMBERS_KEY", "GroupCommitPolicy", "GroupCommitStats", "GroupCommitter",
           "committed_txn_ids"]

T = TypeVar("T")


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
    #: Take part in fleet-wide group commit (``engine.group.fleet``) with every transaction
    #: of this table object, as the table property ``deltacommit.groupCommit.fleet=true``
    #: makes every writer do; a ``FleetPolicy`` tunes it.  Each transaction then carries its
    #: own files and is published for the fleet instead of queued in this process.
    fleet: bool | FleetPolicy = False

    def __post_init__(self) -> None:
        if isinstance(self.max_members, bool) or not isinstance(self.max_members, int) \
                or self.max_members < 1:
            raise InvalidArgumentError(
                f"GroupCommitPolicy.max_members must be a positive integer, got {self.max_members!r}")
        if isinstance(self.max_wait, bool) or not isinstance(self.max_wait, int | float) \
                or not 0 <= self.max_wait <= 60:
            raise InvalidArgumentError(
                f"GroupCommitPolicy.max_wait must be between 0 and 60 seconds, got {self.max_wait!r}")
        if not isinstance(self.fleet, bool | FleetPolicy):
            raise InvalidArgumentError(
                f"GroupCommitPolicy.fleet must be a bool or a FleetPolicy, got {self.fleet!r}")


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


class _Member(Member):
    """One transaction waiting for, or being carried by, a group."""

    def __init__(self, staged: StagedCommit, rows: pa.Table | None) -> None:
        super().__init__(staged)
        #: Rows for the leader to write (coalesced appends); None for a transaction that
        #: carries its own files.
        self.rows = rows
        self.key = staged.group_key
        #: Data files the group wrote for its coalesced appends (set when they commit).
        self.files = 0
        self.lead = False
        self.queued = False
        self.deferred = False
        self.event = threading.Event()

    def resolve(self, result: CommitResult) -> None:
        super().resolve(result)
        self.event.set()

    def fail(self, error: BaseException) -> None:
        super().fail(error)
        self.event.set()


class _Group(Group):
    """Coalesced appends sharing ``adds``, then the others; failed members are counted, and
    the files of appends are written again when some of them drop out."""

    def __init__(self, committer: GroupCommitter, key: tuple[Any, ...], appends: list[_Member],
                 adds: list[Add], others: list[_Member]) -> None:
        super().__init__(list(appends), adds, list(others))
        self.committer = committer
        self.key = key

    def rewrite(self) -> None:
        self.committer._discard_files(self.adds)
        self.adds = []
        self.adds = self.committer._write_rows(self.appends)

    def discard(self) -> None:
        self.committer._discard_files(self.adds)

    def defer(self, members: Sequence[Member]) -> None:
        self.committer._requeue([m for m in members if isinstance(m, _Member)])

    def on_attempt(self) -> None:
        self.committer.stats.attempts += 1

    def on_fail(self, member: Member, error: BaseException) -> None:
        self.committer.stats.failed += 1
        member.fail(error)

    def on_committed(self, members: Sequence[Member]) -> None:
        stats = self.committer.stats
        stats.versions += 1
        stats.transactions += len(members)
        stats.largest_group = max(stats.largest_group, len(members))


# --------------------------------------------------------------------------- the committer


class GroupCommitter:
    """Merges the concurrent transactions committed through one ``DeltaTable`` object.

    Created by ``DeltaTable(..., group_commit=True)``; ``Transaction.commit`` and ``append``
    submit to it.  Thread-safe; asyncio code calls them through ``asyncio.to_thread``.

    Two stages overlap: while one group commits (holding ``_commit_lock``), the next leader
    takes the transactions queued meanwhile and writes their coalesced rows; it then waits for
    the commit stage, passes the first stage on to the next queued transaction, and commits
    through the engine's commit loop.
    """

    def __init__(self, table: TableHandle, policy: GroupCommitPolicy) -> None:
        self.table = table
        self.policy = policy
        self.stats = GroupCommitStats()
        self._loop = CommitLoop(table.log, table.policy, table.clock, table.random)
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._queue: deque[_Member] = deque()
        self._leading = False
        self._commit_lock = threading.Lock()
        self._host = HostLink(table.log, policy.socket_dir, self.submit) \
            if policy.processes else None

    def __repr__(self) -> str:
        return f"GroupCommitter({self.table.log.uri!r}, {self.policy})"

    def wait_submitted(self, count: int, timeout: float | None = None) -> bool:
        """Block until ``count`` transactions have been submitted in all (False on timeout).

        Lets a caller order submissions from several threads without sleeping, as tests do.
        """
        with self._lock:
            return self._arrived.wait_for(lambda: self.stats.submitted >= count, timeout)

    # ----------------------------------------------------------------- submitting

    def commit(self, staged: StagedCommit) -> CommitResult:
        """Commit a validated transaction, possibly in one version with others."""
        staged = self._uploaded(staged)
        if self._host is not None:
            return self._host.commit(staged)
        return self.submit(staged, None).outcome()

    def _uploaded(self, staged: StagedCommit) -> StagedCommit:
        """The transaction once its own data uploads in flight are stored, without them among
        its files to make durable.

        The committer may be another process, which cannot wait for this one's uploads, so
        they must be stored before the transaction leaves.  In this process too a member
        joins a group only with its files stored: one with nothing left to make durable can
        join the version being committed (``_take_late``), and a group's commit would
        otherwise wait for the slowest upload of any member."""
        store = self.table.log.log_store.store
        store.await_puts(staged.unsynced)
        left = tuple(p for p in staged.unsynced if store.awaits_durable(p))
        return staged if len(left) == len(staged.unsynced) else replace(staged, unsynced=left)

    @property
    def shares_processes(self) -> bool:
        """Whether transactions leave this process to be committed (the host's committer,
        or the fleet): each then carries its own files."""
        return self._host is not None or self.fleet is not None

    @property
    def fleet(self) -> FleetPolicy | None:
        """How this object's transactions take part in the fleet (``fleet_policy``)."""
        return fleet_policy(self.table.log.snapshot.table_config, self.policy.fleet)

    @property
    def serving(self) -> bool:
        """Whether this process commits for the other processes of the host (``processes``)."""
        return self._host is not None and self._host.serving

    def close(self) -> None:
        """Stop committing for other processes (they elect another committer); the process
        does so by itself when it exits."""
        if self._host is not None:
            self._host.close()

    def commit_rows(self, staged: StagedCommit, rows: pa.Table) -> tuple[CommitResult, int]:
        """Commit with ``rows`` that a leader writes, before the commit, into files shared
        with the group's other appends; also returns how many files the group wrote.  ``rows``
        must be in the table schema of the transaction's snapshot."""
        member = self.submit(staged, rows)
        assert isinstance(member, _Member)
        return member.outcome(), member.files

    def submit(self, staged: StagedCommit, rows: pa.Table | None) -> Member:
        """Queue a transaction and return once a group has carried it to its end."""
        member = _Member(staged, rows)
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
                    # Transactions that carry their own durable files and arrived while this
                    # group waited for the commit stage need no first stage: they join now.
                    group.others += self._take_late(group.key, len(batch))
                self._hand_off()
                handed = True
                if group is not None:
                    g = group
                    done = self._guarded(g.members, lambda: self._commit(g), group=g,
                                         committing=True)
                    if done is not None:
                        commit, snapshot = done
        finally:
            if not handed:
                self._hand_off()
        if commit is not None:
            # Outside both stages: the next group commits while this version's checkpoint
            # (if it owes one) is written from the snapshot exactly at its version.
            self.table.log.post_commit(commit, snapshot)

    def _guarded(self, members: Sequence[Member], stage: Callable[[], T], *,
                 group: _Group | None = None, committing: bool = False) -> T | None:
        """Run a stage; if it fails unexpectedly (a storage error writing the commit, most
        likely), each of ``members`` it left unfinished gets that error: the outcome of its
        commit is what the error says, as for a lone transaction.  The files ``group`` wrote
        for its coalesced appends are deleted where the failure proves that no version names
        them (``engine.commit.outcome``: any failure before the commit stage, and the errors
        that prove it after), and kept where the outcome is unknown."""
        try:
            return stage()
        except Exception as e:
            for m in members:
                if not m.done and not (isinstance(m, _Member) and m.queued):
                    m.fail(e)
            if group is not None and outcome_of(e, committing=committing) \
                    is Outcome.NOT_COMMITTED:
                group.discard()
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

    def _take_late(self, key: tuple[Any, ...], taken: int) -> list[Member]:
        """Queued members without rows to write, with files already durable and with the
        group's key (up to the limit).  Files still to sync wait for the next group's first
        stage, so the commit stage never waits for their syncs."""
        room = self.policy.max_members - taken
        with self._lock:
            if room <= 0 or not self._queue:
                return []
            late = [m for m in self._queue
                    if m.rows is None and not m.staged.unsynced and m.key == key][:room]
            if late:
                chosen = {id(m) for m in late}
                self._queue = deque(m for m in self._queue if id(m) not in chosen)
                for m in late:
                    m.queued = False
            return list(late)

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
            if m.key != key or (m.rows is not None and m.staged.app_ids & taken):
                deferred.append(m)
            elif m.rows is not None:
                appends.append(m)
                taken |= m.staged.app_ids
            else:
                others.append(m)
        self._requeue(deferred)
        adds = self._guarded(appends, lambda: self._write_rows(appends)) or []
        appends = [m for m in appends if not m.done]
        group = _Group(self, key, appends, adds, others)
        if not self._guarded(group.members, lambda: self._make_durable(group), group=group):
            return None  # every member failed with the sync's error
        return group

    def _make_durable(self, group: _Group) -> bool:
        """Sync the group's data files (the rows written for its appends, the files its
        members wrote unsynced) at once, in the first stage, while the previous group commits;
        the commit loop syncs only what joins or is rewritten later."""
        paths = group.unsynced()
        if paths:
            self.table.log.log_store.store.make_durable(paths)
            group.durable.update(paths)
        return True

    def _write_rows(self, appends: Sequence[Member]) -> list[Add]:
        """One set of data files (a file per partition) holding every coalesced append's rows
        (conformed by ``writer.append``; written by the write path's second stage)."""
        parts = [m.rows for m in appends if isinstance(m, _Member) and m.rows is not None]
        if not parts:
            return []

        table = self.table
        target = WriteTarget.of(table.log.uri, table.log.snapshot)
        schema = target.schema
        parts = [p if p.schema.equals(schema) else p.cast(schema) for p in parts]
        data = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        # Unsynced: the commit loop syncs them with the other members' files at once.
        return write_rows(table.log.log_store.store, target, data, clock=table.clock,
                          random=table.random, durable=False)

    def _discard_files(self, adds: Sequence[Add]) -> None:
        """Delete files written for a group that will never reference them (best effort:
        vacuum removes any left behind)."""

        with contextlib.suppress(Exception):
            delete_files(self.table.log.log_store.store, adds)

    # ----------------------------------------------------------------- stage 2: commit

    def _commit(self, group: _Group) -> tuple[Commit, Snapshot] | None:
        """Check the group against history and each other, then commit it."""
        table = self.table
        loop = self._loop
        base = table.log.version
        if any(m.staged.read_version > base for m in [*group.appends, *group.others]):
            # A sending process read versions this object has not (another host's writer
            # committed them): read them, so that the claim's wait does not take the member
            # for one that read a version rolled back since.
            base = table.log.refresh()
        history: dict[int, Seen] = {}
        appends = [m for m in group.appends if loop.catch_up(m, base, history, group)]
        if len(appends) != len(group.appends):
            group.appends = appends
            group.rewrite()
        candidates = [m for m in group.others if loop.catch_up(m, base, history, group)]
        # Coalesced appends go first in the serial order (they read nothing but app ids);
        # each other member is then checked against everything accepted before it.
        blind = WinningCommit(base + 1, operation=group.key[0], is_blind_append=True)
        unread = WinningCommit(base + 1, operation=group.key[0], is_blind_append=False)
        blind.added.extend(group.adds)
        for m in group.appends:
            blind.txns.extend(m.staged.txns)
        others: list[Member] = []
        deferred: list[_Member] = []
        for m in candidates:
            try:
                # A row-level member whose rows an earlier member's files hold would need a
                # rebase onto files not committed yet: it waits for a later group instead.
                shares = any([check_conflicts(m.staged.summary, view, table.log.uri) is not None
                              for view in (blind, unread)])
            except ConcurrentModificationException:
                shares = True
            if shares:
                if isinstance(m, _Member):
                    deferred.append(m)
                continue
            others.append(m)
            m.staged.extend_view(blind if m.staged.summary.is_blind_append else unread)
        group.others = others
        self._requeue(deferred)
        commit = loop.run(group, base, table.random.uuid())
        if commit is None:
            return None
        for m in group.appends:
            if isinstance(m, _Member):
                m.files = len(group.adds)
        return commit, table.log.snapshot
