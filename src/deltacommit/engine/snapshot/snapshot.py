"""Snapshots: the state of a table at one version, loaded from the log; never changed once built.

Loading lists the log, lets ``log.segment`` choose the newest usable checkpoint and the commits
after it, reads that checkpoint (``checkpoint_reader``) and replays the commits
(``protocol.replay``).  Moving forward reads only the commits newer than a snapshot and makes a new
snapshot of them (``updated``); that is also what every commit retry does, so refreshing state
costs one request per new commit instead of a reload.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deltacommit.engine.snapshot.checkpoint_reader import read_last_checkpoint, read_segment
from deltacommit.errors import (
    CorruptLogError,
    MissingVersionError,
    ObjectNotFoundError,
    SchemaMismatchError,
    TableNotFoundError,
    UnsupportedProtocolError,
    UnsupportedTypeError,
)
from deltacommit.protocol.actions import Action, Add, CommitInfo, Metadata, Protocol, parse_commit
from deltacommit.protocol.checkpoint.encode import adds_to_arrow, live_add_chunks
from deltacommit.protocol.files.lazy_files import LazyActionMap
from deltacommit.protocol.log.names import LOG_DIR, LogFile, commit_name, commit_path, version_gaps
from deltacommit.protocol.log.segment import LogListing, format_versions
from deltacommit.protocol.replay import TableState, replay
from deltacommit.protocol.schema.arrow import schema_from_json
from deltacommit.protocol.schema.column_mapping import check_column_mapping
from deltacommit.protocol.schema.type_widening import check_type_changes
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.features import check_readable
from deltacommit.protocol.table_config.properties import COLUMN_MAPPING_MODE, ColumnMappingMode

if TYPE_CHECKING:
    import pyarrow as pa

    from deltacommit.io.logstore.base import LogStore
    from deltacommit.protocol.log.last_checkpoint import LastCheckpoint


logger = logging.getLogger(__name__)

def table_schema(table: str, metadata: Metadata) -> pa.Schema:
    """The Arrow schema of ``metadata.schemaString``; a type this library cannot hold is an
    unsupported protocol, anything else unparsable a corrupt log."""

    try:
        return schema_from_json(metadata.schema_string)
    except UnsupportedTypeError as e:
        raise UnsupportedProtocolError(f"table {table}: {e}") from None
    except SchemaMismatchError as e:
        raise CorruptLogError(f"table {table}: bad schemaString in metaData: {e}") from None


def check_schema(table: str, protocol: Protocol, metadata: Metadata,
                 schema: pa.Schema | None = None) -> None:
    """Refuse a protocol, feature, column type or column mapping this library cannot read,
    whether the metadata was read from the log or is about to be committed: every reader
    and writer applies the same rules to every ``metaData`` (``schema``, parsed from it, if
    the caller has it at hand)."""
    check_readable(table, protocol, metadata)
    if schema is None:
        schema = table_schema(table, metadata)  # parsing the schema is the check of its types
    if metadata.configuration.get(COLUMN_MAPPING_MODE):
        mode = TableConfig.of(metadata, table).column_mapping_mode
        if protocol.min_reader_version == 2 or "columnMapping" in (protocol.reader_features
                                                                     or ()):
            check_column_mapping(schema, mode, table)
        elif mode is not ColumnMappingMode.NONE:
            # The Delta kernels (deltalake) ignore the mode here and read files by logical
            # names; Spark's reader maps by physical names.  Either reading is another
            # engine's answer, so neither is taken.
            raise UnsupportedProtocolError(
                f"table {table}: {COLUMN_MAPPING_MODE} is {mode.value!r}, but its protocol "
                f"(reader version {protocol.min_reader_version}, reader features "
                f"{sorted(protocol.reader_features or ())}) does not support the "
                "columnMapping feature, so engines disagree on whether data files name "
                "columns by their physical names; deltacommit refuses to read or write it "
                "either way")
    if {"typeWidening", "typeWidening-preview"} & set(protocol.reader_features or ()):
        check_type_changes(schema, table)


def _what_is_missing(uri: str, listing: LogListing, hint: LastCheckpoint | None,
                     unusable: dict[str, str]) -> str:
    """What an operator needs to know when the log cannot be replayed: a checkpoint
    ``_last_checkpoint`` names that is gone (deleted under the table), and why each
    checkpoint passed over could not be read (truncated, a sidecar missing)."""
    out = ""
    if hint is not None and hint.version not in listing.checkpoints:
        out += (f"; {LOG_DIR}/_last_checkpoint names a checkpoint at version {hint.version}, "
                f"which is not in {uri}/{LOG_DIR}")
    for name, why in sorted(unusable.items()):
        out += f"; checkpoint {name} could not be read: {why}"
    return out


@dataclass(frozen=True, slots=True)
class Commit:
    """One version of the log, decoded."""

    version: int
    actions: list[Action]
    #: SHA-256 (hex) of the commit file's bytes, where they were at hand (read or written by
    #: this process): reading the file again proves it unchanged without decoding it.
    digest: str = field(default="", compare=False)

    @property
    def commit_info(self) -> CommitInfo | None:
        for a in self.actions:
            if isinstance(a, CommitInfo):
                return a
        return None


def decode_commit(log_store: LogStore, version: int, data: bytes) -> Commit:
    source = f"{log_store.table_uri}/{LOG_DIR}/{commit_name(version)}"
    return Commit(version, parse_commit(data, source), hashlib.sha256(data).hexdigest())


def _decoded(log_store: LogStore, pairs: Iterable[tuple[int, bytes]], out: list[Commit]
             ) -> Iterator[Commit]:
    """Decode commits as they are replayed (so a bad one is reported in version order),
    collecting them in ``out``."""
    for version, data in pairs:
        commit = decode_commit(log_store, version, data)
        out.append(commit)
        yield commit


class Snapshot:
    """A table's state at ``version``; immutable.

    Snapshots are shared between threads and handed to readers, so a scan on another thread
    never sees the file set change under it: moving forward (``updated``, ``advanced``,
    ``with_commit``) makes a new snapshot.  Its state is a copy that shares the checkpoint's
    rows, so a new snapshot costs the changes since the checkpoint, not the table.
    """

    __slots__ = ("_config", "_ict", "_log_store", "_schema", "_schema_source", "_state")

    def __init__(self, log_store: LogStore, state: TableState) -> None:
        """``state`` becomes this snapshot's: nothing may change it afterwards."""
        self._log_store = log_store
        self._state = state
        self._schema: pa.Schema | None = None
        self._schema_source: str | None = None
        self._ict: tuple[int | None] | None = None
        self._config: tuple[Metadata | None, TableConfig] | None = None

    @property
    def log_store(self) -> LogStore:
        return self._log_store

    @property
    def state(self) -> TableState:
        """The replayed state; read it, never change it (``advanced`` makes a new one)."""
        return self._state

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(cls, log_store: LogStore, version: int | None = None, *,
             read: list[Commit] | None = None) -> Snapshot:
        """The snapshot at ``version`` (the latest if None).

        ``_last_checkpoint`` names a recent checkpoint, so only the log files from there on are
        listed; if that checkpoint turns out to be unusable (or the hint is absent, stale or
        the version asked for is older), the whole log is listed and every checkpoint at or
        before the target is a candidate, newest first.

        ``read``, if given, receives the commit at the loaded version when the load decoded it
        (it follows the checkpoint), so that the caller need not read it again.
        """
        hint = read_last_checkpoint(log_store)
        unusable: dict[str, str] = {}
        if hint is not None and (version is None or version >= hint.version):
            snap = cls._load_listed(log_store, log_store.list_log(hint.version), version, hint,
                                    unusable, partial=True, read=read)
            if snap is not None:
                return snap
        snap = cls._load_listed(log_store, log_store.list_log(0), version, hint, unusable,
                                partial=False, read=read)
        assert snap is not None
        return snap

    @classmethod
    def _load_listed(cls, log_store: LogStore, files: list[LogFile], version: int | None,
                     hint: LastCheckpoint | None, unusable: dict[str, str],
                     partial: bool, read: list[Commit] | None = None) -> Snapshot | None:
        """Load from a listing; with ``partial`` (a listing that starts at the hinted checkpoint)
        return None instead of failing when that listing holds no usable checkpoint."""
        uri = log_store.table_uri
        listing = LogListing.of(files)
        if listing.stray:
            logger.warning("table %s: ignoring checkpoint(s) at version %s, newer than the "
                           "newest commit %d", uri, format_versions(listing.stray),
                           listing.commits[-1])
        try:
            target = listing.target(version, uri)
        except TableNotFoundError:
            if partial:
                return None
            raise
        segment, base = read_segment(log_store, listing, target, hint, unusable,
                                     latest=version is None)
        if base is None and partial:
            return None
        gaps = segment.gaps
        if gaps:
            # A directory listing taken while commits are being created is not a snapshot of
            # the directory: readdir(3) may return a new N+1.json and miss the N.json created
            # just before it.  One more listing from the first gap finds such a version; the
            # cost follows the files listed, never the width of a gap.
            segment = segment.with_found(
                found_after_listing(log_store, set(segment.commits), gaps, target))
        try:
            segment.check(uri)
        except MissingVersionError as e:
            raise MissingVersionError(f"{e}{_what_is_missing(uri, listing, hint, unusable)}"
                                      ) from None
        # ``segment.check`` has just refused any version missing from the listing (and the
        # probes after it): no second listing.
        pairs = (log_store.read_range(segment.start, target, listed=True)
                 if segment.start <= target else [])
        def decoded() -> Iterator[tuple[int, list[Action]]]:
            for v, data in pairs:
                commit = decode_commit(log_store, v, data)
                if v == target and read is not None:
                    read.append(commit)
                yield v, commit.actions

        state = replay(decoded(), base, cls._source_of(uri))
        state.validate(uri)
        snap = cls(log_store, state)
        snap.check_readable()
        return snap

    @staticmethod
    def _source_of(uri: str) -> Callable[[int], str]:
        """Names of commit files, for the errors replay raises."""
        return lambda version: f"{uri}/{LOG_DIR}/{commit_name(version)}"

    # ------------------------------------------------------------------ moving forward

    def advanced(self, commits: Iterable[Commit]) -> Snapshot:
        """A new snapshot: this one with ``commits`` (the versions right after it, ascending)
        applied.  ``self`` is left as it is."""
        state = replay(((c.version, c.actions) for c in commits), self._state,
                       self._source_of(self._log_store.table_uri))
        snap = Snapshot(self._log_store, state)
        # The schema is parsed once per schema string, not once per snapshot, and the
        # properties once per metaData.
        snap._schema, snap._schema_source = self._schema, self._schema_source
        snap._config = self._config
        return snap

    def with_log_store(self, log_store: LogStore) -> Snapshot:
        """This state read through another log store of the same table (a table object opened
        from the process's cached state reads further commits through its own store)."""
        snap = Snapshot(log_store, self._state)
        snap._schema, snap._schema_source = self._schema, self._schema_source
        snap._config = self._config
        return snap

    def with_commit(self, commit: Commit) -> Snapshot:
        """A new snapshot with a commit this process wrote (or already read) applied, without
        reading it again."""
        return self.advanced((commit,))

    def updated(self, may_predate_cleanup: bool = True) -> tuple[Snapshot, list[Commit]]:
        """A new snapshot with the commits newer than this one (``self`` if there are none).

        If log cleanup removed the commits right after this snapshot, it comes back reloaded
        from the newest checkpoint, with no commits (they are gone).  A caller that knows this
        snapshot was the newest version recently enough that no commit after it can have
        expired passes ``may_predate_cleanup=False`` and saves that check's request.
        """
        pairs = self._log_store.read_commits_after(self.version)
        if not pairs:
            if not may_predate_cleanup:
                return self, []
            reloaded = self._reload_past_cleanup()
            return (self, []) if reloaded is None else (reloaded, [])
        return self.advanced_by(pairs)

    def after_loss(self) -> tuple[Snapshot, list[Commit]]:
        """This snapshot with the next version, which a commit attempt has just found taken
        (``LogStore.read_after_loss``), and any newer ones read with it."""
        return self.advanced_by(self._log_store.read_after_loss(self.version + 1))

    def advanced_by(self, pairs: Sequence[tuple[int, bytes]]) -> tuple[Snapshot, list[Commit]]:
        """The commits read, decoded and applied; the result is checked readable, since a
        newer commit may have upgraded the protocol past what this library reads."""
        if not pairs:
            return self, []
        new: list[Commit] = []
        snap = self.advanced(_decoded(self._log_store, pairs, new))
        snap.check_readable()
        return snap, new

    def _reload_past_cleanup(self) -> Snapshot | None:
        """A fresh snapshot if the next commit is missing because cleanup deleted it.

        Incremental reads probe ``version + 1``; a miss normally means "nothing new", but after
        log cleanup it can mean "deleted", and the table may be far ahead.  A checkpoint newer
        than this snapshot proves the latter (version N exists, so every version before it
        once did), at the cost of reading the small ``_last_checkpoint`` when nothing is new.
        """
        hint = read_last_checkpoint(self._log_store)
        if hint is None or hint.version <= self.version:
            return None
        return Snapshot.load(self._log_store)

    def check_readable(self) -> None:
        """Refuse a protocol, feature or column type this library cannot read, up front."""
        assert self._state.protocol is not None
        protocol = self._state.protocol
        check_readable(self._log_store.table_uri, protocol, self._state.metadata)
        check_schema(self._log_store.table_uri, protocol, self.metadata, self.schema)

    # ------------------------------------------------------------------ accessors

    @property
    def version(self) -> int:
        return self._state.version

    @property
    def metadata(self) -> Metadata:
        assert self._state.metadata is not None
        return self._state.metadata

    @property
    def protocol(self) -> Protocol:
        assert self._state.protocol is not None
        return self._state.protocol

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns)

    @property
    def configuration(self) -> dict[str, str | None]:
        return dict(self.metadata.configuration)

    @property
    def table_config(self) -> TableConfig:
        """The table's properties, typed (``TableConfig``): built once per ``metaData`` and
        shared by the snapshots that follow it; empty before version 0."""
        metadata = self._state.metadata
        cached = self._config
        if cached is None or cached[0] is not metadata:
            cached = (metadata, TableConfig.of(metadata, self._log_store.table_uri))
            self._config = cached
        return cached[1]

    @property
    def schema(self) -> pa.Schema:
        """The table schema as Arrow, partition columns included (in schema order)."""
        s = self.metadata.schema_string
        if self._schema is None or self._schema_source != s:
            self._schema = table_schema(self._log_store.table_uri, self.metadata)
            self._schema_source = s
        return self._schema

    def files(self) -> list[Add]:
        return list(self._state.files.values())

    def iter_files(self) -> Iterator[Add]:
        return iter(self._state.files.values())

    def files_where(self, rows_mask: Callable[[pa.StructArray], Any],
                    keep: Callable[[Add], bool]) -> list[Add]:
        """The live files a filter accepts, in ``files()`` order: checkpoint rows judged as
        canonical ``add`` rows (``rows_mask``, a boolean per row), the files added since by
        ``keep``; an ``Add`` is built only for a checkpoint row accepted."""

        files = self._state.files
        if isinstance(files, LazyActionMap):
            return files.select(rows_mask, keep)
        return [a for a in files.values() if keep(a)]

    def add_rows(self) -> list[pa.StructArray]:
        """The live files as canonical ``add`` rows (``protocol.checkpoint.schema.ADD``), in chunks:
        the checkpoint's rows still kept, then the adds committed since.  No ``Add`` object is
        built for a checkpoint row."""

        files = self._state.files
        if isinstance(files, LazyActionMap):
            return files.arrow_chunks(adds_to_arrow)
        return [adds_to_arrow(list(files.values()))]

    def add_rows_parsed(self, *, texts: bool = True) -> list[tuple[pa.StructArray, Any]]:
        """``add_rows``, each chunk with the checkpoint's typed statistics of its rows
        (``add.stats_parsed``; None for the adds committed since, or if it has none).
        Without ``texts``, checkpoint rows may lack their JSON statistics (``ADD_LIGHT``)."""

        return live_add_chunks(self._state.files, texts=texts)

    def app_version(self, app_id: str) -> int | None:
        txn = self._state.app_txns.get(app_id)
        return None if txn is None else txn.version

    def domain_metadata(self, domain: str) -> str | None:
        """The configuration of metadata domain ``domain`` (None if the table has none)."""
        d = self._state.domains.get(domain)
        if d is None:
            return None
        c = d.get("configuration")
        return c if isinstance(c, str) else json.dumps(c, separators=(",", ":"))

    def domains(self) -> dict[str, str]:
        """Every metadata domain of the table and its configuration."""
        out: dict[str, str] = {}
        for name in self._state.domains:
            c = self.domain_metadata(name)
            if c is not None:
                out[name] = c
        return out

    def commit_file_time(self) -> int | None:
        """Modification time (ms) of this version's commit file; None if it is gone."""
        try:
            return self._log_store.store.head(commit_path(self.version)).last_modified_ms
        except ObjectNotFoundError:
            return None

    def in_commit_timestamp(self) -> int | None:
        """``inCommitTimestamp`` of this version's commit (None if it has none).

        A snapshot replayed up to its version knows it; one loaded from a checkpoint at its
        version reads the commit file (once: the snapshot never changes).
        """
        ict = self._state.in_commit_timestamp
        if ict is not None or self.version < 0:
            return ict
        if self._ict is None:
            try:
                data = self._log_store.read_commit(self.version)
            except ObjectNotFoundError:
                self._ict = (None,)
            else:
                info = decode_commit(self._log_store, self.version, data).commit_info
                self._ict = (None if info is None else info.in_commit_timestamp,)
        return self._ict[0]

    def commit_infos(self, limit: int | None = None) -> list[tuple[int, CommitInfo | None]]:
        """commitInfo of each version still in the log, newest first."""
        return [(v, info) for v, info, _ in self.commit_entries(limit)]

    def commit_entries(self, limit: int | None = None
                       ) -> list[tuple[int, CommitInfo | None, int | None]]:
        """``(version, commitInfo, file modification time)`` of each version still in the log,
        newest first."""
        files = sorted((f for f in self._log_store.list_log(0) if f.kind == "commit"
                        and f.version <= self.version), key=lambda f: f.version, reverse=True)
        if limit is not None:
            files = files[:limit]
        out: list[tuple[int, CommitInfo | None, int | None]] = []
        for f in files:
            try:
                data = self._log_store.read_commit(f.version)
            except ObjectNotFoundError:
                continue
            out.append((f.version, decode_commit(self._log_store, f.version, data).commit_info,
                        f.last_modified_ms))
        return out


# Missing versions few enough to ask for one by one when a second listing misses them too.
_PROBE_MISSING = 16


def found_after_listing(log_store: LogStore, commits: set[int], gaps: list[tuple[int, int]],
                         target: int) -> set[int]:
    """Commits a listing missed: one more listing from the first gap, then (only if the
    versions still missing are few) a HEAD each.  Bounded by the files listed plus
    ``_PROBE_MISSING``, whatever the version numbers."""
    found = {f.version for f in log_store.list_log(gaps[0][0])
             if f.kind == "commit" and f.version <= target}
    remaining = version_gaps(sorted(commits | found), gaps[0][0], target, limit=_PROBE_MISSING + 1)
    if sum(b - a + 1 for a, b in remaining) <= _PROBE_MISSING:
        found |= {v for a, b in remaining for v in range(a, b + 1)
                  if log_store.store.exists(commit_path(v))}
    return found
