"""One writer's way through the rounds of fleet-wide group commit.

Each round commits one version V (the version after the newest this writer knows).  The
writer's transaction is published (``records.publish``) before it takes part, so whoever wins
the round finds it.  Then:

* **Election.**  The first conditional create of the round's key wins the round
  (``LogStore.claim_fleet_round``: an object ``_deltacommit_fleet/<V>.round`` with S3's
  conditional put; a conditional ``PutItem`` under a partition key of its own in the DynamoDB
  mechanism).  The key is a hint only: the claim of V through the log store decides.
* **The winner** lists the folder once, reads the records (in parallel), includes every one it
  can check (``include.choose``), and commits them with its own transaction through the commit
  loop (stamps, conflict checks, retries: as a group leader), each member bounded by its
  version bound (``include.FleetGroup.admit``).  It then deletes, in one batch, the records it
  landed and whatever the listing shows expired (``cleanup``).
* **The others** wait for V, a GET of ``V.json`` every ``FleetPolicy.poll_interval`` (they must
  read it anyway to stay current); the version holding their ``txnId`` is their result, read
  from the log.  One that V does not carry checks itself against V (a conflict fails it alone,
  as its includers would find) and takes part in the next round.  One that sees no V within
  the patience (``CommitPolicy.turn_patience``: a dead or stopped winner) commits itself,
  with whatever it can include: a stopped winner delays the others by the patience, once.

The owner's transaction lands anywhere its owner claims it (it checks every version before it
like any writer); others may land it only up to its bound B.  Once B exists without it,
nobody can land it, which is when an owner that stopped trying could report failure; a live
owner instead renews its record with a new bound past the newest version (overwriting it:
includers holding the old body refuse anyway, their version being past the old bound).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging

from deltacommit.engine.commit.loop import CommitLoop, Group
from deltacommit.engine.commit.loop import commit as commit_alone
from deltacommit.engine.commit.outcome import Outcome, outcome_of
from deltacommit.engine.commit.policy import CommitPolicy, CommitResult
from deltacommit.engine.commit.table_log import TableLog
from deltacommit.engine.group.fleet import cleanup, include, records
from deltacommit.engine.group.fleet.policy import FleetPolicy
from deltacommit.engine.snapshot.snapshot import Commit, decode_commit
from deltacommit.engine.transaction.commit_info import committed_txn_ids
from deltacommit.engine.transaction.staged import StagedCommit
from deltacommit.errors import (
    CommitFailedError,
    ConcurrentModificationException,
    DeltaCommitError,
    ObjectNotFoundError,
)
from deltacommit.protocol.fleet.record import FleetRecord, publishable, record_path, round_path
from deltacommit.runtime.clock import Clock, RandomSource, now_ms

log = logging.getLogger(__name__)


def commit(log_: TableLog, staged: StagedCommit, policy: CommitPolicy, clock: Clock,
           random: RandomSource, fleet: FleetPolicy) -> tuple[CommitResult, Commit | None]:
    """Commit ``staged`` through the table's fleet: its result, and the commit when this
    writer made it (its post-commit hooks are this writer's), else None.

    A transaction the fleet cannot carry (a new table's version 0, one that read partition
    predicates, a local folder of another user's) commits by itself, as beside the fleet."""
    store = log_.log_store.store
    if staged.read_version < 0 or not publishable(staged.summary) \
            or not records.folder_usable(store):
        return commit_alone(log_, staged, policy, clock, random)
    return _Writer(log_, staged, policy, clock, random, fleet).run()


class _Writer:
    def __init__(self, log_: TableLog, staged: StagedCommit, policy: CommitPolicy,
                 clock: Clock, random: RandomSource, fleet: FleetPolicy) -> None:
        self.log = log_
        self.store = log_.log_store.store
        self.policy = policy
        self.clock = clock
        self.random = random
        self.fleet = fleet
        self.loop = CommitLoop(log_, policy, clock, random)
        store = self.store
        # Published transactions are committed by others, who cannot wait for this process's
        # uploads nor sync its files: they are stored and durable first.
        store.await_puts(staged.unsynced)
        left = [p for p in staged.unsynced if store.awaits_durable(p)]
        if left:
            store.make_durable(left)
        self.staged = dataclasses.replace(staged, unsynced=())
        self.member = include.FleetMember(self.staged)
        self.record: FleetRecord | None = None
        self.published = False
        self.read_digest = ""

    # ----------------------------------------------------------------- the owner's record

    def _read_digest(self) -> str:
        """SHA-256 of the commit at the transaction's read version (what binds its record to
        this table's history)."""
        v = self.staged.read_version
        known = self.log.known_commits(v, v)
        digest = known[0].digest if known else ""
        return digest or hashlib.sha256(self.log.log_store.read_commit(v)).hexdigest()

    def _record(self, bound: int) -> FleetRecord:
        s = self.staged
        table_id = s.summary.read_metadata.id if s.summary.read_metadata is not None else ""
        return FleetRecord(
            txn_id=s.txn_id, owner=records.owner_id(self.random.uuid().replace("-", "")),
            table_id=table_id, read_version=s.read_version, read_digest=self.read_digest,
            bound=bound,
            deadline_ms=now_ms(self.clock) + int(self.fleet.deadline_seconds * 1000),
            operation=s.operation, parameters=s.parameters, metrics=s.metrics,
            summary=s.summary, adds=s.adds, removes=s.removes, txns=s.txns,
            metadata=s.metadata, protocol=s.protocol, domains=s.domains, app_ids=s.app_ids)

    def _publish(self, latest: int) -> None:
        """Publish (or renew) the record with a bound ``bound_versions`` past ``latest``."""
        record = self._record(latest + self.fleet.bound_versions)
        # Published from the moment the request leaves: a failed PUT may still have stored it.
        self.published = True
        records.publish(self.store, record)
        self.record = record

    def _withdraw(self) -> None:
        if self.published:
            records.delete(self.store, [record_path(self.staged.txn_id)])
            self.published = False

    # ----------------------------------------------------------------- rounds

    def run(self) -> tuple[CommitResult, Commit | None]:
        m = self.member
        group = Group([], [], [m])
        self.log.confirm_identity()
        if not self.loop.catch_up(m, self.log.version, {}, group):
            return m.outcome(), None  # found landed (a retry), or conflicts
        try:
            self.read_digest = self._read_digest()
        except (DeltaCommitError, ValueError):
            # No commit file at the read version (a checkpoint only): not publishable.
            return commit_alone(self.log, self.staged, self.policy, self.clock, self.random)
        try:
            return self._rounds(group)
        except Exception as e:
            if not self.published or outcome_of(e) is Outcome.UNKNOWN:
                raise
            # Published, the transaction may still be landed by an includer up to its
            # bound: no failure of this writer's own proves otherwise, except a conflict
            # found in the log (which ends it withdrawn, above).
            assert self.record is not None
            raise CommitFailedError(
                f"{self.staged.operation} on table {self.log.uri} (txnId "
                f"{self.staged.txn_id}) was published for the fleet's group commit and may "
                f"still land, up to version {self.record.bound}, when this writer failed: "
                f"{type(e).__name__}: {e}; its outcome is unknown until that version exists "
                "(commit the same transaction again to learn it)") from e

    def _rounds(self, group: Group) -> tuple[CommitResult, Commit | None]:
        m = self.member
        self._publish(self.log.version)
        waited_out = False
        while True:
            assert self.record is not None
            version = self.log.version + 1
            if version > self.record.bound or \
                    now_ms(self.clock) > self.record.deadline_ms - \
                    int(self.fleet.deadline_seconds * 500):
                self._publish(version - 1)
            if waited_out or self.log.log_store.claim_fleet_round(version):
                return self._lead(version)
            found = self._await(version)
            if found is None:
                waited_out = True  # the round's winner is gone or stopped: commit here
                continue
            commit, data, at_once = found
            self.log.committed(commit)
            if m.staged.txn_id in committed_txn_ids(commit.commit_info):
                ids = committed_txn_ids(commit.commit_info)
                return CommitResult(
                    commit.version, max(m.attempts, 1), winners=tuple(m.winners),
                    txn_id=m.staged.txn_id, digest=hashlib.sha256(data).hexdigest(),
                    read_version=m.staged.read_version, group_size=len(ids)), None
            if at_once:
                # The version was there already: this writer was behind; catch up at once.
                self.log.refresh()
            if not self.loop.catch_up(m, self.log.version, {}, group):
                if isinstance(m.error, ConcurrentModificationException):
                    self._withdraw()
                return m.outcome(), None

    def _await(self, version: int) -> tuple[Commit, bytes, bool] | None:
        """``version`` read from the log once it exists (and whether it did at the first
        look); None if it does not within the patience."""
        ls = self.log.log_store
        deadline = self.clock.monotonic() + self.policy.turn_patience
        first = True
        while True:
            try:
                data = ls.read_commit(version)
            except ObjectNotFoundError:
                pass
            else:
                return decode_commit(ls, version, data), data, first
            first = False
            if self.clock.monotonic() >= deadline:
                return None
            self.clock.sleep(self.fleet.poll_interval)

    def _lead(self, version: int) -> tuple[CommitResult, Commit | None]:
        """This writer commits round ``version``: its own transaction and every published
        one it can check."""
        m = self.member
        fleet = self.fleet
        if fleet.linger > 0:
            self.clock.sleep(fleet.linger)
        base = version - 1
        listed = records.listing(self.store)
        now = now_ms(self.clock)
        margin = int(fleet.expiry_margin_seconds * 1000)
        doomed = cleanup.stale_rounds(listed, base)
        paths = [(t, p) for t, p in cleanup.record_paths(listed) if t != m.staged.txn_id]
        paths = paths[:fleet.max_members * 2]
        table_id = m.staged.summary.read_metadata.id \
            if m.staged.summary.read_metadata is not None else ""
        candidates: list[tuple[str, FleetRecord]] = []
        for (txn_id, path), record in zip(
                paths, records.read_records(self.store, [p for _, p in paths]), strict=True):
            if record is None:
                continue
            if cleanup.expired(record, base, now, margin):
                doomed.append(path)
            elif include.usable(record, txn_id, table_id=table_id, base=base,
                                max_back=fleet.max_back, now_ms=now):
                candidates.append((path, record))
        group = include.FleetGroup([m], lambda: now_ms(self.clock))
        if not self.loop.catch_up(m, base, {}, group):
            records.delete(self.store, doomed)
            if isinstance(m.error, ConcurrentModificationException):
                self._withdraw()
            return m.outcome(), None
        chosen = include.choose(self.loop, m, candidates, base, fleet.max_members, group)
        group.others = [m, *chosen]
        landed = self.loop.run(group, base, self.random.uuid() if chosen else m.staged.txn_id)
        done = [x.path for x in chosen if x.result is not None]
        if m.error is not None:
            records.delete(self.store, [*doomed, *done])
            if isinstance(m.error, ConcurrentModificationException):
                self._withdraw()
            raise m.error
        assert m.result is not None
        records.delete(self.store, [*doomed, *done, record_path(m.staged.txn_id),
                                    round_path(version)])
        self.published = False
        return m.result, landed
