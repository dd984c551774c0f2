"""The local file system as an object store: the embedded default.

A create (``PutMode.CREATE``) is a hard link from a fully written, fsynced temporary file to
the final name: ``link(2)`` fails atomically when the name exists, so of any number of racing
processes exactly one creates the object, and no reader can ever open a partial file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from deltacommit.errors import (
    AccessDeniedError,
    ChangedWhileReadError,
    NotARegularFileError,
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
    StorageError,
)
from deltacommit.io.storage.base import ObjectMeta, ObjectStore, PutMode
from deltacommit.protocol.log.paths import is_plain_relative
from deltacommit.runtime.clock import random_uuid

if TYPE_CHECKING:
    import pyarrow as pa

TMP_PREFIX = ".dc-tmp-"

logger = logging.getLogger(__name__)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _LinkInPath(Exception):
    """A folder on the way to a path is a symbolic link (or not a folder)."""


def local_root(uri: str) -> Path:
    """The directory of a ``file://`` URI or a plain path."""
    if uri.startswith("file:"):
        parsed = urlparse(uri)
        return Path(unquote(parsed.path)).resolve()
    return Path(uri).expanduser().resolve()


def _etag(st: os.stat_result) -> str:
    return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"


def _meta(path: str, st: os.stat_result) -> ObjectMeta:
    return ObjectMeta(path=path, size=st.st_size, last_modified_ms=st.st_mtime_ns // 1_000_000,
                      etag=_etag(st))


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return kind
    return f"of file type {stat.S_IFMT(mode):o}"


def storage_error(op: str, full: str, e: OSError) -> StorageError:
    """The error to raise for ``e`` from operation ``op`` on local path ``full``: a missing
    file is ObjectNotFoundError, a refused one AccessDeniedError naming the user this process
    runs as (the usual cause is a table folder written by another user)."""
    if e.errno == errno.ENOENT:
        return ObjectNotFoundError(op, full, "no such file")
    if e.errno in (errno.EACCES, errno.EPERM):
        where = f" ({e.filename})" if e.filename and str(e.filename) != full else ""
        return AccessDeniedError(
            op, full, f"{e.strerror or 'permission denied'}{where}; this process runs as uid "
            f"{os.geteuid()}, which may not do that there")
    return StorageError(op, full, e.strerror or str(e))


