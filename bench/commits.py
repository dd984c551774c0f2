"""Many small transactions on one table: deltacommit versus deltalake (delta-rs), side by side.

One run of this script measures, on the same single-threaded moto (``deltacommit.testing``) and
the same local disk:

``processes``
    N writer processes x M appends of one small Parquet file each, on one table, for each
    backend (``local``, ``s3-conditional``: S3 ``If-None-Match``, ``s3-dynamodb``: Spark's
    S3DynamoDBLogStore protocol) and each library: deltacommit, deltalake 1.6.0 (the project
    venv; the last release with the DynamoDB log store) and, for s3-conditional (the mode the
    newest release commits in), the newest deltalake release, installed into
    ``bench/.venvs/deltalake-latest`` on first use.
    Every writer keeps one table object open for all its appends (each library's fastest way
    to append repeatedly).  A deltalake write that fails with "Failed to commit transaction: 15"
    (its retries exhausted) is counted in ``failures`` and submitted again, after refreshing the
    writer's table, until it commits (at most ``--resubmits`` times; a writer that gives up is a
    ``failed_writers``).  deltacommit's writers never give up by themselves.
    ``lost``/``duplicated`` come from reading the table back: every acknowledged append carries
    a unique (writer, seq) and must be there exactly once.  ``server_busy`` is moto's CPU time
    per second of the run (``server_cpu_ms_per_commit`` per commit): near 1, its one thread
    is what limits the run, for every library alike.
``group_commit``
    T threads x M appends in one process on one group-commit table (local, moto S3), through
    ``dc.append`` (coalesced appends: the rows of a group share one file and one version) and
    ``dc.write`` (each append its own file, the commits grouped).
``requests_per_commit``
    Requests one uncontended commit costs on each log store, counted on the wire.

Each measurement is one JSON line on stdout (also written to ``--out``/commits.jsonl); a chart of
throughput against writer count goes to ``--out``/commits.png.  Latencies are of one append call
as its caller sees it: the data file, the commit and every retry.

    .venv/bin/python bench/commits.py                      # everything (about 15 minutes)
    .venv/bin/python bench/commits.py --writers 4 --backends s3-conditional,s3-dynamodb
    .venv/bin/python bench/commits.py --writers 4 --rounds 3   # ratios of medians of 3 rounds
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LATEST_VENV = HERE / ".venvs" / "deltalake-latest"
BACKENDS = ("local", "s3-conditional", "s3-dynamodb")
GIVE_UP = "Failed to commit transaction"


def emit(out: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    print(json.dumps(fields), flush=True)
    out.append(fields)
    return fields


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# --------------------------------------------------------------------------- writer processes
#
# A worker is this script run with --worker: it imports only its own library (the newest
# deltalake lives in a venv without deltacommit), opens the table, prints "ready", waits for
# "go" on stdin, appends, and prints one JSON line with what happened.


def _batch(writer: int, seq: int) -> Any:
    import pyarrow as pa

    return pa.table({"writer": pa.array([writer], pa.int64()), "seq": pa.array([seq], pa.int64()),
                     "payload": pa.array([f"w{writer}-s{seq}"], pa.string())})


def _count_process_requests(store: Any, counts: Counter[str]) -> None:
    """Count every S3 and DynamoDB request this process sends from now on, whichever table
    object sends it: a call by URI opens log stores of its own, but they share the process's
    clients (pooled per endpoint), so the clients are where requests are counted."""
    config = getattr(getattr(store, "inner", store), "config", None)
    if config is None:
        return  # the local file system: no requests

    def count(event_name: str, **_: Any) -> None:
        _, service, operation = event_name.split(".", 2)
        counts[operation if service == "s3" else f"{service}.{operation}"] += 1

    def count_light(service: str, operation: str) -> None:
        counts[operation if service == "s3" else f"{service}.{operation}"] += 1

    for client in (config.s3_client(), config.dynamodb_client()):
        if getattr(client, "light", False):   # deltacommit.io.aws.light: no botocore events
            client.on_request(count_light)
        else:
            client.meta.events.register("before-send", count, unique_id="bench-process-count")


def _worker_deltacommit(uri: str, options: dict[str, str], writer: int, appends: int,
                        resubmits: int, variant: str, socket_dir: str) -> dict[str, Any]:
    import deltacommit as dc

    group: Any = False
    if variant == HOST:
        group = dc.GroupCommitPolicy(processes=True, socket_dir=socket_dir)
    table = dc.DeltaTable(uri, storage_options=options, group_commit=group)
    store = table.log_store.store
    # BY_URI: dc.write(uri, ...) as the README's first example calls it, no object kept.
    target: Any = uri if variant == BY_URI else table
    extra = {"storage_options": options} if variant == BY_URI else {}
    batches = [_batch(writer, s) for s in range(appends)]
    requests: Counter[str] = Counter()
    _count_process_requests(store, requests)
    _ready()
    start = time.monotonic()
    acked, latencies, attempts = [], [], 0
    for seq, data in enumerate(batches):
        t0 = time.perf_counter()
        r = dc.write(target, data, **extra)
        latencies.append(time.perf_counter() - t0)
        attempts += r.attempts
        acked.append(seq)
    end = time.monotonic()
    return {"start": start, "end": end, "acked": acked, "latencies": latencies,
            "attempts": attempts, "calls": appends, "failures": 0, "gave_up": False,
            "requests": requests}


def _worker_deltalake(uri: str, options: dict[str, str], writer: int, appends: int,
                      resubmits: int, variant: str, socket_dir: str) -> dict[str, Any]:
    import deltalake

    by_uri = variant == BY_URI
    table = deltalake.DeltaTable(uri, storage_options=options)
    target: Any = uri if by_uri else table
    extra = {"storage_options": options} if by_uri else {}
    batches = [_batch(writer, s) for s in range(appends)]
    _ready()
    start = time.monotonic()
    acked, latencies, calls, failures, gave_up = [], [], 0, 0, False
    kinds: Counter[str] = Counter()
    for seq, data in enumerate(batches):
        t0 = time.perf_counter()
        for _ in range(resubmits + 1):
            calls += 1
            try:
                deltalake.write_deltalake(target, data, mode="append", **extra)
                break
            except Exception as e:  # deltalake's CommitFailedError / DeltaError
                kind = _failure_kind(str(e))
                if kind is None:
                    raise
                failures += 1
                kinds[kind] += 1
                if not by_uri:
                    table.update_incremental()
        else:
            gave_up = True
            break
        latencies.append(time.perf_counter() - t0)
        acked.append(seq)
    end = time.monotonic()
    return {"start": start, "end": end, "acked": acked, "latencies": latencies,
            "attempts": calls, "calls": calls, "failures": failures, "gave_up": gave_up,
            "failure_kinds": dict(kinds), "requests": {}}


def _failure_kind(message: str) -> str | None:
    """A deltalake write that failed without committing, by kind; None for anything else."""
    if GIVE_UP in message:
        return "Failed to commit transaction (retries exhausted)"
    if "already exists" in message and "version" in message:
        return "version already exists (DeltaError from the DynamoDB log store)"
    return None


def _ready() -> None:
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("no go")


def worker_main(args: argparse.Namespace) -> int:
    work = _worker_deltacommit if args.worker == "deltacommit" else _worker_deltalake
    try:
        result = work(args.uri, json.loads(args.options), args.writer, args.appends, args.resubmits,
                      args.variant, args.socket_dir)
    except BaseException as e:
        result = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    print(json.dumps(result), flush=True)
    return 0


#: deltacommit writers: each process commits for itself, or the processes of the host share
#: one committer (GroupCommitPolicy(processes=True)).
DIRECT, HOST = "table object", "group commit across processes"
#: deltalake writers: write_deltalake(uri, ...) as its documentation and most code call it (the
#: table is loaded by every write), or one DeltaTable object kept for all appends.
BY_URI, TABLE_OBJECT = "uri", "table object"


@dataclass
class Library:
    name: str      # "deltacommit" | "deltalake"
    version: str
    python: str
    variant: str = ""

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}" + (f" ({self.variant})" if self.variant else "")


def run_processes(lib: Library, uri: str, options: Mapping[str, str], writers: int, appends: int,
                  resubmits: int, env: Mapping[str, str], socket_dir: str) -> list[dict[str, Any]]:
    """Start the writers, release them together, collect their reports."""
    procs = []
    for w in range(writers):
        cmd = [lib.python, str(Path(__file__).resolve()), "--worker", lib.name, "--uri", uri,
               "--options", json.dumps(dict(options)), "--writer", str(w), "--appends", str(appends),
               "--resubmits", str(resubmits), "--variant", lib.variant,
               "--socket-dir", socket_dir]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=dict(env)))
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline().strip()
            if line != "ready":
                _, err = p.communicate(timeout=30)
                raise RuntimeError(f"{lib.label} writer did not start: {line!r}\n{err[-3000:]}")
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        reports = []
        for p in procs:
            out, err = p.communicate(timeout=3600)
            lines = [x for x in out.splitlines() if x.startswith("{")]
            if not lines:
                raise RuntimeError(f"{lib.label} writer printed no report; stderr:\n{err[-3000:]}")
            report = json.loads(lines[-1])
            if "error" in report:
                raise RuntimeError(f"{lib.label} writer failed: {report['error']}\n"
                                   f"{report.get('traceback', '')}")
            reports.append(report)
        return reports
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


# --------------------------------------------------------------------------- the environment


@dataclass
class Env:
    moto: Any
    env: dict[str, str]
    tmp: Path
    #: Where the libraries under test reach moto: moto itself, or a ``LatencyProxy`` before it
    #: (``--latency-ms``).  Setting up buckets and tables goes to moto directly.
    endpoint: str = ""

    def __post_init__(self) -> None:
        self.endpoint = self.endpoint or self.moto.endpoint

    def s3_options(self) -> dict[str, str]:
        from deltacommit.testing import s3_storage_options

        return s3_storage_options(self.endpoint)

    def fresh_location(self, backend: str, name: str) -> tuple[str, dict[str, str]]:
        """A new, empty table location for a backend, and the options that reach it."""
        from deltacommit.testing.locations import new_s3_location

        if backend == "local":
            path = Path(tempfile.mkdtemp(dir=self.tmp, prefix=f"{name}-"))
            return str(path / "table"), {}
        # A fresh moto for every run: the same single server, emptied, so no run pays for the
        # objects of the runs before it.
        self.moto.reset()
        bucket_uri, options = new_s3_location(self.moto.endpoint, "bench",
                                              dynamodb=backend == "s3-dynamodb",
                                              client_endpoint=self.endpoint)
        return f"{bucket_uri}/{name}", options


SCHEMA_FIELDS = (("writer", "int64"), ("seq", "int64"), ("payload", "string"))


def create_table(lib: Library, uri: str, options: dict[str, str]) -> None:
    import pyarrow as pa

    schema = pa.schema([(n, getattr(pa, t)()) for n, t in SCHEMA_FIELDS])
    if lib.name == "deltacommit":
        import deltacommit as dc

        dc.DeltaTable.create(uri, schema, storage_options=options)
    else:
        # The project venv's deltalake creates every deltalake table (1.6.0 tables are what
        # any later release appends to).
        import deltalake

        deltalake.DeltaTable.create(uri, schema, storage_options=options)


def read_back(uri: str, options: dict[str, str]) -> tuple[Counter[tuple[int, int]], int]:
    """(writer, seq) of every row in the table, and its version."""
    import deltacommit as dc

    table = dc.DeltaTable(uri, storage_options=options)
    data = table.to_arrow(columns=["writer", "seq"])
    return Counter(zip(data.column("writer").to_pylist(), data.column("seq").to_pylist(),
                       strict=True)), table.version


def ensure_latest_deltalake(reinstall: bool) -> Library | None:
    """The newest deltalake from PyPI in its own venv (created on first use)."""
    python = LATEST_VENV / "bin" / "python"
    if reinstall or not python.exists():
        LATEST_VENV.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(LATEST_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
                       check=True)
        done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "deltalake",
                               "pyarrow"], check=False)
        if done.returncode != 0:
            print(json.dumps({"bench": "setup", "warning": "pip install deltalake failed; the "
                              "newest release is not measured"}), flush=True)
            return None
    version = subprocess.run([str(python), "-c", "import deltalake; print(deltalake.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    return Library("deltalake", version, str(python))


# --------------------------------------------------------------------------- process runs


def bench_processes(env: Env, lib: Library, backend: str, writers: int, appends: int,
                    resubmits: int, out: list[dict[str, Any]], round_: int = 1) -> dict[str, Any]:
    uri, options = env.fresh_location(backend, f"{lib.name}-{writers}")
    create_table(lib, uri, options)
    socket_dir = tempfile.mkdtemp(dir=env.tmp, prefix="s")
    server_before = env.moto.cpu_seconds() if backend != "local" else None
    reports = run_processes(lib, uri, options, writers, appends, resubmits, env.env, socket_dir)
    server_after = env.moto.cpu_seconds() if server_before is not None else None
    seen, version = read_back(uri, options)
    acked = [(w, s) for w, r in enumerate(reports) for s in r["acked"]]
    lost = sum(1 for k in acked if seen[k] == 0)
    duplicated = sum(n - 1 for n in seen.values() if n > 1)
    seconds = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    latencies = [x for r in reports for x in r["latencies"]]
    requests: Counter[str] = Counter()
    for r in reports:
        requests.update(r["requests"])
    server_cpu = None if server_before is None or server_after is None \
        else server_after - server_before
    return emit(
        out, bench="commits", mode="processes", backend=backend, library=lib.label,
        writers=writers, round=round_, appends_per_writer=appends, commits=len(acked),
        seconds=round(seconds, 3), commits_per_s=round(len(acked) / seconds, 2),
        p50_ms=round(percentile(latencies, 0.5) * 1000, 1),
        p99_ms=round(percentile(latencies, 0.99) * 1000, 1),
        attempts=sum(r["attempts"] for r in reports),
        failures=sum(r["failures"] for r in reports),
        failure_kinds=dict(sum((Counter(r.get("failure_kinds", {})) for r in reports), Counter())),
        failed_writers=sum(1 for r in reports if r["gave_up"]),
        lost=lost, duplicated=duplicated, versions=version,
        requests=dict(requests) or None,
        requests_per_commit=round(sum(requests.values()) / len(acked), 2) if requests else None,
        # moto's CPU while the writers ran (their opening of the table included), per commit
        # and per second of the run: near 1, the one server thread is what limits the run.
        server_cpu_ms_per_commit=None if server_cpu is None
        else round(server_cpu * 1000 / len(acked), 2),
        server_busy=None if server_cpu is None else round(server_cpu / seconds, 2),
        retry_policy=("dc.write retries internally (CommitPolicy: 10000 attempts, jittered "
                      "backoff)") if lib.name == "deltacommit" else
        (f"a write_deltalake call failing with '{GIVE_UP}: 15' (or 'version N already exists') "
         f"wrote nothing to the log: it is counted in failures and resubmitted (table object "
         f"refreshed first), at most {resubmits} times per append; lost/duplicated verify it"))


# --------------------------------------------------------------------------- group commit runs


def bench_group_commit(env: Env, backend: str, api: str, threads: int, appends: int,
                       out: list[dict[str, Any]]) -> dict[str, Any]:
    import deltacommit as dc

    uri, options = env.fresh_location(backend, f"group-{api}")
    lib = Library("deltacommit", dc.__version__, sys.executable, DIRECT)
    create_table(lib, uri, options)
    table = dc.DeltaTable(uri, storage_options=options, group_commit=True)
    store = table.log_store.store
    reset = getattr(store, "reset_requests", None)
    if reset is not None:
        reset()
    write: Callable[..., Any] = dc.append if api == "dc.append" else dc.write
    barrier = threading.Barrier(threads + 1)
    latencies: list[float] = []
    acked: list[tuple[int, int]] = []
    errors: list[str] = []
    lock = threading.Lock()

    def run(w: int) -> None:
        batches = [_batch(w, s) for s in range(appends)]
        barrier.wait()
        try:
            for s, data in enumerate(batches):
                t0 = time.perf_counter()
                write(table, data)
                dt = time.perf_counter() - t0
                with lock:
                    latencies.append(dt)
                    acked.append((w, s))
        except Exception as e:
            with lock:
                errors.append(f"{type(e).__name__}: {e}")

    pool = [threading.Thread(target=run, args=(w,)) for w in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in pool:
        t.join()
    seconds = time.perf_counter() - t0
    seen, version = read_back(uri, options)
    table.group_committer.close()  # type: ignore[union-attr]
    stats = table.group_committer.stats  # type: ignore[union-attr]
    requests = dict(getattr(store, "requests", {})) or None
    return emit(
        out, bench="group_commit", backend=backend, api=api, threads=threads,
        appends_per_thread=appends, transactions=len(acked), errors=len(errors),
        first_error=errors[0] if errors else None,
        seconds=round(seconds, 3), transactions_per_s=round(len(acked) / seconds, 1),
        p50_ms=round(percentile(latencies, 0.5) * 1000, 1),
        p99_ms=round(percentile(latencies, 0.99) * 1000, 1),
        versions=stats.versions, table_version=version,
        mean_group=round(stats.transactions / max(1, stats.versions), 1),
        largest_group=stats.largest_group,
        lost=sum(1 for k in acked if seen[k] == 0),
        duplicated=sum(n - 1 for n in seen.values() if n > 1),
        requests=requests,
        requests_per_transaction=(round(sum(requests.values()) / len(acked), 3)
                                  if requests and acked else None))


# --------------------------------------------------------------------------- requests per commit


@contextlib.contextmanager
def _counted(table: Any) -> Iterator[Counter[str]]:
    """S3 requests by the store's counter, DynamoDB requests as boto3 sends them."""
    store = table.log_store.store
    inner = getattr(store, "inner", store)
    counts: Counter[str] = Counter()

    def count(event_name: str, **_: Any) -> None:
        _, service, operation = event_name.split(".", 2)
        counts[f"{service}.{operation}"] += 1

    def count_light(service: str, operation: str) -> None:
        counts[f"{service}.{operation}"] += 1

    dynamodb = inner.config.dynamodb_client()
    light = getattr(dynamodb, "light", False)   # deltacommit.io.aws.light: no botocore events
    before = Counter(inner.requests)
    if light:
        dynamodb.on_request(count_light)
    else:
        dynamodb.meta.events.register("before-send", count, unique_id="bench-request-count")
    try:
        yield counts
    finally:
        if light:
            dynamodb.off_request(count_light)
        else:
            dynamodb.meta.events.unregister("before-send", unique_id="bench-request-count")
        counts.update({f"s3.{k}": n for k, n in (Counter(inner.requests) - before).items()})


