"""Fleet diagnostics: why the writers of a table cannot commit, read from the table's storage.

A fleet that mixes writers is only as safe as its least informed member.  The commonest way
one goes wrong is quiet: the newest deltalake (from 1.6.1) ignores
``AWS_S3_LOCKING_PROVIDER=dynamodb``, prints one ERROR line and commits by S3 conditional put,
so a table coordinated through Spark's DynamoDB protocol gains versions that no entry claims;
deltacommit's DynamoDB writers then refuse every commit, correctly, and an operator needs to be
told which writer did it.  ``diagnose`` reads the log and the coordination store and names what
it finds, each finding with what it blocks and how to get out of it:

* versions younger than half the entries' TTL (so no TTL removed their entries) that have no
  DynamoDB entry under any ``tablePath`` spelling, grouped by the writer that made them, as
  ``commitInfo`` (``engineInfo``, ``clientVersion``, ``operation``) names it;
* entries under several ``tablePath`` spellings (``s3://``, ``s3a://``, ``s3n://``): writers
  using different spellings do not exclude each other;
* a pin (the table's ``deltacommit.coordination*`` configuration) that writers configured with
  the given options cannot honour, or an unpinned table whose temp files show DynamoDB writers
  beside writers of another mechanism;
* incomplete entries (a writer stopped between its claim and its completion): repairable when
  the temp file or the commit file exists, else blocking every writer until dropped;
* complete entries whose commit file is missing;
* stale temp files (``_delta_log/.tmp/``, delta-rs's ``_delta_log/_commit_*.json.tmp``).

Findings are ``error`` (writers with these options cannot commit, or the fleet's writers do not
exclude each other), ``warning`` (something needs attention but commits go on) or ``note``.
It never writes: repairs are ``deltacommit dynamodb repair``, cleanup ``deltacommit cleanup``.
Reads go through the object store directly (a conditional-put view), so no repair runs.

Cost: one listing of the log and of the temp-file prefixes, one snapshot load, the commit
files of the versions without entries (at most ``max_reads``, newest first) and, on the
DynamoDB protocol, one ``Query`` per ``tablePath`` spelling plus the entries of the fleet's.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from deltacommit.engine.group.fleet import cleanup, records
from deltacommit.engine.group.fleet.policy import FleetPolicy
from deltacommit.engine.snapshot.snapshot import Snapshot
from deltacommit.errors import DeltaCommitError, ObjectNotFoundError, TableNotFoundError
from deltacommit.io.aws.options import DYNAMO_TABLE_PATH_SCHEME
from deltacommit.io.logstore import ConditionalPutLogStore, open_log_store
from deltacommit.io.logstore.base import (
    COORDINATION_KEY,
    DYNAMODB_MARKER,
    DYNAMODB_MECHANISM,
    LogStore,
)
from deltacommit.io.logstore.fleet_sign import dynamodb_fleet_sign
from deltacommit.ops.coordination import recorded_coordination
from deltacommit.protocol.actions import CommitInfo, Metadata, parse_commit
from deltacommit.protocol.fleet.record import FLEET_DIR, version_of_round
from deltacommit.protocol.log.names import LOG_DIR, commit_name
from deltacommit.protocol.log.segment import format_versions
from deltacommit.runtime.clock import SYSTEM_CLOCK, Clock
from deltacommit.runtime.threads import CallThreads

if TYPE_CHECKING:
    from deltacommit.io.logstore.s3_dynamodb.entry import CommitEntry
    from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore

Severity = Literal["error", "warning", "note"]

#: Temp files younger than this may belong to a commit in flight; older ones are stale.
STALE_TEMP_SECONDS = 3600.0
#: Commit files of versions without entries read to name their writers, newest first.
MAX_READS = 500
#: Where commit protocols leave temp files: Spark's and deltacommit's ``.tmp/<N>.json.<uuid>``,
#: delta-rs's ``_commit_<uuid>.json.tmp`` beside the commits.
TEMP_PREFIXES = (f"{LOG_DIR}/.tmp/", f"{LOG_DIR}/_commit_")


@dataclass(frozen=True)
class Finding:
    """One fact the doctor found.  ``fleet``: a fact about the table's writers, whatever
    options the doctor was given (a split fleet), rather than about those options (a pin they
    cannot honour)."""

    severity: Severity
    kind: str
    message: str
    versions: tuple[int, ...] = ()
    fleet: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"severity": self.severity, "kind": self.kind, "message": self.message,
                "versions": list(self.versions), "fleet": self.fleet}


@dataclass(frozen=True)
class DynamoDBView:
    """The DynamoDB side of a table on Spark's protocol, as the doctor read it."""

    table_name: str
    endpoint: str
    table_path: str
    spellings: dict[str, int]
    entries: int
    latest_entry: int | None
    ttl_seconds: int


