"""What the write-path tests share: a table whose commits a test can fault, and the account of
its data files.

Each write path is checked the same way (``tests/test_write_driver.py`` and its Spark and
cross-process companions): its commit is made to lose to a conflicting commit, to be refused,
to fail with an unknown outcome, or to land, and then every data file in the table's folder
must be named by a version of the log (nothing left behind) and every file the newest version
names must exist (nothing lost).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

import deltacommit as dc
from deltacommit.engine.commit.policy import CommitPolicy
from deltacommit.engine.group.threads import GroupCommitPolicy
from deltacommit.errors import CoordinationMismatchError
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.storage.base import ObjectStore
from deltacommit.io.storage.faults import FaultPlan, FaultRule
from deltacommit.io.storage.faults import FaultyStore as FaultyStore
from deltacommit.protocol.actions import Add, parse_commit
from deltacommit.protocol.log.names import LOG_DIR
from deltacommit.protocol.partitions import decode_add_path
from deltacommit.runtime.clock import Clock

from .background import Background

SCHEMA = pa.schema([("p", pa.string()), ("id", pa.int64())])
#: The claim of any version (conditional put of ``N.json``).
CLAIM = f"{LOG_DIR}/0*.json"
#: Turns are off: a writer held at its claim would make the other writer wait for its turn.
POLICY = CommitPolicy(host_turns=False)


def rows(p: str, ids: list[int]) -> pa.Table:
    return pa.table({"p": [p] * len(ids), "id": ids}, schema=SCHEMA)


def refusal(operation: str, path: str, detail: str) -> BaseException:
    """A commit refused before its claim (the error a log store raises when the table's
    writers use another mechanism)."""
    return CoordinationMismatchError(f"{operation} {path} refused by the test ({detail})")


@dataclass
class Rig:
    """A table at ``uri`` on ``store``; ``plan`` faults the writer's commits, not the other's."""

    uri: str
    store: ObjectStore
    plan: FaultPlan = field(default_factory=FaultPlan)

    def create(self, **options: Any) -> None:
        dc.DeltaTable.create(self.uri, SCHEMA, partition_by=["p"], policy=POLICY,
                             log_store=ConditionalPutLogStore(self.store), **options)

    def writer(self, *, group_commit: bool | GroupCommitPolicy = False,
               clock: Clock | None = None) -> dc.DeltaTable:
        """The table object whose commits ``plan`` faults."""
        return dc.DeltaTable(self.uri, policy=POLICY, group_commit=group_commit, clock=clock,
                             log_store=ConditionalPutLogStore(FaultyStore(self.store, self.plan)))

    def other(self) -> dc.DeltaTable:
        """Another writer of the table, without faults."""
        return dc.DeltaTable(self.uri, policy=POLICY, log_store=ConditionalPutLogStore(self.store))

    # ----------------------------------------------------------------- faults

    def hold_claim(self) -> FaultRule:
        return self.plan.hang("put_if_absent", CLAIM)

    def refuse_claim(self) -> FaultRule:
        return self.plan.fail("put_if_absent", CLAIM, error=refusal)

    def lose_answer(self, times: int = 1) -> FaultRule:
        """The claim is made, and its writer told it failed."""
        return self.plan.fail("put_if_absent", CLAIM, after=True, times=times)

    # ----------------------------------------------------------------- the account

    def data_files(self) -> set[str]:
        return {m.path for m in self.store.list("")
                if m.path.endswith(".parquet") and not m.path.startswith(LOG_DIR)}

    def named_files(self) -> set[str]:
        """Data files any version of the log adds."""
        other = self.other()
        out: set[str] = set()
        for v in range(other.version + 1):
            for a in parse_commit(other.log_store.read_commit(v), f"version {v}"):
                if isinstance(a, Add):
                    out.add(decode_add_path(a.path))
        return out

    def live_files(self) -> set[str]:
        return {decode_add_path(a.path) for a in self.other().files()}

    def check(self) -> None:
        """Nothing left behind that no version names, nothing named that is gone."""
        on_disk = self.data_files()
        assert on_disk - self.named_files() == set(), "files no version names were left behind"
        assert self.live_files() - on_disk == set(), "files the table names were deleted"

    def ids(self) -> list[int]:
        return sorted(self.other().to_arrow().column("id").to_pylist())


def race(rig: Rig, write: Callable[[], Any], winner: Callable[[], Any]) -> Background:
    """Run ``write`` until it is about to claim its version, commit ``winner`` meanwhile, then
    let it claim: it loses that version to the winner.  Join the result."""
    gate = rig.hold_claim()
    writer = Background(write)
    gate.wait_reached()
    winner()
    gate.release()
    return writer
