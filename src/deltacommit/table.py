"""``DeltaTable``: open, create, read and transact on one Delta table.

A table object caches the newest snapshot it has seen and the commits it recently read or
wrote.  Transactions (possibly on several threads) share that cache, so a commit retry reads
each missed commit once per process, not once per transaction.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from deltacommit.clock import DEFAULT_RANDOM, SYSTEM_CLOCK, Clock, RandomSource
from deltacommit.conflicts import IsolationLevel
from deltacommit.datafiles import open_data_file
from deltacommit.errors import (
    CorruptLogError,
    InvalidArgumentError,
    ObjectNotFoundError,
    StorageError,
    TableExistsError,
    TableNotFoundError,
    VersionExistsError,
)
from deltacommit.log.actions import Action, Add, CommitInfo, Metadata, Protocol, serialize_commit
from deltacommit.log.features import DEFAULT_PROTOCOL
from deltacommit.log.paths import locate_data_file, parse_location
from deltacommit.log.replay import TableState
from deltacommit.logstore import open_log_store
from deltacommit.logstore.base import LogStore
from deltacommit.snapshot import Commit, Snapshot, decode_commit
from deltacommit.transaction import ENGINE_INFO, CommitPolicy, CommitResult, Transaction

if TYPE_CHECKING:
    from deltacommit.checkpoint import CheckpointInfo
    from deltacommit.coalesce import GroupCommitPolicy, GroupCommitter

# How many recent commits a table object keeps for conflict checks of its transactions.
_RECENT_COMMITS = 256


class DeltaTable:
    """A Delta table at a location; ``version`` pins a historical snapshot (read-only).

    ``group_commit=True`` (or a ``GroupCommitPolicy``) lets transactions that threads of this
    process commit through this object at the same time share one version (``coalesce.py``).
    """

    def __init__(self, table_uri: str, version: int | None = None,
                 storage_options: Mapping[str, str] | None = None, *,
                 log_store: LogStore | None = None, clock: Clock | None = None,
                 random: RandomSource | None = None, policy: CommitPolicy | None = None,
                 group_commit: bool | GroupCommitPolicy = False,
                 allow_external_paths: bool = False,
                 _snapshot: Snapshot | None = None) -> None:
        self.storage_options = dict(storage_options or {})
        #: Whether reads may open data files outside the table location (shallow clones).
        self.allow_external_paths = allow_external_paths
        self.log_store = log_store or open_log_store(table_uri, self.storage_options)
        self.clock = clock or SYSTEM_CLOCK
        self.random = random or DEFAULT_RANDOM
        self.policy = policy or CommitPolicy()
        self._lock = threading.RLock()
        self._recent: OrderedDict[int, Commit] = OrderedDict()
        self._pinned = version is not None
        # When this object last knew its snapshot to be the newest version (wall clock): a
        # snapshot much older than the log's retention may predate a cleanup (see
        # ``_refresh_if_stale``).
        self._confirmed_at = self.clock.time()
        self._snapshot = _snapshot or Snapshot.load(self.log_store, version)
        self._group_committer: GroupCommitter | None = None
        self._foreign: tuple[str | None] | None = None
        if group_commit is not False:
            from deltacommit.coalesce import GroupCommitPolicy, GroupCommitter

            if self._pinned:
                raise InvalidArgumentError(
                    f"table {self.uri} was opened at version {self.version} and is read-only; "
                    "group_commit needs a table that follows new commits")
            if group_commit is True:
                group_commit = GroupCommitPolicy()
            if not isinstance(group_commit, GroupCommitPolicy):
                raise InvalidArgumentError(
                    f"group_commit for table {self.uri} must be a bool or a GroupCommitPolicy, "
                    f"got {group_commit!r}")
            self._group_committer = GroupCommitter(self, group_commit)

    def __repr__(self) -> str:
        return f"DeltaTable({self.uri!r}, version={self.version})"

    # ------------------------------------------------------------------ creation

    @classmethod
    def create(cls, table_uri: str, schema: pa.Schema, partition_by: Sequence[str] | None = None,
               configuration: Mapping[str, str] | None = None,
               storage_options: Mapping[str, str] | None = None, *, name: str | None = None,
               description: str | None = None, log_store: LogStore | None = None,
               clock: Clock | None = None, random: RandomSource | None = None,
               policy: CommitPolicy | None = None,
               group_commit: bool | GroupCommitPolicy = False) -> DeltaTable:
        """Create version 0; TableExistsError if any writer already created the table."""
        from deltacommit.partitions import check_partition_columns
        from deltacommit.schema import schema_to_json

        options = dict(storage_options or {})
        ls = log_store or open_log_store(table_uri, options)
        clock = clock or SYSTEM_CLOCK
        random = random or DEFAULT_RANDOM
        uri = ls.table_uri
        if not isinstance(schema, pa.Schema):
            raise InvalidArgumentError(f"schema for new table {uri} must be a pyarrow.Schema, "
                                       f"got {type(schema).__name__}")
        pcols = list(partition_by or [])
        check_column_names(schema, uri)
        check_partition_columns(schema, pcols, uri)
        _check_configuration(configuration or {}, uri)
        existing = ls.list_log(0)
        if existing:
            raise TableExistsError(
                f"a Delta table already exists at {uri} ({len(existing)} log files, newest "
                f"version {max(f.version for f in existing)}); open it with DeltaTable({uri!r})")
        config: dict[str, str | None] = dict(configuration or {})
        # Protocol requests, not properties: Delta applies them and does not store them.
        wanted_reader = config.pop("delta.minReaderVersion", None)
        wanted_writer = config.pop("delta.minWriterVersion", None)
        config.update(ls.coordination_config())
        protocol = initial_protocol(schema, config, wanted_reader, wanted_writer, uri)
        now = int(clock.time() * 1000)
        metadata = Metadata(
            id=str(uuid.UUID(random.uuid())), schema_string=schema_to_json(schema),
            partition_columns=pcols, configuration=config, name=name, description=description,
            created_time=now)
        info = CommitInfo({
            "timestamp": now,
            "operation": "CREATE TABLE",
            "operationParameters": {
                "isManaged": "false", "description": description or "",
                "partitionBy": _json_list(pcols), "properties": _json_map(config)},
            "isolationLevel": IsolationLevel.SERIALIZABLE.value,
            "isBlindAppend": True,
            "operationMetrics": {},
            "engineInfo": ENGINE_INFO,
            "txnId": random.uuid(),
        })
        actions: list[Action] = [info, protocol, metadata]
        try:
            ls.write_commit(0, serialize_commit(actions))
        except VersionExistsError:
            raise TableExistsError(
                f"a Delta table was created at {uri} concurrently; open it instead") from None
        state = TableState()
        state.apply(0, actions)
        snap = Snapshot(ls, state)
        return cls(uri, storage_options=options, log_store=ls, clock=clock, random=random,
                   policy=policy, group_commit=group_commit, _snapshot=snap)

    # ------------------------------------------------------------------ state

    @property
    def uri(self) -> str:
        return self.log_store.table_uri

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def version(self) -> int:
        return self._snapshot.version

    @property
    def schema(self) -> pa.Schema:
        return self._snapshot.schema

    @property
    def partition_columns(self) -> list[str]:
        return self._snapshot.partition_columns

    @property
    def configuration(self) -> dict[str, str | None]:
        return self._snapshot.configuration

    @property
    def metadata(self) -> Metadata:
        return self._snapshot.metadata

    @property
    def protocol(self) -> Protocol:
        return self._snapshot.protocol

    def app_version(self, app_id: str) -> int | None:
        """The newest committed version of an application transaction id."""
        return self._snapshot.app_version(app_id)

    @property
    def group_committer(self) -> GroupCommitter | None:
        """The committer that merges this object's concurrent transactions, if enabled."""
        return self._group_committer

    def update(self) -> int:
        """Move to the newest version, reading only the commits after the cached one."""
        if self._pinned:
            raise InvalidArgumentError(
                f"table {self.uri} was opened at version {self.version}; open it without a "
                "version to follow new commits")
        return self._refresh()

    def _commits_after(self, version: int) -> list[Commit]:
        """Commits newer than ``version``, from the cache or the log; advances the snapshot.

        The lock is held while reading so that threads sharing this table read each new commit
        once between them.  If log cleanup deleted commits this object never read, the snapshot
        is reloaded from the newest checkpoint, and asking for those commits raises
        MissingVersionError (they can no longer be checked for conflicts).
        """
        latest = self._refresh()
        if latest <= version:
            return []
        return self._known_commits(version + 1, latest)

    def _refresh(self) -> int:
        """Adopt the newest snapshot (incrementally, or reloaded past a log cleanup)."""
        with self._lock:
            started = self.clock.time()
            snap, new = self._snapshot.updated(self._may_predate_cleanup())
            self._snapshot = snap
            self._confirmed_at = started
            for c in new:
                self._remember(c)
            return snap.version

    def _may_predate_cleanup(self) -> bool:
        """Whether log cleanup may have deleted commits made after this object's snapshot.

        A commit made after this object last saw its snapshot as the newest version cannot
        have expired while that moment is younger than ``delta.logRetentionDuration`` (less a
        day for the cut-off's rounding to midnight and an hour for clock skew).
        """
        from deltacommit.log.intervals import LOG_RETENTION, duration_ms

        retention = duration_ms(self._snapshot.configuration, LOG_RETENTION, self.uri) / 1000
        return self.clock.time() - self._confirmed_at > retention - 86_400 - 3_600

    def _refresh_if_stale(self) -> None:
        """Catch up before committing if this object's snapshot may predate a log cleanup.

        A commit is attempted at ``version + 1`` of the snapshot.  If cleanup has deleted that
        commit, a put-if-absent there would succeed and create a file no reader ever looks at:
        a silently lost commit.  Only a snapshot older than the retention costs a refresh.
        """
        if self._may_predate_cleanup():
            self._refresh()

    def _cached_commits(self, first: int, last: int) -> list[Commit]:
        """Versions ``first..last`` if this object still holds them all, else none."""
        with self._lock:
            wanted = range(first, last + 1)
            if all(v in self._recent for v in wanted):
                return [self._recent[v] for v in wanted]
            return []

    def _known_commits(self, first: int, last: int) -> list[Commit]:
        """Versions ``first..last``, known to exist: from the cache, else read (no probing)."""
        with self._lock:
            wanted = range(first, last + 1)
            if all(v in self._recent for v in wanted):
                return [self._recent[v] for v in wanted]
        return [decode_commit(self.log_store, v, d)
                for v, d in self.log_store.read_range(first, last)]

    def _remember(self, commit: Commit) -> None:
        self._recent[commit.version] = commit
        while len(self._recent) > _RECENT_COMMITS:
            self._recent.popitem(last=False)

    def _committed(self, commit: Commit) -> None:
        """Fold this process's own commit into the cache without reading it back."""
        with self._lock:
            self._remember(commit)
            snap = self._snapshot
            if commit.version == snap.version + 1:
                new_snap = snap.copy()
                new_snap.apply_commit(commit)
                self._snapshot = new_snap
                self._confirmed_at = self.clock.time()

    def _post_commit(self, commit: Commit, snapshot: Snapshot | None = None) -> None:
        """Checkpoint and clean up after ``commit``.  ``snapshot`` is the state exactly at its
        version, for a caller that lets further commits proceed meanwhile (group commit): the
        hook then reads that state instead of reloading the table at the version."""
        from deltacommit.checkpoint import after_commit

        table = self
        if snapshot is not None and snapshot.version == commit.version \
                and snapshot is not self._snapshot:
            table = DeltaTable(self.uri, log_store=self.log_store, clock=self.clock,
                               random=self.random, policy=self.policy, _snapshot=snapshot)
        after_commit(table, commit.version)

    # ------------------------------------------------------------------ maintenance

    def _foreign_coordination(self) -> str | None:
        """``coordination.dynamodb_fleet_sign``, asked once per table object (it costs a LIST)."""
        if self._foreign is None:
            from deltacommit.coordination import dynamodb_fleet_sign

            self._foreign = (dynamodb_fleet_sign(self.log_store.store, self.log_store.mechanism),)
        return self._foreign[0]

    def checkpoint(self) -> CheckpointInfo:
        """Write a checkpoint at this snapshot's version (left alone if one exists)."""
        from deltacommit.checkpoint import create_checkpoint

        return create_checkpoint(self)

    def cleanup_log(self, dry_run: bool = False) -> list[str]:
        """Delete log files past ``delta.logRetentionDuration`` that no kept checkpoint needs."""
        from deltacommit.maintenance import cleanup_log

        return cleanup_log(self, dry_run=dry_run)

    def vacuum(self, retention_hours: float | None = None, dry_run: bool = True,
               enforce_retention_duration: bool = True) -> list[str]:
        """Unreferenced data files older than the retention (deleted unless ``dry_run``)."""
        from deltacommit.maintenance import vacuum

        return vacuum(self, retention_hours, dry_run, enforce_retention_duration)

    # ------------------------------------------------------------------ files and data

    def _select_files(self, snap: Snapshot, predicate: Any) -> list[Add]:
        from deltacommit.predicates import TRUE

        if predicate is TRUE or not snap.partition_columns:
            return snap.files()
        schema = snap.schema
        types = {c: schema.field(c).type for c in snap.partition_columns}
        return [a for a in snap.iter_files() if predicate.evaluate(a.partition_values, types)]

    def files(self, partition_filters: Sequence[Any] | None = None,
              predicate: str | None = None) -> list[Add]:
        """The add actions of the snapshot, optionally filtered by partition values."""
        from deltacommit.predicates import TRUE, from_partition_filters, parse_predicate

        if predicate is not None:
            pred = parse_predicate(predicate)
        elif partition_filters:
            pred = from_partition_filters(partition_filters)
        else:
            pred = TRUE
        pred.check_columns(self.partition_columns, self.uri)
        return self._select_files(self._snapshot, pred)

    def file_uris(self, partition_filters: Sequence[Any] | None = None) -> list[str]:
        """The full location of each data file, as the one path rule resolves it."""
        root = parse_location(self.uri)
        out: list[str] = []
        for a in self.files(partition_filters):
            resolved = locate_data_file(root, a.path, table=self.uri,
                                        allow_external=self.allow_external_paths)
            out.append(f"{self.uri}/{resolved.relative}" if resolved.relative is not None
                       else resolved.location.uri())
        return out

    def to_arrow(self, columns: Sequence[str] | None = None,
                 partition_filters: Sequence[Any] | None = None) -> pa.Table:
        """Read the snapshot's rows, pruning partitions before any file is opened."""
        schema = self.schema
        names = schema.names
        if columns is not None:
            unknown = [c for c in columns if c not in names]
            if unknown:
                raise InvalidArgumentError(
                    f"table {self.uri} has no column(s) {unknown}; columns are {names}")
        out_schema = pa.schema([schema.field(c) for c in (columns or names)])
        files = self.files(partition_filters)
        if not files:
            return out_schema.empty_table()
        read = _FileReader(self, out_schema)
        local = self.log_store.store.local_path("") is not None
        if len(files) == 1 or (local and not any(a.deletion_vector for a in files)):
            tables = [read(a) for a in files]
        else:
            # Remote reads wait on the network; applying deletion vectors copies every
            # column, work the threads share even on a local disk.
            workers = min(os.cpu_count() or 1, 16) if local else 16
            with ThreadPoolExecutor(max_workers=min(workers, len(files))) as pool:
                tables = list(pool.map(read, files))
        return pa.concat_tables(tables)

    # ------------------------------------------------------------------ history

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """commitInfo of each version, newest first, with ``version`` added."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 1):
            raise InvalidArgumentError(
                f"history of table {self.uri}: limit must be a positive integer or None, "
                f"got {limit!r}")
        out: list[dict[str, Any]] = []
        for v, info in self._snapshot.commit_infos(limit):
            d: dict[str, Any] = dict(info.values) if info is not None else {}
            d["version"] = v
            out.append(d)
        return out

    # ------------------------------------------------------------------ transactions

    def transaction(self, operation: str = "WRITE",
                    operation_parameters: Mapping[str, Any] | None = None,
                    isolation_level: IsolationLevel | str | None = None) -> Transaction:
        if self._pinned:
            raise InvalidArgumentError(
                f"table {self.uri} was opened at version {self.version} and is read-only")
        return Transaction(self, operation, operation_parameters, isolation_level)

    def delete(self, predicate: str | None = None) -> CommitResult:
        """Remove the rows of the partitions matching ``predicate`` (all rows if None).

        On a table that allows deletion vectors (``delta.enableDeletionVectors=true``), a
        predicate on data columns deletes matching rows by writing deletion vectors.
        """
        if predicate is not None:
            from deltacommit.dv_delete import delete_with_deletion_vectors, deletes_write_dvs
            from deltacommit.predicates import parse_predicate

            parsed = parse_predicate(predicate)
            if (not parsed.columns() <= set(self.partition_columns)
                    and deletes_write_dvs(self)):
                return delete_with_deletion_vectors(self, parsed)
        with self.transaction("DELETE", {"predicate": _json_list([predicate] if predicate else [])}
                              ) as txn:
            files = txn.scan(predicate=predicate)
            txn.remove(files)
            txn.operation_metrics["numRemovedFiles"] = str(len(files))
            txn.operation_metrics["numDeletedRows"] = str(sum(
                (a.num_records() or 0) - int((a.deletion_vector or {}).get("cardinality") or 0)
                for a in files))
        assert txn.result is not None
        return txn.result


class _FileReader:
    """Reads one data file into the output schema, restoring partition columns."""

    def __init__(self, table: DeltaTable, out_schema: pa.Schema) -> None:
        self.table = table
        self.root = parse_location(table.uri)
        self.store = table.log_store.store
        self.out_schema = out_schema
        self.pcols = set(table.partition_columns)
        self.data_cols = [f.name for f in out_schema if f.name not in self.pcols]

    def __call__(self, add: Add) -> pa.Table:
        from deltacommit.nested import conform
        from deltacommit.partitions import partition_column_arrays

        resolved = locate_data_file(self.root, add.path, table=self.table.uri,
                                    allow_external=self.table.allow_external_paths)
        rel = resolved.relative if resolved.relative is not None else resolved.location.uri()
        try:
            source, rel = open_data_file(self.store, resolved, self.table.storage_options)
            pf = pq.ParquetFile(source)
            present = set(pf.schema_arrow.names)
            cols = [c for c in self.data_cols if c in present]
            data = pf.read(columns=cols)
        except ObjectNotFoundError:
            raise StorageError("read", f"{self.table.uri}/{rel}",
                               f"data file of version {self.table.version} is missing") from None
        except FileNotFoundError:
            raise StorageError("read", f"{self.table.uri}/{rel}",
                               f"data file of version {self.table.version} is missing") from None
        except (pa.ArrowInvalid, OSError) as e:
            raise CorruptLogError(f"table {self.table.uri}: cannot read data file {rel}: {e}") from None
        if add.deletion_vector:
            data = self._drop_deleted(add, data, rel)
        n = data.num_rows
        parts = partition_column_arrays(
            {c: add.partition_values.get(c) for c in self.pcols if c in self.out_schema.names},
            self.out_schema, n)
        arrays: list[pa.Array[Any] | pa.ChunkedArray[Any]] = []
        for f in self.out_schema:
            if f.name in parts:
                arrays.append(parts[f.name])
            elif f.name in data.column_names:
                col = data.column(f.name)
                if col.type != f.type:
                    # Foreign files: other timestamp units, large strings, nullability of
                    # nested fields (Spark leaves nulls below null structs).
                    col = pa.chunked_array([conform(c, f.type) for c in col.chunks], type=f.type)
                arrays.append(col)
            else:
                arrays.append(pa.nulls(n, f.type))
        return pa.Table.from_arrays(arrays, schema=self.out_schema)


    def _drop_deleted(self, add: Add, data: pa.Table, rel: str) -> pa.Table:
        """``data`` without the rows the file's deletion vector marks deleted."""
        from deltacommit.deletion_vector_io import deleted_rows, keep_mask

        assert add.deletion_vector is not None
        rows = deleted_rows(self.store, self.root, self.table.uri, add.deletion_vector,
                            data_file=rel, storage_options=self.table.storage_options,
                            allow_external=self.table.allow_external_paths)
        return data.filter(keep_mask(rows, data.num_rows, f"table {self.table.uri}: {rel}"))


