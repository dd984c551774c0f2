"""deltacommit's own code, sent to the Spark executors that run its tasks.

Write and read tasks are deltacommit classes; an executor unpickling one imports deltacommit.
Clusters rarely have it installed (their executors have pyarrow and pandas, which Spark's Arrow
path needs, and nothing the job brings), so before its first job on a session deltacommit sends
itself: the package is pure Python, zipped once per process from the code this process runs
and added with ``SparkContext.addPyFile`` on a classic session or ``SparkSession.addArtifacts(...,
pyfile=True)`` over Spark Connect.  Either puts the zip on the executors' ``sys.path``.

Whatever file Spark is handed is code every executor runs, so it never comes from a name another
local user could create first: the zip is built in memory (the same bytes for the same code:
sorted entries, fixed times and modes), and written, with an exclusive create, into a folder
this process made with ``mkdtemp`` (mode 0700, an unpredictable name).  Before each hand-over
the folder and the file are opened again without following links and must still be the ones
this process made: a folder of this user, private, the same inode; a regular file of this user,
not writable by others, holding exactly the bytes built (SHA-256).  Anything else (a temp
cleaner removed the folder, someone made it again) is left alone and a new folder is made.  The
folder and the file go when the process exits.  Spark itself reads the file later (the driver's
file server hands it to executors that join late), so the folder must outlive the session.

The zip's name carries a digest of its bytes, so a session that already has this exact code is
not sent it again, a session that has an older zip of another name simply gains the new one, and
two processes that share a Spark Connect session send the same name only with the same bytes.
Setting the session's ``spark.deltacommit.shipPackage`` to ``false`` turns this off, for
clusters that install deltacommit themselves.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import io
import os
import stat
import tempfile
import threading
import zipfile
import zipimport
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import deltacommit
from deltacommit.errors import DeltaCommitError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SHIP_SETTING = "spark.deltacommit.shipPackage"

#: Every entry of the zip gets this time and mode, so the same code always zips to the same
#: bytes (and the same name).
_ENTRY_TIME = (1980, 1, 1, 0, 0, 0)
_ENTRY_MODE = 0o644 << 16

#: The package's files that are shipped: its modules and the typing marker.
_SHIPPED_SUFFIXES = (".py", ".typed")


@dataclass(frozen=True)
class PackageZip:
    """The zip of the deltacommit code this process runs."""

    #: ``deltacommit-<first 16 hex digits of the SHA-256 of data>.zip``
    name: str
    data: bytes
    #: SHA-256 of ``data``, hex.
    digest: str


@dataclass(frozen=True)
class _Folder:
    """The private folder this process made for its copy of the zip, and its identity."""

    path: str
    device: int
    inode: int
    #: The process that made it (a forked child exiting leaves it to its parent).
    pid: int


_lock = threading.RLock()
_package: PackageZip | None = None
_folder: _Folder | None = None
_shipped: set[tuple[str, str]] = set()


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext, no JVM in this process)."""
    module = type(spark).__module__
    return module.startswith("pyspark.sql.connect")


def package_files() -> list[tuple[str, bytes]]:
    """Every module of the deltacommit package this process imported, as (name in the zip,
    bytes), sorted by name.

    The package is read from where it was imported: its folder, or the zip it was imported
    from (as on a Spark Connect server's worker, which runs the code a client carried to it),
    so both give the same list for the same code."""

    spec = deltacommit.__spec__
    loader = spec.loader if spec is not None else None
    files: dict[str, bytes] = {}
    if isinstance(loader, zipimport.zipimporter):
        with zipfile.ZipFile(loader.archive) as zf:
            base = loader.prefix + "deltacommit/"
            for info in zf.infolist():
                name = info.filename
                if (name.startswith(base) and not info.is_dir()
                        and "__pycache__" not in name.split("/")
                        and name.endswith(_SHIPPED_SUFFIXES)):
                    files[name[len(loader.prefix):]] = zf.read(info)
    else:
        package = Path(deltacommit.__file__).resolve().parent
        for p in package.rglob("*"):
            if (p.is_file() and "__pycache__" not in p.parts
                    and p.suffix in _SHIPPED_SUFFIXES):
                files["deltacommit/" + p.relative_to(package).as_posix()] = p.read_bytes()
    if "deltacommit/__init__.py" not in files:
        raise DeltaCommitError(
            f"cannot send deltacommit to the Spark executors: its package at "
            f"{getattr(deltacommit, '__file__', '?')} has no __init__.py that could be zipped; "
            f"install deltacommit on the cluster and set {SHIP_SETTING} to false")
    return sorted(files.items())


