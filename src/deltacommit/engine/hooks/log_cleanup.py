"""Log cleanup: deleting the log files a kept checkpoint makes unnecessary, never one still needed.

Follows PROTOCOL.md "Metadata Cleanup": the cut-off is midnight UTC of the day
``delta.logRetentionDuration`` (30 days) ago; the newest commit not newer than that is the
cut-off commit; the newest *usable* checkpoint not newer than that commit is kept together with
everything after it, and only files before it are deleted.  Without such a checkpoint nothing
is deleted.  The checkpoint is read and verified first, because deleting the log under a torn
checkpoint would lose the table.  Time comes from the caller's injectable clock.

Sidecar files of V2 checkpoints are deleted only when old and named by no remaining checkpoint.

Nothing outside the table is deleted: the log is listed for cleanup and deleted from through
``ObjectStore.list_contained``/``delete_contained``, which on a local file system never pass
through a symbolic link (a ``_delta_log/.tmp`` or ``_sidecars`` linked elsewhere is left
alone, and a warning says so).

Runs as a post-commit hook after each checkpoint (``checkpoint.after_commit``) and on request
(``maintenance.cleanup_log``); it takes the log store, the table's configuration and a clock,
so it sits below the table layer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deltacommit.engine.snapshot.checkpoint_reader import (
    read_last_checkpoint,
    referenced_sidecars,
    verify_checkpoint,
)
from deltacommit.engine.snapshot.snapshot import decode_commit
from deltacommit.errors import CorruptLogError, StorageError, UnsupportedProtocolError
from deltacommit.io.logstore import knowledge
from deltacommit.io.logstore.base import DYNAMODB_MARKER
from deltacommit.protocol.log.names import (
    LAST_CHECKPOINT,
    LOG_DIR,
    SIDECAR_DIR,
    LogFile,
    parse_log_name,
    sidecar_path,
)
from deltacommit.protocol.log.segment import checkpoint_candidates
from deltacommit.protocol.replay import TableState
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.runtime.clock import Clock, now_ms

if TYPE_CHECKING:
    from deltacommit.io.logstore.base import LogStore

# Messages keep the logger name they have always had.
logger = logging.getLogger("deltacommit.maintenance")

DAY_MS = 86_400_000


@dataclass
class _Young:
    """The oldest commit the last cleanup of a table listed (path, modification time in ms)
    when even that one was newer than the cut-off: the whole log was then too young to expire.

    Kept per table for the whole process (``logstore.knowledge``), not per log store object:
    ``dc.write(uri)`` opens a new one on every call, and would list the log after every
    checkpoint.  The HEAD in ``_still_young`` is what makes the record safe to share.
    """

    oldest: tuple[str, int] | None = None


def _young(log_store: LogStore) -> _Young:
    store = log_store.store
    endpoint = str(getattr(getattr(store, "config", None), "endpoint_url", None) or "")
    return knowledge.shared(log_store.table_uri,
                            ("log-cleanup", type(store).__qualname__, endpoint), _Young)


def cutoff_commit(files: list[LogFile], cutoff_ms: int) -> int | None:
    """The newest commit not newer than ``cutoff_ms``, or None.  Pure.

    Commit times are the files' modification times made monotonic (each at least 1 ms after the
    previous version's), as Spark does, so that one writer's skewed clock cannot make a newer
    commit look expired while an older one does not.
    """
    commits = sorted((f for f in files if f.kind == "commit"), key=lambda f: f.version)
    found: int | None = None
    prev = -1
    for f in commits:
        t = max(f.last_modified_ms or 0, prev + 1)
        prev = t
        if t > cutoff_ms:
            break
        found = f.version
    return found


def files_before_checkpoint(files: list[LogFile], checkpoint_version: int) -> list[LogFile]:
    """Log files made unnecessary by a checkpoint at ``checkpoint_version``.  Pure.

    Commits, checksums and checkpoints of older versions, and compaction files starting at or
    before it; oldest first, so that a cleanup interrupted half way leaves a log that is still
    whole from the checkpoint on.
    """
    out = [f for f in files
           if (f.kind in ("commit", "crc", "checkpoint", "checkpoint_part", "checkpoint_v2")
               and f.version < checkpoint_version)
           or (f.kind == "compacted" and f.version <= checkpoint_version)]
    out.sort(key=lambda f: (f.version, f.name))
    return out


def _expired_prefix(log_store: LogStore, cutoff_ms: int) -> list[LogFile]:
    """The log files listed before the first commit newer than the cut-off.

    Everything cleanup may delete or must inspect comes before that commit in name order, so
    the listing stops there: the hook runs this after every checkpoint, and a long log on S3
    would otherwise cost a full LIST each time.  A log found too young to expire at all is
    not listed again while its oldest commit is unchanged and newer than the cut-off
    (``_still_young``).
    """
    if _still_young(log_store, cutoff_ms):
        return []
    out: list[LogFile] = []
    prev = -1
    for meta in log_store.store.list_contained(f"{LOG_DIR}/"):
        name = meta.path[len(LOG_DIR) + 1:]
        if "/" in name:
            continue
        f = parse_log_name(name, meta.size, meta.last_modified_ms)
        if f is None:
            continue
        if f.kind == "commit":
            prev = max(f.last_modified_ms or 0, prev + 1)
            if prev > cutoff_ms:
                if not any(g.kind == "commit" for g in out):
                    _young(log_store).oldest = (meta.path, prev)
                break
        out.append(f)
    return out


def _still_young(log_store: LogStore, cutoff_ms: int) -> bool:
    """Whether the oldest commit of the last listing is still there, unchanged, and newer
    than ``cutoff_ms``: then no commit is old enough to expire (each later commit counts as
    newer than the one before it), and one HEAD replaces listing the whole log.  A commit
    rewritten or deleted since (a table replaced, files backdated) shows another modification
    time, or none, and the log is listed again."""
    known = _young(log_store).oldest
    if known is None or known[1] <= cutoff_ms:
        return False
    path, modified = known
    try:
        meta = log_store.store.head(path)
    except StorageError:
        return False
    return meta.last_modified_ms == modified


def cleanup_expired_log(log_store: LogStore, config: TableConfig, clock: Clock,
                        dry_run: bool = False) -> list[str]:
    """Delete expired log files (PROTOCOL.md "Metadata Cleanup"); returns their paths.

    Expired: older than ``delta.logRetentionDuration`` (from ``config``, the table's)
    and before the newest usable checkpoint that is not newer than the cut-off commit.  With
    ``dry_run`` nothing is deleted.
    """
    uri = log_store.table_uri
    retention = config.log_retention_ms
    cutoff = (now_ms(clock) - retention) // DAY_MS * DAY_MS
    files = _expired_prefix(log_store, cutoff)
    last_expired = cutoff_commit(files, cutoff)
    if last_expired is None:
        return []
    keep_from: int | None = None
    for cand in checkpoint_candidates(files, last_expired):
        if not files_before_checkpoint(files, cand.version):
            return []  # the newest usable checkpoint would have nothing before it to delete
        try:
            state = verify_checkpoint(log_store, cand)
            _check_against_log(log_store, files, cand.version, state)
        except (CorruptLogError, StorageError, UnsupportedProtocolError) as e:
            logger.warning("log cleanup of %s: checkpoint %s is unusable (%s); keeping the "
                           "commits before it and trying an older one", uri, cand.name, e)
            continue
        keep_from = cand.version
        break
    if keep_from is None:
        return []
    doomed = files_before_checkpoint(files, keep_from)
    kept_commit = next((f for f in files if f.kind == "commit" and f.version == keep_from), None)
    temps: list[str] = []
    if kept_commit is not None and kept_commit.last_modified_ms is not None:
        temps = _expired_temp_files(log_store, min(cutoff, kept_commit.last_modified_ms))
    sidecars = _unreferenced_sidecars(log_store, {f.name for f in doomed},
                                      min(cutoff, now_ms(clock) // DAY_MS * DAY_MS - DAY_MS))
    paths = [f.path for f in doomed] + temps + sidecars
    if dry_run:
        return paths
    store = log_store.store
    # The log files and temp files first, then the sidecars only they may have named; each a
    # batch (one DeleteObjects request per 1,000 objects on S3).
    store.delete_contained([f.path for f in doomed] + temps)
    store.delete_contained(sidecars)
    logger.info("log cleanup of %s deleted %d files before checkpoint %d, %d temporary files "
                "and %d unreferenced sidecars", uri, len(doomed), keep_from, len(temps),
                len(sidecars))
    return paths


def _is_sidecar_name(name: str) -> bool:
    """A Parquet file directly in ``_sidecars``; anything else there (a Hadoop ``.crc``
    checksum, a subdirectory) is not this cleanup's to judge."""
    return "/" not in name and name.endswith(".parquet") and not name.startswith(".")


def _unreferenced_sidecars(log_store: LogStore, doomed: set[str], before_ms: int) -> list[str]:
    """Sidecar files (``_delta_log/_sidecars``) written before ``before_ms`` that no checkpoint
    outside ``doomed`` (the names about to be deleted) and not ``_last_checkpoint`` names
    (PROTOCOL.md "Metadata Cleanup", steps 4 and 5).

    Only what is proven unreferenced is returned: the sidecars are listed before the
    checkpoints, so every checkpoint published before that listing is read; if any checkpoint
    cannot be read, nothing is.  ``before_ms`` is at most midnight UTC a day ago, so the
    sidecar of a checkpoint still being written (sidecars first, then the checkpoint naming
    them) is never taken for an orphan.
    """
    store = log_store.store
    prefix = f"{SIDECAR_DIR}/"
    old = [m.path for m in store.list_contained(prefix)
           if _is_sidecar_name(m.path[len(prefix):]) and m.last_modified_ms < before_ms]
    if not old:
        return []
    referenced: set[str] = set()
    try:
        for f in log_store.list_log(0):
            if f.kind.startswith("checkpoint") and f.name not in doomed:
                referenced |= referenced_sidecars(log_store, f)
        hint = read_last_checkpoint(log_store)
        if hint is not None and hint.v2 is not None:
            source = f"{log_store.table_uri}/{LAST_CHECKPOINT}"
            referenced |= {sidecar_path(r.path, source) for r in hint.v2.sidecar_files or ()}
    except (CorruptLogError, StorageError) as e:
        logger.warning("log cleanup of %s keeps every sidecar file: a checkpoint could not be "
                       "read to see which it names (%s)", log_store.table_uri, e)
        return []
    return [p for p in old if p not in referenced]


def _check_against_log(log_store: LogStore, files: list[LogFile], version: int,
                       state: TableState) -> None:
    """CorruptLogError unless the checkpoint at ``version`` holds what replaying the commits it
    replaces gives: the live files, protocol, metadata and application versions.

    The commits are the only other record of those versions; once cleanup deletes them, a
    checkpoint that silently lacks a file (and whose ``_last_checkpoint`` agrees with it) would
    lose that file for every reader.  The replay starts from version 0 when its commit is still
    there, else from the newest older checkpoint that verifies; without either nothing can be
    compared, and the reader's checks above are all that is applied.
    """
    commits = {f.version for f in files if f.kind == "commit"}
    base: TableState | None = None
    start = 0
    if 0 in commits:
        base = TableState()
    else:
        for older in checkpoint_candidates(files, version - 1):
            try:
                base = verify_checkpoint(log_store, older)
            except (CorruptLogError, StorageError, UnsupportedProtocolError):
                continue
            start = older.version + 1
            break
    if base is None or any(v not in commits for v in range(start, version + 1)):
        return
    source = f"{log_store.table_uri}/{LOG_DIR}"
    for v in range(start, version + 1):
        base.apply(v, decode_commit(log_store, v, log_store.read_commit(v)).actions, source)
    where = f"{source}: the checkpoint at version {version}"
    if set(base.files) != set(state.files):
        missing = sorted(set(base.files) - set(state.files))[:3]
        extra = sorted(set(state.files) - set(base.files))[:3]
        raise CorruptLogError(f"{where} does not hold the live files the commits before it give "
                              f"(missing {missing}, extra {extra})")
    if base.protocol != state.protocol or base.metadata != state.metadata:
        raise CorruptLogError(f"{where} holds another protocol or metaData than its commits")
    if {k: t.version for k, t in base.app_txns.items()} != {
            k: t.version for k, t in state.app_txns.items()}:
        raise CorruptLogError(f"{where} holds other application versions than its commits")


# Where commit protocols leave temporary files in the log: Spark's S3DynamoDBLogStore and ours
# (``.tmp/<N>.json.<uuid>``, kept after the copy), delta-rs (``_commit_<uuid>.json.tmp``) and the
# local store's residue of a crash between writing and linking.
_TEMP_PREFIXES = (f"{LOG_DIR}/.tmp/", f"{LOG_DIR}/_commit_", f"{LOG_DIR}/.dc-tmp-")


def _expired_temp_files(log_store: LogStore, before_ms: int) -> list[str]:
    """Temporary commit files written before ``before_ms``.

    ``before_ms`` is the earlier of the retention cut-off and the creation of the kept
    checkpoint's commit.  A temporary file is needed only to repair the newest, incomplete
    DynamoDB entry.  Spark's and deltacommit's writers make sure the previous version exists
    before writing their temporary file, so the temporary file of any entry that can still be
    incomplete is younger than the kept commit; delta-rs may reuse one temporary file across
    the attempts of a commit, which the retention cut-off covers (no commit attempt lasts the
    retention period).  Spark never deletes these files and asks for an S3 lifecycle rule
    instead; deleting them with the log they belong to needs no extra setup.
    """
    out: list[str] = []
    for prefix in _TEMP_PREFIXES:
        for meta in log_store.store.list_contained(prefix):
            if meta.last_modified_ms < before_ms and meta.path != DYNAMODB_MARKER:
                out.append(meta.path)
    return out
