"""In-commit timestamps (PROTOCOL.md "In-Commit Timestamps").  Pure.

File modification times are not a commit's time: copying a table, or an object store that
sets them on upload, changes them, and two commits can get them out of order.  With this
feature every ``commitInfo`` carries ``inCommitTimestamp``, the later of the writer's clock
and one millisecond after the previous commit's, so commit times increase strictly with the
version.  That depends on the version a commit lands at, so the commit loop stamps it on
every attempt (``engine/transaction/stamps.py``).

A table that turns the feature on after it has commits records from which version (and
timestamp) commit times are in-commit timestamps; older versions keep file modification
times.  History and timestamp time travel follow that split (``commit_timestamp``,
``version_at``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from deltacommit.errors import CorruptLogError, InvalidArgumentError
from deltacommit.protocol.actions import CommitInfo, Metadata, Protocol

ENABLE_KEY = "delta.enableInCommitTimestamps"
ENABLEMENT_VERSION_KEY = "delta.inCommitTimestampEnablementVersion"
ENABLEMENT_TIMESTAMP_KEY = "delta.inCommitTimestampEnablementTimestamp"
FIELD = "inCommitTimestamp"


def is_enabled(protocol: Protocol, metadata: Metadata) -> bool:
    """Whether every commit must carry an in-commit timestamp."""
    return ("inCommitTimestamp" in (protocol.writer_features or ())
            and protocol.min_writer_version >= 7
            and (metadata.configuration.get(ENABLE_KEY) or "false").strip().lower() == "true")


def next_timestamp(now_ms: int, previous: int | None) -> int:
    """The in-commit timestamp of a commit attempted at ``now_ms`` after one at ``previous``."""
    return now_ms if previous is None else max(now_ms, previous + 1)


def enablement(metadata: Metadata, table: str) -> tuple[int, int] | None:
    """``(version, timestamp)`` from which the table's commits carry in-commit timestamps; None
    if they all do (or the feature is off)."""
    config = metadata.configuration
    v, ts = config.get(ENABLEMENT_VERSION_KEY), config.get(ENABLEMENT_TIMESTAMP_KEY)
    if v is None and ts is None:
        return None
    try:
        return int(v or ""), int(ts or "")
    except ValueError:
        raise CorruptLogError(
            f"table {table}: {ENABLEMENT_VERSION_KEY}={v!r} and {ENABLEMENT_TIMESTAMP_KEY}="
            f"{ts!r} must both be integers") from None


def with_enablement(metadata: Metadata, version: int, timestamp: int) -> Metadata:
    """``metadata`` recording that in-commit timestamps start at ``version``."""
    config = dict(metadata.configuration)
    config[ENABLEMENT_VERSION_KEY] = str(version)
    config[ENABLEMENT_TIMESTAMP_KEY] = str(timestamp)
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


def ict_start(metadata: Metadata, protocol: Protocol, table: str) -> int | None:
    """The first version whose commits carry in-commit timestamps (None: none do)."""
    if not is_enabled(protocol, metadata):
        return None
    e = enablement(metadata, table)
    return 0 if e is None else e[0]


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


def previous_from_config(config: Mapping[str, str | None]) -> int | None:
    """The enablement timestamp, a lower bound for the previous commit's timestamp when the
    commit file that holds it is gone."""
    ts = config.get(ENABLEMENT_TIMESTAMP_KEY)
    return int(ts) if ts is not None and ts.strip().lstrip("-").isdigit() else None
