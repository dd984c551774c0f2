"""Log cleanup, checkpoints and VACUUM of a table object: bounding what a table keeps without
losing what anyone may still need.

``cleanup_log`` and ``create_checkpoint`` apply ``log_cleanup`` and ``checkpoint`` (which take a
log store, a snapshot or configuration and a clock) to a ``DeltaTable``.

``vacuum`` deletes data files that the latest snapshot does not reference and that are older
than ``delta.deletedFileRetentionDuration`` (a week).  Like log cleanup it is conservative:
nothing is deleted unless a rule of the protocol says it is no longer needed, and time comes
from the table's injectable clock.  Tombstones younger than the retention protect their files
too (a reader of a slightly older snapshot may still open them), and the age test on every file
protects data that a writer has written but not yet committed.  ``_delta_log`` and every hidden
path (``_``/``.``-prefixed, except partition directories of ``_``-prefixed columns) are never
touched.

Whatever the retention, a file no version names (a writer's, not yet committed) is kept until
it is an hour old (``staged_files``: writers commit within the window that makes this safe),
unless the caller says no writer is running (``protect_uncommitted=False``).  Each path the
log names keeps every key a reader could take it to name (``log.paths.vacuum_keys``: data
files and deletion vectors alike, decoded once, not at all or twice).  The table's folder is
listed and deleted from without passing through a symbolic link (``list_contained``): a
partition folder or file linked from elsewhere is neither followed nor unlinked.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from deltacommit.engine.group.fleet import records
from deltacommit.engine.group.fleet.policy import FleetPolicy
from deltacommit.engine.hooks.checkpoint import CheckpointInfo, write_checkpoint
from deltacommit.engine.hooks.log_cleanup import (
    DAY_MS,
    cleanup_expired_log,
    cutoff_commit,
    files_before_checkpoint,
)
from deltacommit.errors import CorruptLogError, InvalidArgumentError
from deltacommit.io.storage.base import DELETE_BATCH, ObjectMeta, ObjectStore
from deltacommit.protocol.commit_window import UNCOMMITTED_FLOOR_MS, untracked_deletable
from deltacommit.protocol.fleet.record import FLEET_DIR
from deltacommit.protocol.log.names import LOG_DIR
from deltacommit.protocol.log.paths import (
    deletion_vector_path,
    is_plain_relative,
    normalise_segments,
    parse_location,
    vacuum_keys,
)
from deltacommit.protocol.table_config.features import check_writable
from deltacommit.protocol.table_config.properties import DELETED_FILE_RETENTION
from deltacommit.runtime.clock import now_ms
from deltacommit.runtime.threads import CallThreads

if TYPE_CHECKING:
    from deltacommit.engine.commit.table_log import TableLog
    from deltacommit.engine.snapshot.snapshot import Snapshot
    from deltacommit.protocol.actions import Remove

__all__ = ["DAY_MS", "cleanup_log", "create_checkpoint", "cutoff_commit",
           "files_before_checkpoint", "is_hidden", "live_relative_paths", "vacuum"]

logger = logging.getLogger(__name__)

# A retention longer than a million years keeps everything anyway; bounding it keeps the
# millisecond arithmetic in range.
_MAX_RETENTION_HOURS = 24 * 365 * 1_000_000.0


def cleanup_log(log: TableLog, dry_run: bool = False) -> list[str]:
    """Delete the table's expired log files (``log_cleanup``); returns their paths."""
    return cleanup_expired_log(log.log_store, log.snapshot.table_config, log.clock, dry_run)


def create_checkpoint(log: TableLog) -> CheckpointInfo:
    """Checkpoint a table at the version of its snapshot (``DeltaTable.checkpoint``), once
    that version's commit is read back: a checkpoint stands for its version, so one written
    at a version rolled back since the object read it would bring the version back for
    every reader (``TableLog.recheck_newest`` refuses, and the object reads the table
    afresh)."""
    log.recheck_newest()
    snap = log.snapshot
    check_writable(log.uri, snap.protocol, snap.metadata)
    return write_checkpoint(log.log_store, snap.state, log.clock)


# --------------------------------------------------------------------------- vacuum


