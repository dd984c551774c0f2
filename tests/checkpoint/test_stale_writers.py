"""A table object older than the log's retention must not commit into a cleaned-up gap.

The hazard: a writer holds a snapshot at version v for longer than delta.logRetentionDuration;
meanwhile others commit past v, checkpoint, and clean up commits up to the checkpoint, deleting
v+1.  A put-if-absent of v+1 would then succeed and create a commit no reader ever looks at.
"""

from __future__ import annotations

import uuid

import pytest

import deltacommit as dc
from deltacommit.protocol.log.names import commit_path
from deltacommit.runtime.clock import ManualClock, RandomSource

from .helpers import ids_of, memory_table, rows

DAY = 86_400.0
START = 1_800_000_000.0


def _stale_pair(configuration: dict[str, str] | None = None) -> tuple[dc.DeltaTable, dc.DeltaTable]:
    """A writer whose snapshot is older than the retention, and the table it fell behind on."""
    clock = ManualClock(START)
    active = memory_table(f"stale-{uuid.uuid4().hex[:10]}", clock,
                          {"delta.checkpointInterval": "5", **(configuration or {})},
                          partition_by=["day"])
    dc.write(active, rows([0], day="a"))
    stale = dc.DeltaTable(active.uri, log_store=active.log_store, clock=clock,
                          random=RandomSource(11))
    assert stale.version == 1
    for i in range(1, 8):
        dc.write(active, rows([i], day="a"))
    clock.advance(31 * DAY)
    for i in range(8, 12):  # the checkpoint at 10 lets cleanup delete versions before 5
        dc.write(active, rows([i], day="a"))
    assert not active.log_store.store.exists(commit_path(2))
    return stale, active


def test_a_stale_blind_append_lands_after_the_newest_version() -> None:
    stale, active = _stale_pair()
    r = dc.write(stale, rows([100], day="b"))
    assert r.version == 13
    assert not stale.log_store.store.exists(commit_path(2))
    fresh = dc.DeltaTable(active.uri, log_store=active.log_store)
    assert fresh.version == 13
    assert ids_of(fresh.to_arrow()) == [*range(12), 100]


def test_a_stale_transaction_that_read_the_table_is_refused_clearly() -> None:
    stale, active = _stale_pair()
    txn = stale.transaction("DELETE")
    txn.remove(txn.scan(partition_filters=[("day", "=", "a")]))
    with pytest.raises(dc.CommitFailedError, match="log cleanup") as e:
        txn.commit()
    assert "Re-read the table" in str(e.value)
    assert not active.log_store.store.exists(commit_path(2))
    fresh = dc.DeltaTable(active.uri, log_store=active.log_store)
    assert fresh.version == 12 and ids_of(fresh.to_arrow()) == list(range(12))


def test_update_follows_a_table_past_its_cleanup() -> None:
    stale, _ = _stale_pair()
    assert stale.update() == 12
    assert ids_of(stale.to_arrow()) == list(range(12))
