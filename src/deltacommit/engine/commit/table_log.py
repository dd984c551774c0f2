"""One table's log as a writer follows it: the newest snapshot it knows, and recent commits.

Every transaction and group commit of a ``DeltaTable`` object goes through its ``TableLog``,
so threads sharing the object read each new commit once between them, and a lost race costs
one read per commit made since the last version this object saw, never a reload.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deltacommit.engine.commit.commit_info import previous_commit
from deltacommit.engine.hooks.checkpoint import after_commit
from deltacommit.engine.snapshot import state_cache
from deltacommit.engine.snapshot.snapshot import Commit, Snapshot, decode_commit
from deltacommit.errors import DeltaCommitError, ObjectNotFoundError, TableReplacedError
from deltacommit.io.logstore.base import LogStore, Moment
from deltacommit.io.logstore.fleet_sign import dynamodb_fleet_sign
from deltacommit.io.storage import background
from deltacommit.protocol.actions import Add, Metadata, Protocol, Remove
from deltacommit.protocol.files.lazy_files import LazyActionMap, carried_over
from deltacommit.protocol.log.paths import file_key
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.intervals import may_predate_cleanup
from deltacommit.runtime.clock import Clock

if TYPE_CHECKING:
    import pyarrow as pa

#: How many recent commits a table log keeps for conflict checks of its transactions.
RECENT_COMMITS = 256


#: A freshly loaded snapshot whose own commit the load did not decode (a checkpoint at its
#: version) is offered to the process's cache only if that commit is at most this large.
LARGEST_DECODED_ANCHOR = 256 * 1024


@dataclass(frozen=True)
class Speculation:
    """A table log advanced by commits handed on by other writers of the host, not adopted
    until the newest is read from the log (``TableLog.speculate``, ``TableLog.confirm``)."""

    #: The snapshot it advances (the table log's when it was made).
    base: Snapshot
    #: ``base`` advanced by the handed-on commits.
    snapshot: Snapshot
    commits: list[Commit]
    #: SHA-256 of the newest commit handed on, which the log must hold at ``version``.
    digest: str
    #: When the read of the log began (``TableLog._adopt``).
    started: Moment
    #: The newest version's commit file, being read from the log.
    reading: Future[bytes]

    @property
    def version(self) -> int:
        return self.snapshot.version


class TableLog:
    """The snapshot cache of one table object; thread-safe."""

    def __init__(self, log_store: LogStore, clock: Clock, snapshot: Snapshot, *,
                 pinned: bool = False, cache_key: state_cache.Key | None = None,
                 known: tuple[Commit, ...] = (),
                 proof: state_cache.IdentityProof | None = None) -> None:
        self.log_store = log_store
        self.clock = clock
        #: Opened at a fixed version: reads only, never follows new commits.
        self.pinned = pinned
        self._lock = threading.RLock()
        self._recent: OrderedDict[int, Commit] = OrderedDict()
        # When this object last knew its snapshot to be the newest version (wall clock): a
        # snapshot much older than the log's retention may predate a cleanup.
        self._confirmed_at = clock.time()
        # The same moment on the monotonic clock, which ``recheck_if_stale`` measures: a wall
        # clock set back must not make a snapshot read long ago look just read.
        self._newest_at = clock.monotonic()
        self._snapshot = snapshot
        self._foreign: tuple[str | None] | None = None
        self._hooks: list[Callable[[Commit, Snapshot], None]] = []
        self._checkpointing = threading.Lock()
        #: Where this table's newest snapshot is published for the process's next open of it
        #: (``state_cache``); None for pinned tables and custom log stores.
        self._cache_key = None if pinned else cache_key
        #: That the table at the location is still the one ``snapshot`` describes, while being
        #: read (``state_cache.reuse``); None once known.  No commit goes out before it.
        self._proof = proof
        #: How many times this object found its newest version rolled back or written again
        #: (``recheck_newest``): a transaction begun before the last time read a state the
        #: log no longer holds, whatever this object has read since (``check_read``).
        self.rollbacks_found = 0
        for c in known:
            self._remember(c)

    @property
    def unconfirmed(self) -> bool:
        """Whether the snapshot is a cached state not yet proven to be this table's."""
        return self._proof is not None

    def confirm_identity(self) -> None:
        """Wait for the proof that the cached snapshot describes the table at the location;
        TableReplacedError if the table there was replaced (nothing may be committed on a
        state of another table: its next version may be far from this snapshot's)."""
        proof = self._proof
        if proof is None:
            return
        if not proof.result():
            if self._cache_key is not None:
                state_cache.forget(self._cache_key)
            raise TableReplacedError(
                f"table {self.uri}: the commit at version {self._snapshot.version} is no longer "
                "the one this process read there, or is gone (the table was rolled back, or "
                "deleted and created again, or its log rewritten); the table must be read "
                "afresh")
        self._proven()

    def start_identity_proof(self) -> None:
        """Have the proof of ``confirm_identity`` read now, on a thread of the process, where
        it waits to be asked for (``state_cache.IdentityProof``): a writer about to claim a
        version reads it meanwhile."""
        proof = self._proof
        if proof is not None:
            proof.start()

    def identity_vouched(self, version: int, data: bytes) -> bool:
        """Whether the commit ``data``, read from the log at ``version``, proves what
        ``confirm_identity`` would: it is the version after the cached snapshot and names the
        SHA-256 of the cached commit as the one it was built on.  If so, the proof is had
        (no read of it is made); if not, nothing changes (the proof is read when asked for).
        True too where nothing was left to prove."""
        proof = self._proof
        if proof is None:
            return True
        if not proof.vouched_by(version, previous_commit(data)):
            return False
        self._proven()
        return True

    def _proven(self) -> None:
        """The cached state is proven to be this table's: what this object read on it since
        may now be offered to the process's cache (``_publish``)."""
        with self._lock:
            self._proof = None
            self._publish()

    def add_hook(self, hook: Callable[[Commit, Snapshot], None]) -> None:
        """Run ``hook(commit, snapshot at its version)`` after each commit this object makes,
        after the checkpoint hook: how layers above the engine (auto-compaction) join in
        without the engine importing them."""
        self._hooks.append(hook)

    @property
    def uri(self) -> str:
        return self.log_store.table_uri

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def version(self) -> int:
        return self._snapshot.version

    def _now(self) -> Moment:
        return self.clock.monotonic(), self.clock.time()

    def refresh(self) -> int:
        """Adopt the newest snapshot (incrementally, or reloaded past a log cleanup)."""
        with self._lock:
            started = self._now()
            return self._adopt(started, self._snapshot.updated(self._may_predate_cleanup()))

    def _adopt(self, started: Moment, read: tuple[Snapshot, list[Commit]]) -> int:
        """Take a snapshot and the commits read for it, under the lock; ``started``: when the
        read began, the last moment the snapshot is known to have been current."""
        snap, new = read
        self._snapshot = snap
        self._newest_at, self._confirmed_at = started
        for c in new:
            self._remember(c)
        self._publish()
        return snap.version

    def advance_to(self, version: int, handed: Mapping[int, bytes] | None = None) -> int:
        """Adopt the versions up to ``version``, which another writer of this host reported
        committed (``engine.host_turn``), without looking for newer ones, since the claim
        that follows finds those anyway.  MissingVersionError if one is not there (the report
        is only a hint of what to read).

        ``version`` is read from the log.  ``handed``: commits other writers of the host
        handed over with their records, by version, hints only: one is taken only where the
        commit after it, read from the log or itself taken so, names its SHA-256
        (``commit_info.PREVIOUS_COMMIT_KEY``), and the chain reaches down to this object's
        newest commit or to a version read from the log.  Any other version is read."""
        with self._lock:
            snap = self._snapshot
            if snap.version >= version:
                return snap.version
            started = self._now()
            if not handed:
                pairs = self.log_store.read_range(snap.version + 1, version)
                return self._adopt(started, snap.advanced_by(pairs))
            newest = self.log_store.read_range(version, version)
            taken, v, expected = self._vouched(snap, version, newest[0][1], handed)
            if v > snap.version:
                taken.update(self.log_store.read_range(snap.version + 1, v))
                below = hashlib.sha256(taken[v]).hexdigest()
            else:
                below = self._digest_of(snap.version)
            if v < version - 1 and below != expected:
                # The chain does not meet what this object knows: read them all.
                taken.update(self.log_store.read_range(v + 1, version - 1))
            return self._adopt(started, snap.advanced_by(sorted(taken.items())))

    def _vouched(self, snap: Snapshot, version: int, newest: bytes,
                 handed: Mapping[int, bytes]) -> tuple[dict[int, bytes], int, str | None]:
        """``newest`` (the commit at ``version``) and the handed-on commits below it that the
        chain of ``previousCommit`` digests from it takes, down to the first version above
        ``snap`` it does not take; that version (``snap.version`` where it took them all) and
        the digest the commit above it names there."""
        taken = {version: newest}
        expected = previous_commit(newest)
        v = version - 1
        while v > snap.version and expected is not None and v in handed \
                and hashlib.sha256(handed[v]).hexdigest() == expected:
            taken[v] = handed[v]
            expected = previous_commit(handed[v])
            v -= 1
        return taken, v, expected

    def _digest_of(self, version: int) -> str:
        anchor = self._recent.get(version)
        return anchor.digest if anchor is not None else ""

    def digest_of(self, snapshot: Snapshot) -> str:
        """The SHA-256 of this object's commit at ``snapshot``'s version, where ``snapshot``
        is still this object's and its commit is known; else ""."""
        with self._lock:
            return self._digest_of(snapshot.version) if snapshot is self._snapshot else ""

    def still_holds(self, version: int, digest: str) -> bool:
        """Whether the log still holds, at ``version``, the commit of SHA-256 ``digest``: as
        this object knows it, else read back (one GET).  A version rolled back and written
        again since a transaction read it is not what the transaction read, though no newer
        than the log's newest: a commit built on it would remove files the log never added
        and write back rows rolled back."""
        with self._lock:
            known = self._digest_of(version)
        if not known:
            try:
                known = hashlib.sha256(self.log_store.read_commit(version)).hexdigest()
            except ObjectNotFoundError:
                return False
        return known == digest

    def speculate(self, version: int, digest: str, newest: bytes,
                  handed: Mapping[int, bytes]) -> Speculation | None:
        """The table advanced to ``version`` by ``newest``, the commit another writer of this
        host handed on as its commit there (SHA-256 ``digest``), and by the commits handed on
        before it that the chain of ``previousCommit`` digests from it takes down to this
        object's newest commit; None where the chain does not reach it or a commit does not
        decode.  Nothing of it is adopted: ``version`` is read from the log meanwhile, and
        ``confirm`` adopts it only once what was read there is ``newest``.  So the next attempt
        is prepared while its base is read, instead of after: a wrong hint costs the work done
        on it, never a decision made on it."""
        with self._lock:
            snap = self._snapshot
            if snap.version >= version or hashlib.sha256(newest).hexdigest() != digest:
                return None
            taken, v, expected = self._vouched(snap, version, newest, handed)
            if v > snap.version or (v < version - 1 and self._digest_of(snap.version) != expected):
                return None  # the chain does not meet what this object knows
            started = self._now()
        reading = background.submit(lambda: self.log_store.read_commit(version))
        try:
            advanced, commits = snap.advanced_by(sorted(taken.items()))
        except (DeltaCommitError, ValueError):
            return None
        return Speculation(snap, advanced, commits, digest, started, reading)

    def confirm(self, speculation: Speculation) -> bool:
        """Whether the log holds, at the speculation's version, the commit it was built on
        (read from the log since, and compared by SHA-256), and this object had not moved
        meanwhile; if so, the speculation is adopted like versions read."""
        try:
            data = speculation.reading.result()
        except (DeltaCommitError, ValueError):
            return False
        if hashlib.sha256(data).hexdigest() != speculation.digest:
            return False
        with self._lock:
            if self._snapshot is not speculation.base:
                return False
            self._adopt(speculation.started, (speculation.snapshot, speculation.commits))
        return True

    def _reload(self) -> None:
        """Take the table as its log now holds it, read from scratch (a snapshot ahead of the
        log never catches up by reading what follows it), so that this object's next
        transaction starts from it; best effort: where it cannot be read, the next one
        fails as it would.  A table opened at a version stays there."""
        if self.pinned:
            return
        started = self._now()
        read: list[Commit] = []
        try:
            fresh = Snapshot.load(self.log_store, read=read)
        except (DeltaCommitError, ValueError):
            return
        with self._lock:
            self._recent.clear()
            self._adopt(started, (fresh, read))

    def refresh_after_loss(self, version: int) -> int:
        """Adopt ``version``, which a commit attempt has just found taken, reading only what
        it takes to (``Snapshot.after_loss``): the retry claims the version after it at once
        and learns of any newer one by losing again, which costs a lost race no probe, LIST
        or Query to find the newest version first."""
        with self._lock:
            snap = self._snapshot
            if snap.version >= version:
                return snap.version  # another thread of this object read it already
            if snap.version != version - 1:
                return self.refresh()
            started = self._now()
            return self._adopt(started, snap.after_loss())

    def commits_after(self, version: int) -> list[Commit]:
        """Commits newer than ``version``, from the cache or the log; advances the snapshot.

        If log cleanup deleted commits this object never read, asking for them raises
        MissingVersionError (they can no longer be checked for conflicts).
        """
        latest = self.refresh()
        if latest <= version:
            return []
        return self.known_commits(version + 1, latest)

    def _may_predate_cleanup(self) -> bool:
        """Whether log cleanup may have deleted commits made after this object's snapshot."""
        return may_predate_cleanup(self._snapshot.table_config.log_retention_ms,
                                   self._confirmed_at, self.clock.time())

    def refresh_if_stale(self) -> None:
        """Catch up before committing if the snapshot may predate a log cleanup.

        A commit is attempted at ``version + 1`` of the snapshot.  If cleanup has deleted that
        commit, a put-if-absent there would succeed and create a file no reader ever looks at:
        a silently lost commit.  Only a snapshot older than the retention costs a refresh.
        """
        if self._may_predate_cleanup():
            self.refresh()

    def recheck_if_stale(self, recheck_after: float) -> None:
        """Before a version is claimed after the snapshot's: ``recheck_newest`` where the
        snapshot was last known to be the newest version more than ``recheck_after``
        seconds ago (a cached state's proof reads that commit back already)."""
        if self._proof is None and self.clock.monotonic() - self._newest_at > recheck_after:
            self.recheck_newest()

    def recheck_newest(self) -> None:
        """Read back the commit at the snapshot's version: TableReplacedError, before
        anything is committed on the snapshot, if it is no longer the commit this object
        read there, or if it is gone and the log holds nothing at or after that version.

        An operator who rolls a table back deletes its newest commit files; a writer that
        read the table before then, and still claims the version after, would put a commit
        after a gap that fails every reader of the table, on a state the log no longer
        holds.  (A version listed at or after it, a checkpoint without its commit among
        them, leaves the claim to find what is there.)"""
        with self._lock:
            snap = self._snapshot
            digest = self._digest_of(snap.version)
        if snap.version < 0:
            return
        started = self._now()
        try:
            data: bytes | None = self.log_store.read_commit(snap.version)
        except ObjectNotFoundError:
            data = None
        if data is None:
            if any(f.version >= snap.version and f.kind in ("commit", "checkpoint")
                   for f in self.log_store.list_log(snap.version)):
                return
            what = "is gone from the log, and nothing at or after it is there"
        elif (hashlib.sha256(data).hexdigest() != digest if digest
              else not _holds(self.log_store, snap, data)):
            what = "is no longer the commit this writer read there"
        else:
            with self._lock:
                if self._snapshot is snap:
                    self._newest_at = max(self._newest_at, started[0])
                    self._confirmed_at = max(self._confirmed_at, started[1])
            return
        with self._lock:
            self.rollbacks_found += 1
        if self._cache_key is not None:
            state_cache.forget(self._cache_key)
        self._reload()
        raise TableReplacedError(
            f"table {self.uri}: version {snap.version}, the newest this writer read, {what} "
            "(its commit file was deleted or written again: the table rolled back, or "
            "replaced); nothing was committed on the state read before, and the operation "
            "must start from a fresh read of the table")

    def check_read(self, rollbacks_found: int, read_version: int) -> None:
        """TableReplacedError for a transaction that read version ``read_version`` when this
        object had found ``rollbacks_found`` rollbacks, if it has found one since: what the
        transaction read may be gone from the log, and the state this object read afresh
        since, at that version or below, is not what it read (its commit would remove files
        the log never added, or write back rows rolled back)."""
        if self.rollbacks_found != rollbacks_found:
            raise TableReplacedError(
                f"table {self.uri}: version {read_version}, which this transaction read, may "
                "no longer be in the log (the table object found its newest version rolled "
                "back, or written again, after the transaction began); nothing was committed, "
                "and the transaction must run again on the table as read afresh")

    def check_still_read(self, reads: Iterable[tuple[int, str]]) -> None:
        """TableReplacedError before a claim unless the log still holds what transactions
        read: each (read version, SHA-256 of the commit read there, "" where unknown).  A
        version past the newest this object now holds was read before the object read the
        table afresh below it (a rollback found by another of its threads); a version whose
        commit is another now was rolled back and written again since (``still_holds``),
        though no newer than the log's newest."""
        reads = list(reads)
        newest = self.version
        for version, _ in reads:
            if version > newest:
                raise TableReplacedError(
                    f"table {self.uri}: version {version}, which a transaction committing "
                    f"read, is past the newest version {newest} the log holds now (the table "
                    "rolled back since); nothing was committed, and the transaction must run "
                    "again on the table as read afresh")
        for version, digest in reads:
            if digest and version >= 0 and not self.still_holds(version, digest):
                raise TableReplacedError(
                    f"table {self.uri}: version {version}, which a transaction committing "
                    "read, is no longer the commit it read there (the table rolled back since, "
                    "and the version was written again); nothing was committed, and the "
                    "transaction must run again on the table as read afresh")

    def cached_commits(self, first: int, last: int) -> list[Commit]:
        """Versions ``first..last`` if this object still holds them all, else none."""
        with self._lock:
            wanted = range(first, last + 1)
            if all(v in self._recent for v in wanted):
                return [self._recent[v] for v in wanted]
            return []

    def known_commits(self, first: int, last: int) -> list[Commit]:
        """Versions ``first..last``, known to exist: from the cache, else read (no probing)."""
        cached = self.cached_commits(first, last)
        if cached or first > last:
            return cached
        return [decode_commit(self.log_store, v, d)
                for v, d in self.log_store.read_range(first, last)]

    def _remember(self, commit: Commit) -> None:
        self._recent[commit.version] = commit
        while len(self._recent) > RECENT_COMMITS:
            self._recent.popitem(last=False)

    def committed(self, commit: Commit) -> None:
        """Fold a commit this process made (or learnt of) into the cache without reading it."""
        with self._lock:
            self._remember(commit)
            snap = self._snapshot
            if commit.version == snap.version + 1:
                self._snapshot = snap.with_commit(commit)
                self._newest_at, self._confirmed_at = self._now()
                self._publish()

    def _publish(self) -> None:
        """Offer the snapshot to the process's cache, once its identity is proven: until
        then it is a cached state with whatever was read on it since (a replaced table's
        newer versions, which a blind append's host turn reads before its claim), and
        another open of the table, proving it by its newest commit alone, would take that
        mixture of two tables for the table."""
        if self._cache_key is not None and self._proof is None:
            snap = self._snapshot
            state_cache.remember(self._cache_key, snap, self._recent.get(snap.version),
                                 self._confirmed_at)

    def publish_loaded(self, read: Sequence[Commit] = ()) -> None:
        """Offer a freshly loaded snapshot to the process's cache, with the commit at its
        version as the proof of identity on the next open: from ``read`` (the commits the
        load decoded), else read (one GET)."""
        if self._cache_key is None or not state_cache.enabled():
            return
        snap = self._snapshot
        known = [c for c in read if c.version == snap.version]
        try:
            if known:
                self._remember(known[0])
            else:
                [(version, data)] = self.log_store.read_range(snap.version, snap.version)
                if len(data) > LARGEST_DECODED_ANCHOR:
                    # Decoding it would cost about what loading the table again does.
                    return
                self._remember(decode_commit(self.log_store, version, data))
        except (DeltaCommitError, ValueError):
            return  # no commit file at the version (a checkpoint only): not cached
        self._publish()

    def post_commit(self, commit: Commit, snapshot: Snapshot | None = None) -> None:
        """The post-commit hooks after this process made ``commit``: a checkpoint when the
        interval says so, then expired-log cleanup (``checkpoint.after_commit``).

        ``snapshot`` is the state exactly at the commit's version, for a caller that lets
        further commits proceed meanwhile (group commit): the hooks then read that state
        instead of moving the table's snapshot back to the version.

        One checkpoint at a time per table object: a version due for one while this object
        still writes an earlier one gets none, and the next version due does.  Under group
        commit, versions can come faster than checkpoints of the whole table are written;
        writing each would only queue them, every one repeating the work of the one before.
        Readers then replay at most one interval more of commits.
        """
        if snapshot is None or snapshot.version != commit.version:
            snapshot = self._snapshot
        if self._checkpointing.acquire(blocking=False):
            try:
                before = snapshot.state.files
                after_commit(self.log_store, snapshot, self.clock, commit.version)
                after = snapshot.state.files
                if after is not before and isinstance(after, LazyActionMap):
                    self._carry_rows(snapshot, before, after)
            finally:
                self._checkpointing.release()
        for hook in self._hooks:
            hook(commit, snapshot)

    def _carry_rows(self, checkpointed: Snapshot, before: dict[str, Add],
                    after: LazyActionMap[Add]) -> None:
        """A checkpoint backed ``checkpointed``'s files by the rows it encoded; back the
        newest snapshot's by them too, if versions were committed meanwhile (``carried_over``),
        so that copying its state and the next checkpoint cost only the commits since."""
        with self._lock:
            current = self._snapshot
            if current is checkpointed or current.version <= checkpointed.version:
                return
            carried = carried_over(current.state.files, before, after)
            if carried is not None:
                current.state.files = carried

    def foreign_coordination(self) -> str | None:
        """``dynamodb_fleet_sign``, asked once per table object (it costs a LIST)."""
        if self._foreign is None:
            self._foreign = (dynamodb_fleet_sign(self.log_store.store, self.log_store.mechanism),)
        return self._foreign[0]


