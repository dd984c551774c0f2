"""A store that wraps another: every operation goes to ``inner``, through one overridable hook.

Wrappers change a few operations of the store they wrap (DynamoCommit guards the conditional
writes) or observe all of them (fault injection).  Written by hand, each would forward every
operation; here the forwarding is written once, each operation passes through
``around(operation, path, call)``, and a wrapper overrides only ``around`` or the operations it
changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO, TypeVar

from deltacommit.io.storage.base import ObjectMeta, ObjectStore, PutMode

T = TypeVar("T")

#: The operation name ``around`` is given for a ``put`` of each mode.
PUT_OPERATIONS = {"overwrite": "put", "create": "put_if_absent", "update": "put_if_match"}


class ForwardingStore(ObjectStore):
    """Passes every operation to ``inner``; operation names are the store's method names
    (``get``, ``head``, ``put``, ``put_if_absent``, ``put_if_match``, ``delete``, ``list``,
    ``copy``, ``copy_if_absent``; ``open_input`` is a ``get``)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.supports_conditional_put = inner.supports_conditional_put

    def around(self, operation: str, path: str, call: Callable[[], T]) -> T:
        """Run ``call``, the inner store's ``operation`` on ``path``; the wrapper's hook."""
        return call()

    def get(self, path: str) -> bytes:
        return self.around("get", path, lambda: self.inner.get(path))

    def head(self, path: str) -> ObjectMeta:
        return self.around("head", path, lambda: self.inner.head(path))

    def put(self, path: str, data: bytes, *, mode: PutMode = PutMode.OVERWRITE) -> ObjectMeta:
        return self.around(PUT_OPERATIONS[mode.kind], path,
                           lambda: self.inner.put(path, data, mode=mode))

    def delete(self, path: str) -> None:
        self.around("delete", path, lambda: self.inner.delete(path))

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectMeta]:
        return self.around("list", prefix, lambda: self.inner.list(prefix, start_after))

    def list_contained(self, prefix: str) -> Iterator[ObjectMeta]:
        return self.around("list", prefix, lambda: self.inner.list_contained(prefix))

    def delete_contained(self, paths: Sequence[str]) -> None:
        for path in paths:  # one ``delete`` each, as ``delete_many`` passes them through
            self.around("delete", path, lambda p=path: self.inner.delete_contained([p]))  # type: ignore[misc]

    def copy(self, src: str, dst: str) -> ObjectMeta:
        return self.around("copy", dst, lambda: self.inner.copy(src, dst))

    def copy_if_absent(self, src: str, dst: str) -> ObjectMeta:
        return self.around("copy_if_absent", dst, lambda: self.inner.copy_if_absent(src, dst))

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def open_input(self, path: str) -> BinaryIO:
        return self.around("get", path, lambda: self.inner.open_input(path))

    def local_path(self, path: str) -> str | None:
        return self.inner.local_path(path)

    def identity(self) -> tuple[str, ...] | None:
        return self.inner.identity()

    def make_durable(self, paths: Sequence[str]) -> None:
        self.await_puts(paths)  # those this wrapper started (its ``put`` goes through ``around``)
        # (named by its first path: a fault rule's pattern matches that one)
        self.around("make_durable", paths[0] if paths else "",
                    lambda: self.inner.make_durable(paths))