def open_regular(full: str, op: str, *, follow_link: bool = False
                 ) -> tuple[int, os.stat_result]:
    """A descriptor of the regular file at ``full`` and its status.  The file is opened
    without blocking, so that a FIFO put in a file's place is refused instead of stopping the
    reader until someone writes to it; and the check is made on the open descriptor, so the
    file read is the file checked.  The last component is not followed if it is a symbolic
    link (a link among the log's files may point anywhere), unless ``follow_link``: a data
    file an operator replaced by a link to its copy elsewhere is read through the link (and
    never deleted through it)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_link else os.O_NOFOLLOW)
    try:
        fd = os.open(full, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow_link:
            raise NotARegularFileError(op, full, "it is a symbolic link, not a regular file; "
                                       "links are not followed") from None
        raise storage_error(op, full, e) from None
    try:
        st = os.fstat(fd)
    except OSError as e:
        os.close(fd)
        raise storage_error(op, full, e) from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotARegularFileError(op, full, f"it is {_file_kind(st.st_mode)}, not a regular "
                                   "file")
    return fd, st


def read_as_checked(fd: int, st: os.stat_result, full: str, op: str) -> bytes:
    """The ``st.st_size`` bytes of the regular file open on ``fd`` (``open_regular``'s
    status), and only if that is all it holds: a table's files are whole when they appear and
    never written again, so a file that changed while it was read is a StorageError naming
    it, never a shorter content taken for the whole (a file cut short, or one whose size was
    seen stale) nor a read that goes on as long as another process keeps writing
    (``ChangedWhileReadError``, which a reader of a hint may ignore)."""
    chunks: list[bytes] = []
    left = st.st_size
    try:
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                got = st.st_size - left
                raise ChangedWhileReadError(op, full, f"it was cut short while being read: "
                                            f"{got} of its {st.st_size} bytes were there")
            chunks.append(chunk)
            left -= len(chunk)
        if os.read(fd, 1):  # at the end of a regular file a read returns at once
            raise ChangedWhileReadError(op, full, f"it grew while being read: it holds more "
                                        f"than the {st.st_size} bytes it had when opened")
    except OSError as e:
        raise storage_error(op, full, e) from None
    return b"".join(chunks)


#: Local files up to this size are read whole, with one system call, when opened for a
#: Parquet reader (``open_for_reader``): a small data file then costs one read instead of a
#: read per column chunk and footer (reading 2,000 files of 5,000 rows took about 10% less
#: processor time).  A larger file is read through its descriptor (as fast for a file read
#: whole: 0.33 CPU-s for a 43 MB file either way), so a reader that wants a few of its
#: columns reads only those.
WHOLE_READ_BYTES = 8 << 20
#: Where Linux shows this process's open descriptors as files that can be opened again.
_OWN_DESCRIPTORS = "/proc/self/fd"


def open_for_reader(full: str, op: str = "read", *, follow_link: bool = False
                    ) -> pa.NativeFile:
    """The regular file at ``full`` as a file Arrow's readers read (``open_regular``'s
    checks, ``follow_link`` as there): its bytes in memory up to ``WHOLE_READ_BYTES``, else
    the open file itself.  (pyarrow is imported here: the store's other operations do
    without it.)"""
    import pyarrow as pa

    fd, st = open_regular(full, op, follow_link=follow_link)
    if st.st_size > WHOLE_READ_BYTES:
        if os.path.isdir(_OWN_DESCRIPTORS):
            # Arrow's own file opened on the checked descriptor's file (the same inode, not
            # the path again), read without the interpreter.
            try:
                return pa.OSFile(f"{_OWN_DESCRIPTORS}/{fd}", mode="r")
            finally:
                os.close(fd)
        return pa.PythonFile(os.fdopen(fd, "rb"), mode="r")
    try:
        # The size checked, not more (a data file is never written after its commit).
        return pa.BufferReader(read_as_checked(fd, st, full, op))
    finally:
        os.close(fd)


class LocalStore(ObjectStore):
    def __init__(self, root: str | Path, *, fsync: bool = True) -> None:
        self.root = local_root(str(root))
        self._root_text = str(self.root).rstrip("/")
        self.uri = self.root.as_uri()
        self.fsync = fsync

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def _full(self, path: str) -> Path:
        return self.root / path

    def local_path(self, path: str) -> str | None:
        if is_plain_relative(path):
            # What ``Path`` would make of it, without building one: each write opens its file
            # by this name, and the object costs more than the rest of naming the file.
            return self._root_text + "/" + path
        return str(self._full(path))

    def identity(self) -> tuple[str, ...] | None:
        """The folder's real path: symlinked spellings of one folder are one location."""
        return ("file", os.path.realpath(self._root_text or "/"))

    def child(self, prefix: str) -> LocalStore:
        return LocalStore(self.root / prefix, fsync=self.fsync)

    def _fail(self, op: str, path: str, e: OSError) -> StorageError:
        return storage_error(op, str(self._full(path)), e)

    def get(self, path: str) -> bytes:
        """The file's content, read as ``open_regular`` opens it: only a regular file, not
        through a final symbolic link (a link in the table may point anywhere), and without
        blocking, so that a FIFO is refused instead of stopping the reader until someone
        writes to it; and only the bytes it held when checked (``read_as_checked``)."""
        full = str(self._full(path))
        fd, st = open_regular(full, "get")
        try:
            return read_as_checked(fd, st, full, "get")
        finally:
            os.close(fd)

    def head(self, path: str) -> ObjectMeta:
        try:
            st = os.stat(self._full(path))
        except OSError as e:
            raise self._fail("head", path, e) from None
        if not os.path.isfile(self._full(path)):
            raise ObjectNotFoundError("head", str(self._full(path)), "is a directory")
        return _meta(path, st)

    def _write_temp(self, full: Path, data: bytes) -> Path:
        full.parent.mkdir(parents=True, exist_ok=True)
        tmp = full.parent / f"{TMP_PREFIX}{full.name}.{random_uuid().hex}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if self.fsync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.close(fd)
        return tmp

    def _sync_dir(self, directory: Path) -> None:
        if not self.fsync:
            return
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def put(self, path: str, data: bytes, *, mode: PutMode = PutMode.OVERWRITE) -> ObjectMeta:
        if mode.kind == "create":
            return self._create(path, data)
        if mode.kind == "update":
            return self._update(path, data, mode.etag or "")
        return self._replace(path, data)

    def _replace(self, path: str, data: bytes) -> ObjectMeta:
        full = self._full(path)
        try:
            tmp = self._write_temp(full, data)
            # The object's metadata from the temp name, the same inode (a rename keeps its
            # number, size and time): the object itself may be deleted by another writer the
            # moment it is in place, and the put has succeeded all the same.
            st = os.stat(tmp)
            os.replace(tmp, full)
            self._sync_dir(full.parent)
            return _meta(path, st)
        except OSError as e:
            raise self._fail("put", path, e) from None

    def _create(self, path: str, data: bytes) -> ObjectMeta:
        full = self._full(path)
        try:
            tmp = self._write_temp(full, data)
        except OSError as e:
            raise self._fail("put-if-absent", path, e) from None
        try:
            os.link(tmp, full)
            # The new object's metadata from the temp name, the same inode: the object
            # itself may be deleted by another writer the moment it exists.
            st = os.stat(tmp)
        except FileExistsError:
            raise ObjectExistsError("put-if-absent", str(full), "object already exists") from None
        except OSError as e:
            raise self._fail("put-if-absent", path, e) from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        self._sync_dir(full.parent)
        return _meta(path, st)

    @contextlib.contextmanager
    def _dir_lock(self, directory: Path) -> Iterator[None]:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _update(self, path: str, data: bytes, etag: str) -> ObjectMeta:
        full = self._full(path)
        with self._dir_lock(full.parent):
            try:
                current = _etag(os.stat(full))
            except FileNotFoundError:
                raise PreconditionFailedError("put-if-match", str(full), "object does not exist") from None
            if current != etag:
                raise PreconditionFailedError(
                    "put-if-match", str(full), f"ETag is {current}, expected {etag}")
            return self._replace(path, data)

    def delete(self, path: str) -> None:
        try:
            os.unlink(self._full(path))
        except FileNotFoundError:
            pass
        except OSError as e:
            raise self._fail("delete", path, e) from None

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectMeta]:
        directory = prefix.rpartition("/")[0]
        base = self.root / directory if directory else self.root
        results: list[ObjectMeta] = []
        try:
            if not base.is_dir():
                return iter(results)
        except OSError as err:
            raise storage_error("list", str(base), err) from None
        rel_base = f"{directory}/" if directory else ""
        stack = [(base, rel_base)]
        while stack:
            d, rel = stack.pop()
            try:
                entries = list(os.scandir(d))
            except FileNotFoundError:
                continue
            except OSError as err:
                raise storage_error("list", str(d), err) from None
            for e in entries:
                rel_path = rel + e.name
                if not rel_path.startswith(prefix) and not prefix.startswith(rel_path + "/"):
                    continue
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append((Path(e.path), rel_path + "/"))
                        continue
                    if start_after is not None and rel_path <= start_after:
                        continue
                    if not rel_path.startswith(prefix) or e.is_dir():
                        continue  # (a link to a folder is no object)
                    results.append(_meta(rel_path, e.stat()))
                except FileNotFoundError:
                    continue
        results.sort(key=lambda m: m.path)
        return iter(results)

    # ----------------------------------------------------------------- deleting safely

    def _open_folder(self, folder: str) -> int:
        """A descriptor of ``folder`` (relative, "" for the root), opened one component at a
        time without following a link: _LinkInPath if one is a link or not a folder,
        FileNotFoundError if one is missing."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in folder.split("/") if folder else ():
                if part in ("", ".", ".."):
                    raise _LinkInPath(f"{folder!r} has an empty, '.' or '..' segment")
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise _LinkInPath(f"{part!r} is a symbolic link or not a folder") from None
                    raise
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def list_contained(self, prefix: str) -> Iterator[ObjectMeta]:
        directory = prefix.rpartition("/")[0]
        results: list[ObjectMeta] = []
        folders = [directory]
        while folders:
            folder = folders.pop()
            rel = f"{folder}/" if folder else ""
            try:
                fd = self._open_folder(folder)
            except _LinkInPath as problem:
                logger.warning("%s/%s: not listed for deletion: %s; nothing is deleted "
                               "through a symbolic link", self._root_text, folder, problem)
                continue
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as e:
                raise self._fail("list", folder, e) from None
            try:
                with os.scandir(fd) as it:
                    entries = list(it)
                for entry in entries:
                    rel_path = rel + entry.name
                    if not rel_path.startswith(prefix) and not prefix.startswith(rel_path + "/"):
                        continue
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if stat.S_ISLNK(st.st_mode):
                        logger.warning("%s/%s is a symbolic link inside the table's folder: "
                                       "neither it nor what it points to is deleted, nor "
                                       "descended into", self._root_text, rel_path)
                    elif stat.S_ISDIR(st.st_mode):
                        folders.append(rel_path)
                    elif stat.S_ISREG(st.st_mode) and rel_path.startswith(prefix):
                        results.append(_meta(rel_path, st))
            finally:
                os.close(fd)
        results.sort(key=lambda m: m.path)
        return iter(results)

    def delete_contained(self, paths: Sequence[str]) -> None:
        by_folder: dict[str, list[str]] = {}
        for path in paths:
            folder, _, name = path.rpartition("/")
            if path.startswith("/") or name in ("", ".", ".."):
                logger.warning("%s: not deleted: %r is not a file's path inside the table",
                               self._root_text, path)
                continue
            by_folder.setdefault(folder, []).append(name)
        for folder, names in by_folder.items():
            try:
                fd = self._open_folder(folder)
            except _LinkInPath as problem:
                logger.warning("%s/%s: %d files not deleted: %s", self._root_text, folder,
                               len(names), problem)
                continue
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as e:
                raise self._fail("delete", folder, e) from None
            try:
                for name in names:
                    where = f"{folder}/{name}" if folder else name
                    try:
                        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                        if not stat.S_ISREG(st.st_mode):
                            logger.warning("%s/%s: not deleted: not a regular file (a symbolic "
                                           "link or folder)", self._root_text, where)
                            continue
                        # Were it swapped for a link since, unlink removes the link itself,
                        # never what it points to.
                        os.unlink(name, dir_fd=fd)
                    except FileNotFoundError:
                        continue
                    except OSError as e:
                        raise self._fail("delete", where, e) from None
            finally:
                os.close(fd)
