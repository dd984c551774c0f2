"""Fleet-wide group commit against racing writers: many hosts appending to one S3 table.

H writer processes stand for H hosts (each with its own ``DELTACOMMIT_TURN_DIR``, so no two
share a host turn or a committer); each makes A appends of one row to one S3 table on the
benchmarks' single-threaded moto, reached through ``bench/latency_proxy.py`` adding L ms to
every request.  Three contenders run in the same invocation, one after another and in a new
order every round (so that a slow spell of a shared machine falls on all of them):

``deltacommit fleet``
    the table has ``deltacommit.groupCommit.fleet=true``: writers publish their transactions
    and whoever claims the next version commits every pending one it can check;
``deltacommit racing``
    the same library with the property off: every writer claims its own versions;
``deltalake 1.6.0``
    ``write_deltalake``, resubmitted after "Failed to commit transaction: 15" (counted in
    ``failures``).

Each is called two ways: by URI (``dc.write(uri, ...)`` / ``write_deltalake(uri, ...)``: a
fresh table object per append, as a Lambda function does) and with one table object kept for
all appends (``--calls``).  ``--mechanism conditional`` commits with S3 conditional writes
(``If-None-Match``), ``--mechanism dynamodb`` with Spark's S3DynamoDBLogStore protocol
(deltalake's own DynamoDB log store against ours).

Per run, one JSON line (``"bench": "fleet"``):

* ``tx_per_s``: acknowledged appends per second of wall time (first release to the last
  acknowledgement; ``tx_per_s_to_exit`` and ``seconds_to_exit``: to the last writer process's
  exit, which adds its interpreter's teardown to every contender alike);
  ``p50_ms``/``p99_ms``: one append call as its caller sees it;
* ``versions``, ``tx_per_version`` (appends that landed / versions the run created, each append
  being one file), ``largest_group`` (most appends in one version);
* ``requests`` by kind as counted on the proxy (``PUT-if-absent log``, ``GET fleet``,
  ``dynamodb.PutItem``, ...; a suffix `` 412``/`` 404``/... counts answers other than 2xx),
  ``requests_per_tx`` and ``requests_per_tx_by_kind``;
* ``rtt_ms``: the mean round trip of one request through the proxy during the run (L plus
  moto's service and queueing);
* the protocol's limit on this rig: ``versions_per_s_limit`` = 1000 / (``critical_path`` x
  ``rtt_ms``), where ``critical_path`` is the number of requests that must follow one another
  from one version to the next (``CRITICAL_PATH``, with the reason); ``members_limit`` (most
  transactions a version can carry here: one per host for the fleet, 1 for racing writers);
  ``limit_tx_per_s`` = their product, and ``share`` = ``tx_per_s`` / ``limit_tx_per_s``;
  ``round_trips_per_version`` = 1000 / (versions per second x ``rtt_ms``): the run's wall
  time per version in request round trips (where requests in sequence are what a version
  waits for, the critical path the run actually had);
* ``lost``/``duplicated``: every acknowledged (writer, seq) read back from the table exactly
  once; ``verify``: the history checker's verdict (no transaction in two versions, the log
  replays, the table reads back); ``fleet_records_left``: records left under
  ``_deltacommit_fleet/`` when the run ended (``fleet_round_keys_left``: round keys, of which
  the newest few are kept).

``--kill N`` kills N writers with SIGKILL once half the appends are acknowledged and starts
them again: every append then carries an app id (``host-<i>``) and version (its seq), and a
restarted writer redoes the append that was in flight with the same ones, so that exactly-once
rests on the libraries' idempotent writes (deltacommit skips a recorded app version by itself;
a deltalake writer asks ``transaction_version`` first, as its documentation advises).

Then ``"bench": "fleet-comparison"`` lines (the fleet's tx/s over racing deltacommit's and
over deltalake's, like calls with like) and ``"bench": "fleet-projection"`` lines: commits per
second projected for real S3 (60 ms per request on the critical path) and S3 Express (15 ms),
from the run's round trips per version and transactions per version (both measured, so a
run with latency, where round trips are what versions wait for, projects best), capped by
S3's request rates per prefix (3,500 writes and 5,500 reads per second) and DynamoDB's 1,000
writes per second on one partition key, divided by the run's requests of each per
transaction.  ``--scaling`` runs 2, 4, 8 and 16 hosts at 0, 15 and 50 ms and ends with the
table (``"bench": "fleet-scaling"`` lines, and as text on stderr).

    .venv/bin/python bench/fleet.py --hosts 8 --appends 15 --latency-ms 15
    .venv/bin/python bench/fleet.py --hosts 8 --appends 15 --latency-ms 15 --kill 2
    .venv/bin/python bench/fleet.py --mechanism dynamodb
    .venv/bin/python bench/fleet.py --scaling --calls uri
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

FLEET_PROPERTY = "deltacommit.groupCommit.fleet"
FLEET_DIR = "_deltacommit_fleet"
GIVE_UP = "Failed to commit transaction"
FLEET, RACING, DELTALAKE = "deltacommit fleet", "deltacommit racing", "deltalake 1.6.0"
CONTENDERS = (FLEET, RACING, DELTALAKE)
BY_URI, TABLE_OBJECT = "uri", "table object"

#: Requests that must follow one another from one version to the next, per contender and
#: mechanism, and why: the protocol's own floor, whatever the machine.
CRITICAL_PATH: dict[tuple[str, str], tuple[int, str]] = {
    (RACING, "conditional"): (2, "the winner's PUT If-None-Match of V; a loser learns of V by its "
                                 "412, GETs V (conflict check, stamps) and PUTs V+1"),
    (DELTALAKE, "conditional"): (2, "as racing deltacommit: PUT of V, the next winner's GET of V, "
                                    "its PUT of V+1"),
    (FLEET, "conditional"): (5, "engine/group/fleet/round.py: the round's PUT of V; the waiters' "
                                "GET of V.json that finds it; the PUT If-None-Match of round "
                                "V+1's key; the winner's LIST of the records and GETs of their "
                                "bodies (in parallel); its PUT of V+1 with every member"),
    (RACING, "dynamodb"): (4, "the winner's PutItem of V and its copy to V.json; a loser GETs "
                              "V.json, PUTs its temp file for V+1 and its PutItem of V+1"),
    (DELTALAKE, "dynamodb"): (4, "as racing deltacommit on DynamoDB: PutItem, copy to V.json, "
                                 "the next winner's GET of V, temp file, PutItem"),
    (FLEET, "dynamodb"): (7, "the PutItem of V and its copy to V.json; the waiters' GET of "
                             "V.json; round V+1's key (a PutItem); the LIST and GETs of the "
                             "records; the temp file of V+1; its PutItem"),
}
#: S3's request rates per prefix, the ceiling any number of hosts meets on one table, and
#: DynamoDB's write units per second on one partition (a table's entries share one key).
S3_WRITES_PER_S, S3_READS_PER_S = 3500, 5500
DYNAMODB_WRITES_PER_KEY = 1000
#: Latency per request on the critical path for the projections: real S3's conditional
#: writes (58-68 ms measured) and S3 Express One Zone's.
PROJECTIONS = {"s3": 60.0, "s3-express": 15.0}


def emit(out: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    print(json.dumps(fields), flush=True)
    out.append(fields)
    return fields


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# --------------------------------------------------------------------------- requests by kind


def request_kind(head: bytes, status_line: bytes) -> str:
    """What a request was, from its head and its answer: ``<verb> <area>`` for S3 (areas:
    ``log``, ``log-temp``, ``fleet``, ``fleet-round``, ``data``; verbs: ``GET``, ``HEAD``,
    ``PUT``, ``PUT-if-absent``, ``COPY``, ``DELETE``, ``DeleteObjects``, ``LIST``), or
    ``dynamodb.<Operation>``; an answer other than 2xx adds its status."""
    lines = head.decode("latin-1", "replace").split("\r\n")
    parts = lines[0].split(" ")
    method, target = (parts[0], parts[1]) if len(parts) >= 2 else ("?", "/")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    status = status_line.split(b" ")[1].decode() if status_line.count(b" ") >= 1 else "?"
    suffix = "" if status.startswith("2") else f" {status}"
    amz_target = headers.get("x-amz-target")
    if amz_target:
        return f"dynamodb.{amz_target.rsplit('.', 1)[-1]}{suffix}"
    path, _, query = target.partition("?")
    params = urllib.parse.parse_qs(query, keep_blank_values=True)
    key = urllib.parse.unquote(path).lstrip("/")
    host = headers.get("host", "")
    if not host.split(":")[0].replace(".", "").isdigit() and host.count(".") >= 1 \
            and not host.startswith("localhost"):
        pass  # virtual-hosted style: the path is the key
    else:
        key = key.partition("/")[2]  # path style: the first segment is the bucket
    if method == "GET" and ("list-type" in params or "prefix" in params or not key):
        verb, key = "LIST", params.get("prefix", [""])[0]
    elif method == "POST" and "delete" in params:
        verb = "DeleteObjects"
    elif method == "PUT" and "x-amz-copy-source" in headers:
        verb = "COPY"
    elif method == "PUT" and "if-none-match" in headers:
        verb = "PUT-if-absent"
    else:
        verb = method
    if verb == "DeleteObjects":
        return f"{verb}{suffix}"  # the keys are in the body
    return f"{verb} {_area(key)}{suffix}"


def _area(key: str) -> str:
    if f"{FLEET_DIR}/" in key or key.endswith(FLEET_DIR):
        return "fleet-round" if key.endswith(".round") else "fleet"
    if "_delta_log/" in key or key.endswith("_delta_log"):
        tail = key.rsplit("_delta_log/", 1)[-1]
        return "log-temp" if tail.startswith(".tmp") or ".tmp" in tail else "log"
    return "data"


class RequestCounter:
    """Requests seen by the proxy, by kind, and their round trips; ``take`` hands over and
    clears what was counted (one run's requests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kinds: Counter[str] = Counter()
        self._seconds = 0.0

    def __call__(self, head: bytes, status_line: bytes, seconds: float) -> None:
        kind = request_kind(head, status_line)
        with self._lock:
            self._kinds[kind] += 1
            self._seconds += seconds

    def take(self) -> tuple[Counter[str], float]:
        with self._lock:
            kinds, seconds = self._kinds, self._seconds
            self._kinds, self._seconds = Counter(), 0.0
        return kinds, seconds


# --------------------------------------------------------------------------- writer processes
#
# A writer is this script run with --worker: it opens the table, prints "ready", waits for
# "go" on stdin, then prints one JSON line per acknowledged append (so that the acknowledgements
# of a writer killed with SIGKILL are known) and a last line when done.


def _batch(writer: int, seq: int) -> Any:
    import pyarrow as pa

    return pa.table({"writer": pa.array([writer], pa.int64()), "seq": pa.array([seq], pa.int64()),
                     "payload": pa.array([f"w{writer}-s{seq}"], pa.string())})


def _batches(writer: int, start: int, end: int) -> dict[int, Any]:
    """The appends ``start`` to ``end`` of ``writer``, built before the writer is released:
    the first Arrow array a process builds from Python values imports pandas (about 0.4 s of
    processor time), which inside the measured window would cost every contender alike but
    weigh most on the fastest, on a machine whose processors the writers share."""
    return {seq: _batch(writer, seq) for seq in range(start, end)}


def _ready() -> None:
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("no go")


def _ack(seq: int, seconds: float | None, **extra: Any) -> None:
    """One acknowledged append; ``seconds`` None for one a restarted writer found done."""
    ms = None if seconds is None else round(seconds * 1000, 2)
    print(json.dumps({"ack": seq, "ms": ms, **extra}), flush=True)


def _worker_deltacommit(args: argparse.Namespace, options: dict[str, str]) -> dict[str, Any]:
    import fleet_trace

    import deltacommit as dc

    fleet_trace.install()
    table = dc.DeltaTable(args.uri, storage_options=options)
    attempts = skipped = 0
    batches = _batches(args.writer, args.start_seq, args.appends)
    _ready()
    for seq in range(args.start_seq, args.appends):
        data = batches[seq]
        idem: dict[str, Any] = {}
        if args.app_ids:
            idem = {"app_id": f"host-{args.writer}", "app_version": seq}
        t0 = time.perf_counter()
        with fleet_trace.append():
            if args.calls == BY_URI:
                r = dc.write(args.uri, data, storage_options=options, **idem)
            else:
                r = dc.write(table, data, **idem)
        attempts += r.attempts
        skipped += r.skipped
        _ack(seq, time.perf_counter() - t0, version=r.version, skipped=r.skipped)
    return {"attempts": attempts, "skipped": skipped}


def _worker_deltalake(args: argparse.Namespace, options: dict[str, str]) -> dict[str, Any]:
    import deltalake
    from deltalake import CommitProperties, Transaction

    by_uri = args.calls == BY_URI
    table = deltalake.DeltaTable(args.uri, storage_options=options)
    app_id = f"host-{args.writer}"
    start = args.start_seq
    if args.app_ids and start > 0:
        # A restarted writer asks which of its appends the table already holds, as
        # deltalake's idempotent writes are meant to be used.
        done = table.transaction_version(app_id)
        start = max(start, (done + 1) if done is not None else 0)
    failures, kinds, calls = 0, Counter[str](), 0
    batches = _batches(args.writer, start, args.appends)
    _ready()
    for seq in range(args.start_seq, start):
        _ack(seq, None, skipped=True)  # landed before the kill, its answer lost with it
    for seq in range(start, args.appends):
        data = batches[seq]
        extra: dict[str, Any] = {"storage_options": options} if by_uri else {}
        if args.app_ids:
            extra["commit_properties"] = CommitProperties(
                app_transactions=[Transaction(app_id=app_id, version=seq)])
        t0 = time.perf_counter()
        for _ in range(args.resubmits + 1):
            calls += 1
            try:
                deltalake.write_deltalake(args.uri if by_uri else table, data, mode="append",
                                          **extra)
                break
            except Exception as e:  # CommitFailedError / DeltaError
                kind = _failure_kind(str(e))
                if kind is None:
                    raise
                failures += 1
                kinds[kind] += 1
                if not by_uri:
                    table.update_incremental()
        else:
            raise RuntimeError(f"append {seq} gave up after {args.resubmits} resubmissions")
        _ack(seq, time.perf_counter() - t0)
    return {"attempts": calls, "failures": failures, "failure_kinds": dict(kinds)}


def _failure_kind(message: str) -> str | None:
    """A deltalake write that failed without committing, by kind; None for anything else."""
    if GIVE_UP in message:
        return "Failed to commit transaction (retries exhausted)"
    if "already exists" in message and "version" in message:
        return "version already exists (DeltaError from the DynamoDB log store)"
    return None


def worker_main(args: argparse.Namespace) -> int:
    options = json.loads(os.environ["FLEET_BENCH_OPTIONS"])
    work = _worker_deltalake if args.worker == "deltalake" else _worker_deltacommit
    try:
        result = work(args, options)
    except BaseException as e:
        result = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    print(json.dumps({"done": True, **result}), flush=True)
    return 0


@dataclass
class _Host:
    """One writer process standing for one host, and what its lives acknowledged."""

    writer: int
    proc: subprocess.Popen[str]
    lives: int = 1
    acked: dict[int, float | None] = field(default_factory=dict)   # seq -> latency (s)
    #: When (monotonic) the writer's last acknowledgement arrived.
    last_ack_at: float = 0.0
    skipped: int = 0
    report: dict[str, Any] | None = None
    ended: threading.Event = field(default_factory=threading.Event)
    reader: threading.Thread | None = None


class Fleet:
    """Starts H writer processes, releases them together, reads their acknowledgements, kills
    and restarts some on request."""

    def __init__(self, library: str, uri: str, options: Mapping[str, str], hosts: int,
                 appends: int, calls: str, app_ids: bool, resubmits: int, tmp: Path) -> None:
        self.library, self.uri, self.hosts, self.appends = library, uri, hosts, appends
        self.calls, self.app_ids, self.resubmits, self.tmp = calls, app_ids, resubmits, tmp
        self.options = dict(options)
        self.events: queue.Queue[int] = queue.Queue()
        #: Where each writer writes its appends' phases (``fleet_trace``), if traced.
        self.trace: Path | None = None
        self.hosts_by_id: dict[int, _Host] = {}
        self._killed: set[int] = set()

    def _spawn(self, writer: int, start_seq: int) -> subprocess.Popen[str]:
        turn_dir = self.tmp / f"turns-host{writer}"
        turn_dir.mkdir(mode=0o700, exist_ok=True)
        env = {**os.environ, "DELTACOMMIT_TURN_DIR": str(turn_dir),
               "FLEET_BENCH_OPTIONS": json.dumps(self.options)}
        if self.trace is not None:
            env["FLEET_BENCH_TRACE"] = str(self.trace / f"writer-{writer}.jsonl")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", self.library,
               "--uri", self.uri, "--writer", str(writer), "--appends", str(self.appends),
               "--start-seq", str(start_seq), "--calls", self.calls,
               "--resubmits", str(self.resubmits)] + (["--app-ids"] if self.app_ids else [])
        return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)

    def start(self) -> None:
        for w in range(self.hosts):
            self.hosts_by_id[w] = _Host(w, self._spawn(w, 0))
        for h in self.hosts_by_id.values():
            self._await_ready(h)

    def _await_ready(self, h: _Host) -> None:
        assert h.proc.stdout is not None
        line = h.proc.stdout.readline().strip()
        if line != "ready":
            err = h.proc.stderr.read() if h.proc.stderr else ""
            raise RuntimeError(f"{self.library} writer {h.writer} did not start: {line!r}\n"
                               f"{err[-3000:]}")

    def go(self) -> float:
        began = time.monotonic()
        for h in self.hosts_by_id.values():
            self._release(h)
        return began

    def _release(self, h: _Host) -> None:
        assert h.proc.stdin is not None
        h.proc.stdin.write("go\n")
        h.proc.stdin.flush()
        h.reader = threading.Thread(target=self._read, args=(h, h.proc), daemon=True)
        h.reader.start()

    def _read(self, h: _Host, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            doc = json.loads(line)
            if "ack" in doc:
                h.acked[doc["ack"]] = None if doc["ms"] is None else doc["ms"] / 1000
                h.last_ack_at = time.monotonic()
                h.skipped += bool(doc.get("skipped"))
                self.events.put(h.writer)
            elif doc.get("done"):
                h.report = doc
        proc.wait()
        if proc.pid not in self._killed:
            if h.report is None:
                err = proc.stderr.read() if proc.stderr else ""
                h.report = {"error": f"exited with {proc.returncode} without a report",
                            "traceback": err[-3000:]}
            h.ended.set()
            self.events.put(h.writer)

    def acknowledged(self) -> int:
        return sum(len(h.acked) for h in self.hosts_by_id.values())

    def kill_and_restart(self, n: int, rng: random.Random) -> list[int]:
        """SIGKILL n writers still appending, then start each again from its first append
        not acknowledged (the one in flight is redone, with the same app id and version)."""
        running = [h for h in self.hosts_by_id.values()
                   if not h.ended.is_set() and len(h.acked) < self.appends]
        victims = rng.sample(running, min(n, len(running)))
        for h in victims:
            self._killed.add(h.proc.pid)
            h.proc.send_signal(signal.SIGKILL)
            h.proc.wait()
            if h.reader is not None:
                h.reader.join()  # every acknowledgement the killed life printed is counted
            h.lives += 1
            start = max(h.acked) + 1 if h.acked else 0
            h.proc = self._spawn(h.writer, start)
            self._await_ready(h)
            self._release(h)
        return [h.writer for h in victims]

    def wait(self, kill: int, rng: random.Random, timeout: float) -> list[int]:
        """Until every writer is done (killing ``kill`` of them once half the appends are
        acknowledged); the writers killed."""
        killed: list[int] = []
        deadline = time.monotonic() + timeout
        half = self.hosts * self.appends // 2
        while not all(h.ended.is_set() for h in self.hosts_by_id.values()):
            with contextlib.suppress(queue.Empty):
                self.events.get(timeout=max(0.01, min(1.0, deadline - time.monotonic())))
            if kill and not killed and self.acknowledged() >= half:
                killed = self.kill_and_restart(kill, rng)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.library} writers not done after {timeout:.0f} s")
        return killed

    def stop(self) -> None:
        for h in self.hosts_by_id.values():
            if h.proc.poll() is None:
                h.proc.kill()
                h.proc.wait()


