"""Poisoned host-turn records (``engine/commit/host_turn.py``), on local disk and S3 (moto).

A turn record is a hint: it says which version another process of the host committed, never
what the log holds.  Each test poisons it the way an operator or a stray process would
(roll the newest commit back under a live writer, forge a record, swap one between tables,
age or truncate it) and checks the commit path: the log stays contiguous, every row is there
exactly once, and a DELETE another machine committed meanwhile is checked, never missed.
Other processes are real ones (a fork server); "another machine" is a writer without turns.
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing as mp
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.engine.commit import host_turn, turn_sweep
from deltacommit.engine.commit.commit_info import previous_commit
from deltacommit.engine.commit.host_turn import HostTurn, Record
from deltacommit.engine.commit.table_log import Speculation, TableLog
from deltacommit.io.datafiles import write_data_files
from deltacommit.io.storage import open_store
from deltacommit.protocol.log.names import commit_path
from deltacommit.testing import S3Bucket

from .ops import SCHEMA

ELSEWHERE = dc.CommitPolicy(host_turns=False)  # a writer on another machine takes no turn

Where = tuple[str, dict[str, str]]


PRELOAD = ["deltacommit", "pyarrow.parquet", "boto3"]


def start_fork_server() -> None:
    """Start the fork server, if no test has, before this test changes the environment: it
    keeps the environment it started with for every later child, and other modules' tests
    count on the suite's turn folder in theirs (this module's children are told theirs)."""
    mp.get_context("forkserver").set_forkserver_preload(PRELOAD)
    forkserver.ensure_running()


@pytest.fixture
def turn_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    start_fork_server()
    folder = tmp_path / "turns"
    monkeypatch.setenv(host_turn.DIR_VARIABLE, str(folder))
    monkeypatch.delenv(host_turn.SWITCH, raising=False)
    yield folder


@pytest.fixture(params=["local", "s3"])
def where(request: pytest.FixtureRequest, tmp_path: Path, turn_dir: Path) -> Where:
    """A table location on local disk or on the session's moto, and its options."""
    if request.param == "local":
        return str(tmp_path / "t"), {}
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    return f"{bucket.uri}/t", dict(bucket.storage_options)


def rows(ids: list[int], part: str = "a") -> pa.Table:
    return pa.table({"p": [part] * len(ids), "id": ids, "seen": [0] * len(ids)}, schema=SCHEMA)


# --------------------------------------------------------------------------- other processes


def _run(turns: str, job: Callable[[], object], out: mp.Queue[object]) -> None:
    os.environ[host_turn.DIR_VARIABLE] = turns
    try:
        out.put(job())
    except BaseException as e:
        out.put(f"{type(e).__name__}: {e}")


def _append(uri: str, options: Mapping[str, str], ids: list[int], part: str) -> int:
    """A process of this host appending (it takes the table's turn and records its commit)."""
    table = dc.DeltaTable(uri, storage_options=dict(options))
    return dc.write(table, rows(ids, part)).version


def _delete_elsewhere(uri: str, options: Mapping[str, str], predicate: str) -> int:
    """A DELETE from another machine: it races, and knows nothing of this host's turns."""
    deleted: int = dc.DeltaTable(uri, storage_options=dict(options), policy=ELSEWHERE).delete(
        predicate)["version"]
    return deleted


def in_process(job: Callable[[], object], timeout: float = 120.0) -> object:
    """Run ``job`` in another process of this host, with this test's turn folder."""
    ctx = mp.get_context("forkserver")
    out: mp.Queue[object] = ctx.Queue()
    p = ctx.Process(target=_run, args=(os.environ[host_turn.DIR_VARIABLE], job, out))
    p.start()
    try:
        result = out.get(timeout=timeout)
    finally:
        p.join(timeout=60)
        if p.is_alive():
            p.kill()
    assert p.exitcode == 0 and not (isinstance(result, str) and ":" in result), result
    return result


