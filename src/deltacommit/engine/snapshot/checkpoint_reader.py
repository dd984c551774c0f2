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
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltacommit.errors import (
    ChangedWhileReadError,
    CorruptLogError,
    NotARegularFileError,
    ObjectNotFoundError,
    StorageError,
)
from deltacommit.io.storage.local import open_for_reader
from deltacommit.protocol.checkpoint.decode import decode_checkpoint
from deltacommit.protocol.checkpoint.v2 import (
    json_checkpoint_table,
    sidecar_references,
    v2_sidecars,
)
from deltacommit.protocol.files.lazy_files import LazyActionMap
from deltacommit.protocol.log.last_checkpoint import LastCheckpoint
from deltacommit.protocol.log.names import LAST_CHECKPOINT, LOG_DIR, LogFile, sidecar_path
from deltacommit.protocol.log.segment import CheckpointCandidate, LogListing, LogSegment
from deltacommit.protocol.replay import TableState

if TYPE_CHECKING:
    from deltacommit.io.logstore.base import LogStore

# Warnings about unusable checkpoints keep the logger name they have always had.
logger = logging.getLogger("deltacommit.checkpoint")

#: The action columns read when a checkpoint is opened; ``add`` and ``remove`` (nearly all of
#: its bytes, and in a V2 checkpoint usually in its sidecars) are read only when the file list
#: is needed.
_SMALL_COLUMNS = ["protocol", "metaData", "txn", "domainMetadata", "checkpointMetadata", "sidecar"]


def read_last_checkpoint(log_store: LogStore) -> LastCheckpoint | None:
    """The ``_last_checkpoint`` hint, or None if absent or unusable (a warning says which)."""
    try:
        data = log_store.store.get(LAST_CHECKPOINT)
    except ObjectNotFoundError:
        return None
    except (NotARegularFileError, ChangedWhileReadError) as e:
        # A hint written over in place while read (by another writer, or an operator's
        # copy) is as unusable as one that does not parse, not a reason to fail the open.
        logger.warning("ignoring %s/%s: %s; listing the log instead", log_store.table_uri,
                       LAST_CHECKPOINT, e)
        return None
    try:
        return LastCheckpoint.from_bytes(data)
    except ValueError as e:
        logger.warning("ignoring %s/%s: %s; listing the log instead", log_store.table_uri,
                       LAST_CHECKPOINT, e)
        return None


