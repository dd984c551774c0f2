"""Transactions: what a writer read and what it stages, handed to the commit engine.

A transaction reads a snapshot, records what it read (partition predicates, files, app ids),
stages actions, and commits them at the next version through the engine's one commit loop
(``engine/commit/loop.py``) as a group of one, or through the table's group committer
(``coalesce.py``), which feeds the same loop.  What the loop checks, retries and records is
described there and in ``engine/commit/commit_info.py``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from typing import Protocol as Interface

import pyarrow as pa

from deltacommit.engine.commit.commit_info import ENGINE_INFO, render_parameters
from deltacommit.engine.commit.handle import TableHandle
from deltacommit.engine.commit.loop import commit as commit_staged
from deltacommit.engine.commit.policy import CommitPolicy, CommitResult
from deltacommit.engine.commit.staged import StagedCommit
from deltacommit.engine.group.fleet.policy import fleet_policy
from deltacommit.engine.group.fleet.round import commit as fleet_commit
from deltacommit.engine.snapshot.snapshot import check_schema
from deltacommit.errors import CoordinationMismatchError, CorruptLogError, InvalidArgumentError
from deltacommit.io.logstore.base import COORDINATION_KEY
from deltacommit.protocol.actions import (
    MAX_LONG,
    Add,
    AddCDCFile,
    DomainMetadata,
    Metadata,
    Protocol,
    Remove,
    Txn,
)
from deltacommit.protocol.conflicts import TransactionSummary
from deltacommit.protocol.log.paths import is_plain_relative, parse_location, resolve
from deltacommit.protocol.partitions import decode_add_path
from deltacommit.protocol.replay import file_key
from deltacommit.protocol.row_changes import ChangedFile, RowLevelReads, rows
from deltacommit.protocol.schema.column_mapping import partition_physical_names
from deltacommit.protocol.table_config.features import check_writable
from deltacommit.protocol.table_config.properties import IsolationLevel

if TYPE_CHECKING:
    from deltacommit.engine.group.threads import GroupCommitter
    from deltacommit.engine.snapshot.snapshot import Snapshot
    from deltacommit.protocol.expressions.predicates import Predicate

__all__ = ["ENGINE_INFO", "CommitPolicy", "CommitResult", "Transaction"]


class TransactionTable(TableHandle, Interface):
    """What a transaction needs of its table (``DeltaTable`` is one)."""

    @property
    def uri(self) -> str: ...

    @property
    def snapshot(self) -> Snapshot: ...

    @property
    def group_committer(self) -> GroupCommitter | None: ...


@dataclass(slots=True)
class _Reads:
    predicates: list[Predicate] = field(default_factory=list)
    files: set[str] = field(default_factory=set)
    whole_table: bool = False
    app_ids: set[str] = field(default_factory=set)


class Transaction:
    """Read, stage, commit.  Use as a context manager: committed on normal exit."""

    def __init__(self, table: TransactionTable, operation: str = "WRITE",
                 operation_parameters: Mapping[str, Any] | None = None,
                 isolation_level: IsolationLevel | str | None = None) -> None:
        self.table = table
        # Before the snapshot: a rollback found after this (``TableLog.check_read``) may have
        # gone with what the transaction reads.
        self._rollbacks_found = table.log.rollbacks_found
        self.snapshot = table.snapshot
        # The commit read at the snapshot's version, where the table object still holds
        # that snapshot: the claim refuses the transaction if the log holds another there.
        self._read_digest = table.log.digest_of(self.snapshot)
        self.read_version = self.snapshot.version
        self.operation = operation
        self.operation_parameters: dict[str, Any] = dict(operation_parameters or {})
        # An override of the table's delta.isolationLevel, validated like the property (snapshot
        # isolation is never chosen, only reached by a transaction that changes no data).
        self._isolation = (None if isolation_level is None
                           else IsolationLevel.parse(str(isolation_level), table.uri))
        self._reads = _Reads()
        self._row_level: RowLevelReads | None = None
        #: Some change could not be tracked by row: the file-level rules apply throughout.
        self._row_level_off = False
        self._adds: list[Add] = []
        self._unsynced: list[str] = []
        self._removes: list[Remove] = []
        self._cdc: list[AddCDCFile] = []
        self._txns: dict[str, Txn] = {}
        self._domains: dict[str, DomainMetadata] = {}
        self._metadata: Metadata | None = None
        #: Set by ``coordination.set_coordination``: this commit records the table's mechanism,
        #: so signs of another fleet on an unpinned table are the operator's call, not a refusal.
        self.pinning = False
        self._protocol: Protocol | None = None
        self.operation_metrics: dict[str, Any] = {}
        self.txn_id = table.random.uuid()
        self.result: CommitResult | None = None
        self._done = False

    # ------------------------------------------------------------------ reads

    def scan(self, partition_filters: Sequence[Any] | None = None,
             predicate: str | Predicate | None = None) -> list[Add]:
        """Files of the read snapshot matching the filters; recorded as read by this transaction.

        The file selection and the predicate parser load with the first transaction that reads
        files: a blind append reads none, and a cold process appending never loads them."""
        from deltacommit.engine.scan import select_files
        from deltacommit.protocol.expressions.predicates import (
            TRUE,
            from_partition_filters,
            parse_predicate,
        )

        pred: Predicate
        if predicate is not None and partition_filters is not None:
            raise InvalidArgumentError("give partition_filters or predicate, not both")
        if isinstance(predicate, str):
            pred = parse_predicate(predicate)
        elif predicate is not None:
            pred = predicate
        elif partition_filters:
            pred = from_partition_filters(partition_filters)
        else:
            pred = TRUE
        pred.check_columns(self.snapshot.partition_columns, self.table.uri)
        files = select_files(self.snapshot, pred)
        self._reads.predicates.append(pred)
        self._reads.files.update(file_key(a.path) for a in files)
        return files

    def read_files(self, files: Iterable[Add]) -> None:
        """Declare that the outcome depends on exactly these files (a concurrent remove of one
        of them conflicts; files added meanwhile do not, unlike a predicate's reads)."""
        self._reads.files.update(file_key(a.path) for a in files)

    def read_whole_table(self) -> None:
        """Declare that the outcome depends on every file (any concurrent change conflicts)."""
        self._reads.whole_table = True

    @property
    def tracks_rows(self) -> bool:
        """Whether this transaction's row-level changes are checked row by row: the table has
        deletion vectors and row tracking enabled (with its materialized id columns)."""
        snap = self.snapshot
        config = snap.table_config
        return bool(config.deletion_vectors_enabled(snap.protocol)
                    and config.row_tracking_enabled(snap.protocol)
                    and config.row_id_column and config.row_commit_version_column)

    def record_row_changes(self, predicate: Predicate | Callable[[], Predicate],
                           changes: Iterable[tuple[Add, int, Any, Any]],
                           read: Iterable[tuple[Add, int, Any, Any]] = ()) -> bool:
        """Declare this transaction a row-level one: it acts on the rows where ``predicate``
        is TRUE (or the predicate it builds, called where a concurrent commit is checked
        against it), and of each file ``(add as read, physical rows, positions its deletion vector
        deleted when read, positions this transaction deletes or rewrites)`` it changed those
        rows.  ``read`` names, the same way, rows it read and left as they were but whose
        existence and values decide its outcome (a MERGE's target rows matched and left
        unchanged, each keeping its source row from being inserted): a concurrent commit that
        deletes or changes one conflicts as for a row changed, and a retry leaves them as they
        are.  Concurrent commits are then checked against these rows and the predicate
        instead of Spark's file-level rules (``protocol/row_conflicts.py``), and a retry moves
        its deletes onto files a winner replaced (``row_rebase.py``).  Returns False, and
        changes nothing, where the table lacks deletion vectors or row tracking
        (``tracks_rows``): the file-level rules stay.  Reads each file's stable row ids."""
        self._check_open()
        changes = list(changes)
        read = list(read)
        if not self.tracks_rows or any(
                a.base_row_id is None or a.default_row_commit_version is None
                for a, _, _, _ in changes + read):
            # A file committed before row tracking was enabled (and not backfilled) has no
            # stable ids to check rows by: the whole transaction keeps the file-level rules.
            self._row_level = None
            self._row_level_off = True
            return False
        if self._row_level_off:
            return False
        # Loaded by the first row-level change (as ``row_conflicts`` by the first check).
        import numpy as np

        from deltacommit.engine.commit.row_rebase import hidden_columns, stable_rows

        snap = self.snapshot
        store = self.table.log.log_store.store
        hidden = hidden_columns(snap.configuration)
        files = dict(self._row_level.files) if self._row_level is not None else {}
        # Per file: the add as read, its rows, the rows deleted then, changed, read.
        given: dict[str, tuple[Add, int, Any, Any, Any]] = {}
        for add, num_rows, before, changed in changes:
            given[file_key(add.path)] = (add, num_rows, before, rows(changed), rows([]))
        for add, num_rows, before, kept in read:
            prior = given.get(file_key(add.path))
            changed_rows = prior[3] if prior is not None else rows([])
            given[file_key(add.path)] = (add, num_rows, before, changed_rows,
                                         np.setdiff1d(rows(kept), changed_rows))
        for add, num_rows, before, changed_rows, read_rows in given.values():
            ids, versions, n = stable_rows(store, self.table.uri, snap.version, add, hidden)
            last = max(changed_rows[-1] if len(changed_rows) else -1,
                       read_rows[-1] if len(read_rows) else -1)
            if n != num_rows or last >= n:
                raise InvalidArgumentError(
                    f"row changes of {add.path} in table {self.table.uri}: the file has {n} "
                    f"rows, not {num_rows}, or positions beyond them were given")
            change = ChangedFile(add, n, rows(before), changed_rows, ids[changed_rows],
                                 versions[changed_rows], read_rows, ids[read_rows],
                                 versions[read_rows])
            files[change.key] = change
        pcols = tuple(snap.partition_columns)
        previous = self._row_level
        acts_on = predicate
        if previous is not None:
            # A function of module level and its arguments: the transaction pickles (to the
            # host's committer in another process, ``engine.group.host``).
            acts_on = functools.partial(_either, previous, predicate)
        self._row_level = RowLevelReads(acts_on, snap.schema, pcols, dict(snap.configuration),
                                        files)
        return True

    def app_version(self, app_id: str) -> int | None:
        """The last committed version of an application id; the read is tracked, so a
        concurrent commit of the same app id makes this transaction fail instead of duplicating."""
        self._reads.app_ids.add(app_id)
        return self.snapshot.app_version(app_id)

    # ------------------------------------------------------------------ writes

    def add(self, files: Iterable[Add], *, durable: bool = True) -> None:
        """Stage new data files.  ``durable=False`` says they were written without a sync
        (``write_data_file(..., durable=False)``): the commit makes them durable before its
        version references them, with the files of the rest of its group at once."""
        self._check_open()
        files = list(files)
        self._adds.extend(files)
        if not durable:

            # Local files wait for a sync, remote ones for an upload still in flight; a
            # remote put already acknowledged is durable.
            store = self.table.log.log_store.store
            self._unsynced.extend(p for p in (decode_add_path(a.path) for a in files)
                                  if store.awaits_durable(p))

    def add_cdc(self, files: Iterable[AddCDCFile], *, unsynced: Iterable[str] = ()) -> None:
        """Stage change data files (``cdc`` actions, PROTOCOL.md "Add CDC File") of a row-level
        change.  ``unsynced``: their store paths written without a sync, made durable by the
        commit as ``add(durable=False)`` makes data files."""
        self._check_open()
        self._cdc.extend(files)
        store = self.table.log.log_store.store
        self._unsynced.extend(p for p in unsynced if store.awaits_durable(p))

    def remove(self, files: Iterable[Add | Remove], data_change: bool = True) -> None:
        self._check_open()
        now = int(self.table.clock.time() * 1000)
        for f in files:
            self._removes.append(f.to_remove(now, data_change) if isinstance(f, Add) else f)

    def set_app_version(self, app_id: str, version: int) -> None:
        """Record ``(app_id, version)`` in this commit.  The id counts as read: a concurrent
        commit of the same id makes this transaction fail rather than both succeed."""
        self._check_open()
        if not isinstance(app_id, str) or not app_id:
            raise InvalidArgumentError(f"app id for table {self.table.uri} must be a non-empty "
                                       f"string, got {app_id!r}")
        if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= MAX_LONG:
            raise InvalidArgumentError(f"app version for {app_id!r} on table {self.table.uri} must "
                                       f"be an integer from 0 to 2**63-1, got {version!r}")
        self._reads.app_ids.add(app_id)
        self._txns[app_id] = Txn(app_id, version, int(self.table.clock.time() * 1000))

    def set_domain_metadata(self, domain: str, configuration: str) -> None:
        """Set a user metadata domain's configuration in this commit (PROTOCOL.md "Domain
        Metadata").  A concurrent commit that writes the same domain conflicts."""
        self._check_domain(domain)
        if not isinstance(configuration, str):
            raise InvalidArgumentError(
                f"configuration of metadata domain {domain!r} on table {self.table.uri} must be "
                f"a string, got {type(configuration).__name__}")
        self._domains[domain] = DomainMetadata(domain, configuration)

    def remove_domain_metadata(self, domain: str) -> None:
        """Delete a user metadata domain in this commit (nothing if the table lacks it)."""
        self._check_domain(domain)
        current = self.snapshot.domain_metadata(domain)
        if current is None:
            self._domains.pop(domain, None)
            return
        self._domains[domain] = DomainMetadata(domain, current, removed=True)

    def _check_domain(self, domain: str) -> None:
        self._check_open()
        uri = self.table.uri
        if not isinstance(domain, str) or not domain:
            raise InvalidArgumentError(f"metadata domain name for table {uri} must be a "
                                       f"non-empty string, got {domain!r}")
        if domain.lower().startswith("delta."):
            raise InvalidArgumentError(
                f"metadata domain {domain!r} of table {uri} is system-controlled (the 'delta.' "
                "prefix is reserved for the table features that own such domains)")
        protocol = self._protocol or self.snapshot.protocol
        if "domainMetadata" not in (protocol.writer_features or ()):
            raise InvalidArgumentError(
                f"table {uri} does not support metadata domains: its protocol lacks the writer "
                "feature domainMetadata (create the table with "
                "configuration={'delta.feature.domainMetadata': 'supported'})")

    def update_metadata(self, metadata: Metadata) -> None:
        self._check_open()
        self._metadata = metadata

    def update_protocol(self, protocol: Protocol) -> None:
        self._check_open()
        self._protocol = protocol

    @property
    def staged_adds(self) -> list[Add]:
        return list(self._adds)

    @property
    def staged_removes(self) -> list[Remove]:
        return list(self._removes)

    def _check_open(self) -> None:
        if self._done:
            raise InvalidArgumentError(f"transaction on {self.table.uri} is already committed")

    # ------------------------------------------------------------------ commit

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None and not self._done:
            self.commit()

    def summary(self) -> TransactionSummary:
        snap = self.snapshot
        schema = snap.schema
        pcols = tuple(snap.partition_columns)
        isolation = self._isolation or snap.table_config.isolation_level
        return TransactionSummary(
            operation=self.operation,
            partition_columns=pcols,
            partition_types={c: schema.field(c).type for c in pcols},
            partition_physical_names=partition_physical_names(schema, pcols, snap.configuration),
            isolation_level=isolation,
            read_predicates=tuple(self._reads.predicates),
            read_files=frozenset(self._reads.files),
            read_whole_table=self._reads.whole_table,
            read_app_ids=frozenset(self._reads.app_ids),
            added_files=tuple(self._adds),
            removed_files=frozenset(file_key(r.path) for r in self._removes),
            has_metadata=self._metadata is not None,
            has_protocol=self._protocol is not None,
            has_other_actions=bool(self._txns) or bool(self._domains),
            data_change=any(a.data_change for a in self._adds)
            or any(r.data_change for r in self._removes),
            read_protocol=snap.protocol,
            read_metadata=snap.metadata,
            domains=frozenset(self._domains),
            row_level=self._row_level,
        )

    def staged(self) -> StagedCommit:
        """This transaction's changes and reads as the value the commit engine takes."""
        summary = self.summary()
        return StagedCommit(
            txn_id=self.txn_id, read_version=self.read_version, operation=self.operation,
            parameters=render_parameters(self.operation_parameters),
            metrics=dict(self.operation_metrics), summary=summary, adds=tuple(self._adds),
            removes=tuple(self._removes), txns=tuple(self._txns.values()),
            metadata=self._metadata, protocol=self._protocol,
            app_ids=frozenset(self._txns) | summary.read_app_ids,
            domains=tuple(self._domains.values()), unsynced=tuple(self._unsynced),
            cdc=tuple(self._cdc), read_digest=self._read_digest)

    def validate(self) -> None:
        """Refuse what no reader could accept, before anything is committed."""
        snap = self.snapshot
        uri = self.table.uri
        protocol = self._protocol or snap.protocol
        metadata = self._metadata or snap.metadata
        check_writable(uri, protocol, metadata)
        if self._metadata is not None or self._protocol is not None:
            # A new schema or protocol is checked as every reader will check it once it is
            # committed (column mapping ids and names unique, types readable).
            try:
                check_schema(uri, protocol, metadata)
            except CorruptLogError as e:
                raise InvalidArgumentError(
                    f"this {self.operation} would commit a metaData no reader could accept, so "
                    f"nothing was committed: {e}") from None
        if any(r.data_change for r in self._removes) and snap.table_config.append_only:
            raise InvalidArgumentError(
                f"table {uri} is append-only (delta.appendOnly=true): this {self.operation} would "
                "remove data")
        seen: set[str] = set()
        root = parse_location(uri) if self._adds else None
        for a in self._adds:
            if root is not None and not is_plain_relative(a.path):
                resolve(root, a.path, table=uri)  # a path readers could not resolve is refused
            k = file_key(a.path, a.deletion_vector)
            if k in seen:
                raise InvalidArgumentError(f"file {a.path} is added twice in one commit to {uri}")
            seen.add(k)
        removed: set[str] = set()
        for r in self._removes:
            k = file_key(r.path, r.deletion_vector)
            if k in removed:
                raise InvalidArgumentError(f"file {r.path} is removed twice in one commit to {uri}")
            removed.add(k)
        self._check_coordination(snap.configuration)

    def check_can_commit(self) -> None:
        """Refuse now, before any data file is written, what ``commit`` would refuse anyway:
        a table whose protocol this writer cannot write, or one coordinated otherwise."""
        snap = self.snapshot
        check_writable(self.table.uri, self._protocol or snap.protocol,
                       self._metadata or snap.metadata)
        self._check_coordination(snap.configuration)

    def _check_coordination(self, configuration: Mapping[str, str | None]) -> None:
        if COORDINATION_KEY not in configuration and not self.pinning:
            sign = self.table.log.foreign_coordination()
            if sign is not None:
                raise CoordinationMismatchError(
                    f"table {self.table.uri} records no commit mechanism, but it shows signs of "
                    f"writers committing through DynamoDB: {sign}. This writer uses "
                    f"{self.table.log.log_store.mechanism!r}, which does not exclude them, so it "
                    "refuses to commit. Configure the DynamoDB mechanism the table's writers use "
                    "(AWS_S3_LOCKING_PROVIDER=dynamodb), or, if none is left, pin the table to "
                    "this one with `deltacommit coordination set`.")
        expected = self.table.log.log_store.coordination_config(configuration)
        for key, mine in expected.items():
            recorded = configuration.get(key)
            if recorded is not None and recorded != mine:
                raise CoordinationMismatchError(
                    f"table {self.table.uri} records {key}={recorded!r} but this writer is "
                    f"configured for {mine!r}; writers using different commit mechanisms do not "
                    "exclude each other, so this writer refuses to commit. Configure the same "
                    "mechanism as the table's other writers (see `deltacommit coordination "
                    "show`), or, once every writer has moved, record the new mechanism with "
                    "`deltacommit coordination set`.")

    def commit(self) -> CommitResult:
        """Commit the staged actions; retried while concurrent winners do not conflict.

        Commits this process already knows of (made or read by another thread sharing the
        table) are checked before the first attempt, so that attempt does not lose a race that
        was already decided.  On a table opened with ``group_commit``, the commit is handed to
        its group committer, which may put it into one version with other threads'
        transactions (``coalesce.py``).
        """
        if self._done:
            assert self.result is not None
            return self.result
        self.validate()
        table = self.table
        table.log.check_read(self._rollbacks_found, self.read_version)
        table.log.refresh_if_stale()
        committer = table.group_committer
        fleet = fleet_policy(table.log.snapshot.table_config,
                             committer.policy.fleet if committer is not None else False)
        if fleet is not None:
            # Published for the fleet (``engine.group.fleet``): another writer may commit
            # it, and the post-commit hooks are then that writer's.
            result, made = fleet_commit(table.log, self.staged(), table.policy, table.clock,
                                        table.random, fleet)
            self._settle(result)
            if made is not None:
                table.log.post_commit(made)
            return result
        if committer is not None:
            return self._settle(committer.commit(self.staged()))
        result, landed = commit_staged(table.log, self.staged(), table.policy, table.clock,
                                       table.random)
        self._settle(result)
        table.log.post_commit(landed)
        return result

    def check_still_in_log(self) -> None:
        """TableReplacedError unless the log still holds what this transaction read: the
        table object's newest commit is read back (``TableLog.recheck_newest``, one GET), and a
        rollback the object found since the transaction began refuses it too.  For an answer
        taken from the read alone, with no commit to check it (a write skipped as already
        recorded)."""
        log = self.table.log
        log.recheck_newest()
        log.check_read(self._rollbacks_found, self.read_version)

    def commit_rows(self, rows: pa.Table) -> tuple[CommitResult, int]:
        """Commit with ``rows`` that the group committer's leader writes, before the commit,
        into files shared with its group's other appends (``coalesce.py``); also returns how
        many files that group wrote.  ``rows`` must be in the schema of the read snapshot."""
        self._check_open()
        self.validate()
        self.table.log.check_read(self._rollbacks_found, self.read_version)
        committer = self.table.group_committer
        if committer is None:
            raise InvalidArgumentError(
                f"table {self.table.uri} was not opened with group_commit: rows can be handed "
                "to a group's leader only there")
        result, files = committer.commit_rows(self.staged(), rows)
        return self._settle(result), files

    def _settle(self, result: CommitResult) -> CommitResult:
        self._done = True
        self.result = result
        return result


def _either(previous: RowLevelReads, predicate: Predicate | Callable[[], Predicate]
            ) -> Predicate:
    """The rows a transaction acts on after a second row-level change: those of the first
    (``previous``) or those of ``predicate`` (or of the predicate it builds)."""
    from deltacommit.protocol.expressions.ast import or_

    return or_(previous.predicate, predicate() if callable(predicate) else predicate)