def is_hidden(path: str, partition_columns: list[str]) -> bool:
    """Whether a path is outside what VACUUM may touch (Delta's hidden-file rule).  Pure."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if part.startswith("."):
            return True
        if part.startswith("_"):
            is_dir = i < len(parts) - 1
            if not (is_dir and any(part.startswith(c + "=") for c in partition_columns)):
                return True
    return False


def live_relative_paths(uri: str, paths: Iterable[tuple[str, dict[str, object] | None]]
                        ) -> set[str]:
    """The store keys, inside the table, of every data file and deletion-vector file that
    ``paths`` (log path, deletion vector descriptor) reference: by the one path rule, and by
    every other reading a peer could make of the same spelling (``vacuum_keys``).

    A path that cannot be resolved makes the whole set unknowable, so it raises: a vacuum that
    guessed would delete a live file.
    """
    root = parse_location(uri)
    out: set[str] = set()
    for path, dv in paths:
        try:
            dv_path = deletion_vector_path(dv, table=uri) if dv else None
        except CorruptLogError as e:
            raise CorruptLogError(
                f"vacuum of {uri}: cannot tell which file the deletion vector {dv!r} of "
                f"{path!r} names ({e}); nothing was deleted") from None
        for p in (path, dv_path):
            if p is None:
                continue
            try:
                out |= vacuum_keys(root, p, table=uri)
            except CorruptLogError as e:
                raise CorruptLogError(
                    f"vacuum of {uri}: cannot tell which file the log path {p!r} names ({e}); "
                    "nothing was deleted") from None
    return out


def _tombstoned(uri: str, tombstones: Iterable[Remove]) -> set[str]:
    """The keys of the files ``tombstones`` name; one whose path cannot be resolved names
    none (its file then counts as one no version named, which is kept longer)."""
    out: set[str] = set()
    for r in tombstones:
        try:
            out |= live_relative_paths(uri, [(r.path, r.deletion_vector)])
        except CorruptLogError:
            continue
    return out


def _listed_key(path: str) -> str:
    """A listed store key in canonical form: keys are literal (never percent-decoded), so
    only empty and dot segments are folded."""
    return normalise_segments("/" + path).lstrip("/")


def vacuum(log: TableLog, retention_hours: float | None = None, dry_run: bool = True,
           enforce_retention_duration: bool = True, protect_uncommitted: bool = True
           ) -> list[str]:
    """Data files no longer referenced and older than the retention; deleted unless ``dry_run``.

    ``retention_hours`` defaults to ``delta.deletedFileRetentionDuration`` (one week); a shorter
    one is refused while ``enforce_retention_duration`` is on, because it can delete files a
    reader of a recent snapshot, or a writer about to commit, still needs.  Files no version
    names are kept until an hour old whatever the retention (a writer may be about to commit
    them) unless ``protect_uncommitted`` is off.  Files a transaction published for the
    fleet's group commit adds (``engine.group.fleet``) are kept, whatever the retention and
    ``protect_uncommitted``, while any writer may still land it.
    """
    uri = log.uri
    if log.pinned:
        raise InvalidArgumentError(
            f"table {uri} was opened at version {log.version}; vacuum works on the latest "
            "version, so open the table without a version")
    # The clock before the snapshot: a commit landing after this read is in the snapshot or
    # names files younger than the floor (``staged_files``).
    started = now_ms(log.clock)
    # The object's newest version read back before the refresh, which only reads what follows
    # it: rolled back, the files it removed would be taken for unreferenced ones though the
    # version rolled back to names them (``TableLog.recheck_newest`` refuses).
    log.recheck_newest()
    log.refresh()
    snap = log.snapshot
    check_writable(uri, snap.protocol, snap.metadata)
    cutoff = started - _retention_ms(uri, snap.table_config.deleted_file_retention_ms,
                                     retention_hours, enforce_retention_duration)
    doomed = _unreferenced_files(log, snap, cutoff, started, protect_uncommitted)
    if dry_run or not doomed:
        return doomed
    _delete_files(log.log_store.store, doomed)
    logger.info("vacuum of %s deleted %d files", uri, len(doomed))
    return doomed


def _retention_ms(uri: str, table_ms: int,
                  retention_hours: float | None, enforce_retention_duration: bool) -> int:
    """The retention asked for, or the table's; InvalidArgumentError for one out of range or,
    while ``enforce_retention_duration`` is on, shorter than the table's."""
    if retention_hours is None:
        return table_ms
    if (isinstance(retention_hours, bool) or not isinstance(retention_hours, int | float)
            or not math.isfinite(retention_hours) or retention_hours < 0
            or retention_hours > _MAX_RETENTION_HOURS):
        raise InvalidArgumentError(
            f"vacuum of {uri}: retention_hours must be a finite number of hours from 0 to "
            f"{_MAX_RETENTION_HOURS:.0f}, got {retention_hours!r}")
    retention_ms = int(retention_hours * 3_600_000)
    if enforce_retention_duration and retention_ms < table_ms:
        raise InvalidArgumentError(
            f"vacuum of {uri}: a retention of {retention_hours} hours is shorter than the "
            f"table's {DELETED_FILE_RETENTION} ({table_ms / 3_600_000:g} hours); files that "
            "readers of recent versions or writers about to commit still need could be "
            "deleted. Pass enforce_retention_duration=False (CLI: --no-enforce-retention) "
            "if no such reader or writer exists")
    return retention_ms


