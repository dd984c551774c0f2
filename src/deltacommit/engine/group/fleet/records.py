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
from collections.abc import Sequence

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


def delete(store: ObjectStore, paths: Sequence[str]) -> None:
    """Delete records and round keys (one batch request where the store has one); best
    effort: what is left, a later listing deletes."""
    if not paths:
        return
    with contextlib.suppress(DeltaCommitError, OSError):
        store.delete_contained([p for p in paths if p.startswith(f"{FLEET_DIR}/")])
