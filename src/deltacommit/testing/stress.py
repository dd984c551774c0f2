"""``deltacommit stress``: a torture run against a real table, then the history checker.

Like pgbench for a database, this is for operators before going live as much as for the test
suite: N writer processes append to one table as fast as they can, a supervisor kills random
writers with SIGKILL (no cleanup runs: a commit may be cut between any two requests) and starts
them again, and at the end ``verify_table`` holds the log to every write a writer was told had
committed.  Each writer journals an acknowledged commit (fsynced) before it does anything
else, so the journals are exactly the promises made; a write killed before its journal line
is unacknowledged and may or may not be in the log, once at most.

Writers are separate processes (``python -m deltacommit.testing.stress worker ...``), as on a real
fleet: they share nothing but the table.  The storage options reach them through the
environment (``DELTACOMMIT_STRESS_OPTIONS``), never the command line, so credentials do not
show in process listings or logs.

With ``as_hosts`` each writer stands for a host of its own: it gets its own turn folder
(``DELTACOMMIT_TURN_DIR``), so no two writers take turns or hand commits on to each other, as
processes on different machines cannot.  With ``fleet`` the table also gets
``deltacommit.groupCommit.fleet=true`` (set on an existing table in one commit), so that the
writers publish their transactions and commit each other's (fleet-wide group commit): a
version then holds several writers' transactions (``deltacommit.memberTxnIds``), a writer may
be told a version another writer claimed, and a writer killed after publishing may still land
(at most once) through another.  The report counts the transactions per version and the
records left in the fleet's folder when the run ended.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from deltacommit.engine.commit.host_turn import DIR_VARIABLE as TURN_DIR_VARIABLE
from deltacommit.errors import (
    CommitFailedError,
    InvalidArgumentError,
    LogStoreError,
    StorageError,
    TableNotFoundError,
)
from deltacommit.io.datafiles import WriteTarget, conform_rows, write_rows
from deltacommit.io.journal import Journal, read_journals
from deltacommit.io.logstore import open_log_store
from deltacommit.ops.driver import Attempt, Decision, TableJob, run
from deltacommit.ops.verify import VerifyReport, verify_table
from deltacommit.protocol.fleet.record import FLEET_DIR, version_of_round
from deltacommit.protocol.table_config.properties import GROUP_COMMIT_FLEET
from deltacommit.table import DeltaTable
from deltacommit.testing.stress_peers import (
    PEER_KINDS,
    PeerReport,
    StopOnSigterm,
    check_kinds,
    check_peers,
    create_through_spark,
    peer_worker,
    spark_key_uri,
)

if TYPE_CHECKING:
    from deltacommit.engine.transaction.transaction import CommitResult, Transaction

#: The table a stress run writes: who wrote each row, in which life of the writer process.
_FIELDS: list[pa.Field[Any]] = [
    pa.field("writer", pa.string()), pa.field("incarnation", pa.int32()),
    pa.field("seq", pa.int64()), pa.field("payload", pa.string())]
SCHEMA = pa.schema(_FIELDS)

OPTIONS_ENV = "DELTACOMMIT_STRESS_OPTIONS"
#: How long the writers get to make their first commit before the run's clock starts anyway.
WARM_UP_SECONDS = 120.0
#: How long stopped writers get to finish the commit they are in before they are killed.
STOP_GRACE_SECONDS = 30.0
#: Errors a writer survives: it retries the same transaction, and if every try fails the
#: outcome of that write is unknown (in the log once or not at all) and the writer goes on with
#: a new one.  Anything else ends the writer, and the run reports it.
TRANSIENT = (StorageError, LogStoreError, CommitFailedError)
#: Tries of one transaction's commit before the writer gives it up as of unknown outcome.
COMMIT_TRIES = 5
#: The table property that makes every deltacommit writer of a table join fleet-wide group
#: commit (the folder under the table holding its published transactions is ``FLEET_DIR``).
FLEET_PROPERTY = GROUP_COMMIT_FLEET


@dataclass
class StressReport:
    """What a stress run did and what the history checker found."""

    table_uri: str
    writers: int
    seconds: float
    kill_rate: float
    journal_dir: str
    commits: int = 0
    kills: int = 0
    restarts: int = 0
    transient_errors: int = 0
    failed_writers: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    verify: VerifyReport | None = None
    peers: PeerReport | None = None
    fleet: bool = False
    as_hosts: bool = False
    #: Objects left in the fleet's folder when the run ended (published transactions not yet
    #: removed): bounded under kill -9, never growing with the run.
    fleet_records_left: int | None = None

    @property
    def transactions_per_version(self) -> float | None:
        """Transactions in the log over the versions naming theirs (1.0 when every writer
        commits alone; other engines' commits name none and are left out)."""
        v = self.verify
        if v is None or not v.versions_with_txn_ids:
            return None
        return round(v.transactions / v.versions_with_txn_ids, 2)

    @property
    def ok(self) -> bool:
        return (self.verify is not None and self.verify.ok and not self.failed_writers
                and (self.commits > 0 or self.writers == 0)
                and (self.peers is None or self.peers.ok))

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table_uri, "writers": self.writers, "seconds": self.seconds,
            "kill_rate": self.kill_rate, "commits": self.commits, "kills": self.kills,
            "restarts": self.restarts, "transient_errors": self.transient_errors,
            "commits_per_second": round(self.commits / self.elapsed, 2) if self.elapsed else 0.0,
            "elapsed": round(self.elapsed, 2),
            "final_version": self.verify.last_version if self.verify is not None else None,
            "failed_writers": list(self.failed_writers),
            "journal_dir": self.journal_dir, "ok": self.ok,
            "fleet": self.fleet, "as_hosts": self.as_hosts,
            "transactions_per_version": self.transactions_per_version,
            "largest_group": self.verify.largest_group if self.verify is not None else None,
            "fleet_records_left": self.fleet_records_left,
            "verify": self.verify.to_json() if self.verify is not None else None,
            "peers": self.peers.to_json() if self.peers is not None else None,
        }


