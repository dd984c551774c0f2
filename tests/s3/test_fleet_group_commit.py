"""Fleet-wide group commit on S3 (single-threaded moto), for both mechanisms: conditional put,
and Spark's S3DynamoDBLogStore protocol (on moto and on dynalite).

Processes stand for hosts: each has its own turn folder, so host turns never order them and
only the fleet's rounds do.  Every test counts: every acknowledged batch is in the table
exactly once, in the version it was acknowledged with, and what was published is gone."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import deltacommit as dc
from deltacommit.engine.commit.commit_info import committed_txn_ids
from deltacommit.engine.group.fleet import records
from deltacommit.errors import ObjectNotFoundError
from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore
from deltacommit.protocol.fleet.record import FLEET_DIR
from deltacommit.protocol.log.names import commit_path
from deltacommit.testing import Dynalite, MotoServer, S3Bucket

from ..fleet.helpers import (
    FLEET,
    SCHEMA,
    fleet_writer,
    killed_after_publishing,
    publish_only,
    rows,
    staged_append,
    winner_interrupted,
)
from .helpers import DynamoSetup, new_log_table

WRITERS = 3
APPENDS = 4


@pytest.fixture(params=["conditional", "dynamodb-moto", "dynamodb-dynalite"])
def where(request: pytest.FixtureRequest, s3_bucket: S3Bucket, moto_server: MotoServer
          ) -> tuple[str, dict[str, str]]:
    """A table location and its options, per mechanism (DynamoDB on moto and dynalite)."""
    if request.param == "conditional":
        return f"{s3_bucket.uri}/t", dict(s3_bucket.storage_options)
    if request.param == "dynamodb-moto":
        endpoint = moto_server.endpoint
    else:
        server: Dynalite = request.getfixturevalue("dynalite_server")
        endpoint = server.endpoint
    setup = DynamoSetup(s3_bucket, request.param, endpoint, new_log_table(endpoint))
    return setup.uri(), setup.options


def _create(uri: str, options: dict[str, str]) -> dc.DeltaTable:
    return dc.DeltaTable.create(uri, SCHEMA, configuration=FLEET, storage_options=options)


def _fleet_listing(table: dc.DeltaTable) -> list[str]:
    """What the table's fleet folder holds, once the deletions started are done."""
    assert records.settle()
    return [m.path for m in table.store.list(f"{FLEET_DIR}/")]


def _run_hosts(uri: str, options: dict[str, str], writers: int, appends: int
               ) -> dict[int, Any]:
    ctx = mp.get_context("forkserver")
    start = ctx.Event()
    out = ctx.Queue()
    procs = [ctx.Process(target=fleet_writer, args=(uri, options, w, appends,
                                                    tempfile.mkdtemp(), start, out))
             for w in range(writers)]
    for p in procs:
        p.start()
    start.set()
    results = dict(out.get(timeout=240) for _ in procs)
    for p in procs:
        p.join(60)
    failed = {w: r for w, r in results.items() if isinstance(r, str)}
    assert not failed, failed
    return results


def test_racing_hosts_land_every_acknowledged_append_exactly_once(
        where: tuple[str, dict[str, str]]) -> None:
    uri, options = where
    _create(uri, options)
    results = _run_hosts(uri, options, WRITERS, APPENDS)
    table = dc.DeltaTable(uri, storage_options=options)
    data = table.to_arrow().to_pylist()
    counts = Counter((r["writer"], r["batch"]) for r in data)
    expected = {(w, b) for w in range(WRITERS) for b in range(APPENDS)}
    assert set(counts) == expected and set(counts.values()) == {1}
    carried = 0
    for w, acked in results.items():
        for b, version, txn_id in acked:
            [commit] = table.log.known_commits(version, version)
            ids = committed_txn_ids(commit.commit_info)
            assert txn_id in ids, (w, b, version)
            carried += 1
    assert carried == WRITERS * APPENDS
    # Every transaction appears in exactly one version.
    seen = Counter(t for c in table.log.known_commits(1, table.version)
                   for t in committed_txn_ids(c.commit_info))
    assert all(n == 1 for n in seen.values())
    assert not [p for p in _fleet_listing(table) if p.endswith(".json")]


def test_writer_killed_after_publishing_lands_at_most_once_and_its_retry_finds_it(
        where: tuple[str, dict[str, str]]) -> None:
    uri, options = where
    _create(uri, options)
    ctx = mp.get_context("forkserver")
    p = ctx.Process(target=killed_after_publishing, args=(uri, options, tempfile.mkdtemp()))
    p.start()
    p.join(120)
    assert p.exitcode == -9
    table = dc.DeltaTable(uri, storage_options=options)
    assert [m for m in _fleet_listing(table) if m.endswith(".json")], "nothing was published"
    # Another host's write commits the orphan with its own (a round's winner includes it).
    dc.write(uri, rows(1, 0), storage_options=options)
    # The retry (same app id and version) finds the outcome: already written.
    again = dc.write(uri, rows(99, 0), storage_options=options, app_id="w99", app_version=0)
    assert again.skipped
    data = dc.DeltaTable(uri, storage_options=options).to_arrow().to_pylist()
    assert Counter((r["writer"], r["batch"]) for r in data) == {(99, 0): 1, (1, 0): 1}
    assert not [m for m in _fleet_listing(table) if m.endswith(".json")]


