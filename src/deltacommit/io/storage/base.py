"""The object store interface every layer above storage uses.

Paths are relative to the store's root (the table location), with ``/`` separators.  The
conditional writes are the whole point: ``put(path, data, mode=PutMode.CREATE)`` must be atomic
(exactly one of any number of racing callers succeeds, and nobody ever sees a partial object),
because the log stores build "version N is created exactly once" on it.

A store implements one write, ``put`` with a ``PutMode`` (as Rust's object_store does):
overwrite, create, or update only if the ETag still matches.  ``put_if_absent`` and
``put_if_match`` are spellings of the last two.
"""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import BinaryIO, ClassVar, Literal

from deltacommit.errors import ObjectNotFoundError
from deltacommit.io.storage import background
from deltacommit.io.storage.durable import fsync_files
from deltacommit.protocol.log.paths import parse_location


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    path: str
    size: int
    last_modified_ms: int
    etag: str | None = None


@dataclass(frozen=True, slots=True)
class PutMode:
    """How a ``put`` may treat an object already at the path.

    ``PutMode.OVERWRITE`` creates or replaces; ``PutMode.CREATE`` creates only if absent
    (ObjectExistsError otherwise); ``PutMode.update(etag)`` replaces only an object whose ETag is
    still ``etag`` (PreconditionFailedError otherwise, also when there is no object).
    """

    kind: Literal["overwrite", "create", "update"]
    etag: str | None = None

    OVERWRITE: ClassVar[PutMode]
    CREATE: ClassVar[PutMode]

    @staticmethod
    def update(etag: str) -> PutMode:
        return PutMode("update", etag)

    @property
    def conditional(self) -> bool:
        return self.kind != "overwrite"

    @property
    def operation(self) -> str:
        """The operation's name in error messages: ``put``, ``put-if-absent``, ``put-if-match``."""
        return _OPERATIONS[self.kind]


PutMode.OVERWRITE = PutMode("overwrite")
PutMode.CREATE = PutMode("create")
_OPERATIONS = {"overwrite": "put", "create": "put-if-absent", "update": "put-if-match"}

#: The most objects one request of ``delete_many`` removes (S3's DeleteObjects limit): callers
#: that send several requests at once cut their paths into batches of this size.
DELETE_BATCH = 1000


