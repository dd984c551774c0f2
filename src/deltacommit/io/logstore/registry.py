"""Which log store commits to a location: one registry of log-store factories by mechanism.

A mechanism is registered with a factory (``factory(store) -> LogStore`` for the location's
object store) and a selector (``selects(store) -> bool``: whether the store's options ask for
it).  ``open_log_store`` tries the selectors in the order the mechanisms were registered and
uses the first that selects, else ``DEFAULT_MECHANISM``.  Built in, in that order:

``conditional``
    the store's own atomic create (S3 ``If-None-Match``, a hard link locally): the default
``dynamo-commit``
    object_store's DynamoCommit leases, selected by ``conditional_put=dynamo:<table>``
``dynamodb``
    Spark's S3DynamoDBLogStore protocol, selected by ``AWS_S3_LOCKING_PROVIDER=dynamodb``

``register_log_store`` adds a mechanism or overrides a built-in one (as delta-rs's log store
factories allow).  The mechanisms a table can record (``coordination.MECHANISMS``) are the
registered ones.  The DynamoDB factories import their modules, and with them botocore, only when
selected.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from deltacommit.errors import StorageConfigError
from deltacommit.io.aws.config import AwsConfig
from deltacommit.io.logstore.base import (
    CONDITIONAL_MECHANISM,
    DYNAMO_COMMIT_MECHANISM,
    DYNAMODB_MECHANISM,
    LogStore,
)
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.storage.base import ObjectStore
from deltacommit.io.storage.registry import open_store
from deltacommit.runtime.process_state import ForkSafeLock

#: ``factory(store)``: the log store committing to the table at ``store``.
LogStoreFactory = Callable[[ObjectStore], LogStore]
#: ``selects(store)``: whether the options ``store`` was opened with ask for this mechanism.
Selector = Callable[[ObjectStore], bool]

#: The mechanism of a location whose options select no other.
DEFAULT_MECHANISM = CONDITIONAL_MECHANISM


@dataclass(frozen=True, slots=True)
class _Registration:
    factory: LogStoreFactory
    selects: Selector | None


_REGISTRY: dict[str, _Registration] = {}
#: The registrations are the process's by design (the extension points); a forked child keeps
#: them, with a lock of its own.
_LOCK = ForkSafeLock()



def register_log_store(mechanism: str, factory: LogStoreFactory,
                       selects: Selector | None = None) -> LogStoreFactory | None:
    """Commit through ``factory`` for ``mechanism`` from now on; returns the factory it
    replaces, if any.

    ``selects`` says when the options choose this mechanism; None: only as the default (or for
    a mechanism opened by name with ``log_store_factory``).  A mechanism registered again keeps
    its place in the order selectors are tried.
    """
    if not mechanism:
        raise ValueError("a mechanism needs a name")
    with _LOCK:
        previous = _REGISTRY.get(mechanism)
        _REGISTRY[mechanism] = _Registration(factory, selects)
    return None if previous is None else previous.factory


def unregister_log_store(mechanism: str) -> LogStoreFactory | None:
    """Forget ``mechanism``; returns its factory (None if it had none)."""
    with _LOCK:
        previous = _REGISTRY.pop(mechanism, None)
    return None if previous is None else previous.factory


def registered_mechanisms() -> tuple[str, ...]:
    """The registered mechanisms, in the order their selectors are tried."""
    with _LOCK:
        return tuple(_REGISTRY)


def log_store_factory(mechanism: str) -> LogStoreFactory:
    """The factory registered for ``mechanism``; StorageConfigError naming the known ones."""
    with _LOCK:
        registration = _REGISTRY.get(mechanism)
    if registration is None:
        raise StorageConfigError(f"no log store is registered for the commit mechanism "
                                 f"{mechanism!r}; known: {', '.join(registered_mechanisms())}")
    return registration.factory


def log_store_for(store: ObjectStore) -> LogStore:
    """The log store the options of ``store`` select (the default mechanism when none does)."""
    with _LOCK:
        registrations = list(_REGISTRY.values())
    for registration in registrations:
        if registration.selects is not None and registration.selects(store):
            return registration.factory(store)
    return log_store_factory(DEFAULT_MECHANISM)(store)


def open_log_store(uri: str, storage_options: Mapping[str, str] | None = None) -> LogStore:
    """The log store the options ask for on this location (conditional put by default).

    On S3: ``conditional_put=dynamo:<table>`` selects object_store's DynamoCommit leases,
    ``AWS_S3_LOCKING_PROVIDER=dynamodb`` Spark's S3DynamoDBLogStore protocol.
    Elsewhere (local paths, memory) the store's own atomic create serves every writer, and the
    AWS options are not consulted.
    """
    return log_store_for(open_store(uri, storage_options))


# --------------------------------------------------------------------------- the built-in mechanisms


def aws_config_of(store: ObjectStore) -> AwsConfig | None:
    """The resolved AWS settings of an S3 store; None for stores that are not on S3."""
    config = getattr(store, "config", None)
    return config if isinstance(config, AwsConfig) else None


def _conditional(store: ObjectStore) -> LogStore:
    return ConditionalPutLogStore(store)


def _dynamo_commit(store: ObjectStore) -> LogStore:
    # Refused, naming both, if AWS_S3_LOCKING_PROVIDER is set too.
    from deltacommit.io.logstore.dynamo_commit.log_store import DynamoCommitLogStore

    return DynamoCommitLogStore.for_store(store)


def _selects_dynamo_commit(store: ObjectStore) -> bool:
    aws = aws_config_of(store)
    return aws is not None and aws.conditional_put.mode == "dynamo"


def _dynamodb(store: ObjectStore) -> LogStore:
    from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore

    aws = aws_config_of(store)
    if aws is None:
        raise StorageConfigError(f"{store.uri}: Spark's S3DynamoDBLogStore protocol "
                                 "(AWS_S3_LOCKING_PROVIDER=dynamodb) applies to S3 locations only")
    return DynamoDBLogStore(store, aws)


def _selects_dynamodb(store: ObjectStore) -> bool:
    aws = aws_config_of(store)
    return aws is not None and aws.locking_provider == "dynamodb"


register_log_store(CONDITIONAL_MECHANISM, _conditional)
register_log_store(DYNAMO_COMMIT_MECHANISM, _dynamo_commit, selects=_selects_dynamo_commit)
register_log_store(DYNAMODB_MECHANISM, _dynamodb, selects=_selects_dynamodb)
