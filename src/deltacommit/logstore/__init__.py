"""Log stores: how ``N.json`` comes to exist exactly once, per coordination mechanism."""

from __future__ import annotations

from collections.abc import Mapping

from deltacommit.aws import AwsConfig
from deltacommit.logstore.base import COORDINATION_KEY, LogStore
from deltacommit.logstore.conditional import ConditionalPutLogStore
from deltacommit.storage import open_store
from deltacommit.storage.base import ObjectStore

__all__ = ["COORDINATION_KEY", "ConditionalPutLogStore", "LogStore", "open_log_store"]


def open_log_store(uri: str, storage_options: Mapping[str, str] | None = None) -> LogStore:
    """The log store the options ask for on this location (conditional put by default).

    On S3: ``conditional_put=dynamo:<table>`` selects object_store's DynamoCommit leases,
    ``AWS_S3_LOCKING_PROVIDER=dynamodb`` Spark's S3DynamoDBLogStore protocol.
    Elsewhere (local paths, memory) the store's own atomic create serves every writer, and the
    AWS options are not consulted.
    """
    store = open_store(uri, storage_options)
    aws = _aws_config(store)
    if aws is not None and aws.conditional_put.mode == "dynamo":
        # conditional_put=dynamo:<table>[:<timeout_ms>]: object_store's DynamoCommit leases
        # (refused, naming both, if AWS_S3_LOCKING_PROVIDER is set too).
        from deltacommit.logstore.dynamo_commit import DynamoCommitLogStore

        return DynamoCommitLogStore.for_store(store)
    if aws is not None and aws.locking_provider == "dynamodb":
        from deltacommit.logstore.dynamodb import DynamoDBLogStore

        return DynamoDBLogStore(store, aws)
    return ConditionalPutLogStore(store)


def _aws_config(store: ObjectStore) -> AwsConfig | None:
    """The resolved AWS settings of an S3 store; None for stores that are not on S3."""
    config = getattr(store, "config", None)
    return config if isinstance(config, AwsConfig) else None
