"""The one write driver: conform, write files, stage, commit, then retry or clean up.

Every path that writes data files and commits them runs its stages through ``run``:
``dc.write`` and ``dc.append`` (``write.py``; through the group committer on a group-commit
table, in this process or the host's), the ``Appender``, Spark's writer, compaction (in
threads or Spark tasks) and the stress writer.  A path is a ``WriteJob``: it says how to
begin its transaction, write its files, stage them and commit, and what to do after a failure
that proves nothing was committed.  The driver owns the sequence and the one rule about the
files (``engine.commit.outcome``):

* a failure before the commit started, or one that proves nothing was committed, deletes the
  files the attempt wrote (unless the job stages them again in its next attempt);
* a failure whose outcome is unknown keeps them: a version may name them.  With
  ``unknown_tries`` above one, the same transaction (the same ``txnId``) is committed again
  first: if the failed attempt landed, the commit loop finds it by its ``txnId`` and reports
  that version instead of committing twice (``loop.CommitLoop.catch_up``).

Files are committed only within the commit window of writing them (``commit_window``): past
it, each must still exist, or all are deleted and ``StagedFilesExpiredError`` says so.

A ``BaseException`` that is not an ``Exception`` (an interrupt, a simulated crash) passes
through untouched, as a process dying there would leave everything behind.

A job over one table object derives from ``TableJob``: the table's location, object store and
clock are what the driver reads of the job, and the transaction its attempt began is ``txn``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from deltacommit.engine.commit.outcome import Outcome, outcome_of
from deltacommit.errors import StagedFilesExpiredError
from deltacommit.io.datafiles import delete_files
from deltacommit.protocol.actions import Add
from deltacommit.protocol.commit_window import may_commit
from deltacommit.protocol.partitions import decode_add_path
from deltacommit.runtime.clock import Clock, now_ms

if TYPE_CHECKING:
    from deltacommit.engine.transaction.transaction import Transaction
    from deltacommit.io.storage.base import ObjectStore

__all__ = ["RECOMMIT_PAUSE", "Attempt", "Decision", "Finished", "JobTable", "TableJob",
           "WriteJob", "run"]

log = logging.getLogger(__name__)

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

#: Seconds before the n-th commit of the same transaction again after an unknown outcome
#: (times n).
RECOMMIT_PAUSE = 0.05


class Decision(enum.Enum):
    """What a job does after a failure that proves nothing was committed."""

    #: The attempt's files are deleted and the error is raised.
    RAISE = "raise"
    #: The attempt's files are deleted and every stage runs again (new transaction, new files).
    REDO = "redo"
    #: The files are kept and staged again by the next attempt, in a new transaction.
    RESTAGE = "restage"


@dataclass(frozen=True, slots=True)
class Finished(Generic[R_co]):
    """The write is done without a commit (already written, nothing left to commit); any file
    the attempt wrote is deleted."""

    value: R_co


class Attempt:
    """One pass through the stages: its transaction, the files it wrote that no version names
    yet, and how far it got."""

    def __init__(self, number: int, store: ObjectStore) -> None:
        #: 1 for the first attempt of a write.
        self.number = number
        #: Where the files are written (the job's store when the attempt began).
        self.store = store
        self.txn: Transaction | None = None
        #: Data files written for this attempt and not committed: deleted or kept by ``run``.
        self.written: list[Add] = []
        #: The writer's clock before the first file was written; None where the job checks
        #: the commit window of its files itself (compaction, bin by bin).
        self.started_ms: int | None = None
        #: Whether the commit was started (failures after that are judged by the table).
        self.committing = False
        #: An error of a commit of this transaction whose outcome was unknown: the files are
        #: then kept whatever the later tries report.
        self.unknown: BaseException | None = None

    def drop(self, adds: Sequence[Add]) -> None:
        """Delete files this attempt wrote and will not stage (compaction's bins that lost a
        file to a concurrent remove, or grew too old to commit)."""
        dropped = {a.path for a in adds}
        self.written = [a for a in self.written if a.path not in dropped]
        discard(self.store, adds)

    def outcome(self, error: BaseException) -> Outcome:
        """What ``error``, ending this attempt, proves about its files."""
        if self.unknown is not None:
            return Outcome.UNKNOWN
        if self.txn is not None and self.txn.result is not None:
            # Committed, and something after the commit failed: the version names the files.
            return Outcome.UNKNOWN
        return outcome_of(error, committing=self.committing)


class WriteJob(Protocol[R_co]):
    """The stages of one write path; ``run`` calls them in order, once per attempt."""

    @property
    def uri(self) -> str: ...

    @property
    def store(self) -> ObjectStore: ...

    @property
    def clock(self) -> Clock: ...

    def begin(self, attempt: Attempt) -> Transaction:
        """The attempt's transaction (the snapshot it reads)."""
        ...

    def write(self, attempt: Attempt) -> Finished[R_co] | None:
        """Conform the rows and write the data files, each added to ``attempt.written`` as
        soon as it exists; ``Finished`` to end the write without a commit."""
        ...

    def stage(self, attempt: Attempt) -> None:
        """Stage the files (and whatever else the commit holds) on the transaction."""
        ...

    def commit(self, attempt: Attempt) -> R_co:
        """Commit the transaction; the write's result."""
        ...

    def refused(self, attempt: Attempt, error: Exception) -> Decision | Finished[R_co]:
        """After ``error``, which proves nothing was committed: raise, redo, restage, or
        finish without the files (a concurrent writer recorded this write's app version)."""
        ...


