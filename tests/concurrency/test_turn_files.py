"""The turn files themselves (``engine/commit/host_turn.py``): who may own them, what a stopped process
holding one of their locks costs the others, and how many descriptors they take.

* A turn folder a temp cleaner removed and another user made again, with a record planted in
  it, is not used (a real second user, through ``setpriv``, when the suite runs as root); nor
  is a turn file that is a symlink, a FIFO or writable by others.
* A process stopped (SIGSTOP) while holding any lock of the turn (the turn itself, the queue
  shared or exclusive, the record as earlier versions locked it) delays the others by at most
  the patience, once: real processes, stopped for certain (``waitpid(WUNTRACED)``) before the
  writers start, each writer's whole run bounded by a timeout far below the patience it would
  otherwise wait per commit.
* Under a low limit of open files, turn files never make a write fail.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.commit import host_turn
from deltacommit.engine.commit.host_turn import HostTurn

from .ops import SCHEMA
from .test_turn_hints import in_process, log_versions, start_fork_server

#: A second user for the tests that need one (no account is needed to act as a uid).
OTHER_UID = 4242


@pytest.fixture
def turn_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    start_fork_server()
    folder = tmp_path / "turns"
    monkeypatch.setenv(host_turn.DIR_VARIABLE, str(folder))
    monkeypatch.delenv(host_turn.SWITCH, raising=False)
    yield folder


def create_without_turns(uri: str) -> dc.DeltaTable:
    """The table, created before the test makes its turn folder: version 0 takes the host turn
    like any version, and would make the folder first."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(host_turn.SWITCH, "off")
        return dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])


def rows(ids: list[int]) -> pa.Table:
    return pa.table({"p": ["a"] * len(ids), "id": ids, "seen": [0] * len(ids)}, schema=SCHEMA)


def turn_of(table: dc.DeltaTable) -> HostTurn:
    turn = HostTurn.for_table(table.log_store, 1.0)
    assert turn is not None
    return turn


def ids_of(uri: str) -> list[int]:
    return sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist())


# --------------------------------------------------------------------------- ownership


def as_other_user(script: str) -> None:
    subprocess.run(["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}",
                    "--clear-groups", "sh", "-c", script], check=True, timeout=60)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="acting as a second user needs root and setpriv")
def test_a_turn_folder_another_user_made_again_is_not_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    shared = Path(tempfile.mkdtemp(dir="/tmp", prefix="dc-shared-"))  # like /tmp itself
    try:
        os.chmod(shared, 0o1777)
        folder = shared / "turns"
        monkeypatch.setenv(host_turn.DIR_VARIABLE, str(folder))
        first = dc.DeltaTable.create(str(tmp_path / "a"), SCHEMA, partition_by=["p"])
        second = dc.DeltaTable.create(str(tmp_path / "b"), SCHEMA, partition_by=["p"])
        assert dc.write(first, rows([1])).version == 1  # a long-running service's turn files
        assert (folder / f"{turn_of(first).key}.record").exists()
        key = turn_of(second).key
        shutil.rmtree(folder)  # a temp folder cleaner
        # Another user makes the folder again and plants a record and files for the second
        # table, as the service would have made them.
        as_other_user(f"mkdir -m 700 {folder} && printf 'DCT2forged' > {folder}/{key}.record "
                      f"&& : > {folder}/{key}.turn && : > {folder}/{key}.queue "
                      f"&& printf '{{}}' > {folder}/{key}.commit")
        planted = {p.name: p.read_bytes() for p in folder.iterdir()}
        with caplog.at_level(logging.WARNING, logger="deltacommit.engine.commit.host_turn"):
            assert [dc.write(second, rows([k])).version for k in (2, 3)] == [1, 2]
            assert dc.write(first, rows([4])).version == 2
        # Nothing in the other user's folder was opened for writing, created or changed.
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == planted
        assert all(p.stat().st_uid == OTHER_UID for p in folder.iterdir())
        warned = [r.getMessage() for r in caplog.records if str(folder) in r.getMessage()]
        assert len(warned) == 1 and f"owner uid {OTHER_UID}" in warned[0], warned
        assert ids_of(str(tmp_path / "b")) == [2, 3]
        assert ids_of(str(tmp_path / "a")) == [1, 4]
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.mark.parametrize("planted", ["symlink", "fifo", "writable by others", "directory"])
def test_a_turn_file_that_is_not_a_private_regular_file_is_refused(
        tmp_path: Path, turn_dir: Path, planted: str, caplog: pytest.LogCaptureFixture) -> None:
    uri = str(tmp_path / "t")
    table = create_without_turns(uri)
    turn_dir.mkdir(mode=0o700)
    record = Path(turn_of(table).path + ".record")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"not a record")
    if planted == "symlink":
        record.symlink_to(elsewhere)
    elif planted == "fifo":
        os.mkfifo(record, 0o600)
    elif planted == "directory":
        record.mkdir(mode=0o700)
    else:
        record.write_bytes(b"")
        os.chmod(record, 0o666)
    with caplog.at_level(logging.WARNING, logger="deltacommit.engine.commit.host_turn"):
        assert [dc.write(table, rows([k])).version for k in range(3)] == [1, 2, 3]
    assert elsewhere.read_bytes() == b"not a record"
    assert sum(str(turn_dir) in r.getMessage() for r in caplog.records) == 1
    assert ids_of(uri) == [0, 1, 2]


# --------------------------------------------------------------------------- stopped processes

_STOP_HOLDING = """
import fcntl, os, signal, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, getattr(fcntl, sys.argv[2]))
os.kill(os.getpid(), signal.SIGSTOP)
"""


