"""Every exception deltacommit raises, in one place.

The conflict exceptions keep the names PySpark users know from ``delta.exceptions`` so that
code written against Delta on Spark can catch the same names here.  Each error message names
the table, file or key involved and what was expected, because the reader of the message is
usually an operator looking at a failed pipeline, not the author of the code.
"""

from __future__ import annotations


class DeltaCommitError(Exception):
    """Base class of all deltacommit errors."""


# --------------------------------------------------------------------------- storage


class StorageError(DeltaCommitError):
    """An object store operation failed; the message names the operation and the path."""

    def __init__(self, operation: str, path: str, detail: str = "") -> None:
        self.operation = operation
        self.path = path
        self.detail = detail
        msg = f"{operation} {path} failed"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class ObjectNotFoundError(StorageError):
    """The object does not exist."""


class NotARegularFileError(StorageError):
    """The path names a directory, a symbolic link, a FIFO or a device where a file of the
    table is expected: never read (a FIFO would block the reader), never written over."""


class ChangedWhileReadError(StorageError):
    """A local file held other bytes than the size checked when it was opened: it was cut
    short or grew while being read (written over in place).  A table's files never are, so
    this fails a read; a hint (``_last_checkpoint``) that is is ignored."""


class AccessDeniedError(StorageError):
    """The store refused the operation to this user (file permissions, bucket policy)."""


class ObjectExistsError(StorageError):
    """A put-if-absent or copy-if-absent found the object already there."""


class PreconditionFailedError(StorageError):
    """A put-if-match found a different version (ETag) of the object, or none."""


class StorageConfigError(DeltaCommitError):
    """The storage options or the environment describe something that cannot work."""


# --------------------------------------------------------------------------- tables and log


class TableNotFoundError(DeltaCommitError):
    """There is no Delta table at the given location."""


class TableExistsError(DeltaCommitError):
    """A table already exists where one was to be created."""


class TableReplacedError(DeltaCommitError):
    """The table at a location is not the one a cached state describes (deleted and created
    again): nothing was committed, and the write must start from a fresh read."""


class CorruptLogError(DeltaCommitError):
    """A commit file or checkpoint cannot be read as the Delta protocol defines it."""


class MissingVersionError(CorruptLogError):
    """The log skips a version: the table cannot be reconstructed past the gap."""


class UnsupportedProtocolError(DeltaCommitError):
    """The table needs a reader or writer version or a table feature this library lacks."""


class SchemaMismatchError(DeltaCommitError):
    """Data does not match the table's schema, or a schema cannot be converted."""


class UnsupportedTypeError(SchemaMismatchError):
    """A schema uses a data type deltacommit cannot read or write (variant, interval, ...)."""


class ConstraintViolationError(DeltaCommitError):
    """Data violates a constraint of the table; nothing was written."""


class InvariantViolationError(ConstraintViolationError):
    """Data violates a column invariant (``delta.invariants``)."""


class CheckConstraintViolationError(ConstraintViolationError):
    """Data violates a CHECK constraint (``delta.constraints.<name>``)."""


class GeneratedColumnMismatchError(ConstraintViolationError):
    """Data supplies a generated column with values its generation expression does not give."""


class InvalidArgumentError(DeltaCommitError, ValueError):
    """An argument (partition column, predicate, mode, option) is not valid for this table."""


class ExpressionValueError(InvalidArgumentError):
    """A row's values make an expression of the table (a generated column, a CHECK constraint)
    fail where Spark, with ANSI mode on (Spark 4's default), fails it: integer overflow,
    division by zero, a cast the value does not fit.  Nothing was written."""


class MergeCardinalityError(InvalidArgumentError):
    """A MERGE would update or delete a target row that several source rows match, which
    Spark refuses (``DELTA_MULTIPLE_SOURCE_ROW_MATCHING_TARGET_ROW_IN_MERGE``): which source
    row's change wins would be arbitrary.  Nothing was written."""


class RewriteCheckError(DeltaCommitError):
    """A rewrite (compaction, Z-order, a row-level delete) wrote files that do not hold exactly
    the rows it should have: the files were deleted and nothing was committed."""


class StagedFilesExpiredError(DeltaCommitError):
    """Files a writer wrote are too old to commit safely: a concurrent VACUUM may have deleted
    them (``staged_files``).  They were deleted and nothing was committed; write again."""


class CoordinationMismatchError(DeltaCommitError):
    """The writer's commit mechanism differs from the one the table was created with.

    Writers using different mechanisms do not exclude each other, so committing would risk
    lost commits; the writer refuses instead.
    """


class LogStoreError(DeltaCommitError):
    """The commit coordinator (DynamoDB table, lease table) is missing, misconfigured or failing."""


class CommitFailedError(DeltaCommitError):
    """A commit could not be made: attempts exhausted or a non-retryable error."""


class VersionExistsError(DeltaCommitError):
    """Another writer already created this version of the log.

    Raised by log stores to the commit loop; users see it only from the low-level API.
    """

    def __init__(self, table: str, version: int) -> None:
        self.table = table
        self.version = version
        super().__init__(f"version {version} of table {table} already exists")


# --------------------------------------------------------------------------- conflicts


class ConcurrentModificationException(DeltaCommitError):
    """A concurrent commit conflicts with this transaction (Delta's conflict matrix)."""

    def __init__(self, message: str, *, winning_version: int | None = None,
                 operation: str | None = None) -> None:
        self.winning_version = winning_version
        self.operation = operation
        super().__init__(message)


class ConcurrentAppendException(ConcurrentModificationException):
    """Files were added to a partition (or table) this transaction read."""


class ConcurrentDeleteReadException(ConcurrentModificationException):
    """A file this transaction read was removed by a concurrent commit."""


class ConcurrentDeleteDeleteException(ConcurrentModificationException):
    """A file this transaction removes was also removed by a concurrent commit."""


class MetadataChangedException(ConcurrentModificationException):
    """The table metadata (schema, partitioning, properties) changed concurrently."""


class ConcurrentTransactionException(ConcurrentModificationException):
    """An application transaction id this transaction read was updated concurrently."""


class ProtocolChangedException(ConcurrentModificationException):
    """The table protocol was changed concurrently."""
