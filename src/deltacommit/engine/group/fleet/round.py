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
  version bound (``include.FleetGroup.admit``).  Where the version before carried several
  transactions, it first lingers until their hosts had time to publish their next ones
  (``FleetPolicy.linger_round_trips``).  Once landed, it answers its caller and deletes, in
  one batch on a thread of the process, the records it landed and whatever the listing shows
  expired (``cleanup``).
* **The others** wait for V: GETs of ``V.json`` one after another, the first shortly before
  the version is due as the process has seen rounds go (``pace``; they must read it anyway
  to stay current); the version holding their ``txnId`` is their result, read from the log.
  One that V does not carry checks itself against V (a conflict fails it alone,
  as its includers would find) and takes part in the next round.  One that sees no V within
  the patience (``CommitPolicy.turn_patience``: a dead or stopped winner) commits itself,
  with whatever it can include: a stopped winner delays the others by the patience, once.

A writer that took the table's state from the process's cache (``dc.write(uri, ...)``) does
not read its cached commit back to prove the table was not replaced: the first version it reads
after it proves it where that version names the cached commit's SHA-256 as built on (every
fleet version names the commit it follows); otherwise, and before its own claim, it is read
back (``TableLog.identity_vouched``, ``state_cache.IdentityProof``).

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

from deltacommit.engine.commit.commit_info import committed_txn_ids
from deltacommit.engine.commit.loop import CommitLoop, Group
from deltacommit.engine.commit.loop import commit as commit_alone
from deltacommit.engine.commit.outcome import Outcome, outcome_of
from deltacommit.engine.commit.policy import CommitPolicy, CommitResult
from deltacommit.engine.commit.staged import StagedCommit
from deltacommit.engine.commit.table_log import TableLog
from deltacommit.engine.group.fleet import cleanup, include, pace, records
from deltacommit.engine.group.fleet.policy import FleetPolicy
from deltacommit.engine.snapshot.snapshot import Commit, decode_commit
from deltacommit.errors import (
    CommitFailedError,
    ConcurrentModificationException,
    DeltaCommitError,
    ObjectNotFoundError,
    TableReplacedError,
)
from deltacommit.protocol.commit_window import COMMIT_WINDOW_MS
from deltacommit.protocol.fleet.record import (
    FleetRecord,
    plain_paths,
    publishable,
    record_path,
)
from deltacommit.runtime.clock import Clock, RandomSource, now_ms

log = logging.getLogger(__name__)