class Stopped:
    """A process holding an ``flock`` on ``path`` (``how``: LOCK_SH or LOCK_EX), stopped."""

    def __init__(self, path: str, how: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _STOP_HOLDING, path, how])
        _, status = os.waitpid(self.proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), status

    def __enter__(self) -> Stopped:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


def _appends(uri: str, ids: list[int], patience: float, give_way: float | None) -> list[int]:
    """A process of this host appending one row per id, each with its own commit."""
    if give_way is not None:
        host_turn.GIVE_WAY = give_way
    table = dc.DeltaTable(uri, policy=dc.CommitPolicy(turn_patience=patience))
    return [dc.write(table, rows([k])).version for k in ids]


def appends(uri: str, ids: list[int], patience: float, *, give_way: float | None = None,
            timeout: float = 60.0) -> list[int]:
    result = in_process(functools.partial(_appends, uri, ids, patience, give_way),
                        timeout=timeout)
    assert isinstance(result, list)
    return result


@pytest.fixture
def table(tmp_path: Path, turn_dir: Path) -> dc.DeltaTable:
    t = create_without_turns(str(tmp_path / "t"))
    turn_dir.mkdir(mode=0o700)
    return t


def test_a_stopped_holder_is_waited_for_once_not_by_every_new_process(
        table: dc.DeltaTable) -> None:
    with Stopped(turn_of(table).path + ".turn", "LOCK_EX"):
        # The first writer waits its patience, then passes the holder by and says so.
        assert appends(table.uri, [1], 0.3) == [1]
        # A new process would wait ten minutes per commit for that holder: it does not wait.
        assert appends(table.uri, [2, 3, 4], 600.0) == [2, 3, 4]
    # Once the holder is gone, the turn is taken again.
    assert appends(table.uri, [5], 600.0) == [5]
    assert log_versions(table.uri, {}) == [0, 1, 2, 3, 4, 5]


def test_a_process_stopped_holding_the_record_file_delays_nobody(table: dc.DeltaTable) -> None:
    """As an earlier version's reader would hold it: the record takes no lock any more."""
    for how in ("LOCK_SH", "LOCK_EX"):
        with Stopped(turn_of(table).path + ".record", how):
            versions = appends(table.uri, [1, 2, 3], 600.0)
        assert versions == [versions[0], versions[0] + 1, versions[0] + 2]
    assert ids_of(table.uri) == [1, 1, 2, 2, 3, 3]


def test_a_stopped_waiter_makes_the_last_committer_give_way_once(table: dc.DeltaTable) -> None:
    with Stopped(turn_of(table).path + ".queue", "LOCK_SH"):
        # Giving way for a minute per commit would take four minutes; once, a second.
        assert appends(table.uri, [1, 2, 3, 4, 5], 1.0, give_way=60.0) == [1, 2, 3, 4, 5]


def test_a_process_stopped_while_looking_for_waiters_does_not_block_waiting(
        table: dc.DeltaTable, monkeypatch: pytest.MonkeyPatch) -> None:
    turn = turn_of(table)
    waiting = threading.Event()
    wait = HostTurn._wait

    def announced(self: HostTurn, *args: object) -> bool:
        waiting.set()
        return wait(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(HostTurn, "_wait", announced)
    with Stopped(turn.path + ".queue", "LOCK_EX"):
        held = os.open(turn.path + ".turn", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(held, fcntl.LOCK_EX)  # another process's turn, handed on below
        results: list[int] = []
        done = threading.Event()

        def write() -> None:
            results.append(dc.write(dc.DeltaTable(
                table.uri, policy=dc.CommitPolicy(turn_patience=600.0)), rows([1])).version)
            done.set()

        threading.Thread(target=write, daemon=True).start()
        assert waiting.wait(timeout=60)
        os.close(held)
        assert done.wait(timeout=60), "blocked behind a process stopped holding the queue"
    assert results == [1]


# --------------------------------------------------------------------------- descriptors

_MANY_TABLES = """
import os, resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (160, hard))
import pyarrow as pa
import deltacommit as dc
schema = pa.schema([("id", pa.int64())])
root = sys.argv[1]
tables = [dc.DeltaTable.create(os.path.join(root, f"t{i}"), schema) for i in range(100)]
for round in range(2):
    for i, t in enumerate(tables):
        assert dc.write(t, pa.table({"id": [i]}, schema=schema)).version == round + 1
print(len(os.listdir("/proc/self/fd")))
"""


def test_turn_files_of_a_hundred_tables_fit_in_160_descriptors(
        tmp_path: Path, turn_dir: Path) -> None:
    env = {**os.environ, host_turn.DIR_VARIABLE: str(turn_dir)}
    done = subprocess.run([sys.executable, "-c", _MANY_TABLES, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) < 160
    # Turns were taken (a record per table written last), not turned off.
    assert len(list(turn_dir.glob("*.record"))) == 100


def test_running_out_of_descriptors_makes_a_commit_race_not_fail(
        tmp_path: Path, turn_dir: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    uri = str(tmp_path / "t")
    table = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    opened = host_turn._open_turn

    def no_descriptor(folder: str, key: str) -> host_turn._Files:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(host_turn, "_open_turn", no_descriptor)
    with caplog.at_level(logging.WARNING, logger="deltacommit.engine.commit.host_turn"):
        assert [dc.write(table, rows([k])).version for k in (1, 2)] == [1, 2]
    assert sum("descriptor" in r.getMessage() for r in caplog.records) <= 1
    monkeypatch.setattr(host_turn, "_open_turn", opened)
    # The folder was not given up: the next commit takes the turn.
    assert dc.write(table, rows([3])).version == 3
    record = turn_of(table).record()
    assert record is not None and record.version == 3
