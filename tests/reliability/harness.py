"""The rig of the fault tests: one table per log store, writers with faults, and the check.

``Rig`` builds log stores of one kind on one table (conditional put on a local directory or
on moto's S3, Spark's DynamoDB protocol, object_store's DynamoCommit), each writer's with its
own ``FaultyStore`` plan, protocol-step hook and, for network faults, endpoints behind the
fault proxy.  ``History`` makes the writes, journals every acknowledged one, and at the end
proves with the history checker that each acknowledged write is in the table exactly once and
nothing else is (counting transactions and the rows of every (writer, batch)).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3
import pyarrow as pa
from botocore.config import Config

import deltacommit as dc
from deltacommit.engine.transaction.transaction import CommitResult, Transaction
from deltacommit.errors import LogStoreError, StorageError
from deltacommit.io.aws import resolve_aws_config
from deltacommit.io.datafiles import write_data_files
from deltacommit.io.journal import JournalEntry
from deltacommit.io.logstore.base import LogStore
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.logstore.dynamo_commit.leases import DynamoCommitStore
from deltacommit.io.logstore.dynamo_commit.log_store import DynamoCommitLogStore
from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore
from deltacommit.io.storage.base import ObjectStore
from deltacommit.io.storage.faults import FaultPlan, FaultyStore, StepFaults
from deltacommit.io.storage.local import LocalStore
from deltacommit.io.storage.s3 import S3Store
from deltacommit.ops.verify import VerifyReport, verify_table
from deltacommit.runtime.clock import ManualClock

from ..background import Background

SCHEMA = pa.schema([("writer", pa.string()), ("batch", pa.int64()), ("i", pa.int64())])
ROWS = 2
#: Every second version is checkpointed by the writer that commits it: the victim's faulted
#: write lands at version 2 (after one write of its own), so its checkpoint runs under the fault.
CHECKPOINT_INTERVAL = 2
#: DynamoCommit leases in these tests: 1 s, stale after 3 s of the injected clock, polled
#: every 0.5 s of it (six HEADs of real time, no sleeping).
LEASE_TIMEOUT_MS = 1000
LEASE_POLL_SECONDS = 0.5
#: Read timeout of clients whose answers the proxy holds back.
SHORT_TIMEOUT = 0.3


@dataclass
class Rig:
    """One table of one log store kind, and how to open writers on it."""

    kind: str                      # "local" | "s3" | "dynamodb" | "dynamo-commit"
    uri: str
    options: dict[str, str]        # what verify and plain readers use
    s3_options: dict[str, str] = field(default_factory=dict)
    dynamodb_endpoint: str = ""
    lease_table: str = ""
    #: The injected clock of every writer: retry backoff and lease waits pass instantly.
    clock: ManualClock = field(default_factory=lambda: ManualClock(start=time.time()))

    def store(self, *, s3_endpoint: str | None = None, timeout: float | None = None) -> ObjectStore:
        if self.kind == "local":
            return LocalStore(self.uri)
        opts = dict(self.s3_options)
        if s3_endpoint is not None:
            opts["AWS_ENDPOINT_URL"] = s3_endpoint
        if self.kind == "dynamo-commit":
            opts["DELTACOMMIT_S3_CONDITIONAL_WRITES"] = "false"
        config = resolve_aws_config(opts)
        bucket = self.uri.split("://", 1)[1].split("/", 1)[0]
        client = config.s3_client(timeout=timeout) if timeout is not None else None
        return S3Store(bucket, "t", config=config, clock=self.clock, client=client)

    def dynamodb_client(self, endpoint: str | None = None, timeout: float | None = None,
                        attempts: int = 1) -> Any:
        """A DynamoDB client making ``attempts`` attempts per call (botocore's standard retries;
        with one, every retry is the code's own)."""
        config = Config(connect_timeout=5, read_timeout=timeout or 30,
                        retries={"mode": "standard", "total_max_attempts": attempts})
        return boto3.client("dynamodb", endpoint_url=endpoint or self.dynamodb_endpoint,
                            region_name="us-east-1", config=config)

    def log_store(self, plan: FaultPlan | None = None, steps: StepFaults | None = None, *,
                  s3_endpoint: str | None = None, dynamodb_endpoint: str | None = None,
                  timeout: float | None = None, faulty: bool = True,
                  dynamodb_attempts: int = 1) -> LogStore:
        """A log store on this table whose object store is ``FaultyStore(plan)`` and whose
        protocol steps call ``steps``.  ``faulty=False`` leaves the store unwrapped (then a
        DynamoCommit store writes through S3 directly, as in production)."""
        inner = self.store(s3_endpoint=s3_endpoint, timeout=timeout)
        store: ObjectStore = FaultyStore(inner, plan) if faulty else inner
        if self.kind in ("local", "s3"):
            return ConditionalPutLogStore(store)
        client = (self.dynamodb_client(dynamodb_endpoint, timeout, dynamodb_attempts)
                  if dynamodb_endpoint is not None or timeout is not None else None)
        if self.kind == "dynamodb":
            config = resolve_aws_config(self.options)
            return DynamoDBLogStore(store, config, client=client, hook=steps, clock=self.clock)
        assert self.kind == "dynamo-commit"
        leases = DynamoCommitStore(
            store, self.lease_table, client or self.dynamodb_client(), clock=self.clock,
            timeout_ms=LEASE_TIMEOUT_MS, test_interval=LEASE_POLL_SECONDS)
        return DynamoCommitLogStore(leases, hook=steps)

    def create(self, configuration: Mapping[str, str] | None = None) -> None:
        config = {"delta.checkpointInterval": str(CHECKPOINT_INTERVAL), **(configuration or {})}
        dc.DeltaTable.create(self.uri, SCHEMA, log_store=self.log_store(faulty=False),
                             configuration=config, clock=self.clock)


@dataclass
class Writer:
    name: str
    table: dc.DeltaTable
    batches: int = 0
    dead: bool = False


def batch(writer: str, b: int) -> pa.Table:
    return pa.table({"writer": [writer] * ROWS, "batch": [b] * ROWS, "i": list(range(ROWS))},
                    schema=SCHEMA)


class History:
    """Writes to a rig's table and the journal of those acknowledged, then the check."""

    #: Errors a writer retries: the same transaction if it was staged, else the whole write.
    RETRIED = (StorageError, LogStoreError)

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.entries: list[JournalEntry] = []
        self.expected: Counter[tuple[str, int]] = Counter()
        self.landed_unacknowledged = 0
        self.retries = 0
        self._lock = threading.Lock()

    def writer(self, name: str, plan: FaultPlan | None = None, steps: StepFaults | None = None,
               *, group_commit: bool = False, **kwargs: Any) -> Writer:
        ls = self.rig.log_store(plan, steps, **kwargs)
        return Writer(name, dc.DeltaTable(self.rig.uri, log_store=ls, clock=self.rig.clock,
                                          group_commit=group_commit))

    def append(self, w: Writer, *, attempts: int = 4) -> CommitResult:
        """One append by ``w``, retried after storage and coordinator errors (the transaction
        itself when it was already staged: it finds its own commit if an attempt landed)."""
        assert not w.dead, f"writer {w.name} crashed and must not be used again"
        b = w.batches
        w.batches += 1
        table = w.table
        txn: Transaction | None = None
        for attempt in range(1, attempts + 1):
            try:
                if txn is None:
                    adds = write_data_files(table.log_store.store, batch(w.name, b), [],
                                            clock=table.clock, random=table.random)
                    txn = table.transaction("WRITE", {"mode": "Append"})
                    txn.add(adds)
                result = txn.commit()
                break
            except self.RETRIED:
                with self._lock:
                    self.retries += 1
                if attempt == attempts:
                    raise
        self.acknowledge(w, b, result)
        return result

    def acknowledge(self, w: Writer, b: int, result: CommitResult) -> None:
        """Journal batch ``b`` of ``w`` as committed in ``result``."""
        with self._lock:
            self.entries.append(JournalEntry.from_result(result, rows=ROWS, writer=w.name))
            self.expected[(w.name, b)] += 1

    def crashed(self, w: Writer, *, landed: bool) -> None:
        """``w`` died in its last append; whether that write is in the table all the same."""
        w.dead = True
        if landed:
            self.expected[(w.name, w.batches - 1)] += 1
            self.landed_unacknowledged += 1

    def append_in_thread(self, w: Writer) -> Background:
        return Background(lambda: self.append(w))

    def check(self) -> VerifyReport:
        """The history checker passes, and the table holds exactly the expected writes."""
        rig = self.rig
        report = verify_table(rig.uri, self.entries, storage_options=rig.options)
        assert report.ok, "\n".join(report.problems)
        assert report.acknowledged == len(self.entries)
        # The table's creation, every acknowledged write, and crashed writes that landed; of
        # those in versions a log cleanup removed, only the data is left to check.
        first = report.first_version
        removed = sum(1 for e in self.entries if e.version < first)
        assert report.unverifiable == removed
        assert report.transactions == ((first == 0) + len(self.entries) - removed
                                       + self.landed_unacknowledged)
        assert report.rows == ROWS * sum(self.expected.values())
        data = dc.DeltaTable(rig.uri, storage_options=rig.options).to_arrow()
        got = Counter(zip(data.column("writer").to_pylist(), data.column("batch").to_pylist(),
                          strict=True))
        assert got == Counter({k: n * ROWS for k, n in self.expected.items()})
        return report


