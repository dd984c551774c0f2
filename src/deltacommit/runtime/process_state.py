"""What one process shares between its table objects, and how a forked child starts afresh.

A few caches and pools live as long as the process, by design: they are shared by every table
object and thread of it (``docs/ARCHITECTURE.md``, "Process-wide state", lists them).  Each
registers here with the reset that makes a forked child start as a new process would, and
guards itself with a ``ForkSafeLock``, which the child gets new (a lock another thread of the
parent held at the fork would otherwise stay held in the child for ever).  A child starts
with no pools (the parent's threads do not exist in it), no AWS clients (their connection
pools hold the parent's sockets) and nothing remembered of tables (a hint either way, but a
child is a new process).

The pure caches of pure functions (``functools.lru_cache`` on parsers and codecs) hold values
derived from their arguments alone and need no reset.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from types import TracebackType

_RESETS: dict[str, Callable[[], None]] = {}


class ForkSafeLock:
    """A lock that a forked child gets anew: the parent's may be held by a thread that does not
    exist in the child, which would wait for it for ever.  Used as ``with lock:``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        _LOCKS.add(self)

    def renew(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> ForkSafeLock:
        self._lock.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._lock.release()


_LOCKS: weakref.WeakSet[ForkSafeLock] = weakref.WeakSet()


def process_wide(name: str, reset: Callable[[], None]) -> None:
    """Declare a process-wide cache or pool under ``name``; ``reset`` runs in every forked
    child before it does anything else."""
    _RESETS[name] = reset


def registered() -> tuple[str, ...]:
    """The names of the process-wide caches and pools declared so far (those of the modules
    imported)."""
    return tuple(_RESETS)


def reset_in_child() -> None:
    """Renew every ``ForkSafeLock``, then reset every declared cache and pool, as in a freshly
    forked child."""
    for lock in list(_LOCKS):
        lock.renew()
    for reset in list(_RESETS.values()):
        reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=reset_in_child)

__all__ = ["ForkSafeLock", "process_wide", "registered", "reset_in_child"]
