"""Which log files a snapshot is built from: a checkpoint and the commits after it.  Pure: no I/O.

A reader lists ``_delta_log`` (from the checkpoint ``_last_checkpoint`` names, or from the
start) and needs the newest checkpoint it can use at or before the version it wants, then every
commit after that checkpoint up to that version, none missing: a ``LogSegment``, as
delta-kernel-rs calls it.  ``LogListing`` is what one listing offers, ``LogListing.segment`` the
choice.  Two facts are known only by asking the store, so the caller (``snapshot.Snapshot.load``)
feeds them back in: whether a checkpoint is whole (it reads it, and asks again with the names of
those that failed) and whether a commit absent from the listing exists after all (it probes
the gaps, and adds what it found with ``LogSegment.with_found``).  ``LogSegment.check`` then
refuses a segment that still lacks a version, with the error a reader reports.
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace

from deltacommit.errors import MissingVersionError, TableNotFoundError
from deltacommit.protocol.log.names import LOG_DIR, LogFile, commit_name, format_gaps, version_gaps

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- checkpoints


@dataclass(frozen=True, slots=True)
class CheckpointCandidate:
    """One checkpoint in the listing: a classic file, a complete multi-part set or a V2 file."""

    version: int
    kind: str
    files: tuple[LogFile, ...]

    @property
    def name(self) -> str:
        return self.files[0].name if len(self.files) == 1 else (
            f"{self.version:020d}.checkpoint.*.{len(self.files):010d}.parquet")


def _rank(c: CheckpointCandidate, prefer: str | None) -> tuple[int, int, str]:
    """Order among the checkpoints of one version: the one ``_last_checkpoint`` describes
    (``prefer``), then a classic file (one GET, readable by every client), a UUID-named Parquet
    file, a UUID-named JSON file, and last a multi-part set (several files, and the only kind
    that can be a mixture of two writers' parts).  Names break ties so the choice is stable."""
    if c.kind == "checkpoint_v2":
        kind = 2 if c.files[0].is_json else 1
    else:
        kind = 0 if c.kind == "checkpoint" else 3
    return (0 if prefer is not None and c.name == prefer else 1, kind, c.name)


def checkpoint_candidates(files: Iterable[LogFile], target: int | None = None,
                          prefer: str | None = None) -> list[CheckpointCandidate]:
    """Checkpoints at or before ``target``, newest first; at one version the one named
    ``prefer``, then classic, UUID-named (Parquet, then JSON) and multi-part ones.  Multi-part
    sets with a part missing are left out (a reader cannot use them)."""
    out: list[CheckpointCandidate] = []
    parts: dict[tuple[int, int], dict[int, LogFile]] = {}
    for f in files:
        if target is not None and f.version > target:
            continue
        if f.kind == "checkpoint" or f.kind == "checkpoint_v2":
            out.append(CheckpointCandidate(f.version, f.kind, (f,)))
        elif f.kind == "checkpoint_part" and f.parts and f.part:
            parts.setdefault((f.version, f.parts), {})[f.part] = f
    for (version, n), got in parts.items():
        if len(got) == n and all(i in got for i in range(1, n + 1)):
            out.append(CheckpointCandidate(version, "checkpoint_part",
                                           tuple(got[i] for i in range(1, n + 1))))
        else:
            logger.debug("multi-part checkpoint %d has %d of %d parts; not usable", version,
                         len(got), n)
    out.sort(key=lambda c: (-c.version, _rank(c, prefer)))
    return out


def format_versions(versions: Iterable[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``3-5, 9`` for messages (``versions`` ascending)."""
    runs: list[list[int]] = []
    for v in versions:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


# --------------------------------------------------------------------------- listing


@dataclass(frozen=True, slots=True)
class LogListing:
    """One listing of ``_delta_log`` as a reader may use it.

    A checkpoint at v is written only once v.json exists, and cleanup never deletes the commit
    of the checkpoint it keeps: a checkpoint newer than every commit is stray (``stray``), and
    using it would replace the table with whatever it holds, so it is left out of ``files``.
    """

    #: The listed files, stray checkpoints left out.
    files: tuple[LogFile, ...]
    #: Versions of the listed commits, ascending, each once.
    commits: tuple[int, ...]
    #: Versions of the listed checkpoint files (whole or not), ascending, each once.
    checkpoints: tuple[int, ...]
    #: Versions of the stray checkpoints, ascending, each once.
    stray: tuple[int, ...]

    @classmethod
    def of(cls, files: Iterable[LogFile]) -> LogListing:
        listed = tuple(files)
        commits = sorted({f.version for f in listed if f.kind == "commit"})
        checkpoints = {f.version for f in listed if f.kind.startswith("checkpoint")}
        stray: list[int] = []
        if commits:
            newest = commits[-1]
            stray = sorted(v for v in checkpoints if v > newest)
            if stray:
                listed = tuple(f for f in listed
                               if not (f.kind.startswith("checkpoint") and f.version > newest))
                checkpoints -= set(stray)
        return cls(listed, tuple(commits), tuple(sorted(checkpoints)), tuple(stray))

    def target(self, version: int | None, uri: str) -> int:
        """The version a snapshot of this listing reaches: ``version``, or the newest listed.

        TableNotFoundError if the listing holds no table, or no such version.
        """
        if not self.commits and not self.checkpoints:
            raise TableNotFoundError(
                f"no Delta table at {uri}: {uri}/{LOG_DIR} has no commit files")
        latest = max(self.commits[-1:] + self.checkpoints[-1:])
        if version is None:
            return latest
        if version < 0 or version > latest:
            raise TableNotFoundError(
                f"table {uri} has versions up to {latest}; version {version} does not exist")
        return version

    def segment(self, target: int, unusable: Collection[str] = frozenset(), *,
                latest: bool = False, prefer: str | None = None) -> LogSegment:
        """The segment reaching ``target`` from the newest whole checkpoint at or before it
        whose name is not in ``unusable`` (from version 0 if there is none); among several of
        one version, the one named ``prefer`` first (see ``checkpoint_candidates``).

        ``latest`` says that ``target`` is the newest version listed rather than one asked
        for; it only changes the wording of the error when version 0 is missing.
        """
        checkpoint = next((c for c in checkpoint_candidates(self.files, target, prefer)
                           if c.name not in unusable), None)
        start = 0 if checkpoint is None else checkpoint.version + 1
        commits = self.commits[bisect_left(self.commits, start):bisect_right(self.commits, target)]
        skipped = () if checkpoint is not None else self.checkpoints[
            :bisect_right(self.checkpoints, target)]
        return LogSegment(target, checkpoint, commits, skipped, latest)


# --------------------------------------------------------------------------- segment


@dataclass(frozen=True, slots=True)
class LogSegment:
    """A checkpoint (or none) and the commits after it up to ``version``.

    Replaying ``commits`` onto the checkpoint's state gives the table at ``version`` once
    ``check`` has passed, i.e. once ``commits`` is exactly ``start..version``.
    """

    #: The version the segment reaches.
    version: int
    #: The checkpoint the segment starts from; None: it starts at version 0.
    checkpoint: CheckpointCandidate | None
    #: The commits known to exist after the checkpoint up to ``version``, ascending.
    commits: tuple[int, ...]
    #: Without a checkpoint: the versions of the checkpoints at or before ``version`` that
    #: were passed over (unusable or missing a part), for the error that names them.
    skipped_checkpoints: tuple[int, ...] = ()
    #: ``version`` is the newest listed, not a version asked for.
    latest: bool = False

    @property
    def start(self) -> int:
        """The first version to replay."""
        return 0 if self.checkpoint is None else self.checkpoint.version + 1

    @property
    def gaps(self) -> list[tuple[int, int]]:
        """Up to eight ranges of ``start..version`` missing from ``commits``."""
        return version_gaps(list(self.commits), self.start, self.version)

    def with_found(self, found: Iterable[int]) -> LogSegment:
        """This segment with the commits a second look at the store found (others ignored)."""
        known = set(self.commits)
        extra = {v for v in found if self.start <= v <= self.version and v not in known}
        if not extra:
            return self
        return replace(self, commits=tuple(sorted(known | extra)))

    def check(self, uri: str) -> None:
        """MissingVersionError unless every version from ``start`` to ``version`` is known."""
        gaps = self.gaps
        if not gaps:
            return
        why = (f" (checkpoint(s) at version {format_versions(self.skipped_checkpoints)} could "
               "not be used; see the logged warnings)") if self.skipped_checkpoints else ""
        if self.checkpoint is None and gaps[0][0] == 0 and self.latest:
            raise MissingVersionError(
                f"table {uri}: {uri}/{LOG_DIR}/{commit_name(0)} is missing and no usable "
                f"checkpoint covers it; the log cannot be replayed{why}")
        raise MissingVersionError(
            f"table {uri}: the log lacks version(s) {format_gaps(gaps)} needed to reach "
            f"version {self.version}{why}")
