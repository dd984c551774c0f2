"""Running the ``deltacommit`` command as a second local user, for tests of what one user may do
to another's tables and shared folders.

The suite runs as root here, and root passes every permission check, so a test that wants a
refusal runs the command through ``setpriv`` as uid ``OTHER_UID``.  That user cannot enter
root's home, where the virtual environment's interpreter usually lives, so the command runs on
a system interpreter of the same minor version with this environment's packages on its path.
Run as another user, tests instead take permissions away with ``chmod`` (which then binds).
"""

from __future__ import annotations

import functools
import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import deltacommit

OTHER_UID = 4242
_SRC = str(Path(deltacommit.__file__).resolve().parents[1])
_MAIN = "import sys; from deltacommit.cli import main; sys.exit(main(sys.argv[1:]))"


def as_root() -> bool:
    return os.geteuid() == 0


def _setpriv() -> list[str]:
    tool = shutil.which("setpriv")
    assert tool, "setpriv (util-linux) is needed to run commands as a second user"
    return [tool, f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups"]


def _env() -> dict[str, str]:
    paths = [_SRC, *site.getsitepackages()]
    return {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
            "PYTHONPATH": os.pathsep.join(paths), "PYTHONNOUSERSITE": "1"}


@functools.cache
def other_python() -> str:
    """An interpreter the second user can run that imports this environment's packages."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [os.path.realpath(sys.executable), f"/usr/bin/{version}",
                  f"/usr/local/bin/{version}"]
    for python in dict.fromkeys(candidates):
        if not os.path.exists(python):
            continue
        probe = subprocess.run([*_setpriv(), python, "-c", "import pyarrow, deltacommit"],
                               env=_env(), capture_output=True, timeout=120)
        if probe.returncode == 0:
            return python
    raise AssertionError(f"no {version} interpreter that uid {OTHER_UID} can run imports "
                         f"deltacommit (tried {candidates})")


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """``deltacommit *argv`` as the second user (as root) or as this user (otherwise)."""
    if as_root():
        cmd = [*_setpriv(), other_python(), "-c", _MAIN, *argv]
    else:
        cmd = [sys.executable, "-c", _MAIN, *argv]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)


def _restore(path: Path) -> None:
    os.chmod(path, 0o755)
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            _restore(Path(entry.path))
        else:
            os.chmod(entry.path, 0o644, follow_symlinks=False)


@contextmanager
def shared_dir() -> Iterator[Path]:
    """A fresh folder the second user can enter (pytest's own temp folder is private to its
    user) and nobody else can write; removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="dc-other-user-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        _restore(path)
        shutil.rmtree(path)


def deny_writes(path: Path) -> None:
    """Make ``path`` (a folder) readable but not writable by whoever ``run_cli`` runs as: as
    root, root's files already are (mode 755/644, owner root); otherwise the modes say so."""
    for d, _, files in os.walk(path):
        os.chmod(d, 0o755 if as_root() else 0o555)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644 if as_root() else 0o444)


def deny_all(path: Path) -> None:
    """Make ``path`` (a folder) neither readable nor writable by whoever ``run_cli`` runs as."""
    os.chmod(path, 0o700 if as_root() else 0o000)
