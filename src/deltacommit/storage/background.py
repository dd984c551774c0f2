"""The threads that run a store's background puts (``ObjectStore.put_soon``).

A data file that ``dc.write`` uploads is read by no one until a commit names it, so its upload
need not hold the writer up: the commit prepares its version meanwhile, and the DynamoDB log
store writes its temp file while the upload is still in flight.  Against S3 each of those
requests is a round trip, so overlapping them takes one round trip off every such commit.

One pool serves the process.  A process forked from one that had used it (a Spark Python
worker forked by its daemon) gets a new pool: the parent's threads do not exist in the child,
and work queued to them would never run.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

#: As many puts at once as a store's HTTP client pools connections (``aws.config``): one per
#: writer thread of a busy process, none waiting for another's slot.
MAX_THREADS = 64

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pid = 0


def submit(call: Callable[[], T]) -> Future[T]:
    """Run ``call`` on the process's background-put threads."""
    global _pool, _pid
    with _lock:
        if _pool is None or _pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=MAX_THREADS,
                                       thread_name_prefix="deltacommit-put")
            _pid = os.getpid()
        return _pool.submit(call)