def _json_list(items: Sequence[Any]) -> str:
    import json

    return json.dumps(list(items), separators=(",", ":"))


def _json_map(items: Mapping[str, Any]) -> str:
    import json

    return json.dumps(dict(items), separators=(",", ":"))


_KNOWN_DELTA_KEYS = frozenset({
    "delta.enableDeletionVectors",
    "delta.appendOnly", "delta.checkpointInterval", "delta.logRetentionDuration",
    "delta.deletedFileRetentionDuration", "delta.isolationLevel", "delta.dataSkippingNumIndexedCols",
    "delta.checkpoint.writeStatsAsJson", "delta.checkpoint.writeStatsAsStruct",
    "delta.enableExpiredLogCleanup", "delta.checkpointRetentionDuration",
    "delta.setTransactionRetentionDuration", "delta.minReaderVersion", "delta.minWriterVersion",
    "delta.randomizeFilePrefixes", "delta.randomPrefixLength", "delta.targetFileSize",
    "delta.tuneFileSizesForRewrites", "delta.dataSkippingStatsColumns",
    "delta.compatibility.symlinkFormatManifest.enabled",
})


_BOOLEAN_KEYS = ("delta.appendOnly", "delta.enableDeletionVectors", "delta.checkpoint.writeStatsAsJson",
                 "delta.checkpoint.writeStatsAsStruct", "delta.enableExpiredLogCleanup",
                 "delta.randomizeFilePrefixes", "delta.tuneFileSizesForRewrites",
                 "delta.compatibility.symlinkFormatManifest.enabled")
