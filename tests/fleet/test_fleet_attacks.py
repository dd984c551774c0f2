"""Fleet-wide group commit attacked: a round's winner killed or stopped at each step, an owner
renewing while an includer holds its old record, rolled-back versions, replayed records,
records naming files outside the table or app versions already landed, stamps committed by
another host, VACUUM and log cleanup with retention 0 while records are published, and a
fleet folder that is a symbolic link or another user's.

Each ends safe: every transaction lands exactly once by txnId, nothing acknowledged is lost,
and what cannot be done is a clear error.  Local tables: the protocol is the store's (the S3
tests run it on moto for both mechanisms); processes stand for hosts, each with its own turn
folder, so host turns never order them."""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import os
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.commit.commit_info import committed_txn_ids
from deltacommit.engine.group.fleet import include, records
from deltacommit.engine.group.fleet import round as fleet_round
from deltacommit.engine.group.fleet.cleanup import KEEP_ROUNDS
from deltacommit.engine.group.fleet.policy import FleetPolicy
from deltacommit.engine.snapshot import state_cache
from deltacommit.errors import CommitFailedError, ConcurrentTransactionException
from deltacommit.io.logstore import knowledge
from deltacommit.protocol.fleet.record import (
    FLEET_DIR,
    decode_record,
    record_path,
    version_of_round,
)
from deltacommit.runtime.clock import ManualClock

from ..other_user import OTHER_UID, as_root, shared_dir
from .helpers import FLEET, SCHEMA, publish_only, rows, staged_append, winner_interrupted

PATIENT = dc.CommitPolicy(turn_patience=0.5)


def _table(where: Path, name: str = "t", **config: str) -> dc.DeltaTable:
    return dc.DeltaTable.create(str(where / name), SCHEMA, configuration={**FLEET, **config})


def _open(table: dc.DeltaTable) -> dc.DeltaTable:
    return dc.DeltaTable(table.uri, policy=PATIENT)


def _root(table: dc.DeltaTable) -> Path:
    local = table.store.local_path("_delta_log")
    assert local is not None
    return Path(local).parent


def _landings(table: dc.DeltaTable) -> Counter[str]:
    """How many versions carry each txnId."""
    fresh = dc.DeltaTable(table.uri)
    return Counter(t for c in fresh.log.known_commits(1, fresh.version)
                   for t in committed_txn_ids(c.commit_info))


def _counts(table: dc.DeltaTable) -> Counter[tuple[int, int]]:
    return Counter((r["writer"], r["batch"]) for r in dc.DeltaTable(table.uri).to_arrow()
                   .to_pylist())


def _records_left(table: dc.DeltaTable) -> list[str]:
    """The records in the table's fleet folder, once the deletions started are done."""
    assert records.settle()
    folder = _root(table) / FLEET_DIR
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".json")) \
        if folder.is_dir() else []


def _other_commit(table: dc.DeltaTable, data: pa.Table) -> int:
    """A commit no round includes anything in (its parameters differ from every append's,
    so no published append may share its version): a winner to the fleet."""
    t = _open(table)
    staged = staged_append(t, data)
    txn = t.transaction("WRITE", {"mode": "Append", "partitionBy": "[]", "by": "other"})
    txn.add(staged.adds)
    return txn.commit().version


# --------------------------------------------------------------------------- killed, stopped


def _interrupted_winner(table: dc.DeltaTable, point: str) -> tuple[Any, Any, Any]:
    ctx = mp.get_context("forkserver")
    won = ctx.Event()
    p = ctx.Process(target=winner_interrupted,
                    args=(table.uri, {}, tempfile.mkdtemp(), point, won))
    p.start()
    assert won.wait(120), "the writer never won its round"
    return ctx, p, won