def roll_back(uri: str, options: Mapping[str, str], version: int) -> None:
    """An operator deletes the newest commit (``N.json``) of the table."""
    open_store(uri, options).delete(commit_path(version))


def log_versions(uri: str, options: Mapping[str, str]) -> list[int]:
    return sorted(f.version for f in dc.DeltaTable(uri, storage_options=options).log_store
                  .list_log() if f.kind == "commit")


def ids_of(uri: str, options: Mapping[str, str]) -> list[int]:
    return sorted(dc.DeltaTable(uri, storage_options=options).to_arrow().column("id")
                  .to_pylist())


# --------------------------------------------------------------------------- rolled back


def test_a_rolled_back_commit_the_record_names_is_not_taken_for_the_log(where: Where) -> None:
    uri, options = where
    service = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], storage_options=options)
    assert dc.write(service, rows([1])).version == 1          # a live service, kept at 1
    assert in_process(functools.partial(_append, uri, options, [2], "b")) == 2
    roll_back(uri, options, 2)                                 # the record still names 2
    r = dc.write(service, rows([3]))
    # Version 2 is read from the log, found missing, and claimed: no gap after version 1.
    assert r.version == 2
    assert log_versions(uri, options) == [0, 1, 2]
    assert ids_of(uri, options) == [1, 3]


def test_a_delete_from_another_machine_after_a_rollback_is_checked_not_missed(
        where: Where) -> None:
    uri, options = where
    service = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], storage_options=options)
    assert dc.write(service, rows([1])).version == 1
    assert in_process(functools.partial(_append, uri, options, [2], "b")) == 2
    roll_back(uri, options, 2)
    # Another machine deletes the partition the service is about to read, at version 2 again.
    assert in_process(functools.partial(_delete_elsewhere, uri, options, "p = 'a'")) == 2
    txn = service.transaction()
    assert [a.path for a in txn.scan(predicate="p = 'a'")]  # reads the row deleted meanwhile
    txn.add(write_data_files(service.log_store.store, rows([4]), service.partition_columns,
                             clock=service.clock, random=service.random))
    with pytest.raises(dc.ConcurrentDeleteReadException) as failed:
        txn.commit()
    assert failed.value.winning_version == 2
    assert log_versions(uri, options) == [0, 1, 2]
    assert ids_of(uri, options) == []
    # The service goes on from what the log holds.
    assert dc.write(service, rows([5])).version == 3
    assert ids_of(uri, options) == [5]


# --------------------------------------------------------------------------- forged records


def _publish_as_another(table: dc.DeltaTable, record: Record) -> None:
    turn = HostTurn.for_table(table.log_store, 1.0)
    assert turn is not None and turn.take(lambda: None)
    try:
        turn.publish(record)
    finally:
        turn.release()


def test_a_forged_record_naming_the_next_version_costs_a_read_and_loses_nothing(
        where: Where) -> None:
    uri, options = where
    table = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], storage_options=options)
    assert dc.write(table, rows([1])).version == 1
    # Another process of this user says it committed version 2; nothing is there.
    _publish_as_another(table, Record(2, "ab" * 32, settled=True, pid=os.getpid() + 1))
    r = dc.write(table, rows([2]))
    assert (r.version, r.attempts) == (2, 1)
    # And one naming the version just written, with another digest: the log decides.
    _publish_as_another(table, Record(2, "cd" * 32, settled=True, pid=os.getpid() + 1))
    assert dc.write(table, rows([3])).version == 3
    assert log_versions(uri, options) == [0, 1, 2, 3]
    assert ids_of(uri, options) == [1, 2, 3]


