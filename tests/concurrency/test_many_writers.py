"""Many processes writing one local table at once.

- 8 processes on disjoint partitions, 4 appending and 4 overwriting their own partition, round
  after round: none conflicts, and the table equals a serial execution of all their writes.
- 16 processes appending as fast as they can, racing (host turns off): heavy contention, yet
  no writer runs out of attempts (delta-rs gives up after 15), and every append is in the
  table exactly once.  With host turns (the default) the same 16 never lose a claim.
"""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc

from .ops import SCHEMA

ROUNDS = 6
APPENDERS = 4
OVERWRITERS = 4
WRITERS_16 = 16
APPENDS_16 = 15

Journal = list[tuple[int, int, int]]  # (round, version, attempts)


def rows(worker: int, rnd: int, n: int = 2) -> pa.Table:
    ids = [worker * 10_000 + rnd * 10 + k for k in range(n)]
    return pa.table({"p": [f"p{worker}"] * n, "id": ids, "seen": [rnd] * n}, schema=SCHEMA)


def _disjoint_writer(uri: str, worker: int, start: mp.synchronize.Barrier,
                     out: mp.Queue[tuple[int, Journal | str]]) -> None:
    try:
        table = dc.DeltaTable(uri)
        start.wait()
        journal: Journal = []
        for rnd in range(ROUNDS):
            if worker < APPENDERS:
                r = dc.write(table, rows(worker, rnd))
            else:
                r = dc.write(table, rows(worker, rnd), mode="overwrite",
                             predicate=f"p = 'p{worker}'")
            journal.append((rnd, r.version, r.attempts))
        out.put((worker, journal))
    except BaseException as e:
        out.put((worker, f"{type(e).__name__}: {e}"))


def run_processes(target: object, uri: str, n: int) -> dict[int, Journal]:
    # A fork server that has imported deltacommit and pyarrow once starts each writer in
    # milliseconds (spawn would import them 16 times over on two cores), and, unlike forking
    # the test process, never copies a parent's threads.
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["deltacommit", "pyarrow.parquet", __name__])
    start = ctx.Barrier(n)
    out: mp.Queue[tuple[int, Journal | str]] = ctx.Queue()
    procs = [ctx.Process(target=target, args=(uri, w, start, out)) for w in range(n)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    failures = {w: r for w, r in results.items() if isinstance(r, str)}
    assert not failures, failures
    return {w: r for w, r in results.items() if not isinstance(r, str)}


def test_disjoint_partitions_appenders_and_overwriters_all_succeed(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    journals = run_processes(_disjoint_writer, uri, APPENDERS + OVERWRITERS)

    writes = (APPENDERS + OVERWRITERS) * ROUNDS
    versions = Counter(v for j in journals.values() for _, v, _ in j)
    assert sorted(versions) == list(range(1, writes + 1))   # every write its own version
    table = dc.DeltaTable(uri)
    assert table.version == writes

    # The serial execution: appenders keep every round, overwriters only their last.
    expected: Counter[tuple[str, int, int]] = Counter()
    for w in range(APPENDERS + OVERWRITERS):
        for rnd in range(ROUNDS) if w < APPENDERS else [ROUNDS - 1]:
            t = rows(w, rnd)
            expected.update(zip(t.column("p").to_pylist(), t.column("id").to_pylist(),
                                t.column("seen").to_pylist(), strict=True))
    data = table.to_arrow()
    actual = Counter(zip(data.column("p").to_pylist(), data.column("id").to_pylist(),
                         data.column("seen").to_pylist(), strict=True))
    assert actual == expected
    # Each overwrite replaced exactly its own partition's previous files.
    for w in range(APPENDERS, APPENDERS + OVERWRITERS):
        assert len(table.files(partition_filters=[("p", "=", f"p{w}")])) == 1


#: Racing writers: each claims without waiting for the others of the host.
RACING = dc.CommitPolicy(host_turns=False)
#: Writers taking turns, patient enough that no holder is passed by on a loaded machine.
TURNS = dc.CommitPolicy(turn_patience=120.0)


def _appender(uri: str, worker: int, start: mp.synchronize.Barrier,
              out: mp.Queue[tuple[int, Journal | str]]) -> None:
    _append(uri, worker, start, out, RACING)


def _turn_taker(uri: str, worker: int, start: mp.synchronize.Barrier,
                out: mp.Queue[tuple[int, Journal | str]]) -> None:
    _append(uri, worker, start, out, TURNS)


def _append(uri: str, worker: int, start: mp.synchronize.Barrier,
            out: mp.Queue[tuple[int, Journal | str]], policy: dc.CommitPolicy) -> None:
    try:
        table = dc.DeltaTable(uri, policy=policy)
        data = [rows(worker, rnd, 1) for rnd in range(APPENDS_16)]
        start.wait()
        journal = []
        for rnd, batch in enumerate(data):
            r = dc.write(table, batch)
            journal.append((rnd, r.version, r.attempts))
        out.put((worker, journal))
    except BaseException as e:
        out.put((worker, f"{type(e).__name__}: {e}"))


@pytest.mark.parametrize("turns", [False, True], ids=["racing", "turns"])
def test_sixteen_appenders_on_one_table_never_run_out_of_attempts(
        tmp_path: Path, turns: bool) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    journals = run_processes(_turn_taker if turns else _appender, uri, WRITERS_16)

    commits = WRITERS_16 * APPENDS_16
    table = dc.DeltaTable(uri)
    assert table.version == commits
    versions = Counter(v for j in journals.values() for _, v, _ in j)
    assert sorted(versions) == list(range(1, commits + 1))
    data = table.to_arrow()
    assert Counter(data.column("id").to_pylist()) == Counter(
        w * 10_000 + rnd * 10 for w in range(WRITERS_16) for rnd in range(APPENDS_16))
    attempts = [a for j in journals.values() for _, _, a in j]
    if turns:
        # Each writer claimed after the one before it had committed: not one claim was lost.
        assert Counter(attempts) == Counter({1: commits})
    else:
        # The contention was real: many commits lost races and were retried, some many times.
        assert sum(attempts) > commits * 1.2, Counter(attempts)
        assert max(attempts) < dc.CommitPolicy().max_attempts