@dataclass
class FleetFolder:
    """The fleet folder (``engine.group.fleet``) as the doctor read it: published
    transactions some writer may still land (``live``), records no writer may land any more
    (``stale``: their version bound exists, or their deadline passed long ago), records that
    do not read as one, and round keys the next round deletes (``stale_round_keys``: of
    versions that exist, but the newest ``cleanup.KEEP_ROUNDS``, which are kept)."""

    live: int = 0
    stale: int = 0
    unreadable: int = 0
    round_keys: int = 0
    stale_round_keys: int = 0

    def to_json(self) -> dict[str, int]:
        return {"live": self.live, "stale": self.stale, "unreadable": self.unreadable,
                "round_keys": self.round_keys, "stale_round_keys": self.stale_round_keys}


@dataclass
class DoctorReport:
    """What ``diagnose`` read and found.  ``can_commit``: no finding stops writers configured
    with the given options (or splits the fleet); ``healthy``: nothing but notes."""

    table_uri: str
    mechanism: str
    version: int | None = None
    first_version: int | None = None
    writer: dict[str, str] = field(default_factory=dict)
    recorded: dict[str, str] = field(default_factory=dict)
    dynamodb: DynamoDBView | None = None
    temp_files: int = 0
    #: What fleet-wide group commit left in ``_deltacommit_fleet/`` (``fleet_folder``).
    fleet: FleetFolder | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def can_commit(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    @property
    def healthy(self) -> bool:
        return all(f.severity == "note" for f in self.findings)

    def errors(self, *, fleet_only: bool = False) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error" and (f.fleet or not fleet_only)]

    def add(self, severity: Severity, kind: str, message: str, versions: Iterable[int] = (),
            *, fleet: bool = True) -> None:
        self.findings.append(Finding(severity, kind, message, tuple(versions), fleet))

    def summary(self) -> str:
        """One line: healthy, or what stops writers."""
        if self.healthy:
            return "healthy: " + self._healthy_detail()
        errors = len(self.errors())
        warnings = sum(1 for f in self.findings if f.severity == "warning")
        counts = ", ".join(p for p in (
            f"{errors} error{'s' if errors != 1 else ''}" if errors else "",
            f"{warnings} warning{'s' if warnings != 1 else ''}" if warnings else "") if p)
        verdict = ("writers with these options can commit" if self.can_commit else
                   "writers with these options cannot commit, or the fleet's writers do not "
                   "exclude each other")
        return f"{verdict} ({counts})"

    def _healthy_detail(self) -> str:
        parts = [f"versions {self.first_version}-{self.version}" if self.version is not None
                 else "no versions"]
        if self.dynamodb is not None:
            parts.append(f"every commit that can still have a DynamoDB entry has one (tablePath "
                         f"{self.dynamodb.table_path}), no incomplete entries")
        parts.append("no stale temp files" if not any(f.kind == "stale-temp-files"
                                                      for f in self.findings)
                     else "stale temp files (see the note)")
        parts.append(f"writers with these options ({self._mechanism_text()}) can commit")
        return "; ".join(parts)

    def _mechanism_text(self) -> str:
        return self.writer.get(COORDINATION_KEY, self.mechanism)

    def to_json(self) -> dict[str, Any]:
        dyn = None
        if self.dynamodb is not None:
            d = self.dynamodb
            dyn = {"table": d.table_name, "endpoint": d.endpoint, "tablePath": d.table_path,
                   "tablePaths": d.spellings, "entries": d.entries, "latest_entry": d.latest_entry,
                   "ttl_seconds": d.ttl_seconds}
        return {"table": self.table_uri, "mechanism": self.mechanism, "version": self.version,
                "first_version": self.first_version, "writer": self.writer,
                "recorded": self.recorded, "dynamodb": dyn, "temp_files": self.temp_files,
                "fleet": None if self.fleet is None else self.fleet.to_json(),
                "can_commit": self.can_commit, "healthy": self.healthy,
                "summary": self.summary(), "findings": [f.to_json() for f in self.findings]}


def diagnose(uri: str, storage_options: Mapping[str, str] | None = None, *,
             log_store: LogStore | None = None, clock: Clock = SYSTEM_CLOCK,
             stale_after_s: float = STALE_TEMP_SECONDS, max_reads: int = MAX_READS
             ) -> DoctorReport:
    """Read the table at ``uri`` and its coordination store as writers with
    ``storage_options`` would, and say what stops them (see the module docstring).

    TableNotFoundError if there is no log; everything else found is a finding."""
    ls = log_store or open_log_store(uri, storage_options)
    reader = ConditionalPutLogStore(ls.store)
    report = DoctorReport(ls.table_uri, ls.mechanism)
    files = reader.list_log(0)
    commits = {f.version: f for f in files if f.kind == "commit"}
    if not files:
        raise TableNotFoundError(f"no Delta table at {report.table_uri}: "
                                 f"{report.table_uri}/{LOG_DIR} has no log files")
    configuration: Mapping[str, str | None] = {}
    try:
        snapshot = Snapshot.load(reader)
        report.version = snapshot.version
        configuration = snapshot.configuration
    except DeltaCommitError as e:
        report.add("error", "unreadable", f"the table cannot be loaded, so no writer can "
                   f"commit to it: {e}")
        report.version = max(commits) if commits else None
    report.first_version = min(commits) if commits else report.version
    report.recorded = recorded_coordination(configuration)

    dyn = _dynamodb_store(ls, report, storage_options)
    incomplete: list[CommitEntry] = []
    if dyn is not None:
        incomplete = _check_dynamodb(report, ls, dyn, commits, clock, max_reads)
    else:
        report.writer = ls.coordination_config()
    _check_pin(report, ls)
    _check_temp_files(report, ls, incomplete, clock, stale_after_s)
    _check_fleet_folder(report, ls, clock)
    return report


# --------------------------------------------------------------------------- the pin


def _check_pin(report: DoctorReport, ls: LogStore) -> None:
    recorded = report.recorded
    if not recorded:
        sign = (None if ls.mechanism == DYNAMODB_MECHANISM
                else dynamodb_fleet_sign(ls.store, ls.mechanism))
        if sign is not None:
            report.add("error", "unpinned-dynamodb-fleet",
                       f"the table records no commit mechanism, but it shows writers committing "
                       f"through DynamoDB ({sign}); these options select {ls.mechanism!r}, which "
                       "does not exclude them, so writers configured like this refuse to commit. "
                       "Configure the DynamoDB mechanism the table's writers use "
                       "(AWS_S3_LOCKING_PROVIDER=dynamodb, DELTA_DYNAMO_TABLE_NAME), or, if none "
                       "is left, pin the table to this one with `deltacommit coordination set`",
                       fleet=False)
        return
    mismatched = {k: (recorded[k], mine) for k, mine in report.writer.items()
                  if k in recorded and recorded[k] != mine}
    if not mismatched:
        return
    wanted = ", ".join(f"{k}={v!r}" for k, v in sorted(recorded.items()))
    given = ", ".join(f"{k}={mine!r}" for k, (_, mine) in sorted(mismatched.items()))
    advice = _pin_advice(recorded)
    report.add("error", "pin-not-honoured",
               f"the table records {wanted}, but these options select {given}: writers "
               "configured like this refuse to commit (writers of different mechanisms do not "
               f"exclude each other). {advice}", fleet=False)


def _pin_advice(recorded: Mapping[str, str]) -> str:
    mechanism = recorded.get(COORDINATION_KEY)
    if mechanism == DYNAMODB_MECHANISM:
        table = recorded.get(f"{COORDINATION_KEY}.dynamodbTable")
        path = recorded.get(f"{COORDINATION_KEY}.tablePath")
        scheme = path.split("://", 1)[0] if path and "://" in path else None
        hint = (f"; the pinned tablePath {path} is used with the URI {path} or with "
                f"{DYNAMO_TABLE_PATH_SCHEME}={scheme}" if scheme else "")
        return (f"Configure AWS_S3_LOCKING_PROVIDER=dynamodb and DELTA_DYNAMO_TABLE_NAME={table}"
                f"{hint}, or, once every writer has moved, record the new mechanism with "
                "`deltacommit coordination set`")
    return (f"Configure the mechanism the table records ({mechanism}; for conditional put: no "
            "AWS_S3_LOCKING_PROVIDER and no conditional_put option), or, once every writer has "
            "moved, record the new one with `deltacommit coordination set`")


# --------------------------------------------------------------------------- DynamoDB


def _dynamodb_store(ls: LogStore, report: DoctorReport,
                    storage_options: Mapping[str, str] | None) -> DynamoDBLogStore | None:
    """The DynamoDB log store to read: the options' own, or, for a table pinned to the
    protocol read with other options, one on the pinned DynamoDB table."""
    from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore

    if isinstance(ls, DynamoDBLogStore):
        return ls
    if report.recorded.get(COORDINATION_KEY) != DYNAMODB_MECHANISM:
        return None
    table = report.recorded.get(f"{COORDINATION_KEY}.dynamodbTable")
    if not table:
        return None
    options = {**(storage_options or {}), "DELTA_DYNAMO_TABLE_NAME": table}
    try:
        return DynamoDBLogStore.open(ls.table_uri, options)
    except DeltaCommitError as e:
        report.add("note", "dynamodb-unread", f"the DynamoDB table {table} the table is pinned "
                   f"to could not be opened with these options ({e}); its entries are not "
                   "checked", fleet=False)
        return None


def _check_dynamodb(report: DoctorReport, ls: LogStore, dyn: DynamoDBLogStore,
                    commits: Mapping[int, Any], clock: Clock, max_reads: int
                    ) -> list[CommitEntry]:
    """Spellings, entries, versions without entries; returns the incomplete entries."""
    from deltacommit.io.logstore.s3_dynamodb.fleet import TABLE_NAME_KEY, TABLE_PATH_KEY

    own = dyn is ls
    try:
        spellings = dyn.fleet_keys()
    except DeltaCommitError as e:
        report.add("error" if own else "note", "dynamodb-unread",
                   f"the entries in DynamoDB table {dyn.table_name} cannot be read: {e}",
                   fleet=not own)
        report.writer = ({COORDINATION_KEY: DYNAMODB_MECHANISM, TABLE_NAME_KEY: dyn.table_name}
                         if own else ls.coordination_config())
        return []
    configured = dyn.table_path
    key = configured
    if len(spellings) == 1:
        (found,) = spellings
        if found != configured and dyn.config.dynamo_table_path_scheme != "uri" and own:
            report.add("error", "tablepath-not-joined",
                       f"the fleet's entries use tablePath {found!r} but these options configure "
                       f"{configured!r} (DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME="
                       f"{dyn.config.dynamo_table_path_scheme}): writers configured like this "
                       "refuse to commit, since they would not exclude the fleet's", fleet=False)
        else:
            key = found
    elif not spellings and own:
        dyn.follow_recorded(report.recorded)  # as the writers do, with no entry to join
        key = dyn.table_path
    entries_by_path: dict[str, list[CommitEntry]] = {}
    for spelling in spellings:
        dyn.table_path = spelling
        entries_by_path[spelling] = list(dyn.entries())
    dyn.table_path = key
    if len(spellings) > 1:
        report.add("error", "split-tablepath", _split_message(dyn, entries_by_path, commits))
    if own:
        writer = {COORDINATION_KEY: DYNAMODB_MECHANISM, TABLE_NAME_KEY: dyn.table_name}
        if len(spellings) <= 1:
            writer[TABLE_PATH_KEY] = key
        report.writer = writer
    else:
        report.writer = ls.coordination_config()
    entries = [e for es in entries_by_path.values() for e in es]
    with_entry = {e.version for e in entries}
    fleet = entries_by_path.get(key, [])
    report.dynamodb = DynamoDBView(dyn.table_name, dyn.endpoint, key, dict(spellings), len(fleet),
                                   max((e.version for e in fleet), default=None), dyn.ttl_seconds)
    _check_unentried(report, ls, dyn, commits, with_entry, clock, max_reads)
    incomplete = [e for e in entries if not e.complete]
    _check_entries(report, ls, dyn, entries, commits)
    return incomplete


def _split_message(dyn: DynamoDBLogStore, by_path: Mapping[str, list[CommitEntry]],
                   commits: Mapping[int, Any]) -> str:
    parts = []
    for spelling, entries in sorted(by_path.items()):
        versions = sorted(e.version for e in entries)
        shown = format_versions(versions) if len(versions) <= 12 else f"{versions[0]}-{versions[-1]}"
        parts.append(f"{spelling}: {len(versions)} entr{'y' if len(versions) == 1 else 'ies'} "
                     f"(versions {shown})")
    return (f"DynamoDB table {dyn.table_name} has entries for this table under "
            f"{len(by_path)} tablePath spellings: {'; '.join(parts)}. Writers using different "
            "spellings do not exclude each other (Spark keys s3a://, deltalake the URI it was "
            "given), so deltacommit's writers refuse to commit. Give every writer the same "
            "spelling (deltacommit: DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME=s3a, s3 or uri), or move "
            "the table to one mechanism with `deltacommit coordination set`")


def _check_unentried(report: DoctorReport, ls: LogStore, dyn: DynamoDBLogStore,
                     commits: Mapping[int, Any], with_entry: set[int], clock: Clock,
                     max_reads: int) -> None:
    """Versions young enough that their entries cannot have expired, yet without one."""
    now_ms = clock.time() * 1000
    horizon_ms = dyn.ttl_seconds * 1000 / 2
    young = sorted((v for v, f in commits.items()
                    if v not in with_entry and f.last_modified_ms is not None
                    and now_ms - f.last_modified_ms < horizon_ms), reverse=True)
    if not young:
        return
    to_read = young[:max_reads]
    infos = _read_commit_infos(ls, to_read)
    writers: dict[WriterDescription, list[int]] = defaultdict(list)
    operations: dict[WriterDescription, defaultdict[str, int]] = defaultdict(
        lambda: defaultdict(int))
    for v in to_read:  # newest first: a switch to this protocol ends the search
        info, metadata = infos.get(v, (None, None))
        if metadata is not None and _switched_to(metadata, dyn):
            break
        writer = describe_writer(info)
        writers[writer].append(v)
        operations[writer][(info.operation if info else None) or "?"] += 1
    else:
        unread = len(young) - len(to_read)
        if unread:
            report.add("error", "unentried-versions",
                       f"{unread} older version(s) (from {young[-1]}) also have no DynamoDB entry "
                       "and were not read")
    if not writers:
        return
    newest = max(v for vs in writers.values() for v in vs)
    modified = commits[newest].last_modified_ms
    until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(modified / 1000 + dyn.ttl_seconds / 2))
    for writer, versions in writers.items():
        versions.sort()
        ops = ", ".join(f"{op} ({n})" for op, n in sorted(operations[writer].items()))
        report.add("error", "unentried-versions",
                   f"version{'s' if len(versions) > 1 else ''} {format_versions(versions)} "
                   f"{'have' if len(versions) > 1 else 'has'} no DynamoDB entry; written by "
                   f"{writer.label}, {writer.why}. Such commits do not exclude this table's "
                   f"DynamoDB writers (table {dyn.table_name}), which refuse to commit until the "
                   f"newest commit without an entry (version {newest}) is older than half the "
                   f"entries' TTL ({dyn.ttl_seconds / 7200:g} h: at {until}). To do: "
                   f"{writer.fix}. Operations: {ops}", versions)