_SIZE = re.compile(r"^\d+\s*(b|k|kb|m|mb|g|gb|t|tb)?$", re.IGNORECASE)


# Characters Spark refuses in column names of tables without column mapping
# (``SchemaUtils.checkFieldNames``): they cannot be stored in Parquet or Hive metadata safely.
_BAD_NAME_CHARS = frozenset(" ,;{}()\n\t=")


def check_column_names(schema: pa.Schema, uri: str) -> None:
    """Refuse column names Spark refuses without column mapping, which deltacommit does not
    support: empty, or containing any of `` ,;{}()\\n\\t=``."""

    def visit(t: pa.DataType, prefix: str) -> None:
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                check(t.field(i).name, prefix)
                visit(t.field(i).type, f"{prefix}{t.field(i).name}.")
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            visit(t.value_type, prefix)
        elif pa.types.is_map(t):
            visit(t.key_type, prefix)
            visit(t.item_type, prefix)

    def check(name: str, prefix: str) -> None:
        bad = sorted(set(name) & _BAD_NAME_CHARS)
        if not name or bad:
            what = "is empty" if not name else f"contains {''.join(bad)!r}"
            raise InvalidArgumentError(
                f"table {uri}: column name {prefix + name!r} {what}; Delta allows such names only "
                "with column mapping (delta.columnMapping.mode), which deltacommit does not "
                "support yet")

    for f in schema:
        check(f.name, "")
        visit(f.type, f"{f.name}.")


