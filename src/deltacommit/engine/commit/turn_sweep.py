"""The sweep of a host's turn folder: turn files of tables no process of this user has
committed to for a week are deleted, once a day, by the first process that uses the folder
after a day (``engine.commit.host_turn`` calls ``sweep_due`` and ``sweep`` when it first
opens the folder).  A folder would otherwise keep four files for every table ever written from
the machine, and looking at every one of them on each process's first commit costs a cold
write tens of milliseconds on a busy host."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat

__all__ = ["STALE_AFTER", "SWEEP_EVERY", "SWEEP_MARK", "sweep", "sweep_due"]

#: Turn files of a table whose record has not changed for this long (seconds) are deleted.
STALE_AFTER = 7 * 24 * 3600.0
#: How often (seconds) a turn folder is swept: by the first process to use it this long after
#: the last sweep, which the folder's ``SWEEP_MARK`` file dates.
SWEEP_EVERY = 24 * 3600.0
SWEEP_MARK = ".swept"


def sweep_due(folder_fd: int, now: float) -> bool:
    """Whether the folder is due a sweep: its ``SWEEP_MARK`` is missing, not a regular file,
    or dated more than ``SWEEP_EVERY`` ago or in the future; then it is dated now (before the
    sweep, so that processes starting meanwhile do not sweep too).

    The mark only saves work: the folder is private (``host_turn._open_folder``), a mark gone or aged
    costs one sweep more, and one dated ahead is not believed, so no mark delays the deletion
    of a table's files by more than ``SWEEP_EVERY``."""
    try:
        st = os.stat(SWEEP_MARK, dir_fd=folder_fd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode) and 0 <= now - st.st_mtime < SWEEP_EVERY:
            return False
    except OSError:
        pass
    try:
        fd = os.open(SWEEP_MARK, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK
                     | getattr(os, "O_NOFOLLOW", 0), 0o600, dir_fd=folder_fd)
    except OSError:
        return True  # not a file that can be dated (a link, a folder): swept every time
    try:
        os.utime(fd, (now, now))
    except OSError:
        pass
    finally:
        os.close(fd)
    return True


def sweep(folder_fd: int, now: float) -> None:
    """Delete the turn files of tables no process of this user has committed to for
    ``STALE_AFTER`` seconds (their record unchanged), once a day per folder (``sweep_due``):
    a folder would otherwise keep four files for every table ever written from the machine.

    A table's files go only while this process holds its turn.  A process that still has
    them open (it last committed a week ago) sees them gone (``host_turn._Files.gone``) and opens new
    ones."""
    try:
        names = os.listdir(folder_fd)
    except OSError:
        return
    for name in names:
        try:
            st = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
            if now - st.st_mtime < STALE_AFTER:
                continue
            if name.endswith(".record"):
                _drop_turn(folder_fd, name[:-len(".record")])
            elif ".commit." in name and stat.S_ISREG(st.st_mode):
                # Left by a writer of an earlier version of this library that died while
                # handing a commit on with its record (``<key>.commit.<pid>.<thread>``).
                os.unlink(name, dir_fd=folder_fd)
        except OSError:
            continue


def _drop_turn(folder_fd: int, base: str) -> None:
    fd = os.open(base + ".turn", os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK
                 | getattr(os, "O_NOFOLLOW", 0), dir_fd=folder_fd)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # held: in use after all
        for suffix in (".record", ".commit", ".carry", ".queue", ".turn"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(base + suffix, dir_fd=folder_fd)
    finally:
        os.close(fd)
