"""``Appender``: buffered appends, exactly-once offsets, resume after a crash, zombies.

Every row carries its offset as ``id``, so "each offset exactly once" is a check of the ids.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import deltacommit as dc
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.storage.local import LocalStore
from deltacommit.ops.appender import STREAMING_OPERATION
from deltacommit.runtime.clock import ManualClock

from ..concurrency.hooks import HookedLogStore
from .common import SCHEMA, actions_of, commit_info, ids_in, rows, txns

APP = "orders-partition-0"


def offsets_in(uri: str) -> list[int]:
    return ids_in(dc.DeltaTable(uri))


def test_flushes_by_rows_record_the_last_offset_of_each_commit(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    with dc.Appender(uri, APP, flush_rows=10, flush_interval=None, partition_by=["p"]) as app:
        assert app.committed_offset is None and app.table is None
        for offset in range(35):
            assert app.append(rows(f"p{offset % 2}", [offset]), offset)
        assert app.commits == 3 and app.committed_offset == 29 and app.pending_rows == 5
    assert app.commits == 4 and app.committed_offset == 34
    table = dc.DeltaTable(uri)
    assert table.partition_columns == ["p"] and table.app_version(APP) == 34
    assert offsets_in(uri) == list(range(35))
    # Versions 1..4 (0 created the table): each records the offset of its last append.
    assert [txns(actions_of(uri, v))[APP] for v in range(1, 5)] == [9, 19, 29, 34]
    info = commit_info(actions_of(uri, 4))
    assert info["operation"] == STREAMING_OPERATION and info["isBlindAppend"] is True
    assert info["operationParameters"] == {"outputMode": "Append", "queryId": APP, "epochId": "34"}


def test_a_restarted_appender_resumes_and_skips_replays(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    with dc.Appender(uri, APP, flush_rows=4, flush_interval=None) as app:
        for offset in range(10):
            app.append(rows("x", [offset]), offset)
    with dc.Appender(uri, APP, flush_rows=4, flush_interval=None) as again:
        assert again.committed_offset == 9
        accepted = [again.append(rows("x", [offset]), offset) for offset in range(5, 15)]
        assert accepted == [False] * 5 + [True] * 5 and again.skipped == 5
    assert offsets_in(uri) == list(range(15))
    # Another app id on the same table is independent.
    with dc.Appender(uri, "other", flush_interval=None) as other:
        assert other.committed_offset is None
        other.append(rows("y", [1000]), 0)
    assert offsets_in(uri) == [*range(15), 1000]


_CHILD = """
import sys
import pyarrow as pa
import deltacommit as dc
uri, app = sys.argv[1], sys.argv[2]
schema = pa.schema([("p", pa.string()), ("id", pa.int64())])
appender = dc.Appender(uri, app, flush_rows=5, flush_interval=None)
for offset in range(13):
    appender.append(pa.table({"p": ["x"], "id": [offset]}, schema=schema), offset)
