"""Host turns: the processes of one machine take turns to claim a table's next version.

Separate processes appending to one table race for each version: every loser has paid for a
claim (a conditional PUT, or a temp file and a ``PutItem``), then reads the winner and backs
off, and the shared service spends a third of its time on claims that were never going to
win.  Processes on the same machine need not race each other: they can queue.  Before its
claim, a writer takes the table's turn, an ``flock`` on a file in a private folder of the
user's (``DELTACOMMIT_TURN_DIR``, else ``deltacommit-turns-<uid>`` in the temp folder); after
it, the writer records which version it committed, hands a small commit on with the record
(``<key>.carry``, which keeps the last ``CARRIED_COMMITS`` handed on) and hands the turn
on.  The next holder claims the version after the one recorded without first losing a claim
to learn of it.

The turn orders writers; it never excludes them, and nothing in its files is taken for a
fact about the table.  A version is known only from the table's storage (bytes this process
read from it or wrote to it); the turn files only say what to read and when:

* The record names a version and its commit's SHA-256.  The next holder reads that version
  from the log like any other; one that is not there (a record gone stale by a rollback,
  forged, aged, or another table's) is ignored and found by the claim, which decides every
  version.
* Commits handed on by the holders before (read from the carry file once the turn is
  taken) stand in for reading older versions only where a commit read from the log vouches for
  them: each commit written under a turn names the SHA-256 of the commit it was built on
  (``commit_info.PREVIOUS_COMMIT_KEY``), and ``TableLog.advance_to`` takes a handed-on
  commit only on a chain of those digests that starts at bytes it read from the log and
  reaches its own newest commit (or a version it read).  So four processes taking turns read
  one commit per commit, not three, and a forged, torn or stale handed-on commit is never
  taken: its version is read instead.
* The commit handed on with the record itself is built on while its version is read: the
  next attempt is prepared on it (``TableLog.speculate``), and claims nothing, nor fails or
  resolves a member, until the commit read from the log is that one (``CommitLoop._ready``,
  ``TableLog.confirm``).  So the read goes out beside the attempt's own work (on DynamoDB,
  beside its temp file and its check of entry N) instead of before it; one that does not hold
  up costs the attempt's preparation (and a temp file), and the attempt is built again on
  what the log holds.
* The record carries no fact about the log store's entries: the DynamoDB store checks the
  previous entry and file itself (step 1 of the protocol) on every claim after another
  process's commit.
* The log store's claim stays the only thing that decides a version.  Writers on other
  machines, and those that do not wait (another thread of the same process: threads share a
  process's committer through group commit instead; turns turned off), race as before.
* On DynamoDB the turn is handed on once ``N.json`` is written, before the entry is marked
  complete (``Baton``); the next holder writes its temp file meanwhile and, before its
  ``PutItem``, waits until the previous writer says it is done with entry N (at most
  ``turn_patience``, and not for a process that is gone), so that its own check of entry N
  finds it complete instead of repairing it beside its writer.  That word only says when to
  look.

No wait is unbounded, and a process stopped (SIGSTOP) anywhere delays the others by at most
the patience, once:

* The turn is an ``flock`` tried without blocking every ``POLL`` (``flock`` cannot wait
  with a time limit); every ``WATCH`` a poll reads the record, to see whether its holder
  moves.  A holder
  that has not moved the record for ``turn_patience`` seconds is passed by: the writer races,
  and marks the record as passed by (``_View.stalled``), so that no other process waits for
  that holder again until the record changes.  A holder that died released its ``flock`` with its process.
* The record file takes no lock.  It holds three slots, each written whole by one
  ``pwrite`` and checked by its CRC-32 on reading (a slot read while being written is taken
  as absent): the holder's record, the previous writer's word that it is done with its
  commit (written after the turn moved on, so not over the new holder's record), and the
  pass-by mark.
* A process that commits back to back would take the turn again before a waiting one, which
  looks only every ``POLL`` (``flock`` is not fair).  Waiting writers hold a shared lock on
  ``<key>.queue`` (taken without blocking); a writer that committed last and finds one there
  lets the turn go until it is taken (``GIVE_WAY``, at most the patience).  Giving way in
  vain (the waiter is stopped) is not repeated until another process is seen committing.

Turn files are private: the folder is opened ``O_DIRECTORY | O_NOFOLLOW`` and must be a
directory owned by this user that no one else can write, and each file is opened relative to
it, ``O_NOFOLLOW``, and must be a regular file owned by this user that no one else can write;
this is checked on every open, so a folder a temp cleaner removed and another user made again
is not used (files deleted under a process that keeps them open are noticed, ``_Files.gone``,
and opened, and checked, again).  Anything failing in the turn files (a read-only temp
folder, a folder another user owns or others can write) turns turns off for that folder in
the process, with one warning; commits go on racing.  A process keeps the files of at most ``CAPACITY`` tables
open, fewer under a low limit of open files (``_capacity``), closing the least recently used;
running out of descriptors makes one commit race, never fail.

Turn files of a table no process committed to for a week are deleted by the first process that
uses the folder after a day without a sweep (``engine.commit.turn_sweep``): a process does not
pay a look at every file of the folder for its first commit.  ``DELTACOMMIT_HOST_TURNS=off`` or
``CommitPolicy(host_turns=False)`` turns turns off.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import resource
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

from deltacommit.engine.commit.turn_carry import (
    CARRIED_BYTES,
    CARRIED_COMMITS,
    CARRY_FILE_SIZE,
    decode_carried,
    encode_carried,
)
from deltacommit.engine.commit.turn_sweep import sweep, sweep_due
from deltacommit.io.logstore.base import LogStore
from deltacommit.runtime.process_state import process_wide

log = logging.getLogger(__name__)

SWITCH = "DELTACOMMIT_HOST_TURNS"
DIR_VARIABLE = "DELTACOMMIT_TURN_DIR"

#: How often a waiting writer tries the turn (seconds).
POLL = 0.001
#: How often a waiting writer reads the record, to see whether its holder moves (seconds):
#: that decides only when the holder is passed by (after the patience), so reading it at
#: every poll would cost the waiters' CPU, on a machine whose cores the holder needs, for
#: nothing.
WATCH = 0.01
#: How long a writer that would take the turn again at once lets it go for others waiting
#: (at most the patience).
GIVE_WAY = 0.05

# The record file's slots: each is one struct and its CRC-32, written by one ``pwrite`` at
# its offset.  A slot's magic says what it holds.
_HOLDER = b"DCT2"   # the holder's record (``Record``)
_DONE = b"DCTD"     # a writer's word that it is done with its commit (version, digest)
_PASSED = b"DCTP"   # the holder whose record had this SHA-256 was passed by
# magic, version, digest, flags, writer's pid
_SLOT_BODY = struct.Struct("!4sq32sBq")
_SLOT = struct.Struct(f"!{_SLOT_BODY.size}sI")
_STRIDE = 64
_HOLDER_AT, _DONE_AT, _PASSED_AT = 0, _STRIDE, 2 * _STRIDE
_RECORD_FILE_SIZE = 3 * _STRIDE
_FLAG_SETTLED = 1

_OPEN_FLAGS = (os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK
               | getattr(os, "O_NOFOLLOW", 0))
_DIR_FLAGS = (os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_DIRECTORY", 0)
              | getattr(os, "O_NOFOLLOW", 0))


def enabled() -> bool:
    return (os.environ.get(SWITCH) or "").strip().lower() not in ("off", "false", "0", "no")


@dataclass(frozen=True, slots=True)
class Record:
    """What the last holder committed: ``version``, its commit's SHA-256 (hex), whether its
    writer is done with it (nothing more will be done to it: on DynamoDB, its entry is
    completed or left for others to), and the writer's process id.  A hint of what to read
    and when, never a fact about the table."""

    version: int
    digest: str
    settled: bool = False
    pid: int = field(default_factory=os.getpid)

    @property
    def foreign(self) -> bool:
        """Written by another process.  A process's own commits are no news to it: its table
        objects share their states (``state_cache``) and its threads share a committer
        through group commit, so its own records are not read ahead, as a lost race would
        not have been."""
        return self.pid != os.getpid()

    def encode(self) -> bytes:
        return _encode_slot(_HOLDER, self.version, bytes.fromhex(self.digest),
                            _FLAG_SETTLED if self.settled else 0, self.pid)

    @classmethod
    def decode(cls, data: bytes) -> Record | None:
        """None for anything but a whole, intact record (an empty slot, a torn or foreign
        one)."""
        slot = _decode_slot(data)
        if slot is None or slot[0] != _HOLDER or slot[1] < 0:
            return None
        _, version, digest, flags, pid = slot
        return cls(version, digest.hex(), bool(flags & _FLAG_SETTLED), pid)


def _encode_slot(magic: bytes, version: int, digest: bytes, flags: int, pid: int) -> bytes:
    body = _SLOT_BODY.pack(magic, version, digest, flags, pid)
    return _SLOT.pack(body, zlib.crc32(body)).ljust(_STRIDE, b"\0")


def _decode_slot(data: bytes) -> tuple[bytes, int, bytes, int, int] | None:
    if len(data) < _SLOT.size:
        return None
    body, crc = _SLOT.unpack(data[:_SLOT.size])
    if zlib.crc32(body) != crc:
        return None
    magic, version, digest, flags, pid = _SLOT_BODY.unpack(body)
    return magic, version, digest, flags, pid


def _torn(data: bytes) -> bool:
    """A slot that holds something but not an intact slot: read while being written."""
    return any(data) and _decode_slot(data) is None


@dataclass(frozen=True, slots=True)
class _View:
    """The record file as one read saw it."""

    #: The holder's slot as read (what a pass-by mark names).
    raw: bytes
    #: The holder's record, settled if its writer said since that it is done with it.
    record: Record | None
    #: A waiter passed the holder of this record by: not waited for again until it changes.
    stalled: bool


def _view(data: bytes) -> _View:
    raw = data[_HOLDER_AT:_HOLDER_AT + _STRIDE].ljust(_STRIDE, b"\0")
    record = Record.decode(raw)
    done = _decode_slot(data[_DONE_AT:_DONE_AT + _STRIDE])
    if record is not None and done is not None and done[0] == _DONE \
            and (done[1], done[2].hex()) == (record.version, record.digest):
        record = Record(record.version, record.digest, True, record.pid)
    passed = _decode_slot(data[_PASSED_AT:_PASSED_AT + _STRIDE])
    stalled = passed is not None and passed[0] == _PASSED \
        and passed[2] == hashlib.sha256(raw).digest()
    return _View(raw, record, stalled)


def turn_key(log_store: LogStore) -> str | None:
    """The name of a table's turn files: what identifies the table and how its versions are
    claimed, as the log store's clients resolved it (``LogStore.identity``: the canonical
    location, the endpoint, region and credentials its client uses, its DynamoDB table).
    None where processes cannot share the table (an in-memory store)."""
    identity = log_store.identity()
    if identity is None:
        return None
    return hashlib.sha256("\0".join(identity).encode()).hexdigest()[:32]


class _Files:
    """One table's turn in this process: its lock, record, queue and carried-commit files,
    each open once."""

    def __init__(self, path: str, turn_fd: int, record_fd: int, queue_fd: int,
                 carry_fd: int) -> None:
        self.path = path
        self.turn_fd = turn_fd
        self.record_fd = record_fd
        #: Waiting writers hold a shared lock on it: a holder that finds the turn free again
        #: at once after its own commit lets them go first (``HostTurn.take``).
        self.queue_fd = queue_fd
        #: The last holder's commit, when small (``HostTurn.publish``).
        self.carry_fd = carry_fd
        #: Held by the thread of this process that holds or waits for the turn: the others
        #: of the process do not wait behind it (one ``flock`` per process and file).
        self.local = threading.Lock()
        #: Held around each use of a descriptor, so that ``evict`` never closes one in use
        #: (its number would be reused by the next file opened).  Never held across a wait.
        self.using = threading.Lock()
        #: The holder's slot when the holder was last passed by for hanging: not waited for
        #: again until the record changes.
        self.stalled: bytes | None = None
        #: Giving way found the waiter did not take the turn (stopped): not given way again
        #: until another process is seen committing.
        self.futile = False
        self.closed = False

    def gone(self) -> bool:
        """Whether the files were deleted (a temp folder cleaner): the turn is elsewhere now."""
        with self.using:
            if self.closed:
                return True
            try:
                return os.fstat(self.turn_fd).st_nlink == 0
            except OSError:
                return True

    def evict(self) -> bool:
        """Close the files unless a thread holds or awaits the turn or uses them; whether
        they were.  ``local`` stays taken, so that no loop takes this turn again."""
        if not self.local.acquire(blocking=False):
            return False
        with self.using:
            self.closed = True
            self.close()
        return True

    def close(self) -> None:
        for fd in (self.turn_fd, self.record_fd, self.queue_fd, self.carry_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    def read(self) -> bytes:
        """The record file (a slot torn by a write under way is read again once)."""
        with self.using:
            if self.closed:
                return b""
            data = os.pread(self.record_fd, _RECORD_FILE_SIZE, 0)
        if any(_torn(data[at:at + _STRIDE]) for at in (_HOLDER_AT, _DONE_AT, _PASSED_AT)):
            with self.using:
                if self.closed:
                    return b""
                data = os.pread(self.record_fd, _RECORD_FILE_SIZE, 0)
        return data

    def write(self, offset: int, slot: bytes) -> None:
        with self.using:
            if not self.closed:
                os.pwrite(self.record_fd, slot, offset)

    def carry(self, data: bytes) -> None:
        with self.using:
            if not self.closed:
                os.pwrite(self.carry_fd, data, 0)
                os.ftruncate(self.carry_fd, len(data))

    def carried(self) -> dict[int, bytes]:
        with self.using:
            data = b"" if self.closed else os.pread(self.carry_fd, CARRY_FILE_SIZE, 0)
        return decode_carried(data)


#: At most this many tables' turn files are kept open by a process (four descriptors each);
#: fewer under a low limit of open files (``_capacity``).
CAPACITY = 64
_SUFFIXES = (".turn", ".record", ".queue", ".carry")
#: The share of the process's descriptor limit turn files may use (1 / FD_SHARE of it).
FD_SHARE = 16

_lock = threading.Lock()
#: By turn file path (without its suffix), least recently used first.
_files: OrderedDict[str, _Files] = OrderedDict()
#: Turn folders that could not be used, and why.
_refused: dict[str, str] = {}
#: Turn folders this process has looked at for a sweep (``turn_sweep``).
_swept: set[str] = set()
#: Each log store object's turn key (``turn_key``), computed once.
_keys: weakref.WeakKeyDictionary[LogStore, str | None] = weakref.WeakKeyDictionary()
#: Whether running out of descriptors for turn files was reported (once per process).
_told_of_descriptors = False


def _forget_in_child() -> None:
    """A forked child starts with no turns of its own.  Its copies of the parent's
    descriptors are closed, never unlocked: an ``flock`` belongs to the open file shared with
    the parent, which a close in the child does not release but an unlock would."""
    global _lock
    _lock = threading.Lock()
    for f in _files.values():
        f.close()
    _files.clear()


process_wide("host turns held (engine.commit.host_turn)", _forget_in_child)


def turn_dir() -> str:
    return os.environ.get(DIR_VARIABLE) or os.path.join(
        tempfile.gettempdir(), f"deltacommit-turns-{os.getuid()}")


def _capacity() -> int:
    """How many tables' turn files to keep open: ``CAPACITY``, or fewer so that they use at
    most 1 / ``FD_SHARE`` of the process's limit of open files (the writes need the rest)."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):  # pragma: no cover - every Unix has the limit
        return CAPACITY
    if soft == resource.RLIM_INFINITY:
        return CAPACITY
    return max(1, min(CAPACITY, soft // (len(_SUFFIXES) * FD_SHARE)))


class _Refused(PermissionError):
    """A turn folder or file that is not private to this user."""


def _private(fd: int, what: str, want_dir: bool) -> None:
    """``_Refused`` unless ``fd`` is a directory (or regular file) owned by this user that no
    one else can write."""
    st = os.fstat(fd)
    kind_ok = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    if not kind_ok or st.st_uid != os.getuid() or st.st_mode & 0o022:
        kind = "a directory" if want_dir else "a regular file"
        raise _Refused(
            f"turn {'folder' if want_dir else 'file'} {what} is not {kind} owned by uid "
            f"{os.getuid()} and writable by it alone (owner uid {st.st_uid}, mode "
            f"{stat.filemode(st.st_mode)}); set {DIR_VARIABLE} to a private folder")


def _open_folder(folder: str) -> int:
    """The turn folder, opened without following a symlink and checked private; created
    0700 if missing.  Checked on the descriptor, so a folder swapped meanwhile is seen."""
    for _ in range(2):
        with contextlib.suppress(FileExistsError):
            os.makedirs(folder, mode=0o700, exist_ok=True)
        try:
            fd = os.open(folder, _DIR_FLAGS)
        except FileNotFoundError:  # removed meanwhile (a temp folder cleaner): made again
            continue
        try:
            _private(fd, folder, want_dir=True)
        except BaseException:
            os.close(fd)
            raise
        return fd
    raise FileNotFoundError(errno.ENOENT, "turn folder keeps disappearing", folder)


def _open_file(folder_fd: int, name: str, folder: str) -> int:
    fd = os.open(name, _OPEN_FLAGS, 0o600, dir_fd=folder_fd)
    try:
        _private(fd, os.path.join(folder, name), want_dir=False)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_turn(folder: str, key: str) -> _Files:
    folder_fd = _open_folder(folder)
    try:
        if folder not in _swept:
            _swept.add(folder)
            now = time.time()
            if sweep_due(folder_fd, now):
                sweep(folder_fd, now)
        fds: list[int] = []
        try:
            for suffix in _SUFFIXES:
                fds.append(_open_file(folder_fd, key + suffix, folder))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
    finally:
        os.close(folder_fd)
    return _Files(os.path.join(folder, key), *fds)


def _evict_unused(keep: int) -> None:
    """Close the least recently used turn files not in use until at most ``keep`` remain
    (under ``_lock``)."""
    for old in list(_files):
        if len(_files) <= keep:
            return
        if _files[old].evict():
            del _files[old]


def _files_for(key: str) -> _Files | None:
    """The table's turn files, opened (and checked) if this process has not kept them open;
    None where turns cannot be taken (the folder refused, no descriptor left)."""
    global _told_of_descriptors
    folder = turn_dir()
    path = os.path.join(folder, key)
    with _lock:
        f = _files.get(path)
        if f is not None:
            if not f.gone():
                _files.move_to_end(path)
                return f
            if f.evict():  # deleted under it: opened again, and checked again, below
                del _files[path]
            else:
                return f
        if folder in _refused:
            return None
        capacity = _capacity()
        _evict_unused(capacity - 1)
        try:
            try:
                f = _open_turn(folder, key)
            except OSError as e:
                if e.errno not in (errno.EMFILE, errno.ENFILE):
                    raise
                _evict_unused(0)  # out of descriptors: free those of other tables, try once more
                f = _open_turn(folder, key)
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE):
                if not _told_of_descriptors:
                    _told_of_descriptors = True
                    log.warning("no file descriptor left for the host turn of a table (%s); "
                                "its commits race until one is", e)
                return None
            _refused[folder] = str(e)
            log.warning("commits to tables coordinated through %s race without host turns "
                        "in this process: %s", folder, e)
            return None
        _files[path] = f
        return f


def _lock_nb(fd: int, how: int) -> bool:
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


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

    def take(self, before_waiting: Callable[[], None]) -> bool:
        """Wait for the turn; whether it is held.  ``before_waiting()`` runs once if the turn
        is not free at once (what the claim needs anyway: its data files, so that the turn is
        not held while they upload).  False at once when another thread of this process holds
        or awaits the turn, or when the holder was passed by for not handing it on within the
        patience (then not waited for again until the record changes)."""
        files = _files_for(self.key)
        if files is None or not files.local.acquire(blocking=False):
            return False
        try:
            waited = not _lock_nb(files.turn_fd, fcntl.LOCK_EX)
            # Read once the turn is held (or awaited): a record read before could be older
            # than the commit of a holder that released the turn just before it was taken.
            found = _view(files.read()).record
            if found is not None and found.foreign:
                files.futile = False  # another process commits: giving way may serve it
            if not waited and found is not None and not found.foreign \
                    and not files.futile and self._queue_busy(files):
                # This process committed last and another waits: see ``_give_way``.
                waited = self._give_way(files)
            if not waited or self._wait(files, before_waiting):
                self._files = files
                self.held = True
                # Read again: another process may have committed while this one gave way.
                self.found = _view(files.read()).record
                self.shared = waited or (self.found is not None and self.found.foreign)
                return True
        except OSError as e:
            log.warning("host turn of table %s failed (%s); committing without it", self.key, e)
        finally:
            if not self.held:
                files.local.release()
        return False

    def _wait(self, files: _Files, before_waiting: Callable[[], None]) -> bool:
        before_waiting()
        view = _view(files.read())
        if view.stalled or (files.stalled is not None and files.stalled == view.raw):
            return _lock_nb(files.turn_fd, fcntl.LOCK_EX)
        files.stalled = None
        queued = False
        try:
            seen, since = view.raw, time.monotonic()
            looked = float("-inf")  # when the record was last read: the first poll reads it
            while not _lock_nb(files.turn_fd, fcntl.LOCK_EX):
                if not queued:
                    queued = _lock_nb(files.queue_fd, fcntl.LOCK_SH)
                now = time.monotonic()
                if now - looked < WATCH and now - since < self.patience:
                    time.sleep(POLL)
                    continue
                looked = now
                view = _view(files.read())
                if view.raw != seen:
                    seen, since = view.raw, time.monotonic()
                elif view.stalled:
                    files.stalled = seen  # another waiter passed this holder by
                    return False
                elif time.monotonic() - since >= self.patience:
                    files.stalled = seen
                    if self.patience > 0:  # it waited: others need not
                        self._pass_by(files, seen)
                    return False
                time.sleep(POLL)
            return True
        finally:
            if queued:
                fcntl.flock(files.queue_fd, fcntl.LOCK_UN)

    @staticmethod
    def _pass_by(files: _Files, raw: bytes) -> None:
        """Mark the holder of the record ``raw`` as passed by, for every process."""
        try:
            files.write(_PASSED_AT, _encode_slot(_PASSED, 0, hashlib.sha256(raw).digest(), 0,
                                                 os.getpid()))
        except OSError as e:  # pragma: no cover - a full or vanished temp folder
            log.warning("could not mark the host turn %s as passed by: %s", files.path, e)

    def _give_way(self, files: _Files) -> bool:
        """This process had the turn last and takes it again before anyone else could: a
        process committing back to back (a group committer) would starve the others, which
        look only every POLL.  So it lets the turn go until one of them takes it, or none
        waits any more, at most ``GIVE_WAY`` seconds and the patience (a waiter that
        stopped); whether another took it (then it is waited for as usual).  Giving way in
        vain is not repeated until another process is seen committing (``_Files.futile``)."""
        deadline = time.monotonic() + min(GIVE_WAY, self.patience)
        while True:
            fcntl.flock(files.turn_fd, fcntl.LOCK_UN)
            time.sleep(POLL)
            if not _lock_nb(files.turn_fd, fcntl.LOCK_EX):
                return True
            if not self._queue_busy(files):
                return False
            if time.monotonic() >= deadline:
                files.futile = True
                return False

    @staticmethod
    def _queue_busy(files: _Files) -> bool:
        if not _lock_nb(files.queue_fd, fcntl.LOCK_EX):
            return True
        fcntl.flock(files.queue_fd, fcntl.LOCK_UN)
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
        if files is None:
            return None
        try:
            return _view(files.read()).record
        except OSError:  # pragma: no cover - a vanished temp folder
            return None

    def publish(self, record: Record, data: bytes | None = None) -> None:
        """The holder's record of its commit: replaces what is there (the holder alone may).
        ``data``, the commit's bytes, travel with it if small (``CARRIED_BYTES``) and another
        process writes the table, beside the last few commits handed on before it
        (``CARRIED_COMMITS``): written before the record, so a reader that finds them torn, or
        another commit's, finds their SHA-256 not the record's."""
        files = self._files
        if not self.held or files is None:
            return
        try:
            if data is not None and self.shared and len(data) <= CARRIED_BYTES:
                carried = {record.version: data}
                size = len(data)
                for version, older in sorted(files.carried().items(), reverse=True):
                    if len(carried) >= CARRIED_COMMITS or size + len(older) > CARRIED_BYTES:
                        break
                    if record.version - CARRIED_COMMITS < version < record.version:
                        carried[version] = older
                        size += len(older)
                files.carry(encode_carried(carried))
            files.write(_HOLDER_AT, record.encode())
        except OSError as e:  # pragma: no cover - a full or vanished temp folder
            log.warning("could not record a commit in the host turn %s: %s", files.path, e)

    def carried(self, record: Record) -> bytes | None:
        """The commit ``record`` names, if it travelled with it and is still the one there: a
        hint, which ``TableLog.advance_to`` takes only once a commit read from the log
        vouches for it."""
        data = self.handed(record.version - 1).get(record.version)
        if data is None or hashlib.sha256(data).hexdigest() != record.digest:
            return None
        return data

    def handed(self, after: int) -> dict[int, bytes]:
        """The commits handed on with the record newer than ``after``, by version: hints,
        which ``TableLog.advance_to`` takes only where a commit read from the log vouches for
        them."""
        files = self._files or _files_for(self.key)
        if files is None:
            return {}
        try:
            carried = files.carried()
        except OSError:  # pragma: no cover - a vanished temp folder
            return {}
        return {v: data for v, data in carried.items() if v > after}

    def settle(self, version: int, digest: str) -> None:
        """Say, after handing the turn on, that this process is done with its commit at
        ``version`` (a slot of its own, so the next holder's record is never overwritten)."""
        files = _files_for(self.key)
        if files is None:
            return
        try:
            files.write(_DONE_AT, _encode_slot(_DONE, version, bytes.fromhex(digest), 0,
                                               os.getpid()))
        except OSError as e:  # pragma: no cover - a full or vanished temp folder
            log.warning("could not record a commit in the host turn %s: %s", files.path, e)

    def await_settled(self, version: int, digest: str) -> bool:
        """Wait, at most ``patience`` seconds and while its process lives, until the writer of
        ``version`` (whose commit has ``digest``) says it is done with it; whether it did.
        Only a hint of when to look: the caller checks what it needs itself."""
        end = time.monotonic() + self.patience
        while True:
            r = self.record()
            if r is None or (r.version, r.digest) != (version, digest):
                return False
            if r.settled:
                return True
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