# --------------------------------------------------------------------------- one run


@dataclass
class Rig:
    """The moto server, the proxy before it and the run's scratch folder."""

    moto: Any
    proxy: Any
    counter: RequestCounter
    tmp: Path
    child_env: dict[str, str]

    def fresh_table(self, contender: str, mechanism: str
                    ) -> tuple[str, dict[str, str], dict[str, str]]:
        """A new table for one run: its URI, the options that reach it through the proxy (the
        writers') and directly (setting up and reading back, not counted)."""
        import boto3

        from deltacommit.io.logstore.s3_dynamodb.admin import create_log_table
        from deltacommit.testing import s3_storage_options, unique_name

        self.moto.reset()
        bucket = unique_name("fleet")
        boto3.client("s3", endpoint_url=self.moto.endpoint, region_name="us-east-1"
                     ).create_bucket(Bucket=bucket)
        direct = s3_storage_options(self.moto.endpoint)
        proxied = s3_storage_options(self.proxy.endpoint)
        if mechanism == "dynamodb":
            log_table = unique_name("delta-log")
            create_log_table(boto3.client("dynamodb", endpoint_url=self.moto.endpoint,
                                          region_name="us-east-1"), log_table)
            for opts in (direct, proxied):
                opts.update({"AWS_S3_LOCKING_PROVIDER": "dynamodb",
                             "DELTA_DYNAMO_TABLE_NAME": log_table,
                             "AWS_ENDPOINT_URL_DYNAMODB": opts["AWS_ENDPOINT_URL"]})
        uri = f"s3://{bucket}/t"
        schema = _schema()
        if contender == DELTALAKE:
            import deltalake

            deltalake.DeltaTable.create(uri, schema, storage_options=direct)
        else:
            import deltacommit as dc

            conf = {FLEET_PROPERTY: "true"} if contender == FLEET else None
            dc.DeltaTable.create(uri, schema, storage_options=direct, configuration=conf)
        return uri, proxied, direct


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema([pa.field("writer", pa.int64()), pa.field("seq", pa.int64()),
                      pa.field("payload", pa.string())])