def test_a_record_swapped_in_from_another_table_is_only_a_hint(
        where: Where, turn_dir: Path) -> None:
    uri, options = where
    other_uri = uri + "-other"
    table = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], storage_options=options)
    other = dc.DeltaTable.create(other_uri, SCHEMA, partition_by=["p"], storage_options=options)
    for k in range(3):
        assert in_process(functools.partial(_append, other_uri, options, [100 + k], "a")) == k + 1
    assert dc.write(table, rows([1])).version == 1
    mine, theirs = HostTurn.for_table(table.log_store, 1.0), HostTurn.for_table(other.log_store, 1.0)
    assert mine is not None and theirs is not None and mine.key != theirs.key
    # The other table's record (version 3, another process's) copied over this table's.
    shutil.copyfile(theirs.path + ".record", mine.path + ".record")
    swapped = mine.record()
    assert swapped is not None and swapped.version == 3 and swapped.foreign
    assert dc.write(table, rows([2])).version == 2
    assert in_process(functools.partial(_append, uri, options, [3], "a")) == 3
    assert log_versions(uri, options) == [0, 1, 2, 3]
    assert ids_of(uri, options) == [1, 2, 3]
    assert ids_of(other_uri, options) == [100, 101, 102]


def test_a_truncated_or_aged_record_is_passed_over(where: Where, turn_dir: Path) -> None:
    uri, options = where
    table = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], storage_options=options)
    assert in_process(functools.partial(_append, uri, options, [1], "a")) == 1
    turn = HostTurn.for_table(table.log_store, 1.0)
    assert turn is not None and turn.record() is not None
    with open(turn.path + ".record", "r+b") as f:
        f.truncate(10)
    assert turn.record() is None
    assert dc.write(table, rows([2])).version == 2
    # Aged a week: the next process to use the folder sweeps the table's files and starts
    # them afresh; its commit lands after the newest version all the same.
    week_ago = time.time() - turn_sweep.STALE_AFTER - 60
    for suffix in (".turn", ".record", ".queue"):
        os.utime(turn.path + suffix, (week_ago, week_ago))
    assert in_process(functools.partial(_append, uri, options, [3], "a")) == 3
    assert dc.write(table, rows([4])).version == 4
    assert log_versions(uri, options) == [0, 1, 2, 3, 4]
    assert ids_of(uri, options) == [1, 2, 3, 4]


# --------------------------------------------------------------------------- handed-on commits


def test_a_handed_on_commit_is_taken_only_where_a_commit_read_from_the_log_vouches_for_it(
        s3_bucket: S3Bucket, turn_dir: Path) -> None:
    uri, options = f"{s3_bucket.uri}/t", dict(s3_bucket.storage_options)
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], storage_options=options)
    assert dc.write(uri, rows([1]), storage_options=options).version == 1
    kept = [dc.DeltaTable(uri, storage_options=options) for _ in range(4)]  # all at version 1
    writer = dc.DeltaTable(uri, storage_options=options)
    assert [dc.write(writer, rows([k])).version for k in (2, 3)] == [2, 3]
    store = writer.log_store.store
    real = {v: store.get(commit_path(v)) for v in (1, 2, 3)}
    assert previous_commit(real[3]) == hashlib.sha256(real[2]).hexdigest()
    forged = real[2].replace(b'"id"', b'"ID"') if b'"id"' in real[2] else real[2] + b"\n"

    def advanced(table: dc.DeltaTable, handed: dict[int, bytes]) -> int:
        """GETs of commit files it took to bring ``table`` to version 3."""
        s3: Any = table.log_store.store
        s3.reset_requests()
        assert table.log.advance_to(3, handed) == 3
        gets = int(s3.requests.get("GetObject", 0))
        assert table.version == 3
        assert sorted(table.to_arrow().column("id").to_pylist()) == [1, 2, 3]
        return gets

    assert advanced(kept[0], {2: real[2]}) == 1            # vouched for by 3.json: not read
    assert advanced(kept[1], {2: forged}) == 2             # not the bytes 3.json names: read
    assert advanced(kept[2], {2: real[1]}) == 2            # another version's: read
    # Rolled back: the newest named version must be read from the log, whatever was handed.
    store.delete(commit_path(3))
    with pytest.raises(dc.DeltaCommitError):
        kept[3].log.advance_to(3, {2: real[2]})
    assert kept[3].version == 1


