"""Property: every history the commit loop lets through is serializable, and no acknowledged
commit is lost.

Hypothesis draws a few transactions (all kinds of ``ops.py``, on two partitions, app-id writes
with various versions), an isolation level, and an interleaving.  Each transaction runs on its
own thread against the same in-memory table, but only one thread runs at a time: a scheduler
hands a baton to the thread hypothesis picks, and the thread gives it back at its next step
boundary: after reading, after staging, and before every commit attempt (a hook in its log
store).  So transactions read, stage and attempt commits in any order, losing races and
retrying as the drawn schedule dictates, deterministically and without sleeping (backoff runs
on a manual clock).

Then, with C the transactions that committed:
- the log holds exactly one version per committed transaction, each carrying the txnId of the
  transaction that was told it committed there (nothing acknowledged was lost or replaced);
- the table equals the result of running the transactions of C one after another in *some*
  order against a model (rows record what their writer read, so a transaction whose reads
  were invalidated would leave rows no serial order reproduces);
- every transaction either committed, skipped (its app version was already recorded), or
  failed with a ConcurrentModificationException.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.storage import MemoryStore
from deltacommit.runtime.clock import ManualClock, RandomSource

from .hooks import HookedLogStore
from .ops import KINDS, Model, Op, begin, create_table, new_op, observe, stage

SKIPPED = "skipped"


class Worker:
    """A thread that runs only while it holds the baton."""

    def __init__(self, body: Callable[[Worker], object]) -> None:
        self._go = threading.Event()
        self._parked = threading.Event()
        self.done = False
        self.result: object = None
        self._thread = threading.Thread(target=self._run, args=(body,), daemon=True)
        self._thread.start()

    def _run(self, body: Callable[[Worker], object]) -> None:
        self._go.wait()
        self._go.clear()
        try:
            self.result = body(self)
        except BaseException as e:  # judged by the test
            self.result = e
        finally:
            self.done = True
            self._parked.set()

    def pause(self, *_: object) -> None:
        """Called on the worker's thread: give the baton back and wait for it."""
        self._parked.set()
        self._go.wait()
        self._go.clear()

    def step(self) -> None:
        """Called by the scheduler: let the worker run to its next pause (or its end)."""
        self._parked.clear()
        self._go.set()
        assert self._parked.wait(60), "a worker did not reach its next step"

    def finish(self) -> None:
        while not self.done:
            self.step()
        self._thread.join(60)


def transaction_body(name: str, op: Op, clock: ManualClock, seed: int) -> Callable[[Worker], object]:
    def body(worker: Worker) -> object:
        log_store = HookedLogStore(MemoryStore(name), worker.pause)
        table = dc.DeltaTable(f"memory://{name}", log_store=log_store, clock=clock,
                              random=RandomSource(seed))
        run = begin(table, op)
        if run.skip:
            return SKIPPED
        worker.pause()
        stage(table, run)
        try:
            return run.txn.commit()     # pauses before each attempt
        except dc.ConcurrentModificationException as e:
            return e
    return body


ops_strategy = st.lists(
    st.tuples(st.sampled_from(KINDS), st.sampled_from("ab"), st.integers(1, 3)),
    min_size=2, max_size=5)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=ops_strategy, level=st.sampled_from(["Serializable", "WriteSerializable"]),
       data=st.data())
def test_committed_histories_are_serializable(specs: list[tuple[str, str, int]], level: str,
                                              data: Any) -> None:
    name = f"occ-{uuid.uuid4().hex}"
    clock = ManualClock()
    _, start = create_table(f"memory://{name}", level,
                            log_store=ConditionalPutLogStore(MemoryStore(name)), clock=clock)
    ops = [new_op(kind, part, app_version) for kind, part, app_version in specs]
    workers = [Worker(transaction_body(name, op, clock, seed)) for seed, op in enumerate(ops)]
    try:
        while True:
            runnable = [w for w in workers if not w.done]
            if not runnable:
                break
            runnable[data.draw(st.integers(0, len(runnable) - 1), label="next")].step()
    finally:
        for w in workers:
            w.finish()

    committed: list[tuple[int, Op, dc.CommitResult]] = []
    for op, w in zip(ops, workers, strict=True):
        r = w.result
        if isinstance(r, dc.CommitResult):
            committed.append((r.version, op, r))
            event("a commit was retried" if r.attempts > 1 else "a commit landed first time")
        else:
            assert r == SKIPPED or isinstance(r, dc.ConcurrentModificationException), repr(r)
            event(f"{type(r).__name__ if r != SKIPPED else SKIPPED}")

    # Nothing acknowledged is lost: one version per committed transaction, each its own.
    table = dc.DeltaTable(f"memory://{name}")
    assert table.version == 1 + len(committed)
    history = {h["version"]: h for h in table.history()}
    assert sorted(v for v, _, _ in committed) == list(range(2, table.version + 1))
    for version, _, result in committed:
        assert history[version]["txnId"] == result.txn_id
        assert history[version]["readVersion"] == result.read_version <= version - 1

    # Serializable: some serial order of the committed transactions gives this table.
    final = observe(table)
    in_order = [op for _, op, _ in sorted(committed, key=lambda c: c[0])]
    assert any(serial(start, order) == final for order in orders(in_order)), (
        f"{level}: no serial order of {[(o.kind, o.part) for o in in_order]} gives {final}")


def serial(start: Model, order: tuple[Op, ...]) -> Model:
    m = start
    for op in order:
        m = op.apply(m)
    return m


def orders(ops: list[Op]) -> itertools.chain[tuple[Op, ...]]:
    """Commit order first (the usual answer), then every other permutation."""
    return itertools.chain([tuple(ops)], itertools.permutations(ops))