@pytest.mark.parametrize("point", ["kill-round", "kill-landed"])
def test_a_round_winner_killed_at_any_step_lands_everything_once(tmp_path: Path,
                                                                  point: str) -> None:
    table = _table(tmp_path)
    owners = [publish_only(_open(table), staged_append(_open(table), rows(w, 0)))
              for w in (1, 2)]
    _, p, _ = _interrupted_winner(table, point)
    p.join(60)
    assert p.exitcode == -9
    # Each owner carries on: a dead winner delays it by the patience at most, once.
    results = [o.run()[0] for o in owners]
    for o, r in zip(owners, results, strict=True):
        assert o.staged.txn_id in committed_txn_ids(
            dc.DeltaTable(table.uri).log.known_commits(r.version, r.version)[0].commit_info)
    # The dead writer's retry (same app id and version) finds its outcome.
    again = dc.write(table.uri, rows(98, 0), app_id="w98", app_version=0)
    landings = _landings(table)
    assert all(n == 1 for n in landings.values()), landings
    assert {o.staged.txn_id for o in owners} <= set(landings)
    assert _counts(table) == {(1, 0): 1, (2, 0): 1, (98, 0): 1}
    assert again.skipped or landings[again.txn_id] == 1
    # What the dead winner left (the records it landed) is gone after the next round of the
    # table, and round keys of all but the newest few versions with it.
    last = dc.write(table.uri, rows(3, 0))
    assert _records_left(table) == []
    assert all(version_of_round(n) > last.version - KEEP_ROUNDS
               for n in os.listdir(_root(table) / FLEET_DIR) if n.endswith(".round"))


def test_a_stopped_round_winner_delays_the_others_by_the_patience_only(tmp_path: Path) -> None:
    table = _table(tmp_path)
    owners = [publish_only(_open(table), staged_append(_open(table), rows(w, 0)))
              for w in (1, 2)]
    _ctx, p, _ = _interrupted_winner(table, "stop-round")
    try:
        # While it is stopped, holding the round, the owners commit (each waits the patience
        # for the round's version, then commits itself and whatever it can check).
        results = [o.run()[0] for o in owners]
        assert all(r.version >= 1 for r in results)
        assert p.is_alive()
    finally:
        os.kill(p.pid, 18)  # SIGCONT
    p.join(60)
    assert p.exitcode == 0
    landings = _landings(table)
    assert all(n == 1 for n in landings.values()), landings
    assert _counts(table) == {(1, 0): 1, (2, 0): 1, (98, 0): 1}
    assert _records_left(table) == []


# --------------------------------------------------------------------------- renewal race


