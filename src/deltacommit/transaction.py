"""Transactions: read tracking and the optimistic commit loop.

A transaction reads a snapshot, records what it read (partition predicates, files, app ids),
stages actions, and commits them at the next version.  When another writer took that version
first, the loop reads only the commits it missed, checks each against what this transaction
read (``conflicts.py``), and retries at the next version with a freshly built ``commitInfo``,
sleeping an exponentially growing, fully jittered interval so that many writers spread out
instead of colliding again in lockstep.

What a retry's ``commitInfo`` says: ``timestamp`` is taken again on every attempt, so commit
times follow version order as closely as the clock allows (timestamp time travel relies on
that); ``isBlindAppend`` and ``isolationLevel`` are recomputed from the transaction's reads
and actions.  ``readVersion`` stays the version of the snapshot the transaction read, on every
attempt, as Spark and delta-rs write it: it is what the transaction's reads were made against,
so ``readVersion < version - 1`` records that the commit was rebased over the versions in
between (and that each of them passed the conflict checks).  Rewriting it to ``version - 1``
would make every commit look unrebased and erase that record.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deltacommit.conflicts import IsolationLevel, TransactionSummary, WinningCommit, check_conflicts
from deltacommit.errors import (
    CommitFailedError,
    CoordinationMismatchError,
    InvalidArgumentError,
    MissingVersionError,
    VersionExistsError,
)
from deltacommit.log.actions import (
    MAX_LONG,
    Action,
    Add,
    CommitInfo,
    Metadata,
    Protocol,
    Remove,
    Txn,
    serialize_commit,
)
from deltacommit.log.features import check_writable, is_append_only
from deltacommit.log.paths import is_plain_relative, parse_location, resolve
from deltacommit.log.replay import file_key
from deltacommit.logstore.base import COORDINATION_KEY
from deltacommit.snapshot import Commit

if TYPE_CHECKING:
    from deltacommit.predicates import Predicate
    from deltacommit.table import DeltaTable

ENGINE_INFO = "deltacommit/0.1.0"


@dataclass(frozen=True, slots=True)
class CommitPolicy:
    """How hard a commit tries.  The attempt limit is generous on purpose: a writer that loses
    races to innocent appends should keep going, as Spark's does, not give up after 15 tries."""

    max_attempts: int = 10_000
    backoff_base: float = 0.002
    backoff_cap: float = 0.5

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) \
                or self.max_attempts < 1:
            raise InvalidArgumentError(
                f"CommitPolicy.max_attempts must be a positive integer, got {self.max_attempts!r}")
        if not (0 <= self.backoff_base <= self.backoff_cap):
            raise InvalidArgumentError(
                "CommitPolicy needs 0 <= backoff_base <= backoff_cap, got "
                f"backoff_base={self.backoff_base!r}, backoff_cap={self.backoff_cap!r}")

    def backoff(self, losses: int, draw: float) -> float:
        """Full jitter: ``draw`` in [0, 1) scales the capped exponential ceiling."""
        ceiling = min(self.backoff_cap, self.backoff_base * float(2 ** min(losses - 1, 20)))
        return ceiling * draw


@dataclass(frozen=True, slots=True)
class CommitResult:
    version: int
    attempts: int
    skipped: bool = False
    #: Concurrent versions this transaction was checked against and rebased over.
    winners: tuple[int, ...] = ()
    #: Spark's ``commitInfo.txnId`` of this transaction (the same on every attempt).
    txn_id: str = ""
    #: SHA-256 of the commit file as written, so a history checker can prove it was not replaced.
    digest: str = ""
    #: The snapshot version the transaction read (``commitInfo.readVersion``).
    read_version: int = -1
    #: How many transactions the version holds (more than one under group commit, see
    #: ``coalesce.py``; ``digest`` is then the digest of the shared commit file).
    group_size: int = 1


@dataclass(slots=True)
class _Reads:
    predicates: list[Predicate] = field(default_factory=list)
    files: set[str] = field(default_factory=set)
    whole_table: bool = False
    app_ids: set[str] = field(default_factory=set)