def _switched_to(metadata: Metadata, dyn: DynamoDBLogStore) -> bool:
    """Whether this metaData moved the table onto this DynamoDB table (the commits before it
    were made through the old mechanism)."""
    from deltacommit.io.logstore.s3_dynamodb.fleet import TABLE_NAME_KEY

    conf = metadata.configuration
    return conf.get(COORDINATION_KEY) == DYNAMODB_MECHANISM and conf.get(TABLE_NAME_KEY) == dyn.table_name


def _read_commit_infos(ls: LogStore, versions: list[int]
                       ) -> dict[int, tuple[CommitInfo | None, Metadata | None]]:
    reader = ConditionalPutLogStore(ls.store)

    def read(v: int) -> tuple[int, tuple[CommitInfo | None, Metadata | None] | None]:
        try:
            actions = parse_commit(reader.read_commit(v), f"{ls.table_uri}/{LOG_DIR}/{commit_name(v)}")
        except (ObjectNotFoundError, DeltaCommitError):
            return v, None
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        meta = next((a for a in actions if isinstance(a, Metadata)), None)
        return v, (info, meta)

    if len(versions) < 2:
        pairs = [read(v) for v in versions]
    else:
        with CallThreads(max_workers=16) as pool:
            pairs = list(pool.map(read, versions))
    return {v: got for v, got in pairs if got is not None}


