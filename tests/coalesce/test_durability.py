"""No version names a data file before that file is durable, whichever way it is committed.

Writers leave their data files unsynced and the commit makes them durable (``make_durable``)
before the version naming them is written: a lone ``dc.write``, a group of them, coalesced
appends, and transactions sent to another process's committer.  A recording store (a real
local store: real files, real syncs) logs every ``make_durable`` and every commit it writes,
in order; the checks replay that log and require each file a version adds to have been made
durable before the version was written.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.group.threads import GroupCommitPolicy
from deltacommit.errors import StorageError
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.storage.base import ObjectMeta, PutMode
from deltacommit.io.storage.durable import fsync_files
from deltacommit.io.storage.local import LocalStore
from deltacommit.protocol.actions import Add, parse_commit
from deltacommit.protocol.log.names import LOG_DIR
from deltacommit.protocol.partitions import decode_add_path

from ..concurrency.hooks import HookedLogStore
from .common import SCHEMA, ids_in, rows, run_threads

N = 12


class RecordingStore(LocalStore):
    """A local store that logs, in order, the files each ``make_durable`` synced and the data
    files each commit it writes names."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.events: list[tuple[str, int, frozenset[str]]] = []
        self._lock = threading.Lock()

    def make_durable(self, paths: Sequence[str]) -> None:
        super().make_durable(paths)
        with self._lock:
            self.events.append(("sync", -1, frozenset(paths)))

    def put(self, path: str, data: bytes, *, mode: PutMode = PutMode.OVERWRITE) -> ObjectMeta:
        name = path.rpartition("/")[2]
        if path.startswith(f"{LOG_DIR}/") and name.endswith(".json") and name[:-5].isdigit():
            named = frozenset(decode_add_path(a.path)
                              for a in parse_commit(data, path) if isinstance(a, Add))
            with self._lock:
                self.events.append(("commit", int(name[:-5]), named))
        return super().put(path, data, mode=mode)

    def syncs(self) -> list[frozenset[str]]:
        return [paths for kind, _, paths in self.events if kind == "sync"]

    def committed_files(self) -> set[str]:
        return {p for kind, _, paths in self.events if kind == "commit" for p in paths}


def assert_synced_before_commit(events: list[tuple[str, int, frozenset[str]]]) -> None:
    durable: set[str] = set()
    for kind, version, paths in events:
        if kind == "sync":
            durable |= paths
        else:
            late = paths - durable
            assert not late, f"version {version} names files not yet durable: {sorted(late)}"


def recorded_table(uri: str, *, partition_by: list[str] | None = None,
                   group_commit: bool | GroupCommitPolicy = False,
                   hold_until: int = 0) -> tuple[dc.DeltaTable, RecordingStore]:
    """A table at ``uri`` (created if absent) committing through a recording store; with
    ``hold_until``, its first commit waits until that many transactions were submitted, so
    the rest queue up and form a group."""
    if not Path(uri, LOG_DIR).exists():
        dc.DeltaTable.create(uri, SCHEMA, partition_by=partition_by)
    store = RecordingStore(uri)
    holder: list[dc.DeltaTable] = []
    first = [True]

    def hold(version: int) -> None:
        if hold_until and first[0]:
            first[0] = False
            committer = holder[0].group_committer
            assert committer is not None and committer.wait_submitted(hold_until, 60)

    table = dc.DeltaTable(uri, log_store=HookedLogStore(store, hold),
                          group_commit=group_commit)  # type: ignore[arg-type]
    holder.append(table)
    return table, store


