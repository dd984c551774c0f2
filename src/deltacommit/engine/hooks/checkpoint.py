"""Writing checkpoints, and the post-commit hook that writes them and cleans up the log.

The writer that commits a version divisible by ``delta.checkpointInterval`` (default 10) then
writes ``N.checkpoint.parquet``, or a UUID-named ``N.checkpoint.<uuid>.parquet`` on tables with
``delta.checkpointPolicy=v2``.  The Parquet bytes are built in memory and published with the
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
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltacommit.engine.hooks.log_cleanup import cleanup_expired_log
from deltacommit.engine.snapshot.checkpoint_reader import (
    read_checkpoint,
    read_last_checkpoint,
    verify_checkpoint,
)
from deltacommit.engine.snapshot.snapshot import Snapshot, decode_commit
from deltacommit.errors import ObjectExistsError
from deltacommit.protocol.checkpoint.encode import (
    CheckpointOptions,
    EncodedCheckpoint,
    encode_checkpoint,
)
from deltacommit.protocol.checkpoint.v2 import split_file_actions, with_sidecars
from deltacommit.protocol.log.last_checkpoint import (
    LastCheckpoint,
    SidecarRef,
    V2CheckpointInfo,
    last_checkpoint_checksum,
)
from deltacommit.protocol.log.names import (
    LAST_CHECKPOINT,
    LOG_DIR,
    SIDECAR_DIR,
    checkpoint_path,
    v2_checkpoint_name,
)
from deltacommit.protocol.log.segment import CheckpointCandidate, checkpoint_candidates
from deltacommit.protocol.replay import TableState
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.runtime.clock import Clock, now_ms

if TYPE_CHECKING:
    from deltacommit.io.logstore.base import LogStore
    from deltacommit.io.storage.base import ObjectStore

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


def _parquet(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="snappy")
    return sink.getvalue()


def _encoded(state: TableState, now: int, table: str) -> EncodedCheckpoint:
    assert state.metadata is not None and state.protocol is not None
    config = TableConfig.of(state.metadata, table)
    tombstone_cutoff = now - config.deleted_file_retention_ms
    txn_retention = config.set_transaction_retention_ms
    return encode_checkpoint(state, tombstone_cutoff,
                             None if txn_retention is None else now - txn_retention,
                             CheckpointOptions.of(state.protocol, config))


def checkpoint_bytes(state: TableState, now: int, table: str) -> tuple[bytes, int, int]:
    """Parquet bytes of the checkpoint of ``state`` with tombstones expired as of ``now`` (ms);
    returns (bytes, number of actions, number of add actions)."""
    encoded = _encoded(state, now, table)
    return _parquet(encoded.table), encoded.table.num_rows, encoded.num_add_files


#: A V2 checkpoint moves its add and remove actions to a sidecar file from this many on, so
#: that the checkpoint a reader opens first stays small; below it one file is cheaper.
SIDECAR_MIN_FILE_ACTIONS = 50_000


def write_checkpoint(log_store: LogStore, state: TableState, clock: Clock, *,
                     sidecar_min_file_actions: int = SIDECAR_MIN_FILE_ACTIONS) -> CheckpointInfo:
    """Publish the checkpoint of ``state`` (its version must already be committed).

    A table with ``delta.checkpointPolicy=v2`` (and the ``v2Checkpoint`` feature) gets a
    UUID-named V2 checkpoint (see ``_write_v2``); every other table a classic one.  If the
    classic checkpoint exists, it is left as it is: it was published atomically by a writer
    that replayed the same log, so it holds the same state.  No existence check comes first:
    the writer of version N is normally the only one checkpointing it, so the put-if-absent
    alone settles the rare race for two requests fewer per checkpoint.
    """
    uri = log_store.table_uri
    version = state.version
    now = now_ms(clock)
    encoded = _encoded(state, now, uri)
    if encoded.files is not None:
        # The same files, now backed by the rows just encoded: the writer's next copies of
        # this state and its next checkpoint cost the commits since, not the whole table.
        # Readers of the state see either map, and both hold the same actions.
        state.files = encoded.files
    if "checkpointMetadata" in encoded.table.column_names:
        return _write_v2(log_store, encoded, version, now, sidecar_min_file_actions)
    path = checkpoint_path(version)
    store = log_store.store
    data = _parquet(encoded.table)
    rows, adds = encoded.table.num_rows, encoded.num_add_files
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


def _write_v2(log_store: LogStore, encoded: EncodedCheckpoint, version: int, now: int,
              sidecar_min_file_actions: int) -> CheckpointInfo:
    """Publish a UUID-named V2 Parquet checkpoint, its add and remove actions in one sidecar
    when there are many.

    The sidecar is written first: a checkpoint must never name a file that is not there yet.
    The UUID makes every name unique, so racing writers each publish their own complete
    checkpoint and readers may use either (PROTOCOL.md allows several per version); a crash
    between the two leaves only an unreferenced sidecar, which log cleanup deletes once old.
    ``_last_checkpoint`` names the checkpoint and its sidecar so that readers prefer it.
    """
    uri = log_store.table_uri
    store = log_store.store
    table = encoded.table
    name = v2_checkpoint_name(version, str(uuid.uuid4()))
    file_rows = table.num_rows - int(pc.sum(pc.and_(
        table.column("add").is_null(), table.column("remove").is_null()).cast(pa.int64())
    ).as_py() or 0)
    sidecars: list[SidecarRef] = []
    sidecar_bytes = 0
    rows = table.num_rows
    if file_rows and file_rows >= sidecar_min_file_actions:
        table, side = split_file_actions(table)
        sidecar_name = f"{version:020d}.checkpoint.{uuid.uuid4()}.parquet"
        side_data = _parquet(side)
        _put_new(store, f"{SIDECAR_DIR}/{sidecar_name}", side_data)
        ref = SidecarRef(sidecar_name, len(side_data), now)
        table = with_sidecars(table, [ref])
        sidecars.append(ref)
        sidecar_bytes = len(side_data)
        rows = table.num_rows + side.num_rows
    data = _parquet(table)
    path = f"{LOG_DIR}/{name}"
    _put_new(store, path, data)
    total = len(data) + sidecar_bytes
    info = V2CheckpointInfo(name, len(data), now, tuple(sidecars))
    store.put(LAST_CHECKPOINT, LastCheckpoint(version, rows, None, total, encoded.num_add_files,
                                              info).to_bytes())
    return CheckpointInfo(version, f"{uri}/{path}", rows, encoded.num_add_files, total,
                          created=True)


def _put_new(store: ObjectStore, path: str, data: bytes) -> None:
    """Write a file under a fresh UUID name: created atomically where the store can, else a
    plain PUT (an object replaced whole; nobody else writes that name)."""
    if store.supports_conditional_put:
        store.put_if_absent(path, data)
    else:
        store.put(path, data)


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
        config = snapshot.table_config
        interval = config.checkpoint_interval
        if version <= 0 or version % interval:
            return
        state = _state_at(log_store, snapshot, version)
        write_checkpoint(log_store, state, clock)
    except Exception as e:
        logger.warning("checkpoint of %s at version %d failed (the commit itself succeeded): %s",
                       uri, version, e, exc_info=True)
        return
    if not config.enable_expired_log_cleanup:
        return
    try:
        cleanup_expired_log(log_store, config, clock)
    except Exception as e:
        logger.warning("log cleanup of %s after checkpoint %d failed: %s", uri, version, e,
                       exc_info=True)
