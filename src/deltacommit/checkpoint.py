"""Writing checkpoints, and the post-commit hook that writes them and cleans up the log.

The writer that commits a version divisible by ``delta.checkpointInterval`` (default 10) then
writes ``N.checkpoint.parquet``.  The Parquet bytes are built in memory and published with the
store's put-if-absent, which is atomic on every store: a reader sees the whole file or none, and
of several racing writers exactly one publishes while the others find it present and leave it
alone (all of them would have written the same state anyway).  ``_last_checkpoint`` is only a
hint, overwritten, and never moved back to an older version by this writer.  A failed
checkpoint is logged and skipped: it must never fail the commit that triggered it.

Reading checkpoints is ``checkpoint_reader`` (the snapshot layer loads from them); the
``_last_checkpoint`` value and the choice among checkpoints are pure, in ``log.last_checkpoint``
and ``log.segment``.  Their names are importable from here too.  The hook takes the log store,
a snapshot and a clock, never a table object, so this module sits below ``table``.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from deltacommit.checkpoint_reader import read_checkpoint, read_last_checkpoint, verify_checkpoint
from deltacommit.clock import Clock, now_ms
from deltacommit.errors import ObjectExistsError
from deltacommit.log.checkpoint_format import encode_checkpoint
from deltacommit.log.intervals import (
    DELETED_FILE_RETENTION,
    EXPIRED_LOG_CLEANUP,
    TXN_RETENTION,
    checkpoint_interval,
    duration_ms,
    flag,
    optional_duration_ms,
)
from deltacommit.log.last_checkpoint import LastCheckpoint, last_checkpoint_checksum
from deltacommit.log.names import LAST_CHECKPOINT, checkpoint_path
from deltacommit.log.replay import TableState
from deltacommit.log.segment import CheckpointCandidate, checkpoint_candidates
from deltacommit.log_cleanup import cleanup_expired_log
from deltacommit.snapshot import Snapshot, decode_commit

if TYPE_CHECKING:
    from deltacommit.logstore.base import LogStore

__all__ = [
    "CheckpointCandidate",
    "CheckpointInfo",
    "LastCheckpoint",
    "after_commit",
    "checkpoint_bytes",
    "checkpoint_candidates",
    "last_checkpoint_checksum",
    "read_checkpoint",
    "read_last_checkpoint",
    "verify_checkpoint",
    "write_checkpoint",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """What ``write_checkpoint`` did.

    ``created`` is False if the checkpoint was already there; its action counts are then
    unknown (-1) without reading it.
    """

    version: int
    path: str
    num_actions: int
    num_add_files: int
    size_in_bytes: int
    created: bool

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "path": self.path, "num_actions": self.num_actions,
                "num_add_files": self.num_add_files, "size_in_bytes": self.size_in_bytes,
                "created": self.created}


def checkpoint_bytes(state: TableState, now: int, table: str) -> tuple[bytes, int, int]:
    """Parquet bytes of the checkpoint of ``state`` with tombstones expired as of ``now`` (ms);
    returns (bytes, number of actions, number of add actions)."""
    assert state.metadata is not None
    config = state.metadata.configuration
    tombstone_cutoff = now - duration_ms(config, DELETED_FILE_RETENTION, table)
    txn_retention = optional_duration_ms(config, TXN_RETENTION, table)
    encoded = encode_checkpoint(state, tombstone_cutoff,
                                None if txn_retention is None else now - txn_retention)
    sink = io.BytesIO()
    pq.write_table(encoded.table, sink, compression="snappy")
    return sink.getvalue(), encoded.table.num_rows, encoded.num_add_files


def write_checkpoint(log_store: LogStore, state: TableState, clock: Clock) -> CheckpointInfo:
    """Publish the checkpoint of ``state`` (its version must already be committed).

    If the checkpoint exists, it is left as it is: it was published atomically by a writer
    that replayed the same log, so it holds the same state.  No existence check comes first:
    the writer of version N is normally the only one checkpointing it, so the put-if-absent
    alone settles the rare race for two requests fewer per checkpoint.
    """
    uri = log_store.table_uri
    version = state.version
    path = checkpoint_path(version)
    store = log_store.store
    data, rows, adds = checkpoint_bytes(state, now_ms(clock), uri)
    if store.supports_conditional_put:
        try:
            store.put_if_absent(path, data)
            published = True
        except ObjectExistsError:
            published = False
    else:
        # An S3-compatible store without conditional writes (the reason a table uses the
        # DynamoDB protocol at all): check, then a plain put, as Spark does.  Two writers racing
        # here write the same state, and a PUT replaces an object whole, so a reader never
        # sees a mixture.
        published = not store.exists(path)
        if published:
            store.put(path, data)
    if not published:
        # Lost the race: the winner's file stands, and the winner records it in
        # _last_checkpoint (our row count could differ from its by tombstones that expired
        # in between, so we must not describe its file).
        return CheckpointInfo(version, f"{uri}/{path}", -1, -1, len(data), created=False)
    # Only the writer that published the checkpoint describes it.  Writers of two different
    # checkpoints finishing out of order can move the hint back; that costs readers a longer
    # listing (they find newer checkpoints themselves), never a wrong state, so the hint is not
    # read first to prevent it.
    store.put(LAST_CHECKPOINT, LastCheckpoint(version, rows, None, len(data), adds).to_bytes())
    return CheckpointInfo(version, f"{uri}/{path}", rows, adds, len(data), created=True)


def _state_at(log_store: LogStore, snapshot: Snapshot, version: int) -> TableState:
    """The state exactly at ``version``: ``snapshot``'s, moved forward or reloaded."""
    if snapshot.version == version:
        return snapshot.state
    if snapshot.version < version:
        return snapshot.advanced(
            decode_commit(log_store, v, data)
            for v, data in log_store.read_range(snapshot.version + 1, version)).state
    return Snapshot.load(log_store, version).state


def after_commit(log_store: LogStore, snapshot: Snapshot, clock: Clock, version: int) -> None:
    """Post-commit hook: checkpoint when the interval says so, then clean up expired log files.

    ``snapshot`` is the committing table's, ideally exactly at ``version`` (else the state at
    ``version`` is read); its configuration sets the interval and the retention.  Runs in the
    committing writer after its commit is durable; every failure is logged and swallowed,
    because the commit has succeeded whatever happens here.
    """
    uri = log_store.table_uri
    try:
        config = snapshot.configuration
        interval = checkpoint_interval(config)
        if version <= 0 or version % interval:
            return
        state = _state_at(log_store, snapshot, version)
        write_checkpoint(log_store, state, clock)
    except Exception as e:
        logger.warning("checkpoint of %s at version %d failed (the commit itself succeeded): %s",
                       uri, version, e, exc_info=True)
        return
    if not flag(config, EXPIRED_LOG_CLEANUP, True):
        return
    try:
        cleanup_expired_log(log_store, config, clock)
    except Exception as e:
        logger.warning("log cleanup of %s after checkpoint %d failed: %s", uri, version, e,
                       exc_info=True)
