"""Background puts (``ObjectStore.put_soon``): awaited by ``make_durable``, and usable in a
process forked from one that had started some (a Spark Python worker forked by its daemon)."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys

import pyarrow as pa

import deltacommit as dc
from deltacommit.io.storage.memory import MemoryStore
from deltacommit.testing import unique_name


def test_make_durable_waits_for_the_put() -> None:
    store = MemoryStore(unique_name("bg"))
    store.put_soon("p/a.parquet", b"a")
    store.make_durable(["p/a.parquet"])
    assert store.get("p/a.parquet") == b"a"
    assert not store.awaits_durable("p/a.parquet")


def _child(name: str) -> None:
    store = MemoryStore(name)
    store.put_soon("child.parquet", b"c")
    store.make_durable(["child.parquet"])
    assert store.get("child.parquet") == b"c"
    # The parent's state of the table is reused here; its identity proof needs a thread too.
    assert dc.write(f"memory://{name}/t", pa.table({"a": [2]})).version == 3


def test_a_forked_child_gets_its_own_threads() -> None:
    """The parent's pool threads do not exist in a forked child: a put queued to them would
    never run, and the child's commit would wait for it forever."""
    name = unique_name("bg-fork")
    parent = MemoryStore(name)
    parent.put_soon("parent.parquet", b"p")
    parent.make_durable(["parent.parquet"])
    dc.write(f"memory://{name}/t", pa.table({"a": [0]}))
    assert dc.write(f"memory://{name}/t", pa.table({"a": [1]})).version == 2
    child = multiprocessing.get_context("fork").Process(target=_child, args=(name,))
    child.start()
    child.join(60)
    assert child.exitcode == 0


AT_EXIT = """
import atexit
import pyarrow as pa
import deltacommit as dc
uri = "memory://at-exit/t"
dc.write(uri, pa.table({"a": [0]}))
stale = dc.DeltaTable(uri)
other = dc.DeltaTable(uri)
dc.write(other, pa.table({"a": [1]}))
dc.write(other, pa.table({"a": [2]}))
def late_write():
    # loses the races for versions 2 and 3, reading each, and commits version 4
    print("version", dc.write(stale, pa.table({"a": [3]})).version)
    fresh = dc.DeltaTable(uri)
    print("read", fresh.version, fresh.get_add_actions().num_rows)
atexit.register(late_write)
"""


def test_a_write_while_the_interpreter_shuts_down_runs_its_work_itself() -> None:
    """Past the interpreter's shutdown no thread pool accepts work, yet commits still happen
    there: a group committer answering the processes it serves, an ``atexit`` handler.  The
    upload, the reads of the versions that won and the rest run in the writer's own thread."""
    done = subprocess.run([sys.executable, "-c", AT_EXIT], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["version 4", "read 4 4"], done.stderr


AT_EXIT_READS = """
import atexit
import pyarrow as pa
import deltacommit as dc
import deltacommit.ops.maintenance as maintenance
from deltacommit.ops.verify import verify_table
uri = "memory://at-exit-reads/t"
dc.write(uri, pa.table({"p": ["a", "b", "c"], "x": [0, 1, 2]}), partition_by=["p"])
def late_work():
    t = dc.DeltaTable(uri)
    r = dc.write(t, pa.table({"p": ["a", "b", "c"], "x": [3, 4, 5]}))
    print("wrote", r.version, r.num_files)
    print("read", sorted(t.to_arrow().column("x").to_pylist()))
    print("verified", verify_table(uri, log_store=t.log_store).ok)
    print("compacted", t.optimize.compact()["numFilesRemoved"])
    maintenance.DELETE_BATCH = 1  # one delete request per file, several at once
    print("vacuumed", len(t.vacuum(retention_hours=0, dry_run=False,
                                   enforce_retention_duration=False)))
atexit.register(late_work)
"""


def test_reading_and_maintaining_a_table_while_the_interpreter_shuts_down() -> None:
    """Work spread over threads of its own (a write of several files, reading the table,
    verifying its log, compacting, vacuuming) runs in the caller's thread at shutdown instead
    of failing with "cannot schedule new futures after interpreter shutdown"."""
    done = subprocess.run([sys.executable, "-c", AT_EXIT_READS], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout.split("\n")[:5] == [
        "wrote 2 3", "read [0, 1, 2, 3, 4, 5]", "verified True", "compacted 6",
        "vacuumed 6"], done.stderr
