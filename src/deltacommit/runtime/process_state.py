"""What one process shares between its table objects, and how a forked child starts afresh.

A few caches and pools live as long as the process, by design: they are shared by every table
object and thread of it (``docs/ARCHITECTURE.md``, "Process-wide state", lists them).  Each
registers here with the reset that makes a forked child start as a new process would: its
locks new (a lock another thread of the parent held at the fork would otherwise stay held in
the child for ever), its pools not yet started (the parent's threads do not exist in the
child), its AWS clients gone (their connection pools hold the parent's sockets), and what it
remembered of tables forgotten (a hint either way, but a child is a new process).

The pure caches of pure functions (``functools.lru_cache`` on parsers and codecs) hold values
derived from their arguments alone and need no reset.
"""

from __future__ import annotations

import os
from collections.abc import Callable

_RESETS: dict[str, Callable[[], None]] = {}


def process_wide(name: str, reset: Callable[[], None]) -> None:
    """Declare a process-wide cache or pool under ``name``; ``reset`` runs in every forked
    child before it does anything else."""
    _RESETS[name] = reset


def registered() -> tuple[str, ...]:
    """The names of the process-wide caches and pools declared so far (those of the modules
    imported)."""
    return tuple(_RESETS)


def reset_in_child() -> None:
    """Reset every declared cache and pool, as in a freshly forked child."""
    for reset in list(_RESETS.values()):
        reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=reset_in_child)

__all__ = ["process_wide", "registered", "reset_in_child"]