def _holds(log_store: LogStore, snap: Snapshot, data: bytes) -> bool:
    """Whether ``data``, the commit at ``snap``'s version, may be the one ``snap`` was read
    with where its bytes were never read (a snapshot loaded from a checkpoint at its version):
    the files it adds are in ``snap`` and those it removes are not.  Another writer's commit
    there names data files of its own.  What does not decode is left to the claim."""
    try:
        actions = decode_commit(log_store, snap.version, data).actions
    except (DeltaCommitError, ValueError):
        return True
    files = snap.state.files
    for a in actions:
        if isinstance(a, Add) and file_key(a.path, a.deletion_vector) not in files:
            return False
        if isinstance(a, Remove) and file_key(a.path, a.deletion_vector) in files:
            return False
    return True


class OnTableLog:
    """What a table object tells of its table's current version, read from its ``log``:
    ``DeltaTable`` (the facade) and ``LogTable`` (the engine's own) answer alike."""

    log: TableLog

    @property
    def uri(self) -> str:
        return self.log.uri

    @property
    def snapshot(self) -> Snapshot:
        return self.log.snapshot

    @property
    def version(self) -> int:
        return self.log.snapshot.version

    @property
    def schema(self) -> pa.Schema:
        return self.log.snapshot.schema

    @property
    def partition_columns(self) -> list[str]:
        return self.log.snapshot.partition_columns

    @property
    def configuration(self) -> dict[str, str | None]:
        return self.log.snapshot.configuration

    @property
    def table_config(self) -> TableConfig:
        """The table's properties, typed (``TableConfig``)."""
        return self.log.snapshot.table_config

    @property
    def metadata(self) -> Metadata:
        return self.log.snapshot.metadata

    @property
    def protocol(self) -> Protocol:
        return self.log.snapshot.protocol