# Offsets 0-9 are committed (two flushes), 10-12 only buffered: this is where it dies.
print(appender.committed_offset, appender.pending_rows, flush=True)
sys.stdin.read()
"""


def test_a_process_killed_between_flushes_is_resumed_exactly_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    child = subprocess.Popen([sys.executable, "-c", _CHILD, uri, APP], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().split() == ["9", "3"]
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    assert offsets_in(uri) == list(range(10))

    # The restarted consumer replays its source from the beginning.
    with dc.Appender(uri, APP, flush_rows=5, flush_interval=None) as app:
        assert app.committed_offset == 9
        for offset in range(20):
            app.append(rows("x", [offset]), offset)
        assert app.skipped == 10
    assert offsets_in(uri) == list(range(20))
    assert dc.DeltaTable(uri).app_version(APP) == 19


def test_flush_interval_on_an_injected_clock(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    clock = ManualClock()
    dc.DeltaTable.create(uri, SCHEMA)
    table = dc.DeltaTable(uri, clock=clock)
    app = dc.Appender(table, APP, flush_rows=1000, flush_interval=5, background=False)
    app.append(rows("x", [0]), 0)
    clock.advance(3)
    app.append(rows("x", [1]), 1)
    assert app.poll() is None and app.commits == 0
    clock.advance(2)  # the oldest append is now 5 s old
    result = app.poll()
    assert result is not None and app.commits == 1 and app.committed_offset == 1
    app.append(rows("x", [2]), 2)
    clock.advance(6)
    app.append(rows("x", [3]), 3)  # the check runs on every append
    assert app.commits == 2 and app.pending_rows == 0
    app.close()
    assert app.commits == 2 and offsets_in(uri) == [0, 1, 2, 3]


def test_the_background_thread_flushes_after_the_interval(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)
    committed = threading.Event()
    table = dc.DeltaTable(uri, log_store=HookedLogStore(LocalStore(uri), lambda v: committed.set()))
    with dc.Appender(table, APP, flush_rows=1000, flush_interval=0.05) as app:
        app.append(rows("x", [0]), 0)
        assert committed.wait(30), "the background flush never came"
    assert app.commits == 1 and offsets_in(uri) == [0]


def test_a_zombie_with_the_same_app_id_never_duplicates(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)
    zombie = dc.Appender(uri, APP, flush_rows=1000, flush_interval=None)
    current = dc.Appender(uri, APP, flush_rows=1000, flush_interval=None)
    for offset in range(10):
        current.append(rows("x", [offset]), offset)
    current.flush()
    # The zombie never saw that commit; it flushes 0-14: only 10-14 are new.
    for offset in range(15):
        assert zombie.append(rows("x", [offset]), offset)
    zombie.flush()
    assert zombie.committed_offset == 14
    assert offsets_in(uri) == list(range(15))
    # Everything it wrote for the lost attempt was deleted again.
    on_disk = {m.path for m in LocalStore(uri).list("part-")}
    assert on_disk == {f.path for f in dc.DeltaTable(uri).files()}
    # Fully behind: a flush of nothing new commits nothing.
    late = dc.Appender(uri, APP, flush_rows=1000, flush_interval=None)
    current.append(rows("x", [15]), 15)
    current.close()
    assert late.append(rows("x", [15]), 15)
    assert late.flush() is None and late.committed_offset == 15
    assert offsets_in(uri) == list(range(16))
    zombie.close()
    late.close()


def test_a_failed_flush_keeps_its_rows(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)
    failing = [True]

    def maybe_fail(version: int) -> None:
        if failing[0]:
            raise dc.StorageError("put-if-absent", f"{uri}/_delta_log", "injected")

    table = dc.DeltaTable(uri, log_store=HookedLogStore(LocalStore(uri), maybe_fail))
    app = dc.Appender(table, APP, flush_rows=2, flush_interval=None)
    app.append(rows("x", [0]), 0)
    with pytest.raises(dc.StorageError, match="injected"):
        app.append(rows("x", [1]), 1)
    assert app.pending_rows == 2 and app.committed_offset is None
    failing[0] = False
    app.append(rows("x", [2]), 2)
    assert app.committed_offset == 2 and offsets_in(uri) == [0, 1, 2]
    app.close()


def test_appender_input_errors(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    with pytest.raises(dc.InvalidArgumentError, match="app_id"):
        dc.Appender(uri, "")
    with pytest.raises(dc.InvalidArgumentError, match="flush_rows"):
        dc.Appender(uri, APP, flush_rows=0)
    with pytest.raises(dc.InvalidArgumentError, match="flush_interval"):
        dc.Appender(uri, APP, flush_interval=0)
    app = dc.Appender(uri, APP, flush_interval=None)
    app.append(rows("x", [5]), 5)
    with pytest.raises(dc.InvalidArgumentError, match="offset 5 is not greater than the previous offset 5"):
        app.append(rows("x", [5]), 5)
    with pytest.raises(dc.InvalidArgumentError, match=r"an integer from 0 to 2\*\*63-1"):
        app.append(rows("x", [5]), -1)
    app.close()
    with pytest.raises(dc.InvalidArgumentError, match="closed"):
        app.append(rows("x", [6]), 6)
    # Leaving a block by an exception drops the buffer: its offsets were never recorded.
    with pytest.raises(RuntimeError), dc.Appender(uri, APP, flush_interval=None) as failed:
        failed.append(rows("x", [6]), 6)
        raise RuntimeError("consumer crashed")
    assert offsets_in(uri) == [5]
    assert isinstance(dc.DeltaTable(uri).log_store, ConditionalPutLogStore)
