"""Helpers for the group-commit and appender tests: tables, data files, threads, commit files."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

import deltacommit as dc
from deltacommit.io.datafiles import write_data_files
from deltacommit.io.storage.base import ObjectMeta, PutMode
from deltacommit.io.storage.local import LocalStore
from deltacommit.protocol.actions import Action, Add, CommitInfo, Txn, parse_commit
from deltacommit.protocol.log.names import commit_path
from deltacommit.protocol.replay import file_key

SCHEMA = pa.schema([("p", pa.string()), ("id", pa.int64())])


def rows(part: str, ids: list[int]) -> pa.Table:
    return pa.table({"p": [part] * len(ids), "id": ids}, schema=SCHEMA)


def data_files(table: dc.DeltaTable, part: str, ids: list[int]) -> list[Add]:
    """Data files written (not committed) for rows ``ids`` in partition ``part``."""
    return write_data_files(table.log_store.store, rows(part, ids), table.partition_columns,
                            clock=table.clock, random=table.random)


def commit_file(uri: str, version: int) -> bytes:
    return (Path(uri) / commit_path(version)).read_bytes()


def actions_of(uri: str, version: int) -> list[Action]:
    return parse_commit(commit_file(uri, version), f"{uri}@{version}")


def commit_info(actions: list[Action]) -> dict[str, Any]:
    infos = [a for a in actions if isinstance(a, CommitInfo)]
    assert len(infos) == 1, "exactly one commitInfo per version"
    return infos[0].values


def added(actions: list[Action]) -> set[str]:
    return {file_key(a.path) for a in actions if isinstance(a, Add)}


def txns(actions: list[Action]) -> dict[str, int]:
    return {a.app_id: a.version for a in actions if isinstance(a, Txn)}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ids_in(table: dc.DeltaTable) -> list[int]:
    table.update()
    return sorted(table.to_arrow().column("id").to_pylist())


def run_threads(n: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` on ``n`` threads; each slot holds the result or the exception raised."""
    out: list[Any] = [None] * n

    def run(i: int) -> None:
        try:
            out[i] = work(i)
        except BaseException as e:
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,), name=f"member-{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a member never returned"
    return out


class GatedStore(LocalStore):
    """A local store whose first ``put`` (a data file) waits until ``release()`` returns.

    With group commit the data of coalesced appends is written by the group's leader, so the
    gate holds the leader, while everyone else queues behind it.
    """

    def __init__(self, root: str, release: Callable[[], None]) -> None:
        super().__init__(root)
        self._release = release
        self._first = True
        self._lock = threading.Lock()

    def put(self, path: str, data: bytes, *, mode: PutMode = PutMode.OVERWRITE) -> ObjectMeta:
        if not mode.conditional:  # commits are conditional: the gate waits for a data file
            with self._lock:
                first, self._first = self._first, False
            if first:
                self._release()
        return super().put(path, data, mode=mode)
