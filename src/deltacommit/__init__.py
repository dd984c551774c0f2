"""deltacommit: exactly-once commits to Delta Lake tables from many concurrent writers.

The public interface (README.md; the layers in docs/ARCHITECTURE.md): ``DeltaTable``,
``write``, the transaction API, the exceptions and the extension points (``register_store``,
``register_log_store``), all importable from here; the PySpark front end is
``deltacommit.spark``.

Importing the package loads only the exceptions.  Every other name loads its module on first
use (``__getattr__`` below): a short-lived process (a Lambda function, a CLI call) pays only for
the modules its calls need, and ``import deltacommit`` costs a few milliseconds.  Inside the
package, modules import each other at module level; this is the one boundary where loading is
deferred (docs/ARCHITECTURE.md, "Imports").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
    MergeCardinalityError,
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

if TYPE_CHECKING:
    from deltacommit.engine.group.fleet.policy import FleetPolicy
    from deltacommit.engine.group.threads import GroupCommitPolicy
    from deltacommit.engine.transaction.transaction import (
        CommitPolicy,
        CommitResult,
        Transaction,
    )
    from deltacommit.io.logstore.base import LogStore
    from deltacommit.io.logstore.registry import register_log_store, unregister_log_store
    from deltacommit.io.storage.base import ObjectStore, PutMode
    from deltacommit.io.storage.registry import register_store, unregister_store
    from deltacommit.ops.write import WriteResult
    from deltacommit.protocol.table_config.properties import IsolationLevel
    from deltacommit.table import Appender, DeltaTable, append, write

#: Where each lazily loaded public name lives.
_LAZY: dict[str, str] = {
    "Appender": "deltacommit.table",
    "CommitPolicy": "deltacommit.engine.transaction.transaction",
    "CommitResult": "deltacommit.engine.transaction.transaction",
    "DeltaTable": "deltacommit.table",
    "FleetPolicy": "deltacommit.engine.group.fleet.policy",
    "GroupCommitPolicy": "deltacommit.engine.group.threads",
    "IsolationLevel": "deltacommit.protocol.table_config.properties",
    "LogStore": "deltacommit.io.logstore.base",
    "ObjectStore": "deltacommit.io.storage.base",
    "PutMode": "deltacommit.io.storage.base",
    "Transaction": "deltacommit.engine.transaction.transaction",
    "WriteResult": "deltacommit.ops.write",
    "append": "deltacommit.table",
    "register_log_store": "deltacommit.io.logstore.registry",
    "register_store": "deltacommit.io.storage.registry",
    "unregister_log_store": "deltacommit.io.logstore.registry",
    "unregister_store": "deltacommit.io.storage.registry",
    "write": "deltacommit.table",
}


def __getattr__(name: str) -> Any:
    """Load a public name's module on first use, and keep the name here for the next."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'deltacommit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
    "LogStore",
    "LogStoreError",
    "MergeCardinalityError",
    "MetadataChangedException",
    "MissingVersionError",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "ObjectStore",
    "PreconditionFailedError",
    "ProtocolChangedException",
    "PutMode",
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
    "register_log_store",
    "register_store",
    "unregister_log_store",
    "unregister_store",
    "write",
]