class JobTable(Protocol):
    """What the driver reads of a job's table (``DeltaTable`` is one)."""

    @property
    def uri(self) -> str: ...

    @property
    def store(self) -> ObjectStore:
        """The object store of the table's location, where the job's files are written."""
        ...

    @property
    def clock(self) -> Clock:
        """The writer's clock, that the commit window of the job's files is measured by."""
        ...


TableT = TypeVar("TableT", bound=JobTable)


class TableJob(Generic[TableT]):
    """The part of a ``WriteJob`` over one table object that every such job shares: its
    ``uri``, ``store`` and ``clock`` are the table's, read from ``table`` each time (a job may
    open its table again between attempts), and ``txn`` is the transaction its ``begin`` made
    (which sets ``_txn``)."""

    def __init__(self, table: TableT) -> None:
        self.table = table
        self._txn: Transaction | None = None

    @property
    def uri(self) -> str:
        return self.table.uri

    @property
    def store(self) -> ObjectStore:
        return self.table.store

    @property
    def clock(self) -> Clock:
        return self.table.clock

    @property
    def txn(self) -> Transaction:
        """The transaction of the attempt under way."""
        assert self._txn is not None, "begin() first"
        return self._txn


def run(job: WriteJob[R], *, unknown_tries: int = 1,
        on_unknown: Callable[[BaseException, int], None] | None = None) -> R:
    """Drive ``job`` through its stages until it commits, finishes or fails (module
    docstring).  ``unknown_tries``: how many times the same transaction is committed while
    the outcome stays unknown; ``on_unknown(error, tries)`` is told of each such failure that
    is tried again."""
    number = 0
    while True:
        number += 1
        attempt = Attempt(number, job.store)
        try:
            attempt.txn = job.begin(attempt)
            attempt.started_ms = now_ms(job.clock)
            finished = job.write(attempt)
            if finished is not None:
                discard(attempt.store, attempt.written)
                return finished.value
            job.stage(attempt)
            check_window(job, attempt)
            return _commit(job, attempt, unknown_tries, on_unknown)
        except Exception as e:
            if attempt.outcome(e) is Outcome.UNKNOWN:
                keep(attempt.store, attempt.written)
                raise
            decision = job.refused(attempt, e)
            if decision is not Decision.RESTAGE:
                discard(attempt.store, attempt.written)
            if isinstance(decision, Finished):
                return decision.value
            if decision is Decision.RAISE:
                raise


def _commit(job: WriteJob[R], attempt: Attempt, tries: int,
            on_unknown: Callable[[BaseException, int], None] | None) -> R:
    attempt.committing = True
    n = 0
    while True:
        n += 1
        try:
            return job.commit(attempt)
        except Exception as e:
            if outcome_of(e) is not Outcome.UNKNOWN:
                raise
            attempt.unknown = e
            if n >= tries or (attempt.txn is not None and attempt.txn.result is not None):
                raise
            if on_unknown is not None:
                on_unknown(e, n)
            job.clock.sleep(RECOMMIT_PAUSE * n)


def check_window(job: WriteJob[R], attempt: Attempt) -> None:
    """Before committing files whose writing began at ``attempt.started_ms``: past the window
    in which no VACUUM can have deleted them (``commit_window``), each must still exist, or
    StagedFilesExpiredError says so (and ``run`` deletes the rest: nothing was committed).  A
    write cannot be redone silently as a compaction bin can, so an old one that is whole
    still commits: only a VACUUM whose retention the operator set below the write's duration
    can race it."""
    started = attempt.started_ms
    if started is None or not attempt.written or may_commit(started, now_ms(job.clock)):
        return
    store = attempt.store
    paths = [decode_add_path(a.path) for a in attempt.written]
    store.await_puts(paths)
    missing = [p for p in paths if not store.exists(p)]
    if missing:
        raise StagedFilesExpiredError(
            f"write to table {job.uri}: {len(missing)} of the {len(paths)} files it wrote "
            f"(first {missing[0]}) were deleted before it could commit them, after "
            f"{(now_ms(job.clock) - started) / 60_000:.0f} minutes (a VACUUM with a "
            "short retention?); the others were deleted too and nothing was committed")


def discard(store: ObjectStore, adds: Sequence[Add]) -> None:
    """Delete files no version names (best effort: a delete that fails leaves them to VACUUM,
    and never hides the error that made the write give up)."""
    if not adds:
        return
    try:
        delete_files(store, adds)
    except Exception as e:
        log.warning("could not delete %d data files no commit names (first %s): %s; VACUUM "
                    "removes them", len(adds), adds[0].path, e)


def keep(store: ObjectStore, adds: Sequence[Add]) -> None:
    """Leave files a version may name, their uploads ended.  A failed upload of one of them
    need not be remembered: no commit names a file whose upload failed (the loop makes every
    file durable before its claim), and no later commit of this write will."""
    if not adds:
        return
    try:
        store.await_puts([decode_add_path(a.path) for a in adds], forget=True)
    except Exception as e:  # pragma: no cover - forget drops the failures themselves
        log.warning("waiting for the uploads of %d data files failed: %s", len(adds), e)