def _unreferenced_files(log: TableLog, snap: Snapshot, cutoff: int, started: int,
                        protect_uncommitted: bool) -> list[str]:
    """The data files, sorted, that ``snap`` does not reference (nor a tombstone younger than
    ``cutoff``), last modified before ``cutoff``; with ``protect_uncommitted``, of those no
    version names, only the ones old enough that no writer can be about to commit them."""
    uri = log.uri
    referenced: list[tuple[str, dict[str, object] | None]] = [
        (a.path, a.deletion_vector) for a in snap.iter_files()]
    tombstones = list(snap.state.tombstones.values())
    referenced += [(r.path, r.deletion_vector) for r in tombstones
                   if r.deletion_timestamp is None or r.deletion_timestamp > cutoff]
    valid = live_relative_paths(uri, referenced)
    pcols = snap.partition_columns
    store = log.log_store.store
    doomed: list[str] = []
    recent: list[str] = []
    published: list[ObjectMeta] = []
    for meta in store.list_contained(""):
        path = meta.path
        if path.startswith(FLEET_DIR + "/"):
            published.append(meta)
            continue
        # The fleet's published transactions (``engine.group.fleet``) are hidden anyway;
        # named too, so no partition column's name can ever make them data files.
        if path.startswith((LOG_DIR + "/", FLEET_DIR + "/")) or is_hidden(path, pcols):
            continue
        if path in valid or meta.last_modified_ms >= cutoff:
            continue
        if not is_plain_relative(path) and _listed_key(path) in valid:
            # A key spelled with empty or dot segments ("a//b", "./b") that the log names in
            # its canonical form: when in doubt, keep it.
            continue
        if protect_uncommitted and not untracked_deletable(meta.last_modified_ms, started):
            recent.append(path)  # kept unless a version named it (below)
            continue
        doomed.append(path)
    if published:
        # Files of the fleet's published transactions (``engine.group.fleet``), which another
        # writer may commit at any moment: kept while any writer may still land them, however
        # old (an owner may have written them long before it published).
        margin = int(FleetPolicy().expiry_margin_seconds * 1000)
        pending = live_relative_paths(uri, records.published_files(
            store, published, snap.version, started, margin))
        doomed = [p for p in doomed if p not in pending]
        recent = [p for p in recent if p not in pending]
    young = 0
    if recent:
        # Files some version named (removed since): no writer is about to commit them.
        tracked = _tombstoned(uri, tombstones)
        doomed += [p for p in recent if p in tracked]
        young = len(recent) - sum(1 for p in recent if p in tracked)
    if young:
        logger.info("vacuum of %s keeps %d files no version names that are younger than %d "
                    "minutes: a writer may be about to commit them (protect_uncommitted=False "
                    "deletes them when no writer is running)", uri, young,
                    UNCOMMITTED_FLOOR_MS // 60_000)
    doomed.sort()
    return doomed


def _delete_files(store: ObjectStore, doomed: list[str]) -> None:
    # Up to 1,000 objects per request on S3 (DeleteObjects), several requests at once.
    batches = [doomed[i:i + DELETE_BATCH] for i in range(0, len(doomed), DELETE_BATCH)]
    if len(batches) == 1 or store.local_path("") is not None:
        store.delete_contained(doomed)
    else:
        with CallThreads(max_workers=min(16, len(batches))) as pool:
            list(pool.map(store.delete_contained, batches))
