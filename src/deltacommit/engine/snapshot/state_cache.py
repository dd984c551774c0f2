"""The process's table states: the last snapshot of each table it opened, for the next open.

``dc.write(uri, ...)`` (and ``dc.append``, ``DeltaTable(uri)``) would otherwise load the table
on every call: a LIST, then a GET for every commit since the last checkpoint, and the
checkpoint.  With the last snapshot at hand, opening costs what a kept table object's update
costs (a GET of the next version, which misses when nothing is new; where the log store knows
the latest version, as DynamoDB does, a HEAD checking that nobody wrote past it another way)
plus one GET proving the table is the one cached: the commit at the cached version must still
hold exactly the actions it held.  A table deleted and created again at the same path fails
that proof (its commit there, if any, has another ``txnId`` and timestamp) and is loaded
afresh, never confused with the old one.  On a table whose writers join the fleet
(``deltacommit.groupCommit.fleet``) a blind append's proof waits to be asked for: its writer
reads the next version anyway, and that version, naming the cached commit's SHA-256 as the one
it was built on, proves it without the GET (``IdentityProof``).

Entries are keyed by the canonical location (``s3a://b/t`` is ``s3://b/t``), the storage
options, the log store's mechanism and what its clients resolved (``LogStore.identity``),
bounded (least recently used go first), shared by the
threads of this process and never by other processes.  Snapshots are immutable, so sharing
one cannot leak one table object's changes into another.  ``DELTACOMMIT_TABLE_CACHE=off``
turns the cache off; ``clear()`` empties it.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial

from deltacommit.engine.snapshot.snapshot import Commit, Snapshot, decode_commit
from deltacommit.errors import DeltaCommitError
from deltacommit.io.logstore import knowledge
from deltacommit.io.logstore.base import LogStore
from deltacommit.io.storage.background import ProcessPool
from deltacommit.protocol.log.names import commit_path
from deltacommit.protocol.log.paths import parse_location
from deltacommit.protocol.table_config.intervals import may_predate_cleanup
from deltacommit.runtime.clock import Clock
from deltacommit.runtime.process_state import ForkSafeLock, process_wide

SWITCH = "DELTACOMMIT_TABLE_CACHE"
#: At most this many tables' states are kept.
CAPACITY = 64

Key = tuple[str, tuple[tuple[str, str], ...], str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class _Entry:
    snapshot: Snapshot
    #: The commit at ``snapshot.version``: reading it back proves the table was not replaced.
    anchor: Commit
    #: When the snapshot was last known to be the newest version (clock time).
    confirmed_at: float


_lock = ForkSafeLock()
_entries: OrderedDict[Key, _Entry] = OrderedDict()


process_wide("table states (engine.snapshot.state_cache)", _entries.clear)


def enabled() -> bool:
    return (os.environ.get(SWITCH) or "").strip().lower() not in ("off", "false", "0", "no")


def key_of(log_store: LogStore, storage_options: Mapping[str, str]) -> Key:
    """The table's entry: its canonical location, the options, the log store's kind, and
    what the clients resolved (``LogStore.identity``: an endpoint, region or credentials
    from the environment, which the options do not show, make another table)."""
    return (parse_location(log_store.table_uri).uri(),
            tuple(sorted((str(k), str(v)) for k, v in storage_options.items())),
            f"{type(log_store).__module__}.{type(log_store).__qualname__}",
            log_store.identity() or ())


def clear() -> None:
    """Forget every cached table state, and what the log stores established about each
    table's coordination (``logstore.knowledge``): the process then knows what a new one does."""
    with _lock:
        _entries.clear()
    knowledge.clear()


def remember(key: Key, snapshot: Snapshot, anchor: Commit | None, confirmed_at: float) -> None:
    """Keep ``snapshot`` (with the commit at its version) for the next open of the table."""
    if anchor is None or anchor.version != snapshot.version or not enabled():
        return
    with _lock:
        current = _entries.get(key)
        if current is not None and current.snapshot.version > snapshot.version:
            return  # another table object of this process is further ahead
        _entries[key] = _Entry(snapshot, anchor, confirmed_at)
        _entries.move_to_end(key)
        while len(_entries) > CAPACITY:
            _entries.popitem(last=False)


def forget(key: Key) -> None:
    """Drop a table's state, and its log stores' knowledge (it may have been replaced)."""
    with _lock:
        _entries.pop(key, None)
    knowledge.forget(key[0])


def _anchor_holds(log_store: LogStore, anchor: Commit) -> bool:
    """Whether the commit at the anchor's version still holds exactly the anchor's actions:
    the same bytes where the anchor knows its bytes' digest (no decoding), else the same
    actions."""
    try:
        [(version, data)] = log_store.read_range(anchor.version, anchor.version)
        if anchor.digest:
            return hashlib.sha256(data).hexdigest() == anchor.digest
        return decode_commit(log_store, version, data).actions == anchor.actions
    except (DeltaCommitError, ValueError):
        return False


_PROOFS = ProcessPool(8, "deltacommit-proof")


