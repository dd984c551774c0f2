"""Fixtures for DynamoCommit: lease tables on moto and dynalite, guarded stores on moto's S3.

``Recorder`` wraps a real boto3 DynamoDB client and notes every lease request with the
injected clock's time, which is how tests see when a writer took, lost or reclaimed a lease.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from deltacommit.io.aws import resolve_aws_config
from deltacommit.io.aws.errors import client_errors
from deltacommit.io.logstore.dynamo_commit.leases import DynamoCommitStore, create_lease_table
from deltacommit.io.storage.s3 import S3Store
from deltacommit.runtime.clock import SYSTEM_CLOCK, Clock, ManualClock
from deltacommit.testing import Dynalite, MotoServer, S3Bucket, unique_name


@dataclass
class LeaseCall:
    at: float                 # the injected clock's monotonic time when the request was sent
    condition: str
    generation: int
    path: str
    etag: str
    request: dict[str, Any]
    wall: float               # the injected clock's wall time then
    outcome: str = "pending"  # "ok" | "conflict" | "error"


class Recorder:
    """A DynamoDB client that records lease ``PutItem`` calls and can run a hook after one."""

    def __init__(self, client: Any, clock: Clock) -> None:
        self.client = client
        self.clock = clock
        self.calls: list[LeaseCall] = []
        #: Run once, right after the next PutItem that takes a lease (the writer is then
        #: stalled inside the lease for as long as the hook runs).
        self.after_acquire: Callable[[], None] | None = None

    def put_item(self, **request: Any) -> Any:
        item = request["Item"]
        call = LeaseCall(self.clock.monotonic(), request["ConditionExpression"],
                         int(item["generation"]["N"]), item["path"]["S"], item["etag"]["S"],
                         request, self.clock.time())
        self.calls.append(call)
        try:
            response = self.client.put_item(**request)
        except client_errors() as e:
            call.outcome = "conflict" if "ConditionalCheck" in str(e) else "error"
            raise
        call.outcome = "ok"
        hook, self.after_acquire = self.after_acquire, None
        if hook is not None:
            hook()
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


class ScriptedClock(ManualClock):
    """A manual clock that runs actions when it has been advanced past their times.

    Lets a test say "at 30 s into the wait, the holder writes the object" without threads.
    """

    def __init__(self) -> None:
        super().__init__()
        self._actions: list[tuple[float, Callable[[], None]]] = []

    def at(self, when: float, action: Callable[[], None]) -> None:
        self._actions.append((when, action))

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        due = [a for a in self._actions if a[0] <= self.monotonic()]
        for a in due:
            self._actions.remove(a)
            a[1]()


@pytest.fixture(scope="session")
def moto_dynamodb(moto_server: MotoServer) -> Any:
    return boto3.client("dynamodb", endpoint_url=moto_server.endpoint, region_name="us-east-1")


@pytest.fixture(scope="session")
def dynalite_dynamodb(dynalite_server: Dynalite) -> Any:
    return boto3.client("dynamodb", endpoint_url=dynalite_server.endpoint, region_name="us-east-1")


@pytest.fixture
def lease_table(moto_dynamodb: Any) -> str:
    """A new DynamoCommit lease table on moto."""
    name = unique_name("leases")
    create_lease_table(moto_dynamodb, name)
    return name


@pytest.fixture
def dynalite_lease_table(dynalite_dynamodb: Any) -> str:
    name = unique_name("leases")
    create_lease_table(dynalite_dynamodb, name)
    return name


def s3_store(bucket: S3Bucket, prefix: str = "t", **options: str) -> S3Store:
    """An S3 store on the test bucket without S3 conditional writes (as on stores lacking them)."""
    opts = {**bucket.storage_options, "DELTACOMMIT_S3_CONDITIONAL_WRITES": "false", **options}
    return S3Store(bucket.name, prefix, config=resolve_aws_config(opts))


def guarded(bucket: S3Bucket, table: str, client: Any, *, prefix: str = "t",
            clock: Clock = SYSTEM_CLOCK, **kwargs: Any) -> DynamoCommitStore:
    return DynamoCommitStore(s3_store(bucket, prefix), table, client, clock=clock, **kwargs)


def lease_items(client: Any, table: str) -> dict[tuple[str, str], dict[str, Any]]:
    items = client.scan(TableName=table, ConsistentRead=True)["Items"]
    return {(i["path"]["S"], i["etag"]["S"]): i for i in items}
