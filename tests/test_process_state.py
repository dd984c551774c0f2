"""Process-wide caches and pools (``runtime.process_state``): a forked child starts afresh.

A lock that another thread of the parent holds at the fork stays held in the child for ever
unless the child makes a new one; a pool's threads do not exist in the child; a botocore
client's connections are the parent's sockets.  Each test forks while the parent is busy in
the way that would break a child that inherited the state as it was.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.snapshot import state_cache
from deltacommit.io.aws import config as aws_config
from deltacommit.runtime.process_state import registered

#: How long a child may take to write a small table before it counts as stuck.
PATIENCE_SECONDS = 60.0


@contextmanager
def held(lock_of: Callable[[], AbstractContextManager[object]]) -> Iterator[None]:
    """Another thread of this process holds the lock until the block ends."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock_of():
            taken.set()
            release.wait(PATIENCE_SECONDS)

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(PATIENCE_SECONDS)
    try:
        yield
    finally:
        release.set()
        holder.join()


def run_in_child(work: Callable[[], None]) -> int:
    """Fork; the child runs ``work`` and exits 0 (1 if it raised).  Returns the exit status,
    or fails the test if the child is still running after the patience (then kills it)."""
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            work()
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + PATIENCE_SECONDS
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the forked child was still blocked after the patience")


def _write_and_read(uri: str) -> None:
    dc.write(uri, pa.table({"x": [1, 2]}))
    assert dc.DeltaTable(uri).to_arrow().num_rows >= 2


def test_a_child_forked_while_another_thread_holds_the_table_states_lock_writes_and_reads(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "table")
    _write_and_read(uri)  # the parent's caches hold this table
    with held(lambda: state_cache._lock):
        assert run_in_child(lambda: _write_and_read(uri)) == 0
    assert dc.DeltaTable(uri).to_arrow().num_rows == 4


def test_a_forked_child_starts_with_no_table_states_and_no_clients(tmp_path: Path) -> None:
    uri = str(tmp_path / "table")
    _write_and_read(uri)
    aws_config.AwsConfig(region="us-east-1", access_key_id="a",
                         secret_access_key="b").s3_client()  # a client in the parent's cache
    assert state_cache._entries and aws_config._CLIENTS

    def child() -> None:
        assert not state_cache._entries
        assert not aws_config._CLIENTS and not aws_config._SESSIONS

    assert run_in_child(child) == 0
    assert state_cache._entries and aws_config._CLIENTS


def test_the_process_wide_caches_and_pools_are_declared() -> None:
    names = " ".join(registered())
    for module in ("engine.snapshot.state_cache", "io.logstore.knowledge", "io.aws.config",
                   "io.storage.background", "engine.commit.host_turn", "runtime.clock",
                   "ops.auto_compact"):
        assert f"({module})" in names, module
