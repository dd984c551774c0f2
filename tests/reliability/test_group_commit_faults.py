"""Faults under group commit: one failed write fails a whole group, and each member recovers.

Threads sharing a table object with ``group_commit`` put their transactions in one version.
When the write of that version fails ambiguously (it happened, but the leader was told it
failed), every member gets the error; each retries its own transaction, which must find
itself in the group's version (``deltacommit.memberTxnIds``) instead of committing again.

Ordering without sleeps: the first transaction's commit hangs at its write until the other
two have been submitted (``GroupCommitter.wait_submitted``), so those two form the next group.
"""

from __future__ import annotations

import pytest

from deltacommit.io.storage.faults import FaultPlan, StepFaults

from .conftest import MakeRig
from .harness import History, Writer

#: Where the group's version is made, per log store kind: a store rule, or a protocol step
#: (on Spark's protocol a failed copy is repaired silently, so the step after the entry).
POINTS = {"local": ("put_if_absent", "_delta_log/0*.json"),
          "s3": ("put_if_absent", "_delta_log/0*.json"),
          "dynamodb": ("after_put_entry", "*"),
          "dynamo-commit": ("after_write", "*")}


@pytest.mark.parametrize("kind", list(POINTS))
def test_a_group_told_its_version_failed_finds_it_on_retry(make_rig: MakeRig, kind: str) -> None:
    rig = make_rig(kind)
    history = History(rig)
    history.append(history.writer("other"))
    plan = FaultPlan()
    steps = StepFaults()
    shared = history.writer("g0", plan, steps, group_commit=True)
    committer = shared.table.group_committer
    assert committer is not None
    members = [shared] + [Writer(f"g{i}", shared.table) for i in (1, 2)]

    operation, pattern = POINTS[kind]
    on_store = kind in ("local", "s3")
    # The first commit hangs at (or after) the point the group's will fail at, so that the
    # failure, armed while it hangs, is the group's.
    first = (plan.hang(operation, pattern) if on_store
             else steps.hang("after_write" if kind == "dynamo-commit" else "after_complete"))
    lead = history.append_in_thread(members[0])
    first.wait_reached()
    rest = [history.append_in_thread(m) for m in members[1:]]
    assert committer.wait_submitted(3, timeout=30)
    if on_store:
        plan.fail(operation, pattern, after=True)
    else:
        steps.fail(operation, pattern)
    first.release()
    results = [lead.join()] + [r.join() for r in rest]

    assert results[0].group_size == 1
    assert results[1].version == results[2].version == results[0].version + 1
    assert results[1].group_size == results[2].group_size == 2
    assert history.retries == 2  # each member of the failed group retried once
    history.append(history.writer("late"))
    history.check()
