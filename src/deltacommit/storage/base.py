"""The object store interface every layer above storage uses.

Paths are relative to the store's root (the table location), with ``/`` separators.  The
conditional operations are the whole point: ``put_if_absent`` must be atomic (exactly one
of any number of racing callers succeeds, and nobody ever sees a partial object), because the
log stores build "version N is created exactly once" on it.
"""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from deltacommit.errors import ObjectNotFoundError


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    path: str
    size: int
    last_modified_ms: int
    etag: str | None = None


class ObjectStore(ABC):
    """Bytes in and out of one location; subclasses add local, S3 and in-memory backends."""

    #: URI of the root, e.g. ``file:///data/t`` or ``s3://bucket/t`` (no trailing slash).
    uri: str
    #: Whether ``put_if_absent`` is a real atomic primitive on this store.  DynamoCommit wraps
    #: stores that lack it.
    supports_conditional_put: bool = True

    @abstractmethod
    def get(self, path: str) -> bytes:
        """Whole object; ObjectNotFoundError if absent."""

    @abstractmethod
    def head(self, path: str) -> ObjectMeta:
        """Metadata; ObjectNotFoundError if absent."""

    @abstractmethod
    def put(self, path: str, data: bytes) -> ObjectMeta:
        """Create or replace."""

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> ObjectMeta:
        """Create only if absent (ObjectExistsError otherwise), atomically."""

    @abstractmethod
    def put_if_match(self, path: str, data: bytes, etag: str) -> ObjectMeta:
        """Replace only if the current ETag is ``etag`` (PreconditionFailedError otherwise)."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove; absent objects are not an error (deletes are idempotent)."""

    @abstractmethod
    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectMeta]:
        """Objects whose path starts with ``prefix``, in lexicographic order of path.

        ``start_after`` skips paths ``<=`` it, which lets a reader list only the log files
        newer than the version it has.
        """

    def copy(self, src: str, dst: str) -> ObjectMeta:
        """Create or replace ``dst`` with the content of ``src``."""
        return self.put(dst, self.get(src))

    def copy_if_absent(self, src: str, dst: str) -> ObjectMeta:
        """Copy only if ``dst`` is absent (ObjectExistsError otherwise)."""
        return self.put_if_absent(dst, self.get(src))

    def exists(self, path: str) -> bool:
        try:
            self.head(path)
        except ObjectNotFoundError:
            return False
        return True

    def open_input(self, path: str) -> BinaryIO:
        """A readable, seekable file for Parquet readers."""
        return io.BytesIO(self.get(path))

    def local_path(self, path: str) -> str | None:
        """The file system path of an object, where the store has one (lets pyarrow mmap)."""
        return None

    def child(self, prefix: str) -> ObjectStore:
        """A store rooted at ``prefix`` below this one."""
        raise NotImplementedError(f"{type(self).__name__} cannot open a sub-location")

