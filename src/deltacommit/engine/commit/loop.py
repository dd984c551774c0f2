"""The one commit loop: conflict checks, rebase, backoff, for a group of one or many.

A group's members are checked against every version committed since their snapshots
(``catch_up``), then the group's actions are written at the next version.  When another writer
took that version first, each member is checked against the winner (``conflicts.py``): a member
that conflicts fails alone, the others are rebased over it, and the group tries the next
version after an exponentially growing, fully jittered sleep.  A member that finds its own
``txnId`` in a winner was committed by an earlier attempt whose answer was lost: it is
resolved with that version, never committed twice.

A lone ``Transaction`` is a group of one; ``coalesce.GroupCommitter`` feeds groups it formed
from concurrent transactions.  Both get the same checks, retries and results from here.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from deltacommit.engine.commit.commit_info import (
    PREVIOUS_COMMIT_KEY,
    committed_txn_ids,
    version_commit_info,
)
from deltacommit.engine.commit.host_turn import HostTurn, Record
from deltacommit.engine.commit.policy import CommitPolicy, CommitResult
from deltacommit.engine.commit.staged import StagedCommit
from deltacommit.engine.commit.stamps import stamp
from deltacommit.engine.commit.table_log import Speculation, TableLog
from deltacommit.engine.snapshot.snapshot import Commit, Snapshot
from deltacommit.errors import (
    CommitFailedError,
    ConcurrentModificationException,
    DeltaCommitError,
    MissingVersionError,
    TableExistsError,
    TableReplacedError,
    VersionExistsError,
)
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
    serialize_commit,
)
from deltacommit.protocol.conflicts import WinningCommit, check_conflicts, new_row_candidates
from deltacommit.protocol.features.identity import is_mark_update
from deltacommit.protocol.partitions import decode_add_path
from deltacommit.runtime.clock import Clock, RandomSource

#: A backoff at least this long (seconds) is taken before reading the versions that beat the
#: attempt, so that they are read once, with those committed meanwhile; a shorter one after.
CATCH_UP_AFTER = 0.01

#: A version as the checks see it: its conflict view and the txnIds it holds.
Seen = tuple[WinningCommit, frozenset[str]]


class Member:
    """One transaction in a commit group, and how far the loop has taken it."""

    def __init__(self, staged: StagedCommit) -> None:
        self.staged = staged
        #: Every version up to this one has been checked against this transaction.
        self.checked = staged.read_version
        self.winners: list[int] = []
        self.attempts = 0
        self.result: CommitResult | None = None
        self.error: BaseException | None = None
        #: Whether another writer may have committed this transaction (a fleet's published
        #: one, ``engine.group.fleet``): then only its txnId in the versions since its
        #: snapshot tells, and versions gone from the log leave its outcome unknown.
        self.published = False

    @property
    def done(self) -> bool:
        return self.result is not None or self.error is not None

    def resolve(self, result: CommitResult) -> None:
        self.result = result

    def fail(self, error: BaseException) -> None:
        self.error = error

    def outcome(self) -> CommitResult:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class Group:
    """The members one attempt commits: those whose rows share ``adds`` (coalesced appends,
    written by the group's leader), then the others (carrying their own files).

    The files of ``adds`` and those the members list as ``unsynced`` need not be durable yet:
    the loop makes them durable, all at once, before it writes a version naming them."""

    def __init__(self, appends: list[Member], adds: list[Add], others: list[Member]) -> None:
        self.appends = appends
        self.adds = adds
        self.others = others
        #: Store paths of those files made durable already (by the loop's earlier attempts,
        #: or by a group committer before the commit stage).
        self.durable: set[str] = set()
        #: Whether each version of this group names the SHA-256 of the commit it is built on
        #: even outside a host's turn (``CommitLoop._vouching``): a fleet's writers waiting
        #: for it prove their cached snapshot by it (``TableLog.identity_vouched``).
        self.vouches = False

    @property
    def members(self) -> list[Member]:
        return self.appends + self.others

    def prune(self) -> None:
        """Drop finished members; files of appends that dropped out are written again."""
        before = len(self.appends)
        self.appends = [m for m in self.appends if not m.done]
        self.others = [m for m in self.others if not m.done]
        if len(self.appends) != before:
            self.rewrite()

    def unsynced(self) -> list[str]:
        """Store paths of the files this group's version would name that were written
        without a sync (``adds`` always are), each once."""
        paths = [decode_add_path(a.path) for a in self.adds]
        for m in self.members:
            paths.extend(m.staged.unsynced)
        return list(dict.fromkeys(paths))

    def rewrite(self) -> None:
        """Write ``adds`` again for the appends left (a group with coalesced rows overrides)."""

    def discard(self) -> None:
        """The group will never commit: drop files written for it (overridden likewise)."""

    def defer(self, members: Sequence[Member]) -> None:
        """Members that cannot share this version go to a later group (overridden by the group
        committer; a lone transaction is never deferred)."""
        raise AssertionError(f"{len(members)} members deferred from a group without a queue")

    def on_attempt(self) -> None:
        """Counting hook for the group committer's statistics."""

    def admit(self, version: int) -> None:
        """Before an attempt at ``version``: drop members that may not land there (a fleet's
        published transactions past their version bound; ``engine.group.fleet``)."""

    def on_committed(self, members: Sequence[Member]) -> None:
        """Counting hook: ``members`` were written in a new version by this group."""

    def on_fail(self, member: Member, error: BaseException) -> None:
        member.fail(error)


def group_actions(staged: Sequence[StagedCommit], shared_adds: Sequence[Add],
                  commit_info: Any) -> list[Action]:
    """A version holding several members: the last protocol and metadata any of them sets,
    then every member's app ids, removes and adds (the shared files first)."""
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    txns: list[Txn] = []
    domains: list[DomainMetadata] = []
    removes: list[Remove] = []
    files: list[Add] = list(shared_adds)
    cdc: list[AddCDCFile] = []
    for s in staged:
        protocol = s.protocol or protocol
        metadata = s.metadata or metadata
        txns.extend(s.txns)
        domains.extend(s.domains)
        removes.extend(s.removes)
        files.extend(s.adds)
        cdc.extend(s.cdc)
    out: list[Action] = [commit_info]
    if protocol is not None:
        out.append(protocol)
    if metadata is not None:
        out.append(metadata)
    out.extend(txns)
    out.extend(domains)
    out.extend(removes)
    out.extend(files)
    out.extend(cdc)
    return out


class CommitLoop:
    """Commits groups to one table log."""

    def __init__(self, log: TableLog, policy: CommitPolicy, clock: Clock,
                 random: RandomSource) -> None:
        self.log = log
        self.policy = policy
        self.clock = clock
        self.random = random

    # ----------------------------------------------------------------- host turns

    def _turn(self) -> HostTurn | None:
        """This table's turn among the processes of the host (``engine.host_turn``); None
        where they cannot share the table (an in-memory store) or turns are off."""
        if not self.policy.host_turns:
            return None
        return HostTurn.for_table(self.log.log_store, self.policy.turn_patience)

    def _take_turn(self, turn: HostTurn, group: Group, base: int, speculate: bool = True
                   ) -> tuple[Commit | int, Record | None, Speculation | None]:
        """Wait for the turn (unless held already), then follow the version the last holder
        recorded (reading the commits the holders before handed on with their records)
        and rebase the group over every version this object has not checked it against; the
        new base (or the version an earlier attempt landed in), the last holder's record where
        it names the commit this object builds on (whose writer's word that it is done with it
        the DynamoDB store awaits), and a speculation where the attempt is to be built on one.

        Nothing in the turn files is taken for a fact: the record only says which version to
        read, and a handed-on commit stands in for reading an older version only where a
        commit read from the log vouches for its bytes (``TableLog.advance_to``).  A version
        that is not there (a record gone stale by a rollback, forged, or another table's) is
        left to the claim, which finds the newest version the usual way.

        Where the recorded commit itself was handed on and the chain of digests from it reaches
        this object's newest commit, the attempt is built on it while it is read from the log
        (``TableLog.speculate``): the read goes out beside the attempt's own requests instead
        of before them, and the attempt claims nothing until what was read is that commit
        (``_ready``).  A speculation is made only where it would change nothing but the base:
        no member conflicts with a commit it brings or finds its own transaction there."""
        previous: Record | None = None
        if turn.held or turn.take(lambda: self._ready(group)):
            record = turn.found
            handed: dict[int, bytes] = {}
            if record is not None and record.foreign and record.version > self.log.version:
                handed = turn.handed(self.log.version)
                speculation = self._speculation(record, handed, group, base) \
                    if speculate else None
                if speculation is not None:
                    return base, record, speculation
            if record is not None and record.foreign and record.version > self.log.version:
                handed.pop(record.version, None)  # the newest is read from the log
                with contextlib.suppress(DeltaCommitError, ValueError):
                    self.log.advance_to(record.version, handed)
            if record is not None and record.foreign and record.version == self.log.version \
                    and self._digest_at(record.version) == record.digest:
                previous = record
        if self.log.version <= base:
            return base, previous, None
        return self._rebase(group, base, latest=self.log.version), previous, None

    def _speculation(self, record: Record, handed: Mapping[int, bytes], group: Group,
                     base: int) -> Speculation | None:
        """The speculation an attempt is built on (``_take_turn``), or None.  One that would
        change what the group commits is read at once instead: adopted if it holds up, so
        that the decision is made on what the log holds."""
        newest = handed.get(record.version)
        if self.log.version != base or newest is None:
            return None
        speculation = self.log.speculate(record.version, record.digest, newest, handed)
        if speculation is None or self._unchanged_by(group, speculation.commits):
            return speculation
        self.log.confirm(speculation)
        return None

    def _unchanged_by(self, group: Group, commits: Sequence[Commit]) -> bool:
        """Whether no member conflicts with one of ``commits``, would be rebased over one of
        them, or finds its transaction there (checked without failing, rebasing or resolving
        anyone).  A row-level member is never taken to be unchanged: its check reads the
        winner's files, and a rebase replaces what it commits."""
        if any(m.staged.summary.row_level is not None for m in group.members):
            return False
        for c in commits:
            ids = set(committed_txn_ids(c.commit_info))
            winner = WinningCommit.from_actions(c.version, c.actions)
            for m in group.members:
                if m.staged.txn_id in ids:
                    return False
                try:
                    if check_conflicts(m.staged.summary, winner, self.log.uri) is not None:
                        return False
                except ConcurrentModificationException:
                    return False
        return True

    # ----------------------------------------------------------------- history

    def missed(self, first: int, last: int, members: Sequence[Member], group: Group
               ) -> list[Commit]:
        """Versions ``first..last`` that ``members`` must be checked against.

        If log cleanup has deleted some of them, they cannot be checked one by one.  A blind
        append that read no application id conflicts only with a change of metadata or
        protocol, which comparing the newest snapshot with the one it read settles; any other
        member fails with a clear error instead of committing blind.
        """
        if last < first:
            return []
        try:
            return self.log.known_commits(first, last)
        except MissingVersionError as e:
            now = self.log.snapshot
            for m in members:
                if m.published:
                    group.on_fail(m, CommitFailedError(
                        f"{m.staged.operation} on table {self.log.uri} (txnId "
                        f"{m.staged.txn_id}) was published for the fleet's group commit, "
                        f"which another writer may have landed after version "
                        f"{m.staged.read_version}; commits made since then are gone from the "
                        f"log (deleted by log cleanup past delta.logRetentionDuration: {e}), "
                        "so whether it landed is unknown and it is not committed again. Look "
                        "for its rows, or its app id's version, before writing it again"))
                    continue
                s = m.staged.summary
                # (a newer identity high-water mark alone passes, as it would one by one)
                same_metadata = now.metadata == s.read_metadata or (
                    not s.has_metadata and is_mark_update(s.read_metadata, now.metadata))
                if not (s.is_blind_append and not s.read_app_ids
                        and same_metadata and now.protocol == s.read_protocol):
                    group.on_fail(m, CommitFailedError(
                        f"cannot commit {m.staged.operation} to table {self.log.uri}: this "
                        f"transaction read version {m.staged.read_version}, but commits made "
                        "since then are gone from the log (deleted by log cleanup past "
                        f"delta.logRetentionDuration: {e}), so they cannot be checked for "
                        "conflicts. Re-read the table and run the transaction again."))
                else:
                    m.checked = max(m.checked, last)
            return []

    def catch_up(self, m: Member, base: int, history: dict[int, Seen], group: Group) -> bool:
        """Check ``m`` against the versions after its snapshot up to ``base``; False if it
        failed, or if one of them already holds it (an earlier attempt, or a submission by a
        process that died before answering)."""
        if m.checked >= base:
            return True
        missing = [v for v in range(m.checked + 1, base + 1) if v not in history]
        if missing:
            for c in self.missed(missing[0], base, [m], group):
                if c.version not in history:
                    history[c.version] = (WinningCommit.from_actions(c.version, c.actions),
                                          frozenset(committed_txn_ids(c.commit_info)))
            if m.done:
                return False
            if m.checked >= base:
                return True
        for v in range(m.checked + 1, base + 1):
            winner, ids = history[v]
            if m.staged.txn_id in ids:
                m.resolve(self._result(m, v, self.log.log_store.read_commit(v), len(ids)))
                return False
            if not self.check(m, winner, group):
                return False
            m.winners.append(v)
        m.checked = base
        return True

    def check(self, m: Member, winner: WinningCommit, group: Group) -> bool:
        """Check ``m`` against ``winner``; False (``m`` failed) on a conflict.  A row-level
        member is checked row by row, with what it needs read of the winner's files, and
        rebased onto the files the winner replaced (``engine/commit/row_rebase.py``)."""
        summary = m.staged.summary
        store = self.log.log_store.store
        try:
            if summary.row_level is not None:
                # Only a row-level member reads the winner's rows or is rebased: the module
                # loads with the first (a blind append never loads it).
                from deltacommit.engine.commit.row_rebase import load_winner_rows

                load_winner_rows(store, self.log.uri, winner.version, summary.row_level, winner,
                                 new_row_candidates(summary, winner))
            plan = check_conflicts(summary, winner, self.log.uri)
            if plan is not None:
                from deltacommit.engine.commit.row_rebase import rebase

                m.staged = rebase(store, self.log.uri, m.staged, plan,
                                  int(self.clock.time() * 1000))
        except ConcurrentModificationException as e:
            group.on_fail(m, e)
            return False
        except DeltaCommitError as e:
            # The rebase could not write or prove its deletion vectors: nothing of it is
            # committed, and the member fails with the reason.
            group.on_fail(m, e)
            return False
        return True

    # ----------------------------------------------------------------- attempts

    def run(self, group: Group, base: int, group_id: str) -> Commit | None:
        """Commit ``group`` at the first free version after ``base``; None if no member is left
        to commit (each failed, or was found committed already)."""
        turn = self._turn()
        try:
            return self._attempts(group, base, group_id, turn)
        finally:
            if turn is not None:
                turn.release()

    def _attempts(self, group: Group, base: int, group_id: str, turn: HostTurn | None
                  ) -> Commit | None:
        attempt = 0
        # Only the commitInfo changes between attempts of the same members: the rest of the
        # version is serialized once (a compaction's thousands of actions would otherwise
        # widen every attempt's window for losing the race).
        body_key: tuple[Any, ...] | None = None
        body = b""
        cheap = False  # whether the last catch-up read only the version it lost
        refuted = False  # whether the last attempt's speculation did not hold up
        while group.members:
            baton: _Baton | None = None
            speculation: Speculation | None = None
            if turn is not None:
                landed, previous, speculation = self._take_turn(turn, group, base,
                                                                speculate=not refuted)
                if isinstance(landed, Commit):
                    return landed
                base = landed
                if not group.members:
                    break
                if turn.held:
                    baton = _Baton(turn, previous)
            built_on = base if speculation is None else speculation.version
            version = built_on + 1
            group.admit(version)
            if not group.members:
                break
            members = group.members
            attempt += 1
            group.on_attempt()
            for m in members:
                m.attempts += 1
            actions, dependent = self.stamped_actions(
                group, group_id, version, None if speculation is None else speculation.snapshot)
            if baton is not None or group.vouches:
                actions[0] = self._vouching(actions[0], built_on, speculation)
            key = (tuple((id(m), id(m.staged)) for m in members), id(group.adds),
                   len(group.adds),
                   version if dependent else None)
            if key != body_key:
                body, body_key = serialize_commit(actions[1:]), key
            data = serialize_commit(actions[:1]) + body
            digest = hashlib.sha256(data).hexdigest()
            if baton is not None:
                baton.data, baton.digest = data, digest
            unconfirmed = self.log.unconfirmed
            confirmed: list[int] = []
            try:
                # The version is claimed only once its data files are durable, the table is
                # known to be the one its cached state describes and a speculation the
                # attempt was built on held up; a log store with requests of its own before
                # the claim makes them meanwhile.
                self.log.log_store.write_commit_when_ready(
                    version, data, functools.partial(self._ready, group, base, speculation,
                                                     confirmed), baton)
            except _Rebuild as e:
                # Nothing was claimed: the attempt is built again, on what the log holds.
                attempt -= 1
                for m in members:
                    m.attempts -= 1
                if isinstance(e.landed, Commit):
                    return e.landed
                base, refuted = e.landed, e.refuted
                continue
            except VersionExistsError:
                if confirmed:
                    base = confirmed[0]
                outcome, cheap = self._after_lost_claim(group, turn, base, version, attempt, cheap)
                if not isinstance(outcome, int):
                    return outcome
                base = outcome
                continue
            except DeltaCommitError as e:
                self._replaced_or(e, unconfirmed)
                raise
            return self._won(group, members, Commit(version, actions, digest), data, turn)
        return None

    def _replaced_or(self, error: DeltaCommitError, unconfirmed: bool) -> None:
        """Raise TableReplacedError where ``error`` came from checks made before the claim on a
        state not yet proven (a missing previous version, stale entries): that is what a
        replaced table shows, reported as that so that the write is tried again on a fresh
        read.  Otherwise return, and ``error`` stands."""
        if unconfirmed and not isinstance(error, TableReplacedError):
            self.log.confirm_identity()

    def _after_lost_claim(self, group: Group, turn: HostTurn | None, base: int, version: int,
                          attempt: int, cheap: bool) -> tuple[Commit | int | None, bool]:
        """After another writer took ``version``: the group rebased over the versions that beat
        it, and whether this catch-up read only the version lost.  What it gives is the new base
        version, or the group's commit should a rebase find it landed, or None once the group
        is out of attempts (its members failed)."""
        if turn is not None:
            turn.release()  # beaten by a writer outside the turn: it goes on racing
        # The versions that beat it must be this table's before they are rebased over.
        self.log.confirm_identity()
        pause = 0.0
        if attempt < self.policy.max_attempts:
            pause = self.policy.backoff(attempt, self.random.uniform(0.0, 1.0))
        if pause >= CATCH_UP_AFTER:
            # Writers keep committing while this group waits: an attempt at the
            # version it knew before waiting is all but sure to lose again.  So the
            # versions that beat it are read after the pause, with those committed
            # meanwhile, in one catch-up: reading them at once as well costs a second
            # one, which also meets the winner still completing its version (a
            # DynamoDB entry is then repaired for it), and lets a large commit (a
            # compaction) beside a stream of small ones win a version at all.
            self.clock.sleep(pause)
        # Rebasing at once, only the version just lost is read: the next claim finds
        # out whether a newer one exists.  After a pause, or a second loss in a row
        # (the snapshot may be far behind: an object left idle), the newest version
        # is found first, so a writer far behind pays one lost claim, not one each.
        cheap = pause < CATCH_UP_AFTER and not cheap
        landed = self._rebase(group, base, version if cheap else None)
        if isinstance(landed, Commit):
            return landed, cheap
        left = group.members
        if attempt >= self.policy.max_attempts and left:
            error = self._gave_up(left, attempt, version)
            for m in left:
                group.on_fail(m, error)
            group.discard()
            return None, cheap
        if left and pause < CATCH_UP_AFTER:
            self.clock.sleep(pause)
        return landed, cheap

    def _won(self, group: Group, members: list[Member], commit: Commit, data: bytes,
             turn: HostTurn | None) -> Commit:
        """The claim of ``commit`` succeeded: the table log and the host's turn learn it, and
        each member its result."""
        version, digest = commit.version, commit.digest
        self.log.committed(commit)
        if turn is not None:
            self._hand_on(turn, version, digest, data)
        for m in members:
            m.resolve(CommitResult(version, m.attempts, winners=tuple(m.winners),
                                   txn_id=m.staged.txn_id, digest=digest,
                                   read_version=m.staged.read_version,
                                   group_size=len(members)))
        group.on_committed(members)
        return commit

    @staticmethod
    def _hand_on(turn: HostTurn, version: int, digest: str, data: bytes) -> None:
        """Record the commit for the next holder and hand the turn on; if it was handed on
        already (``_Baton.written``), say that this process is done with the commit."""
        if turn.held:
            turn.publish(Record(version, digest, settled=True), data)
            turn.release()
        else:
            turn.settle(version, digest)

    def _vouching(self, info: Action, base: int, speculation: Speculation | None) -> Action:
        """The attempt's ``commitInfo`` with the SHA-256 of the commit it is built on, where
        this object knows it: what lets the next writers of the host take that commit as
        handed on instead of reading it (``TableLog.advance_to``).  On a speculation, the
        digest the log must hold there before the attempt claims anything."""
        built_on = self._digest_at(base) if speculation is None else speculation.digest
        if not built_on or not isinstance(info, CommitInfo):
            return info
        return CommitInfo({**info.values, PREVIOUS_COMMIT_KEY: built_on})

    def _digest_at(self, version: int) -> str:
        """The SHA-256 of this object's commit at ``version``, where it knows it."""
        known = self.log.cached_commits(version, version)
        return known[0].digest if known else ""

    def _ready(self, group: Group, base: int = -1, speculation: Speculation | None = None,
               confirmed: list[int] | None = None) -> None:
        """What the claim of a version waits for: the speculation the attempt was built on,
        read from the log and adopted, and the group rebased over it (``_Rebuild`` where it
        did not hold up, or changed what the group commits after all; ``confirmed`` then
        holds the new base), the proof that the table is the one the cached state describes
        (``TableLog.confirm_identity``), the snapshot's newest commit read back where it was
        last known a while ago (``TableLog.recheck_if_stale``: a table rolled back meanwhile
        would get a commit after a gap), and the data files."""
        if speculation is not None:
            committing = [(m, m.staged) for m in group.members]
            if not self.log.confirm(speculation):
                raise _Rebuild(base, refuted=True)
            landed = self._rebase(group, base, latest=speculation.version)
            if confirmed is not None and not isinstance(landed, Commit):
                confirmed.append(landed)
            if isinstance(landed, Commit) \
                    or [(m, m.staged) for m in group.members] != committing:
                raise _Rebuild(landed, refuted=False)
        self.log.confirm_identity()
        self.log.recheck_if_stale(self.policy.recheck_after)
        self.log.check_still_read(dict.fromkeys(
            (m.staged.read_version, m.staged.read_digest) for m in group.members))
        self._make_durable(group)

    def _make_durable(self, group: Group) -> None:
        """Every data file the version names that is not durable yet is made so (its content
        and its directory entry) before the version is written: a crash must never leave a
        commit whose data is lost."""
        unsynced = [p for p in group.unsynced() if p not in group.durable]
        if unsynced:
            self.log.log_store.store.make_durable(unsynced)
            group.durable.update(unsynced)

    def _rebase(self, group: Group, base: int, lost: int | None = None,
                latest: int | None = None) -> Commit | int:
        """Check the group against the versions that beat it; the new base, or the version an
        earlier attempt of the group landed in.  ``lost``: the version just found taken;
        ``latest``: the newest version, already read (the host's turn named it)."""
        if latest is None:
            latest = self.log.refresh() if lost is None else self.log.refresh_after_loss(lost)
        for c in self.missed(base + 1, latest, group.members, group):
            recorded = set(committed_txn_ids(c.commit_info))
            found = [m for m in group.members if m.staged.txn_id in recorded]
            if found and len(found) == len(group.members):
                return self._landed(c, group)
            if found:
                # Some members only, committed by another writer (a fleet's published
                # transactions, ``engine.group.fleet``): resolved there, the others go on.
                data = self.log.log_store.read_commit(c.version)
                for m in found:
                    m.resolve(self._result(m, c.version, data, len(recorded)))
                group.prune()
            winner = WinningCommit.from_actions(c.version, c.actions)
            for m in group.members:
                if m.done:
                    continue
                if not self.check(m, winner, group):
                    continue
                m.winners.append(c.version)
                m.checked = c.version
        group.prune()
        return max(base, latest)

    def _landed(self, commit: Commit, group: Group) -> Commit:
        """An earlier attempt of this group is in the log although the log store said the
        version was taken (a request retried after its first try had in fact succeeded)."""
        data = self.log.log_store.read_commit(commit.version)
        recorded = set(committed_txn_ids(commit.commit_info))
        later = []
        for m in group.members:
            if m.staged.txn_id in recorded:
                m.resolve(self._result(m, commit.version, data, len(recorded)))
            else:  # pragma: no cover - a group's membership only shrinks after an attempt
                later.append(m)
        if later:
            group.defer(later)
        return commit

    def _result(self, m: Member, version: int, data: bytes, group_size: int) -> CommitResult:
        return CommitResult(version, max(m.attempts, 1), winners=tuple(m.winners),
                            txn_id=m.staged.txn_id, digest=hashlib.sha256(data).hexdigest(),
                            read_version=m.staged.read_version, group_size=group_size)

    def _gave_up(self, left: Sequence[Member], attempt: int, version: int) -> CommitFailedError:
        uri = self.log.uri
        if len(left) == 1:
            m = left[0]
            return CommitFailedError(
                f"gave up committing {m.staged.operation} to table {uri} after {attempt} "
                f"attempts: each lost the race for the next version (last tried version "
                f"{version}; rebased over {len(m.winners)} concurrent commits, none "
                "conflicting). Raise CommitPolicy.max_attempts if this many concurrent "
                "writers are expected, or coalesce their writes")
        return CommitFailedError(
            f"gave up committing a group of {len(left)} {left[0].staged.operation} transactions "
            f"to table {uri} after {attempt} attempts: each lost the race for the next version "
            f"(last tried version {version}). Raise CommitPolicy.max_attempts if this many "
            "concurrent writers are expected")

    # ----------------------------------------------------------------- the version's actions

    def actions(self, group: Group, group_id: str, now_ms: int) -> list[Action]:
        staged = [m.staged for m in group.members]
        info = version_commit_info(staged, group.adds, now_ms, group_id)
        if len(staged) == 1:
            # A group of one is written exactly as the lone transaction would write it.
            return staged[0].with_adds(staged[0].adds + tuple(group.adds)).actions(info)
        return group_actions(staged, group.adds, info)

    def stamped_actions(self, group: Group, group_id: str, version: int,
                        before: Snapshot | None = None) -> tuple[list[Action], bool]:
        """The actions of this attempt at ``version``, stamped with what depends on the
        version (``engine/commit/stamps.py``), and whether more than the ``commitInfo``
        does.  ``before``: the state at ``version - 1`` (a speculation's), else the log's."""
        now_ms = int(self.clock.time() * 1000)
        if before is None:
            before = self.log.snapshot
            if before.version < version - 1:
                self.log.refresh()
                before = self.log.snapshot
        # A snapshot newer than version - 1 means that version is taken: the attempt loses
        # the race whatever it carries, and the rebase stamps the next one afresh.
        return stamp(self.actions(group, group_id, now_ms), before, version, now_ms)


def commit(log: TableLog, staged: StagedCommit, policy: CommitPolicy, clock: Clock,
           random: RandomSource) -> tuple[CommitResult, Commit]:
    """Commit one transaction's staged version through the loop: the entry every lone
    version takes, a table's first included (``read_version`` -1, staged on the empty state
    before version 0, as ``DeltaTable.create`` does): it takes the host's turn, is stamped on
    each attempt and claims its version through the log store like any other.

    Returns the result and the commit it landed in (found in the log when an earlier attempt
    of the transaction had landed already).  A first version that loses the race for version
    0 conflicts with whatever won it: the table exists, ``TableExistsError``.
    """
    member = Member(staged)
    group = Group([], [], [member])
    loop = CommitLoop(log, policy, clock, random)
    base = log.version
    landed = None
    if loop.catch_up(member, base, {}, group):
        landed = loop.run(group, base, staged.txn_id)
    if staged.read_version < 0 and isinstance(member.error, ConcurrentModificationException):
        raise TableExistsError(
            f"a Delta table was created at {log.uri} concurrently (another writer committed "
            "its version 0 first); open it instead") from None
    result = member.outcome()
    if landed is None:  # found committed by an earlier attempt before this one began
        landed = log.known_commits(result.version, result.version)[0]
    return result, landed


class _Rebuild(Exception):
    """Raised by ``_ready`` before anything is claimed: the attempt was built on a speculation
    that did not hold up (``refuted``), or that, read, changed what the group commits.
    ``landed``: the new base, or the version an earlier attempt of the group landed in."""

    def __init__(self, landed: Commit | int, *, refuted: bool) -> None:
        super().__init__(landed)
        self.landed = landed
        self.refuted = refuted


class _Baton:
    """The loop's turn as the log store sees it (``logstore.base.Baton``) in one attempt:
    ``previous`` is the last holder's record, naming the version this attempt builds on."""

    def __init__(self, turn: HostTurn, previous: Record | None) -> None:
        self.turn = turn
        self.previous = previous
        #: The attempt's commit and its SHA-256.
        self.data = b""
        self.digest = ""

    def written(self, version: int) -> None:
        self.turn.publish(Record(version, self.digest, settled=False), self.data)
        self.turn.release()

    def await_previous(self, version: int) -> None:
        p = self.previous
        if p is not None and p.version == version and not p.settled:
            self.turn.await_settled(version, p.digest)