@contextlib.contextmanager
def _counted_fs() -> Iterator[Counter[str]]:
    """File system calls the local store makes (it has no requests)."""
    import deltacommit.io.storage.local as local

    counts: Counter[str] = Counter()
    real = local.os

    class CountingOs:
        def __getattr__(self, name: str) -> Any:
            attr = getattr(real, name)
            if name in ("open", "write", "fsync", "close", "link", "unlink", "replace", "stat",
                        "rename", "mkdir", "scandir"):
                def counted(*a: Any, **k: Any) -> Any:
                    counts[name] += 1
                    return attr(*a, **k)
                return counted
            return attr

    local.os = CountingOs()  # type: ignore[assignment]
    try:
        yield counts
    finally:
        local.os = real


MINIMUM = {
    "local": (None, "no requests; an atomic durable create is a temp file written and fsynced, "
                    "a link(2) to N.json (fails if it exists) and an fsync of the directory"),
    "conditional": (1, "one PutObject with If-None-Match: * both decides the version and writes it"),
    "dynamodb": (4, "the protocol's four steps: the temp file must exist before the entry "
                    "(repairers copy it), the conditional PutItem is the decision, N.json must "
                    "be created, and the entry marked complete; the pre-checks (HEAD N, GetItem "
                    "and HEAD N-1) are skipped once this process knows their answers"),
    "dynamo-commit": (3, "object_store's protocol: HEAD N.json (a lease removed by TTL must not "
                         "hide an existing file), the lease PutItem, the PutObject under it"),
}


