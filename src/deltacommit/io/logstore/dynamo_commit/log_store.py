"""Commits through object_store's DynamoCommit leases (``conditional_put = dynamo:<table>``).

``N.json`` is created by a put-if-absent guarded by a DynamoDB lease on its key, so commits
are exactly-once on S3-compatible stores without conditional writes, and exclude the commits
of object_store clients (delta-rs, obstore) configured with the same lease table.

Writes of this mechanism exclude only each other: a writer using S3's ``If-None-Match`` on the
same table would not see the leases.  So a table created here records the mechanism and the
lease table in its configuration, and writers configured otherwise refuse to commit
(``Transaction._check_coordination``).  Other objects the table layer creates conditionally
(checkpoints) go through the same leases, because ``store`` is the guarded store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from deltacommit.errors import ObjectExistsError, StorageConfigError, VersionExistsError
from deltacommit.io.aws.options import DYNAMO_TABLE_NAME, LOCKING_PROVIDER
from deltacommit.io.logstore.base import COORDINATION_KEY, DYNAMO_COMMIT_MECHANISM, LogStore
from deltacommit.io.logstore.dynamo_commit.leases import (
    DynamoCommitStore,
    LeaseTableStatus,
    create_lease_table,
)
from deltacommit.io.storage.base import ObjectStore
from deltacommit.protocol.log.names import commit_path, parse_log_name
from deltacommit.runtime.clock import SYSTEM_CLOCK, Clock

__all__ = ["LEASE_TABLE_KEY", "MECHANISM", "STEPS", "DynamoCommitLogStore", "LeaseTableStatus",
           "create_lease_table"]

#: Table configuration key naming the lease table: writers using another lease table do not
#: exclude this one's, so they are refused like writers of another mechanism.
LEASE_TABLE_KEY = f"{COORDINATION_KEY}.leaseTable"
MECHANISM = DYNAMO_COMMIT_MECHANISM

#: Points of a commit where ``hook(step, version)`` is called: the lease on ``N.json`` is held
#: and nothing written; ``N.json`` is written under the lease.  A hook that raises (or ends the
#: process) there models a writer stopped at that point.
STEPS = ("after_lock", "after_write")

FaultHook = Callable[[str, int], None]


class DynamoCommitLogStore(LogStore):
    mechanism = MECHANISM
    store: DynamoCommitStore

    def __init__(self, store: DynamoCommitStore, *, hook: FaultHook | None = None) -> None:
        """``hook(step, version)`` at each of ``STEPS``: the log store then commits through a
        store like ``store`` that calls it (``store`` itself is left as it is)."""
        self.store = store if hook is None else store.with_hook(_commit_hook(hook))

    @classmethod
    def for_store(cls, store: ObjectStore, *, clock: Clock = SYSTEM_CLOCK,
                  hook: FaultHook | None = None, **kwargs: Any) -> DynamoCommitLogStore:
        """The log store for an S3 store opened with ``conditional_put = dynamo:<table>``."""
        from deltacommit.io.storage.s3 import S3Store

        if not isinstance(store, S3Store):
            raise StorageConfigError(
                f"{store.uri}: conditional_put=dynamo:<table> (object_store's DynamoCommit) "
                "applies to S3 locations only")
        if store.config.locking_provider is not None:
            raise StorageConfigError(
                f"{store.uri}: both {LOCKING_PROVIDER}={store.config.locking_provider} (Spark's "
                f"S3DynamoDBLogStore, table {DYNAMO_TABLE_NAME}={store.config.dynamo_table_name}) "
                f"and conditional_put={store.config.conditional_put} (object_store's DynamoCommit) "
                "are set; they are different commit mechanisms that do not exclude each other: "
                "choose one")
        return cls(DynamoCommitStore.for_s3(
            store, clock=clock, hook=None if hook is None else _commit_hook(hook), **kwargs))

    @property
    def lease_table(self) -> str:
        return self.store.table_name

    def coordination_config(self, recorded: Mapping[str, str | None] | None = None
                            ) -> dict[str, str]:
        return {COORDINATION_KEY: self.mechanism, LEASE_TABLE_KEY: self.store.table_name}

    def write_commit(self, version: int, data: bytes) -> None:
        try:
            self.store.put_if_absent(commit_path(version), data)
        except ObjectExistsError:
            raise VersionExistsError(self.table_uri, version) from None

    def describe(self) -> Iterator[tuple[str, str]]:
        yield from super().describe()
        yield "lease table", self.store.table_name
        yield "lease timeout", f"{self.store.timeout_ms} ms (stale after {self.store.stale_after:g} s)"


def _commit_hook(hook: FaultHook) -> Callable[[str, str], None]:
    """The store's ``hook(step, path)`` as ``hook(step, version)`` for commit files only
    (the same leases guard checkpoints, which are not commit steps)."""

    def on_step(step: str, path: str) -> None:
        name = path.rsplit("/", 1)[-1]
        lf = parse_log_name(name, 0, 0)
        if lf is not None and lf.kind == "commit":
            hook(step, lf.version)

    return on_step
