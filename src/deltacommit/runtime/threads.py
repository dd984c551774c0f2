"""Threads for one call's parallel work, which keep working while the interpreter shuts down.

Reading a table's files, parsing a column of statistics, deleting batches of files: such work
runs on threads started for the call (``with CallThreads(n) as pool``), so that nothing waits
behind another caller's work and the work may itself use the process's pools
(``storage.background``).  Once the interpreter shuts down no executor accepts work, yet tables
are still read and written then (an ``atexit`` handler, a group committer answering the
processes it serves): the work then runs in the caller's thread, one item after another.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")


def run_inline(call: Callable[[], T]) -> Future[T]:
    """``call`` run in this thread, as a future (its failure raised by ``result()``, as a pool
    thread's would be)."""
    done: Future[T] = Future()
    try:
        done.set_result(call())
    except BaseException as e:
        done.set_exception(e)
    return done


class CallThreads(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` for one call; ``submit`` (and so ``map``) runs the work in the
    caller's thread once the interpreter shuts down."""

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        try:
            return super().submit(fn, *args, **kwargs)
        except RuntimeError:
            # "cannot schedule new futures after interpreter shutdown", or "after shutdown"
            # once a worker has seen the interpreter shut down: only used inside ``with``,
            # this executor is never shut down otherwise while work is submitted.
            pass
        return run_inline(partial(fn, *args, **kwargs))