class _CheckpointFile:
    """One open checkpoint or sidecar Parquet file: footer parsed up front, columns read on
    request.

    Local files stay open (a later read works even if cleanup unlinks the file meanwhile);
    remote ones are fetched once and kept as bytes.
    """

    def __init__(self, log_store: LogStore, path: str) -> None:
        store = log_store.store
        self.path = path
        self.source = f"{log_store.table_uri}/{path}"
        local = store.local_path(path)
        try:
            # A local checkpoint is opened as a regular file only: opening a FIFO would block
            # the reader, and a symbolic link may point out of the table.
            self.pf = pq.ParquetFile(open_for_reader(local, "get") if local is not None
                                     else pa.BufferReader(store.get(path)))
        except NotARegularFileError as e:
            raise CorruptLogError(f"{self.source}: the checkpoint is not read: {e.detail}"
                                  ) from None
        except (FileNotFoundError, ObjectNotFoundError):
            raise ObjectNotFoundError("get", self.source, "checkpoint disappeared") from None
        except (pa.ArrowException, OSError, ValueError) as e:
            raise CorruptLogError(f"{self.source}: not a readable Parquet checkpoint: {e}") from None
        self.names = set(self.pf.schema_arrow.names)

    @property
    def num_rows(self) -> int:
        return int(self.pf.metadata.num_rows)

    def _chunk_statistics(self, column_path: str) -> list[Any] | None:
        """The footer's statistics of a leaf column in each row group (an entry None where a
        chunk has none); None if some row group lacks the column."""
        md = self.pf.metadata
        out: list[Any] = []
        for rg in range(md.num_row_groups):
            group = md.row_group(rg)
            for j in range(group.num_columns):
                col = group.column(j)
                if col.path_in_schema == column_path:
                    out.append(col.statistics)
                    break
            else:
                return None
        return out

    def non_null(self, column_path: str) -> int | None:
        """Rows where a leaf column is set, from the footer's statistics (None if absent)."""
        chunks = self._chunk_statistics(column_path)
        if chunks is None:
            return None
        nulls = 0
        for stats in chunks:
            if stats is None or not getattr(stats, "has_null_count", False) \
                    or stats.null_count is None:
                return None
            nulls += stats.null_count
        return self.num_rows - nulls

    def read(self, columns: list[str]) -> pa.Table:
        # On one thread: nearly all of an action column's bytes are in one or two leaves
        # (paths, stats), so Arrow's pool adds coordination more than speed (the add column
        # of a 100,000-file checkpoint: 18 ms of CPU on one thread, 19-29 ms on the pool).
        try:
            return self.pf.read(columns=[c for c in columns if c.partition(".")[0] in self.names],
                                use_threads=False)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise CorruptLogError(f"{self.source}: not a readable Parquet checkpoint: {e}") from None

    def fingerprint(self) -> tuple[object, ...]:
        """What tells this file from another of the same name: its footer's shape and the size
        of every column chunk (a classic checkpoint rewritten by another writer, on a store
        without conditional writes, may hold the same state in another order)."""
        md = self.pf.metadata
        groups = [md.row_group(i) for i in range(md.num_row_groups)]
        return (md.num_rows, md.serialized_size,
                tuple(g.column(j).total_compressed_size for g in groups
                      for j in range(g.num_columns)))

    def add_fields(self) -> list[str]:
        """The fields of the ``add`` column (none if it has none)."""
        if "add" not in self.names:
            return []
        add = self.pf.schema_arrow.field("add").type
        return [add.field(i).name for i in range(add.num_fields)] if pa.types.is_struct(
            add) else []

    def stats_apart(self) -> bool:
        """Whether the ``add`` rows' ``stats_parsed`` may be read apart from them: every row has
        its JSON text too (the footer's counts say so), so reading the rows needs no struct."""
        fields = self.add_fields()
        if "stats_parsed" not in fields or "stats" not in fields:
            return False
        with_text, rows = self.non_null("add.stats"), self.non_null("add.path")
        return with_text is not None and with_text == rows

    def stats_struct_only(self) -> bool:
        """Whether the ``add`` rows hold their statistics only as ``stats_parsed``
        (``delta.checkpoint.writeStatsAsJson=false``): no row has a JSON text."""
        fields = self.add_fields()
        if "stats_parsed" not in fields:
            return False
        return "stats" not in fields or self.non_null("add.stats") == 0

    def texts_not_empty(self) -> bool:
        """Whether the footer shows no ``add`` row with an empty JSON text (a row whose text
        is empty has no statistics, whatever ``stats_parsed`` says): the smallest text of
        every row group is not empty."""
        chunks = self._chunk_statistics("add.stats")
        return chunks is not None and all(
            s is not None and s.has_min_max and s.min not in ("", b"") for s in chunks)

    def read_action(self, name: str, skip: tuple[str, ...] = ()) -> pa.Table:
        """Action column ``name``, without the ``add.partitionValues_parsed`` no reader here
        uses (partition values are read from their text, once per distinct value), nor the
        ``add`` fields ``skip`` names."""
        children = self.add_fields() if name == "add" else []
        dropped = {"partitionValues_parsed", *skip}
        if not dropped & set(children):
            return self.read([name])
        return self.read([f"add.{c}" for c in children if c not in dropped])

    def read_set(self, columns: list[str]) -> pa.Table:
        """The rows where any of ``columns`` is set, read a batch at a time.

        The small action columns are null in nearly every row of a checkpoint; read whole,
        their null rows alone take hundreds of MB for a million files.
        """
        names = [c for c in columns if c in self.names]
        if not names:
            return self.read(names)
        kept: list[pa.RecordBatch] = []
        try:
            for batch in self.pf.iter_batches(batch_size=_BATCH_ROWS, columns=names,
                                              use_threads=False):
                mask = batch.column(0).is_valid()
                for i in range(1, batch.num_columns):
                    mask = pc.or_(mask, batch.column(i).is_valid())
                if pc.any(mask).as_py():
                    kept.append(batch.filter(mask))
            schema = self.pf.schema_arrow
            return pa.Table.from_batches(
                kept, schema=pa.schema([schema.field(n) for n in names]))
        except (pa.ArrowException, OSError, ValueError) as e:
            raise CorruptLogError(f"{self.source}: not a readable Parquet checkpoint: {e}") from None


