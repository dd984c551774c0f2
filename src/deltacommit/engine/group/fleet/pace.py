"""How fast a table's fleet moves, as this process has seen it: when to look for a round's
version, and how long a round's committer lingers.

Timing only: nothing here decides what lands or where (a wrong figure costs a request or a
few milliseconds, never an outcome).  Kept for the process, per table, so that ``dc.write(uri,
...)``, which makes a new writer for every append, learns from the appends before it.

* ``rtt``: one request's round trip (a round key's conditional put, a look for a version),
  an exponentially weighted mean;
* ``round``: from losing a round's key to finding its version, the same (what a waiter need
  not poll through: its first look goes out shortly before the version is due);
* the newest version this process learned of, and when: a round's committer that finds the
  version before its round carried several transactions (hosts appending one after another)
  lingers until those hosts, told of their outcome by it, had time to store their next
  transaction's data and publish it (``FleetPolicy.linger_round_trips``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

#: Weight of a new observation in the means.
_ALPHA = 0.25
#: Most tables whose pace a process keeps.
_CAPACITY = 64
#: A round longer than this many times the mean is not taken into it.
_OUTLIER = 3.0
#: A first look waits at most this many round trips.
_MOST_ROUND_TRIPS = 6.0
#: A writer that learned of the newest version less than this many rounds before it lost
#: the next round's key is taken to be current (that round is under way, not over).  It
#: stores its data and publishes its record between the two, which takes most of a round
#: (three requests in a row where a round is about five): half a round took almost every
#: writer for one behind, whose first look then went out at once and found nothing several
#: times over.
_CURRENT_ROUNDS = 1.5


@dataclass
class Pace:
    """One table's pace, as this process has seen it (seconds; monotonic clock)."""

    rtt: float | None = None
    round: float | None = None
    #: The newest version learned of, and when (monotonic).
    learned_version: int = -1
    learned_at: float = 0.0

    def saw_request(self, seconds: float) -> None:
        self.rtt = seconds if self.rtt is None else self.rtt + _ALPHA * (seconds - self.rtt)

    def saw_round(self, seconds: float) -> None:
        """A round that took ``seconds``; one of more than ``_OUTLIER`` times the mean (a
        stopped or killed winner, waited out) is no measure of how rounds go, and would
        make every waiter look late."""
        if self.round is None:
            self.round = seconds
        elif seconds <= _OUTLIER * self.round:
            self.round += _ALPHA * (seconds - self.round)

    def learned(self, version: int, at: float) -> None:
        if version > self.learned_version:
            self.learned_version, self.learned_at = version, at

    def current(self, lost_at: float, known_since: float) -> bool:
        """Whether a writer that learned of the newest version at ``known_since`` and lost the
        next round's key at ``lost_at`` is current: the round it lost is under way (its
        first look waits until the version is due), rather than over (it looks at once);
        never before any round was seen."""
        return self.round is not None and lost_at - known_since < _CURRENT_ROUNDS * self.round

    def first_look(self, lost_at: float) -> float:
        """When a writer that lost a round's key at ``lost_at`` first looks for the round's
        version: most of the way through a round as rounds have gone (its GET reaches the
        store half a round trip later), but no more than ``_MOST_ROUND_TRIPS`` round trips;
        at once before any round was seen."""
        if self.round is None:
            return lost_at
        return lost_at + min(0.6 * self.round, _MOST_ROUND_TRIPS * (self.rtt or 0.0))

    def linger_until(self, base: int, members: int, round_trips: float, fresh_at: float
                     ) -> float:
        """Until when the committer of round ``base + 1`` lingers before listing: where
        version ``base`` carried more than one transaction, ``round_trips`` round trips after
        this process learned of it (``fresh_at``, when this writer did, if the process does
        not know when it landed); else not at all."""
        if members < 2 or self.rtt is None or round_trips <= 0:
            return 0.0
        since = self.learned_at if self.learned_version == base else fresh_at
        return since + round_trips * self.rtt


_lock = threading.Lock()
_paces: dict[str, Pace] = {}


def of(table: str) -> Pace:
    """The process's pace of ``table`` (its URI); threads share it (a race between two
    updates loses an observation, nothing else)."""
    with _lock:
        pace = _paces.get(table)
        if pace is None:
            if len(_paces) >= _CAPACITY:
                _paces.pop(next(iter(_paces)))
            pace = _paces[table] = Pace()
        return pace
