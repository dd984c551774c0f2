"""Published transactions on the table's storage: write, read, list and delete records.

Records live at ``<table>/_deltacommit_fleet/`` (``protocol.fleet.record``).  Everything read
from there is a hint: a record that cannot be read, does not decode, or (on a local file
system) is not a private regular file of this user's is skipped, never trusted.  On a local
file system the folder must be this user's and writable by no one else, or the table's
writers race for versions as without the fleet (``folder_usable``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
import threading
from collections.abc import Sequence
from concurrent.futures import Future, wait

from deltacommit.engine.group.fleet import cleanup
from deltacommit.errors import DeltaCommitError, ObjectNotFoundError, StorageError
from deltacommit.io.storage.background import ProcessPool
from deltacommit.io.storage.base import ObjectMeta, ObjectStore
from deltacommit.protocol.fleet.record import (
    FLEET_DIR,
    FleetRecord,
    decode_record,
    encode_record,
    record_path,
)

log = logging.getLogger(__name__)

#: Records of one round are read in parallel on one pool for the process.
_READS = ProcessPool(16, "deltacommit-fleet-read")
#: Deletions after a landed round, off the committer's way (``delete_soon``).
_DELETES = ProcessPool(4, "deltacommit-fleet-delete")
_pending_lock = threading.Lock()
_pending: set[Future[None]] = set()

_OWNER: tuple[int, str] | None = None


def owner_id(random_hex: str) -> str:
    """This process's name in the records it publishes (host and pid; diagnostics only)."""
    global _OWNER
    pid = os.getpid()
    if _OWNER is None or _OWNER[0] != pid:
        _OWNER = (pid, f"{socket.gethostname()}/{pid}/{random_hex[:8]}")
    return _OWNER[1]


def folder_usable(store: ObjectStore) -> bool:
    """Whether this process may use the table's fleet folder.  On a local file system: the
    folder (made here, 0700, if absent) is a real directory of this user's that no one else
    can write; an object store has no owners to check."""
    local = store.local_path(FLEET_DIR)
    if local is None:
        return True
    try:
        os.mkdir(local, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        log.warning("fleet group commit off for %s: cannot make %s: %s", store.uri, local, e)
        return False
    try:
        st = os.lstat(local)
    except OSError:
        return False
    ok = stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022
    if not ok:
        log.warning("fleet group commit off for %s: %s is not a directory of this user's that "
                    "only it can write; writers race for versions instead", store.uri, local)
    return ok


def publish(store: ObjectStore, record: FleetRecord) -> None:
    """Write (or renew: overwrite) ``record``."""
    store.put(record_path(record.txn_id), encode_record(record))


def read_body(store: ObjectStore, path: str) -> bytes | None:
    """A record's bytes; None if it is gone, unreadable, or (local) not a private regular
    file of this user's."""
    local = store.local_path(path)
    try:
        if local is None:
            return store.get(path)
        return _read_private(local)
    except (ObjectNotFoundError, FileNotFoundError):
        return None
    except (StorageError, OSError) as e:
        log.warning("fleet record %s of %s skipped: %s", path, store.uri, e)
        return None


def _read_private(path: str) -> bytes | None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            log.warning("fleet record %s skipped: not a private regular file of this user's",
                        path)
            return None
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None
        raise
    finally:
        os.close(fd)


def read_records(store: ObjectStore, paths: Sequence[str]) -> list[FleetRecord | None]:
    """The records at ``paths`` (in parallel), None for each that is gone or not a record."""
    def one(path: str) -> FleetRecord | None:
        data = read_body(store, path)
        if data is None:
            return None
        try:
            return decode_record(data)
        except (ValueError, DeltaCommitError) as e:
            log.warning("fleet record %s of %s skipped: %s", path, store.uri, e)
            return None

    if len(paths) <= 1:
        return [one(p) for p in paths]
    return _READS.map(one, paths)


def listing(store: ObjectStore) -> list[ObjectMeta]:
    """Everything in the fleet folder (records and round keys)."""
    try:
        return list(store.list_contained(f"{FLEET_DIR}/"))
    except ObjectNotFoundError:
        return []


def folder_is_real(store: ObjectStore) -> bool:
    """Whether the fleet folder may be read: on a local file system, a real directory (never
    a symbolic link followed out of the table); an object store has no links."""
    local = store.local_path(FLEET_DIR)
    if local is None:
        return True
    try:
        return stat.S_ISDIR(os.lstat(local).st_mode)
    except OSError:
        return False


def published_files(store: ObjectStore, listed: Sequence[ObjectMeta], latest: int,
                    now_ms: int, margin_ms: int) -> list[tuple[str, dict[str, object] | None]]:
    """(path, deletion vector) of every file a published transaction that may still land
    adds, of the records among ``listed``: what VACUUM keeps whatever its retention, since
    an includer may commit them at any moment (``cleanup.expired`` says which records no
    one can land any more)."""
    if not listed or not folder_is_real(store):
        return []
    paths = [p for _, p in cleanup.record_paths(listed)]
    out: list[tuple[str, dict[str, object] | None]] = []
    for record in read_records(store, paths):
        if record is not None and not cleanup.expired(record, latest, now_ms, margin_ms):
            out += [(a.path, a.deletion_vector) for a in record.adds]
    return out


def delete(store: ObjectStore, paths: Sequence[str]) -> None:
    """Delete records and round keys (one batch request where the store has one); best
    effort: what is left, a later listing deletes."""
    if not paths:
        return
    with contextlib.suppress(DeltaCommitError, OSError):
        store.delete_contained([p for p in paths if p.startswith(f"{FLEET_DIR}/")])


def delete_soon(store: ObjectStore, paths: Sequence[str]) -> None:
    """``delete`` on a thread of the process, so that a round's committer answers its caller
    without waiting for it (the records are landed: their deletion changes no outcome, and
    whatever it leaves, a killed process's included, the next listing deletes).  The
    process's exit waits for it (the pool's threads are joined then); ``settle`` waits too."""
    if not paths:
        return
    future = _DELETES.submit(lambda: delete(store, paths))
    with _pending_lock:
        _pending.add(future)
    future.add_done_callback(_settled)


def _settled(future: Future[None]) -> None:
    with _pending_lock:
        _pending.discard(future)


def settle(timeout: float = 30.0) -> bool:
    """Wait (at most ``timeout`` seconds) for the deletions ``delete_soon`` started; whether
    none is left."""
    with _pending_lock:
        pending = set(_pending)
    if not pending:
        return True
    _done, left = wait(pending, timeout=timeout)
    return not left
