"""Faults at the named steps of the DynamoDB protocols, then recovery and the check.

Spark's S3DynamoDBLogStore protocol (on moto's and on dynalite's DynamoDB): after the temp
file is written, after the entry is put (the commit), after the copy to N.json (before the
entry is marked complete) and after marking it complete.  object_store's DynamoCommit: with
the lease on N.json held and nothing written, and after N.json is written under it.

``fail`` raises the coordinator's error there and the victim retries the same transaction;
``crash`` ends the victim there and other writers complete what it left (a claimed entry, a
lease it will never use); ``hang`` holds the victim there while another writer commits (and,
under DynamoCommit, reclaims the lease the victim is sitting on, so the victim must not write
once released).  The history checker must pass after each.
"""

from __future__ import annotations

import pytest

from deltacommit.errors import LogStoreError
from deltacommit.io.logstore.dynamo_commit import log_store as dynamo_commit
from deltacommit.io.logstore.dynamo_commit.leases import DynamoCommitStore
from deltacommit.io.logstore.s3_dynamodb import log_store as dynamodb
from deltacommit.io.storage.faults import SimulatedCrash, StepFaults

from .conftest import MakeRig
from .harness import History

#: Whether a writer that crashes at a step has made its commit.
LANDS: dict[str, dict[str, bool]] = {
    "dynamodb": {"after_write_temp": False, "after_put_entry": True, "after_copy": True,
                 "after_complete": True},
    "dynamo-commit": {"after_lock": False, "after_write": True},
}
assert set(LANDS["dynamodb"]) <= set(dynamodb.STEPS)
assert set(LANDS["dynamo-commit"]) == set(dynamo_commit.STEPS)

BACKENDS = {"dynamodb": ("dynamodb", "dynamodb-dynalite"), "dynamo-commit": ("dynamo-commit",)}

#: On dynalite (a second DynamoDB implementation) the crashes: what a writer leaves behind must
#: be completed by others whatever answers their requests.
CASES = [pytest.param(backend, step, action, id=f"{backend}-{step}-{action}")
         for protocol, steps in LANDS.items() for backend in BACKENDS[protocol]
         for step in steps for action in ("fail", "crash", "hang")
         if action == "crash" or not backend.endswith("dynalite")]


@pytest.mark.parametrize(("backend", "step", "action"), CASES)
def test_step_fault_then_recovery_keeps_every_acknowledged_write(
        make_rig: MakeRig, backend: str, step: str, action: str) -> None:
    rig = make_rig(backend)
    history = History(rig)
    steps = StepFaults()
    victim = history.writer("victim", steps=steps)
    other = history.writer("other")
    history.append(victim)

    if action == "fail":
        steps.fail(step)
        history.append(victim)
        history.append(victim)
        assert history.retries == 1
    elif action == "crash":
        steps.crash(step)
        with pytest.raises(SimulatedCrash):
            history.append(victim)
        history.crashed(victim, landed=LANDS[rig.kind][step])
        history.append(other)
    else:
        rule = steps.hang(step)
        held = history.append_in_thread(victim)
        rule.wait_reached()
        history.append(other)
        rule.release()
        result = held.join()
        # A victim stopped before its commit was made loses the version to the other writer.
        assert result.version == (2 if LANDS[rig.kind][step] else 3)
    if rig.kind == "dynamo-commit" and step == "after_lock" and action != "fail":
        # The victim's lease was reclaimed (on the injected clock, once stale), not waited out
        # forever; a released victim refused to write under it and retried at a new version.
        stats = other.table.log_store.store
        assert isinstance(stats, DynamoCommitStore)
        assert stats.stats.snapshot().get("reclaimed") == 1
        assert history.retries == (1 if action == "hang" else 0)
    history.append(history.writer("late"))
    assert steps.count() == 1, steps.injections
    history.check()


REPAIR_CASES = [pytest.param(backend, step, action, id=f"{backend}-{step}-{action}")
                for backend in BACKENDS["dynamodb"]
                for step in ("repair_after_copy", "repair_after_complete")
                for action in ("fail", "crash")]


@pytest.mark.parametrize(("backend", "step", "action"), REPAIR_CASES)
def test_a_reader_stopped_while_repairing_leaves_the_commit_repairable(
        make_rig: MakeRig, backend: str, step: str, action: str) -> None:
    """A writer dies after claiming a version; the next reader dies (or fails) in the middle
    of completing it; the reader after that completes it."""
    rig = make_rig(backend)
    history = History(rig)
    crashes = StepFaults()
    victim = history.writer("victim", steps=crashes)
    history.append(victim)
    crashes.crash("after_put_entry")
    with pytest.raises(SimulatedCrash):
        history.append(victim)
    history.crashed(victim, landed=True)

    repairs = StepFaults()
    rule = repairs.crash(step) if action == "crash" else repairs.fail(step)
    with pytest.raises(SimulatedCrash if action == "crash" else LogStoreError):
        history.writer("reader", steps=repairs)   # opening the table repairs the latest entry
    assert rule.fired == 1
    history.append(history.writer("reader", steps=repairs))
    history.append(history.writer("late"))
    history.check()


def test_a_reclaimed_lease_abandoned_again_is_reclaimed_by_the_next_writer(
        make_rig: MakeRig) -> None:
    """DynamoCommit: a writer dies holding the lease on version 2; the next one waits it out,
    reclaims it (generation 1) and dies too; the third reclaims generation 1 and commits."""
    rig = make_rig("dynamo-commit")
    history = History(rig)
    first, second = StepFaults(), StepFaults()
    victim = history.writer("victim", steps=first)
    successor = history.writer("successor", steps=second)
    history.append(victim)
    first.crash("after_lock")
    second.crash("after_lock")
    for w in (victim, successor):
        with pytest.raises(SimulatedCrash):
            history.append(w)
        history.crashed(w, landed=False)
    late = history.writer("late")
    assert history.append(late).version == 2
    leases = late.table.log_store.store
    assert isinstance(leases, DynamoCommitStore)
    assert leases.stats.snapshot().get("reclaimed") == 1
    items = rig.dynamodb_client().get_item(
        TableName=rig.lease_table, ConsistentRead=True,
        Key={"path": {"S": leases.lease_key("_delta_log/00000000000000000002.json")},
             "etag": {"S": "*"}})["Item"]
    assert items["generation"] == {"N": "2"}  # taken, reclaimed, reclaimed again
    history.check()