#: Rows per batch when reading the small action columns of a checkpoint.
_BATCH_ROWS = 65_536


class _JsonCheckpoint:
    """A UUID-named JSON checkpoint: small (its file actions are usually in sidecars), so it
    is read whole up front; the same interface as ``_CheckpointFile``."""

    def __init__(self, log_store: LogStore, path: str) -> None:
        self.source = f"{log_store.table_uri}/{path}"
        try:
            data = log_store.store.get(path)
        except ObjectNotFoundError:
            raise ObjectNotFoundError("get", self.source, "checkpoint disappeared") from None
        self.table = json_checkpoint_table(data, self.source)

    @property
    def num_rows(self) -> int:
        return int(self.table.num_rows)

    def non_null(self, column_path: str) -> int | None:
        column, _, leaf = column_path.partition(".")
        arr: Any = self.table.column(column).combine_chunks()
        return int(pc.sum(pc.and_(arr.is_valid(), arr.field(leaf).is_valid()).cast(pa.int64())
                          ).as_py() or 0)

    def read(self, columns: list[str]) -> pa.Table:
        return self.table.select([c for c in columns if c in self.table.column_names])

    def read_action(self, name: str, skip: tuple[str, ...] = ()) -> pa.Table:
        return self.read([name])

    def read_set(self, columns: list[str]) -> pa.Table:
        return self.read(columns)


def _concat(tables: list[pa.Table]) -> pa.Table:
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")


def read_checkpoint(log_store: LogStore, cand: CheckpointCandidate,
                    hint: LastCheckpoint | None = None) -> TableState:
    """The state a checkpoint holds, verified; CorruptLogError if it is torn or partial.

    Only the footers and the small action columns are read here; the ``add`` and ``remove``
    columns are read when the snapshot first needs its file list.  A torn file has no footer,
    so tearing is still caught here, before the checkpoint is used.  The sidecars a V2
    checkpoint references are opened here too (their footers), so a missing or torn sidecar
    makes the checkpoint unusable now rather than failing a later scan.
    """
    source = f"{log_store.table_uri}/{LOG_DIR}/{cand.name}"
    uuid_named = cand.kind == "checkpoint_v2"
    parts: list[_CheckpointFile | _JsonCheckpoint] = [
        _JsonCheckpoint(log_store, f.path) if f.is_json else _CheckpointFile(log_store, f.path)
        for f in cand.files]
    small = _concat([p.read_set(_SMALL_COLUMNS) for p in parts])
    refs = v2_sidecars(small, cand.version, source, uuid_named)
    sidecars = [_CheckpointFile(log_store, sidecar_path(r.path, source)) for r in refs]
    files = parts + sidecars
    if hint is not None and hint.describes(cand.version, cand.name):
        _check_against_hint(source, len(cand.files), hint, files)
    return _decode_on_demand(log_store, source, cand.version, small, files)


def _check_against_hint(source: str, num_parts: int, hint: LastCheckpoint,
                        files: list[_CheckpointFile | _JsonCheckpoint]) -> None:
    """CorruptLogError where the checkpoint (``files``: its parts and sidecars) has other parts,
    actions or add files than ``_last_checkpoint`` records for it: it is partial."""
    rows = sum(p.num_rows for p in files)
    if hint.parts is not None and hint.parts != num_parts and hint.parts > 1:
        raise CorruptLogError(f"{source}: _last_checkpoint says {hint.parts} parts, found "
                              f"{num_parts}")
    if hint.size and hint.parts in (None, 1, num_parts) and rows != hint.size:
        raise CorruptLogError(f"{source}: has {rows} actions but _last_checkpoint "
                              f"records {hint.size}; the checkpoint is partial")
    if hint.num_of_add_files is not None:
        counts = [p.non_null("add.path") if "add" in _names(p) else 0 for p in files]
        if all(c is not None for c in counts):
            adds = sum(c for c in counts if c is not None)
            if adds != hint.num_of_add_files:
                raise CorruptLogError(f"{source}: has {adds} add actions but "
                                      f"_last_checkpoint records {hint.num_of_add_files}")