def fleet_available() -> bool:
    """Whether this checkout has fleet-wide group commit (else a fleet table races)."""
    return importlib.util.find_spec("deltacommit.engine.group.fleet") is not None


def run_one(rig: Rig, contender: str, calls: str, mechanism: str, hosts: int, appends: int,
            latency_ms: float, kill: int, app_ids: bool, resubmits: int, round_: int,
            rng: random.Random, out: list[dict[str, Any]], trace: bool = False
            ) -> dict[str, Any]:
    rig.proxy.delay = latency_ms / 1000
    uri, proxied, direct = rig.fresh_table(contender, mechanism)
    library = "deltalake" if contender == DELTALAKE else "deltacommit"
    fleet = Fleet(library, uri, proxied, hosts, appends, calls, app_ids, resubmits,
                  Path(tempfile.mkdtemp(dir=rig.tmp, prefix="run-")))
    if trace and library == "deltacommit":
        fleet.trace = fleet.tmp
    try:
        fleet.start()
        rig.counter.take()  # opening the table is not the run's
        server_before = rig.moto.cpu_seconds()
        began = fleet.go()
        killed = fleet.wait(kill, rng, timeout=3600)
        exited = time.monotonic() - began
        # Until the last acknowledgement: what the writers' processes do after their last
        # append (the interpreter's exit, joining its threads) is no append's time.
        seconds = max((h.last_ack_at for h in fleet.hosts_by_id.values()), default=0.0) \
            - began
        if seconds <= 0:
            seconds = exited
    finally:
        fleet.stop()
    server_after = rig.moto.cpu_seconds()
    server_cpu = None if server_before is None or server_after is None \
        else server_after - server_before
    requests, request_seconds = rig.counter.take()
    reports = [h.report or {} for h in fleet.hosts_by_id.values()]
    errors = [f"writer {h.writer}: {r['error']}\n{r.get('traceback', '')[-1500:]}"
              for h, r in zip(fleet.hosts_by_id.values(), reports, strict=True) if "error" in r]
    acked = [(h.writer, s) for h in fleet.hosts_by_id.values() for s in h.acked]
    latencies = [x for h in fleet.hosts_by_id.values() for x in h.acked.values()
                 if x is not None]
    check = read_back(uri, direct, acked)
    n = len(acked)
    n_requests = sum(requests.values())
    rtt_ms = request_seconds * 1000 / n_requests if n_requests else None
    versions = check["versions"]
    path, why = CRITICAL_PATH[(contender, mechanism)]
    members_limit = hosts if contender == FLEET else 1
    versions_per_s_limit = 1000 / (path * rtt_ms) if rtt_ms else None
    limit = versions_per_s_limit * members_limit if versions_per_s_limit else None
    tx_per_s = n / seconds if seconds else 0.0
    versions_per_s = versions / seconds if seconds else 0.0
    if fleet.trace is not None:
        import fleet_trace

        emit(out, bench="fleet-trace", contender=contender, calls=calls, mechanism=mechanism,
             hosts=hosts, latency_ms=latency_ms, round=round_,
             **fleet_trace.summarise(sorted(fleet.trace.glob("writer-*.jsonl"))))
        keep = os.environ.get("FLEET_BENCH_TRACE_KEEP")
        if keep:
            import shutil

            shutil.copytree(fleet.trace, Path(keep) / f"{contender}-{calls}-{hosts}-{round_}"
                            .replace(" ", "_"), dirs_exist_ok=True)
    return emit(
        out, bench="fleet", contender=contender, calls=calls, mechanism=mechanism,
        hosts=hosts, appends_each=appends, latency_ms=latency_ms, round=round_,
        killed_writers=killed, app_ids=app_ids,
        fleet_protocol=fleet_available() if contender == FLEET else None,
        transactions=n, seconds=round(seconds, 3), tx_per_s=round(tx_per_s, 2),
        seconds_to_exit=round(exited, 3),
        tx_per_s_to_exit=round(n / exited, 2) if exited else None,
        p50_ms=_ms(percentile(latencies, 0.5)), p99_ms=_ms(percentile(latencies, 0.99)),
        versions=versions, versions_per_s=round(versions_per_s, 2),
        tx_per_version=round(check["landed"] / versions, 2) if versions else None,
        largest_group=check["largest_group"],
        requests=dict(sorted(requests.items())), requests_total=n_requests,
        requests_per_tx=round(n_requests / n, 2) if n else None,
        requests_per_tx_by_kind={k: round(v / n, 2) for k, v in sorted(requests.items())}
        if n else None,
        rtt_ms=round(rtt_ms, 2) if rtt_ms else None,
        critical_path=path, critical_path_why=why,
        round_trips_per_version=round(1000 / (versions_per_s * rtt_ms), 2)
        if versions_per_s and rtt_ms else None,
        versions_per_s_limit=round(versions_per_s_limit, 1) if versions_per_s_limit else None,
        members_limit=members_limit,
        limit_tx_per_s=round(limit, 1) if limit else None,
        share=round(tx_per_s / limit, 3) if limit else None,
        skipped_redone=sum(h.skipped for h in fleet.hosts_by_id.values()),
        attempts=sum(r.get("attempts", 0) for r in reports),
        failures=sum(r.get("failures", 0) for r in reports),
        failure_kinds=dict(sum((Counter(r.get("failure_kinds", {})) for r in reports),
                               Counter())),
        lost=check["lost"], duplicated=check["duplicated"],
        exactly_once=check["lost"] == 0 and check["duplicated"] == 0 and not errors,
        verify=check["verify"], verify_problems=check["verify_problems"],
        fleet_records_left=check["fleet_records_left"],
        fleet_round_keys_left=check["fleet_round_keys_left"],
        server_busy=round(server_cpu / seconds, 2) if seconds and server_cpu is not None
        else None,
        writer_errors=errors or None)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def read_back(uri: str, options: dict[str, str], acked: list[tuple[int, int]]
              ) -> dict[str, Any]:
    """Every acknowledged (writer, seq) exactly once; versions the run made and the appends
    in each (one file per append); the history checker's verdict; records left behind."""
    import deltacommit as dc
    from deltacommit.io.logstore import ConditionalPutLogStore, open_log_store
    from deltacommit.ops.verify import verify_table
    from deltacommit.protocol.actions import Add, parse_commit

    table = dc.DeltaTable(uri, storage_options=options)
    data = table.to_arrow(columns=["writer", "seq"])
    seen = Counter(zip(data.column("writer").to_pylist(), data.column("seq").to_pylist(),
                       strict=True))
    ls = open_log_store(uri, options)
    reader = ConditionalPutLogStore(ls.store)
    sizes = []
    for v in range(1, table.version + 1):
        actions = parse_commit(reader.read_commit(v), f"version {v}")
        sizes.append(sum(isinstance(a, Add) for a in actions))
    report = verify_table(uri, storage_options=options, log_store=ls)
    folder = [m.path for m in ls.store.list(FLEET_DIR + "/")]
    left = sum(1 for p in folder if p.endswith(".json"))
    keys_left = sum(1 for p in folder if p.endswith(".round"))
    return {"lost": sum(1 for k in acked if seen[k] == 0),
            "duplicated": sum(c - 1 for c in seen.values() if c > 1),
            "landed": len(seen), "versions": len(sizes),
            "largest_group": max(sizes, default=0), "verify": report.ok,
            "verify_problems": report.problems[:5] or None, "fleet_records_left": left,
            "fleet_round_keys_left": keys_left}


