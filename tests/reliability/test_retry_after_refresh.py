"""Retrying a transaction after an ambiguous failure, once the table object has moved on.

A commit whose write happened but whose answer was lost raises; retrying the same
``Transaction`` must then find its own ``txnId`` in the log instead of committing it again,
also when the table object has learnt of newer versions before the retry (``update()``, or
another thread sharing the object commits after losing the race to the landed attempt): the
commits the object already knows of are searched for the ``txnId`` before they are checked for
conflicts (``Transaction._rebase``).
"""

from __future__ import annotations

import pytest

from deltacommit.errors import LogStoreError, StorageError
from deltacommit.io.datafiles import write_data_files
from deltacommit.io.storage.faults import FaultPlan, StepFaults

from .conftest import MakeRig
from .harness import History, Writer, batch


@pytest.mark.parametrize("moved_by", ["update", "a thread sharing the table"])
@pytest.mark.parametrize("kind", ["local", "s3", "dynamodb", "dynamo-commit"])
def test_a_retry_after_the_table_object_saw_the_landed_attempt_commits_once(
        make_rig: MakeRig, kind: str, moved_by: str) -> None:
    history = History(make_rig(kind))
    plan = FaultPlan()
    steps = StepFaults()
    victim = history.writer("victim", plan, steps)
    # The commit is made, then its writer is told it failed.
    if kind in ("local", "s3"):
        plan.fail("put_if_absent", "_delta_log/0*.json", after=True)
    else:
        steps.fail("after_put_entry" if kind == "dynamodb" else "after_write")
    table = victim.table
    txn = table.transaction("WRITE", {"mode": "Append"})
    txn.add(write_data_files(table.log_store.store, batch("victim", 0), [],
                             clock=table.clock, random=table.random))
    victim.batches = 1
    with pytest.raises((StorageError, LogStoreError)):
        txn.commit()  # version 1 was written; the writer was told it failed
    if moved_by == "update":
        table.update()
    else:
        history.append(Writer("neighbour", table))  # loses version 1, reads it, commits 2
    assert table.version >= 1
    history.acknowledge(victim, 0, txn.commit())  # the retry
    history.check()

