"""Making files already written durable, many at once.

A data file is invisible until a commit references it, so it need not be durable when it is
written, only before that commit is.  A group commit therefore writes its members' data files
without syncing them, and makes them all durable at once just before its version is written
(``engine.loop``): the syncs of one group run in parallel, so the file system commits them in
one journal transaction or a few, where one ``fsync`` per file, each issued by its own writer
while other groups commit, made every sync (the commit's own among them) queue behind the
others.

Durable means the file's content and its directory entry: each file is fsynced, and so is each
directory holding one of them (POSIX does not promise a new name survives a crash until its
directory is synced).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from deltacommit.errors import StorageError

#: Syncs of one call run on up to this many threads (``fsync`` releases the GIL and mostly
#: waits for the device, so threads beyond the cores still help).
MAX_PARALLEL = 16

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """One pool for the process, started on first use: a thread costs more to start than a
    sync of a small file takes."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(MAX_PARALLEL, thread_name_prefix="deltacommit-fsync")
        return _pool


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


def fsync_files(paths: Sequence[str]) -> None:
    """Make ``paths`` (files of the local file system) and their directory entries durable;
    returns once every one of them is, or raises the first failure."""
    if not paths:
        return
    targets = list(dict.fromkeys([*paths, *(os.path.dirname(p) for p in paths)]))
    if len(targets) <= 2:
        for t in targets:
            fsync_path(t)
        return
    # ``map`` yields in order and re-raises a sync's error; every sync has finished (or
    # failed) once the list is complete.
    list(_executor().map(fsync_path, targets))