class IdentityProof:
    """That the table at the location is still the one a cached snapshot describes: the
    commit at the anchor's version, read back, holds the anchor's bytes.

    Started at once, or (``deferred``) only when first asked for: a writer of a fleet
    (``engine.group.fleet``) reads the version after the anchor anyway, and where that commit
    names the anchor's SHA-256 as the one it was built on (``commit_info.PREVIOUS_COMMIT_KEY``,
    which a deltacommit writer writes only once it has proven its own snapshot), the anchor is
    proven without reading it (``vouched_by``)."""

    def __init__(self, log_store: LogStore, anchor: Commit, *, deferred: bool = False,
                 proven: bool = False) -> None:
        self.anchor = anchor
        self._check = partial(_anchor_holds, log_store, anchor)
        self._lock = ForkSafeLock()
        self._future: Future[bool] | None = None
        if proven:
            self._future = Future()
            self._future.set_result(True)
        elif not deferred:
            self.start()

    def start(self) -> None:
        """Read the anchor back on a thread of the process, unless under way already."""
        with self._lock:
            if self._future is None:
                self._future = _PROOFS.submit(self._check)

    def result(self) -> bool:
        """Whether the anchor holds (read back now if it was not yet)."""
        self.start()
        assert self._future is not None
        return self._future.result()

    def vouched_by(self, version: int, previous: str | None) -> bool:
        """Whether the commit at ``version``, read from the log and naming ``previous`` as the
        SHA-256 of the commit before it, proves the anchor: it is the version after it, and
        names the anchor's bytes (which the anchor knows)."""
        return version == self.anchor.version + 1 and bool(self.anchor.digest) \
            and previous == self.anchor.digest


def reuse(key: Key, log_store: LogStore, clock: Clock
          ) -> tuple[Snapshot, Commit, IdentityProof] | None:
    """The cached snapshot as it is, its anchor commit, and the proof of the table's identity
    (under way, or deferred for a table whose writers join the fleet); None when nothing is
    cached or the snapshot may predate a log cleanup.

    For a blind append (``dc.write(uri)`` without an app id): it needs no newer state than
    the commit loop finds by losing a race, so it skips the update and writes its data while
    the proof is read.  The caller must have the proof before committing (``TableLog``)."""
    if not enabled():
        return None
    with _lock:
        entry = _entries.get(key)
    if entry is None or may_predate_cleanup(entry.snapshot.table_config.log_retention_ms,
                                            entry.confirmed_at, clock.time()):
        return None
    if log_store.store.local_path("") is not None:
        # A local proof costs no request: read at once.
        if not _anchor_holds(log_store, entry.anchor):
            forget(key)
            return None
        proof = IdentityProof(log_store, entry.anchor, proven=True)
    else:
        # A remote one goes out at once, beside the writing of the data; on a fleet's table
        # only when asked for, since its writers usually prove it by the next version's
        # commit, which they read anyway.
        proof = IdentityProof(log_store, entry.anchor,
                              deferred=entry.snapshot.table_config.group_commit_fleet)
    return entry.snapshot.with_log_store(log_store), entry.anchor, proof


def reopen(key: Key, log_store: LogStore, clock: Clock
           ) -> tuple[Snapshot, list[Commit], Commit] | None:
    """The cached snapshot of the table brought up to date, the commits read doing so and the
    anchor commit at its version; None when nothing is cached or the table was replaced."""
    if not enabled():
        return None
    with _lock:
        entry = _entries.get(key)
    if entry is None:
        return None
    snap = entry.snapshot.with_log_store(log_store)
    # The proof and the update are independent reads: on a remote store they go out together,
    # so reopening costs one round trip more than a kept table object's update, not two.
    proof: Future[bool] | None = None
    if log_store.store.local_path("") is None:
        proof = _PROOFS.submit(partial(_anchor_holds, log_store, entry.anchor))
    elif not _anchor_holds(log_store, entry.anchor):
        forget(key)
        return None
    try:
        started = clock.time()
        updated, new = snap.updated(may_predate_cleanup(
            snap.table_config.log_retention_ms, entry.confirmed_at, started))
        # What a fresh load refuses (a feature or type this library cannot read, which a
        # commit of this process may have introduced) is refused by the fresh load.
        updated.check_readable()
        if type(log_store).latest_version_hint is not LogStore.latest_version_hint \
                and log_store.store.exists(commit_path(updated.version + 1)):
            # The mechanism's own record (DynamoDB) is behind the log: someone writes the
            # table another way.  A fresh load sees what they wrote and why.
            forget(key)
            return None
    except Exception as e:
        replaced = proof is not None and not proof.result()
        if not replaced and not isinstance(e, (DeltaCommitError, ValueError)):
            raise
        forget(key)  # missing, unreadable or replaced: load afresh
        return None
    if proof is not None and not proof.result():
        forget(key)  # replaced: what the update read belongs to another table
        return None
    anchor = new[-1] if new else entry.anchor
    if anchor.version != updated.version:
        forget(key)  # reloaded past a log cleanup: no anchor to prove the next reuse
        return None
    remember(key, updated, anchor, started)
    return updated, new, anchor