def build_zip(files: list[tuple[str, bytes]]) -> bytes:
    """The zip of ``files``: the same bytes for the same files, whoever builds it, when."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=_ENTRY_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = _ENTRY_MODE
            zf.writestr(info, data)
    return out.getvalue()


def package() -> PackageZip:
    """The zip of the code this process runs (built on first use, kept in memory: it is this
    process's own code and does not change while it runs)."""
    global _package
    with _lock:
        if _package is None:
            data = build_zip(package_files())
            digest = hashlib.sha256(data).hexdigest()
            _package = PackageZip(f"deltacommit-{digest[:16]}.zip", data, digest)
        return _package


def package_zip() -> Path:
    """A file holding exactly ``package().data``, in a folder only this user can enter, made
    by this process; checked again on every call (see the module's docstring)."""
    global _folder
    with _lock:
        pkg = package()
        if _folder is not None:
            path = _checked_copy(_folder, pkg)
            if path is not None:
                return path
        _folder = _new_copy(pkg)
        path = _checked_copy(_folder, pkg)
        if path is None:
            raise DeltaCommitError(
                f"cannot send deltacommit to the Spark executors: the zip just written in "
                f"{_folder.path} changed before it could be handed to Spark")
        return path


def _checked_copy(folder: _Folder, pkg: PackageZip) -> Path | None:
    """The path of the zip in ``folder`` if the folder is still the one this process made
    (same inode, this user's, private) and the file in it is this user's regular file, not
    writable by others, holding exactly ``pkg``'s bytes; None otherwise."""
    uid = os.geteuid()
    try:
        dir_fd = os.open(folder.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(dir_fd)
        if ((st.st_dev, st.st_ino) != (folder.device, folder.inode) or st.st_uid != uid
                or stat.S_IMODE(st.st_mode) & 0o077):
            return None
        try:
            fd = os.open(pkg.name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            fst = os.fstat(f.fileno())
            if (not stat.S_ISREG(fst.st_mode) or fst.st_uid != uid
                    or stat.S_IMODE(fst.st_mode) & 0o022 or fst.st_size != len(pkg.data)):
                return None
            if hashlib.sha256(f.read(len(pkg.data) + 1)).hexdigest() != pkg.digest:
                return None
    finally:
        os.close(dir_fd)
    return Path(folder.path) / pkg.name


def _new_copy(pkg: PackageZip) -> _Folder:
    """Write ``pkg`` into a new private folder (``mkdtemp``: created exclusively, mode 0700,
    an unpredictable name) with an exclusive create; the folder is removed at exit."""
    path = tempfile.mkdtemp(prefix="deltacommit-ship-")
    dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        st = os.fstat(dir_fd)
        folder = _Folder(path, st.st_dev, st.st_ino, os.getpid())
        fd = os.open(pkg.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                     dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as f:
            f.write(pkg.data)
    finally:
        os.close(dir_fd)
    atexit.register(_remove_copy, folder, pkg.name)
    return folder


def _remove_copy(folder: _Folder, name: str) -> None:
    """Remove the zip and its folder, if the folder is still the one this process made."""
    if os.getpid() != folder.pid:
        return
    try:
        dir_fd = os.open(folder.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        st = os.fstat(dir_fd)
        if (st.st_dev, st.st_ino) != (folder.device, folder.inode):
            return
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    with contextlib.suppress(OSError):  # not empty or not ours any more: left as it is
        os.rmdir(folder.path)


def _session_key(spark: SparkSession) -> str:
    if is_connect(spark):
        return "connect:" + str(getattr(spark, "session_id", id(spark)))
    return "classic:" + str(spark.sparkContext.applicationId)


def shipping_enabled(spark: SparkSession) -> bool:
    """Whether deltacommit sends itself to ``spark``'s executors (``SHIP_SETTING``)."""
    return (spark.conf.get(SHIP_SETTING, "true") or "true").lower() != "false"


def ship_package(spark: SparkSession) -> None:
    """Make deltacommit importable on ``spark``'s executors (once per session and code)."""
    if not shipping_enabled(spark):
        return
    with _lock:
        key = (_session_key(spark), package().name)
        if key in _shipped:
            return
        path = package_zip()
        if is_connect(spark):
            spark.addArtifacts(str(path), pyfile=True)
        else:
            spark.sparkContext.addPyFile(str(path))
        _shipped.add(key)


def missing_module_error(error: BaseException, uri: str) -> DeltaCommitError | None:
    """A clear error for a Spark job that failed because an executor could not import what
    deltacommit's tasks need; None for any other failure."""
    text = str(error)
    for module, fix in (
            ("deltacommit", f"leave {SHIP_SETTING} unset (deltacommit then sends itself to the "
                            "executors) or install deltacommit on the cluster"),
            ("pyarrow", "install pyarrow on the cluster's executors (Spark's Arrow path needs "
                        "it too)")):
        if f"No module named '{module}" in text:
            return DeltaCommitError(
                f"writing to or reading table {uri}: the Spark executors cannot import "
                f"{module!r}; {fix}")
    return None


def run_tasks(frame: Any, task: Any, result_ddl: str, uri: str) -> list[Any]:
    """Run ``task`` over ``frame``'s rows on the executors (``mapInArrow``) and collect what it
    returns: the package is sent first, and a job whose executors cannot import what the task
    needs fails with the clear error of ``missing_module_error``."""
    ship_package(frame.sparkSession)
    try:
        rows: list[Any] = frame.mapInArrow(task, result_ddl).collect()
    except Exception as e:
        clear = missing_module_error(e, uri)
        if clear is not None:
            raise clear from e
        raise
    return rows
