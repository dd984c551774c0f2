"""In-commit timestamps (PROTOCOL.md "In-Commit Timestamps").  Pure.

File modification times are not a commit's time: copying a table, or an object store that
sets them on upload, changes them, and two commits can get them out of order.  With this
feature every ``commitInfo`` carries ``inCommitTimestamp``, the later of the writer's clock
and one millisecond after the previous commit's, so commit times increase strictly with the
version.  That depends on the version a commit lands at, so the commit loop stamps it on
every attempt (``engine/commit/stamps.py``).

A table that turns the feature on after it has commits records from which version (and
timestamp) commit times are in-commit timestamps; older versions keep file modification
times.  History and timestamp time travel follow that split (``commit_timestamp``,
``version_at``).
"""

from __future__ import annotations

from collections.abc import Sequence

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.actions import CommitInfo, Metadata
from deltacommit.protocol.table_config.properties import (
    ICT_ENABLEMENT_TIMESTAMP,
    ICT_ENABLEMENT_VERSION,
)

FIELD = "inCommitTimestamp"


def next_timestamp(now_ms: int, previous: int | None) -> int:
    """The in-commit timestamp of a commit attempted at ``now_ms`` after one at ``previous``."""
    return now_ms if previous is None else max(now_ms, previous + 1)


def with_enablement(metadata: Metadata, version: int, timestamp: int) -> Metadata:
    """``metadata`` recording that in-commit timestamps start at ``version``."""
    config = dict(metadata.configuration)
    config[ICT_ENABLEMENT_VERSION] = str(version)
    config[ICT_ENABLEMENT_TIMESTAMP] = str(timestamp)
    return Metadata(metadata.id, metadata.schema_string, list(metadata.partition_columns),
                    config, metadata.format, metadata.name, metadata.description,
                    metadata.created_time, dict(metadata.extra))


def commit_timestamp(version: int, commit_info: CommitInfo | None, file_time_ms: int | None,
                     ict_from: int | None) -> int | None:
    """A version's commit time: its in-commit timestamp from version ``ict_from`` on (None:
    the feature is off), else the commit file's modification time."""
    if ict_from is not None and version >= ict_from:
        ts = None if commit_info is None else commit_info.in_commit_timestamp
        if ts is not None:
            return ts
    return file_time_ms


def version_at(timestamp_ms: int, times: Sequence[tuple[int, int]], table: str,
               enabled_at: tuple[int, int] | None = None) -> int:
    """The newest version committed at or before ``timestamp_ms``, given each version's commit
    time (ascending versions).  With an enablement point, a timestamp at or after it looks only
    at versions from there on, one before it only at older ones (PROTOCOL.md's rule: the two
    kinds of times are not comparable)."""
    candidates: Sequence[tuple[int, int]] = times
    if enabled_at is not None:
        version, ts = enabled_at
        if timestamp_ms >= ts:
            candidates = [(v, t) for v, t in times if v >= version]
        else:
            candidates = [(v, t) for v, t in times if v < version]
    best: int | None = None
    for v, t in candidates:
        if t <= timestamp_ms:
            best = v if best is None else max(best, v)
    if best is None:
        earliest = min((t for _, t in times), default=None)
        raise InvalidArgumentError(
            f"table {table} has no version committed at or before timestamp {timestamp_ms} ms"
            + ("" if earliest is None else f"; its earliest retained commit is at {earliest} ms"))
    return best


def commit_times(entries: Sequence[tuple[int, CommitInfo | None, int | None]],
                 ict_from: int | None) -> list[tuple[int, int]]:
    """``(version, commit time)`` of each version whose time is known, ascending.  File times
    are made to increase with the version (as Spark adjusts them): a commit file copied or
    touched later must not make time travel skip versions."""
    out: list[tuple[int, int]] = []
    previous: int | None = None
    for v, info, mtime in sorted(entries, key=lambda e: e[0]):
        t = commit_timestamp(v, info, mtime, ict_from)
        if t is None:
            continue
        if previous is not None and (ict_from is None or v < ict_from):
            t = max(t, previous + 1)
        out.append((v, t))
        previous = t
    return out

