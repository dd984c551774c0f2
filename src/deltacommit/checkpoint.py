"""Checkpoints: the table state at a version, so loading need not replay the whole log.

Writing.  The writer that commits a version divisible by ``delta.checkpointInterval`` (default
10) then writes ``N.checkpoint.parquet``.  The Parquet bytes are built in memory and published
with the store's put-if-absent, which is atomic on every store: a reader sees the whole file or
none, and of several racing writers exactly one publishes while the others find it present and
leave it alone (all of them would have written the same state anyway).  ``_last_checkpoint`` is
only a hint, overwritten, and never moved back to an older version by this writer.  A failed
checkpoint is logged and skipped: it must never fail the commit that triggered it.

Reading.  Another writer's checkpoint may be torn (a crash during a plain PUT or copy), partial
(a multi-part set missing a part, fewer rows than ``_last_checkpoint`` says) or lack its protocol
or metadata.  Each such checkpoint is skipped, with a logged warning, in favour of an older one
or the log itself; what this module never does is return a state it could not verify.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from deltacommit.clock import Clock, now_ms
from deltacommit.errors import (
    CorruptLogError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
    UnsupportedProtocolError,
)
from deltacommit.log.checkpoint_format import decode_checkpoint, encode_checkpoint
from deltacommit.log.intervals import (
    DELETED_FILE_RETENTION,
    EXPIRED_LOG_CLEANUP,
    TXN_RETENTION,
    checkpoint_interval,
    duration_ms,
    flag,
    optional_duration_ms,
)
from deltacommit.log.lazy_files import LazyActionMap
from deltacommit.log.names import LAST_CHECKPOINT, LOG_DIR, LogFile, checkpoint_path
from deltacommit.log.replay import TableState

if TYPE_CHECKING:
    from deltacommit.logstore.base import LogStore
    from deltacommit.table import DeltaTable

logger = logging.getLogger(__name__)

#: The action columns read when a checkpoint is opened; ``add`` and ``remove`` (nearly all of
#: its bytes) are read only when the file list is needed.
_SMALL_COLUMNS = ["protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar"]


# --------------------------------------------------------------------------- _last_checkpoint


def _canonical_value(v: Any) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int | float):
        return json.dumps(v)
    return '"' + quote(str(v), safe="") + '"'


def _canonical_pairs(v: Any, path: str, out: list[tuple[str, str]]) -> None:
    if isinstance(v, dict):
        for k, x in v.items():
            _canonical_pairs(x, (path + "+" if path else "") + '"' + quote(str(k), safe="") + '"', out)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _canonical_pairs(x, (path + "+" if path else "") + str(i), out)
    else:
        out.append((path, _canonical_value(v)))


def last_checkpoint_checksum(obj: dict[str, Any]) -> str:
    """MD5 of the canonical form PROTOCOL.md defines ("JSON checksum"); ``checksum`` excluded."""
    pairs: list[tuple[str, str]] = []
    _canonical_pairs({k: v for k, v in obj.items() if k != "checksum"}, "", pairs)
    pairs.sort(key=lambda p: p[0].encode("utf-8"))
    text = ",".join(f"{p}={v}" for p, v in pairs)
    return hashlib.md5(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class LastCheckpoint:
    """The content of ``_delta_log/_last_checkpoint``."""

    version: int
    size: int
    parts: int | None = None
    size_in_bytes: int | None = None
    num_of_add_files: int | None = None

    @classmethod
    def from_bytes(cls, data: bytes) -> LastCheckpoint:
        try:
            obj = json.loads(data)
        except ValueError as e:
            raise ValueError(f"not JSON: {e}") from None
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")

        def opt_int(key: str) -> int | None:
            v = obj.get(key)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{key} must be a non-negative integer, got {v!r}")
            return v

        version = opt_int("version")
        if version is None:
            raise ValueError("lacks version")
        checksum = obj.get("checksum")
        if isinstance(checksum, str) and checksum != last_checkpoint_checksum(obj):
            raise ValueError("checksum does not match its content")
        return cls(version=version, size=opt_int("size") or 0, parts=opt_int("parts"),
                   size_in_bytes=opt_int("sizeInBytes"), num_of_add_files=opt_int("numOfAddFiles"))

    def to_bytes(self) -> bytes:
        obj: dict[str, Any] = {"version": self.version, "size": self.size}
        if self.parts is not None:
            obj["parts"] = self.parts
        if self.size_in_bytes is not None:
            obj["sizeInBytes"] = self.size_in_bytes
        if self.num_of_add_files is not None:
            obj["numOfAddFiles"] = self.num_of_add_files
        obj["checksum"] = last_checkpoint_checksum(obj)
        return json.dumps(obj, separators=(",", ":")).encode()


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


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True)
class CheckpointCandidate:
    """One checkpoint in the listing: a classic file, a complete multi-part set or a V2 file."""

    version: int
    kind: str
    files: tuple[LogFile, ...]

    @property
    def name(self) -> str:
        return self.files[0].name if len(self.files) == 1 else (
            f"{self.version:020d}.checkpoint.*.{len(self.files):010d}.parquet")


_KIND_ORDER = {"checkpoint": 0, "checkpoint_part": 1, "checkpoint_v2": 2}


def checkpoint_candidates(files: list[LogFile], target: int | None = None
                          ) -> list[CheckpointCandidate]:
    """Checkpoints at or before ``target``, newest first (classic before multi-part at one
    version); multi-part sets with a part missing are left out (a reader cannot use them)."""
    out: list[CheckpointCandidate] = []
    parts: dict[tuple[int, int], dict[int, LogFile]] = {}
    for f in files:
        if target is not None and f.version > target:
            continue
        if f.kind == "checkpoint" or f.kind == "checkpoint_v2":
            out.append(CheckpointCandidate(f.version, f.kind, (f,)))
        elif f.kind == "checkpoint_part" and f.parts and f.part:
            parts.setdefault((f.version, f.parts), {})[f.part] = f
    for (version, n), got in parts.items():
        if len(got) == n and all(i in got for i in range(1, n + 1)):
            out.append(CheckpointCandidate(version, "checkpoint_part",
                                           tuple(got[i] for i in range(1, n + 1))))
        else:
            logger.debug("multi-part checkpoint %d has %d of %d parts; not usable", version,
                         len(got), n)
    out.sort(key=lambda c: (-c.version, _KIND_ORDER[c.kind]))
    return out


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


def load_checkpoint_base(log_store: LogStore, files: list[LogFile], target: int,
                         hint: LastCheckpoint | None = None,
                         unusable: set[str] | None = None) -> TableState | None:
    """The state of the newest usable checkpoint at or before ``target``, or None.

    Unusable checkpoints are skipped with a warning (and their names added to ``unusable``,
    which callers pass again so that a retry does not read them twice); a checkpoint this
    library cannot read at all (V2) raises UnsupportedProtocolError rather than silently
    replaying around it.
    """
    skip = unusable if unusable is not None else set()
    for cand in checkpoint_candidates(files, target):
        if cand.name in skip:
            continue
        try:
            return read_checkpoint(log_store, cand, hint)
        except (CorruptLogError, StorageError) as e:
            skip.add(cand.name)
            logger.warning("skipping checkpoint %s of %s, using an older one or the log: %s",
                           cand.name, log_store.table_uri, e)
    return None


# --------------------------------------------------------------------------- writing


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


def create_checkpoint(table: DeltaTable) -> CheckpointInfo:
    """Checkpoint a table at the version of its snapshot (``DeltaTable.checkpoint``)."""
    from deltacommit.log.features import check_writable

    snap = table.snapshot
    check_writable(table.uri, snap.protocol, snap.metadata)
    return write_checkpoint(table.log_store, snap.state, table.clock)


def _state_at(table: DeltaTable, version: int) -> TableState:
    """The state exactly at ``version``: the table's snapshot, moved forward or reloaded."""
    from deltacommit.log.lazy_files import copy_state
    from deltacommit.snapshot import Snapshot

    snap = table.snapshot
    if snap.version == version:
        return snap.state
    if snap.version < version:
        state = copy_state(snap.state)
        source = f"{table.uri}/{LOG_DIR}"
        for v, data in table.log_store.read_range(snap.version + 1, version):
            from deltacommit.snapshot import decode_commit

            state.apply(v, decode_commit(table.log_store, v, data).actions, source)
        return state
    return Snapshot.load(table.log_store, version).state


def after_commit(table: DeltaTable, version: int) -> None:
    """Post-commit hook: checkpoint when the interval says so, then clean up expired log files.

    Runs in the committing writer after its commit is durable; every failure is logged and
    swallowed, because the commit has succeeded whatever happens here.
    """
    try:
        config = table.snapshot.configuration
        interval = checkpoint_interval(config)
        if version <= 0 or version % interval:
            return
        state = _state_at(table, version)
        write_checkpoint(table.log_store, state, table.clock)
    except Exception as e:
        logger.warning("checkpoint of %s at version %d failed (the commit itself succeeded): %s",
                       table.uri, version, e, exc_info=True)
        return
    if not flag(config, EXPIRED_LOG_CLEANUP, True):
        return
    try:
        from deltacommit.maintenance import cleanup_log

        cleanup_log(table)
    except Exception as e:
        logger.warning("log cleanup of %s after checkpoint %d failed: %s", table.uri, version, e,
                       exc_info=True)