_DELTA_RS = re.compile(r"delta-rs[.:/ ](py-)?v?(\d+(?:\.\d+)*)")
_SPARK = re.compile(r"Delta-Lake/(\S+)")
_DELTACOMMIT = re.compile(r"deltacommit/(\S+)")


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


@dataclass(frozen=True)
class WriterDescription:
    """Who wrote a commit (``label``), why such a commit has no DynamoDB entry (``why``, a
    relative clause) and what to do about those writers (``fix``)."""

    label: str
    why: str
    fix: str


_CONFIGURE_DELTALAKE = ("give it AWS_S3_LOCKING_PROVIDER=dynamodb and the same "
                        "DELTA_DYNAMO_TABLE_NAME (and AWS_ENDPOINT_URL_DYNAMODB where the "
                        "endpoint is not AWS's)")


def describe_writer(info: CommitInfo | None) -> WriterDescription:
    """Name the writer of a commit from its ``commitInfo`` (``engineInfo``, ``clientVersion``),
    and say why its commits have no DynamoDB entry."""
    if info is None:
        return WriterDescription("a writer that left no commitInfo",
                                 "which did not commit through Spark's DynamoDB protocol",
                                 "find it and configure it for this DynamoDB table")
    values = info.values
    engine = str(values.get("engineInfo") or "")
    client = str(values.get("clientVersion") or "")
    for text in (client, engine):
        m = _DELTA_RS.search(text)
        if m is None:
            continue
        version = m.group(2)
        if m.group(1):  # the Python package
            if _version_tuple(version) >= (1, 6, 1):
                return WriterDescription(
                    f"deltalake {version} (delta-rs)",
                    "which ignores AWS_S3_LOCKING_PROVIDER=dynamodb since 1.6.1 and commits by "
                    "S3 conditional put",
                    "stop those writers, or run deltalake<=1.6.0, the last release that commits "
                    "through DynamoDB")
            return WriterDescription(
                f"deltalake {version} (delta-rs)",
                "which commits through DynamoDB only when configured for it", _CONFIGURE_DELTALAKE)
        return WriterDescription(
            f"delta-rs {version}",
            "which commits by S3 conditional put unless configured with its DynamoDB log store "
            "(gone from deltalake since 1.6.1)",
            "stop those writers, or configure its DynamoDB log store for this table")
    m = _SPARK.search(engine)
    if m is not None:
        return WriterDescription(
            f"Spark (Delta Lake {m.group(1)}, {engine.split()[0]})",
            "which was not configured for this DynamoDB table",
            "set spark.delta.logStore.s3a.impl=io.delta.storage.S3DynamoDBLogStore (and .s3.impl "
            "for s3:// paths) and spark.io.delta.storage.S3DynamoDBLogStore.ddb.tableName to "
            "this table")
    m = _DELTACOMMIT.search(engine)
    if m is not None:
        return WriterDescription(
            f"deltacommit {m.group(1)}",
            "which was configured for another commit mechanism or DynamoDB table",
            "configure its writers like the table's pin (`deltacommit coordination show`); if "
            "they did commit through this DynamoDB table and its entries were lost (the table "
            "re-created or emptied), restore the newest with `deltacommit dynamodb repair <uri> "
            "--restore-entry`")
    who = engine or client
    label = json.dumps(who) if who else "a writer that records no engineInfo"
    return WriterDescription(label, "which did not commit through this DynamoDB table",
                             "find it and configure it for this DynamoDB table")


