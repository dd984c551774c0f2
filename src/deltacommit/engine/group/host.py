"""Group commit across the processes of one host (``GroupCommitPolicy(processes=True)``).

Writers in separate processes cannot share a version by themselves, and each must read every
version the others write, so N optimistic writers pay about N requests per commit between
them.  Processes of one host that open the same table with ``processes=True`` instead share
one committer: the first to take the table's lock file serves on a Unix socket, the others send
it their staged transactions (their data files already written) and get back their result
together with the commits they have not seen, so they never read the log to stay current.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import pickle
import socket
import struct
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from deltacommit import errors
from deltacommit.engine.commit.commit_info import committed_txn_ids
from deltacommit.engine.commit.loop import Member
from deltacommit.engine.commit.policy import CommitResult
from deltacommit.engine.commit.staged import StagedCommit
from deltacommit.engine.commit.table_log import TableLog
from deltacommit.engine.snapshot.snapshot import Commit
from deltacommit.errors import CommitFailedError, InvalidArgumentError
from deltacommit.runtime.process_state import process_wide

#: Queues a transaction on this process's committer; returns once it is carried to its end.
Submit = Callable[[StagedCommit, "pa.Table | None"], Member]


@dataclass(frozen=True, slots=True)
class _Request:
    """A transaction handed to the host's committer by another process (its files written)."""

    staged: StagedCommit
    #: The version of the sender's snapshot: the answer carries the commits after it.
    known_version: int


@dataclass(frozen=True, slots=True)
class _Reply:
    result: CommitResult | None
    #: (class name, message, attributes) of the error the transaction ended with.
    error: tuple[str, str, dict[str, Any]] | None
    #: Commits after the sender's snapshot up to its version, so it stays current for free.
    commits: list[Commit]


_FRAME = struct.Struct("!Q")


def _send(sock: socket.socket, obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_FRAME.pack(len(data)) + data)


def _recv(sock: socket.socket) -> Any:
    (size,) = _FRAME.unpack(_recv_exactly(sock, _FRAME.size))
    return pickle.loads(_recv_exactly(sock, size))


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(min(size - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        buf += chunk
    return bytes(buf)


def _encode_error(e: BaseException) -> tuple[str, str, dict[str, Any]]:
    attrs = {k: v for k, v in vars(e).items() if isinstance(v, str | int | float | bool | None)}
    return type(e).__name__, str(e), attrs


def _decode_error(encoded: tuple[str, str, dict[str, Any]]) -> BaseException:
    """The error as this process's own exception class, with the same message and attributes
    (errors of other kinds arrive as CommitFailedError naming their kind)."""

    name, message, attrs = encoded
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, errors.DeltaCommitError)):
        return CommitFailedError(f"the committer of this host failed: {name}: {message}")
    e = cls.__new__(cls)
    Exception.__init__(e, message)
    e.__dict__.update(attrs)
    return e


def host_paths(log: TableLog, socket_dir: str | None) -> tuple[Path, Path]:
    """The lock file and socket of a table's committer on this host.

    Keyed by location, store (its endpoint) and commit mechanism, so processes that would not
    exclude each other's commits never share a committer.
    """
    ls = log.log_store
    ident = json.dumps([ls.table_uri, repr(ls.store), sorted(ls.coordination_config().items())])
    key = hashlib.sha256(ident.encode()).hexdigest()[:24]
    base = Path(socket_dir) if socket_dir else \
        Path(tempfile.gettempdir()) / f"deltacommit-{os.getuid()}"
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = base.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise InvalidArgumentError(
            f"group commit across processes for table {log.uri}: {base} must be a directory "
            "of this user's that no one else can read or write (mode 0700)")
    sock = base / f"{key}.sock"
    if len(str(sock)) > 100:
        raise InvalidArgumentError(
            f"group commit across processes for table {log.uri}: socket path {sock} is too "
            "long for a Unix socket; give GroupCommitPolicy a shorter socket_dir")
    return base / f"{key}.lock", sock