@dataclass
class _Worker:
    name: str
    incarnation: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    killed: bool = False


def ensure_table(uri: str, storage_options: Mapping[str, str] | None = None, *,
                 fleet: bool = False) -> None:
    """Create the stress table, or accept an existing one with the stress schema; with
    ``fleet``, the table has ``deltacommit.groupCommit.fleet=true`` (set at creation, or in one
    commit on an existing table)."""

    configuration = {FLEET_PROPERTY: "true"} if fleet else None
    try:
        table = DeltaTable(uri, storage_options=storage_options)
    except TableNotFoundError:
        DeltaTable.create(uri, SCHEMA, storage_options=storage_options,
                          configuration=configuration)
        return
    if not table.schema.equals(SCHEMA):
        raise InvalidArgumentError(
            f"table {uri} exists with schema {table.schema}; a stress run writes rows of "
            f"{SCHEMA} and needs an empty location or a table it created")
    if fleet and (table.configuration.get(FLEET_PROPERTY) or "").lower() != "true":
        table.set_properties({FLEET_PROPERTY: "true"})


def run_stress(uri: str, *, writers: int, seconds: float, kill_rate: float = 0.0,
               storage_options: Mapping[str, str] | None = None, rows_per_commit: int = 10,
               journal_dir: str | os.PathLike[str] | None = None, seed: int | None = None,
               on_progress: Callable[[str], None] | None = None,
               python: str | None = None, peers: Sequence[str] = (), fleet: bool = False,
               as_hosts: bool | None = None, writer_pause: float = 0.0) -> StressReport:
    """Run ``writers`` writer processes for ``seconds``, killing one at random ``kill_rate``
    times a second (Poisson arrivals) and restarting it, then check the history.

    ``peers`` adds one writer process per entry running another engine (``deltalake``,
    ``spark-emulator``; see ``stress_peers``), killed and restarted like the others; with
    ``writers=0`` the peers run alone, the baseline for the errors they raise.  ``as_hosts``
    gives every writer its own turn folder (each stands for a host); ``fleet`` (which implies
    ``as_hosts`` unless it is given) turns fleet-wide group commit on for the table.
    ``writer_pause`` seconds pass between one deltacommit writer's appends (peers never
    pause): a writer that commits many times faster than a peer's engine otherwise wins
    nearly every version, and the peers' writes a test means to check never land.
    """
    _check_arguments(uri, writers, seconds, kill_rate, rows_per_commit, peers)
    options = dict(storage_options or {})
    spark_fleet = "spark-emulator" in peers
    hosts = fleet if as_hosts is None else as_hosts
    _prepare_table(uri, options, spark_fleet, fleet)
    jdir = Path(journal_dir) if journal_dir is not None else Path(
        tempfile.mkdtemp(prefix="deltacommit-stress-"))
    jdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    say = on_progress or (lambda _line: None)
    report = StressReport(uri, writers, seconds, kill_rate, str(jdir), fleet=fleet,
                          as_hosts=hosts)
    launcher = _Launcher(uri, spark_key_uri(uri) if spark_fleet else uri, jdir,
                         {**os.environ, OPTIONS_ENV: json.dumps(options)},
                         python or sys.executable, rows_per_commit, rng,
                         {f"{kind}{i}": kind for i, kind in enumerate(peers)}, hosts,
                         writer_pause)
    say(f"stress: {writers} writers{' as hosts' if hosts else ''} on {uri}"
        f"{' (fleet-wide group commit)' if fleet else ''} for {seconds:g} s, kill rate "
        f"{kill_rate:g}/s, journals in {jdir}")
    workers = {f"w{i}": launcher.start(f"w{i}") for i in range(writers)}
    workers.update({name: launcher.start(name) for name in launcher.kinds})
    began = time.monotonic()
    try:
        _await_first_commit(workers, launcher, report, say)
        began = time.monotonic()
        _supervise(workers, launcher, report, began, began + seconds, say)
    finally:
        _stop_all(list(workers.values()), report)
    report.elapsed = time.monotonic() - began
    entries = read_journals([jdir])
    report.commits = len(entries)
    say(f"stress: stopped after {report.elapsed:.1f} s: {report.commits} commits acknowledged, "
        f"{report.kills} kills, {report.restarts} restarts; checking the history")
    report.transient_errors = sum(_count_transient(p) for p in jdir.glob("*.log"))
    report.verify = verify_table(uri, entries, storage_options=options)
    if peers:
        report.peers = check_peers(uri, options, jdir, launcher.kinds)
    report.fleet_records_left = _fleet_records(uri, options)
    return report


