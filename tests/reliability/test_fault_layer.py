"""The fault layer itself, on an in-memory store: what fires when, and what the check catches."""

from __future__ import annotations

import pytest

from deltacommit.errors import LogStoreError, ObjectExistsError, StorageError
from deltacommit.io.datafiles import write_data_files
from deltacommit.io.storage.faults import (
    FaultPlan,
    FaultyStore,
    Injection,
    SimulatedCrash,
    StepFaults,
)
from deltacommit.io.storage.memory import MemoryStore
from deltacommit.testing import unique_name

from .conftest import MakeRig
from .harness import History, batch


def _store() -> FaultyStore:
    return FaultyStore(MemoryStore(unique_name("faults")))


def test_a_failure_before_leaves_nothing_and_names_the_operation_and_path() -> None:
    store = _store()
    store.fail("put", "_delta_log/*.json", times=2)
    for _ in range(2):
        with pytest.raises(StorageError, match=r"put memory://.*/_delta_log/1\.json failed: "
                                               r"injected fault \(before the operation\)"):
            store.put("_delta_log/1.json", b"x")
    assert not store.exists("_delta_log/1.json")
    store.put("_delta_log/1.json", b"x")  # the budget is spent
    store.put("part-0.parquet", b"y")     # never matched
    assert store.injections == [Injection("fail", "put", "_delta_log/1.json", "before")] * 2


def test_a_failure_after_hides_a_write_that_happened() -> None:
    store = _store()
    store.fail("put_if_absent", after=True)
    with pytest.raises(StorageError, match="after the operation"):
        store.put_if_absent("a", b"1")
    assert store.get("a") == b"1"


def test_a_failure_after_an_operation_that_failed_by_itself_stays_armed() -> None:
    store = _store()
    store.put("a", b"theirs")
    rule = store.fail("put_if_absent", after=True)
    with pytest.raises(ObjectExistsError):
        store.put_if_absent("a", b"mine")
    assert (rule.times, rule.fired, store.injections) == (1, 0, [])
    with pytest.raises(StorageError):
        store.put_if_absent("b", b"mine")
    assert rule.fired == 1


def test_a_crash_is_not_an_exception_the_library_catches() -> None:
    store = _store()
    store.crash("get", "x", after=True)
    store.put("x", b"1")
    with pytest.raises(SimulatedCrash) as caught:
        try:
            store.get("x")
        except Exception:  # what the library's handlers catch
            pytest.fail("a simulated crash must pass through `except Exception`")
    assert not isinstance(caught.value, Exception)
    assert (caught.value.operation, caught.value.path, caught.value.phase) == ("get", "x", "after")


def test_a_hang_blocks_until_released_and_an_unreleased_one_fails_the_test() -> None:
    store = _store()
    rule = store.hang("put", limit=0.01)
    with pytest.raises(AssertionError, match="was not released"):
        store.put("a", b"1")
    rule = store.hang("put")
    rule.release()  # released before it is reached: passes straight through
    store.put("a", b"1")
    assert rule.reached.is_set() and store.get("a") == b"1"


def test_children_share_the_plan_and_match_paths_from_the_root() -> None:
    store = _store()
    store.fail("list", "_delta_log/*")
    child = store.child("_delta_log")
    with pytest.raises(StorageError):
        list(child.list(""))
    assert store.injections[0].path == "_delta_log/"


def test_step_faults_match_steps_and_versions() -> None:
    steps = StepFaults()
    steps.fail("after_put_entry", "3")
    steps("after_put_entry", 2)
    steps("after_copy", 3)
    with pytest.raises(LogStoreError, match="step after_put_entry of the commit of version 3"):
        steps("after_put_entry", 3)
    steps.crash("after_lock")
    with pytest.raises(SimulatedCrash):
        steps("after_lock", "_delta_log/00000000000000000001.json")
    assert steps.count() == 2 and steps.count("crash") == 1


def test_the_check_catches_a_write_retried_as_a_new_transaction(make_rig: MakeRig) -> None:
    """A naive writer that answers an ambiguous failure by writing again duplicates its rows:
    the checker's counts must refuse that history."""
    history = History(make_rig("local"))
    plan = FaultPlan()
    victim = history.writer("victim", plan)
    plan.fail("put_if_absent", "_delta_log/0*.json", after=True)
    table = victim.table
    with pytest.raises(StorageError), table.transaction() as txn:
        txn.add(write_data_files(table.log_store.store, batch("victim", 0), [],
                                 clock=table.clock, random=table.random))
    history.append(victim)  # batch 0 again: now it is in the table twice
    with pytest.raises(AssertionError):
        history.check()