# --------------------------------------------------------------------------- summaries


def _median_runs(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One run per configuration: the one of median tx/s among its rounds, with every
    round's tx/s beside it and the lost and duplicated counts of all rounds added up."""
    by: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in results:
        if r.get("bench") == "fleet" and "error" not in r:
            key = (r["contender"], r["calls"], r["mechanism"], r["hosts"], r["latency_ms"])
            by.setdefault(key, []).append(r)
    out = []
    for runs in by.values():
        ranked = sorted(runs, key=lambda r: r["tx_per_s"])
        median = dict(ranked[(len(ranked) - 1) // 2])
        median.update(rounds_tx_per_s=[r["tx_per_s"] for r in runs],
                      lost=sum(r["lost"] for r in runs),
                      duplicated=sum(r["duplicated"] for r in runs),
                      exactly_once=all(r["exactly_once"] for r in runs))
        out.append(median)
    return out


def compare(results: list[dict[str, Any]], out: list[dict[str, Any]]) -> None:
    """The fleet's tx/s over racing deltacommit's and deltalake's, like calls with like."""
    runs = _median_runs(results)
    for f in [r for r in runs if r["contender"] == FLEET]:
        same = [r for r in runs if r["contender"] != FLEET and r["calls"] == f["calls"]
                and (r["mechanism"], r["hosts"], r["latency_ms"])
                == (f["mechanism"], f["hosts"], f["latency_ms"])]
        line: dict[str, Any] = {
            "bench": "fleet-comparison", "calls": f["calls"], "mechanism": f["mechanism"],
            "hosts": f["hosts"], "latency_ms": f["latency_ms"],
            "rounds": len(f["rounds_tx_per_s"]), "fleet_tx_per_s": f["tx_per_s"],
            "fleet_protocol": f["fleet_protocol"]}
        for r in same:
            name = "racing" if r["contender"] == RACING else "deltalake"
            line[f"{name}_tx_per_s"] = r["tx_per_s"]
            line[f"fleet_over_{name}"] = round(f["tx_per_s"] / r["tx_per_s"], 1) \
                if r["tx_per_s"] else None
        line["every_row_exactly_once"] = all(r["exactly_once"] for r in [f, *same])
        emit(out, **line)


def project(results: list[dict[str, Any]], out: list[dict[str, Any]]) -> None:
    """Commits per second each contender would reach on real S3 and on S3 Express."""
    for r in _median_runs(results):
        n, path = r["transactions"], r["round_trips_per_version"]
        if not n or not path or not r["tx_per_version"]:
            continue
        s3 = {k: v for k, v in r["requests"].items() if not k.startswith("dynamodb.")}
        writes = sum(v for k, v in s3.items()
                     if k.split(" ")[0] in ("PUT", "PUT-if-absent", "COPY", "DELETE",
                                            "DeleteObjects"))
        reads = sum(s3.values()) - writes
        dynamo_writes = sum(v for k, v in r["requests"].items()
                            if k.startswith(("dynamodb.PutItem", "dynamodb.UpdateItem",
                                             "dynamodb.DeleteItem")))
        caps = [S3_WRITES_PER_S / (writes / n) if writes else float("inf"),
                S3_READS_PER_S / (reads / n) if reads else float("inf"),
                DYNAMODB_WRITES_PER_KEY / (dynamo_writes / n) if dynamo_writes else float("inf")]
        rate_cap = min(caps)
        line: dict[str, Any] = {
            "bench": "fleet-projection", "contender": r["contender"], "calls": r["calls"],
            "mechanism": r["mechanism"], "hosts": r["hosts"], "from_latency_ms": r["latency_ms"],
            "round_trips_per_version": path, "critical_path_floor": r["critical_path"],
            "tx_per_version": r["tx_per_version"], "s3_writes_per_tx": round(writes / n, 2),
            "s3_reads_per_tx": round(reads / n, 2),
            "dynamodb_writes_per_tx": round(dynamo_writes / n, 2),
            "request_rate_cap_tx_per_s": round(rate_cap, 1)}
        for name, ms in PROJECTIONS.items():
            by_latency = r["tx_per_version"] * 1000 / (path * ms)
            line[f"{name}_{ms:g}ms_tx_per_s"] = round(min(by_latency, rate_cap), 1)
            line[f"{name}_{ms:g}ms_floor_tx_per_s"] = round(
                min(r["members_limit"] * 1000 / (r["critical_path"] * ms), rate_cap), 1)
        emit(out, **line)


def scaling_table(results: list[dict[str, Any]], out: list[dict[str, Any]]) -> None:
    """The scaling runs as one table: a JSON line per row, and as text on stderr."""
    runs = sorted(_median_runs(results),
                  key=lambda r: (r["mechanism"], r["calls"], r["latency_ms"], r["hosts"],
                                 CONTENDERS.index(r["contender"])))
    header = (f"{'latency':>7} {'hosts':>5} {'contender':<20} {'calls':<12} {'tx/s':>7} "
              f"{'tx/ver':>6} {'p50 ms':>7} {'p99 ms':>7} {'req/tx':>6} {'limit':>7} "
              f"{'share':>5} {'once':>4}")
    print(header, file=sys.stderr)
    for r in runs:
        emit(out, bench="fleet-scaling", **{k: r[k] for k in (
            "mechanism", "latency_ms", "hosts", "contender", "calls", "tx_per_s",
            "tx_per_version", "p50_ms", "p99_ms", "requests_per_tx", "versions_per_s_limit",
            "members_limit", "limit_tx_per_s", "share", "exactly_once")})
        print(f"{r['latency_ms']:>7g} {r['hosts']:>5} {r['contender']:<20} {r['calls']:<12} "
              f"{r['tx_per_s']:>7.1f} {r['tx_per_version'] or 0:>6.2f} {r['p50_ms'] or 0:>7.0f} "
              f"{r['p99_ms'] or 0:>7.0f} {r['requests_per_tx'] or 0:>6.1f} "
              f"{r['limit_tx_per_s'] or 0:>7.1f} {r['share'] or 0:>5.2f} "
              f"{'yes' if r['exactly_once'] else 'NO':>4}", file=sys.stderr)


# --------------------------------------------------------------------------- main


@contextlib.contextmanager
def rig() -> Iterator[Rig]:
    from latency_proxy import LatencyProxy

    from deltacommit.testing import TEST_AWS_ENV, MotoServer, apply_test_aws_environment

    apply_test_aws_environment()
    child_env = {**os.environ, **TEST_AWS_ENV, "AWS_ALLOW_HTTP": "true"}
    os.environ.update(child_env)
    counter = RequestCounter()
    with contextlib.ExitStack() as stack:
        moto = stack.enter_context(MotoServer())
        proxy = stack.enter_context(LatencyProxy(moto.endpoint, 0.0, observe=counter))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dc-fleet-")))
        yield Rig(moto, proxy, counter, tmp, child_env)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=8, help="writer processes (default 8)")
    ap.add_argument("--appends", type=int, default=15, help="appends per host (default 15)")
    ap.add_argument("--latency-ms", type=float, default=15.0,
                    help="ms the proxy adds to every request (default 15)")
    ap.add_argument("--mechanism", choices=("conditional", "dynamodb"), default="conditional")
    ap.add_argument("--kill", type=int, default=0,
                    help="SIGKILL this many writers once half the appends are acknowledged, "
                         "and restart them with the same app ids")
    ap.add_argument("--app-ids", action="store_true",
                    help="every append carries an app id and version (always with --kill)")
    ap.add_argument("--contenders", default="fleet,racing,deltalake",
                    help="any of fleet,racing,deltalake")
    ap.add_argument("--calls", default=f"{BY_URI},table",
                    help="uri (a fresh table object per append), table (one kept)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of every configuration, contenders in a new order each round")
    ap.add_argument("--scaling", action="store_true",
                    help="2, 4, 8, 16 hosts at 0, 15 and 50 ms (--scaling-hosts, "
                         "--scaling-latencies), then the table")
    ap.add_argument("--scaling-hosts", default="2,4,8,16")
    ap.add_argument("--scaling-latencies", default="0,15,50")
    ap.add_argument("--resubmits", type=int, default=200,
                    help="deltalake: resubmissions of a write that gave up, per append")
    ap.add_argument("--trace", action="store_true",
                    help="deltacommit writers trace where each append's time goes "
                         "(bench/fleet_trace.py): a \"fleet-trace\" line per run")
    ap.add_argument("--seed", type=int, default=20261128)
    ap.add_argument("--out", default=str(HERE / "results"))
    # Worker mode (internal).
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--uri", help=argparse.SUPPRESS)
    ap.add_argument("--writer", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--start-seq", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.calls = BY_URI if args.calls == BY_URI else TABLE_OBJECT
        return worker_main(args)

    names = {"fleet": FLEET, "racing": RACING, "deltalake": DELTALAKE}
    contenders = [names[c] for c in args.contenders.split(",") if c]
    calls = [BY_URI if c == BY_URI else TABLE_OBJECT for c in args.calls.split(",") if c]
    app_ids = args.app_ids or args.kill > 0
    if args.scaling:
        grid = [(h, float(ms)) for ms in args.scaling_latencies.split(",")
                for h in [int(x) for x in args.scaling_hosts.split(",")]]
    else:
        grid = [(args.hosts, args.latency_ms)]
    rng = random.Random(args.seed)
    results: list[dict[str, Any]] = []
    import deltalake

    import deltacommit as dc

    with rig() as r:
        emit(results, bench="setup", python=sys.version.split()[0], cpus=os.cpu_count(),
             deltacommit=dc.__version__, deltalake=deltalake.__version__,
             fleet_protocol=fleet_available(), mechanism=args.mechanism,
             moto="single-threaded (deltacommit.testing.MotoServer), through "
                  "bench/latency_proxy.py")
        if FLEET in contenders and not fleet_available():
            emit(results, bench="setup", warning="this checkout has no fleet-wide group commit "
                 "(deltacommit.engine.group.fleet): the fleet table's writers race, and its "
                 "column measures racing deltacommit on a table with the property set")
        for round_ in range(1, args.rounds + 1):
            for hosts, latency_ms in grid:
                order = [(c, k) for c in contenders for k in calls]
                rng.shuffle(order)
                for contender, how in order:
                    try:
                        run_one(r, contender, how, args.mechanism, hosts, args.appends,
                                latency_ms, args.kill, app_ids, args.resubmits, round_, rng,
                                results, args.trace)
                    except Exception as e:
                        emit(results, bench="fleet", contender=contender, calls=how,
                             mechanism=args.mechanism, hosts=hosts, latency_ms=latency_ms,
                             round=round_, error=f"{type(e).__name__}: {e}"[:3000])
    compare(results, results)
    project(results, results)
    if args.scaling:
        scaling_table(results, results)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    name = "fleet-scaling.jsonl" if args.scaling else "fleet.jsonl"
    with open(outdir / name, "w") as f:
        for line in results:
            f.write(json.dumps(line) + "\n")
    ok = all(x.get("exactly_once", True) and "error" not in x for x in results
             if x.get("bench") == "fleet")
    emit(results, bench="done", every_row_exactly_once=ok, jsonl=str(outdir / name))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
