"""Reading checkpoints: the state a checkpoint holds, verified, and the segment a snapshot starts from.

Another writer's checkpoint may be torn (a crash during a plain PUT or copy), partial (a
multi-part set missing a part, fewer rows than ``_last_checkpoint`` says) or lack its protocol
or metadata.  Each such checkpoint is skipped, with a logged warning, in favour of an older one
or the log itself; what this module never does is return a state it could not verify.

Which checkpoint and commits a snapshot uses is chosen by ``log.segment`` (pure); this module
does the reading that choice depends on.  Writing checkpoints is in ``checkpoint``, above the
snapshot layer that this module serves.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from deltacommit.errors import (
    CorruptLogError,
    ObjectNotFoundError,
    StorageError,
    UnsupportedProtocolError,
)
from deltacommit.log.checkpoint_format import decode_checkpoint
from deltacommit.log.last_checkpoint import LastCheckpoint
from deltacommit.log.lazy_files import LazyActionMap
from deltacommit.log.names import LAST_CHECKPOINT, LOG_DIR, LogFile
from deltacommit.log.replay import TableState
from deltacommit.log.segment import CheckpointCandidate, LogListing, LogSegment

if TYPE_CHECKING:
    from deltacommit.logstore.base import LogStore

# Warnings about unusable checkpoints keep the logger name they have always had.
logger = logging.getLogger("deltacommit.checkpoint")

#: The action columns read when a checkpoint is opened; ``add`` and ``remove`` (nearly all of
#: its bytes) are read only when the file list is needed.
_SMALL_COLUMNS = ["protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar"]


def read_last_checkpoint(log_store: LogStore) -> LastCheckpoint | None:
    """The ``_last_checkpoint`` hint, or None if absent or unusable (a warning says which)."""
    try:
        data = log_store.store.get(LAST_CHECKPOINT)
    except ObjectNotFoundError:
        return None
    try:
        return LastCheckpoint.from_bytes(data)
    except ValueError as e:
        logger.warning("ignoring %s/%s: %s; listing the log instead", log_store.table_uri,
                       LAST_CHECKPOINT, e)
        return None


class _CheckpointFile:
    """One open checkpoint Parquet file: footer parsed up front, columns read on request.

    Local files stay open (a later read works even if cleanup unlinks the file meanwhile);
    remote ones are fetched once and kept as bytes.
    """

    def __init__(self, log_store: LogStore, f: LogFile) -> None:
        store = log_store.store
        self.source = f"{log_store.table_uri}/{f.path}"
        local = store.local_path(f.path)
        try:
            self.pf = pq.ParquetFile(local if local is not None
                                     else pa.BufferReader(store.get(f.path)))
        except FileNotFoundError:
            raise ObjectNotFoundError("get", self.source, "checkpoint disappeared") from None
        except (pa.ArrowException, OSError, ValueError) as e:
            raise CorruptLogError(f"{self.source}: not a readable Parquet checkpoint: {e}") from None
        self.names = set(self.pf.schema_arrow.names)

    @property
    def num_rows(self) -> int:
        return int(self.pf.metadata.num_rows)

    def non_null(self, column_path: str) -> int | None:
        """Rows where a leaf column is set, from the footer's statistics (None if absent)."""
        md = self.pf.metadata
        nulls = 0
        for rg in range(md.num_row_groups):
            group = md.row_group(rg)
            for j in range(group.num_columns):
                col = group.column(j)
                if col.path_in_schema == column_path:
                    stats = col.statistics
                    if stats is None or not getattr(stats, "has_null_count", False):
                        return None
                    count = stats.null_count
                    if count is None:
                        return None
                    nulls += count
                    break
            else:
                return None
        return self.num_rows - nulls

    def read(self, columns: list[str]) -> pa.Table:
        try:
            return self.pf.read(columns=[c for c in columns if c in self.names])
        except (pa.ArrowException, OSError, ValueError) as e:
            raise CorruptLogError(f"{self.source}: not a readable Parquet checkpoint: {e}") from None


