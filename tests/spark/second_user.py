"""A second local user, for tests of what one user's files can do to another user's Spark jobs.

The suite runs as root here, and root passes every permission check, so what another user could
do is done through ``setpriv`` as uid ``OTHER_UID``.  That user cannot enter root's home, where
the virtual environment's interpreter lives, so it runs a system interpreter of the same minor
version with this environment's packages on ``PYTHONPATH`` (from the session's copy where the
second user cannot read them: tests/other_user.py); deltacommit itself only where a test puts it
there.  Hadoop (inside every Spark driver) refuses to run as a uid without an entry in
/etc/passwd, so Spark jobs of a second user run as ``nobody`` (``JOB_UID``), told a home for
Java since theirs does not exist.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import deltacommit
from tests.other_user import OTHER_UID, other_user_python


def _job_uid() -> int | None:
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return None


#: The second user whose Spark jobs the tests run (None: the machine has no ``nobody``).
JOB_UID = _job_uid()


def as_root() -> bool:
    return os.geteuid() == 0


def setpriv(uid: int = OTHER_UID) -> list[str]:
    tool = shutil.which("setpriv")
    assert tool, "setpriv (util-linux) is needed to act as a second user"
    return [tool, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def other_python() -> str:
    """A Python of this minor version that a second user can run."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in (f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        if os.access(python, os.X_OK):
            return python
    raise AssertionError(f"no {version} outside root's home for a second user to run")


def other_env(home: Path, tmpdir: Path) -> dict[str, str]:
    """The environment of a second user's process: this environment's packages (without
    deltacommit), its home, its temp folder, and its name for Spark and Hadoop."""
    other = other_user_python()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
           "TMPDIR": str(tmpdir), "PYTHONPATH": other.pythonpath(with_deltacommit=False),
           "PYTHONNOUSERSITE": "1", "PYSPARK_PYTHON": other.python,
           "JAVA_TOOL_OPTIONS": f"-Duser.home={home}", "HADOOP_USER_NAME": "other",
           "SPARK_USER": "other"}
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return env


@contextmanager
def shared_temp_folder() -> Iterator[Path]:
    """A fresh folder like /tmp (mode 1777: everyone may create, only owners remove), for tests
    to point ``TMPDIR`` at instead of the machine's own; removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="dc-shared-tmp-", dir="/tmp"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def home_of_other_user() -> Iterator[Path]:
    """A folder ``JOB_UID`` owns (its home and working folder), inside one it can enter."""
    outer = Path(tempfile.mkdtemp(prefix="dc-other-home-", dir="/tmp"))
    outer.chmod(0o755)
    home = outer / "home"
    home.mkdir()
    if as_root() and JOB_UID is not None:
        os.chown(home, JOB_UID, JOB_UID)
    try:
        yield home
    finally:
        shutil.rmtree(outer, ignore_errors=True)


#: What a planted deltacommit does: leave a mark (for the test to find) and fail the import.
_PAYLOAD = '''open({marker!r}, "a").write("planted deltacommit ran\\n")
raise ImportError("a planted deltacommit was imported")
'''

_PLANT = '''import sys, os, zipfile
marker, paths = sys.argv[1], sys.argv[2:]
for path in paths:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w") as zf:
        zf.writestr("deltacommit/__init__.py", {payload!r}.format(marker=marker))
        zf.writestr("deltacommit/spark/__init__.py", "")
'''


def plant_zips(paths: list[Path], marker: Path) -> None:
    """Create a deltacommit zip at each of ``paths`` whose import writes to ``marker`` and
    fails; as ``OTHER_UID`` when this is root (as this user otherwise)."""
    script = _PLANT.format(payload=_PAYLOAD)
    argv = [str(marker), *map(str, paths)]
    if as_root():
        cmd = [*setpriv(), other_python(), "-c", script, *argv]
    else:
        cmd = [sys.executable, "-c", script, *argv]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60,
                   env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    for path in paths:
        with zipfile.ZipFile(path) as zf:
            assert "deltacommit/__init__.py" in zf.namelist()


def run_job_as_other(args: list[str], *, home: Path, tmpdir: Path,
                     timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``args`` (a Spark application) as ``JOB_UID`` (root only), in ``home``."""
    assert as_root() and JOB_UID is not None
    return subprocess.run([*setpriv(JOB_UID), *args], env=other_env(home, tmpdir), cwd=home,
                          capture_output=True, text=True, timeout=timeout)


def predictable_zip_paths(folder: Path) -> list[Path]:
    """Every path in ``folder`` (a shared temp folder) at which another user could expect this
    process's deltacommit zip: the name earlier releases used and reused when present (a digest
    of the package's files), and this release's file name."""
    import hashlib

    from deltacommit.spark.shipping import package

    root = Path(deltacommit.__file__).resolve().parent
    files = sorted(p for p in root.rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts
                   and p.suffix in (".py", ".typed"))
    digest = hashlib.sha256()
    for p in files:
        digest.update(p.relative_to(root).as_posix().encode())
        digest.update(p.read_bytes())
    return [folder / f"deltacommit-{digest.hexdigest()[:16]}.zip", folder / package().name]
