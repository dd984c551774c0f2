"""deltacommit: exactly-once commits to Delta Lake tables from many concurrent writers.

The public interface (README.md; the layers in docs/ARCHITECTURE.md): ``DeltaTable``,
``write``, the transaction API and the exceptions, all importable from here; the PySpark front
end is ``deltacommit.spark``.
"""

from __future__ import annotations

from deltacommit.engine.group.fleet.policy import FleetPolicy
from deltacommit.engine.group.threads import GroupCommitPolicy
from deltacommit.engine.transaction.transaction import CommitPolicy, CommitResult, Transaction
from deltacommit.errors import (
    CheckConstraintViolationError,
    CommitFailedError,
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentModificationException,
    ConcurrentTransactionException,
    ConstraintViolationError,
    CoordinationMismatchError,
    CorruptLogError,
    DeltaCommitError,
    ExpressionValueError,
    GeneratedColumnMismatchError,
    InvalidArgumentError,
    InvariantViolationError,
    LogStoreError,
    MetadataChangedException,
    MissingVersionError,
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
    ProtocolChangedException,
    RewriteCheckError,
    SchemaMismatchError,
    StagedFilesExpiredError,
    StorageConfigError,
    StorageError,
    TableExistsError,
    TableNotFoundError,
    TableReplacedError,
    UnsupportedProtocolError,
    UnsupportedTypeError,
    VersionExistsError,
)
from deltacommit.ops.write import WriteResult
from deltacommit.protocol.table_config.properties import IsolationLevel
from deltacommit.table import Appender, DeltaTable, append, write

__version__ = "0.1.0"

__all__ = [
    "Appender",
    "CheckConstraintViolationError",
    "CommitFailedError",
    "CommitPolicy",
    "CommitResult",
    "ConcurrentAppendException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentDeleteReadException",
    "ConcurrentModificationException",
    "ConcurrentTransactionException",
    "ConstraintViolationError",
    "CoordinationMismatchError",
    "CorruptLogError",
    "DeltaCommitError",
    "DeltaTable",
    "ExpressionValueError",
    "FleetPolicy",
    "GeneratedColumnMismatchError",
    "GroupCommitPolicy",
    "InvalidArgumentError",
    "InvariantViolationError",
    "IsolationLevel",
    "LogStoreError",
    "MetadataChangedException",
    "MissingVersionError",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "PreconditionFailedError",
    "ProtocolChangedException",
    "RewriteCheckError",
    "SchemaMismatchError",
    "StagedFilesExpiredError",
    "StorageConfigError",
    "StorageError",
    "TableExistsError",
    "TableNotFoundError",
    "TableReplacedError",
    "Transaction",
    "UnsupportedProtocolError",
    "UnsupportedTypeError",
    "VersionExistsError",
    "WriteResult",
    "__version__",
    "append",
    "write",
]