def bench_requests(env: Env, out: list[dict[str, Any]]) -> None:
    import boto3
    import pyarrow as pa

    import deltacommit as dc
    from deltacommit.io.datafiles import write_data_files
    from deltacommit.io.logstore.dynamo_commit.leases import create_lease_table
    from deltacommit.testing import unique_name

    schema = pa.schema([(n, getattr(pa, t)()) for n, t in SCHEMA_FIELDS])

    def one_commit(table: Any, counter: Callable[[], Any]) -> dict[str, int]:
        dc.write(table, _batch(0, 0))   # this process knows the table from now on
        adds = write_data_files(table.log_store.store, _batch(0, 1), [], clock=table.clock,
                                random=table.random)
        txn = table.transaction()
        txn.add(adds)
        with counter() as counts:
            txn.commit()
        return dict(counts)

    stores: list[tuple[str, str, dict[str, str]]] = []
    uri, options = env.fresh_location("local", "requests")
    stores.append(("local", uri, options))
    for name in ("conditional", "dynamodb", "dynamo-commit"):
        backend = "s3-dynamodb" if name == "dynamodb" else "s3-conditional"
        uri, options = env.fresh_location(backend, f"requests-{name}")
        if name == "dynamo-commit":
            lease = unique_name("leases")
            create_lease_table(boto3.client("dynamodb", endpoint_url=env.moto.endpoint,
                                            region_name="us-east-1"), lease)
            options.update({"conditional_put": f"dynamo:{lease}",
                            "DELTACOMMIT_S3_CONDITIONAL_WRITES": "false"})
        dc.DeltaTable.create(uri, schema, storage_options=options)
        table = dc.DeltaTable(uri, storage_options=options)
        counts = one_commit(table, lambda t=table: _counted(t))
        minimum, why = MINIMUM[name]
        emit(out, bench="requests_per_commit", log_store=name, requests=counts,
             total=sum(counts.values()), protocol_minimum=minimum, why=why)
        stores.append((name, uri, options))
    _, uri, options = stores[0]
    dc.DeltaTable.create(uri, schema, storage_options=options)
    table = dc.DeltaTable(uri, storage_options=options)
    counts = one_commit(table, _counted_fs)
    emit(out, bench="requests_per_commit", log_store="local", requests=None, total=None,
         file_system_calls=counts, protocol_minimum=None, why=MINIMUM["local"][1])