def test_commits_handed_on_before_the_newest_travel_with_it(
        s3_bucket: S3Bucket, turn_dir: Path) -> None:
    uri, options = f"{s3_bucket.uri}/t", dict(s3_bucket.storage_options)
    service = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], storage_options=options)
    assert dc.write(service, rows([1])).version == 1
    # Three other processes of the host commit in turn while the service does nothing.
    for k in range(3):
        assert in_process(functools.partial(_append, uri, options, [2 + k], "b")) == 2 + k
    s3: Any = service.log_store.store
    s3.reset_requests()
    assert dc.write(service, rows([5])).version == 5
    # Only version 4 is read: the commits of 2 and 3 travelled with its record, and its
    # commit (read from the log) vouches for 3, whose commit vouches for 2.
    assert s3.requests.get("GetObject", 0) == 1
    assert files_of(service) == files_of(dc.DeltaTable(uri, storage_options=options))
    assert ids_of(uri, options) == [1, 2, 3, 4, 5]


@given(st.dictionaries(st.integers(0, 2**62), st.binary(max_size=64), max_size=8),
       st.integers(0, 400))
def test_a_carry_file_holds_the_commits_written_or_none(commits: dict[int, bytes],
                                                        cut: int) -> None:
    whole = host_turn.encode_carried(commits)
    assert host_turn.decode_carried(whole) == commits
    # Torn or truncated: nothing, or (cut at the end) all of them.
    assert host_turn.decode_carried(whole[:cut]) in ({}, commits)


@given(st.binary(max_size=512))
def test_a_carry_file_of_any_bytes_decodes_to_bounded_commits(data: bytes) -> None:
    carried = host_turn.decode_carried(data)
    assert len(carried) <= host_turn.CARRIED_COMMITS
    assert sum(len(c) for c in carried.values()) <= len(data)
    assert all(v >= 0 for v in carried)
    behind_magic = host_turn.decode_carried(b"DCC1" + data)
    assert len(behind_magic) <= host_turn.CARRIED_COMMITS and all(v >= 0 for v in behind_magic)


# --------------------------------------------------------------------------- speculations


def hand_on_as_another(table: dc.DeltaTable, version: int, data: bytes) -> None:
    """Another process of this user hands ``data`` on as its commit at ``version``: the
    carried commit and a record naming it, consistent with each other."""
    turn = HostTurn.for_table(table.log_store, 1.0)
    assert turn is not None and turn.take(lambda: None)
    try:
        carried = host_turn.encode_carried({version: data})
        with open(turn.path + ".carry", "r+b") as f:
            f.write(carried)
            f.truncate(len(carried))
        turn.publish(Record(version, hashlib.sha256(data).hexdigest(), settled=True,
                            pid=os.getpid() + 1))
    finally:
        turn.release()


