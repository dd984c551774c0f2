"""Tables, stores and comparisons shared by the checkpoint tests."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

import deltacommit as dc
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.storage.base import ObjectMeta, ObjectStore
from deltacommit.io.storage.local import LocalStore
from deltacommit.io.storage.memory import MemoryStore
from deltacommit.protocol.log.names import LOG_DIR
from deltacommit.runtime.clock import Clock, ManualClock, RandomSource

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("v", pa.string())])


def rows(ids: range | list[int], day: str = "2026-11-22") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "day": [day] * len(ids), "v": [f"v{i}" for i in ids]},
                    schema=SCHEMA)


def ids_of(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def log_names(root: Path) -> list[str]:
    return sorted(p.name for p in (root / LOG_DIR).iterdir())


class WrappedStore(ObjectStore):
    """Delegates to ``inner``; records reads and can fail chosen writes.

    ``local_path`` is hidden so that every read goes through ``get`` and is counted.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.reads: list[str] = []
        self.lists: list[tuple[str, str | None]] = []
        self.fail_put: Callable[[str], bool] = lambda path: False
        self._lock = threading.Lock()

    def get(self, path: str) -> bytes:
        with self._lock:
            self.reads.append(path)
        return self.inner.get(path)

    def head(self, path: str) -> ObjectMeta:
        return self.inner.head(path)

    def put(self, path: str, data: bytes) -> ObjectMeta:
        if self.fail_put(path):
            raise OSError(f"injected failure writing {path}")
        return self.inner.put(path, data)

    def put_if_absent(self, path: str, data: bytes) -> ObjectMeta:
        if self.fail_put(path):
            raise OSError(f"injected failure writing {path}")
        return self.inner.put_if_absent(path, data)

    def put_if_match(self, path: str, data: bytes, etag: str) -> ObjectMeta:
        return self.inner.put_if_match(path, data, etag)

    def delete(self, path: str) -> None:
        self.inner.delete(path)

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectMeta]:
        with self._lock:
            self.lists.append((prefix, start_after))
        return self.inner.list(prefix, start_after)

    def reset(self) -> None:
        with self._lock:
            self.reads.clear()
            self.lists.clear()


def local_table(root: Path, wrap: bool = False, clock: Clock | None = None,
                configuration: dict[str, str] | None = None,
                partition_by: list[str] | None = None) -> tuple[dc.DeltaTable, WrappedStore | None]:
    """A new local table; with ``wrap`` its store is a WrappedStore (returned as well)."""
    inner = LocalStore(root)
    store: ObjectStore = WrappedStore(inner) if wrap else inner
    t = dc.DeltaTable.create(str(root), SCHEMA, partition_by=partition_by,
                             configuration=configuration or {},
                             log_store=ConditionalPutLogStore(store), clock=clock,
                             random=RandomSource())
    return t, store if isinstance(store, WrappedStore) else None


def open_table(root: Path, store: ObjectStore | None = None, **kw: Any) -> dc.DeltaTable:
    s = store or LocalStore(root)
    return dc.DeltaTable(str(root), log_store=ConditionalPutLogStore(s), **kw)


def memory_table(name: str, clock: ManualClock, configuration: dict[str, str] | None = None,
                 partition_by: list[str] | None = None) -> dc.DeltaTable:
    """A table in a fresh in-memory bucket whose modification times follow ``clock``."""
    store = MemoryStore(name, clock=clock)
    return dc.DeltaTable.create(f"memory://{name}", SCHEMA, partition_by=partition_by,
                                configuration=configuration or {},
                                log_store=ConditionalPutLogStore(store), clock=clock,
                                random=RandomSource(7))


def file_set(t: dc.DeltaTable) -> dict[str, tuple[int, dict[str, str | None], str | None]]:
    return {a.path: (a.size, dict(a.partition_values), a.stats) for a in t.files()}
