"""The history checker: proves that a table's log kept every promise its writers were given.

A torture run (``deltacommit stress``) or a fault test ends here.  The writers' journals list
the commits they were told succeeded; the checker reads the whole log and shows that

* the versions are contiguous from the oldest retained one (and a checkpoint covers any
  versions log cleanup removed), and every commit file parses;
* no transaction (``commitInfo.txnId``, or each member of a group commit) is in two versions:
  a duplicate means a retry committed something twice;
* every acknowledged transaction is in exactly the version it was acknowledged at, in the
  bytes it wrote (SHA-256 per version): a commit file replaced after the fact is caught;
* on the DynamoDB protocol, every entry is complete with its commit file present, or
  incomplete and repairable (its temp file or its commit file exists), and the fleet is not
  split (``doctor``): no version young enough to have its entry lacks one (another mechanism
  wrote it), and entries live under one ``tablePath`` spelling;
* every checkpoint holds the state a replay of the JSON commits gives, the snapshot a reader
  builds (through ``_last_checkpoint`` and checkpoints) equals a full replay, and the table
  reads back: every live file opens and the row count equals the files' ``numRecords``.

It never writes: repairs and cleanup are for ``deltacommit dynamodb repair``; a checker that
fixed what it found would hide the very faults it exists to find.  Reads go through the object
store directly (a conditional-put view of it), so a DynamoDB reader's repair never runs.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from deltacommit.engine.group.threads import committed_txn_ids
from deltacommit.engine.scan import FileScan, select_files
from deltacommit.engine.snapshot.checkpoint_reader import verify_checkpoint
from deltacommit.engine.snapshot.snapshot import Snapshot, found_after_listing
from deltacommit.errors import DeltaCommitError, ObjectNotFoundError, TableNotFoundError
from deltacommit.io.journal import JournalEntry
from deltacommit.io.logstore import ConditionalPutLogStore, open_log_store
from deltacommit.io.logstore.base import LogStore
from deltacommit.ops.doctor import diagnose
from deltacommit.protocol.actions import Action, CommitInfo, Txn, parse_commit
from deltacommit.protocol.expressions.predicates import TRUE
from deltacommit.protocol.log.names import LOG_DIR, commit_name, format_gaps, version_gaps
from deltacommit.protocol.log.segment import (
    CheckpointCandidate,
    checkpoint_candidates,
    format_versions,
)
from deltacommit.protocol.replay import TableState
from deltacommit.protocol.schema.column_mapping import mapping_mode
from deltacommit.runtime.threads import CallThreads

#: Problems listed in full; beyond this a count stands for the rest (a broken log can have
#: one problem per version).
_MAX_PROBLEMS = 200


@dataclass
class VerifyReport:
    """What the checker read and every problem it found (``ok`` when there is none)."""

    table_uri: str
    mechanism: str
    first_version: int = -1
    last_version: int = -1
    commits: int = 0
    checkpoints: int = 0
    transactions: int = 0
    #: Most transactions one version holds (a group's or a fleet's version holds several), and
    #: the versions that name their transactions (other engines' commits name none).
    largest_group: int = 0
    versions_with_txn_ids: int = 0
    acknowledged: int = 0
    unverifiable: int = 0
    dynamodb_entries: int = 0
    incomplete_entries: int = 0
    files: int = 0
    rows: int = 0
    problems: list[str] = field(default_factory=list)
    problems_omitted: int = 0
    #: Facts that are no problem but want saying (what fleet-wide group commit left behind).
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, text: str) -> None:
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(text)
        else:
            self.problems_omitted += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table_uri, "mechanism": self.mechanism, "ok": self.ok,
            "first_version": self.first_version, "last_version": self.last_version,
            "commits": self.commits, "checkpoints": self.checkpoints,
            "transactions": self.transactions, "largest_group": self.largest_group,
            "versions_with_txn_ids": self.versions_with_txn_ids,
            "acknowledged": self.acknowledged,
            "unverifiable": self.unverifiable, "dynamodb_entries": self.dynamodb_entries,
            "incomplete_entries": self.incomplete_entries, "files": self.files,
            "rows": self.rows, "problems": list(self.problems),
            "problems_omitted": self.problems_omitted, "notes": list(self.notes),
        }


def verify_table(table_uri: str, journal: Iterable[JournalEntry] = (), *,
                 storage_options: Mapping[str, str] | None = None,
                 read_data: bool = True, log_store: LogStore | None = None) -> VerifyReport:
    """Check the table's history against the acknowledged writes in ``journal``.

    TableNotFoundError if there is no log at all; every other finding is a problem in the
    report, so one run lists all of them.
    """
    ls = log_store or open_log_store(table_uri, storage_options)
    reader = ConditionalPutLogStore(ls.store)
    report = VerifyReport(ls.table_uri, ls.mechanism)
    uri = report.table_uri
    files = reader.list_log(0)
    versions = sorted(f.version for f in files if f.kind == "commit")
    if versions:
        # A listing is no snapshot of a directory being written (see Snapshot._load_listed):
        # a gap is a gap only if the version cannot be read either.
        gaps = version_gaps(versions, versions[0], versions[-1], limit=1)
        if gaps:
            versions = sorted(set(versions) | found_after_listing(reader, set(versions), gaps,
                                                                   versions[-1]))
    candidates = checkpoint_candidates(files)
    if not versions and not candidates:
        raise TableNotFoundError(f"no Delta table at {uri}: {uri}/{LOG_DIR} has no commit files")
    first = versions[0] if versions else candidates[-1].version + 1
    last = max(versions[-1] if versions else -1, max((c.version for c in candidates), default=-1))
    report.first_version, report.last_version = first, last
    _check_contiguous(report, versions, [c.version for c in candidates])

    raw = _read_all(reader, versions, report)
    report.commits = len(raw)
    digests = {v: hashlib.sha256(data).hexdigest() for v, data in raw.items()}
    parsed: dict[int, list[Action]] = {}
    for v, data in raw.items():
        try:
            parsed[v] = parse_commit(data, f"{uri}/{LOG_DIR}/{commit_name(v)}")
        except DeltaCommitError as e:
            report.problem(f"version {v}: the commit file does not parse: {e}")

    where = _check_transactions(report, parsed)
    _check_journal(report, list(journal), where, digests, first)
    if versions and versions[0] == 0:
        _check_replay(report, reader, parsed, candidates, last)
    _check_dynamodb(report, ls, set(versions), first, last)
    _check_fleet(report, ls)
    if read_data:
        _check_read_back(report, reader)
    return report


def _check_contiguous(report: VerifyReport, versions: list[int], checkpoints: list[int]) -> None:
    if not versions:
        return
    gaps = version_gaps(versions, versions[0], versions[-1])
    if gaps:
        report.problem(f"the log has no commit file for version(s) {format_gaps(gaps)} between "
                       f"versions {versions[0]} and {versions[-1]}")
    stray = sorted({c for c in checkpoints if c > versions[-1]})
    if stray:
        report.problem(f"checkpoint(s) at version {format_versions(stray)} are newer than the newest "
                       f"commit {versions[-1]}: no commit vouches for them and readers ignore "
                       "them")
    if versions[0] > 0 and not any(versions[0] - 1 <= c <= versions[-1] for c in checkpoints):
        report.problem(f"the oldest commit file is version {versions[0]} and no checkpoint at or "
                       f"after version {versions[0] - 1} covers the versions before it")


def _read_all(reader: LogStore, versions: list[int], report: VerifyReport) -> dict[int, bytes]:
    def read(v: int) -> tuple[int, bytes | None]:
        try:
            return v, reader.read_commit(v)
        except ObjectNotFoundError:
            return v, None

    if reader.store.local_path("") is not None or len(versions) < 2:
        pairs = [read(v) for v in versions]
    else:
        with CallThreads(max_workers=16) as pool:
            pairs = list(pool.map(read, versions))
    out: dict[int, bytes] = {}
    for v, data in pairs:
        if data is None:
            report.problem(f"version {v}: the commit file was listed but is gone")
        else:
            out[v] = data
    return out


def _check_transactions(report: VerifyReport, parsed: Mapping[int, list[Action]]
                        ) -> dict[str, list[int]]:
    """Versions holding each transaction id; a transaction in two versions is a problem, and so
    is a version with two ``txn`` actions of one app id (members of a group or a fleet's
    version touching the same app id must land in different versions)."""
    where: dict[str, list[int]] = defaultdict(list)
    for v in sorted(parsed):
        apps = Counter(a.app_id for a in parsed[v] if isinstance(a, Txn))
        twice = sorted(app for app, n in apps.items() if n > 1)
        if twice:
            report.problem(f"version {v} holds several txn actions of app id(s) {twice[:3]}: "
                           "one version may record one version of an application")
        info = next((a for a in parsed[v] if isinstance(a, CommitInfo)), None)
        ids = committed_txn_ids(info)
        report.largest_group = max(report.largest_group, len(ids))
        report.versions_with_txn_ids += bool(ids)
        for tid in ids:
            where[tid].append(v)
    report.transactions = len(where)
    for tid, vs in where.items():
        if len(vs) > 1:
            report.problem(f"transaction {tid} was committed {len(vs)} times, in versions "
                           f"{format_versions(vs)}")
    return where


def _check_journal(report: VerifyReport, entries: list[JournalEntry],
                   where: Mapping[str, list[int]], digests: Mapping[int, str], first: int) -> None:
    promised: dict[str, JournalEntry] = {}
    for e in entries:
        seen = promised.get(e.txn_id)
        if seen is not None and seen.version != e.version:
            report.problem(f"transaction {e.txn_id} was acknowledged twice, at versions "
                           f"{seen.version} ({seen.writer or '?'}) and {e.version} "
                           f"({e.writer or '?'})")
            continue
        promised[e.txn_id] = e
    report.acknowledged = len(promised)
    for e in promised.values():
        who = f" by {e.writer}" if e.writer else ""
        found = where.get(e.txn_id, [])
        if not found:
            if e.version < first:
                report.unverifiable += 1
            else:
                report.problem(f"acknowledged transaction {e.txn_id} (version {e.version}{who}) "
                               "is not in the log: a lost write")
            continue
        if found != [e.version]:
            if len(found) == 1:
                report.problem(f"acknowledged transaction {e.txn_id}{who} was told version "
                               f"{e.version} but is in version {found[0]}")
            continue  # in several versions: already reported as a duplicate
        if e.digest and digests.get(e.version) != e.digest:
            report.problem(f"version {e.version}: the commit file was rewritten after "
                           f"transaction {e.txn_id}{who} was acknowledged (sha256 "
                           f"{digests.get(e.version)} != {e.digest} as written)")


def _check_replay(report: VerifyReport, reader: LogStore, parsed: Mapping[int, list[Action]],
                  candidates: list[CheckpointCandidate], last: int) -> None:
    """Replay every JSON commit; checkpoints and the reader's snapshot must agree with it."""
    uri = report.table_uri
    at_checkpoint: dict[int, list[CheckpointCandidate]] = defaultdict(list)
    for c in candidates:
        at_checkpoint[c.version].append(c)
    state = TableState()
    for v in range(0, last + 1):
        actions = parsed.get(v)
        if actions is None:
            return  # a gap or an unparsable version, already reported
        try:
            state.apply(v, actions, f"{uri}/{LOG_DIR}/{commit_name(v)}")
        except DeltaCommitError as e:
            report.problem(f"version {v}: replay failed: {e}")
            return
        for cand in at_checkpoint.get(v, []):
            report.checkpoints += 1
            try:
                held = verify_checkpoint(reader, cand)
            except DeltaCommitError as e:
                report.problem(f"checkpoint {cand.name} cannot be read: {e}")
                continue
            _compare(report, f"checkpoint {cand.name}", held, state)
    try:
        snap = Snapshot.load(reader)
    except DeltaCommitError as e:
        report.problem(f"a reader cannot load the table: {e}")
        return
    _compare(report, f"the snapshot a reader loads (version {snap.version})", snap.state, state)


