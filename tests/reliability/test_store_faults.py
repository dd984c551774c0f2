"""Object store faults at every write of every commit protocol, then recovery and the check.

Each case opens a table of one log store kind and two writers; the victim commits once (the
other writer is left behind), then one fault is armed in the victim's ``FaultyStore``: at the
write that makes the commit (the conditional put; on the DynamoDB protocol the temp file and
the copy; under a DynamoCommit lease the plain put), at its data file, or at the checkpoint it
writes after committing version 2 (the Parquet file, then ``_last_checkpoint``).

* ``fail`` before or after the operation: the victim's error is ambiguous after it; the victim
  retries the same transaction, which must find its own commit rather than make it twice.
* ``crash`` before or after: the victim dies there; another writer and a fresh one carry on
  (and on the DynamoDB protocol complete a commit the victim had claimed).
* ``hang``: the victim blocks there while the other writer commits; then it is released.

Then the history checker must pass: every acknowledged write exactly once, a crashed write
present exactly when it passed the protocol's point of no return, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from deltacommit.io.storage.faults import FaultPlan, SimulatedCrash

from .conftest import MakeRig
from .harness import History


@dataclass(frozen=True)
class Point:
    """A write to fault in one log store kind, and whether a crash there leaves the commit in
    the table (before the operation, after it)."""

    operation: str
    pattern: str
    lands_before: bool
    lands_after: bool


COMMIT_JSON = "_delta_log/0*.json"
CHECKPOINT = "_delta_log/*.checkpoint.parquet"
DATA = Point("put", "part-*", False, False)
LAST_CHECKPOINT = Point("put", "_delta_log/_last_checkpoint", True, True)

POINTS: dict[str, dict[str, Point]] = {
    # Conditional put: the put-if-absent of N.json is the commit.
    "local": {"commit": Point("put_if_absent", COMMIT_JSON, False, True), "data": DATA,
              "checkpoint": Point("put_if_absent", CHECKPOINT, True, True),
              "last_checkpoint": LAST_CHECKPOINT},
    "s3": {"commit": Point("put_if_absent", COMMIT_JSON, False, True), "data": DATA,
           "checkpoint": Point("put_if_absent", CHECKPOINT, True, True),
           "last_checkpoint": LAST_CHECKPOINT},
    # Spark's protocol: the temp file comes before the entry (the commit), the copy after it.
    "dynamodb": {"temp_write": Point("put", "_delta_log/.tmp/*", False, False),
                 "copy": Point("put_if_absent", COMMIT_JSON, True, True), "data": DATA,
                 "checkpoint": Point("put_if_absent", CHECKPOINT, True, True),
                 "last_checkpoint": LAST_CHECKPOINT},
    # DynamoCommit: a plain put under the lease makes the commit (and the checkpoint).
    "dynamo-commit": {"commit": Point("put", COMMIT_JSON, False, True), "data": DATA,
                      "checkpoint": Point("put", CHECKPOINT, True, True),
                      "last_checkpoint": LAST_CHECKPOINT},
}

ACTIONS = ("fail_before", "fail_after", "crash_before", "crash_after", "hang")

#: A put held up under a DynamoCommit lease until the lease is reclaimed and then applied is
#: outside that protocol's model (it bounds such delays by the clock-skew slack, not the
#: client): the lease steps test the hang the protocol does guard, before the write starts.
NOT_APPLICABLE = {("dynamo-commit", "commit", "hang")}
#: Data files are written the same way whatever the log store: every action on local disk and
#: S3, the ambiguous ones and the hang under the DynamoDB protocols.
DATA_ACTIONS = {"local": ACTIONS, "s3": ACTIONS}


def _wanted(kind: str, point: str, action: str) -> bool:
    if (kind, point, action) in NOT_APPLICABLE:
        return False
    return point != "data" or action in DATA_ACTIONS.get(kind, ("fail_after", "crash_after", "hang"))


CASES = [pytest.param(kind, point, action, id=f"{kind}-{point}-{action}")
         for kind, points in POINTS.items() for point in points for action in ACTIONS
         if _wanted(kind, point, action)]


@pytest.mark.parametrize(("kind", "point", "action"), CASES)
def test_store_fault_then_recovery_keeps_every_acknowledged_write(
        make_rig: MakeRig, kind: str, point: str, action: str) -> None:
    rig = make_rig(kind)
    where = POINTS[kind][point]
    history = History(rig)
    plan = FaultPlan()
    victim = history.writer("victim", plan)
    other = history.writer("other")
    history.append(victim)
    assert victim.table.version == 1 and other.table.version == 0  # the other writer is behind

    kind_of, _, phase = action.partition("_")
    after = phase == "after"
    if kind_of == "fail":
        plan.fail(where.operation, where.pattern, after=after)
        history.append(victim)          # the fault fires; the victim recovers by itself
        history.append(victim)          # and carries on
    elif kind_of == "crash":
        plan.crash(where.operation, where.pattern, after=after)
        with pytest.raises(SimulatedCrash):
            history.append(victim)
        history.crashed(victim, landed=where.lands_after if after else where.lands_before)
        history.append(other)           # another writer recovers and carries on
    else:
        rule = plan.hang(where.operation, where.pattern)
        held = history.append_in_thread(victim)
        rule.wait_reached()
        history.append(other)           # commits while the victim is stuck
        rule.release()
        held.join()
    history.append(history.writer("late"))
    assert plan.count() == 1, (plan.injections, plan.rules)
    history.check()


@pytest.mark.parametrize("point", ["checkpoint", "last_checkpoint"])
@pytest.mark.parametrize("kind", ["local", "s3", "dynamodb"])
def test_a_checkpoint_held_up_past_a_log_cleanup(make_rig: MakeRig, kind: str, point: str) -> None:
    """The victim commits version 2 and stalls writing its checkpoint; days pass, the other
    writer commits 3 and 4, checkpoints 4 and deletes the expired log before it.  Released, the
    victim publishes its checkpoint of 2 (and moves ``_last_checkpoint`` back to it, then its
    own cleanup removes that checkpoint): readers must still find the table's whole state."""
    rig = make_rig(kind, {"delta.logRetentionDuration": "interval 1 day"})
    where = POINTS[kind][point]
    history = History(rig)
    plan = FaultPlan()
    victim = history.writer("victim", plan)
    other = history.writer("other")
    history.append(victim)
    rule = plan.hang(where.operation, where.pattern)
    held = history.append_in_thread(victim)
    rule.wait_reached()
    rig.clock.advance(3 * 86_400)
    history.append(other)
    history.append(other)
    assert not other.table.log_store.store.exists("_delta_log/00000000000000000001.json")
    rule.release()
    assert held.join().version == 2
    history.append(history.writer("late"))
    history.check()
