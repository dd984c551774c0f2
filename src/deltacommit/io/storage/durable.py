"""Making files already written durable, many at once.

A data file is invisible until a commit references it, so it need not be durable when it is
written, only before that commit is.  A group commit therefore writes its members' data files
without syncing them and makes them durable together before its version names them
(``coalesce``, ``engine.loop``).  One ``fsync`` per file, each issued by its own writer thread,
costs a journal commit each and, worse in Python, a wait for the interpreter lock after every
sync while dozens of threads hold it in turn; the commit's own syncs queue behind them.

Durable means the file's content and its directory entry (POSIX does not promise a new name
survives a crash until its directory is synced).  On Linux one ``syncfs(2)`` per file system
covers both for every file of the group: one call, one journal commit.  It also writes
whatever else is dirty on that file system, which costs time on a disk busy with other writes,
never correctness; so it is used from ``SYNCFS_FROM`` files on.  Below that, elsewhere, or
where ``syncfs`` is refused, each file and each directory is fsynced, in parallel.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Callable, Sequence
from typing import cast

from deltacommit.errors import StorageError
from deltacommit.io.storage.background import ProcessPool

#: Syncs of one call run on up to this many threads (``fsync`` releases the GIL and mostly
#: waits for the device, so threads beyond the cores still help).
MAX_PARALLEL = 16

#: Files synced at once from which one ``syncfs`` replaces their ``fsync`` calls.  Below it
#: the files are synced one by one (in parallel): a rewrite's few large files then wait only
#: for their own pages, not for whatever else is dirty on the file system.
SYNCFS_FROM = 8

#: One pool for the process, started on first use: a thread costs more to start than a sync
#: of a small file takes.
_SYNCS = ProcessPool(MAX_PARALLEL, "deltacommit-fsync")


def fsync_path(path: str) -> None:
    """fsync one file or directory by name; StorageError naming it if that fails."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise StorageError("sync", path, e.strerror or str(e)) from None


def fsync_files(paths: Sequence[str], directories: Sequence[str] = ()) -> None:
    """Make ``paths`` (files of the local file system) durable, with their entries in their
    directories and ``directories`` (more directories to sync, such as those made for the
    files); returns once every one of them is, or raises the first failure."""
    if not paths:
        return
    dirs = list(dict.fromkeys([*(os.path.dirname(p) for p in paths), *directories]))
    if len(paths) >= SYNCFS_FROM and _syncfs is not None and _sync_file_systems(dirs):
        return
    targets = [*dict.fromkeys(paths), *dirs]
    if len(paths) == 1:
        for t in targets:  # the file, then its directories from the innermost up
            fsync_path(t)
        return
    # Every sync has finished (or failed) before a sync's error is raised.
    _SYNCS.map(fsync_path, targets)


def _load_syncfs() -> Callable[[int], int] | None:
    """``syncfs(2)`` from the C library (Linux), or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return cast(Callable[[int], int], fn)


_syncfs = _load_syncfs()


def _sync_file_systems(dirs: Sequence[str]) -> bool:
    """``syncfs`` once per file system holding ``dirs``: one call makes every file written to
    it durable, directory entries included (since Linux 5.8 it also reports the write errors
    of any of them).  False if the call is refused (ENOSYS): the caller syncs file by file."""
    assert _syncfs is not None
    seen: set[int] = set()
    for d in dirs:
        try:
            fd = os.open(d, os.O_RDONLY)
        except OSError as e:
            raise StorageError("sync", d, e.strerror or str(e)) from None
        try:
            dev = os.fstat(fd).st_dev
            if dev in seen:
                continue
            seen.add(dev)
            if _syncfs(fd) != 0:
                err = ctypes.get_errno()
                if err == errno.ENOSYS:
                    return False
                raise StorageError("sync", d, os.strerror(err))
        finally:
            os.close(fd)
    return True
