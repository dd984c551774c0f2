"""What a process has established about one table's entries, from its own requests: the
checks of steps 0 and 1 are skipped on it (see ``claim``), never on the word of another
process.  The log store objects of one table in a process share one record
(``logstore.knowledge``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from deltacommit.io.logstore.base import Moment

__all__ = ["EntryFacts"]

#: Versions whose commit file a process read, kept for step 1 (``note_read``): the newest.
_READ_KEPT = 64


@dataclass(eq=False)
class EntryFacts:
    """What a process has established about one table's entries (see the module docstring)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Every entry <= good_upto is complete and its commit file exists.
    good_upto: int = -1
    #: Recent versions whose commit file this process read (``_READ_KEPT`` at most).
    read: set[int] = field(default_factory=set)
    #: latest[0] was the newest version at the moment latest[1].
    latest: tuple[int, Moment] | None = None
    #: When a moving writer's incomplete entry was first seen (by tempPath), while waited for.
    first_seen: dict[str, float] = field(default_factory=dict)
    #: The tablePath spellings found in use at first use (see ``join_fleet``); None before.
    fleet_keys: dict[str, int] | None = None
    #: The spelling joined, where it differs from the configured one.
    joined_path: str | None = None
    mechanism_checked: bool = False
    #: A reader whose spelling had no entries looked under the others (``follow_fleet``).
    fleet_looked: bool = False
    #: What that look found where it joined nothing, and when (monotonic): a ``join_fleet``
    #: within ``LOOK_KEPT_S`` decides on it instead of looking again, as the look it would
    #: make moments later; an older one is never used.
    looked: tuple[dict[str, int], float] | None = None
    #: ``DYNAMODB_MARKER`` is written.
    marked: bool = False
    #: Temp files of claims lost to another writer (no entry names them), deleted together
    #: (``_sweep_temps``), and when the oldest began to wait.
    spent: list[str] = field(default_factory=list)
    spent_since: float = 0.0

    def note_good(self, version: int) -> None:
        with self.lock:
            self.good_upto = max(self.good_upto, version)

    def note_latest(self, version: int, since: Moment) -> None:
        with self.lock:
            if self.latest is None or version > self.latest[0] \
                    or (version == self.latest[0] and since > self.latest[1]):
                self.latest = (version, since)

    def note_read(self, version: int) -> None:
        """This process read ``version``'s commit file: step 1 need not look for it."""
        with self.lock:
            read = self.read
            read.add(version)
            if len(read) > _READ_KEPT:
                read.difference_update(sorted(read)[:len(read) - _READ_KEPT])

    def was_read(self, version: int) -> bool:
        with self.lock:
            return version in self.read

    def knows_good(self, version: int) -> bool:
        with self.lock:
            return version <= self.good_upto