def _check_entries(report: DoctorReport, ls: LogStore, dyn: DynamoDBLogStore,
                   entries: list[CommitEntry], commits: Mapping[int, Any]) -> None:
    first = min(commits) if commits else 0
    uri = report.table_uri
    for entry in entries:
        v = entry.version
        has_commit = v in commits or v < first
        where = f"DynamoDB entry {entry.table_path} / {entry.file_name}"
        if entry.complete:
            if not has_commit:
                report.add("error", "entry-without-commit",
                           f"{where} is complete but {LOG_DIR}/{entry.file_name} does not exist: "
                           f"writers of version {v + 1} refuse (a missing version), and a reader "
                           "trusting the entry would miss a version. If the table was deleted "
                           f"and re-created, `deltacommit dynamodb repair {uri} "
                           "--drop-stale-entries` removes the old entries", [v])
            continue
        if has_commit:
            report.add("warning", "incomplete-entry",
                       f"{where} is incomplete (its writer stopped after copying the commit, "
                       f"before marking it complete): repairable, {LOG_DIR}/{entry.file_name} "
                       "exists; any reader or writer completes it, or run `deltacommit "
                       f"dynamodb repair {uri}`", [v])
        elif ls.store.exists(entry.temp_key):
            report.add("warning", "incomplete-entry",
                       f"{where} is incomplete: its writer stopped after claiming version {v} "
                       f"(a crash between its claim and its copy). Repairable: its temp file "
                       f"{entry.temp_key} holds the commit, which the next reader or writer "
                       f"copies to {LOG_DIR}/{entry.file_name} before going on, or run "
                       f"`deltacommit dynamodb repair {uri}`", [v])
        else:
            report.add("error", "unrecoverable-entry",
                       f"{where} is incomplete and unrepairable: neither its temp file "
                       f"{entry.temp_key} nor {LOG_DIR}/{entry.file_name} exists, so the commit "
                       f"is lost and every writer of this protocol is blocked at version {v}. "
                       f"Drop the entry with `deltacommit dynamodb repair {uri} "
                       "--drop-unrecoverable`", [v])