def _fleet_records(uri: str, options: Mapping[str, str]) -> int | None:
    """Published records left under the table's fleet folder (round keys are not counted: the
    newest ``cleanup.KEEP_ROUNDS`` stay by design); None where it cannot be listed."""
    try:
        store = open_log_store(uri, options).store
        return sum(1 for o in store.list(FLEET_DIR + "/") if version_of_round(o.path) is None)
    except (StorageError, LogStoreError):
        return None


def _check_arguments(uri: str, writers: int, seconds: float, kill_rate: float,
                     rows_per_commit: int, peers: Sequence[str]) -> None:
    if writers < 0 or (writers == 0 and not peers):
        raise InvalidArgumentError(f"stress on {uri}: --writers must be at least 1 (0 with "
                                   f"--peer), got {writers}")
    check_kinds(peers, uri)
    if seconds <= 0:
        raise InvalidArgumentError(f"stress on {uri}: --seconds must be positive, got {seconds}")
    if kill_rate < 0:
        raise InvalidArgumentError(f"stress on {uri}: --kill-rate must be >= 0, got {kill_rate}")
    if rows_per_commit < 1:
        raise InvalidArgumentError(
            f"stress on {uri}: --rows-per-commit must be at least 1, got {rows_per_commit}")


def _prepare_table(uri: str, options: dict[str, str], spark_fleet: bool, fleet: bool) -> None:
    """The stress table, created through Spark's protocol when Spark's writers join (so that
    its entries start at version 0); with ``fleet``, with fleet-wide group commit on."""
    if spark_fleet:
        try:
            DeltaTable(uri, storage_options=options)
        except TableNotFoundError:
            create_through_spark(uri, options, SCHEMA)
    ensure_table(uri, options, fleet=fleet)


class _Launcher:
    """Starts writer and peer processes (``kinds``: the peers' names and engines), counting
    each name's incarnations; every process gets a seed from ``rng``.  With ``as_hosts`` each
    deltacommit writer gets a turn folder of its own (``<journals>/turns/<name>``), kept
    across its incarnations as a host's would be."""

    def __init__(self, uri: str, peer_uri: str, jdir: Path, env: dict[str, str], exe: str,
                 rows_per_commit: int, rng: random.Random, kinds: dict[str, str],
                 as_hosts: bool = False, writer_pause: float = 0.0) -> None:
        self.uri = uri
        self.peer_uri = peer_uri
        self.jdir = jdir
        self.env = env
        self.exe = exe
        self.rows_per_commit = rows_per_commit
        self.rng = rng
        self.kinds = kinds
        self.as_hosts = as_hosts
        self.writer_pause = writer_pause
        self.incarnations: dict[str, int] = {}

    def _env(self, name: str) -> dict[str, str]:
        if not self.as_hosts or name in self.kinds:
            return self.env
        turns = self.jdir / "turns"
        turns.mkdir(mode=0o700, exist_ok=True)
        own = turns / name
        own.mkdir(mode=0o700, exist_ok=True)
        return {**self.env, TURN_DIR_VARIABLE: str(own)}

    def start(self, name: str) -> _Worker:
        jdir, exe = self.jdir, self.exe
        k = self.incarnations.get(name, -1) + 1
        self.incarnations[name] = k
        kind = self.kinds.get(name)
        if kind is None:
            log_path = jdir / f"{name}-{k}.log"
            command = [exe, "-m", "deltacommit.testing.stress", "worker", self.uri, "--name", name,
                       "--incarnation", str(k), "--journal", str(jdir / f"{name}-{k}.jsonl"),
                       "--pause", str(self.writer_pause)]
        else:
            log_path = jdir / f"peer-{name}-{k}.log"
            command = [exe, "-m", "deltacommit.testing.stress", "peer", kind, self.peer_uri,
                       "--name", name, "--incarnation", str(k),
                       "--journal", str(jdir / f"peer-{name}-{k}.acks")]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [*command, "--rows", str(self.rows_per_commit),
                 "--seed", str(self.rng.getrandbits(32))],
                env=self._env(name), stdout=log, stderr=subprocess.STDOUT)
        return _Worker(name, k, proc, log_path)