def test_an_includer_holding_the_old_record_refuses_it_past_its_bound_after_renewal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The owner renews its record once version B exists without it; an includer that read
    the old body before must refuse it at any version past B, and the owner lands it once."""
    table = _table(tmp_path)
    owner = publish_only(_open(table), staged_append(_open(table), rows(1, 0)),
                         FleetPolicy(bound_versions=1))
    bound = owner.record.bound
    holding, release = threading.Event(), threading.Event()
    choose = include.choose

    def choose_later(*args: Any) -> Any:
        if threading.current_thread().name == "includer":
            holding.set()
            assert release.wait(60)
        return choose(*args)

    monkeypatch.setattr(include, "choose", choose_later)
    includer_table = _open(table)
    includer = fleet_round._Writer(includer_table.log, staged_append(includer_table, rows(2, 0)),
                                   PATIENT, includer_table.clock, includer_table.random,
                                   FleetPolicy())
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(includer.run()), name="includer")
    thread.start()
    assert holding.wait(60)  # it holds the owner's record with bound B
    assert _other_commit(table, rows(5, 5)) == bound  # version B exists without the owner
    owner.log.refresh()
    assert owner.loop.catch_up(owner.member, owner.log.version, {}, fleet_round.Group(
        [], [], [owner.member]))
    owner._publish(owner.log.version)  # renewed: a new bound past the newest version
    assert decode_record((_root(table) / record_path(owner.staged.txn_id)).read_bytes()
                         ).bound > bound
    release.set()
    thread.join(60)
    [(mine, _)] = out
    carried = committed_txn_ids(dc.DeltaTable(table.uri).log.known_commits(
        mine.version, mine.version)[0].commit_info)
    assert mine.version > bound and owner.staged.txn_id not in carried
    result, _ = owner.run()
    assert result.version > mine.version
    landings = _landings(table)
    assert landings[owner.staged.txn_id] == 1 and all(n == 1 for n in landings.values())
    assert _counts(table) == {(1, 0): 1, (2, 0): 1, (5, 5): 1}


# --------------------------------------------------------------------------- hints poisoned


def _forget_all() -> None:
    """Forget what this process knows of every table, as a new process would."""
    state_cache.clear()
    knowledge.clear()


def test_rolling_back_the_version_records_name_lands_nothing_twice(tmp_path: Path) -> None:
    table = _table(tmp_path)
    dc.write(table.uri, rows(0, 0))
    clock = ManualClock(start=time.time())
    owner_table = dc.DeltaTable(table.uri, clock=clock,
                                policy=dc.CommitPolicy(turn_patience=0.5, host_turns=False))
    owner = publish_only(owner_table, staged_append(owner_table, rows(1, 0)))
    newest = owner.staged.read_version
    # The newest version is rolled back (deleted) with the record naming it published.
    (_root(table) / "_delta_log" / f"{newest:020d}.json").unlink()
    _forget_all()  # the writers below stand for other processes, which never read it
    r = dc.write(table.uri, rows(2, 0))
    assert r.version == newest  # written again, by a writer that never saw the old one
    r = dc.write(table.uri, rows(3, 0))  # a round that reads the record: it names a history
    assert owner.staged.txn_id not in _landings(table)  # the table no longer has
    # The owner carries on, as any writer whose snapshot was rolled back: it lands once.
    clock.advance(60.0)
    result, _ = owner.run()
    _forget_all()
    landings = _landings(table)
    assert landings[owner.staged.txn_id] == 1 and all(n == 1 for n in landings.values())
    assert result.version > r.version
    assert _counts(table) == {(1, 0): 1, (2, 0): 1, (3, 0): 1}


def test_a_record_replayed_after_its_transaction_landed_does_not_land_again(
        tmp_path: Path) -> None:
    table = _table(tmp_path)
    staged = staged_append(_open(table), rows(1, 0))
    publish_only(_open(table), staged)
    body = (_root(table) / record_path(staged.txn_id)).read_bytes()
    dc.write(table.uri, rows(2, 0))
    assert _landings(table)[staged.txn_id] == 1
    assert _records_left(table) == []
    # Replayed from the earlier run, within its bound: found in the log, not landed again.
    (_root(table) / record_path(staged.txn_id)).write_bytes(body)
    os.chmod(_root(table) / record_path(staged.txn_id), 0o600)
    dc.write(table.uri, rows(3, 0))
    assert _landings(table)[staged.txn_id] == 1
    assert _counts(table) == {(1, 0): 1, (2, 0): 1, (3, 0): 1}
    assert _records_left(table) == []  # found landed: deleted by the round that read it


def test_a_record_replayed_after_log_cleanup_removed_its_version_is_left_alone(
        tmp_path: Path) -> None:
    table = _table(tmp_path, **{"delta.logRetentionDuration": "interval 0 seconds",
                                "delta.checkpointInterval": "1000"})
    staged = staged_append(_open(table), rows(1, 0))
    publish_only(_open(table), staged, FleetPolicy(bound_versions=20))
    body = (_root(table) / record_path(staged.txn_id)).read_bytes()
    dc.write(table.uri, rows(2, 0))
    for b in range(3):
        dc.write(table.uri, rows(3, b))
    t = dc.DeltaTable(table.uri)
    t.checkpoint()
    _age_log(t)
    assert t.cleanup_log(), "log cleanup deleted nothing"
    (_root(table) / record_path(staged.txn_id)).write_bytes(body)
    os.chmod(_root(table) / record_path(staged.txn_id), 0o600)
    # Beside it, a clean record: the round still includes that one.
    _forget_all()
    clean = publish_only(_open(table), staged_append(_open(table), rows(5, 0)))
    r = dc.write(table.uri, rows(4, 0))
    [c] = dc.DeltaTable(table.uri).log.known_commits(r.version, r.version)
    assert set(committed_txn_ids(c.commit_info)) == {r.txn_id, clean.staged.txn_id}
    assert _counts(table) == {(1, 0): 1, (2, 0): 1, (3, 0): 1, (3, 1): 1, (3, 2): 1, (4, 0): 1,
                              (5, 0): 1}


def _age_log(table: dc.DeltaTable) -> None:
    """Every log file of the table three days old (log cleanup judges by modification time,
    in whole days)."""
    log_dir = _root(table) / "_delta_log"
    for f in log_dir.iterdir():
        if f.is_file():
            st = f.stat()
            os.utime(f, (st.st_atime - 3 * 86400, st.st_mtime - 3 * 86400))


def _forge(table: dc.DeltaTable, txn_id: str, change: Any) -> None:
    path = _root(table) / record_path(txn_id)
    body = json.loads(path.read_bytes())
    change(body)
    path.write_text(json.dumps(body))
    os.chmod(path, 0o600)


@pytest.mark.parametrize("spelling", [
    "../elsewhere/part-0.parquet", "a/../../elsewhere/part-0.parquet",
    "%2E%2E/elsewhere/part-0.parquet", "/etc/passwd", "file:///etc/passwd",
    "s3://other-bucket/t/part-0.parquet", "_delta_log/00000000000000000000.json",
    f"{FLEET_DIR}/x.json", "a/./b.parquet", "./part-0.parquet"])
def test_a_record_adding_a_file_outside_the_table_is_refused(tmp_path: Path,
                                                            spelling: str) -> None:
    table = _table(tmp_path)
    staged = staged_append(_open(table), rows(1, 0))
    publish_only(_open(table), staged)

    def outside(body: dict[str, Any]) -> None:
        for a in body["actions"]:
            if "add" in a:
                a["add"]["path"] = spelling

    _forge(table, staged.txn_id, outside)
    r = dc.write(table.uri, rows(2, 0))
    assert staged.txn_id not in _landings(table)
    assert _landings(table)[r.txn_id] == 1
    assert _counts(table) == {(2, 0): 1}


def test_a_record_naming_a_deletion_vector_outside_the_table_is_refused(tmp_path: Path) -> None:
    table = _table(tmp_path)
    staged = staged_append(_open(table), rows(1, 0))
    publish_only(_open(table), staged)

    def outside(body: dict[str, Any]) -> None:
        for a in body["actions"]:
            if "add" in a:
                a["add"]["deletionVector"] = {"storageType": "p", "pathOrInlineDv":
                                              "/etc/dv.bin", "offset": 1, "sizeInBytes": 10,
                                              "cardinality": 1}

    _forge(table, staged.txn_id, outside)
    dc.write(table.uri, rows(2, 0))
    assert staged.txn_id not in _landings(table)


def test_a_record_of_an_app_version_another_host_landed_does_not_land(tmp_path: Path) -> None:
    table = _table(tmp_path)
    staged = staged_append(_open(table), rows(1, 0), app=("app", 5))
    owner = publish_only(_open(table), staged)
    # Another host commits the same app version first (its own round: a member with the
    # same app id never shares its version).
    other = dc.write(table.uri, rows(1, 0), app_id="app", app_version=5)
    assert staged.txn_id not in _landings(table)
    dc.write(table.uri, rows(2, 0))  # the next round checks the record: it conflicts
    assert staged.txn_id not in _landings(table)
    with pytest.raises(ConcurrentTransactionException):
        owner.run()
    assert _records_left(table) == []
    assert _counts(table) == {(1, 0): 1, (2, 0): 1}
    assert dc.DeltaTable(table.uri).snapshot.app_version("app") == 5
    assert _landings(table)[other.txn_id] == 1


def test_two_records_of_one_app_version_land_once(tmp_path: Path) -> None:
    """A batch delivered twice, to two hosts, published by both: one lands, the other's owner
    learns that the app version is taken (a redelivery ``dc.write`` reports as skipped)."""
    table = _table(tmp_path)
    owners = [publish_only(_open(table), staged_append(_open(table), rows(1, 0),
                                                       app=("app", 5))) for _ in range(2)]
    dc.write(table.uri, rows(2, 0))  # a round that finds both
    landed = [o for o in owners if o.staged.txn_id in _landings(table)]
    assert len(landed) == 1
    [other] = [o for o in owners if o is not landed[0]]
    assert landed[0].run()[0].version >= 1
    with pytest.raises(ConcurrentTransactionException):
        other.run()
    assert _counts(table) == {(1, 0): 1, (2, 0): 1}
    assert _records_left(table) == []


def test_a_record_with_an_app_version_it_claims_not_to_have_read_is_refused(
        tmp_path: Path) -> None:
    """A record whose txn action's app id is missing from what it read would pass the
    conflict checks against a winner of the same app id: refused, however it was made."""
    table = _table(tmp_path)
    staged = staged_append(_open(table), rows(1, 0), app=("app", 5))
    publish_only(_open(table), staged)
    dc.write(table.uri, rows(7, 7), app_id="app", app_version=5)

    def unread(body: dict[str, Any]) -> None:
        body["readAppIds"] = []

    _forge(table, staged.txn_id, unread)
    dc.write(table.uri, rows(2, 0))
    assert staged.txn_id not in _landings(table)
    assert _counts(table) == {(7, 7): 1, (2, 0): 1}


# --------------------------------------------------------------------------- stamps


def test_row_ids_and_commit_timestamps_are_stamped_at_the_version_the_committer_claims(
        tmp_path: Path) -> None:
    table = _table(tmp_path, **{"delta.enableRowTracking": "true",
                                "delta.enableInCommitTimestamps": "true"})
    dc.write(table.uri, rows(0, 0))
    owners = [publish_only(_open(table), staged_append(_open(table), rows(w, 0)))
              for w in (1, 2, 3)]
    r = dc.write(table.uri, pa.table({"writer": [4, 4], "batch": [0, 1]}, schema=SCHEMA))
    fresh = dc.DeltaTable(table.uri)
    [c] = fresh.log.known_commits(r.version, r.version)
    assert set(committed_txn_ids(c.commit_info)) == {r.txn_id, *(o.staged.txn_id
                                                                for o in owners)}
    _assert_stamps(fresh)
    for o in owners:
        assert o.run()[0].version == r.version


def test_identity_row_ids_and_timestamps_stay_right_when_hosts_commit_each_others_rows(
        tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False, metadata={
        "delta.identity.start": "1", "delta.identity.step": "1",
        "delta.identity.allowExplicitInsert": "false"}), ("writer", pa.int64())])
    table = dc.DeltaTable.create(str(tmp_path / "t"), schema, configuration={
        **FLEET, "delta.enableRowTracking": "true", "delta.enableInCommitTimestamps": "true"})
    uri = table.uri
    ctx = mp.get_context("forkserver")
    start = ctx.Event()
    out = ctx.Queue()
    procs = [ctx.Process(target=_identity_writer, args=(uri, w, 3, tempfile.mkdtemp(), start,
                                                        out)) for w in range(3)]
    for p in procs:
        p.start()
    start.set()
    results = [out.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(60)
    assert all(r == "ok" for r in results), results
    data = dc.DeltaTable(uri).to_arrow().to_pylist()
    ids = [r["id"] for r in data]
    assert len(data) == 3 * 3 * 2 and len(set(ids)) == len(ids)
    assert all(n == 1 for n in _landings(table).values())
    _assert_stamps(dc.DeltaTable(uri))


def _assert_stamps(table: dc.DeltaTable) -> None:
    """Every file's row ids are disjoint from every other's and its default row commit
    version is the version that added it; in-commit timestamps strictly increase."""
    spans = []
    stamps = []
    for v in range(table.version + 1):
        [commit] = table.log.known_commits(v, v)
        stamps.append(commit.commit_info.values["inCommitTimestamp"])
        for a in commit.actions:
            if isinstance(a, dc.protocol.actions.Add):
                assert a.default_row_commit_version == v and a.base_row_id is not None
                spans.append((a.base_row_id, a.base_row_id + (a.num_records() or 0)))
    spans.sort()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)


def _identity_writer(uri: str, writer: int, appends: int, turn_dir: str, start: Any,
                     out: Any) -> None:
    os.environ["DELTACOMMIT_TURN_DIR"] = turn_dir
    try:
        start.wait()
        for b in range(appends):
            dc.write(uri, pa.table({"writer": [writer, writer]}),
                     app_id=f"w{writer}", app_version=b)
        out.put("ok")
    except BaseException as e:
        out.put(f"{type(e).__name__}: {e}")


# --------------------------------------------------------------------------- maintenance


@pytest.mark.parametrize("protect", [True, False])
def test_vacuum_with_retention_0_keeps_the_files_of_published_transactions(
        tmp_path: Path, protect: bool) -> None:
    table = _table(tmp_path)
    staged = staged_append(_open(table), rows(1, 0))
    owner = publish_only(_open(table), staged)
    # Files older than VACUUM's floor for uncommitted files: only the record protects them.
    for a in staged.adds:
        f = _root(table) / a.path
        st = f.stat()
        os.utime(f, (st.st_atime - 7200, st.st_mtime - 7200))
    deleted = dc.DeltaTable(table.uri).vacuum(retention_hours=0, dry_run=False,
                                              enforce_retention_duration=False,
                                              protect_uncommitted=protect)
    assert not {a.path for a in staged.adds} & {Path(p).name for p in deleted}
    r = dc.write(table.uri, rows(2, 0))
    assert owner.staged.txn_id in committed_txn_ids(
        dc.DeltaTable(table.uri).log.known_commits(r.version, r.version)[0].commit_info)
    assert _counts(table) == {(1, 0): 1, (2, 0): 1}  # every file it names is there


def test_a_published_record_never_outlives_the_commit_window(tmp_path: Path) -> None:
    """An owner renewing its record keeps it within the commit window of its files: past it,
    includers refuse the record (VACUUM may then delete files no version names), and the
    owner commits by itself, as any writer does once its window passed."""
    clock = ManualClock(start=1_800_000_000.0)
    table = dc.DeltaTable.create(str(tmp_path / "t"), SCHEMA, configuration=FLEET,
                                 clock=clock)
    t = dc.DeltaTable(table.uri, clock=clock, policy=PATIENT)
    owner = publish_only(t, staged_append(t, rows(1, 0)))
    first = owner.record.deadline_ms
    window = dc.protocol.commit_window.COMMIT_WINDOW_MS
    for _ in range(100):
        clock.advance(20.0)
        owner._publish(owner.log.version)
    assert owner.record.deadline_ms <= first + window


def test_log_cleanup_while_a_transaction_is_published_never_lands_it_twice(
        tmp_path: Path) -> None:
    table = _table(tmp_path, **{"delta.logRetentionDuration": "interval 0 seconds",
                                "delta.checkpointInterval": "1000"})
    # The owner stands for another host: it takes no turn with this process's writers (whose
    # turn records would hand it the commits it missed).
    clock = ManualClock(start=time.time())
    alone = dc.DeltaTable(table.uri, clock=clock,
                          policy=dc.CommitPolicy(turn_patience=0.5, host_turns=False))
    owner = publish_only(alone, staged_append(alone, rows(1, 0)))
    dc.write(table.uri, rows(2, 0))  # lands the owner's transaction
    assert _landings(table)[owner.staged.txn_id] == 1
    for b in range(3):
        dc.write(table.uri, rows(3, b))
    t = dc.DeltaTable(table.uri)
    t.checkpoint()
    _age_log(t)
    assert t.cleanup_log()
    # The owner (stopped all along, in a process of its own: nothing cached but what it
    # read) carries on: the versions that would tell it whether its transaction landed are
    # gone, so it must not commit it again; its outcome is unknown.
    state_cache.clear()
    clock.advance(3600.0)
    with pytest.raises(CommitFailedError, match="log cleanup"):
        owner.run()
    assert _counts(table) == {(1, 0): 1, (2, 0): 1, (3, 0): 1, (3, 1): 1, (3, 2): 1}


# --------------------------------------------------------------------------- the folder


def test_a_fleet_folder_that_is_a_symbolic_link_is_never_followed(tmp_path: Path) -> None:
    table = _table(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (_root(table) / FLEET_DIR).symlink_to(elsewhere)
    r = dc.write(table.uri, rows(1, 0))
    assert _landings(table)[r.txn_id] == 1
    assert list(elsewhere.iterdir()) == []  # nothing published through the link
    assert (_root(table) / FLEET_DIR).is_symlink()
    assert not records.folder_usable(table.store)


def test_a_fleet_folder_made_by_another_user_is_never_used(tmp_path: Path) -> None:
    if not as_root():
        pytest.skip("needs root to act as a second user")  # pragma: no cover
    with shared_dir() as where:
        table = dc.DeltaTable.create(str(where / "t"), SCHEMA, configuration=FLEET)
        root = _root(table)
        os.chmod(root, 0o777)
        subprocess.run(["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}",
                        "--clear-groups", "mkdir", "-m", "0777", str(root / FLEET_DIR)],
                       check=True)
        os.chmod(root, 0o755)
        assert (root / FLEET_DIR).stat().st_uid == OTHER_UID
        r = dc.write(table.uri, rows(1, 0))
        assert _landings(table)[r.txn_id] == 1
        assert os.listdir(root / FLEET_DIR) == []  # nothing published into it
        assert _counts(table) == {(1, 0): 1}


# --------------------------------------------------------------------------- diagnostics


def test_doctor_and_verify_report_what_the_fleet_folder_holds(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    from deltacommit.cli import main
    from deltacommit.ops.doctor import diagnose
    from deltacommit.ops.verify import verify_table

    table = _table(tmp_path)
    assert diagnose(table.uri).fleet is None  # nothing published: nothing said
    for i in range(KEEP_ROUNDS):  # versions 1-4, each its own round (keys kept)
        _other_commit(table, rows(6, i))
    live = staged_append(_open(table), rows(1, 0))
    publish_only(_open(table), live, FleetPolicy(bound_versions=50))
    stale = staged_append(_open(table), rows(2, 0))
    publish_only(_open(table), stale, FleetPolicy(bound_versions=1))
    _other_commit(table, rows(5, 5))  # version 5: the stale one's bound exists without it
    assert records.settle()
    folder = _root(table) / FLEET_DIR
    (folder / "00000000000000000001.round").write_bytes(b"")  # no longer kept at version 5
    (folder / "garbage.json").write_bytes(b"{")
    keys = [n for n in os.listdir(folder) if n.endswith(".round")]
    report = diagnose(table.uri)
    assert report.fleet is not None
    assert report.fleet.to_json() == {"live": 1, "stale": 1, "unreadable": 1,
                                      "round_keys": len(keys), "stale_round_keys": 1}
    kinds = {f.kind for f in report.findings}
    assert {"fleet-published", "fleet-leftovers"} <= kinds and report.healthy
    checked = verify_table(table.uri)
    assert checked.ok and any("stale record" in n for n in checked.notes)
    assert main(["doctor", table.uri]) == 0
    out = capsys.readouterr().out
    assert "fleet       1 published, 1 stale, 1 unreadable" in out
    assert "delete them by hand" in out
    assert main(["verify", table.uri]) == 0
    out = capsys.readouterr().out
    assert "note        1 transaction published" in out and "result      ok" in out
    # The next fleet write deletes what no writer may land, and lands the live one.
    dc.write(table.uri, rows(3, 0))
    assert records.settle()
    report = diagnose(table.uri)
    assert report.fleet is not None and report.fleet.stale == report.fleet.live == 0
    assert report.fleet.stale_round_keys <= 1  # the newest kept at the round before
    assert _counts(table) == {(1, 0): 1, (3, 0): 1, (5, 5): 1,
                              **{(6, i): 1 for i in range(KEEP_ROUNDS)}}


def test_doctor_says_a_fleet_folder_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    from deltacommit.ops.doctor import diagnose

    table = _table(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.json").write_bytes(b"{}")
    (_root(table) / FLEET_DIR).symlink_to(elsewhere)
    report = diagnose(table.uri)
    assert report.fleet is None
    [finding] = [f for f in report.findings if f.kind == "fleet-folder-not-a-directory"]
    assert "never follows it" in finding.message


def test_a_transaction_naming_a_file_outside_the_table_commits_without_publishing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its includers would refuse the record: it commits by itself, as beside the fleet."""
    table = _table(tmp_path)
    published: list[str] = []
    publish = records.publish
    monkeypatch.setattr(records, "publish",
                        lambda store, r: (published.append(r.txn_id), publish(store, r)))
    t = _open(table)
    [add] = staged_append(t, rows(1, 0)).adds
    outside = tmp_path / "elsewhere.parquet"
    os.rename(_root(table) / add.path, outside)
    txn = t.transaction("WRITE", {"mode": "Append", "partitionBy": "[]"})
    txn.add([dc.protocol.actions.Add(str(outside), {}, add.size, add.modification_time,
                                     stats=add.stats)])
    r = txn.commit()
    assert published == [] and _landings(table)[r.txn_id] == 1
    dc.write(table.uri, rows(2, 0))  # an ordinary write still publishes
    assert len(published) == 1