# --------------------------------------------------------------------------- temp files


def _check_temp_files(report: DoctorReport, ls: LogStore, incomplete: list[CommitEntry],
                      clock: Clock, stale_after_s: float) -> None:
    in_use = {e.temp_key for e in incomplete}
    now_ms = clock.time() * 1000
    stale: list[tuple[str, int]] = []
    for prefix in TEMP_PREFIXES:
        for meta in ls.store.list(prefix):
            if meta.path == DYNAMODB_MARKER or meta.path in in_use:
                continue
            if prefix.endswith("_commit_") and not meta.path.endswith(".json.tmp"):
                continue
            report.temp_files += 1
            if now_ms - meta.last_modified_ms >= stale_after_s * 1000:
                stale.append((meta.path, meta.last_modified_ms))
    if not stale:
        return
    stale.sort(key=lambda s: s[1])
    oldest_h = (now_ms - stale[0][1]) / 3_600_000
    examples = ", ".join(p for p, _ in stale[:3]) + (", ..." if len(stale) > 3 else "")
    report.add("note", "stale-temp-files",
               f"{len(stale)} temp file{'s' if len(stale) != 1 else ''} older than "
               f"{stale_after_s / 3600:g} h (the oldest {oldest_h:.1f} h) that no incomplete entry "
               f"names ({examples}): Spark's S3DynamoDBLogStore never deletes its own, and "
               "writers that crashed, lost a claim or were refused leave theirs. Nothing reads "
               f"them; `deltacommit cleanup {report.table_uri}` deletes those older than the "
               "checkpoint it keeps, or expire them with an S3 lifecycle rule on "
               f"{LOG_DIR}/.tmp/")