def test_deltalake_reads_the_fleet_table_and_commits_beside_it(
        where: tuple[str, dict[str, str]]) -> None:
    deltalake = pytest.importorskip("deltalake")
    uri, options = where
    _create(uri, options)
    _run_hosts(uri, options, 2, 3)
    # deltalake's commit is just a winner to the fleet.
    deltalake.write_deltalake(uri, rows(7, 7), mode="append", storage_options=options)
    dc.write(uri, rows(8, 8), storage_options=options)
    table = dc.DeltaTable(uri, storage_options=options)
    table.checkpoint()
    theirs = deltalake.DeltaTable(uri, storage_options=options).to_pyarrow_table().to_pylist()
    ours = table.to_arrow().to_pylist()
    key = Counter((r["writer"], r["batch"]) for r in theirs)
    assert key == Counter((r["writer"], r["batch"]) for r in ours)
    assert set(key.values()) == {1} and len(key) == 2 * 3 + 2


@pytest.mark.parametrize("point", ["kill-round", "kill-landed"])
def test_a_round_winner_killed_at_any_step_loses_nothing_and_lands_nothing_twice(
        where: tuple[str, dict[str, str]], point: str) -> None:
    _interrupted_winner(*where, point)


def test_a_stopped_round_winner_delays_the_others_by_the_patience_only(
        s3_bucket: S3Bucket) -> None:
    _interrupted_winner(f"{s3_bucket.uri}/t", dict(s3_bucket.storage_options), "stop-round")


def _interrupted_winner(uri: str, options: dict[str, str], point: str) -> None:
    """Two published transactions; a writer that wins its round is killed or stopped at
    ``point`` (``fleet.helpers.winner_interrupted``); the owners carry on, the dead writer's
    retry finds its outcome, and every transaction is in the table once."""
    _create(uri, options)

    def table() -> dc.DeltaTable:
        return dc.DeltaTable(uri, storage_options=options,
                             policy=dc.CommitPolicy(turn_patience=0.5))

    owners = [publish_only(table(), staged_append(table(), rows(w, 0))) for w in (1, 2)]
    ctx = mp.get_context("forkserver")
    won = ctx.Event()
    p = ctx.Process(target=winner_interrupted,
                    args=(uri, options, tempfile.mkdtemp(), point, won))
    p.start()
    try:
        assert won.wait(120), "the writer never won its round"
        if point != "stop-round":
            p.join(60)
            assert p.exitcode == -9
        # The owners carry on while the winner is dead or stopped (the patience, once).
        for o in owners:
            o.run()
        if point == "stop-round":
            assert p.is_alive()
    finally:
        if point == "stop-round":
            os.kill(p.pid, signal.SIGCONT)
        p.join(60)
    if point == "stop-round":
        assert p.exitcode == 0
    again = dc.write(uri, rows(98, 0), storage_options=options, app_id="w98", app_version=0)
    assert again.skipped
    dc.write(uri, rows(3, 0), storage_options=options)  # a round that cleans up
    final = dc.DeltaTable(uri, storage_options=options)
    data = final.to_arrow().to_pylist()
    assert Counter((r["writer"], r["batch"]) for r in data) == {
        (1, 0): 1, (2, 0): 1, (98, 0): 1, (3, 0): 1}
    seen = Counter(t for c in final.log.known_commits(1, final.version)
                   for t in committed_txn_ids(c.commit_info))
    assert all(n == 1 for n in seen.values())
    assert {o.staged.txn_id for o in owners} <= set(seen)
    assert not [m for m in _fleet_listing(final) if m.endswith(".json")]


def _opener(uri: str, options: dict[str, str], patience: float
            ) -> Callable[..., dc.DeltaTable]:
    """Opens the table with ``patience`` as every writer's turn patience."""
    def table(**kw: Any) -> dc.DeltaTable:
        return dc.DeltaTable(uri, storage_options=options,
                             policy=dc.CommitPolicy(turn_patience=patience), **kw)
    return table


