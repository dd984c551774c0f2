"""Lease expiry, reclaim, clock skew and TTL, on an injected clock (nothing sleeps).

A writer that takes a lease and dies is overtaken exactly when its lease is stale
(``timeout x max_clock_skew_rate`` after another writer saw it) and not one poll earlier; a
writer that stalls inside its lease until another reclaimed it cannot write afterwards.
"""

from __future__ import annotations

from typing import Any

import pytest

from deltacommit.errors import ObjectExistsError, StorageError
from deltacommit.io.logstore.dynamo_commit.leases import CONDITION_ACQUIRE, CONDITION_RECLAIM
from deltacommit.runtime.clock import ManualClock
from deltacommit.testing import S3Bucket, race

from .conftest import Recorder, ScriptedClock, guarded, lease_items

KEY = "_delta_log/00000000000000000005.json"


def test_a_dead_writer_is_overtaken_after_timeout_times_skew_and_not_before(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    dead = guarded(s3_bucket, lease_table, moto_dynamodb)
    assert dead.take_lease(KEY) is not None          # ... and never writes
    clock = ManualClock()
    ddb = Recorder(moto_dynamodb, clock)
    waiter = guarded(s3_bucket, lease_table, ddb, clock=clock)   # defaults: 20 s x 3

    waiter.put_if_absent(KEY, b"waiter's commit")

    first, reclaim = ddb.calls
    assert (first.condition, first.generation, first.outcome, first.at) == (
        CONDITION_ACQUIRE, 0, "conflict", 0.0)
    assert (reclaim.condition, reclaim.generation, reclaim.outcome) == (CONDITION_RECLAIM, 1, "ok")
    # Stale once more than 60 s have passed since the conflict: the first poll after 60 s.
    assert 60.0 < reclaim.at <= 60.1 + 1e-6
    # Until then the waiter only re-checked the object, every 100 ms from 0 s to 60 s or
    # 60.1 s (which poll comes first after 60 s depends on float rounding of 600 x 0.1).
    stats = waiter.stats.snapshot()
    assert (stats["conflicts"], stats["reclaimed"]) == (1, 1)
    assert stats["polls"] in (601, 602)
    assert waiter.get(KEY) == b"waiter's commit"
    item = lease_items(moto_dynamodb, lease_table)[(f"t/{KEY}", "*")]
    assert item["generation"] == {"N": "1"}


def test_a_holder_that_finishes_just_before_it_is_stale_wins(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    holder = guarded(s3_bucket, lease_table, moto_dynamodb, timeout_ms=2000)
    assert holder.take_lease(KEY) is not None
    clock = ScriptedClock()
    ddb = Recorder(moto_dynamodb, clock)
    waiter = guarded(s3_bucket, lease_table, ddb, clock=clock)
    # The holder is slow, not dead: its object lands 5.95 s into the 6 s wait.
    clock.at(5.95, lambda: holder.inner.put(KEY, b"holder's commit"))

    with pytest.raises(ObjectExistsError):
        waiter.put_if_absent(KEY, b"waiter's commit")

    assert [c.condition for c in ddb.calls] == [CONDITION_ACQUIRE]   # never reclaimed
    assert waiter.get(KEY) == b"holder's commit"


def test_the_holders_own_timeout_decides_when_its_lease_is_stale(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    short = guarded(s3_bucket, lease_table, moto_dynamodb, timeout_ms=2000)
    assert short.take_lease(KEY) is not None
    clock = ManualClock()
    ddb = Recorder(moto_dynamodb, clock)
    waiter = guarded(s3_bucket, lease_table, ddb, clock=clock, timeout_ms=20_000,
                     max_clock_skew_rate=2)
    waiter.put_if_absent(KEY, b"w")
    assert 4.0 < ddb.calls[-1].at <= 4.1 + 1e-6           # 2 s x skew rate 2
    item = lease_items(moto_dynamodb, lease_table)[(f"t/{KEY}", "*")]
    assert (item["generation"], item["timeout"]) == ({"N": "1"}, {"N": "20000"})


def test_a_slow_writer_whose_lease_was_reclaimed_cannot_write(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    clock = ManualClock()                             # both writers on one timeline
    slow_ddb = Recorder(moto_dynamodb, clock)
    slow = guarded(s3_bucket, lease_table, slow_ddb, clock=clock, timeout_ms=2000)
    fast = guarded(s3_bucket, lease_table, moto_dynamodb, clock=clock)

    # Right after the slow writer takes its lease it stalls; meanwhile the other writer waits
    # the lease out (2 s x 3 on the shared clock), reclaims it and writes.
    slow_ddb.after_acquire = lambda: fast.put_if_absent(KEY, b"fast writer's commit")

    with pytest.raises(StorageError, match=r"put-if-absent .* with 0 ms of its 2000 ms DynamoDB "
                       r"lease \(generation 0\) left.*nothing was written"):
        slow.put_if_absent(KEY, b"slow writer's commit")

    assert fast.get(KEY) == b"fast writer's commit"
    assert fast.stats.snapshot()["reclaimed"] == 1
    assert 6.0 < clock.monotonic() <= 6.1 + 1e-6
    item = lease_items(moto_dynamodb, lease_table)[(f"t/{KEY}", "*")]
    assert item["generation"] == {"N": "1"}


def test_a_writer_left_with_too_little_lease_does_not_start_its_write(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    clock = ManualClock()
    ddb = Recorder(moto_dynamodb, clock)
    store = guarded(s3_bucket, lease_table, ddb, clock=clock)
    ddb.after_acquire = lambda: clock.advance(19.95)        # 50 ms left: under the 100 ms needed
    with pytest.raises(StorageError, match="with 50 ms of its 20000 ms DynamoDB lease"):
        store.put_if_absent(KEY, b"late")
    assert not store.exists(KEY)

    ddb.after_acquire = lambda: clock.advance(19.85)        # 150 ms left: enough
    store.put_if_absent("other", b"in time")
    assert store.get("other") == b"in time"


def test_clock_skew_moves_the_ttl_but_not_the_lease(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    """TTL is wall-clock time (DynamoDB compares it with its own clock); lease expiry is measured
    on the monotonic clock, so a wall clock set two hours ahead neither shortens nor lengthens
    a wait."""
    dead = guarded(s3_bucket, lease_table, moto_dynamodb, timeout_ms=1000)
    assert dead.take_lease(KEY) is not None
    clock = ManualClock(start=1_800_000_000.0, skew=7200.0)
    ddb = Recorder(moto_dynamodb, clock)
    waiter = guarded(s3_bucket, lease_table, ddb, clock=clock, ttl_seconds=600)
    waiter.put_if_absent(KEY, b"w")
    reclaim = ddb.calls[-1]
    assert 3.0 < reclaim.at <= 3.1 + 1e-6
    assert reclaim.wall == pytest.approx(1_800_000_000 + 7200 + 3.0, abs=0.11)
    assert reclaim.request["Item"]["ttl"] == {"N": str(int(reclaim.wall) + 600)}


def test_stale_lease_reclaimed_by_several_waiters_has_one_winner(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    """Waiters that find the same lease stale all try the generation-conditioned reclaim; one
    wins, and the others conflict again and then see its object."""
    keys = [f"_delta_log/{v:020d}.json" for v in range(8)]
    dead = guarded(s3_bucket, lease_table, moto_dynamodb, timeout_ms=300)
    for key in keys:
        assert dead.take_lease(key) is not None
    waiters = [guarded(s3_bucket, lease_table, moto_dynamodb, clock=ManualClock()) for _ in range(3)]

    def attempt(i: int, key: str) -> bool:
        try:
            waiters[i].put_if_absent(key, f"waiter {i}".encode())
        except ObjectExistsError:
            return False
        return True

    wins = race(keys, len(waiters), attempt)

    assert wins == dict.fromkeys(keys, 1)
    assert sum(w.stats.snapshot().get("reclaimed", 0) for w in waiters) == len(keys)
    items = lease_items(moto_dynamodb, lease_table)
    assert {items[(f"t/{k}", "*")]["generation"]["N"] for k in keys} == {"1"}


def test_deletes_go_to_the_inner_store_in_one_batch(s3_bucket: S3Bucket, lease_table: str,
                                                      moto_dynamodb: Any) -> None:
    """Vacuum and log cleanup delete through ``delete_many``: a DynamoCommit store takes no
    lease for deletes and passes them on whole, one DeleteObjects request for the batch."""
    store = guarded(s3_bucket, lease_table, moto_dynamodb)
    paths = [f"part-{i}.parquet" for i in range(3)]
    for p in paths:
        store.put(p, b"x")
    store.inner.reset_requests()  # type: ignore[attr-defined]
    store.delete_many(paths + ["never-written.parquet"])
    assert store.inner.requests == {"DeleteObjects": 1}  # type: ignore[attr-defined]
    assert not any(store.exists(p) for p in paths)
