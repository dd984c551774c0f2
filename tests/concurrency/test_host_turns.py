"""Host turns (``engine/commit/host_turn.py``): the processes of one machine take turns to claim.

Each test counts: the versions another process recorded are read instead of lost to, a holder
that hangs or dies is passed by, a commit failing in the loop hands the turn on, a record of
another table (one deleted and created again) is never trusted, and turns can be turned off.
Other processes are real ones (a fork server); a hung holder is an ``flock`` this test holds.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import multiprocessing as mp
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.engine.commit import host_turn, turn_sweep
from deltacommit.engine.commit.commit_info import previous_commit
from deltacommit.engine.commit.host_turn import HostTurn, Record
from deltacommit.io.datafiles import write_data_files
from deltacommit.protocol.log.names import commit_path

from .ops import SCHEMA

RACING = dc.CommitPolicy(host_turns=False)


def rows(worker: int, n: int = 1) -> pa.Table:
    return pa.table({"p": ["a"] * n, "id": [worker * 100 + k for k in range(n)],
                     "seen": [0] * n}, schema=SCHEMA)


@pytest.fixture(autouse=True)
def turn_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private turn folder per test, inherited by the processes it starts."""
    folder = tmp_path / "turns"
    monkeypatch.setenv(host_turn.DIR_VARIABLE, str(folder))
    monkeypatch.delenv(host_turn.SWITCH, raising=False)
    yield folder


def _writer(uri: str, appends: int, out: mp.Queue[list[int] | str]) -> None:
    try:
        table = dc.DeltaTable(uri)
        out.put([dc.write(table, rows(1000 + k)).version for k in range(appends)])
    except BaseException as e:
        out.put(f"{type(e).__name__}: {e}")


def _deleter(uri: str, appends: int, out: mp.Queue[list[int] | str]) -> None:
    try:
        out.put([dc.DeltaTable(uri).delete("p = 'a'")["version"]])
    except BaseException as e:
        out.put(f"{type(e).__name__}: {e}")


def in_another_process(target: object, uri: str, appends: int = 1) -> list[int]:
    """Run ``target`` in a process of its own (with this process's environment); its versions."""
    ctx = mp.get_context("spawn")
    out: mp.Queue[list[int] | str] = ctx.Queue()
    p = ctx.Process(target=target, args=(uri, appends, out))
    p.start()
    result = out.get(timeout=120)
    p.join(timeout=60)
    assert p.exitcode == 0 and not isinstance(result, str), result
    return result


