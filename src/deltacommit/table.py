"""``DeltaTable``: open, create, read and transact on one Delta table.

A table object caches the newest snapshot it has seen and the commits it recently read or
wrote.  Transactions (possibly on several threads) share that cache, so a commit retry reads
each missed commit once per process, not once per transaction.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

import pyarrow as pa

from deltacommit.engine.commit.loop import commit as commit_staged
from deltacommit.engine.commit.policy import CommitPolicy, CommitResult
from deltacommit.engine.commit.table_log import OnTableLog, TableLog
from deltacommit.engine.snapshot import state_cache
from deltacommit.engine.snapshot.snapshot import Commit, Snapshot
from deltacommit.engine.transaction.transaction import Transaction
from deltacommit.errors import InvalidArgumentError
from deltacommit.io.logstore import open_log_store
from deltacommit.io.logstore.base import LogStore
from deltacommit.ops import appender as _appender
from deltacommit.ops import write as _write
from deltacommit.ops.auto_compact import AutoCompactor
from deltacommit.ops.write import WriteResult
from deltacommit.protocol.actions import Add
from deltacommit.protocol.features import in_commit_timestamps
from deltacommit.protocol.log.paths import locate_data_file, parse_location
from deltacommit.protocol.replay import TableState
from deltacommit.protocol.table_config.properties import IsolationLevel
from deltacommit.runtime.clock import DEFAULT_RANDOM, SYSTEM_CLOCK, Clock, RandomSource

if TYPE_CHECKING:
    from deltacommit.engine.group.threads import GroupCommitPolicy, GroupCommitter
    from deltacommit.engine.hooks.checkpoint import CheckpointInfo
    from deltacommit.engine.scan import FileScan
    from deltacommit.io.storage.base import ObjectStore
    from deltacommit.ops.merge import TableMerger
    from deltacommit.ops.optimize import TableOptimizer
    from deltacommit.protocol.expressions.ast import Expr


class DeltaTable(OnTableLog):
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
                 _snapshot: Snapshot | None = None, _blind: bool = False) -> None:
        self.storage_options = dict(storage_options or {})
        #: Whether reads may open data files outside the table location (shallow clones).
        self.allow_external_paths = allow_external_paths
        self.log_store = log_store or open_log_store(table_uri, self.storage_options)
        self.clock = clock or SYSTEM_CLOCK
        self.random = random or DEFAULT_RANDOM
        self.policy = policy or CommitPolicy()
        #: The snapshot cache every transaction of this object commits through.
        self.log = self._open_log(version, _snapshot, custom_store=log_store is not None,
                                  blind=_blind)
        if not self.log.pinned:
            uri, options = self.uri, dict(self.storage_options)
            self.log.add_hook(AutoCompactor(
                uri, lambda: DeltaTable(uri, storage_options=options)))
        self._group_committer: GroupCommitter | None = None
        if group_commit is not False:
            # Group commit loads with the first table that asks for it.
            from deltacommit.engine.group.threads import GroupCommitPolicy, GroupCommitter

            if self.log.pinned:
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

    def _open_log(self, version: int | None, snapshot: Snapshot | None, *,
                  custom_store: bool, blind: bool = False) -> TableLog:
        """The table's log, from the process's cached state of it when there is one
        (``engine/snapshot/state_cache.py``): opening by URI then costs an update, not a load.

        ``blind``: for a blind append, which needs no newer state than its commit loop finds
        by losing a race; the cached state is taken as it is, the proof that the table was
        not replaced is read meanwhile, and the first commit attempt waits for it."""
        if version is not None or snapshot is not None or custom_store:
            decoded: list[Commit] = []
            if snapshot is None:
                snapshot = Snapshot.load(self.log_store, version, read=decoded)
            # The newest commit, known by its bytes, proves what the next one follows (the
            # host's turn hands a commit on with that proof).
            return TableLog(self.log_store, self.clock, snapshot, pinned=version is not None,
                            known=tuple(c for c in decoded if c.version == snapshot.version))
        key = state_cache.key_of(self.log_store, self.storage_options)
        if blind:
            reused = state_cache.reuse(key, self.log_store, self.clock)
            if reused is not None:
                snap, anchor, proof = reused
                return TableLog(self.log_store, self.clock, snap, cache_key=key,
                                known=(anchor,), proof=proof)
        reopened = state_cache.reopen(key, self.log_store, self.clock)
        if reopened is not None:
            snap, new, anchor = reopened
            return TableLog(self.log_store, self.clock, snap, cache_key=key,
                            known=tuple(new) if new else (anchor,))
        read: list[Commit] = []
        log = TableLog(self.log_store, self.clock, Snapshot.load(self.log_store, read=read),
                       cache_key=key)
        log.publish_loaded(read)
        return log

    @classmethod
    def create(cls, table_uri: str, schema: pa.Schema, *,
               partition_by: Sequence[str] | None = None,
               configuration: Mapping[str, str] | None = None,
               storage_options: Mapping[str, str] | None = None, name: str | None = None,
               description: str | None = None, log_store: LogStore | None = None,
               clock: Clock | None = None, random: RandomSource | None = None,
               policy: CommitPolicy | None = None,
               group_commit: bool | GroupCommitPolicy = False) -> DeltaTable:
        """Create version 0; TableExistsError if any writer already created the table.

        Version 0 is a transaction on the empty state before it (``ops/create.py``),
        committed through the commit loop as every version is: two writers creating one
        table race for version 0 like any other, and the loser gets TableExistsError."""
        from deltacommit.ops.create import stage_new_table

        options = dict(storage_options or {})
        ls = log_store or open_log_store(table_uri, options)
        clock = clock or SYSTEM_CLOCK
        random = random or DEFAULT_RANDOM
        staged = stage_new_table(ls, schema, partition_by=partition_by,
                                 configuration=configuration, name=name,
                                 description=description, clock=clock, random=random)
        log = TableLog(ls, clock, Snapshot(ls, TableState()))
        _, landed = commit_staged(log, staged, policy or CommitPolicy(), clock, random)
        table = cls(ls.table_uri, storage_options=options, log_store=ls, clock=clock,
                    random=random, policy=policy, group_commit=group_commit,
                    _snapshot=log.snapshot)
        # Known by its bytes, version 0 proves what the first commit is claimed after (the
        # host's turn hands that commit on with the proof).
        table.log.committed(landed)
        table.log.post_commit(landed)
        return table

    # ------------------------------------------------------------------ state

    def app_version(self, app_id: str) -> int | None:
        """The newest committed version of an application transaction id."""
        return self.log.snapshot.app_version(app_id)

    @property
    def group_committer(self) -> GroupCommitter | None:
        """The committer that merges this object's concurrent transactions, if enabled."""
        return self._group_committer

    @overload
    def update(self) -> int: ...

    @overload
    def update(self, updates: Mapping[str, str], predicate: str | None = None
               ) -> dict[str, Any]: ...

    def update(self, updates: Mapping[str, str] | None = None,
               predicate: str | None = None) -> int | dict[str, Any]:
        """Without arguments: move to the newest version, reading only the commits after the
        cached one (the version).  With ``updates`` (column -> SQL expression): UPDATE the
        rows where ``predicate`` is TRUE (every row without one), deltalake's
        ``DeltaTable.update``; its metrics (``ops/update.py``)."""
        if updates is not None or predicate is not None:
            if updates is None:
                raise InvalidArgumentError(
                    f"UPDATE of table {self.uri}: give updates (column -> SQL expression) "
                    "with the predicate")
            self._check_writable("UPDATE")
            self.update()
            # Row-level verbs load their modules when used: a writer that only appends (a cold
            # Lambda process) never pays for them.
            from deltacommit.ops.update import update as update_rows

            return update_rows(self, updates, predicate)
        return self.refresh()

    def _check_writable(self, operation: str) -> None:
        if self.log.pinned:
            raise InvalidArgumentError(
                f"table {self.uri} was opened at version {self.version} and is read-only; "
                f"open it without a version to run {operation}")

    def refresh(self) -> int:
        """Move to the newest version, reading only the commits after the cached one."""
        if self.log.pinned:
            raise InvalidArgumentError(
                f"table {self.uri} was opened at version {self.version}; open it without a "
                "version to follow new commits")
        return self.log.refresh()

    @property
    def store(self) -> ObjectStore:
        """The object store of the table's location."""
        return self.log_store.store

    @property
    def optimize(self) -> TableOptimizer:
        """Compaction (``optimize.compact``), with deltalake's names."""
        # Loaded when used, as the row-level verbs are: a writer that only appends never
        # compacts (auto-compaction reaches it through this property, after its commit).
        from deltacommit.ops.optimize import TableOptimizer

        return TableOptimizer(self)

    @property
    def pinned(self) -> bool:
        """Opened at a fixed version: reads only, never follows new commits."""
        return self.log.pinned


    def set_properties(self, properties: Mapping[str, str]) -> CommitResult:
        """Set table properties in one commit, turning on the table features they ask for
        (``delta.enableInCommitTimestamps``, ``delta.enableRowTracking``,
        ``delta.feature.<name>=supported``); see ``properties.py``."""
        from deltacommit.ops.properties import set_properties

        return set_properties(self, properties)

    # ------------------------------------------------------------------ maintenance
    # The maintenance verbs, like every verb but the writes, load when first called.

    def checkpoint(self) -> CheckpointInfo:
        """Write a checkpoint at this snapshot's version (left alone if one exists)."""
        from deltacommit.ops.maintenance import create_checkpoint

        return create_checkpoint(self.log)

    def cleanup_log(self, dry_run: bool = False) -> list[str]:
        """Delete log files past ``delta.logRetentionDuration`` that no kept checkpoint needs."""
        from deltacommit.ops.maintenance import cleanup_log

        return cleanup_log(self.log, dry_run=dry_run)

    def vacuum(self, retention_hours: float | None = None, dry_run: bool = True,
               enforce_retention_duration: bool = True, *,
               protect_uncommitted: bool = True) -> list[str]:
        """Unreferenced data files older than the retention (deleted unless ``dry_run``).

        Files no version names are kept until an hour old whatever the retention (a writer
        may be about to commit them); ``protect_uncommitted=False`` deletes them too, when
        no writer can be running."""
        from deltacommit.ops.maintenance import vacuum

        return vacuum(self.log, retention_hours, dry_run, enforce_retention_duration,
                      protect_uncommitted)

    # ------------------------------------------------------------------ files and data

    # The read verbs (``ops/read.py``) load on a table's first read, and with them the
    # data-file reader, the expression parser and file pruning: a process that only appends
    # never loads them.

    def files(self, partition_filters: Sequence[Any] | None = None,
              predicate: str | None = None) -> list[Add]:
        """The add actions of the snapshot, optionally filtered by partition values."""
        from deltacommit.ops import read

        return read.files(self, partition_filters, predicate)

    def get_add_actions(self, flatten: bool = False,
                        partition_filters: Sequence[Any] | None = None) -> pa.Table:
        """The live files as one Arrow table, in deltalake 1.6.0's columns: ``path``,
        ``size_bytes``, ``modification_time`` (ms), ``num_records``, ``null_count``, ``min``,
        ``max`` (typed by the schema), ``partition`` (typed values); then ``data_change`` and,
        where the protocol allows deletion vectors, ``deletion_vector`` (deltacommit's own).
        ``flatten`` spreads the structs into dotted columns (``min.id``); ``partition_filters``
        (deltalake's DNF tuples) lists only the matching partitions.  Built from the
        checkpoint's Arrow rows, without a Python object per file, its statistics from the
        checkpoint's ``stats_parsed`` where it has them (``protocol/add_actions.py``)."""
        from deltacommit.ops import read

        return read.add_actions(self, flatten, partition_filters)

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
                 partition_filters: Sequence[Any] | None = None,
                 filter: str | Expr | None = None) -> pa.Table:
        """Read the snapshot's rows, pruning partitions before any file is opened.

        ``filter`` (SQL text or an expression tree) keeps the rows where it is TRUE, and only
        the files whose partition values and statistics admit such a row are opened
        (``engine.scan.prune_files``)."""
        from deltacommit.ops import read

        return read.to_arrow(self, columns, partition_filters, filter)

    def file_scan(self, out_schema: pa.Schema) -> FileScan:
        """The data-file reader of this snapshot, reading into ``out_schema``."""
        from deltacommit.ops import read

        return read.file_scan(self, out_schema)

    # ------------------------------------------------------------------ history

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """commitInfo of each version, newest first, with ``version`` added."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 1):
            raise InvalidArgumentError(
                f"history of table {self.uri}: limit must be a positive integer or None, "
                f"got {limit!r}")
        snap = self.log.snapshot
        ict_from = snap.table_config.in_commit_timestamps_start(snap.protocol)
        out: list[dict[str, Any]] = []
        for v, info, mtime in snap.commit_entries(limit):
            d: dict[str, Any] = dict(info.values) if info is not None else {}
            if ict_from is not None:
                # In-commit timestamps from the enablement on, file times before it.
                ts = in_commit_timestamps.commit_timestamp(v, info, mtime, ict_from)
                if ts is not None:
                    d["timestamp"] = ts
            d["version"] = v
            out.append(d)
        return out

    def version_at(self, timestamp: int | datetime.datetime) -> int:
        """The newest version committed at or before ``timestamp`` (milliseconds since the
        epoch, or an aware datetime): in-commit timestamps where the table has them, file
        modification times elsewhere (PROTOCOL.md "In-Commit Timestamps")."""
        if isinstance(timestamp, datetime.datetime):
            if timestamp.tzinfo is None:
                raise InvalidArgumentError(
                    f"time travel on table {self.uri}: give a timezone-aware datetime, got "
                    f"{timestamp!r}")
            ms = int(timestamp.timestamp() * 1000)
        elif isinstance(timestamp, int) and not isinstance(timestamp, bool):
            ms = timestamp
        else:
            raise InvalidArgumentError(
                f"time travel on table {self.uri}: timestamp must be milliseconds since the "
                f"epoch or a datetime, got {timestamp!r}")
        snap = self.log.snapshot
        ict_from = snap.table_config.in_commit_timestamps_start(snap.protocol)
        times = in_commit_timestamps.commit_times(snap.commit_entries(), ict_from)
        enabled_at = (snap.table_config.in_commit_timestamp_enablement
                      if ict_from is not None else None)
        return in_commit_timestamps.version_at(ms, times, self.uri, enabled_at)

    # ------------------------------------------------------------------ transactions

    def transaction(self, operation: str = "WRITE",
                    operation_parameters: Mapping[str, Any] | None = None,
                    isolation_level: IsolationLevel | str | None = None) -> Transaction:
        if self.log.pinned:
            raise InvalidArgumentError(
                f"table {self.uri} was opened at version {self.version} and is read-only")
        return Transaction(self, operation, operation_parameters, isolation_level)

    def merge(self, source: Any, predicate: str, source_alias: str | None = None,
              target_alias: str | None = None) -> TableMerger:
        """MERGE ``source`` (anything ``write`` takes: Arrow, pandas, an Arrow stream) into
        the table on ``predicate``: deltalake's ``TableMerger`` builder; add clauses, then
        ``execute()`` (``ops/merge``)."""
        self._check_writable("MERGE")
        from deltacommit.ops.merge import TableMerger

        return TableMerger(self, source, predicate, source_alias, target_alias)

    def delete(self, predicate: str | None = None) -> dict[str, Any]:
        """Remove the rows where ``predicate`` is TRUE (all rows if None): any SQL expression
        ``update`` and ``merge`` accept, NULL deleting nothing (``ops/delete.py``).  Returns
        deltalake's metrics (``num_deleted_rows``, ``num_removed_files``, ...) and the
        ``version`` committed, or read where nothing was deleted.

        A predicate partition values decide removes whole files without reading them.  Any
        other deletes the matching rows: by deletion vectors on a table that allows them
        (``delta.enableDeletionVectors=true``), else by rewriting the files that hold them
        (copy-on-write, ``ops/delete.delete_rows``), with change data files on a table with
        change data feed.
        """
        self._check_writable("DELETE")
        from deltacommit.ops.delete import delete

        return delete(self, predicate)

    def rename_column(self, column: str | Sequence[str], new_name: str) -> CommitResult:
        """Rename a column (a sequence of names for a nested field) of a column-mapping table;
        no data file is rewritten (``schema_changes.py``)."""
        from deltacommit.ops.schema_changes import rename_column

        return rename_column(self, column, new_name)

    def drop_column(self, column: str | Sequence[str]) -> CommitResult:
        """Drop a column (a sequence of names for a nested field) of a column-mapping table;
        no data file is rewritten (``schema_changes.py``)."""
        from deltacommit.ops.schema_changes import drop_column

        return drop_column(self, column)

    def enable_column_mapping(self, mode: str = "name") -> CommitResult:
        """Turn on column mapping for a table created without it; existing files stay as they
        are (``schema_changes.py``)."""
        from deltacommit.ops.schema_changes import enable_column_mapping

        return enable_column_mapping(self, mode)


class _DeltaTables:
    """How the verbs (``ops``) open and create the tables they are given by location
    (``ops.tables.Tables``): as ``DeltaTable`` objects."""

    def open(self, uri: str, storage_options: Mapping[str, str] | None, *,
             blind: bool = False) -> DeltaTable:
        return DeltaTable(uri, storage_options=storage_options, _blind=blind)

    def create(self, uri: str, schema: pa.Schema, *, partition_by: Sequence[str] | None,
               configuration: Mapping[str, str] | None,
               storage_options: Mapping[str, str] | None) -> DeltaTable:
        return DeltaTable.create(uri, schema, partition_by=partition_by,
                                 configuration=configuration, storage_options=storage_options)


#: The verbs' way to open and create ``DeltaTable`` objects.
TABLES = _DeltaTables()


def write(table_or_uri: DeltaTable | str, data: Any, *, mode: str = "append",
          partition_by: Sequence[str] | None = None, predicate: str | None = None,
          app_id: str | None = None, app_version: int | None = None,
          storage_options: Mapping[str, str] | None = None,
          configuration: Mapping[str, str] | None = None,
          target_file_rows: int | None = None) -> WriteResult:
    """Append or overwrite; creates the table on first write (see README.md, "Python";
    ``ops.write``)."""
    return _write.write(table_or_uri, data, tables=TABLES, mode=mode, partition_by=partition_by,
                        predicate=predicate, app_id=app_id, app_version=app_version,
                        storage_options=storage_options, configuration=configuration,
                        target_file_rows=target_file_rows)


def append(table: DeltaTable | str, data: Any, *, app_id: str | None = None,
           app_version: int | None = None,
           storage_options: Mapping[str, str] | None = None) -> WriteResult:
    """Append ``data``; on a group-commit table, concurrent appends share files and a version
    (``ops.write.append``)."""
    return _write.append(table, data, tables=TABLES, app_id=app_id, app_version=app_version,
                         storage_options=storage_options)


class Appender(_appender.Appender):
    """Buffered, exactly-once appends for streaming ingestion (``ops.appender``), opening and
    creating ``DeltaTable`` objects."""

    tables = TABLES


__all__ = ["TABLES", "Appender", "DeltaTable", "append", "write"]