class Transaction:
    """Read, stage, commit.  Use as a context manager: committed on normal exit."""

    def __init__(self, table: DeltaTable, operation: str = "WRITE",
                 operation_parameters: Mapping[str, Any] | None = None,
                 isolation_level: IsolationLevel | str | None = None) -> None:
        self.table = table
        self.snapshot = table.snapshot
        self.read_version = self.snapshot.version
        self.operation = operation
        self.operation_parameters: dict[str, Any] = dict(operation_parameters or {})
        # An override of the table's delta.isolationLevel, validated like the property (snapshot
        # isolation is never chosen, only reached by a transaction that changes no data).
        self._isolation = (None if isolation_level is None else IsolationLevel.from_table(
            {"delta.isolationLevel": str(isolation_level)}, table.uri))
        self._reads = _Reads()
        self._adds: list[Add] = []
        self._removes: list[Remove] = []
        self._txns: dict[str, Txn] = {}
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
        """Files of the read snapshot matching the filters; recorded as read by this transaction."""
        from deltacommit.predicates import TRUE, from_partition_filters, parse_predicate

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
        files = self.table._select_files(self.snapshot, pred)
        self._reads.predicates.append(pred)
        self._reads.files.update(file_key(a.path) for a in files)
        return files

    def read_whole_table(self) -> None:
        """Declare that the outcome depends on every file (any concurrent change conflicts)."""
        self._reads.whole_table = True

    def app_version(self, app_id: str) -> int | None:
        """The last committed version of an application id; the read is tracked, so a
        concurrent commit of the same app id makes this transaction fail instead of duplicating."""
        self._reads.app_ids.add(app_id)
        return self.snapshot.app_version(app_id)

    # ------------------------------------------------------------------ writes

    def add(self, files: Iterable[Add]) -> None:
        self._check_open()
        self._adds.extend(files)

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
        isolation = self._isolation or IsolationLevel.from_table(snap.configuration, self.table.uri)
        return TransactionSummary(
            operation=self.operation,
            partition_columns=pcols,
            partition_types={c: schema.field(c).type for c in pcols},
            isolation_level=isolation,
            read_predicates=tuple(self._reads.predicates),
            read_files=frozenset(self._reads.files),
            read_whole_table=self._reads.whole_table,
            read_app_ids=frozenset(self._reads.app_ids),
            added_files=tuple(self._adds),
            removed_files=frozenset(file_key(r.path) for r in self._removes),
            has_metadata=self._metadata is not None,
            has_protocol=self._protocol is not None,
            has_other_actions=bool(self._txns),
            data_change=any(a.data_change for a in self._adds)
            or any(r.data_change for r in self._removes),
            read_protocol=snap.protocol,
            read_metadata=snap.metadata,
        )

    def _metrics(self) -> dict[str, Any]:
        """``operationMetrics`` of this transaction's actions (a group sums its members')."""
        metrics = dict(self.operation_metrics)
        metrics.setdefault("numFiles", str(len(self._adds)))
        if self._removes:
            metrics.setdefault("numRemovedFiles", str(len(self._removes)))
        rows = sum((a.num_records() or 0) for a in self._adds)
        metrics.setdefault("numOutputRows", str(rows))
        metrics.setdefault("numOutputBytes", str(sum(a.size for a in self._adds)))
        return metrics

    def _rendered_parameters(self) -> dict[str, str]:
        """``operationParameters`` as Delta writes them: every value a string."""
        return {k: v if isinstance(v, str) else _json_text(v)
                for k, v in self.operation_parameters.items()}

    def _commit_info(self, summary: TransactionSummary) -> CommitInfo:
        """A fresh commitInfo for one attempt (see the module docstring for what changes)."""
        values: dict[str, Any] = {
            "timestamp": int(self.table.clock.time() * 1000),
            "operation": self.operation,
            "operationParameters": self._rendered_parameters(),
            "readVersion": self.read_version,
            "isolationLevel": summary.effective_isolation.value,
            "isBlindAppend": summary.is_blind_append,
            "operationMetrics": self._metrics(),
            "engineInfo": ENGINE_INFO,
            "txnId": self.txn_id,
        }
        return CommitInfo(values)

    def _actions(self, commit_info: CommitInfo) -> list[Action]:
        out: list[Action] = [commit_info]
        if self._protocol is not None:
            out.append(self._protocol)
        if self._metadata is not None:
            out.append(self._metadata)
        out.extend(self._txns.values())
        out.extend(self._removes)
        out.extend(self._adds)
        return out

    def _validate(self) -> None:
        snap = self.snapshot
        uri = self.table.uri
        protocol = self._protocol or snap.protocol
        metadata = self._metadata or snap.metadata
        check_writable(uri, protocol, metadata)
        if any(r.data_change for r in self._removes) and is_append_only(snap.metadata):
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
            sign = self.table._foreign_coordination()
            if sign is not None:
                raise CoordinationMismatchError(
                    f"table {self.table.uri} records no commit mechanism, but it shows signs of "
                    f"writers committing through DynamoDB: {sign}. This writer uses "
                    f"{self.table.log_store.mechanism!r}, which does not exclude them, so it "
                    "refuses to commit. Configure the DynamoDB mechanism the table's writers use "
                    "(AWS_S3_LOCKING_PROVIDER=dynamodb), or, if none is left, pin the table to "
                    "this one with `deltacommit coordination set`.")
        expected = self.table.log_store.coordination_config()
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

        A lost race costs one read per commit made since the last version this transaction saw
        (``DeltaTable._commits_after``), never a reload of the snapshot.  Commits this process
        already knows of (made or read by another thread sharing the table) are checked before
        the first attempt, so that attempt does not lose a race that was already decided.  On a
        table opened with ``group_commit``, the commit is handed to its group committer, which
        may put it into one version with other threads' transactions (``coalesce.py``).
        """
        if self._done:
            assert self.result is not None
            return self.result
        self._validate()
        table = self.table
        table._refresh_if_stale()
        committer = table.group_committer
        if committer is not None:
            return committer.commit(self)
        log_store = table.log_store
        policy = table.policy
        summary = self.summary()
        base = self.read_version
        winners: list[int] = []
        known = table.version
        if known > base:
            landed = self._rebase(self._missed(base, known, summary), summary, winners)
            if landed is not None:
                return self._landed_earlier(landed, 1, winners)
            base = known
        attempt = 0
        while True:
            attempt += 1
            version = base + 1
            actions = self._actions(self._commit_info(summary))
            data = serialize_commit(actions)
            try:
                log_store.write_commit(version, data)
            except VersionExistsError:
                latest = table._refresh()
                for c in self._missed(base, latest, summary):
                    winner = WinningCommit.from_actions(c.version, c.actions)
                    if winner.txn_id == self.txn_id:
                        return self._landed_earlier(c, attempt, winners)
                    check_conflicts(summary, winner, table.uri)
                    winners.append(c.version)
                base = max(base, latest)
                if attempt >= policy.max_attempts:
                    raise CommitFailedError(
                        f"gave up committing {self.operation} to table {table.uri} after "
                        f"{attempt} attempts: each lost the race for the next version (last tried "
                        f"version {version}; rebased over {len(winners)} concurrent commits, none "
                        "conflicting). Raise CommitPolicy.max_attempts if this many concurrent "
                        "writers are expected, or coalesce their writes") from None
                table.clock.sleep(policy.backoff(attempt, table.random.uniform(0.0, 1.0)))
                continue
            self._done = True
            commit = Commit(version, actions)
            table._committed(commit)
            self.result = CommitResult(version, attempt, winners=tuple(winners), txn_id=self.txn_id,
                                       digest=hashlib.sha256(data).hexdigest(),
                                       read_version=self.read_version)
            table._post_commit(commit)
            return self.result

    def _missed(self, base: int, latest: int, summary: TransactionSummary) -> list[Commit]:
        """Commits after ``base`` up to ``latest`` that this transaction must check.

        If log cleanup has deleted some of them, they cannot be checked one by one.  A blind
        append that read no application id conflicts only with a change of metadata or
        protocol, which comparing the newest snapshot with the one it read settles; any other
        transaction gets a clear error instead of committing blind.
        """
        if latest <= base:
            return []
        try:
            return self.table._known_commits(base + 1, latest)
        except MissingVersionError as e:
            now = self.table.snapshot
            if (summary.is_blind_append and not summary.read_app_ids
                    and now.metadata == self.snapshot.metadata
                    and now.protocol == self.snapshot.protocol):
                return []
            raise CommitFailedError(
                f"cannot commit {self.operation} to table {self.table.uri}: this transaction read "
                f"version {self.read_version}, but commits made since then are gone from the log "
                f"(deleted by log cleanup past delta.logRetentionDuration: {e}), so they cannot "
                "be checked for conflicts. Re-read the table and run the transaction again."
            ) from None

    def _rebase(self, commits: Iterable[Commit], summary: TransactionSummary,
                winners: list[int]) -> Commit | None:
        """Check commits this transaction has not seen; the one that is this transaction's own
        earlier attempt, if any.

        A retry after an ambiguous failure (the write landed, the answer was lost) may find its
        table object already past the landed attempt: read by ``update()`` or by another thread
        sharing the object.  That attempt never conflicts with the retry (an append does not
        conflict with itself), so without looking for the ``txnId`` the retry would commit the
        same transaction a second time.
        """
        for c in commits:
            winner = WinningCommit.from_actions(c.version, c.actions)
            if winner.txn_id == self.txn_id:
                return c
            check_conflicts(summary, winner, self.table.uri)
            winners.append(c.version)
        return None

    def _landed_earlier(self, commit: Commit, attempts: int, winners: list[int]) -> CommitResult:
        """An earlier attempt of this transaction is in the log although the log store said the
        version was taken (a request retried after its first try had in fact succeeded).  The
        commit is made; retrying it would make it twice."""
        self._done = True
        data = self.table.log_store.read_commit(commit.version)
        self.result = CommitResult(commit.version, attempts, winners=tuple(winners),
                                   txn_id=self.txn_id, digest=hashlib.sha256(data).hexdigest(),
                                   read_version=self.read_version)
        self.table._post_commit(commit)
        return self.result


def _json_text(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"))