def _has_invariants(schema: pa.Schema) -> bool:
    from deltacommit.constraints import INVARIANTS_KEY

    def visit(t: pa.DataType) -> bool:
        return pa.types.is_struct(t) and any(
            INVARIANTS_KEY in (t.field(i).metadata or {}) or visit(t.field(i).type)
            for i in range(t.num_fields))

    return any(INVARIANTS_KEY in (f.metadata or {}) or visit(f.type) for f in schema)


def initial_protocol(schema: pa.Schema, config: Mapping[str, str | None],
                     wanted_reader: str | None, wanted_writer: str | None, uri: str) -> Protocol:
    """The lowest protocol that carries what the table uses (timestamp_ntz columns, CHECK
    constraints), raised to any ``delta.minReaderVersion``/``delta.minWriterVersion`` asked
    for; a version whose features deltacommit cannot honour is refused, never ignored."""
    from deltacommit.constraints import CONSTRAINT_PREFIX
    from deltacommit.schema import needs_timestamp_ntz

    def version(value: str | None, key: str, allowed: tuple[int, ...]) -> int:
        if value is None:
            return 0
        if not value.isdigit():
            raise InvalidArgumentError(f"table {uri}: {key} must be a protocol version number, "
                                       f"got {value!r}")
        v = int(value)
        if v not in allowed:
            raise InvalidArgumentError(
                f"table {uri}: {key}={v} asks for a protocol deltacommit cannot write (it "
                f"creates tables with {key.split('.')[-1]} in {list(allowed)}); versions 2 and "
                "4-6 need column mapping, change data feed or generated columns")
        return v

    reader = version(wanted_reader, "delta.minReaderVersion", (1, 3))
    writer = version(wanted_writer, "delta.minWriterVersion", (1, 2, 3, 7))
    checks = any(k.lower().startswith(CONSTRAINT_PREFIX) for k in config)
    # DELETE may then write deletion vectors, a reader and writer feature.
    dvs = (config.get("delta.enableDeletionVectors") or "").lower() == "true"
    if needs_timestamp_ntz(schema) or reader == 3 or writer == 7 or dvs:
        writer_features = ["timestampNtz"] if needs_timestamp_ntz(schema) else []
        if dvs:
            writer_features.append("deletionVectors")
        if (config.get("delta.appendOnly") or "").lower() == "true":
            writer_features.append("appendOnly")
        if _has_invariants(schema):
            writer_features.append("invariants")
        if checks:
            writer_features.append("checkConstraints")
        reader_features = ["timestampNtz"] if needs_timestamp_ntz(schema) else []
        if dvs:
            reader_features.append("deletionVectors")
        if reader == 3 or reader_features:
            return Protocol(3, 7, reader_features, writer_features)
        return Protocol(1, 7, None, writer_features)
    base_writer = 3 if checks else DEFAULT_PROTOCOL[1]
    return Protocol(max(DEFAULT_PROTOCOL[0], reader), max(base_writer, writer))


