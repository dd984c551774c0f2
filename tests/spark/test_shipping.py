"""The zip of deltacommit that a Spark job sends to its executors comes only from a folder this
process made, holds exactly this process's code, and is checked again each time it is handed
to Spark: another local user can neither get their code run by our jobs (a zip planted at any
name they can predict, a folder made again after a temp cleaner) nor break our jobs with theirs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from deltacommit import spark as dcs
from deltacommit.spark import shipping
from deltacommit.spark.shipping import package, package_files, package_zip

from .second_user import (
    JOB_UID,
    as_root,
    home_of_other_user,
    other_python,
    other_user_python,
    plant_zips,
    predictable_zip_paths,
    run_job_as_other,
    setpriv,
    shared_temp_folder,
)

pytestmark = pytest.mark.spark

APP = Path(__file__).with_name("shipped_app.py")


@pytest.fixture
def shared_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """Shipping as in a new process whose temp folder is a fresh shared one (like /tmp).
    (``tmp_path`` is made first, in pytest's own temp folder.)"""
    with shared_temp_folder() as folder:
        monkeypatch.setattr(tempfile, "tempdir", str(folder))
        monkeypatch.setattr(shipping, "_folder", None)
        monkeypatch.setattr(shipping, "_shipped", set())
        yield folder


def _is_ours(path: Path) -> None:
    """``path`` is a private copy of this process's zip in a private folder of this user."""
    folder = path.parent
    fst, dst = path.lstat(), folder.lstat()
    assert stat.S_ISDIR(dst.st_mode) and dst.st_uid == os.geteuid()
    assert stat.S_IMODE(dst.st_mode) == 0o700
    assert stat.S_ISREG(fst.st_mode) and fst.st_uid == os.geteuid()
    assert stat.S_IMODE(fst.st_mode) == 0o600
    assert path.read_bytes() == package().data


def test_the_zip_holds_this_code_in_a_private_folder(shared_tmp: Path) -> None:
    path = package_zip()
    _is_ours(path)
    assert path.parent.parent == shared_tmp and path.name == package().name
    assert package().name == f"deltacommit-{hashlib.sha256(package().data).hexdigest()[:16]}.zip"
    with zipfile.ZipFile(path) as zf:
        assert [(i.filename, zf.read(i)) for i in zf.infolist()] == package_files()
    assert "deltacommit/spark/shipping.py" in dict(package_files())
    assert package_zip() == path  # checked and kept while it stays as made


def test_zips_planted_at_every_name_another_user_can_predict_are_not_used(
        shared_tmp: Path, tmp_path: Path) -> None:
    planted = predictable_zip_paths(shared_tmp)
    marker = tmp_path / "planted-ran"
    plant_zips(planted, marker)
    path = package_zip()
    assert path not in planted
    _is_ours(path)
    for p in planted:  # left alone
        assert p.read_bytes() != package().data


def _remove(path: Path) -> None:
    shutil.rmtree(path.parent)  # a temp cleaner


def _made_again_by_another_user(path: Path) -> None:
    shutil.rmtree(path.parent)
    if as_root():
        subprocess.run([*setpriv(), other_python(), "-c",
                        "import os, sys; os.mkdir(sys.argv[1], 0o700)", str(path.parent)],
                       check=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    else:
        path.parent.mkdir(mode=0o777)
        path.parent.chmod(0o777)
    plant_zips([path], path.parent.parent / "never-read")


def _altered(path: Path) -> None:
    with path.open("r+b") as f:
        f.seek(100)
        f.write(b"\0\0\0\0")


def _swapped_for_a_link(path: Path) -> None:
    elsewhere = path.parent.parent / "elsewhere.zip"
    plant_zips([elsewhere], path.parent.parent / "never-read")
    path.unlink()
    path.symlink_to(elsewhere)


def _folder_opened_to_others(path: Path) -> None:
    path.parent.chmod(0o777)


def _file_made_writable_by_others(path: Path) -> None:
    path.chmod(0o666)


@pytest.mark.parametrize("tamper", [_remove, _made_again_by_another_user, _altered,
                                    _swapped_for_a_link, _folder_opened_to_others,
                                    _file_made_writable_by_others],
                         ids=lambda f: f.__name__.strip("_"))
def test_a_copy_no_longer_as_made_is_replaced(shared_tmp: Path,
                                              tamper: Callable[[Path], None]) -> None:
    first = package_zip()
    tamper(first)
    second = package_zip()
    assert second.parent != first.parent
    _is_ours(second)
    assert package_zip() == second


def test_the_same_code_zips_to_the_same_bytes_when_imported_from_the_zip(
        shared_tmp: Path) -> None:
    # As in a Spark Connect server's foreachBatch worker, which runs the code a client carried.
    path = package_zip()
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import deltacommit, json\n"
             "from deltacommit.spark.shipping import package\n"
             "print(json.dumps([deltacommit.__file__, package().digest]))")
    out = subprocess.run([sys.executable, "-c", probe, str(path)], check=True,
                         capture_output=True, text=True, timeout=120)
    origin, digest = json.loads(out.stdout)
    assert origin.startswith(str(path)) and digest == package().digest


def _shipped_digest(spark: Any, name: str) -> str:
    """SHA-256 of the file the session's tasks find under ``name`` (what they import)."""
    def digest(batches: Any) -> Any:
        import hashlib

        import pyarrow as pa
        from pyspark import SparkFiles

        for _ in batches:
            with open(SparkFiles.get(name), "rb") as f:
                found = hashlib.sha256(f.read()).hexdigest()
            yield pa.RecordBatch.from_pydict({"digest": [found]})

    return str(spark.range(1, numPartitions=1).mapInArrow(digest, "digest string")
               .collect()[0][0])


def test_a_job_ships_this_code_when_zips_are_planted(spark: Any, shared_tmp: Path,
                                                     tmp_path: Path) -> None:
    marker = tmp_path / "planted-ran"
    plant_zips(predictable_zip_paths(shared_tmp), marker)
    uri = str(tmp_path / "t")
    assert dcs.write(spark.range(5), uri).version == 1
    assert _shipped_digest(spark, package().name) == package().digest
    assert not marker.exists()


@pytest.mark.skipif(not as_root() or shutil.which("setpriv") is None or JOB_UID is None,
                    reason="a second user's Spark job needs root, setpriv and a nobody user")
def test_two_users_run_jobs_one_after_the_other(spark: Any, shared_tmp: Path,
                                                tmp_path: Path) -> None:
    # Our job first (its zip is private to us), then another user's on the same machine.
    assert dcs.write(spark.range(3), str(tmp_path / "ours")).version == 1
    _is_ours(package_zip())
    other = other_user_python()
    with home_of_other_user() as home:
        uri = str(home / "theirs")
        driver = (f"import sys, runpy; sys.path.insert(0, {str(other.src)!r}); "
                  f"runpy.run_path({str(other.readable(APP))!r}, run_name='__main__')")
        proc = run_job_as_other([other.python, "-c", driver, "--uri", uri,
                                 "--master", "local[1]"], home=home, tmpdir=shared_tmp)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        assert proc.returncode == 0 and lines, proc.stderr[-3000:]
        result = json.loads(lines[-1])
        assert result["rerun_skipped"] is True and result["first_version"] == 1
        # Their executors imported deltacommit from the zip their job sent.
        assert result["worker_has_installed_package"] is False
        # Their private folder went with their process.
        assert not [p for p in shared_tmp.iterdir()
                    if p.name.startswith("deltacommit-ship-") and p.stat().st_uid == JOB_UID]
    # And ours again, after theirs.
    shipping._shipped.clear()
    assert dcs.write(spark.range(3), str(tmp_path / "ours")).version == 2
    _is_ours(package_zip())


def test_a_forked_child_leaves_the_parents_copy_alone(shared_tmp: Path) -> None:
    script = ("import os, sys\n"
              "from deltacommit.spark.shipping import package_zip\n"
              "first = package_zip()\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    sys.exit(0)  # a normal exit: the child's exit handlers run\n"
              "os.waitpid(pid, 0)\n"
              "print(first.exists() and package_zip() == first)\n")
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "TMPDIR": str(shared_tmp)})
    assert out.stdout.strip() == "True"
    assert not list(shared_tmp.glob("deltacommit-ship-*"))  # and the parent's went at its exit
