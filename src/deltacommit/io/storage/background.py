"""Thread pools of the process: background puts (``ObjectStore.put_soon``), syncs, proofs.

A data file that ``dc.write`` uploads is read by no one until a commit names it, so its upload
need not hold the writer up: the commit prepares its version meanwhile, and the DynamoDB log
store writes its temp file while the upload is still in flight.  Against S3 each of those
requests is a round trip, so overlapping them takes one round trip off every such commit.

A pool lives as long as the process, with two exceptions that every pool here handles:

* A process forked from one that had used it (a Spark Python worker forked by its daemon)
  starts a new pool: the parent's threads do not exist in the child, and work queued to them
  would never run.
* Once the interpreter shuts down, no pool accepts work, yet commits still happen then (a
  group committer answering the processes it serves, an ``atexit`` handler): the work runs in
  the caller's thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import TypeVar

from deltacommit.runtime.process_state import ForkSafeLock, process_wide
from deltacommit.runtime.threads import run_inline

T = TypeVar("T")
R = TypeVar("R")


class ProcessPool:
    """A thread pool started on first use, afresh in a forked child, inline at shutdown."""

    def __init__(self, threads: int, name: str) -> None:
        self.threads = threads
        self.name = name
        self._lock = ForkSafeLock()
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0
        process_wide(f"thread pool {name} (io.storage.background)", self._forget_in_child)

    def _forget_in_child(self) -> None:
        """The parent's threads do not exist in a forked child: start afresh on first use."""
        self._pool = None
        self._pid = 0

    def submit(self, call: Callable[[], T]) -> Future[T]:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix=self.name)
                self._pid = os.getpid()
            try:
                return self._pool.submit(call)
            except RuntimeError:  # "cannot schedule new futures after (interpreter) shutdown"
                pass
        return run_inline(call)

    def map(self, call: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """``call`` on every item at once; the results in order, or the first item's error
        once every call has ended."""
        futures = [self.submit(partial(call, item)) for item in items]
        for f in futures:
            f.exception()
        return [f.result() for f in futures]


#: As many puts at once as a store's HTTP client pools connections (``aws.config``): one per
#: writer thread of a busy process, none waiting for another's slot.
PUTS = ProcessPool(64, "deltacommit-put")


def submit(call: Callable[[], T]) -> Future[T]:
    """Run ``call`` on the process's background-put threads."""
    return PUTS.submit(call)