def test_a_lone_write_makes_its_files_durable_before_its_commit(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table, store = recorded_table(uri, partition_by=["p"])
    data = pa.concat_tables([rows("a", [1, 2]), rows("b", [3])])
    result = dc.write(table, data)
    assert result.num_files == 2
    assert_synced_before_commit(store.events)
    # One call for the commit's files, in two partition directories.
    assert store.syncs() == [frozenset(store.committed_files())]
    assert ids_in(table) == [1, 2, 3]


def test_a_group_makes_all_its_files_durable_at_once_before_its_commit(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table, store = recorded_table(uri, partition_by=["p"], group_commit=True, hold_until=N)
    results = run_threads(N, lambda i: dc.write(table, rows("ab"[i % 2], [i])))
    assert all(isinstance(r, dc.WriteResult) for r in results), results
    assert_synced_before_commit(store.events)
    committed = store.committed_files()
    assert len(committed) == N
    # The first writer committed alone while the others queued; they formed one group, whose
    # files were synced together: fewer syncs than files.
    assert len(store.syncs()) < N
    assert max(len(s) for s in store.syncs()) > 1
    assert ids_in(table) == list(range(N))


def test_coalesced_appends_are_durable_before_their_commit(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table, store = recorded_table(uri, partition_by=["p"], group_commit=True, hold_until=N)
    results = run_threads(N, lambda i: dc.append(table, rows("ab"[i % 2], [i])))
    assert all(isinstance(r, dc.WriteResult) for r in results), results
    assert_synced_before_commit(store.events)
    assert ids_in(table) == list(range(N))


def test_a_transaction_adding_unsynced_files_has_them_synced_by_its_commit(
        tmp_path: Path) -> None:
    from deltacommit.io.datafiles import write_data_files

    uri = str(tmp_path / "t")
    table, store = recorded_table(uri, partition_by=["p"])
    adds = write_data_files(table.log_store.store, rows("a", [5]), ["p"], clock=table.clock,
                            random=table.random, durable=False)
    with table.transaction() as txn:
        txn.add(adds, durable=False)
    assert_synced_before_commit(store.events)
    assert store.syncs() == [frozenset(decode_add_path(a.path) for a in adds)]


@pytest.fixture
def sockets() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="dc-") as d:
        yield d


def test_files_sent_to_another_committer_are_made_durable_by_it(tmp_path: Path,
                                                                 sockets: str) -> None:
    """A transaction handed to the host's committer (``processes=True``) names files its
    sender wrote unsynced: the committer makes them durable before its version."""
    uri = str(tmp_path / "t")
    policy = GroupCommitPolicy(processes=True, socket_dir=sockets)
    host, host_store = recorded_table(uri, partition_by=["p"], group_commit=policy)
    dc.write(host, rows("a", [1]))
    assert host.group_committer is not None and host.group_committer.serving
    sender, sender_store = recorded_table(uri, group_commit=policy)
    try:
        result = dc.write(sender, rows("b", [2]))
        assert sender.group_committer is not None and not sender.group_committer.serving
    finally:
        sender.group_committer.close()  # type: ignore[union-attr]
        host.group_committer.close()
    assert result.version == 2
    assert sender_store.events == []  # neither synced nor committed by the sender
    assert_synced_before_commit(host_store.events)
    assert len(host_store.committed_files()) == 2
    assert ids_in(host) == [1, 2]


class BrokenDisk(LocalStore):
    """Real files, but syncing them fails, as on a disk reporting a write error."""

    def make_durable(self, paths: Sequence[str]) -> None:
        raise StorageError("sync", str(self.root / paths[0]), "I/O error")


@pytest.mark.parametrize("group_commit", [False, True], ids=["lone", "group"])
def test_a_failed_sync_commits_nothing(tmp_path: Path, group_commit: bool) -> None:
    """If the files cannot be made durable, no version names them: each write fails with the
    sync's error, naming the file."""
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    table = dc.DeltaTable(uri, log_store=ConditionalPutLogStore(BrokenDisk(uri)),
                          group_commit=group_commit)
    results = run_threads(4, lambda i: dc.write(table, rows("a", [i])))
    for r in results:
        assert isinstance(r, StorageError) and "I/O error" in str(r) and ".parquet" in str(r)
    assert dc.DeltaTable(uri).version == 0
    assert not Path(uri, LOG_DIR, f"{1:020d}.json").exists()


@pytest.mark.parametrize("syncfs", [True, False], ids=["syncfs", "fsync-each"])
def test_fsync_files_syncs_files_in_several_directories(tmp_path: Path, syncfs: bool,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from deltacommit.io.storage import durable

    calls: list[int] = []
    real = durable._syncfs
    if not syncfs:  # the portable way: every file and directory fsynced, in parallel
        monkeypatch.setattr(durable, "_syncfs", None)
    elif real is not None:
        monkeypatch.setattr(durable, "_syncfs", lambda fd: calls.append(fd) or real(fd))
    paths = []
    for d in ("x", "y/z"):
        os.makedirs(tmp_path / d)
        for i in range(durable.SYNCFS_FROM):
            p = tmp_path / d / f"f{i}"
            p.write_bytes(b"data")
            paths.append(str(p))
    fsync_files(paths, [str(tmp_path)])  # returns once all are durable: no error to see
    assert bool(calls) == (syncfs and real is not None)
    fsync_files(paths[:1], [str(tmp_path)])
    fsync_files([])
    with pytest.raises(StorageError, match="nowhere"):
        fsync_files([*paths, str(tmp_path / "nowhere" / "f")])


def test_a_few_files_are_synced_one_by_one_not_with_their_file_system(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Below ``SYNCFS_FROM`` files (a rewrite's few large files), each file is fsynced: a
    ``syncfs`` would also wait for whatever else is dirty on the file system."""
    from deltacommit.io.storage import durable

    synced: list[str] = []
    monkeypatch.setattr(durable, "_syncfs", lambda fd: pytest.fail("syncfs for a few files"))
    real = durable.fsync_path
    monkeypatch.setattr(durable, "fsync_path", lambda p: synced.append(p) or real(p))
    paths = []
    for i in range(durable.SYNCFS_FROM - 1):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"data")
        paths.append(str(p))
    fsync_files(paths)
    assert sorted(synced) == sorted([*paths, str(tmp_path)])


def test_fsync_files_names_a_missing_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "gone")
    with pytest.raises(StorageError, match="gone"):
        fsync_files([missing])
