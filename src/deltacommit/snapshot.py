"""Snapshots: the state of a table at one version, loaded from the log and kept current.

Loading starts from the newest usable checkpoint (if any) and replays the commits after it;
``update`` reads only the commits newer than the cached version, which is also what every
commit retry does, so refreshing state costs one request per new commit instead of a reload.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deltacommit.errors import (
    CorruptLogError,
    MissingVersionError,
    ObjectNotFoundError,
    SchemaMismatchError,
    TableNotFoundError,
    UnsupportedProtocolError,
    UnsupportedTypeError,
)
from deltacommit.log.actions import Action, Add, CommitInfo, Metadata, Protocol, parse_commit
from deltacommit.log.features import check_readable
from deltacommit.log.names import (
    LOG_DIR,
    LogFile,
    commit_name,
    commit_path,
    format_gaps,
    version_gaps,
)
from deltacommit.log.replay import TableState

if TYPE_CHECKING:
    import pyarrow as pa

    from deltacommit.checkpoint import LastCheckpoint
    from deltacommit.logstore.base import LogStore


logger = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class Commit:
    """One version of the log, decoded."""

    version: int
    actions: list[Action]

    @property
    def commit_info(self) -> CommitInfo | None:
        for a in self.actions:
            if isinstance(a, CommitInfo):
                return a
        return None


def decode_commit(log_store: LogStore, version: int, data: bytes) -> Commit:
    source = f"{log_store.table_uri}/{LOG_DIR}/{commit_name(version)}"
    return Commit(version, parse_commit(data, source))


class Snapshot:
    """A table's state at ``version``; ``update()`` moves it forward in place."""

    def __init__(self, log_store: LogStore, state: TableState) -> None:
        self.log_store = log_store
        self.state = state
        self._schema: pa.Schema | None = None
        self._schema_source: str | None = None

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(cls, log_store: LogStore, version: int | None = None) -> Snapshot:
        """The snapshot at ``version`` (the latest if None).

        ``_last_checkpoint`` names a recent checkpoint, so only the log files from there on are
        listed; if that checkpoint turns out to be unusable (or the hint is absent, stale or
        the version asked for is older), the whole log is listed and every checkpoint at or
        before the target is a candidate, newest first.
        """
        from deltacommit.checkpoint import read_last_checkpoint

        hint = read_last_checkpoint(log_store)
        unusable: set[str] = set()
        if hint is not None and (version is None or version >= hint.version):
            snap = cls._load_listed(log_store, log_store.list_log(hint.version), version, hint,
                                    unusable, partial=True)
            if snap is not None:
                return snap
        snap = cls._load_listed(log_store, log_store.list_log(0), version, hint, unusable,
                                partial=False)
        assert snap is not None
        return snap

    @classmethod
    def _load_listed(cls, log_store: LogStore, files: list[LogFile], version: int | None,
                     hint: LastCheckpoint | None, unusable: set[str],
                     partial: bool) -> Snapshot | None:
        """Load from a listing; with ``partial`` (a listing that starts at the hinted checkpoint)
        return None instead of failing when that listing holds no usable checkpoint."""
        from deltacommit.checkpoint import load_checkpoint_base

        uri = log_store.table_uri
        commits = {f.version for f in files if f.kind == "commit"}
        checkpoints = [f.version for f in files if f.kind.startswith("checkpoint")]
        if commits:
            # A checkpoint at v is written only once v.json exists, and cleanup never deletes
            # the commit of the checkpoint it keeps: one newer than every commit is stray, and
            # using it would replace the table with whatever it holds.
            newest = max(commits)
            stray = sorted({v for v in checkpoints if v > newest})
            if stray:
                logger.warning("table %s: ignoring checkpoint(s) at version %s, newer than the "
                               "newest commit %d", uri, _ranges(stray), newest)
                files = [f for f in files if not (f.kind.startswith("checkpoint")
                                                  and f.version > newest)]
                checkpoints = [v for v in checkpoints if v <= newest]
        if not commits and not checkpoints:
            if partial:
                return None
            raise TableNotFoundError(
                f"no Delta table at {uri}: {uri}/{LOG_DIR} has no commit files")
        latest = max(commits | set(checkpoints))
        if version is not None:
            if version < 0 or version > latest:
                if partial:
                    return None
                raise TableNotFoundError(
                    f"table {uri} has versions up to {latest}; version {version} does not exist")
            target = version
        else:
            target = latest
        base = load_checkpoint_base(log_store, files, target, hint, unusable)
        if base is None and partial:
            return None
        start = 0 if base is None else base.version + 1
        gaps = version_gaps(sorted(commits), start, target)
        if gaps:
            # A directory listing taken while commits are being created is not a snapshot of
            # the directory: readdir(3) may return a new N+1.json and miss the N.json created
            # just before it.  One more listing from the first gap finds such a version; the
            # cost follows the files listed, never the width of a gap.
            commits |= found_after_listing(log_store, commits, gaps, target)
            gaps = version_gaps(sorted(commits), start, target)
        if gaps:
            skipped = sorted({v for v in checkpoints if v <= target})
            why = (f" (checkpoint(s) at version {_ranges(skipped)} could not be used; see the "
                   "logged warnings)") if base is None and skipped else ""
            if base is None and gaps[0][0] == 0 and version is None:
                raise MissingVersionError(
                    f"table {uri}: {uri}/{LOG_DIR}/{commit_name(0)} is missing and no usable "
                    f"checkpoint covers it; the log cannot be replayed{why}")
            raise MissingVersionError(
                f"table {uri}: the log lacks version(s) {format_gaps(gaps)} needed to reach "
                f"version {target}{why}")
        needed = list(range(start, target + 1))
        state = base if base is not None else TableState()
        snap = cls(log_store, state)
        snap._apply_range(needed)
        state.validate(uri)
        snap._check_readable()
        return snap

    def _apply_range(self, versions: list[int]) -> list[Commit]:
        if not versions:
            return []
        pairs = self.log_store.read_range(versions[0], versions[-1])
        return self._apply(pairs)

    def _apply(self, pairs: list[tuple[int, bytes]]) -> list[Commit]:
        out: list[Commit] = []
        for version, data in pairs:
            commit = decode_commit(self.log_store, version, data)
            self.state.apply(version, commit.actions,
                             f"{self.log_store.table_uri}/{LOG_DIR}/{commit_name(version)}")
            out.append(commit)
        return out

    def update(self) -> list[Commit]:
        """Apply the commits newer than this snapshot, in place; returns them.

        If log cleanup removed the commits right after this snapshot, the state is reloaded
        from the newest checkpoint instead (and no commits are returned: they are gone).
        """
        new = self._apply(self.log_store.read_commits_after(self.state.version))
        if new:
            self._check_readable()
            return new
        reloaded = self._reload_past_cleanup()
        if reloaded is not None:
            self.state = reloaded.state
        return []

    def updated(self, may_predate_cleanup: bool = True) -> tuple[Snapshot, list[Commit]]:
        """A new snapshot with the commits newer than this one (``self`` if there are none).

        Snapshots handed to readers are never mutated, so a scan on another thread never sees
        the file set change under it.  As with ``update``, a snapshot older than the log's
        retention comes back reloaded from the newest checkpoint, with no commits.  A caller
        that knows this snapshot was the newest version recently enough that no commit after it
        can have expired passes ``may_predate_cleanup=False`` and saves that check's request.
        """
        pairs = self.log_store.read_commits_after(self.state.version)
        if not pairs:
            if not may_predate_cleanup:
                return self, []
            reloaded = self._reload_past_cleanup()
            return (self, []) if reloaded is None else (reloaded, [])
        snap = self.copy()
        new = snap._apply(pairs)
        snap._check_readable()
        return snap, new

    def _reload_past_cleanup(self) -> Snapshot | None:
        """A fresh snapshot if the next commit is missing because cleanup deleted it.

        Incremental reads probe ``version + 1``; a miss normally means "nothing new", but after
        log cleanup it can mean "deleted", and the table may be far ahead.  A checkpoint newer
        than this snapshot proves the latter (version N exists, so every version before it
        once did), at the cost of reading the small ``_last_checkpoint`` when nothing is new.
        """
        from deltacommit.checkpoint import read_last_checkpoint

        hint = read_last_checkpoint(self.log_store)
        if hint is None or hint.version <= self.state.version:
            return None
        return Snapshot.load(self.log_store)

    def _check_readable(self) -> None:
        """Refuse a protocol, feature or column type this library cannot read, up front."""
        assert self.state.protocol is not None
        check_readable(self.log_store.table_uri, self.state.protocol, self.state.metadata)
        self.schema  # noqa: B018  (parsing the schema is the check)

    def apply_commit(self, commit: Commit) -> None:
        """Fold a commit this process wrote (or already read) without reading it again."""
        self.state.apply(commit.version, commit.actions,
                         f"{self.log_store.table_uri}/{LOG_DIR}/{commit_name(commit.version)}")

    def copy(self) -> Snapshot:
        from deltacommit.log.lazy_files import copy_state

        return Snapshot(self.log_store, copy_state(self.state))

    # ------------------------------------------------------------------ accessors

    @property
    def version(self) -> int:
        return self.state.version

    @property
    def metadata(self) -> Metadata:
        assert self.state.metadata is not None
        return self.state.metadata

    @property
    def protocol(self) -> Protocol:
        assert self.state.protocol is not None
        return self.state.protocol

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns)

    @property
    def configuration(self) -> dict[str, str | None]:
        return dict(self.metadata.configuration)

    @property
    def schema(self) -> pa.Schema:
        """The table schema as Arrow, partition columns included (in schema order)."""
        from deltacommit.schema import schema_from_json

        s = self.metadata.schema_string
        if self._schema is None or self._schema_source != s:
            try:
                self._schema = schema_from_json(s)
            except UnsupportedTypeError as e:
                raise UnsupportedProtocolError(f"table {self.log_store.table_uri}: {e}") from None
            except SchemaMismatchError as e:
                raise CorruptLogError(
                    f"table {self.log_store.table_uri}: bad schemaString in metaData: {e}") from None
            self._schema_source = s
        return self._schema

    def files(self) -> list[Add]:
        return list(self.state.files.values())

    def iter_files(self) -> Iterator[Add]:
        return iter(self.state.files.values())

    def app_version(self, app_id: str) -> int | None:
        txn = self.state.app_txns.get(app_id)
        return None if txn is None else txn.version

    def commit_infos(self, limit: int | None = None) -> list[tuple[int, CommitInfo | None]]:
        """commitInfo of each version still in the log, newest first."""
        versions = sorted((f.version for f in self.log_store.list_log(0) if f.kind == "commit"
                           and f.version <= self.version), reverse=True)
        if limit is not None:
            versions = versions[:limit]
        out: list[tuple[int, CommitInfo | None]] = []
        for v in versions:
            try:
                data = self.log_store.read_commit(v)
            except ObjectNotFoundError:
                continue
            out.append((v, decode_commit(self.log_store, v, data).commit_info))
        return out


# Missing versions few enough to ask for one by one when a second listing misses them too.
_PROBE_MISSING = 16


def found_after_listing(log_store: LogStore, commits: set[int], gaps: list[tuple[int, int]],
                         target: int) -> set[int]:
    """Commits a listing missed: one more listing from the first gap, then (only if the
    versions still missing are few) a HEAD each.  Bounded by the files listed plus
    ``_PROBE_MISSING``, whatever the version numbers."""
    found = {f.version for f in log_store.list_log(gaps[0][0])
             if f.kind == "commit" and f.version <= target}
    remaining = version_gaps(sorted(commits | found), gaps[0][0], target, limit=_PROBE_MISSING + 1)
    if sum(b - a + 1 for a, b in remaining) <= _PROBE_MISSING:
        found |= {v for a, b in remaining for v in range(a, b + 1)
                  if log_store.store.exists(commit_path(v))}
    return found


def _ranges(versions: list[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``3-5, 9`` for error messages."""
    runs: list[list[int]] = []
    for v in versions:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