def _supervise(workers: dict[str, _Worker], launcher: _Launcher, report: StressReport,
               began: float, deadline: float, say: Callable[[str], None]) -> None:
    """Until ``deadline``: restart a writer that ended on its own (a failure: writers run until
    stopped) and, ``report.kill_rate`` times a second, SIGKILL one at random and restart it."""
    rng, kill_rate = launcher.rng, report.kill_rate
    next_kill = began + rng.expovariate(kill_rate) if kill_rate > 0 else float("inf")
    next_note = began + 10.0
    while (now := time.monotonic()) < deadline:
        for name, w in list(workers.items()):
            code = w.proc.poll()
            if code is not None:  # ended on its own: a writer must not
                report.failed_writers.append(_failure(w, code))
                workers[name] = launcher.start(name)
                report.restarts += 1
        if now >= next_kill:
            victim = workers[rng.choice(sorted(workers))]
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait()
            report.kills += 1
            workers[victim.name] = launcher.start(victim.name)
            report.restarts += 1
            next_kill = now + rng.expovariate(kill_rate)
        if now >= next_note:
            say(f"stress: {now - began:.0f} s, {_count_lines(launcher.jdir)} commits "
                f"acknowledged, {report.kills} kills")
            next_note += 10.0
        time.sleep(min(0.05, max(0.0, min(deadline, next_kill) - now)))


def _await_first_commit(workers: dict[str, _Worker], launcher: _Launcher,
                        report: StressReport, say: Callable[[str], None]) -> None:
    """Wait, at most ``WARM_UP_SECONDS``, until one writer has acknowledged a commit (or one
    ended on its own, which ``_supervise`` reports): the run's seconds and its kills count from
    there.  A writer's first commit costs a cold interpreter, pyarrow and the table's first
    read, which on a busy machine can outlast a short run; killing writers that have not yet
    started would then test nothing but start-up."""
    end = time.monotonic() + WARM_UP_SECONDS
    while time.monotonic() < end:
        if _count_lines(launcher.jdir) or any(w.proc.poll() is not None
                                              for w in workers.values()):
            return
        time.sleep(0.05)
    say(f"stress: no writer acknowledged a commit within {WARM_UP_SECONDS:g} s of starting; "
        "running anyway")


def _stop_all(workers: Sequence[_Worker], report: StressReport) -> None:
    """SIGTERM every writer (each finishes its commit and exits 0), SIGKILL what remains."""
    for w in workers:
        if w.proc.poll() is None:
            w.proc.send_signal(signal.SIGTERM)
    end = time.monotonic() + STOP_GRACE_SECONDS
    for w in workers:
        try:
            code = w.proc.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.proc.kill()
            w.proc.wait()
            report.failed_writers.append(
                f"{w.name}#{w.incarnation} did not stop within {STOP_GRACE_SECONDS:.0f} s of "
                f"SIGTERM (log {w.log_path}):\n{_tail(w.log_path)}")
            continue
        if code not in (0, -signal.SIGTERM):
            report.failed_writers.append(_failure(w, code))


def _failure(w: _Worker, code: int) -> str:
    return (f"{w.name}#{w.incarnation} exited with status {code} (log {w.log_path}):\n"
            f"{_tail(w.log_path)}")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _count_lines(jdir: Path) -> int:
    n = 0
    for p in jdir.glob("*.jsonl"):
        with contextlib.suppress(OSError):
            n += p.read_bytes().count(b"\n")
    return n