def test_a_dynamodb_waiter_leaves_the_version_its_committer_is_copying_to_it(
        dynamo: DynamoSetup) -> None:
    """A waiter whose round's committer has claimed the version (its entry written) but not
    yet copied it to ``V.json`` looks at ``V.json`` only: it neither reads the entry nor
    repairs it (which would fail the committer's own copy and completion, a request each),
    and learns its outcome from ``V.json`` once the committer wrote it."""
    uri, options = dynamo.uri(), dynamo.options
    _create(uri, options)

    table = _opener(uri, options, patience=60.0)

    owner = publish_only(table(), staged_append(table(), rows(1, 0)))
    claimed, release = threading.Event(), threading.Event()

    def hold(step: str, version: int) -> None:
        if step == "after_put_entry":
            claimed.set()
            assert release.wait(120)

    committed: list[Any] = []
    committer = threading.Thread(target=lambda: committed.append(dc.write(
        table(log_store=DynamoDBLogStore.open(uri, options, hook=hold)), rows(2, 0))))
    committer.start()
    try:
        assert claimed.wait(120), "the committer never claimed version 1"
        ls = owner.log.log_store
        assert isinstance(ls, DynamoDBLogStore)
        looks = _count_misses(ls.store, commit_path(1))
        before = dict(ls.requests)
        result: list[Any] = []

        def wait() -> None:
            try:
                result.append(owner.run())
            finally:
                looks.finished()

        waiter = threading.Thread(target=wait)
        waiter.start()
        # Three looks that found nothing, or the owner done (had it repaired the version).
        assert looks.wait(3, 120), "the owner never looked for version 1"
        entry = dynamo.entries(ls.table_path)[1]
        assert not entry.complete and ls.store.exists(entry.temp_key)
        assert not ls.store.exists(commit_path(1))
        # The round's key it lost, and no GetItem, nor a repair's UpdateItem.
        assert _new(ls.requests, before) == {"PutItem": 1}
    finally:
        release.set()
        committer.join(120)
    waiter.join(120)
    assert committed[0].version == 1 and result[0][0].version == 1
    assert result[0][0].txn_id == owner.staged.txn_id and result[0][0].group_size == 2
    assert [(e.version, e.complete) for e in dynamo.entries(ls.table_path)] == \
        [(0, True), (1, True)]
    assert _new(ls.requests, before) == {"PutItem": 1}
    assert Counter((r["writer"], r["batch"]) for r in table().to_arrow().to_pylist()) == {
        (1, 0): 1, (2, 0): 1}


class _Died(Exception):
    """A committer stopped for good between two steps of its commit."""


def test_a_dynamodb_waiter_repairs_the_version_of_a_committer_that_died_copying_it(
        dynamo: DynamoSetup) -> None:
    """The hint above poisoned: the committer dies between its entry and its copy.  The
    waiter's last look, once the patience is over, reads the version as any reader does
    (repairing it), finds its transaction there, and nothing lands twice."""
    uri, options = dynamo.uri(), dynamo.options
    _create(uri, options)

    table = _opener(uri, options, patience=0.5)

    owner = publish_only(table(), staged_append(table(), rows(1, 0)))

    def die(step: str, version: int) -> None:
        if step == "after_put_entry":
            raise _Died(step)

    with pytest.raises(Exception) as died:
        dc.write(table(log_store=DynamoDBLogStore.open(uri, options, hook=die)), rows(2, 0))
    assert isinstance(died.value, _Died) or isinstance(died.value.__cause__, _Died)
    ls = owner.log.log_store
    assert isinstance(ls, DynamoDBLogStore)
    assert not dynamo.entries(ls.table_path)[1].complete
    result, _ = owner.run()
    assert result.version == 1 and result.txn_id == owner.staged.txn_id
    assert [(e.version, e.complete) for e in dynamo.entries(ls.table_path)] == \
        [(0, True), (1, True)]
    final = table()
    assert final.version == 1
    assert Counter((r["writer"], r["batch"]) for r in final.to_arrow().to_pylist()) == {
        (1, 0): 1, (2, 0): 1}


def _new(now: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """Requests made since ``before``, by kind."""
    return {k: n - before.get(k, 0) for k, n in now.items() if n != before.get(k, 0)}


class _Misses:
    """Counts a store's GETs of one path that found nothing; ``wait(n)`` until there were
    ``n``, or the caller is ``finished``."""

    def __init__(self) -> None:
        self.count = 0
        self.done = False
        self.changed = threading.Condition()

    def finished(self) -> None:
        with self.changed:
            self.done = True
            self.changed.notify_all()

    def missed(self) -> None:
        with self.changed:
            self.count += 1
            self.changed.notify_all()

    def wait(self, n: int, timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.count >= n or self.done, timeout)


def _count_misses(store: Any, path: str) -> _Misses:
    misses = _Misses()
    get = store.get

    def counted(p: str, *args: Any, **kw: Any) -> Any:
        try:
            return get(p, *args, **kw)
        except ObjectNotFoundError:
            if p == path:
                misses.missed()
            raise

    store.get = counted
    return misses