class ObjectStore(ABC):
    """Bytes in and out of one location; subclasses add local, S3 and in-memory backends."""

    #: URI of the root, e.g. ``file:///data/t`` or ``s3://bucket/t`` (no trailing slash).
    uri: str
    #: Whether a conditional ``put`` is a real atomic primitive on this store.  DynamoCommit wraps
    #: stores that lack it.
    supports_conditional_put: bool = True

    @abstractmethod
    def get(self, path: str) -> bytes:
        """Whole object; ObjectNotFoundError if absent."""

    @abstractmethod
    def head(self, path: str) -> ObjectMeta:
        """Metadata; ObjectNotFoundError if absent."""

    @abstractmethod
    def put(self, path: str, data: bytes, *, mode: PutMode = PutMode.OVERWRITE) -> ObjectMeta:
        """Write ``data`` as ``mode`` allows; a conditional mode is decided atomically."""

    def put_if_absent(self, path: str, data: bytes) -> ObjectMeta:
        """Create only if absent (ObjectExistsError otherwise), atomically."""
        return self.put(path, data, mode=PutMode.CREATE)

    def put_if_match(self, path: str, data: bytes, etag: str) -> ObjectMeta:
        """Replace only if the current ETag is ``etag`` (PreconditionFailedError otherwise)."""
        return self.put(path, data, mode=PutMode.update(etag))

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove; absent objects are not an error (deletes are idempotent)."""

    def delete_many(self, paths: Sequence[str]) -> None:
        """Remove each of ``paths``, as ``delete`` does; stores with a batch request use it."""
        for path in paths:
            self.delete(path)

    def list_contained(self, prefix: str) -> Iterator[ObjectMeta]:
        """``list`` for callers about to delete what it returns (VACUUM, log cleanup): only
        objects stored inside the store's folder itself.  A store with symbolic links (the
        local file system) never descends into a linked folder nor returns a link, since
        deleting through one deletes files outside the table; object stores have none."""
        return self.list(prefix)

    def delete_contained(self, paths: Sequence[str]) -> None:
        """``delete_many`` that never deletes through or a symbolic link, nor a path with an
        empty, ``.`` or ``..`` segment: what is deleted lies inside the store's folder."""
        self.delete_many(paths)

    def put_soon(self, path: str, data: bytes) -> None:
        """Start a plain put on the process's background threads and return at once.

        For new objects no one reads before a commit names them (data files): the commit
        prepares its version meanwhile, and ``make_durable`` waits for the put before the
        version is written, raising its failure.  A put that succeeds is forgotten as it ends;
        one that failed is remembered until awaited with ``forget`` or its path deleted
        (``datafiles.delete_files``), so that no commit can name the missing object.
        """
        pending = self._pending_puts()
        future = background.submit(lambda: self.put(path, data))
        pending[path] = future

        def settled(done: Future[ObjectMeta]) -> None:
            if done.exception() is None and pending.get(path) is done:
                pending.pop(path, None)

        future.add_done_callback(settled)

    def awaits_durable(self, path: str) -> bool:
        """Whether ``make_durable`` has anything to do for ``path``: a local file written
        without a sync, or a background put not known to have succeeded."""
        return path in self._pending_puts() or self.local_path(path) is not None

    def await_puts(self, paths: Sequence[str], *, forget: bool = False) -> None:
        """Wait for the background puts of ``paths``; once all have ended, raise the first
        failure.  ``forget``: nothing will name these objects (their write was given up), so
        failures are dropped rather than raised."""
        pending = self._pending_puts()
        first: BaseException | None = None
        for path in paths:
            future = pending.get(path)
            if future is None:
                continue
            error = future.exception()
            if (error is None or forget) and pending.get(path) is future:
                pending.pop(path, None)
            elif error is not None and first is None:
                first = error
        if first is not None:
            raise first

    def _pending_puts(self) -> dict[str, Future[ObjectMeta]]:
        # Created on first use, so that stores need not call a base initialiser
        # (``setdefault`` is atomic: two threads cannot each install their own).
        pending: dict[str, Future[ObjectMeta]] = vars(self).setdefault("_background_puts", {})
        return pending

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

    def identity(self) -> tuple[str, ...] | None:
        """What tells this location apart from every other one, as this store resolved it
        (for a remote store: the endpoint, region and credentials its client uses, not the
        options that led there); equal for every spelling of one location.  None where no
        other process can reach the same objects (memory).  Names a table's host turn."""
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                parse_location(self.uri).uri())

    def make_durable(self, paths: Sequence[str]) -> None:
        """Make objects written straight to their files (through ``local_path``) without a
        sync durable, with their directory entries, before a commit references them.

        Objects a ``put`` wrote are durable already (a local put syncs; a remote store's put
        is durable once acknowledged), so only paths with a local file have anything to do;
        wrappers that forward ``local_path`` therefore sync through here unchanged.  Every
        directory from an object's up to the store's root is synced too: a partition
        directory made for the file is itself a new entry in its parent.

        Background puts of ``paths`` (``put_soon``) are waited for first."""
        self.await_puts(paths)
        files = [p for p in (self.local_path(path) for path in paths) if p is not None]
        if not files:
            return
        parents: dict[str, None] = {}
        for path in paths:
            parent = path
            while parent:
                parent = parent.rpartition("/")[0]
                parents[parent] = None
        directories = [d for d in (self.local_path(p) for p in parents) if d is not None]

        fsync_files(files, directories)

    def child(self, prefix: str) -> ObjectStore:
        """A store rooted at ``prefix`` below this one."""
        raise NotImplementedError(f"{type(self).__name__} cannot open a sub-location")