def _count_transient(log: Path) -> int:
    try:
        return log.read_text(errors="replace").count("transient error")
    except OSError:
        return 0


# --------------------------------------------------------------------------- the writer process


def worker(uri: str, name: str, incarnation: int, journal_path: str, rows: int, seed: int,
           pause: float = 0.0) -> int:
    """Append batches until SIGTERM, journaling each acknowledged commit, ``pause`` seconds
    apart (a SIGTERM ends the pause)."""

    stop = StopOnSigterm()
    signal.signal(signal.SIGTERM, stop)
    options = json.loads(os.environ.get(OPTIONS_ENV, "{}"))
    rng = random.Random(seed)
    table = DeltaTable(uri, storage_options=options)
    seq = 0
    with Journal(journal_path, writer=f"{name}#{incarnation}") as journal:
        while not stop.event.is_set():
            data = pa.table({
                "writer": [name] * rows, "incarnation": [incarnation] * rows,
                "seq": list(range(seq * rows, (seq + 1) * rows)),
                "payload": [uuid.UUID(int=rng.getrandbits(128)).hex for _ in range(rows)],
            }, schema=SCHEMA)
            result = _append(table, data, f"{name}#{incarnation}")
            if result is None:
                continue
            journal.append(result, rows=rows)
            seq += 1
            if pause > 0:
                stop.event.wait(pause)
    return 0


def _append(table: DeltaTable, data: pa.Table, who: str) -> CommitResult | None:
    """One append through the write driver, whose commit is retried as the SAME transaction
    after a transient error, as an application should: if the failed attempt had in fact
    landed (the answer was lost), the retry finds its own txnId in the log and reports that
    version instead of committing the rows twice.  None when every try failed (the write's
    outcome is unknown and it is never acknowledged; its files are kept)."""

    def retried(e: BaseException, attempt: int) -> None:
        print(f"{who} transient error (try {attempt} of {COMMIT_TRIES} of txn "
              f"{job.txn.txn_id}): {e}", file=sys.stderr, flush=True)

    job = _StressAppend(table, data)
    try:
        return run(job, unknown_tries=COMMIT_TRIES, on_unknown=retried)
    except TRANSIENT as e:
        print(f"{who} transient error: {e}", file=sys.stderr, flush=True)
        return None


class _StressAppend(TableJob[DeltaTable]):
    """A stress writer's append as the write driver's stages (``ops.driver``)."""

    def __init__(self, table: DeltaTable, data: pa.Table) -> None:
        super().__init__(table)
        self.data = data

    def begin(self, attempt: Attempt) -> Transaction:
        self._txn = self.table.transaction("WRITE", {"mode": "Append", "partitionBy": "[]"})
        return self._txn

    def write(self, attempt: Attempt) -> None:
        target = WriteTarget.of(self.table.uri, self.txn.snapshot)
        self.data = conform_rows(target, self.data)
        attempt.written.extend(write_rows(self.store, target, self.data,
                                          clock=self.table.clock, random=self.table.random))

    def stage(self, attempt: Attempt) -> None:
        self.txn.add(attempt.written)
        self.txn.operation_metrics["numOutputRows"] = str(self.data.num_rows)

    def commit(self, attempt: Attempt) -> CommitResult:
        return self.txn.commit()

    def refused(self, attempt: Attempt, error: Exception) -> Decision:
        return Decision.RAISE


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deltacommit.testing.stress")
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("worker", help="one writer process of a stress run")
    p = sub.add_parser("peer", help="one peer writer process (another engine) of a stress run")
    p.add_argument("kind", choices=PEER_KINDS)
    for one in (w, p):  # every writer process takes the same identity and journal
        one.add_argument("uri")
        one.add_argument("--name", required=True)
        one.add_argument("--incarnation", type=int, required=True)
        one.add_argument("--journal", required=True)
        one.add_argument("--rows", type=int, default=10)
        one.add_argument("--seed", type=int, default=0)
    w.add_argument("--pause", type=float, default=0.0)
    args = parser.parse_args(argv)
    if args.command == "peer":
        options = json.loads(os.environ.get(OPTIONS_ENV, "{}"))
        return peer_worker(args.kind, args.uri, args.name, args.incarnation, args.journal,
                           args.rows, args.seed, SCHEMA, options)
    return worker(args.uri, args.name, args.incarnation, args.journal, args.rows, args.seed,
                  args.pause)


if __name__ == "__main__":
    sys.exit(main())
