"""Delta's duration-valued table properties (``interval 30 days``) in milliseconds.  Pure."""

from __future__ import annotations

import functools
import re

_UNIT_MS = {
    "nanosecond": 1e-6, "microsecond": 1e-3, "millisecond": 1, "second": 1_000,
    "minute": 60_000, "hour": 3_600_000, "day": 86_400_000, "week": 604_800_000,
}
_UNIT_ALIASES = {"ns": "nanosecond", "us": "microsecond", "ms": "millisecond", "s": "second",
                 "sec": "second", "min": "minute", "h": "hour", "d": "day", "w": "week"}
_PART = re.compile(r"(-?\d+(?:\.\d+)?)\s*([a-zA-Z]+)")


@functools.lru_cache(maxsize=256)
def parse_interval_ms(text: str) -> int:
    """``interval 1 week`` / ``30 days`` / ``interval 2 days 12 hours`` in milliseconds.

    Spark's calendar-interval syntax without months and years, which have no fixed length
    and are refused for retention by Delta as well.  Cached: every commit checks the log
    retention of its table, a handful of texts per process.
    """
    s = text.strip().lower()
    if s.startswith("interval"):
        s = s[len("interval"):].strip()
    if not s:
        raise ValueError(f"empty interval {text!r}")
    total = 0.0
    pos = 0
    for m in _PART.finditer(s):
        if s[pos:m.start()].strip():
            raise ValueError(f"cannot parse interval {text!r}")
        unit = m.group(2)
        unit = _UNIT_ALIASES.get(unit, unit.removesuffix("s"))
        if unit not in _UNIT_MS:
            raise ValueError(f"interval {text!r} has unit {m.group(2)!r}; use weeks, days, hours, "
                             "minutes, seconds or milliseconds")
        total += float(m.group(1)) * _UNIT_MS[unit]
        pos = m.end()
    if pos == 0 or s[pos:].strip():
        raise ValueError(f"cannot parse interval {text!r}")
    if total < 0:
        raise ValueError(f"interval {text!r} is negative")
    return int(total)


def may_predate_cleanup(log_retention_ms: int, confirmed_at: float, now: float) -> bool:
    """Whether log cleanup may have deleted commits made after a snapshot last known to be
    the newest version at ``confirmed_at`` (seconds).

    A commit made after that moment cannot have expired while the moment is younger than
    ``delta.logRetentionDuration`` (``log_retention_ms``), less a day for the cut-off's
    rounding to midnight and an hour for clock skew."""
    return now - confirmed_at > log_retention_ms / 1000 - 86_400 - 3_600
