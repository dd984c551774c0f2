"""Running the ``deltacommit`` command as a second local user, for tests of what one user may do
to another's tables and shared folders.

The suite runs as root here, and root passes every permission check, so a test that wants a
refusal runs the command through ``setpriv`` as uid ``OTHER_UID``.  That user cannot enter
root's home, where the virtual environment's interpreter usually lives, so the command runs on
a system interpreter of the same minor version with this environment's packages on its path.
Where that user cannot read this environment's packages either (the repository was cloned into
a private folder, mode 0700), the session makes a copy it can read once, in a fresh folder of
its own (hard links to site-packages and deltacommit's source), and removes it at its end.
Run as another user, tests instead take permissions away with ``chmod`` (which then binds).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import deltacommit

OTHER_UID = 4242
_SRC = Path(deltacommit.__file__).resolve().parents[1]
_MAIN = "import sys; from deltacommit.cli import main; sys.exit(main(sys.argv[1:]))"
#: Where the session's readable copy goes: the temp folder as it is when the suite starts (a
#: test may point ``tempfile`` at a folder of its own for a while).
_TEMP = tempfile.gettempdir()


def as_root() -> bool:
    return os.geteuid() == 0


def _setpriv() -> list[str]:
    tool = shutil.which("setpriv")
    assert tool, "setpriv (util-linux) is needed to run commands as a second user"
    return [tool, f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups"]


@dataclasses.dataclass(frozen=True)
class OtherUserPython:
    """What the second user runs Python with: an interpreter it may execute, the folder holding
    the deltacommit package and the site-packages folders, all readable by that user."""

    python: str
    src: Path
    site_packages: tuple[Path, ...]
    #: The session's folder ``src`` and ``site_packages`` are copies in; None: they are this
    #: environment's own folders, which the second user can read.
    copied_into: Path | None

    def pythonpath(self, *, with_deltacommit: bool = True) -> str:
        paths = [self.src, *self.site_packages] if with_deltacommit else self.site_packages
        return os.pathsep.join(map(str, paths))

    def readable(self, path: Path) -> Path:
        """``path`` (a file of this repository), or where the second user can read it: a copy
        in the session's folder, made on first use."""
        if self.copied_into is None:
            return path
        relative = path.resolve().relative_to(_SRC.parent)
        folder = self.copied_into
        for part in ("repository", *relative.parent.parts):
            folder = folder / part
            folder.mkdir(mode=0o755, exist_ok=True)
            folder.chmod(0o755)
        target = folder / relative.name
        if not target.exists():
            shutil.copyfile(path, target)
            target.chmod(0o644)
        return target


#: The folder of the session's copy for the second user, once made (``remove_copy`` empties it).
_copy_folders: list[Path] = []


def _link_tree(source: Path, target: Path) -> None:
    """``target``: the files of ``source`` as hard links (a copy where a file is not readable
    by others or lies on another file system), in folders of mode 755."""
    target.mkdir(mode=0o755)
    target.chmod(0o755)
    for root, folders, files in os.walk(source):
        into = target / os.path.relpath(root, source)
        for name in folders:
            (into / name).mkdir(mode=0o755)
            (into / name).chmod(0o755)
        for name in files:
            src, dst = os.path.join(root, name), into / name
            st = os.lstat(src)
            if stat.S_ISREG(st.st_mode) and st.st_mode & stat.S_IROTH:
                try:
                    os.link(src, dst, follow_symlinks=False)
                    continue
                except OSError:
                    pass
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(src), dst)
            else:
                shutil.copyfile(src, dst)
                dst.chmod(0o755 if st.st_mode & stat.S_IXUSR else 0o644)


def _make_copy() -> OtherUserPython:
    """A folder of this session (mkdtemp: a fresh, unpredictable name; mode 755, this user's)
    with what the second user imports: deltacommit's source and site-packages, hard-linked."""
    folder = Path(tempfile.mkdtemp(prefix="dc-other-user-python-", dir=_TEMP))
    _copy_folders.append(folder)
    folder.chmod(0o755)
    src = folder / "src"
    src.mkdir(mode=0o755)
    src.chmod(0o755)
    _link_tree(_SRC / "deltacommit", src / "deltacommit")
    site_packages = []
    for i, path in enumerate(site.getsitepackages()):
        if os.path.isdir(path):
            _link_tree(Path(path), folder / f"site-packages-{i}")
            site_packages.append(folder / f"site-packages-{i}")
    return OtherUserPython(python="", src=src, site_packages=tuple(site_packages),
                           copied_into=folder)


#: What the second user's interpreter must do: import pyarrow and deltacommit, and be executable
#: by that user at its path, as a process that starts it by its path (Spark, for PYSPARK_PYTHON)
#: needs; that the probe ran proves less: here, ``setpriv`` given an interpreter in root's home
#: ran the system's.
_PROBE = ("import os, sys, pyarrow, deltacommit; "
          "sys.exit(0 if os.access(sys.argv[1], os.X_OK) else 1)")


def _probe(python: str, pythonpath: str) -> bool:
    """Whether the second user can run ``python`` and import pyarrow and deltacommit with it."""
    if not os.path.exists(python):
        return False
    probe = subprocess.run([*_setpriv(), python, "-c", _PROBE, python],
                           env=_env(pythonpath), capture_output=True, timeout=120)
    return probe.returncode == 0


@functools.cache
def other_user_python() -> OtherUserPython:
    """An interpreter the second user can run that imports this environment's packages: from
    their own folders where that user can read them, otherwise from the session's copy."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [os.path.realpath(sys.executable), f"/usr/bin/{version}",
                  f"/usr/local/bin/{version}"]
    own = OtherUserPython(python="", src=_SRC, copied_into=None,
                          site_packages=tuple(map(Path, site.getsitepackages())))
    for python in dict.fromkeys(candidates):
        if _probe(python, own.pythonpath()):
            return dataclasses.replace(own, python=python)
    copy = _make_copy()
    for python in dict.fromkeys(candidates):
        if _probe(python, copy.pythonpath()):
            return dataclasses.replace(copy, python=python)
    raise AssertionError(f"no {version} interpreter that uid {OTHER_UID} can run imports "
                         f"deltacommit, from {_SRC} nor from a copy in {copy.copied_into} "
                         f"(tried {candidates})")


def other_python() -> str:
    """The interpreter of ``other_user_python``."""
    return other_user_python().python


def remove_copy() -> None:
    """Remove the session's copy for the second user, if one was made (at the session's end)."""
    other_user_python.cache_clear()
    while _copy_folders:
        shutil.rmtree(_copy_folders.pop(), ignore_errors=True)


def _env(pythonpath: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
            "PYTHONPATH": pythonpath, "PYTHONNOUSERSITE": "1"}


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """``deltacommit *argv`` as the second user (as root) or as this user (otherwise)."""
    if as_root():
        other = other_user_python()
        cmd, pythonpath = [*_setpriv(), other.python, "-c", _MAIN, *argv], other.pythonpath()
    else:
        cmd = [sys.executable, "-c", _MAIN, *argv]
        pythonpath = os.pathsep.join(map(str, [_SRC, *site.getsitepackages()]))
    return subprocess.run(cmd, env=_env(pythonpath), capture_output=True, text=True,
                          timeout=300)


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
