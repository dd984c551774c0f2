"""An in-memory object store with the same atomicity as the real ones.

Used by property tests that explore many interleavings quickly, and by anyone who wants a
throwaway table.  Stores opened with the same name share their objects, so several "writers" in
one process see one bucket.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from deltacommit.errors import ObjectExistsError, ObjectNotFoundError, PreconditionFailedError
from deltacommit.io.storage.base import ObjectMeta, ObjectStore, PutMode
from deltacommit.runtime.clock import SYSTEM_CLOCK, Clock
from deltacommit.runtime.process_state import ForkSafeLock


class _Bucket:
    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, ObjectMeta]] = {}
        self.lock = ForkSafeLock()
        self.counter = itertools.count(1)


_BUCKETS: dict[str, _Bucket] = {}
#: A forked child keeps its copy of the buckets (memory:// lives in one process), with locks of
#: its own.
_BUCKETS_LOCK = ForkSafeLock()


def _bucket(name: str) -> _Bucket:
    with _BUCKETS_LOCK:
        return _BUCKETS.setdefault(name, _Bucket())


class MemoryStore(ObjectStore):
    def __init__(self, name: str = "default", prefix: str = "", clock: Clock = SYSTEM_CLOCK) -> None:
        self.name = name
        self.prefix = prefix.strip("/")
        self.uri = f"memory://{name}" + (f"/{self.prefix}" if self.prefix else "")
        self._b = _bucket(name)
        self._clock = clock

    def __repr__(self) -> str:
        return f"MemoryStore({self.uri!r})"

    def identity(self) -> tuple[str, ...] | None:
        return None  # no other process reaches these objects

    def _key(self, path: str) -> str:
        return f"{self.prefix}/{path}" if self.prefix else path

    def child(self, prefix: str) -> MemoryStore:
        return MemoryStore(self.name, self._key(prefix), self._clock)

    def _store(self, path: str, data: bytes) -> ObjectMeta:
        key = self._key(path)
        meta = ObjectMeta(path=key, size=len(data), last_modified_ms=int(self._clock.time() * 1000),
                          etag=f'"{next(self._b.counter)}"')
        self._b.objects[key] = (bytes(data), meta)
        return self._rel(meta)

    def _rel(self, meta: ObjectMeta) -> ObjectMeta:
        if not self.prefix:
            return meta
        return ObjectMeta(meta.path[len(self.prefix) + 1:], meta.size, meta.last_modified_ms, meta.etag)

    def get(self, path: str) -> bytes:
        with self._b.lock:
            item = self._b.objects.get(self._key(path))
        if item is None:
            raise ObjectNotFoundError("get", f"{self.uri}/{path}", "no such object")
        return item[0]

    def head(self, path: str) -> ObjectMeta:
        with self._b.lock:
            item = self._b.objects.get(self._key(path))
        if item is None:
            raise ObjectNotFoundError("head", f"{self.uri}/{path}", "no such object")
        return self._rel(item[1])

    def put(self, path: str, data: bytes, *, mode: PutMode = PutMode.OVERWRITE) -> ObjectMeta:
        with self._b.lock:
            if mode.kind == "create" and self._key(path) in self._b.objects:
                raise ObjectExistsError("put-if-absent", f"{self.uri}/{path}", "object already exists")
            if mode.kind == "update":
                item = self._b.objects.get(self._key(path))
                if item is None:
                    raise PreconditionFailedError("put-if-match", f"{self.uri}/{path}",
                                                  "object does not exist")
                if item[1].etag != mode.etag:
                    raise PreconditionFailedError(
                        "put-if-match", f"{self.uri}/{path}",
                        f"ETag is {item[1].etag}, expected {mode.etag}")
            return self._store(path, data)

    def delete(self, path: str) -> None:
        with self._b.lock:
            self._b.objects.pop(self._key(path), None)

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectMeta]:
        full_prefix = self._key(prefix)
        after = None if start_after is None else self._key(start_after)
        with self._b.lock:
            items = [
                self._rel(meta) for key, (_, meta) in self._b.objects.items()
                if key.startswith(full_prefix) and (after is None or key > after)
            ]
        items.sort(key=lambda m: m.path)
        return iter(items)