def hold(turn: HostTurn) -> int:
    """Take the table's turn as a hung process would: an ``flock`` on a descriptor of its own."""
    os.makedirs(os.path.dirname(turn.path), mode=0o700, exist_ok=True)
    fd = os.open(turn.path + ".turn", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def turn_of(table: dc.DeltaTable) -> HostTurn:
    turn = HostTurn.for_table(table.log_store, 1.0)
    assert turn is not None
    return turn


def test_a_writer_reads_what_another_process_recorded_instead_of_losing_a_claim(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    mine = dc.DeltaTable(uri)          # kept at version 0
    racing = dc.DeltaTable(uri, policy=RACING)

    assert in_another_process(_writer, uri, 3) == [1, 2, 3]
    r = dc.write(mine, rows(1))
    # Versions 1-3 were read from the record the other process left: the first claim won.
    assert (r.version, r.attempts) == (4, 1)

    assert in_another_process(_writer, uri, 2) == [5, 6]
    # The same writer without turns learns of them by losing.
    r = dc.write(racing, rows(2))
    assert r.version == 7 and r.attempts > 1
    ids = dc.DeltaTable(uri).to_arrow().column("id").to_pylist()
    other = [(1000 + k) * 100 for k in (0, 1, 2, 0, 1)]
    assert sorted(ids) == sorted([*other, 100, 200])


def test_the_record_names_the_commit_and_its_writer(tmp_path: Path, turn_dir: Path) -> None:
    uri = str(tmp_path / "t")
    table = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    r = dc.write(table, rows(1))
    turn = turn_of(table)
    record = turn.record()
    assert record is not None
    assert (record.version, record.digest, record.settled, record.pid) == (
        r.version, r.digest, True, os.getpid())

    def digest(version: int) -> str:
        return hashlib.sha256((tmp_path / "t" / commit_path(version)).read_bytes()).hexdigest()

    assert record.digest == digest(1)
    # Alone on the table, a process writes no commit a second time for nobody.
    assert (turn_dir / f"{turn.key}.carry").stat().st_size == 0
    # Once another process writes it too, each commit travels with its record, byte for
    # byte, and names the commit it was built on (what lets the next writer take the one
    # handed on before it instead of reading it).
    assert in_another_process(_writer, uri) == [2]
    r = dc.write(table, rows(2))
    record = turn.record()
    assert record is not None and (record.version, record.digest) == (3, digest(3))
    assert turn.carried(record) == (tmp_path / "t" / commit_path(3)).read_bytes()
    assert previous_commit((tmp_path / "t" / commit_path(3)).read_bytes()) == digest(2)
    table_files = [p for p in turn_dir.iterdir() if p.name != turn_sweep.SWEEP_MARK]
    assert sorted(p.suffix for p in table_files) == [".carry", ".queue", ".record", ".turn"]
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in turn_dir.iterdir())


def test_a_conflict_found_in_the_recorded_versions_fails_and_hands_the_turn_on(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    dc.write(table, rows(1))
    x = table.transaction()
    x.scan(predicate="p = 'a'")
    x.add(write_data_files(table.log_store.store, rows(2), table.partition_columns,
                           clock=table.clock, random=table.random))
    assert in_another_process(_deleter, uri) == [2]
    with pytest.raises(dc.ConcurrentDeleteReadException) as failed:
        x.commit()
    assert failed.value.winning_version == 2
    # The turn is free again: a hung process could take it at once.
    os.close(hold(turn_of(table)))
    assert dc.DeltaTable(uri).version == 2


def test_a_hung_holder_is_passed_by_after_the_patience_and_not_waited_for_again(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    impatient = dc.DeltaTable(uri, policy=dc.CommitPolicy(turn_patience=0.2))
    fd = hold(turn_of(impatient))
    try:
        assert dc.write(impatient, rows(1)).attempts == 1
        # A writer that would wait a minute does not wait at all: the holder that hung has
        # not handed the turn on since it was passed by.
        patient = dc.DeltaTable(uri, policy=dc.CommitPolicy(turn_patience=60.0))
        done = threading.Event()
        results: list[dc.WriteResult] = []

        def write() -> None:
            results.append(dc.write(patient, rows(2)))
            done.set()

        threading.Thread(target=write, daemon=True).start()
        assert done.wait(timeout=30), "waited for a turn already passed by"
        assert results[0].version == 2
    finally:
        os.close(fd)
    # Handed on, the turn is taken again.
    assert dc.write(patient, rows(3)).version == 3
    assert turn_of(patient).record() is not None


def test_a_waiting_writer_tries_the_turn_every_poll_but_reads_the_record_every_watch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record only tells a waiter whether the holder moves; reading it at every poll cost
    the waiters' CPU.  A hung holder is still passed by, after the patience and not before."""
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    patience = 0.3
    table = dc.DeltaTable(uri, policy=dc.CommitPolicy(turn_patience=patience))
    reads = 0
    read = host_turn._Files.read

    def counted(files: host_turn._Files) -> bytes:
        nonlocal reads
        reads += 1
        return read(files)

    polls = 0
    lock_nb = host_turn._lock_nb

    def counted_lock(fd: int, how: int) -> bool:
        nonlocal polls
        polls += 1
        return lock_nb(fd, how)

    monkeypatch.setattr(host_turn._Files, "read", counted)
    monkeypatch.setattr(host_turn, "_lock_nb", counted_lock)
    fd = hold(turn_of(table))
    try:
        began = time.monotonic()
        assert dc.write(table, rows(1)).version == 1  # the hung holder passed by: raced
        waited = time.monotonic() - began
    finally:
        os.close(fd)
    assert waited >= patience
    # Reads on taking the turn and before waiting, then one per WATCH and the one that
    # finds the patience spent; polls far more often (fewer on a busy machine).
    assert 2 <= reads <= 4 + waited / host_turn.WATCH
    assert polls > reads


def test_a_record_of_a_table_deleted_and_created_again_is_not_trusted(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    assert in_another_process(_writer, uri, 3) == [1, 2, 3]   # recorded: version 3
    shutil.rmtree(tmp_path / "t")
    new = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    r = dc.write(new, rows(7))
    # Version 3 of the old table is not in the new one: the record is passed over.
    assert (r.version, r.attempts) == (1, 1)
    assert dc.DeltaTable(uri).to_arrow().column("id").to_pylist() == [700]
    record = turn_of(new).record()
    assert record is not None and (record.version, record.digest) == (1, r.digest)


def test_a_forged_record_far_ahead_costs_one_listing_and_loses_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    turn = turn_of(table)
    assert turn.take(lambda: None)
    turn.publish(Record(10**12, "ab" * 32, settled=True, pid=os.getpid() + 1))
    turn.release()
    r = dc.write(table, rows(1))
    assert (r.version, r.attempts) == (1, 1)
    assert dc.DeltaTable(uri).version == 1


def test_turns_off_by_environment_or_policy_leave_no_files(
        tmp_path: Path, turn_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = str(tmp_path / "t")
    table = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], policy=RACING)
    dc.write(table, rows(1))
    assert not turn_dir.exists()
    monkeypatch.setenv(host_turn.SWITCH, "off")
    dc.write(dc.DeltaTable(uri), rows(2))
    assert not turn_dir.exists()
    monkeypatch.delenv(host_turn.SWITCH)
    dc.write(dc.DeltaTable(uri), rows(3))
    assert turn_dir.exists()


def test_a_turn_folder_others_can_write_is_refused_and_commits_go_on(
        tmp_path: Path, turn_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    turn_dir.mkdir(mode=0o700)
    os.chmod(turn_dir, 0o777)
    uri = str(tmp_path / "t")
    table = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    with caplog.at_level(logging.WARNING, logger="deltacommit.engine.commit.host_turn"):
        assert [dc.write(table, rows(k)).version for k in range(3)] == [1, 2, 3]
    assert list(turn_dir.iterdir()) == []
    assert sum("writable" in r.getMessage() and str(turn_dir) in r.getMessage()
               for r in caplog.records) == 1


def test_a_forked_child_does_not_inherit_the_parents_turn(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    turn = HostTurn.for_table(table.log_store, 0.0)
    assert turn is not None and turn.take(lambda: None)
    try:
        pid = os.fork()
        if pid == 0:  # the child: holds nothing, and cannot take what the parent holds
            child = HostTurn.for_table(table.log_store, 0.0)
            ok = (host_turn._files == {} and child is not None
                  and not child.take(lambda: None))
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        turn.release()
    # The child's exit released nothing the parent still held, and the parent's release did.
    os.close(hold(turn))


@given(st.integers(0, 2**63 - 1), st.binary(min_size=32, max_size=32), st.booleans(),
       st.integers(1, 2**31))
def test_a_record_reads_back_as_written(version: int, digest: bytes, settled: bool,
                                        pid: int) -> None:
    r = Record(version, digest.hex(), settled, pid)
    assert Record.decode(r.encode()) == r


def test_record_decoding_refuses_anything_but_a_whole_record() -> None:
    r = Record(42, "cd" * 32, settled=True, pid=1234)
    data = r.encode()
    assert Record.decode(data) == r
    assert Record.decode(b"") is None
    assert Record.decode(bytes(len(data))) is None  # a slot never written
    whole = len(data.rstrip(b"\0"))  # the slot's padding carries nothing
    assert Record.decode(data[:whole - 1]) is None
    for i in range(whole):
        torn = bytearray(data)
        torn[i] ^= 0x40
        assert Record.decode(bytes(torn)) is None


def test_a_process_keeps_a_bounded_number_of_turn_files_open(tmp_path: Path) -> None:
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = fds()
    capacity = host_turn._capacity()
    for i in range(capacity * 2):
        turn = HostTurn(f"table-{i}", 0.0)
        assert turn.take(lambda: None)
        turn.publish(Record(i, "ab" * 32))
        turn.release()
    assert len(host_turn._files) <= capacity
    assert fds() - before <= 4 * capacity  # four files per table
    # A turn whose files were closed is opened again when next taken, its record intact.
    first = HostTurn("table-0", 0.0)
    assert first.take(lambda: None)
    first.release()
    record = first.record()
    assert record is not None and record.version == 0
    # Commits go on beside them.
    uri = str(tmp_path / "t")
    table = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    assert [dc.write(table, rows(k)).version for k in range(2)] == [1, 2]


def test_a_writer_taking_the_turn_again_at_once_gives_way_to_one_waiting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process committing back to back would otherwise take the turn again before a waiting
    one, which looks only every POLL, ever saw it free.  The waiter here is a thread with
    descriptors of its own (``flock`` tells open files apart, not processes), blocked on the
    turn as a process would wait for it."""
    monkeypatch.setattr(host_turn, "GIVE_WAY", 60.0)  # only the waiter's taking ends it
    uri = str(tmp_path / "t")
    table = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    mine = turn_of(table)
    assert mine.take(lambda: None)
    mine.publish(Record(7, "ab" * 32, settled=True))  # this process committed last
    mine.release()
    # The process holds the turn again on its own descriptor, as between two commits that
    # follow each other at once: no waiter can have taken it in between.
    files = host_turn._files_for(mine.key)
    assert files is not None
    fcntl.flock(files.turn_fd, fcntl.LOCK_EX)
    queued = threading.Event()
    served = threading.Event()
    release = threading.Event()

    def waiter() -> None:
        queue = os.open(mine.path + ".queue", os.O_RDWR)
        fd = os.open(mine.path + ".turn", os.O_RDWR)
        fcntl.flock(queue, fcntl.LOCK_SH)
        queued.set()
        fcntl.flock(fd, fcntl.LOCK_EX)   # blocks until the process lets the turn go
        served.set()
        fcntl.flock(queue, fcntl.LOCK_UN)
        release.wait(timeout=60)
        os.close(fd)
        os.close(queue)

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    assert queued.wait(timeout=30)
    again = turn_of(table)
    taken: list[bool] = []
    taker = threading.Thread(
        target=lambda: taken.append(again.take(lambda: None)), daemon=True)
    taker.start()
    assert served.wait(timeout=30), "the process kept the turn from the waiter"
    assert not taken  # it waits behind the waiter
    release.set()
    taker.join(timeout=30)
    assert taken == [True]
    again.release()
    t.join(timeout=30)


def test_turn_files_of_tables_idle_for_a_week_are_swept_unless_held(
        tmp_path: Path, turn_dir: Path) -> None:
    turn_dir.mkdir(mode=0o700)
    week_ago = time.time() - turn_sweep.STALE_AFTER - 60
    made: dict[str, list[Path]] = {}
    for name in ("idle", "held", "recent"):
        made[name] = [turn_dir / f"{name}{suffix}"
                      for suffix in (".turn", ".record", ".queue", ".commit")]
        for p in made[name]:
            p.write_bytes(b"")
            if name != "recent":
                os.utime(p, (week_ago, week_ago))
    stray = turn_dir / "idle.commit.123.456"  # a writer died while handing a commit on
    stray.write_bytes(b"{}")
    os.utime(stray, (week_ago, week_ago))
    held = os.open(turn_dir / "held.turn", os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        uri = str(tmp_path / "t")
        table = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
        assert dc.write(table, rows(1)).version == 1  # the first use of the folder sweeps it
    finally:
        os.close(held)
    assert not any(p.exists() for p in made["idle"]) and not stray.exists()
    assert all(p.exists() for p in made["held"] + made["recent"])
    record = turn_of(table).record()
    assert record is not None and record.version == 1


def _idle_table_files(turn_dir: Path, name: str) -> list[Path]:
    """Turn files of a table last committed to over a week ago."""
    week_ago = time.time() - turn_sweep.STALE_AFTER - 60
    made = [turn_dir / f"{name}{suffix}" for suffix in (".turn", ".record", ".queue")]
    for p in made:
        p.write_bytes(b"")
        os.utime(p, (week_ago, week_ago))
    return made


@pytest.mark.parametrize("mark", ["fresh", "missing", "a day old", "in the future", "a link"])
def test_a_folder_is_swept_once_a_day_by_the_first_process_that_uses_it(
        tmp_path: Path, turn_dir: Path, monkeypatch: pytest.MonkeyPatch, mark: str) -> None:
    """A process's first commit looks at every file of the turn folder only where the
    folder's sweep mark is missing or dated over a day ago (or ahead, or is no file): the
    mark saves work and never keeps a table's files longer than a day beyond their week."""
    turn_dir.mkdir(mode=0o700)
    idle = _idle_table_files(turn_dir, "idle")
    marker = turn_dir / turn_sweep.SWEEP_MARK
    now = time.time()
    if mark == "a link":
        (tmp_path / "elsewhere").write_bytes(b"")
        marker.symlink_to(tmp_path / "elsewhere")
    elif mark != "missing":
        marker.write_bytes(b"")
        when = {"fresh": now - 60, "a day old": now - turn_sweep.SWEEP_EVERY - 60,
                "in the future": now + 3600}[mark]
        os.utime(marker, (when, when))
    monkeypatch.setattr(host_turn, "_swept", set())  # as in a process that just started
    table = dc.DeltaTable.create(str(tmp_path / "t"), SCHEMA, partition_by=["p"])
    assert dc.write(table, rows(1)).version == 1
    swept = not any(p.exists() for p in idle)
    assert swept == (mark != "fresh")
    if mark == "a link":
        assert marker.is_symlink() and (tmp_path / "elsewhere").stat().st_size == 0
        return
    assert marker.is_file() and abs(marker.stat().st_mtime - now) < (
        3600 if mark == "fresh" else 60)
    # Dated by the sweep: the next process to start leaves the folder alone.
    again = _idle_table_files(turn_dir, "again")
    monkeypatch.setattr(host_turn, "_swept", set())
    other = dc.DeltaTable.create(str(tmp_path / "u"), SCHEMA, partition_by=["p"])
    assert dc.write(other, rows(2)).version == 1
    assert all(p.exists() for p in again)


def test_a_turn_folder_deleted_while_in_use_is_made_again(tmp_path: Path, turn_dir: Path) -> None:
    uri = str(tmp_path / "t")
    table = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    assert dc.write(table, rows(1)).version == 1
    shutil.rmtree(turn_dir)  # as a temp folder cleaner would
    other = dc.DeltaTable.create(str(tmp_path / "u"), SCHEMA, partition_by=["p"])
    assert dc.write(other, rows(2)).version == 1
    record = turn_of(other).record()
    assert record is not None and record.version == 1
    assert turn_dir.stat().st_mode & 0o777 == 0o700