def commit(log_: TableLog, staged: StagedCommit, policy: CommitPolicy, clock: Clock,
           random: RandomSource, fleet: FleetPolicy) -> tuple[CommitResult, Commit | None]:
    """Commit ``staged`` through the table's fleet: its result, and the commit when this
    writer made it (its post-commit hooks are this writer's), else None.

    A transaction the fleet cannot carry (a new table's version 0, one that read partition
    predicates or wrote change data files, one naming files outside the table, a local
    folder of another user's) commits by itself, as beside the fleet."""
    store = log_.log_store.store
    if staged.read_version < 0 or not publishable(staged.summary) or staged.cdc \
            or not plain_paths(staged.adds, staged.removes) or not records.folder_usable(store):
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
        #: How many times this writer wrote its record (a renewal overwrites it).
        self.publications = 0
        self.read_digest = ""
        #: When this writer first published the record (its clock, ms); None before.
        self.first_published_ms: int | None = None
        #: When (monotonic) this writer last learned the table's newest version: its caller
        #: has just read it.
        self.fresh_at = clock.monotonic()
        #: How fast the table's fleet moves, as this process has seen it (timing only).
        self.pace = pace.of(log_.uri)

    # ----------------------------------------------------------------- the owner's record

    def _read_digest(self) -> str:
        """SHA-256 of the commit at the transaction's read version (what binds its record to
        this table's history): the one the transaction read, where its table object knew it
        (``StagedCommit.read_digest``), since the object may have read the version afresh
        since, rolled back and written again."""
        if self.staged.read_digest:
            return self.staged.read_digest
        v = self.staged.read_version
        known = self.log.known_commits(v, v)
        digest = known[0].digest if known else ""
        return digest or hashlib.sha256(self.log.log_store.read_commit(v)).hexdigest()

    def _deadline(self) -> int:
        """When includers stop taking the record: ``deadline_seconds`` from now, but never
        past half the commit window after its first publication.  Its data files were
        written within the window before that (the write driver's check), so an includer's
        claim starts well inside VACUUM's floor for files no version names
        (``protocol.commit_window``), as the owner's own would."""
        now = now_ms(self.clock)
        if self.first_published_ms is None:
            self.first_published_ms = now
        return min(now + int(self.fleet.deadline_seconds * 1000),
                   self.first_published_ms + COMMIT_WINDOW_MS // 2)

    def _renewable(self) -> bool:
        """Whether a renewed record would still be taken by includers (see ``_deadline``)."""
        return self.first_published_ms is None or \
            now_ms(self.clock) < self.first_published_ms + COMMIT_WINDOW_MS // 2

    def _record(self, bound: int) -> FleetRecord:
        s = self.staged
        table_id = s.summary.read_metadata.id if s.summary.read_metadata is not None else ""
        return FleetRecord(
            txn_id=s.txn_id, owner=records.owner_id(self.random.uuid().replace("-", "")),
            table_id=table_id, read_version=s.read_version, read_digest=self.read_digest,
            bound=bound, deadline_ms=self._deadline(),
            operation=s.operation, parameters=s.parameters, metrics=s.metrics,
            summary=s.summary, adds=s.adds, removes=s.removes, txns=s.txns,
            metadata=s.metadata, protocol=s.protocol, domains=s.domains, app_ids=s.app_ids)

    def _publish(self, latest: int) -> None:
        """Publish (or renew) the record with a bound ``bound_versions`` past ``latest``."""
        record = self._record(latest + self.fleet.bound_versions)
        # Published from the moment the request leaves: a failed PUT may still have stored it.
        self.published = True
        self.publications += 1
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
        # A snapshot taken from the process's cache unproven (``state_cache.reuse``) is
        # proven by the first version read after it where that version names its commit
        # (``TableLog.identity_vouched``), else read back before anything is decided on what
        # follows it (``_proven``), and always before this writer claims a version (the
        # commit loop).  Its record may go out first: includers check its read version's
        # digest against the log themselves.
        if not self.loop.catch_up(m, self.log.version, {}, group):
            return m.outcome(), None  # found landed (a retry), or conflicts
        try:
            self.read_digest = self._read_digest()
        except (DeltaCommitError, ValueError):
            # No commit file at the read version (a checkpoint only): not publishable.
            return commit_alone(self.log, self.staged, self.policy, self.clock, self.random)
        try:
            return self._rounds(group)
        except TableReplacedError:
            # Nothing is decided on the state of another table: no includer takes the record
            # either (its read version's digest is not the log's).
            self._withdraw()
            raise
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
        rounds = 0
        while True:
            assert self.record is not None
            version = self.log.version + 1
            if version > self.record.bound or \
                    now_ms(self.clock) > self.record.deadline_ms - \
                    int(self.fleet.deadline_seconds * 500):
                if self._renewable():
                    self._publish(version - 1)
                else:
                    waited_out = True  # includers refuse it now: commit it here
            rounds += 1
            if rounds > self.fleet.max_rounds:
                waited_out = True  # carried by none of many rounds: commit it here
            if waited_out:
                return self._lead(version)
            sent = self.clock.monotonic()
            won = self.log.log_store.claim_fleet_round(version)
            lost_at = self.clock.monotonic()
            self.pace.saw_request(lost_at - sent)
            if won:
                return self._lead(version)
            found = self._await(version, lost_at)
            if found is None:
                waited_out = True  # the round's winner is gone or stopped: commit here
                continue
            commit, data, at_once = found
            self._proven(version, data)
            self.log.committed(commit)
            if m.staged.txn_id in committed_txn_ids(commit.commit_info):
                if at_once or self.publications > 1:
                    # Its record may have been (re)written after the listing of the round
                    # that landed it, so that round's committer did not delete it: the owner
                    # does, rather than leave it to a later round's committer.
                    records.delete_soon(self.store, [record_path(m.staged.txn_id)])
                ids = committed_txn_ids(commit.commit_info)
                return CommitResult(
                    commit.version, max(m.attempts, 1), winners=tuple(m.winners),
                    txn_id=m.staged.txn_id, digest=hashlib.sha256(data).hexdigest(),
                    read_version=m.staged.read_version, group_size=len(ids)), None
            if at_once:
                # The version was there already: this writer was behind; catch up at once.
                self._refresh()
            if not self.loop.catch_up(m, self.log.version, {}, group):
                if isinstance(m.error, ConcurrentModificationException):
                    self._withdraw()
                return m.outcome(), None

    def _await(self, version: int, lost_at: float) -> tuple[Commit, bytes, bool] | None:
        """``version`` read from the log once it exists, and whether this writer may be
        behind (it was there at a first look sent at once); None if it does not exist within
        the patience.  ``lost_at``: when this writer lost the round's key.

        Looks are GETs of the version's commit file, one after another (no repair of a
        version its committer is still writing, but at the last look).  Where this writer learned of the
        version before lately (``pace.Pace.current``), the round was just won by another and
        the first look goes out shortly before the version is due, as rounds have gone
        (``pace``), instead of finding nothing several times over; otherwise at once (the
        round may be long over: this writer is behind)."""
        ls = self.log.log_store
        clock = self.clock
        deadline = clock.monotonic() + self.policy.turn_patience
        known_since = self.pace.learned_at \
            if self.pace.learned_version == self.log.version else self.fresh_at
        current = self.pace.current(lost_at, known_since)
        if current:
            wait = min(self.pace.first_look(lost_at), deadline) - clock.monotonic()
            if wait > 0:
                clock.sleep(wait)
        first = True
        while True:
            sent = clock.monotonic()
            # Within the patience the round's committer is taken to be alive: its version is
            # left to it (``LogStore.look_for_commit``: no repair of a claimed version it is
            # still copying); the last look reads it as any reader would, repairing it.
            last = sent >= deadline
            try:
                data = ls.read_commit(version) if last else ls.look_for_commit(version)
            except ObjectNotFoundError:
                pass
            else:
                now = self.fresh_at = clock.monotonic()
                self.pace.saw_request(now - sent)
                self.pace.learned(version, now)
                if not first or current:
                    self.pace.saw_round(now - lost_at)
                return decode_commit(ls, version, data), data, first and not current
            first = False
            if last:
                return None
            clock.sleep(self.fleet.poll_interval)

    def _proven(self, version: int, data: bytes) -> None:
        """Before anything is decided on ``data``, the commit read at ``version``: the table's
        identity proven, by that commit where it names the cached snapshot's commit as the one
        it was built on, else by reading that commit back (TableReplacedError if the table
        was replaced)."""
        if not self.log.identity_vouched(version, data):
            self.log.confirm_identity()

    def _decided(self) -> None:
        """Before a round acts on what it read without claiming a version (deleting records
        it found expired or landed, reporting a conflict): the table's identity proven (the
        claim awaits it by itself).  TableReplacedError if the table was replaced."""
        self.log.confirm_identity()

    def _refresh(self) -> int:
        latest = self.log.refresh()
        self.fresh_at = self.clock.monotonic()
        self.pace.learned(latest, self.fresh_at)
        return latest

    def _linger(self, base: int) -> None:
        """Before listing the records of round ``base + 1``: ``FleetPolicy.linger``, and,
        where version ``base`` carried several transactions, until their hosts had time to
        publish their next ones (``pace.Pace.linger_until``), at most
        ``FleetPolicy.max_linger``."""
        fleet = self.fleet
        known = self.log.cached_commits(base, base)
        members = len(committed_txn_ids(known[0].commit_info)) if known else 1
        now = self.clock.monotonic()
        until = self.pace.linger_until(base, members, fleet.linger_round_trips, self.fresh_at)
        wait = max(fleet.linger, min(until - now, fleet.max_linger))
        if wait > 0:
            self.clock.sleep(wait)

    def _lead(self, version: int) -> tuple[CommitResult, Commit | None]:
        """This writer commits round ``version``: its own transaction and every published
        one it can check."""
        m = self.member
        fleet = self.fleet
        base = version - 1
        # The proof of a cached snapshot is read meanwhile, beside the lingering, listing and
        # reading of records: the claim awaits it (the commit loop), and so does anything
        # this round decides before (``_decided``).
        self.log.start_identity_proof()
        self._linger(base)
        if self.clock.monotonic() - self.fresh_at >= self.policy.turn_patience:
            # This writer last learned the newest version a while ago (it waited out a round,
            # or was stopped): the round's key being free proves nothing about the version
            # (a committer deletes it, and log cleanup may have deleted the commit after it),
            # so the newest version is read before a claim is built on it.
            self.log.confirm_identity()
            base = max(base, self._refresh())
            version = base + 1
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
            self._decided()
            records.delete(self.store, doomed)
            if isinstance(m.error, ConcurrentModificationException):
                self._withdraw()
            return m.outcome(), None
        chosen, found_landed = include.choose(self.loop, m, candidates, base,
                                              fleet.max_members, group)
        doomed += found_landed
        group.others = [m, *chosen]
        landed = self.loop.run(group, base, self.random.uuid() if chosen else m.staged.txn_id)
        done = [x.path for x in chosen if x.result is not None]
        if m.error is not None:
            self._decided()
            records.delete(self.store, [*doomed, *done])
            if isinstance(m.error, ConcurrentModificationException):
                self._withdraw()
            raise m.error
        assert m.result is not None
        self.pace.learned(m.result.version, self.clock.monotonic())
        # Landed: the records' deletion changes no outcome, so the caller has its answer
        # first.  The round's key stays (``cleanup.KEEP_ROUNDS``).
        records.delete_soon(self.store, [*doomed, *done, record_path(m.staged.txn_id)])
        self.published = False
        return m.result, landed