def _check_configuration(configuration: Mapping[str, str], uri: str) -> None:
    """Refuse ``delta.*`` keys this writer would not honour (a typo would be silently ignored),
    and values Delta would not parse."""
    import difflib

    from deltacommit.constraints import CONSTRAINT_PREFIX
    from deltacommit.predicates import parse_predicate

    for key, value in configuration.items():
        if not isinstance(value, str):
            raise InvalidArgumentError(
                f"table {uri}: configuration value of {key!r} must be a string, got {value!r}")
        if key.lower().startswith(CONSTRAINT_PREFIX):
            if not key[len(CONSTRAINT_PREFIX):]:
                raise InvalidArgumentError(f"table {uri}: CHECK constraint {key!r} has no name")
            try:
                parse_predicate(value)
            except InvalidArgumentError as e:
                raise InvalidArgumentError(
                    f"table {uri}: CHECK constraint {key!r} cannot be enforced by deltacommit: "
                    f"{e}") from None
            continue
        if key in _BOOLEAN_KEYS and value.lower() not in ("true", "false"):
            raise InvalidArgumentError(
                f"table {uri}: {key} must be true or false, got {value!r}")
        if key in ("delta.dataSkippingNumIndexedCols",) and not re.fullmatch(r"-?\d+", value):
            raise InvalidArgumentError(f"table {uri}: {key} must be an integer, got {value!r}")
        if key in ("delta.randomPrefixLength",) and not (value.isdigit() and int(value) > 0):
            raise InvalidArgumentError(
                f"table {uri}: {key} must be a positive integer, got {value!r}")
        if key == "delta.targetFileSize" and not _SIZE.match(value.strip()):
            raise InvalidArgumentError(
                f"table {uri}: {key} must be a size in bytes (optionally with kb, mb or gb), "
                f"got {value!r}")
        if key.startswith("delta.") and key not in _KNOWN_DELTA_KEYS:
            close = difflib.get_close_matches(key, sorted(_KNOWN_DELTA_KEYS), n=2)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise InvalidArgumentError(
                f"table {uri}: unsupported table property {key!r}{hint}")
    level = configuration.get("delta.isolationLevel")
    if level is not None:
        IsolationLevel.from_table({"delta.isolationLevel": level}, uri)
    from deltacommit.log.intervals import (
        DELETED_FILE_RETENTION,
        LOG_RETENTION,
        TXN_RETENTION,
        optional_duration_ms,
    )

    for key in (LOG_RETENTION, DELETED_FILE_RETENTION, TXN_RETENTION):
        optional_duration_ms(configuration, key, uri)
    interval = configuration.get("delta.checkpointInterval")
    if interval is not None and (not interval.isdigit() or int(interval) < 1):
        raise InvalidArgumentError(
            f"table {uri}: delta.checkpointInterval must be a positive integer, got {interval!r}")


__all__ = ["DeltaTable", "TableNotFoundError"]
