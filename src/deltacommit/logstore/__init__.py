"""Log stores: how ``N.json`` comes to exist exactly once, per coordination mechanism."""

from __future__ import annotations

from collections.abc import Mapping

from deltacommit.aws import AwsConfig
from deltacommit.logstore.base import COORDINATION_KEY, LogStore
from deltacommit.logstore.conditional import ConditionalPutLogStore
from deltacommit.storage import open_store

__all__ = ["COORDINATION_KEY", "ConditionalPutLogStore", "LogStore", "open_log_store"]


def open_log_store(uri: str, storage_options: Mapping[str, str] | None = None) -> LogStore:
    """The log store the options ask for on this location (conditional put by default)."""
    store = open_store(uri, storage_options)
    config = getattr(store, "config", None)
    if isinstance(config, AwsConfig) and config.conditional_put.mode == "dynamo":
        # conditional_put=dynamo:<table>[:<timeout_ms>]: object_store's DynamoCommit leases.
        from deltacommit.logstore.dynamo_commit import DynamoCommitLogStore

        return DynamoCommitLogStore.for_store(store)
    return ConditionalPutLogStore(store)
