"""Random UUIDs name data files, transactions and commits: every one must be unique, across
threads and across forked processes (a data file name drawn twice overwrites a file)."""

from __future__ import annotations

import multiprocessing
import threading
import uuid

from deltacommit.runtime.clock import _RandomBytes, random_uuid


def test_uuids_are_version_4_and_unique_across_threads() -> None:
    threads, each = 16, 2_000  # many refills of the 256-draw chunks, raced
    barrier = threading.Barrier(threads)
    drawn: list[list[uuid.UUID]] = [[] for _ in range(threads)]

    def draw(i: int) -> None:
        barrier.wait()
        drawn[i] = [random_uuid() for _ in range(each)]

    pool = [threading.Thread(target=draw, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    every = [u for d in drawn for u in d]
    assert len(every) == threads * each
    assert len(set(every)) == len(every)
    assert all(u.version == 4 and u.variant == uuid.RFC_4122 for u in every)


def test_each_draw_is_handed_out_once() -> None:
    source = _RandomBytes()
    draws = [source.take() for _ in range(3 * _RandomBytes.SLOTS + 5)]
    assert all(len(d) == 16 for d in draws)
    assert len(set(draws)) == len(draws)


def _child_draws(queue: multiprocessing.Queue[list[str]]) -> None:
    queue.put([str(random_uuid()) for _ in range(64)])


def test_a_forked_child_never_repeats_its_parents_draws() -> None:
    random_uuid()  # the parent holds unread draws when it forks
    ctx = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[list[str]] = ctx.Queue()
    children = [ctx.Process(target=_child_draws, args=(queue,)) for _ in range(2)]
    for c in children:
        c.start()
    theirs = [queue.get(timeout=60) for _ in children]
    for c in children:
        c.join(timeout=60)
        assert c.exitcode == 0
    ours = [str(random_uuid()) for _ in range(64)]
    every = ours + theirs[0] + theirs[1]
    assert len(set(every)) == len(every)