def _decode_on_demand(log_store: LogStore, source: str, version: int, small: pa.Table,
                      files: list[_CheckpointFile | _JsonCheckpoint]) -> TableState:
    """``decode_checkpoint`` of the small action columns, with readers of the ``add`` and
    ``remove`` columns of ``files`` (the parts and sidecars) for when they are first needed."""
    # The typed statistics only get_add_actions uses are read when it asks for them, from the
    # files opened again (decoding them with every file list costs listing a partition a
    # third more); a file gone by then (log cleanup) only means parsing the JSON texts.
    with_add = [p for p in files if isinstance(p, _CheckpointFile) and "add" in p.names]
    parquet = all(isinstance(p, _CheckpointFile) for p in files) and bool(with_add)
    apart = parquet and all(p.stats_apart() for p in with_add)
    # Statistics only as stats_parsed: the rows read whole build every file's JSON text from
    # it, which the file list as a table does not need (it reads stats_parsed apart too).
    struct_only = parquet and not apart and all(p.stats_struct_only() for p in with_add)
    skip = ("stats_parsed",) if apart else ()

    def read_column(name: str) -> list[pa.Table]:
        return [p.read_action(name, skip) for p in files]

    opened = [(p.path, p.fingerprint()) for p in with_add] if apart or struct_only else []

    def read_stats_parsed() -> list[pa.Table] | None:
        tables = []
        try:
            for path, fingerprint in opened:
                again = _CheckpointFile(log_store, path)
                if again.fingerprint() != fingerprint:
                    logger.info("%s changed since it was read; parsing the JSON statistics "
                                "instead of its typed ones", again.source)
                    return None
                tables.append(again.read(["add.stats_parsed"]))
        except (CorruptLogError, StorageError) as e:
            logger.info("reading the typed statistics of %s again failed (%s); parsing the "
                        "JSON statistics instead", source, e)
            return None
        return tables

    # The file list as a table takes the statistics from stats_parsed: the rows it reads
    # need not carry the texts (most of the add column's bytes) while every row has one, nor
    # have them built from stats_parsed where no row has one.
    light = struct_only or (apart and all(p.texts_not_empty() for p in with_add))

    def read_light() -> list[pa.Table]:
        return [p.read_action("add", ("stats_parsed", "stats")) for p in files]

    def read_texts() -> list[pa.Table]:
        return [p.read(["add.path", "add.stats"]) for p in files]

    return decode_checkpoint(small, version, source, read_column,
                             read_stats_parsed=read_stats_parsed if apart or struct_only
                             else None,
                             read_light=read_light if light else None,
                             read_texts=read_texts if light and apart else None)


def _names(p: _CheckpointFile | _JsonCheckpoint) -> set[str]:
    return p.names if isinstance(p, _CheckpointFile) else set(p.table.column_names)


def referenced_sidecars(log_store: LogStore, f: LogFile) -> set[str]:
    """Store paths of the sidecars checkpoint file ``f`` names (its ``sidecar`` column only).

    Raises what reading raises (CorruptLogError, StorageError): a caller deciding what may be
    deleted must treat a checkpoint it cannot read as naming anything.
    """
    source = f"{log_store.table_uri}/{f.path}"
    p = _JsonCheckpoint(log_store, f.path) if f.is_json else _CheckpointFile(log_store, f.path)
    return {sidecar_path(ref, source) for ref in sidecar_references(p.read(["sidecar"]))}


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
                 hint: LastCheckpoint | None = None, unusable: dict[str, str] | None = None, *,
                 latest: bool = False) -> tuple[LogSegment, TableState | None]:
    """The segment of ``listing`` reaching ``target`` from the newest checkpoint that reads,
    with that checkpoint's state (None if no checkpoint is usable: the segment starts at 0).

    Unusable checkpoints are skipped with a warning (and their names added to ``unusable``
    with the reason, which callers pass again so that a retry does not read them twice, and
    which names them if the log cannot be replayed without them).  Among several
    checkpoints of one version the one ``hint`` describes is tried first.
    """
    skip = unusable if unusable is not None else {}
    prefer = hint.v2.path if hint is not None and hint.v2 is not None else None
    while True:
        segment = listing.segment(target, skip, latest=latest, prefer=prefer)
        cand = segment.checkpoint
        if cand is None:
            return segment, None
        try:
            return segment, read_checkpoint(log_store, cand, hint)
        except (CorruptLogError, StorageError) as e:
            skip[cand.name] = str(e)
            logger.warning("skipping checkpoint %s of %s, using an older one or the log: %s",
                           cand.name, log_store.table_uri, e)