def _compare(report: VerifyReport, what: str, got: TableState, replayed: TableState) -> None:
    if got.version != replayed.version:
        report.problem(f"{what} is at version {got.version}; replaying the log gives "
                       f"version {replayed.version}")
        return
    have, want = set(got.files.keys()), set(replayed.files.keys())
    if have != want:
        extra, missing = sorted(have - want), sorted(want - have)
        report.problem(f"{what} differs from a replay of the JSON commits up to version "
                       f"{replayed.version}: {len(missing)} live file(s) missing "
                       f"{missing[:3]}, {len(extra)} extra {extra[:3]}")
    if got.metadata != replayed.metadata or got.protocol != replayed.protocol:
        report.problem(f"{what} has other metadata or protocol than a replay of the JSON "
                       f"commits up to version {replayed.version}")
    apps = {k: t.version for k, t in got.app_txns.items()}
    want_apps = {k: t.version for k, t in replayed.app_txns.items()}
    if apps != want_apps:
        report.problem(f"{what} has other application transaction versions than a replay of "
                       f"the JSON commits up to version {replayed.version}")


def _check_dynamodb(report: VerifyReport, ls: LogStore, versions: set[int], first: int,
                    last: int) -> None:
    from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore

    if not isinstance(ls, DynamoDBLogStore):
        return
    try:
        entries = list(ls.entries())
    except DeltaCommitError as e:
        report.problem(f"DynamoDB table {ls.table_name}: the entries cannot be read: {e}")
        return
    store = ls.store
    for entry in entries:
        report.dynamodb_entries += 1
        v = entry.version
        name = f"DynamoDB entry {entry.table_path} / {entry.file_name}"
        has_commit = v in versions or (v < first)
        if entry.complete:
            if not has_commit:
                report.problem(f"{name} is complete but {LOG_DIR}/{entry.file_name} does not "
                               "exist: a reader trusting the entry would miss a version")
            continue
        report.incomplete_entries += 1
        if has_commit:
            continue  # repair only needs to mark it complete
        if v > last + 1:
            report.problem(f"{name} is incomplete at version {v}, beyond the next version "
                           f"{last + 1}: entries must follow the log")
        elif not store.exists(entry.temp_key):
            report.problem(f"{name} is incomplete and unrepairable: neither "
                           f"{LOG_DIR}/{entry.file_name} nor its temp file {entry.temp_key} "
                           "exists")