@pytest.fixture
def confirmations(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each speculation the commit loop made held up (``TableLog.confirm``)."""
    seen: list[bool] = []
    real = TableLog.confirm

    def confirm(self: TableLog, speculation: Speculation) -> bool:
        held = real(self, speculation)
        seen.append(held)
        return held

    monkeypatch.setattr(TableLog, "confirm", confirm)
    return seen


def files_of(table: dc.DeltaTable) -> list[str]:
    return sorted(a.path for a in table.snapshot.state.files.values())


def test_an_attempt_built_on_a_handed_on_commit_the_log_does_not_hold_claims_nothing_on_it(
        where: Where, confirmations: list[bool]) -> None:
    uri, options = where
    service = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], storage_options=options)
    assert dc.write(service, rows([1])).version == 1
    assert in_process(functools.partial(_append, uri, options, [2], "b")) == 2
    real = open_store(uri, options).get(commit_path(2))
    # Handed on as version 2: its bytes with another data file, under a matching record.
    forged = real.replace(b'"path":"', b'"path":"forged-', 1)
    assert forged != real and previous_commit(forged) == previous_commit(real)
    hand_on_as_another(service, 2, forged)
    r = dc.write(service, rows([3]))
    # The attempt was built on the forged commit while version 2 was read, then built again
    # on what the log holds: version 3, on the real version 2, in one attempt.
    assert confirmations == [False]
    assert (r.version, r.attempts) == (3, 1)
    assert log_versions(uri, options) == [0, 1, 2, 3]
    assert files_of(service) == files_of(dc.DeltaTable(uri, storage_options=options))
    assert not any("forged-" in p for p in files_of(service))
    assert ids_of(uri, options) == [1, 2, 3]


def test_a_handed_on_commit_rolled_back_from_the_log_is_built_on_but_never_claimed_on(
        where: Where, confirmations: list[bool]) -> None:
    uri, options = where
    service = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], storage_options=options)
    assert dc.write(service, rows([1])).version == 1
    assert in_process(functools.partial(_append, uri, options, [2], "b")) == 2
    roll_back(uri, options, 2)  # the record and the commit handed on with it remain
    r = dc.write(service, rows([3]))
    assert confirmations == [False]
    assert (r.version, r.attempts) == (2, 1)   # no gap after version 1
    assert log_versions(uri, options) == [0, 1, 2]
    assert ids_of(uri, options) == [1, 3]


def test_a_forged_handed_on_commit_that_would_conflict_fails_nothing(
        where: Where, confirmations: list[bool]) -> None:
    uri, options = where
    service = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], storage_options=options)
    assert dc.write(service, rows([1])).version == 1
    assert in_process(functools.partial(_append, uri, options, [2], "b")) == 2
    real = open_store(uri, options).get(commit_path(2))
    [path] = [p for p in files_of(service) if p.startswith("p=a/")]
    # Handed on as version 2: a DELETE of the partition the service's transaction reads.
    remove = json.dumps({"remove": {"path": path, "deletionTimestamp": 1, "dataChange": True}})
    forged = real.split(b"\n", 1)[0] + b"\n" + remove.encode() + b"\n"
    hand_on_as_another(service, 2, forged)
    txn = service.transaction()
    assert [a.path for a in txn.scan(predicate="p = 'a'")] == [path]
    txn.add(write_data_files(service.log_store.store, rows([3]), service.partition_columns,
                             clock=service.clock, random=service.random))
    # Decided on what the log holds at version 2 (an append to another partition), read at
    # once: nothing conflicts.
    assert txn.commit().version == 3
    assert confirmations == [False]
    assert ids_of(uri, options) == [1, 2, 3]


def test_a_conflicting_commit_handed_on_is_decided_on_once_read_from_the_log(
        where: Where, confirmations: list[bool]) -> None:
    uri, options = where
    service = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], storage_options=options)
    assert dc.write(service, rows([1])).version == 1
    # Another process of this host deletes the partition the service is about to read.
    assert in_process(functools.partial(_delete, uri, options, "p = 'a'")) == 2
    txn = service.transaction()
    assert txn.scan(predicate="p = 'a'")
    txn.add(write_data_files(service.log_store.store, rows([3]), service.partition_columns,
                             clock=service.clock, random=service.random))
    with pytest.raises(dc.ConcurrentDeleteReadException) as failed:
        txn.commit()
    assert failed.value.winning_version == 2
    assert confirmations == [True]
    assert service.version == 2
    assert dc.write(service, rows([4])).version == 3
    assert ids_of(uri, options) == [4]


def _delete(uri: str, options: Mapping[str, str], predicate: str) -> int:
    """A DELETE by a process of this host (it takes the table's turn)."""
    return dc.DeltaTable(uri, storage_options=dict(options)).delete(predicate)["version"]