def _check_fleet_folder(report: DoctorReport, ls: LogStore, clock: Clock) -> None:
    """What fleet-wide group commit left in the table's folder: one LIST, and a GET of each
    record.  A folder that is not a directory of this user's (a local symbolic link, another
    user's) is said, never followed: writers race for versions instead."""

    store = ls.store
    local = store.local_path(FLEET_DIR)
    if local is not None and os.path.lexists(local) and not records.folder_is_real(store):
        report.add("warning", "fleet-folder-not-a-directory",
                   f"{FLEET_DIR} in {report.table_uri} is not a directory (a symbolic link?): "
                   "fleet-wide group commit never follows it, and this table's writers race "
                   f"for versions instead. Remove it (`rm {local}`); writers make it afresh")
        return
    listed = records.listing(store)
    if not listed:
        return
    folder = report.fleet = FleetFolder()
    latest = report.version if report.version is not None else -1
    now = int(clock.time() * 1000)
    margin = int(FleetPolicy().expiry_margin_seconds * 1000)
    record_paths = [p for _, p in cleanup.record_paths(listed)]
    for record in records.read_records(store, record_paths):
        if record is None:
            folder.unreadable += 1
        elif cleanup.expired(record, latest, now, margin):
            folder.stale += 1
        else:
            folder.live += 1
    for meta in listed:
        v = version_of_round(meta.path)
        if v is not None:
            folder.round_keys += 1
            folder.stale_round_keys += v <= latest - cleanup.KEEP_ROUNDS
    leftovers = folder.stale + folder.unreadable + folder.stale_round_keys
    if folder.live:
        report.add("note", "fleet-published",
                   f"{folder.live} transaction{'s' if folder.live != 1 else ''} published in "
                   f"{FLEET_DIR}/ may still land (their owners or the next round's committer "
                   "commit them); VACUUM keeps their files")
    if leftovers:
        report.add("note", "fleet-leftovers",
                   f"{FLEET_DIR}/ holds {folder.stale} stale record(s) (their version bound "
                   f"exists or their deadline passed more than {margin // 1000} s ago: no "
                   f"writer may land them), {folder.unreadable} that do not read as records "
                   f"and {folder.stale_round_keys} round key(s) of versions that exist: "
                   "writers that died or were stopped left them. Nothing commits them; the "
                   "next fleet write to the table deletes the stale records and round keys, "
                   "or delete them by hand (the unreadable ones are not this library's)")