#: What ``doctor`` finds that splits a fleet (writers that do not exclude each other), which
#: the checks above do not see: a history can be whole today and lose a commit tomorrow.
_FLEET_SPLITS = frozenset({"unentried-versions", "split-tablepath"})


def _check_fleet(report: VerifyReport, ls: LogStore) -> None:
    try:
        found = diagnose(report.table_uri, log_store=ls)
    except DeltaCommitError as e:
        report.problem(f"the fleet's coordination cannot be checked: {e}")
        return
    for f in found.errors(fleet_only=True):
        if f.kind in _FLEET_SPLITS:
            report.problem(f.message)
    # What fleet-wide group commit left in its folder: no problem of the history (a record
    # is a hint, checked against the log before anything is claimed on it), but stale ones
    # are worth knowing about.
    report.notes += [f.message for f in found.findings if f.kind.startswith("fleet-")]


def _check_read_back(report: VerifyReport, reader: LogStore) -> None:
    """Every live file opens through the one data-file reader, and the rows add up."""
    uri = reader.table_uri
    try:
        snap = Snapshot.load(reader)
        adds = select_files(snap, TRUE)
        scan = FileScan(uri, snap.version, snap.schema, snap.partition_columns,
                        column_mapping=mapping_mode(snap.configuration, uri),
                        given_store=reader.store)
        with CallThreads(max_workers=16) as pool:
            num_rows = sum(t.num_rows for t in pool.map(scan.read, adds))
    except DeltaCommitError as e:
        report.problem(f"the table does not read back: {e}")
        return
    except OSError as e:
        report.problem(f"the table does not read back (a data file cannot be read): {e}")
        return
    report.files, report.rows = len(adds), num_rows
    counts = [a.num_records() for a in adds]
    if all(c is not None for c in counts):
        expected = sum(c for c in counts if c is not None)
        if expected != num_rows:
            report.problem(f"the table reads back {num_rows} rows but its {len(adds)} live "
                           f"files record {expected} (numRecords)")
