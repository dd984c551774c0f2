"""Which failures of a commit prove that nothing was committed: the one cleanup rule.

A writer writes its data files first and commits them afterwards.  When the commit fails, the
files are deleted only if the failure proves that no version names them; where the outcome is
unknown they are kept (a file deleted that a version names is data loss, a file kept that
nothing names is only a leak, which VACUUM removes after the retention).  Every write path
decides with this module: the write driver (``ops.driver``) for the files a writer wrote
itself, and the group committer (``engine.group.threads``) for the files its leader wrote
for coalesced appends.

The rule has two parts:

* **Where it failed.**  A failure before the commit was started (conforming the rows, writing
  the files, staging them, the commit window's check) commits nothing, whatever it is.
* **What failed, once the commit was started** (``RULES``, the first match in order): the
  errors the commit engine raises before or instead of sending a claim prove that nothing was
  committed; anything else (a request to the store or to DynamoDB whose answer was lost, a
  crash, a timeout, an error this table does not know) leaves the outcome unknown.

Once an attempt of a transaction ended with an unknown outcome, its files are kept whatever
its later attempts report: that attempt may still land (a request held by the network).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from deltacommit.errors import (
    CommitFailedError,
    ConcurrentModificationException,
    ConstraintViolationError,
    CoordinationMismatchError,
    CorruptLogError,
    InvalidArgumentError,
    LogStoreError,
    RewriteCheckError,
    SchemaMismatchError,
    StagedFilesExpiredError,
    StorageError,
    TableReplacedError,
    UnsupportedProtocolError,
)

__all__ = ["RULES", "Outcome", "Rule", "outcome_of", "rule_for"]


class Outcome(enum.Enum):
    """What a failed commit proves about the files it would have committed."""

    #: No version names them, and none ever will: they may be deleted.
    NOT_COMMITTED = "not committed"
    #: A version may name them (now or once a request still in flight lands): kept.
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the table: an error class, what it proves, why, and what the writers do
    next (the write driver's paths; ``ops.driver``)."""

    error: type[BaseException]
    outcome: Outcome
    why: str
    retry: str


_NOT = Outcome.NOT_COMMITTED
_UNKNOWN = Outcome.UNKNOWN

#: The cleanup table, the first matching row deciding.  Subclasses come before their bases.
RULES: tuple[Rule, ...] = (
    Rule(ConcurrentModificationException, _NOT,
         "found by the conflict checks against the versions committed since the snapshot, "
         "before a claim or after losing one; a version holding the transaction's own txnId "
         "resolves it as committed instead of failing it",
         "a concurrent commit of the same app id that recorded this write: skipped as "
         "written; identity values taken by a concurrent writer, or a state taken from the "
         "process's cache: written again from a fresh read; compaction after a concurrent "
         "remove: the bins still intact committed again with the same files; else raised"),
    Rule(TableReplacedError, _NOT,
         "the proof that the cached state is the table's is awaited before the claim",
         "a write on a cached state is written again from a fresh read; else raised"),
    Rule(CoordinationMismatchError, _NOT,
         "the commit mechanism is checked before the claim; a DynamoDB claim found void is "
         "withdrawn before this is raised",
         "as TableReplacedError"),
    Rule(StagedFilesExpiredError, _NOT,
         "the commit window is checked before the commit starts",
         "raised (compaction leaves the bin for its next run)"),
    Rule(RewriteCheckError, _NOT,
         "a rewrite's output is proven before it is staged",
         "raised"),
    Rule(SchemaMismatchError, _NOT,
         "the rows and the schema are checked before anything is claimed",
         "a write on a cached state is written again from a fresh read; else raised"),
    Rule(ConstraintViolationError, _NOT,
         "invariants, CHECK constraints and generated columns are checked while conforming",
         "as SchemaMismatchError"),
    Rule(UnsupportedProtocolError, _NOT,
         "the protocol is checked before the claim (and by the conflict checks after a loss)",
         "as SchemaMismatchError"),
    Rule(InvalidArgumentError, _NOT,
         "the transaction is validated before the claim (files added twice, removes on an "
         "append-only table, a metaData no reader accepts)",
         "as SchemaMismatchError"),
    Rule(CommitFailedError, _UNKNOWN,
         "a commit loop that gave up has committed nothing, but the same error reports a "
         "failure of the host's committer (another process) whose outcome is unknown",
         "raised; the stress writer commits the same transaction again"),
    Rule(CorruptLogError, _UNKNOWN,
         "raised while reading the log, which happens after a claim too",
         "raised"),
    Rule(StorageError, _UNKNOWN,
         "a request whose answer was lost may have taken effect: the claim may have landed",
         "raised; a caller committing the same transaction again finds its own version by "
         "txnId (the stress writer does, up to its limit)"),
    Rule(LogStoreError, _UNKNOWN,
         "an ambiguous DynamoDB write (a claim or the step marking it complete) may have "
         "taken effect",
         "as StorageError"),
    Rule(BaseException, _UNKNOWN,
         "anything else: a crash or timeout in the middle of the claim, an interrupt, a bug",
         "raised"),
)


def rule_for(error: BaseException) -> Rule:
    """The row of ``RULES`` that decides ``error``."""
    for rule in RULES:
        if isinstance(error, rule.error):
            return rule
    raise AssertionError("RULES ends with BaseException")  # pragma: no cover


def outcome_of(error: BaseException, *, committing: bool = True) -> Outcome:
    """What ``error`` proves about a commit's files; ``committing``: whether the commit had
    been started when it was raised (before that, nothing can have been committed)."""
    if not committing:
        return Outcome.NOT_COMMITTED
    return rule_for(error).outcome