def _concat(tables: list[pa.Table]) -> pa.Table:
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")


def read_checkpoint(log_store: LogStore, cand: CheckpointCandidate,
                    hint: LastCheckpoint | None = None) -> TableState:
    """The state a checkpoint holds, verified; CorruptLogError if it is torn or partial.

    Only the footers and the small action columns are read here; the ``add`` and ``remove``
    columns are read when the snapshot first needs its file list.  A torn file has no footer,
    so tearing is still caught here, before the checkpoint is used.
    """
    source = f"{log_store.table_uri}/{LOG_DIR}/{cand.name}"
    if cand.kind == "checkpoint_v2":
        raise UnsupportedProtocolError(
            f"{source} is a V2 (UUID-named) checkpoint; this table uses the v2Checkpoint feature, "
            "which deltacommit does not support")
    parts = [_CheckpointFile(log_store, f) for f in cand.files]
    rows = sum(p.num_rows for p in parts)
    if hint is not None and hint.version == cand.version:
        if hint.parts is not None and hint.parts != len(cand.files) and hint.parts > 1:
            raise CorruptLogError(f"{source}: _last_checkpoint says {hint.parts} parts, found "
                                  f"{len(cand.files)}")
        if hint.size and hint.parts in (None, 1, len(cand.files)) and rows != hint.size:
            raise CorruptLogError(f"{source}: has {rows} actions but _last_checkpoint "
                                  f"records {hint.size}; the checkpoint is partial")
        if hint.num_of_add_files is not None:
            counts = [p.non_null("add.path") for p in parts]
            if all(c is not None for c in counts):
                adds = sum(c for c in counts if c is not None)
                if adds != hint.num_of_add_files:
                    raise CorruptLogError(f"{source}: has {adds} add actions but "
                                          f"_last_checkpoint records {hint.num_of_add_files}")
    small = _concat([p.read(_SMALL_COLUMNS) for p in parts])

    def read_column(name: str) -> pa.Table:
        return _concat([p.read([name]) for p in parts])

    return decode_checkpoint(small, cand.version, source, read_column)


def verify_checkpoint(log_store: LogStore, cand: CheckpointCandidate,
                      hint: LastCheckpoint | None = None) -> TableState:
    """``read_checkpoint`` that also reads every row now, for callers about to delete the log
    the checkpoint replaces: after that, a checkpoint that only looked whole is no use.

    Applies the reader's own checks, ``_last_checkpoint`` included (``hint``; read here when
    not given), so nothing a reader would reject is ever relied on by a deletion.
    """
    state = read_checkpoint(log_store, cand, hint if hint is not None
                            else read_last_checkpoint(log_store))
    for m in (state.files, state.tombstones):
        if isinstance(m, LazyActionMap):
            m.read_rows()
    return state


def read_segment(log_store: LogStore, listing: LogListing, target: int,
                 hint: LastCheckpoint | None = None, unusable: set[str] | None = None, *,
                 latest: bool = False) -> tuple[LogSegment, TableState | None]:
    """The segment of ``listing`` reaching ``target`` from the newest checkpoint that reads,
    with that checkpoint's state (None if no checkpoint is usable: the segment starts at 0).

    Unusable checkpoints are skipped with a warning (and their names added to ``unusable``,
    which callers pass again so that a retry does not read them twice); a checkpoint this
    library cannot read at all (V2) raises UnsupportedProtocolError rather than silently
    replaying around it.
    """
    skip = unusable if unusable is not None else set()
    while True:
        segment = listing.segment(target, skip, latest=latest)
        cand = segment.checkpoint
        if cand is None:
            return segment, None
        try:
            return segment, read_checkpoint(log_store, cand, hint)
        except (CorruptLogError, StorageError) as e:
            skip.add(cand.name)
            logger.warning("skipping checkpoint %s of %s, using an older one or the log: %s",
                           cand.name, log_store.table_uri, e)
