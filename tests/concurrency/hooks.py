"""Log stores and object stores with hooks, to put a commit attempt exactly where a test wants.

The hooks run on the committing thread just before its conditional put, after it has chosen
the version: whatever the hook commits makes that attempt lose the race, deterministically.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, BinaryIO

from deltacommit.engine.transaction.transaction import Transaction
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.storage.base import ObjectMeta, ObjectStore

if TYPE_CHECKING:
    import pytest

    from deltacommit.engine.commit.policy import CommitResult


class HookedLogStore(ConditionalPutLogStore):
    """Conditional put with ``before_write(version)`` called before every attempt."""

    def __init__(self, store: ObjectStore, before_write: Callable[[int], None]) -> None:
        super().__init__(store)
        self.before_write = before_write
        self.attempts: list[int] = []
        self.written: list[bytes] = []

    def write_commit(self, version: int, data: bytes) -> None:
        self.attempts.append(version)
        self.written.append(data)
        self.before_write(version)
        super().write_commit(version, data)


class Gate:
    """Stops a writer at its first commit attempt until released: ``arrived`` is set when it
    has read and staged everything and is about to put its commit."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.release = threading.Event()
        self._first = True

    def __call__(self, version: int) -> None:
        if self._first:
            self._first = False
            self.arrived.set()
            assert self.release.wait(60), "the gate was never released"


class CountingStore(ObjectStore):
    """Delegates to ``inner`` and records each read-side request as (operation, path)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.calls: list[tuple[str, str]] = []

    def get(self, path: str) -> bytes:
        self.calls.append(("get", path))
        return self.inner.get(path)

    def head(self, path: str) -> ObjectMeta:
        self.calls.append(("head", path))
        return self.inner.head(path)

    def put(self, path: str, data: bytes) -> ObjectMeta:
        return self.inner.put(path, data)

    def put_if_absent(self, path: str, data: bytes) -> ObjectMeta:
        return self.inner.put_if_absent(path, data)

    def put_if_match(self, path: str, data: bytes, etag: str) -> ObjectMeta:
        return self.inner.put_if_match(path, data, etag)

    def delete(self, path: str) -> None:
        self.inner.delete(path)

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectMeta]:
        self.calls.append(("list", prefix))
        return self.inner.list(prefix, start_after)

    def open_input(self, path: str) -> BinaryIO:
        self.calls.append(("open", path))
        return self.inner.open_input(path)

    def local_path(self, path: str) -> str | None:
        return self.inner.local_path(path)


def commit_between(monkeypatch: pytest.MonkeyPatch, winner: Callable[[], object]) -> None:
    """Run ``winner`` once, as the next transaction to commit is about to: after it read
    and staged everything, so that it meets the winner in its commit loop."""
    real = Transaction.commit
    pending = [winner]

    def commit(txn: Transaction) -> CommitResult:
        if pending:
            pending.pop()()
        return real(txn)

    monkeypatch.setattr(Transaction, "commit", commit)
