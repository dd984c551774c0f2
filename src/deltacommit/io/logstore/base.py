"""The log store: the one place that decides how ``N.json`` comes to exist exactly once.

Everything above (snapshots, transactions) talks to a log store only through this interface:
write a version if nobody else has, read a version (repairing it first where the protocol
leaves that to readers), and list the log.  The mechanisms differ (conditional put, Spark's
DynamoDB entries, object_store's leases) but the promise is the same: ``write_commit`` succeeds
for exactly one writer per version, and a version anyone has been told exists can be read.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from deltacommit.errors import (
    CorruptLogError,
    MissingVersionError,
    NotARegularFileError,
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
    StorageError,
)
from deltacommit.io.storage.background import ProcessPool
from deltacommit.io.storage.base import ObjectStore
from deltacommit.protocol.fleet.record import round_path
from deltacommit.protocol.log.names import (
    LOG_DIR,
    LogFile,
    commit_path,
    format_gaps,
    parse_log_name,
    version_gaps,
)
from deltacommit.protocol.table_config.properties import COORDINATION

# How many consecutive new versions to probe one by one before listing instead.
_PROBE_LIMIT = 8
#: Commits of a range are read in parallel, on one pool of 16 threads for the process
#: (``storage.background``: started afresh in a forked child, inline at shutdown) rather than
#: on threads started for each range.
_READS = ProcessPool(16, "deltacommit-log-read")


#: (monotonic seconds, wall-clock seconds) of an observation.
Moment = tuple[float, float]


class Baton(Protocol):
    """The commit loop's turn among the writers of this host (``engine.host_turn``), as a log
    store sees it while writing a version: a store whose claim is followed by requests of its
    own (the DynamoDB entry's completion) hands the turn on early, and waits, before its own
    claim, for the word of the writer it took the turn from."""

    def written(self, version: int) -> None:
        """``version``'s commit file holds the commit: the next writer may claim."""

    def await_previous(self, version: int) -> None:
        """Wait, bounded by the turn's patience, until the writer the turn came from says it
        is done with ``version``: only when to look, never what is there (the caller checks
        the previous version itself, as if unaided)."""


class LogStore(ABC):
    #: The coordination mechanism, recorded in a table's configuration at creation so that a
    #: writer using a different one refuses to commit (mechanisms do not exclude each other).
    mechanism: str
    store: ObjectStore

    @property
    def table_uri(self) -> str:
        return self.store.uri

    def coordination_config(self, recorded: Mapping[str, str | None] | None = None
                            ) -> dict[str, str]:
        """Configuration keys recorded in a new table to pin its coordination mechanism.

        ``recorded``: what the table records, which a log store may follow where its own
        key is ambiguous (the DynamoDB log store's ``tablePath`` when no entry shows it)."""
        return {COORDINATION_KEY: self.mechanism}

    @abstractmethod
    def write_commit(self, version: int, data: bytes) -> None:
        """Create ``N.json`` with ``data`` if no writer has; VersionExistsError otherwise.

        Returning normally means the commit is durable and will be visible to every reader.
        """

    def write_commit_when_ready(self, version: int, data: bytes,
                                ready: Callable[[], None], baton: Baton | None = None) -> None:
        """``write_commit``, claiming the version only once ``ready()`` has returned; what it
        raises ends the attempt with nothing claimed.

        The commit loop passes the wait for the data files the version names (their uploads
        run in the background).  A mechanism with requests of its own before the claim (the
        DynamoDB log store's temp file) makes them while the files upload; here there are
        none, so the wait comes first.  ``baton``: the host's turn, when the loop holds it;
        here the loop hands it on once this returns.
        """
        ready()
        self.write_commit(version, data)

    def claim_fleet_round(self, version: int) -> bool:
        """Whether this writer won the round of fleet-wide group commit that commits
        ``version`` (``engine.group.fleet``): the first conditional create of the round's key
        wins.  A hint only: the round's winner still claims ``version`` through
        ``write_commit``, which alone decides it.  Here the key is an object beside the
        published transactions (``_deltacommit_fleet/<version>.round``), which the committer
        of a later round deletes."""
        try:
            self.store.put_if_absent(round_path(version), b"")
        except (ObjectExistsError, PreconditionFailedError):
            return False
        return True

    def identity(self) -> tuple[str, ...] | None:
        """What tells this table and how its versions are claimed apart from every other,
        from the values the clients resolved (``ObjectStore.identity``): names the table's
        host turn (``engine.host_turn``).  None where no other process can share the table."""
        where = self.store.identity()
        return None if where is None else (self.mechanism, *where)

    def read_commit(self, version: int) -> bytes:
        """The content of a commit; ObjectNotFoundError if the version does not exist.

        A name that exists but is not a commit file (a directory, a FIFO, a symbolic link)
        is a CorruptLogError at once: every claim of the version fails on it, so a writer
        that took it for a missing version would lose the race for it until out of attempts.
        """
        try:
            return self.store.get(commit_path(version))
        except NotARegularFileError as e:
            raise unreadable_version(self.table_uri, version, e) from None

    def look_for_commit(self, version: int) -> bytes:
        """The content of a commit that another writer is making right now, once its commit
        file is there; ObjectNotFoundError while it is not.

        Unlike ``read_commit``, nothing is repaired: where a claim is followed by its writer's
        own requests (the DynamoDB log store's copy of its temp file and the entry's
        completion), the version is left to that writer, which is presumably finishing it;
        a repair beside it costs requests of its own and fails the writer's copy and
        completion.  A caller that waited long enough to doubt the writer is alive reads the
        version with ``read_commit``.  Here the two are one."""
        return self.read_commit(version)

    def list_log(self, from_version: int = 0) -> list[LogFile]:
        """Recognised ``_delta_log`` files with version >= ``from_version``, sorted by name."""
        # Every log file name begins with a digit; starting after "_delta_log/0"'s predecessors
        # skips the temporary-file folder ``.tmp/``, which grows by a file per commit attempt.
        start_after = (f"{LOG_DIR}/{from_version - 1:020d}.z" if from_version > 0
                       else f"{LOG_DIR}/0")
        out: list[LogFile] = []
        for meta in self.store.list(f"{LOG_DIR}/", start_after=start_after):
            name = meta.path[len(LOG_DIR) + 1:]
            if "/" in name:
                continue
            lf = parse_log_name(name, meta.size, meta.last_modified_ms)
            if lf is not None:
                out.append(lf)
        out.sort(key=lambda f: f.name)
        return out

    def latest_version_hint(self) -> int | None:
        """The newest version if the mechanism knows it without listing, else None."""
        return None

    def read_commits_after(self, version: int) -> list[tuple[int, bytes]]:
        """Every commit newer than ``version``, in order, read as cheaply as possible.

        Probing ``version+1, version+2, ...`` with GETs costs one request per new commit plus
        one miss, which beats a LIST when a writer is only a few versions behind (the common
        case in a commit loop); a writer far behind switches to listing and parallel reads.
        """
        hint = self.latest_version_hint()
        if hint is not None:
            return self.read_range(version + 1, hint)
        out: list[tuple[int, bytes]] = []
        v = version + 1
        for _ in range(_PROBE_LIMIT):
            try:
                out.append((v, self.read_commit(v)))
            except ObjectNotFoundError:
                return out
            v += 1
        listed = [f.version for f in self.list_log(v) if f.kind == "commit"]
        if not listed:
            return out
        return out + self.read_range(v, max(listed))

    def read_after_loss(self, version: int) -> list[tuple[int, bytes]]:
        """Commits from ``version`` on, just after a claim of ``version`` failed because it
        exists: that one alone where it can be read, since the next claim probes for newer
        ones anyway (one request fewer than probing, and one round trip less before it)."""
        try:
            return [(version, self.read_commit(version))]
        except ObjectNotFoundError:
            return self.read_commits_after(version - 1)

    def read_range(self, first: int, last: int, *, listed: bool = False
                   ) -> list[tuple[int, bytes]]:
        """Read versions ``first..last``; a missing one in between is a gap in the log.

        ``listed``: the caller has just found every one of them (in a listing, or probed),
        so the listing that otherwise guards a wide range is not repeated.
        """
        if last < first:
            return []
        if last - first >= _PROBE_LIMIT and not listed:
            # Check a wide range against one listing before reading it: a stray commit far
            # ahead must be a gap found at once, not millions of reads.
            versions_listed = sorted({f.version for f in self.list_log(first)
                                      if f.kind == "commit"})
            gaps = version_gaps(versions_listed, first, last)
            if gaps:
                raise MissingVersionError(
                    f"table {self.table_uri}: the log has version {last} but lacks version(s) "
                    f"{format_gaps(gaps)}")
        versions = list(range(first, last + 1))
        try:
            if len(versions) == 1:
                return [(first, self.read_commit(first))]
            datas = _READS.map(self.read_commit, versions)
        except ObjectNotFoundError as e:
            raise MissingVersionError(
                f"table {self.table_uri}: the log has version {last} but a commit between "
                f"{first} and {last} is missing ({e})") from None
        return list(zip(versions, datas, strict=True))

    def describe(self) -> Iterator[tuple[str, str]]:
        """Human-readable facts for ``deltacommit show``."""
        yield "log store", self.mechanism
        yield "location", self.table_uri


def unreadable_version(table: str, version: int, e: StorageError) -> CorruptLogError:
    """The error for a version whose name exists but cannot be read as a commit file."""
    return CorruptLogError(
        f"table {table}: version {version} exists but is not a readable commit file: {e}. "
        f"No writer can commit version {version} while it is there, and readers cannot read "
        "past it; move it out of _delta_log (nothing was committed)")


#: The table property recording the commit mechanism (``TableConfig.coordination``).
COORDINATION_KEY = COORDINATION
#: The names of the built-in mechanisms (``LogStore.mechanism``), as tables record them.  Here,
#: not beside each log store, so that the registry names them without importing botocore.
CONDITIONAL_MECHANISM = "conditional"
DYNAMODB_MECHANISM = "dynamodb"
DYNAMO_COMMIT_MECHANISM = "dynamo-commit"
#: Left in ``_delta_log/.tmp/`` by deltacommit's writers on Spark's DynamoDB protocol (see
#: ``logstore.s3_dynamodb.fleet``): the sign, for writers on other mechanisms, that this table is
#: coordinated through DynamoDB.  Log cleanup keeps it.
DYNAMODB_MARKER = f"{LOG_DIR}/.tmp/_deltacommit_dynamodb"
