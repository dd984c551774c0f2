"""Time and randomness as injectable sources.

Leases, TTLs, backoff and commit timestamps all depend on time; making the clock a parameter
lets tests drive expiry and clock skew deterministically instead of sleeping.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Protocol

from deltacommit.runtime.process_state import process_wide


class Clock(Protocol):
    def time(self) -> float:
        """Wall-clock seconds since the epoch (what other machines also see)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for measuring durations)."""

    def sleep(self, seconds: float) -> None:
        """Wait; a manual clock advances instead."""


class SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ManualClock:
    """A clock that moves only when told to; ``sleep`` advances it.

    ``skew`` shifts the wall clock only, modelling a machine whose clock is wrong while its
    monotonic timer still measures intervals correctly.
    """

    def __init__(self, start: float = 1_700_000_000.0, skew: float = 0.0) -> None:
        self._now = start
        self._mono = 0.0
        self.skew = skew
        self._lock = threading.Lock()

    def time(self) -> float:
        with self._lock:
            return self._now + self.skew

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
            self._mono += seconds


SYSTEM_CLOCK = SystemClock()


def now_ms(clock: Clock) -> int:
    return int(clock.time() * 1000)


class _RandomBytes:
    """16-byte draws of ``os.urandom``, read 256 at a time.

    Every data file, transaction and commit takes a random UUID, and each ``os.urandom`` call
    lets the thread queue again for the interpreter behind every other writer thread: with
    many writer threads that wait, not the system call, is the cost.  The draws are the
    kernel's bytes all the same, each handed out once (a counter numbers them, so threads need
    no lock but to refill), and a forked child discards its parent's unread ones.
    """

    SLOTS = 256

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: tuple[bytes, Iterator[int]] = (b"", itertools.count(self.SLOTS))
        process_wide(f"random draws {id(self):x} (runtime.clock)", self._discard)

    def _discard(self) -> None:
        self._lock = threading.Lock()
        self._state = (b"", itertools.count(self.SLOTS))

    def take(self) -> bytes:
        while True:
            chunk, slots = self._state
            i = next(slots)
            if i < self.SLOTS:
                return chunk[16 * i:16 * i + 16]
            with self._lock:
                if self._state[1] is slots:
                    self._state = (os.urandom(16 * self.SLOTS), itertools.count())


_RANDOM_BYTES = _RandomBytes()


def random_uuid() -> uuid.UUID:
    """``uuid.uuid4()``: a version 4 UUID of the kernel's random bytes (``_RandomBytes``)."""
    return uuid.UUID(bytes=_RANDOM_BYTES.take(), version=4)


class RandomSource:
    """UUIDs and jitter from one seedable generator."""

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed)
        self._seeded = seed is not None
        self._lock = threading.Lock()

    def uuid(self) -> str:
        if not self._seeded:
            return str(random_uuid())
        with self._lock:
            return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def uniform(self, low: float, high: float) -> float:
        with self._lock:
            return self._rng.uniform(low, high)


DEFAULT_RANDOM = RandomSource()
