"""Host turns: the processes of one machine take turns to claim a table's next version.

Separate processes appending to one table race for each version: every loser has paid for a
claim (a conditional PUT, or a temp file and a ``PutItem``), then reads the winner and backs
off, and the shared service spends a third of its time on claims that were never going to
win.  Processes on the same machine need not race each other: they can queue.  Before its
claim, a writer takes the table's turn, an ``flock`` on a file in a private folder of the
user's (``DELTACOMMIT_TURN_DIR``, else ``deltacommit-turns-<uid>`` in the temp folder); after
it, the writer records what it committed and hands the turn on.  The next holder reads the
versions the record names (no LIST, no lost claim to learn of them), and claims the version
after them.  A small commit travels with its record (``<key>.commit``), with the SHA-256 of
the commit it was claimed after: a holder whose newest commit is that one takes the bytes
instead of reading ``N.json``, so each other process of the host spares a GET per commit and
nothing is read between two claims.  Waiting writers read ahead as the record moves.

The turn orders writers; it never excludes them.  The log store's claim stays the only thing
that decides a version, so everything the turn gets wrong costs time, never a commit:

* Writers on other machines, and those that do not wait (another thread of the same process:
  threads share a process's committer through group commit instead; turns turned off), race
  as before and lose or win by the log store's rules.
* A holder that died released its ``flock`` with its process.  A holder that hangs is waited
  for ``CommitPolicy.turn_patience`` seconds without a hand-off, then passed by: the writers
  race, and do not wait again until the turn moves.
* The record is a hint.  Versions it names are read from the log (a missing one is ignored,
  and the table refreshed the usual way), or taken from the carried bytes only when they
  were claimed right after this writer's newest commit, which exclusion makes the one commit
  there.  What the previous holder established about its version (the DynamoDB store's
  entry complete, the version newest at a moment) is adopted only when the commit the record
  names is byte for byte (SHA-256) the commit this writer read at that version: a table
  deleted and created again, or a record from another table sharing the file, is never
  taken for the one the writer knows.  A process's own records are no news to it.
* A holder that dies between writing ``N.json`` and completing its DynamoDB entry is not
  waited for: the record names its process, and a process that is gone is not waited for.
* On DynamoDB the turn is handed on once ``N.json`` is written, before the entry is marked
  complete (``Baton``); the next holder writes its temp file meanwhile and waits, before its
  ``PutItem``, until the record says entry N is complete or its writer is done with it,
  at most ``turn_patience``.  Then it completes the entry itself if needed (step 1 of the
  protocol), so only the latest entry is ever incomplete, as the protocol requires.

A ``flock`` is not fair: a process that commits back to back (a group committer) would take
the turn again before a waiting one, which looks every ``POLL``, ever saw it free.  Waiting
writers hold a shared lock on ``<key>.queue``; a writer that committed last and finds one
there lets the turn go until it is taken (``GIVE_WAY``).

Turn files of a table no process committed to for a week are deleted by the next process that
uses the folder (``_sweep``).

Anything failing in the turn files (a read-only temp folder, a folder another user owns or
others can write) turns turns off for that folder in the process, with one warning; commits
go on racing.  Waiting is polling (``POLL``): ``flock`` cannot wait with a time limit, and the
polls read the record, which is what lets waiting writers read ahead.
``DELTACOMMIT_HOST_TURNS=off`` or ``CommitPolicy(host_turns=False)`` turns them off.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import stat
import struct
import tempfile
import threading
import time
import weakref
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from deltacommit.log.paths import parse_location
from deltacommit.logstore.base import LogStore

log = logging.getLogger(__name__)

SWITCH = "DELTACOMMIT_HOST_TURNS"
DIR_VARIABLE = "DELTACOMMIT_TURN_DIR"

#: How often a waiting writer looks at the turn and the record (seconds).
POLL = 0.001
#: How long a writer that would take the turn again at once lets it go for others waiting.
GIVE_WAY = 0.05

_MAGIC = b"DCT1"
_FLAG_COMPLETE = 1
_FLAG_SETTLED = 2
# magic, version, digest, previous digest, flags, latest (monotonic, wall; 0 when unknown),
# writer's pid, then a CRC-32 of it.
_BODY = struct.Struct("!4sq32s32sBddq")
_RECORD = struct.Struct(f"!{_BODY.size}sI")
_NO_DIGEST = bytes(32)

#: A commit at most this large travels with its record (``<key>.commit``): the next holders
#: take it from there instead of reading ``N.json`` (a larger one is read as usual).
CARRIED_BYTES = 256 * 1024


def enabled() -> bool:
    return (os.environ.get(SWITCH) or "").strip().lower() not in ("off", "false", "0", "no")


@dataclass(frozen=True, slots=True)
class Record:
    """What the last holder committed: ``version``, its commit's SHA-256 (hex), the SHA-256 of
    the commit at ``version - 1`` it was claimed after ("" if unknown), whether its log store
    entry is complete, whether its writer is done with it (nothing more will be added), the
    moment (monotonic, wall) it was known to be the newest version, and the writer's process
    id."""

    version: int
    digest: str
    previous: str = ""
    complete: bool = False
    settled: bool = False
    latest: tuple[float, float] | None = None
    pid: int = field(default_factory=os.getpid)

    @property
    def foreign(self) -> bool:
        """Written by another process.  A process's own commits are no news to it: its table
        objects share their states (``state_cache``) and its log stores what they established,
        and its threads share a committer through group commit, so its own records are not
        read ahead, as a lost race would not have been."""
        return self.pid != os.getpid()

    def encode(self) -> bytes:
        flags = (_FLAG_COMPLETE if self.complete else 0) | (_FLAG_SETTLED if self.settled else 0)
        mono, wall = self.latest or (0.0, 0.0)
        previous = bytes.fromhex(self.previous) if self.previous else _NO_DIGEST
        body = _BODY.pack(_MAGIC, self.version, bytes.fromhex(self.digest), previous, flags,
                          mono, wall, self.pid)
        return _RECORD.pack(body, zlib.crc32(body))

    @classmethod
    def decode(cls, data: bytes) -> Record | None:
        """None for anything but a whole, intact record (an empty file, a torn or foreign one)."""
        if len(data) != _RECORD.size:
            return None
        body, crc = _RECORD.unpack(data)
        if zlib.crc32(body) != crc:
            return None
        magic, version, digest, previous, flags, mono, wall, pid = _BODY.unpack(body)
        if magic != _MAGIC or version < 0:
            return None
        return cls(version, digest.hex(), "" if previous == _NO_DIGEST else previous.hex(),
                   bool(flags & _FLAG_COMPLETE), bool(flags & _FLAG_SETTLED),
                   (mono, wall) if wall else None, pid)

    def merged(self, later: Record) -> Record:
        """This record with what its writer added since about the same commit."""
        latest = max(self.latest or (0.0, 0.0), later.latest or (0.0, 0.0))
        return Record(self.version, self.digest, self.previous, self.complete or later.complete,
                      self.settled or later.settled, latest if latest[1] else None, self.pid)


def turn_key(log_store: LogStore) -> str | None:
    """The name of a table's turn files: its canonical location and everything that says how
    its versions are claimed (the log store's kind, its object store and endpoint, its
    DynamoDB table and ``tablePath``).  None where processes cannot share the table (an
    in-memory store)."""
    where = parse_location(log_store.table_uri)
    if where.scheme == "memory":
        return None
    parts = (where.uri(), f"{type(log_store).__module__}.{type(log_store).__qualname__}",
             repr(log_store.store), *(f"{k}={v}" for k, v in log_store.describe()))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


class _Files:
    """One table's turn in this process: its lock, record and queue files, each open once,
    and where its carried commit goes."""

    def __init__(self, path: str) -> None:
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
        self.path = path
        self.turn_fd = os.open(path + ".turn", flags, 0o600)
        self.record_fd = os.open(path + ".record", flags, 0o600)
        #: Waiting writers hold a shared lock on it: a holder that finds the turn free again
        #: at once after its own commit lets them go first (``HostTurn.take``).
        self.queue_fd = os.open(path + ".queue", flags, 0o600)
        self.commit_path = path + ".commit"
        #: Held by the thread of this process that holds or waits for the turn: the others
        #: of the process do not wait behind it (one ``flock`` per process and file).
        self.local = threading.Lock()
        #: Serialises this process's reads and writes of the record (``flock`` does between
        #: processes, not between the threads sharing one descriptor).
        self.record_lock = threading.Lock()
        #: The record when the holder was last passed by for hanging: not waited for again
        #: until the record changes.
        self.stalled: bytes | None = None
        #: Closed by ``evict``: a descriptor number is reused by the next file opened.
        self.closed = False

    def evict(self) -> bool:
        """Close the files unless a thread holds or awaits the turn or uses the record;
        whether they were.  ``local`` stays taken, so that no loop takes this turn again."""
        if not self.local.acquire(blocking=False):
            return False
        if not self.record_lock.acquire(blocking=False):
            self.local.release()
            return False
        try:
            self.closed = True
            self.close()
        finally:
            self.record_lock.release()
        return True

    def close(self) -> None:
        for fd in (self.turn_fd, self.record_fd, self.queue_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


#: At most this many tables' turn files are kept open by a process (three descriptors each).
CAPACITY = 64

_lock = threading.Lock()
#: By turn file path (without its suffix), least recently used first.
_files: OrderedDict[str, _Files] = OrderedDict()
#: Turn folders that could not be used, and why.
_refused: dict[str, str] = {}
#: Turn folders checked and swept (``_sweep``) by this process.
_swept: set[str] = set()
#: Turn files of a table whose record has not changed for this long (seconds) are deleted.
STALE_AFTER = 7 * 24 * 3600.0
#: Each log store object's turn key (``turn_key``), computed once.
_keys: weakref.WeakKeyDictionary[LogStore, str | None] = weakref.WeakKeyDictionary()


def _forget_in_child() -> None:
    """A forked child starts with no turns of its own.  Its copies of the parent's
    descriptors are closed, never unlocked: an ``flock`` belongs to the open file shared with
    the parent, which a close in the child does not release but an unlock would."""
    global _lock
    _lock = threading.Lock()
    for f in _files.values():
        f.close()
    _files.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def turn_dir() -> str:
    return os.environ.get(DIR_VARIABLE) or os.path.join(
        tempfile.gettempdir(), f"deltacommit-turns-{os.getuid()}")


def _check_dir(path: str) -> None:
    """Create the folder 0700; refuse it when it is not the user's own or others can write
    to it (another user could otherwise hold every turn, or plant records)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise PermissionError(
            f"turn folder {path} is not a directory owned by uid {os.getuid()} and writable "
            f"by it alone; set {DIR_VARIABLE} to a private folder")