class HostLink:
    """This process's way to the host's shared committer for one table.

    The process holding the table's lock file serves: it accepts transactions on a Unix socket
    and commits them with its own (local) transactions, answering each with its result and the
    commits its sender has not seen.  Every other process sends its transactions there.  When
    no process serves, the first to take the lock does; a process that finds the lock taken
    but nobody answering (one is starting or stopping) commits by itself, which is always safe:
    a commit through the host's committer and one made directly exclude each other like any
    two writers.

    If the serving process dies with a transaction in hand, its sender cannot know whether it
    was committed: it looks for its ``txnId`` in the versions after its snapshot and, if absent,
    submits it again with the same ``txnId``.  Every submission first checks the versions after
    the transaction's snapshot for that ``txnId`` (``CommitLoop.catch_up``), and a commit
    attempt that loses its version checks the winner the same way, so an earlier submission
    landing late is recognised instead of committed twice.  Only this user's processes can
    reach the socket (its directory is 0700); messages are pickled.
    """

    def __init__(self, log: TableLog, socket_dir: str | None, submit: Submit) -> None:
        self.log = log
        self.submit = submit
        self.lock_path, self.socket_path = host_paths(log, socket_dir)
        self._lock = threading.Lock()
        self._server: socket.socket | None = None
        self._lock_fd: int | None = None
        self._handlers: set[threading.Thread] = set()
        self._closed = False

    @property
    def serving(self) -> bool:
        return self._server is not None

    # ----------------------------------------------------------------- sending

    def commit(self, staged: StagedCommit) -> CommitResult:
        if self._server is None and not self._closed:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(self.socket_path))
            except OSError:
                sock.close()
                self._serve()  # serving now, or someone else is starting: commit here either way
            else:
                try:
                    with sock:
                        _send(sock, _Request(staged, self.log.version))
                        reply: _Reply = _recv(sock)
                except (OSError, EOFError, pickle.UnpicklingError):
                    landed = self._find(staged)
                    if landed is not None:
                        return landed
                    # Not in the log (yet): commit it here; a late landing of the lost
                    # submission is recognised by its txnId.
                else:
                    return self._settle(reply)
        return self.submit(staged, None).outcome()

    def _settle(self, reply: _Reply) -> CommitResult:
        for c in reply.commits:
            self.log.committed(c)
        if reply.error is not None:
            raise _decode_error(reply.error)
        assert reply.result is not None
        return reply.result

    def _find(self, staged: StagedCommit) -> CommitResult | None:
        """The version holding ``staged``, if the process that had it committed it before
        dying."""
        for c in self.log.commits_after(staged.read_version):
            ids = committed_txn_ids(c.commit_info)
            if staged.txn_id in ids:
                data = self.log.log_store.read_commit(c.version)
                return CommitResult(c.version, 1, txn_id=staged.txn_id,
                                    digest=hashlib.sha256(data).hexdigest(),
                                    read_version=staged.read_version, group_size=len(ids))
        return None

    # ----------------------------------------------------------------- serving

    def _serve(self) -> bool:
        """Become the host's committer for the table if no process is; False if one is."""
        with self._lock:
            if self._server is not None:
                return True
            if self._closed:
                return False
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                with contextlib.suppress(FileNotFoundError):
                    self.socket_path.unlink()  # left by a process that died serving
                server.bind(str(self.socket_path))
                server.listen(256)
            except OSError:
                server.close()
                os.close(fd)
                raise
            self._server, self._lock_fd = server, fd
            threading.Thread(target=self._accept, args=(server,), daemon=True,
                             name="deltacommit-host-committer").start()
            _SERVING.add(self)
            return True

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # closed
            handler = threading.Thread(target=self._handle, args=(conn,), daemon=True,
                                       name="deltacommit-host-member")
            with self._lock:
                self._handlers.add(handler)
            handler.start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            with conn:
                try:
                    req: _Request = _recv(conn)
                except (OSError, EOFError):
                    return  # the sender went away before sending it all
                except Exception as e:
                    _send(conn, _Reply(None, _encode_error(e), []))
                    return
                member = self.submit(req.staged, None)
                result, error = member.result, member.error
                commits: list[Commit] = []
                if result is not None and result.version > req.known_version:
                    commits = self.log.cached_commits(req.known_version + 1, result.version)
                _send(conn, _Reply(result, None if error is None else _encode_error(error),
                                   commits))
        except OSError:
            pass  # the sender died: nobody waits for the answer
        finally:
            with self._lock:
                self._handlers.discard(threading.current_thread())

    def close(self) -> None:
        """Stop serving: refuse new senders, answer the ones in hand, release the lock."""
        with self._lock:
            self._closed = True
            server, self._server = self._server, None
            handlers = list(self._handlers)
        if server is None:
            return
        server.close()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        for h in handlers:
            h.join(60)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lock
            self._lock_fd = None
        _SERVING.discard(self)


#: Links serving in this process, closed at exit so that senders are answered first.
_SERVING: set[HostLink] = set()
process_wide("host group-commit links served (engine.group.host)", _SERVING.clear)


@atexit.register
def _close_serving() -> None:
    for link in list(_SERVING):
        link.close()