# --------------------------------------------------------------------------- the chart


def chart(results: list[dict[str, Any]], path: Path) -> None:
    """Throughput against writer count, one panel per backend, and the group commit runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = medians(results)
    groups = [r for r in results if r.get("bench") == "group_commit"]
    backends = [b for b in BACKENDS if any(r["backend"] == b for r in runs)]
    libraries = sorted({r["library"] for r in runs}, key=lambda x: (not x.startswith("deltacommit"), x))
    palette = ["tab:blue", "tab:cyan", "tab:red", "tab:orange", "tab:purple", "tab:brown",
               "tab:olive", "tab:gray"]
    colors = {lib: palette[i % len(palette)] for i, lib in enumerate(libraries)}
    fig, grid = plt.subplots(2, 2, figsize=(13, 10), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[len(backends) + (1 if groups else 0):]:
        ax.set_visible(False)
    for ax, backend in zip(axes, backends, strict=False):
        for lib in libraries:
            pts = sorted((r["writers"], r["commits_per_s"]) for r in runs
                         if r["backend"] == backend and r["library"] == lib)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=colors[lib],
                        linestyle="-" if lib.startswith("deltacommit") else "--", label=lib)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(backend)
        ax.set_xlabel("writer processes")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_ylabel("commits per second (log)")
    if groups:
        ax = axes[len(backends)]
        labels = [f"{g['backend']}\n{g['api']}" for g in groups]
        ax.bar(labels, [g["transactions_per_s"] for g in groups], color="tab:blue")
        for i, g in enumerate(groups):
            ax.text(i, g["transactions_per_s"], f"{g['transactions_per_s']:.0f}/s\n"
                    f"{g['mean_group']:.0f} per version", ha="center", va="bottom", fontsize=8)
        ax.set_title(f"group commit, one process: {groups[0]['threads']} threads x "
                     f"{groups[0]['appends_per_thread']} appends")
        ax.set_ylabel("transactions per second")
        ax.set_ylim(0, 1.15 * max(g["transactions_per_s"] for g in groups))
        ax.tick_params(axis="x", labelsize=8)
    seen: dict[str, Any] = {}
    for ax in axes[:len(backends)]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=2, fontsize=9)
    fig.suptitle("Many small appends to one table (each append one Parquet file; "
                 "S3 = single-threaded moto)")
    fig.tight_layout(rect=(0, 0.09, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- main


def _kind(library: str) -> str:
    """How a run calls its library: per URI, with a kept table object, or group commit."""
    for variant in (BY_URI, HOST, TABLE_OBJECT):
        if library.endswith(f"({variant})"):
            return variant
    return TABLE_OBJECT


def medians(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One run per backend, writer count and library: the one of median throughput among its
    rounds (the lower middle one of an even number), with every round's commits/s beside it
    (``rounds_commits_per_s``) and the lost, duplicated and failed counts of all rounds added
    up, so that no round's loss is hidden."""
    by: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in results:
        if r.get("bench") == "commits":
            by.setdefault((r["backend"], r["writers"], r["library"]), []).append(r)
    out = []
    for runs in by.values():
        ranked = sorted(runs, key=lambda r: r["commits_per_s"])
        median = dict(ranked[(len(ranked) - 1) // 2])
        median.update(rounds_commits_per_s=[r["commits_per_s"] for r in runs],
                      **{k: sum(r[k] for r in runs)
                         for k in ("lost", "duplicated", "failures", "failed_writers")})
        out.append(median)
    return out


def compare(results: list[dict[str, Any]], out: list[dict[str, Any]]) -> None:
    """deltacommit's commits/s over each deltalake's, per backend and writer count, like
    with like: per-URI calls against per-URI calls, kept table objects against kept table
    objects (group commit, which has no deltalake counterpart, against both).  With several
    rounds, each side's median over them (``medians``): one slow round, of either library, on
    a shared machine moves the ratio no more than it moves the median."""
    runs = medians(results)
    for r in runs:
        if not r["library"].startswith("deltacommit"):
            continue
        for other in runs:
            kinds = (_kind(r["library"]), _kind(other["library"]))
            alike = kinds[0] == kinds[1] or kinds[0] == HOST
            if (other["backend"], other["writers"]) == (r["backend"], r["writers"]) \
                    and other["library"].startswith("deltalake") and alike:
                emit(out, bench="comparison", backend=r["backend"], writers=r["writers"],
                     calls=f"{kinds[0]} vs {kinds[1]}", library=r["library"],
                     appends_per_writer=r["appends_per_writer"], versus=other["library"],
                     rounds=len(r["rounds_commits_per_s"]),
                     deltacommit_commits_per_s=r["commits_per_s"],
                     deltalake_commits_per_s=other["commits_per_s"],
                     deltacommit_rounds=r["rounds_commits_per_s"],
                     deltalake_rounds=other["rounds_commits_per_s"],
                     ratio=round(r["commits_per_s"] / other["commits_per_s"], 1),
                     deltacommit_failed_writers=r["failed_writers"], deltacommit_lost=r["lost"],
                     deltalake_failures=other["failures"], deltalake_lost=other["lost"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writers", default="1,2,4,8", help="writer process counts (default 1,2,4,8)")
    ap.add_argument("--appends", type=int, default=25, help="appends per writer process")
    ap.add_argument("--rounds", type=int, default=1,
                    help="processes: runs of every configuration, in turn; ratios of medians")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--libraries", default="deltacommit,deltalake-1.6.0,deltalake-latest")
    ap.add_argument("--threads", type=int, default=32, help="group commit: threads")
    ap.add_argument("--thread-appends", type=int, default=50, help="group commit: appends each")
    ap.add_argument("--resubmits", type=int, default=200,
                    help="deltalake: resubmissions of a write that gave up, per append")
    ap.add_argument("--skip", default="", help="sections to skip: processes,group,requests")
    ap.add_argument("--reinstall-latest", action="store_true",
                    help="recreate bench/.venvs/deltalake-latest")
    ap.add_argument("--latency-ms", type=float, default=0.0,
                    help="answer every S3 and DynamoDB request this much later, through a proxy "
                         "before moto (bench/latency_proxy.py), as S3's round trip would")
    ap.add_argument("--out", default=str(HERE / "results"))
    # Worker mode (internal).
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--uri", help=argparse.SUPPRESS)
    ap.add_argument("--options", help=argparse.SUPPRESS)
    ap.add_argument("--writer", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--variant", default="", help=argparse.SUPPRESS)
    ap.add_argument("--socket-dir", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker_main(args)

    import deltacommit as dc
    from deltacommit.testing import TEST_AWS_ENV, MotoServer, apply_test_aws_environment

    apply_test_aws_environment()
    child_env = dict(os.environ)
    child_env.update(TEST_AWS_ENV)
    # deltalake does not consult AWS_ALLOW_HTTP from storage options in every release; setting
    # it in the environment as well keeps every library on the local endpoint.
    child_env["AWS_ALLOW_HTTP"] = "true"
    skip = set(filter(None, args.skip.split(",")))
    backends = [b for b in args.backends.split(",") if b]
    writer_counts = [int(x) for x in args.writers.split(",") if x]
    wanted = set(args.libraries.split(","))
    import deltalake

    libraries: list[Library] = []
    if "deltacommit" in wanted:
        libraries += [Library("deltacommit", dc.__version__, sys.executable, v)
                      for v in (BY_URI, DIRECT, HOST)]
    if "deltalake-1.6.0" in wanted:
        libraries += [Library("deltalake", deltalake.__version__, sys.executable, v)
                      for v in (BY_URI, TABLE_OBJECT)]
    latest = ensure_latest_deltalake(args.reinstall_latest) \
        if "deltalake-latest" in wanted and "processes" not in skip else None
    results: list[dict[str, Any]] = []
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        moto = stack.enter_context(MotoServer())
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="dc-bench-"))
        endpoint = ""
        if args.latency_ms > 0:
            from latency_proxy import LatencyProxy

            endpoint = stack.enter_context(
                LatencyProxy(moto.endpoint, args.latency_ms / 1000)).endpoint
        env = Env(moto, child_env, Path(tmp), endpoint)
        emit(results, bench="setup", python=sys.version.split()[0], cpus=os.cpu_count(),
             deltacommit=dc.__version__, deltalake_project=deltalake.__version__,
             deltalake_latest=latest.version if latest else None,
             moto="single-threaded (deltacommit.testing.MotoServer)",
             latency_ms=args.latency_ms)
        if "requests" not in skip:
            bench_requests(env, results)
        if "processes" not in skip:
            # Round after round of every configuration, so that a slow spell of a shared
            # machine falls on every library alike rather than on one library's runs.
            for round_ in range(1, args.rounds + 1):
                for writers in writer_counts:
                    for backend in backends:
                        libs = list(libraries)
                        if latest is not None and backend == "s3-conditional" \
                                and latest.version != deltalake.__version__:
                            libs += [Library(latest.name, latest.version, latest.python, v)
                                     for v in (BY_URI, TABLE_OBJECT)]
                        for lib in libs:
                            try:
                                bench_processes(env, lib, backend, writers, args.appends,
                                                args.resubmits, results, round_)
                            except Exception as e:
                                emit(results, bench="commits", backend=backend,
                                     library=lib.label, writers=writers, round=round_,
                                     error=f"{type(e).__name__}: {e}"[:2000])
            compare([r for r in results if "error" not in r], results)
        if "group" not in skip:
            for backend in [b for b in ("local", "s3-conditional") if b in backends]:
                for api in ("dc.append", "dc.write"):
                    bench_group_commit(env, backend, api, args.threads, args.thread_appends,
                                       results)
    with open(outdir / "commits.jsonl", "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    chart([r for r in results if "error" not in r], outdir / "commits.png")
    print(json.dumps({"bench": "done", "jsonl": str(outdir / "commits.jsonl"),
                      "chart": str(outdir / "commits.png")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