def _sweep(folder: str, now: float) -> None:
    """Delete the turn files of tables no process of this user has committed to for
    ``STALE_AFTER`` seconds (their record unchanged), once per folder and process: a folder
    would otherwise keep four files for every table ever written from the machine.

    A table's files go only while this process holds its turn.  A process that still has
    them open (it last committed a week ago) then takes turns on the deleted files while new
    ones start afresh: the two queue apart, and race each other, as processes without turns
    do; nothing else depends on the turn.  Leftovers of a writer that died while handing a
    commit on (``<key>.commit.<pid>.<thread>``) go after the same time."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        try:
            if now - os.lstat(path).st_mtime < STALE_AFTER:
                continue
            if name.endswith(".record"):
                _drop_turn(path[:-len(".record")])
            elif ".commit." in name:
                os.unlink(path)
        except OSError:
            continue


def _drop_turn(base: str) -> None:
    flags = os.O_RDWR | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(base + ".turn", flags)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # held: in use after all
        for suffix in (".record", ".commit", ".queue", ".turn"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(base + suffix)
    finally:
        os.close(fd)


def _files_for(key: str) -> _Files | None:
    folder = turn_dir()
    path = os.path.join(folder, key)
    with _lock:
        f = _files.get(path)
        if f is not None:
            _files.move_to_end(path)
            return f
        if folder in _refused:
            return None
        try:
            if folder not in _swept:
                _check_dir(folder)
                _swept.add(folder)
                _sweep(folder, time.time())
            try:
                f = _Files(path)
            except FileNotFoundError:  # the folder went meanwhile (a temp folder cleaner)
                _check_dir(folder)
                f = _Files(path)
        except OSError as e:
            _refused[folder] = str(e)
            log.warning("commits to tables coordinated through %s race without host turns "
                        "in this process: %s", folder, e)
            return None
        _files[path] = f
        for old in list(_files)[:max(0, len(_files) - CAPACITY)]:
            if _files[old].evict():
                del _files[old]
        return f


class HostTurn:
    """A table's turn as one commit loop takes it; one per loop run (not thread-safe)."""

    def __init__(self, key: str, patience: float) -> None:
        self.key = key
        self.patience = patience
        self._files: _Files | None = None
        self.held = False
        #: The record found on taking the turn.
        self.found: Record | None = None
        #: Whether another process of the host writes the table too: the turn had to be
        #: waited for, or its record was another process's.  Only then does a commit travel
        #: with its record (a lone process, or one committing for all its threads, would
        #: write each commit a second time for nobody).
        self.shared = False

    @classmethod
    def for_table(cls, log_store: LogStore, patience: float) -> HostTurn | None:
        """The table's turn; None where turns are off or the table cannot be shared."""
        if not enabled():
            return None
        with _lock:
            known = log_store in _keys
            key = _keys.get(log_store)
        if not known:
            key = turn_key(log_store)
            with _lock:
                _keys[log_store] = key
        return None if key is None else cls(key, patience)

    @property
    def path(self) -> str:
        """The turn files' path, without their suffixes (``.turn``, ``.record``)."""
        return os.path.join(turn_dir(), self.key)

    # ------------------------------------------------------------------ the turn

    def take(self, waiting: Callable[[Record | None], None],
             before_waiting: Callable[[], None]) -> bool:
        """Wait for the turn; whether it is held.  ``before_waiting()`` runs once if the turn
        is not free at once (what the claim needs anyway: its data files, so that the turn is
        not held while they upload), ``waiting(record)`` between looks (to read the versions
        the record names meanwhile).  False at once when another thread of this process holds
        or awaits the turn, or when the holder has not handed it on for ``patience`` seconds
        (then not waited for again until the record changes)."""
        files = _files_for(self.key)
        if files is None or not files.local.acquire(blocking=False):
            return False
        try:
            waited = not self._try(files)
            found = None if waited else Record.decode(self._raw(files))
            if found is not None and not found.foreign and self._queue_busy(files):
                # This process committed last and another waits: see ``_give_way``.
                waited = self._give_way(files)
            if not waited or self._wait(files, waiting, before_waiting):
                self._files = files
                self.held = True
                self.found = Record.decode(self._raw(files)) if waited else found
                self.shared = waited or (self.found is not None and self.found.foreign)
                return True
        except OSError as e:
            log.warning("host turn of table %s failed (%s); committing without it", self.key, e)
        finally:
            if not self.held:
                files.local.release()
        return False

    def _wait(self, files: _Files, waiting: Callable[[Record | None], None],
              before_waiting: Callable[[], None]) -> bool:
        before_waiting()
        seen = self._raw(files)
        if files.stalled is not None and files.stalled == seen:
            return self._try(files)
        files.stalled = None
        fcntl.flock(files.queue_fd, fcntl.LOCK_SH)
        try:
            since = time.monotonic()
            while not self._try(files):
                now = self._raw(files)
                if now != seen:
                    seen, since = now, time.monotonic()
                elif time.monotonic() - since >= self.patience:
                    files.stalled = seen
                    return False
                waiting(Record.decode(now))
                time.sleep(POLL)
            return True
        finally:
            fcntl.flock(files.queue_fd, fcntl.LOCK_UN)

    def _give_way(self, files: _Files) -> bool:
        """This process had the turn last and takes it again before anyone else could: a
        process committing back to back (a group committer) would starve the others, which
        look only every POLL.  So it lets the turn go until one of them takes it, or none
        waits any more, at most ``GIVE_WAY`` seconds (a waiter that stopped, say); whether
        another took it (then it is waited for as usual)."""
        deadline = time.monotonic() + GIVE_WAY
        while True:
            fcntl.flock(files.turn_fd, fcntl.LOCK_UN)
            time.sleep(POLL)
            if not self._try(files):
                return True
            if time.monotonic() >= deadline or not self._queue_busy(files):
                return False

    @staticmethod
    def _queue_busy(files: _Files) -> bool:
        try:
            fcntl.flock(files.queue_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(files.queue_fd, fcntl.LOCK_UN)
        return False

    @staticmethod
    def _try(files: _Files) -> bool:
        try:
            fcntl.flock(files.turn_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def release(self) -> None:
        """Hand the turn on (idempotent)."""
        files = self._files
        if files is None or not self.held:
            return
        self.held = False
        self._files = None
        try:
            fcntl.flock(files.turn_fd, fcntl.LOCK_UN)
        finally:
            files.local.release()

    # ------------------------------------------------------------------ the record

    def record(self) -> Record | None:
        files = self._files or _files_for(self.key)
        return None if files is None else Record.decode(self._raw(files))

    @staticmethod
    def _raw(files: _Files) -> bytes:
        with files.record_lock:
            if files.closed:
                return b""
            fcntl.flock(files.record_fd, fcntl.LOCK_SH)
            try:
                return os.pread(files.record_fd, _RECORD.size, 0)
            finally:
                fcntl.flock(files.record_fd, fcntl.LOCK_UN)

    def publish(self, record: Record, data: bytes | None = None) -> None:
        """The holder's record of its commit: replaces what is there (the holder alone may).
        ``data``, the commit's bytes, travel with it if small (``CARRIED_BYTES``): written to
        a new file and renamed over the last, so a reader sees one whole commit or another."""
        files = self._files
        if not self.held or files is None:
            return
        if data is not None and self.shared and len(data) <= CARRIED_BYTES:
            try:
                fresh = f"{files.commit_path}.{os.getpid()}.{threading.get_ident()}"
                fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
                             | getattr(os, "O_NOFOLLOW", 0), 0o600)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
                os.replace(fresh, files.commit_path)
            except OSError as e:  # pragma: no cover - a full temp folder: read from the log
                log.warning("could not pass commit %s of %s on to the next writer: %s",
                            record.version, self.key, e)
        self._write(files, lambda current: record)

    def carried(self, record: Record) -> bytes | None:
        """The commit ``record`` names, if it travelled with it and is still the one there."""
        files = self._files or _files_for(self.key)
        if files is None:
            return None
        try:
            with open(files.commit_path, "rb") as f:
                data = f.read(CARRIED_BYTES + 1)
        except OSError:
            return None
        return data if hashlib.sha256(data).hexdigest() == record.digest else None

    def settle(self, record: Record) -> None:
        """Add to the record of ``record``'s commit what its writer learnt after handing the
        turn on; nothing if the record has moved to another commit meanwhile."""
        files = _files_for(self.key)
        if files is None:
            return

        def update(current: Record | None) -> Record | None:
            if current is None or (current.version, current.digest) != (record.version,
                                                                        record.digest):
                return None
            return current.merged(record)
        self._write(files, update)

    @staticmethod
    def _write(files: _Files, update: Callable[[Record | None], Record | None]) -> None:
        try:
            with files.record_lock:
                if files.closed:
                    return
                fcntl.flock(files.record_fd, fcntl.LOCK_EX)
                try:
                    new = update(Record.decode(os.pread(files.record_fd, _RECORD.size, 0)))
                    if new is not None:
                        os.pwrite(files.record_fd, new.encode(), 0)
                finally:
                    fcntl.flock(files.record_fd, fcntl.LOCK_UN)
        except OSError as e:  # pragma: no cover - a full or vanished temp folder
            log.warning("could not record a commit in the host turn %s: %s", files.path, e)

    def await_settled(self, version: int, digest: str) -> bool:
        """Wait, at most ``patience`` seconds and while its process lives, until the writer of
        ``version`` (whose commit has ``digest``) marked its entry complete or is done with
        it; whether it is complete."""
        end = time.monotonic() + self.patience
        while True:
            r = self.record()
            if r is None or (r.version, r.digest) != (version, digest):
                return False
            if r.complete or r.settled:
                return r.complete
            if time.monotonic() >= end or not _alive(r.pid):
                return False
            time.sleep(POLL)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a process of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
