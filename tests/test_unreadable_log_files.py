"""Log files that exist but are not regular files (a directory, a FIFO, a symbolic link out of the
table) or that this user may not read; and data files that are not regular files.

A writer that loses the claim of a version to such a name cannot read the winner: it used to
take that for "no new version" and lose the same claim until out of attempts (10,000, about
half an hour), then blame concurrent writers.  Now the first loss names the path and what it is;
no reader opens a FIFO blocking or follows a link; a ``_last_checkpoint`` or checkpoint of that
kind is skipped (the log read instead).  A data file is read only if it is a regular file (a
link to one is followed: an operator may have moved the data), opened without blocking."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.commit.policy import CommitPolicy
from deltacommit.engine.snapshot import state_cache
from deltacommit.errors import CorruptLogError
from tests.other_user import as_root, run_cli, shared_dir

SCHEMA = pa.schema([("id", pa.int64())])


def _table(path: Path) -> str:
    uri = str(path)
    dc.write(uri, pa.table({"id": [1]}, schema=SCHEMA))
    return uri


def _plant(path: Path, kind: str, outside: Path) -> str:
    """Put a ``kind`` where a log file belongs; what the error calls it."""
    if kind == "directory":
        path.mkdir()
        return "a directory"
    if kind == "FIFO":
        os.mkfifo(path)
        return "a FIFO"
    outside.write_bytes(b'{"commitInfo":{"operation":"FORGED"}}\n')
    path.symlink_to(outside)
    return "a symbolic link"


def _unblocked(fn: Callable[[], Any], fifo: Path | None) -> Any:
    """``fn()``, failing the test instead of hanging if it blocks opening ``fifo``."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = fn()
        except BaseException as e:  # handed to the test thread
            result["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(20)
    if t.is_alive():
        if fifo is not None:  # release the reader so the thread ends
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        t.join(20)
        pytest.fail("blocked opening a FIFO named like a log file")
    if "error" in result:
        raise result["error"]
    return result.get("value")


KINDS = ["directory", "FIFO", "symlink out of the table"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_writer_that_loses_to_a_name_it_cannot_read_says_so_at_the_first_loss(
        kind: str, tmp_path: Path) -> None:
    uri = _table(tmp_path / "t")
    table = dc.DeltaTable(uri, policy=CommitPolicy(max_attempts=2))
    version = table.version + 1
    planted = Path(uri) / "_delta_log" / f"{version:020d}.json"
    what = _plant(planted, kind, tmp_path / "outside.json")
    with pytest.raises(CorruptLogError) as e:
        _unblocked(lambda: dc.write(table, pa.table({"id": [2]}, schema=SCHEMA),
                                    mode="append"), planted if kind == "FIFO" else None)
    message = str(e.value)
    assert str(planted) in message and what in message, message
    assert f"version {version} exists but is not a readable commit file" in message
    assert "move it out of _delta_log" in message
    assert sorted(p.name for p in planted.parent.glob("*.json")) == [
        f"{v:020d}.json" for v in range(version + 1)]  # nothing committed past it


@pytest.mark.parametrize("kind", ["FIFO", "symlink out of the table"])
def test_a_reader_refuses_a_commit_that_is_not_a_regular_file_without_blocking(
        kind: str, tmp_path: Path) -> None:
    uri = _table(tmp_path / "t")
    version = dc.DeltaTable(uri).version + 1
    planted = Path(uri) / "_delta_log" / f"{version:020d}.json"
    what = _plant(planted, kind, tmp_path / "outside.json")
    state_cache.clear()
    with pytest.raises(CorruptLogError, match=f"version {version} exists but .*{what}"):
        _unblocked(lambda: dc.DeltaTable(uri), planted if kind == "FIFO" else None)


def test_a_directory_named_like_the_first_commit_is_named_by_create(tmp_path: Path) -> None:
    planted = tmp_path / "t" / "_delta_log" / f"{0:020d}.json"
    planted.mkdir(parents=True)
    with pytest.raises(CorruptLogError, match=f"version 0 exists .*{planted}.*a directory"):
        dc.DeltaTable.create(str(tmp_path / "t"), SCHEMA)


@pytest.mark.parametrize("kind", KINDS)
def test_a_last_checkpoint_that_is_not_a_regular_file_is_ignored(
        kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    uri = _table(tmp_path / "t")
    dc.DeltaTable(uri).checkpoint()
    dc.write(uri, pa.table({"id": [2]}, schema=SCHEMA), mode="append")
    hint = Path(uri) / "_delta_log" / "_last_checkpoint"
    hint.unlink()
    _plant(hint, kind, tmp_path / "outside.json")
    state_cache.clear()
    with caplog.at_level(logging.WARNING):
        table = _unblocked(lambda: dc.DeltaTable(uri), hint if kind == "FIFO" else None)
    assert "ignoring" in caplog.text and "_last_checkpoint" in caplog.text
    assert sorted(table.to_arrow().column("id").to_pylist()) == [1, 2]


@pytest.mark.parametrize("change", ["cut short", "grew"])
def test_a_last_checkpoint_rewritten_in_place_while_read_is_ignored(
        change: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``_last_checkpoint`` is a hint another writer (or an operator's copy) may write over in
    place: one that changes while it is read is ignored and the log listed, as a hint that
    does not parse is, not a failure to open the table.  Here the file is cut short or
    written longer after it was opened and its size checked, before its bytes are read."""
    from deltacommit.io.storage import local

    uri = _table(tmp_path / "t")
    dc.DeltaTable(uri).checkpoint()
    dc.write(uri, pa.table({"id": [2]}, schema=SCHEMA), mode="append")
    hint = Path(uri) / "_delta_log" / "_last_checkpoint"
    latest = dc.DeltaTable(uri).version
    opened = local.open_regular

    def rewritten_after_open(full: str, op: str, **kw: Any) -> Any:
        fd, st = opened(full, op, **kw)
        if full == str(hint):
            content = hint.read_bytes()
            with open(hint, "r+b") as f:  # the same file, written over in place
                if change == "cut short":
                    f.truncate(len(content) // 2)
                else:
                    f.seek(len(content))
                    f.write(b" " * 10)
        return fd, st

    monkeypatch.setattr(local, "open_regular", rewritten_after_open)
    state_cache.clear()
    with caplog.at_level(logging.WARNING):
        table = dc.DeltaTable(uri)
    assert "ignoring" in caplog.text and "_last_checkpoint" in caplog.text
    assert "while being read" in caplog.text
    assert table.version == latest
    assert sorted(table.to_arrow().column("id").to_pylist()) == [1, 2]


@pytest.mark.parametrize("kind", KINDS)
def test_a_checkpoint_that_is_not_a_regular_file_is_skipped_for_the_log(
        kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    uri = _table(tmp_path / "t")
    info = dc.DeltaTable(uri).checkpoint()
    dc.write(uri, pa.table({"id": [2]}, schema=SCHEMA), mode="append")
    checkpoint = Path(uri) / "_delta_log" / Path(info.path).name
    checkpoint.unlink()
    _plant(checkpoint, kind, tmp_path / "outside.parquet")
    state_cache.clear()
    with caplog.at_level(logging.WARNING):
        table = _unblocked(lambda: dc.DeltaTable(uri),
                           checkpoint if kind == "FIFO" else None)
    if kind != "directory":  # a directory is not listed as a log file at all
        assert "skipping checkpoint" in caplog.text and "not a regular file" in caplog.text
    assert sorted(table.to_arrow().column("id").to_pylist()) == [1, 2]


def test_a_commit_this_user_may_not_read_is_named_at_once() -> None:
    with shared_dir() as folder:
        uri = _table(folder / "t")
        dc.write(uri, pa.table({"id": [2]}, schema=SCHEMA), mode="append")
        for p in (folder / "t").rglob("*"):
            if as_root():
                os.chown(p, 4242, 4242)
        if as_root():
            os.chown(folder / "t", 4242, 4242)
        commit = folder / "t" / "_delta_log" / f"{1:020d}.json"
        if as_root():
            os.chown(commit, 0, 0)
        commit.chmod(0o600 if as_root() else 0o000)
        before = sorted(p.name for p in commit.parent.iterdir())
        (folder / "rows.csv").write_text("id\n3\n")
        result = run_cli("append", uri, str(folder / "rows.csv"))
        assert "Traceback" not in result.stderr, result.stderr
        assert result.returncode == 77, result.stderr
        assert str(commit) in result.stderr and "Permission denied" in result.stderr
        assert sorted(p.name for p in commit.parent.iterdir()) == before


def _two_files(tmp_path: Path) -> tuple[str, int, Path]:
    """A table of two data files: its URI, version and the first file's path."""
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [1, 2]}, schema=SCHEMA))
    dc.write(uri, pa.table({"id": [3]}, schema=SCHEMA), mode="append")
    table = dc.DeltaTable(uri)
    return uri, table.version, Path(uri) / table.files()[0].path


def _verbs(uri: str) -> dict[str, Callable[[], Any]]:
    """Each reader of a table's data files, run on ``uri``."""
    source = pa.table({"id": [2, 9]}, schema=SCHEMA)
    return {
        "read": lambda: dc.DeltaTable(uri).to_arrow(),
        "update": lambda: dc.DeltaTable(uri).update({"id": "id + 10"}),
        "delete": lambda: dc.DeltaTable(uri).delete("id > 0"),
        "merge": lambda: dc.DeltaTable(uri).merge(source, "t.id = s.id", source_alias="s",
                                                  target_alias="t")
        .when_matched_delete().execute(),
        "optimize": lambda: dc.DeltaTable(uri).optimize.compact(),
    }


@pytest.mark.parametrize("kind", ["directory", "FIFO"])
@pytest.mark.parametrize("verb", ["read", "update", "delete", "merge", "optimize"])
def test_a_data_file_that_is_not_a_regular_file_is_named_without_blocking(
        kind: str, verb: str, tmp_path: Path) -> None:
    """Every reader of data files (a scan, the row-level verbs, compaction) refuses a FIFO or
    a directory in a data file's place at once, naming the table, the file and what it is,
    and commits nothing; it used to wait on the FIFO until someone wrote to it."""
    uri, version, planted = _two_files(tmp_path)
    planted.unlink()
    what = _plant(planted, kind, tmp_path / "outside")
    run = _verbs(uri)
    with pytest.raises(CorruptLogError) as e:
        _unblocked(run[verb], planted if kind == "FIFO" else None)
    message = str(e.value)
    assert uri in message and planted.name in message and what in message, message
    assert dc.DeltaTable(uri).version == version


@pytest.mark.parametrize("damage", ["missing", "garbage", "truncated"])
@pytest.mark.parametrize("verb", ["update", "delete", "merge"])
def test_a_row_level_verb_names_a_missing_or_damaged_data_file_and_commits_nothing(
        damage: str, verb: str, tmp_path: Path) -> None:
    """The row-level verbs read each file's physical rows by their own short path; a data
    file gone, overwritten with other bytes or cut short fails them with the table and the
    file named, and nothing is committed."""
    uri, version, damaged = _two_files(tmp_path)
    if damage == "missing":
        damaged.unlink()
    elif damage == "garbage":
        damaged.write_bytes(b"not parquet at all" * 10)
    else:
        damaged.write_bytes(damaged.read_bytes()[:-20])
    run = _verbs(uri)
    with pytest.raises(dc.DeltaCommitError) as e:
        run[verb]()
    message = str(e.value)
    assert uri in message and damaged.name in message, message
    assert ("missing" in message) == (damage == "missing"), message
    assert dc.DeltaTable(uri).version == version


@pytest.mark.parametrize("contents", ["the same column twice", "a list where a long is"])
@pytest.mark.parametrize("verb", ["read", "update", "delete", "merge", "optimize"])
def test_a_data_file_whose_columns_contradict_the_table_is_named(
        contents: str, verb: str, tmp_path: Path) -> None:
    """A data file another writer wrote with a column twice, or with a type that cannot
    become the table's, fails every reader with the table and the file named (it was a bare
    KeyError or ArrowNotImplementedError), and nothing is committed."""
    import pyarrow.parquet as pq

    from deltacommit.errors import DeltaCommitError

    uri, version, wrong = _two_files(tmp_path)
    if contents == "the same column twice":
        ids = pa.array([1, 2], pa.int64())
        bad = pa.Table.from_arrays([ids, ids], names=["id", "id"])
    else:
        bad = pa.table({"id": pa.array([[1], [2]], pa.list_(pa.int64()))})
    pq.write_table(bad, wrong)
    with pytest.raises(DeltaCommitError) as e:
        _verbs(uri)[verb]()
    message = str(e.value)
    assert uri in message and wrong.name in message, message
    assert dc.DeltaTable(uri).version == version


@pytest.mark.parametrize("descriptors", ["/proc/self/fd", "none"])
def test_a_data_file_larger_than_a_whole_read_is_read_through_its_descriptor(
        descriptors: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above ``WHOLE_READ_BYTES`` a data file is not read into memory whole but through the
    descriptor that was checked (Arrow's own file on it where ``/proc/self/fd`` shows it,
    else a Python file); what is read is the same."""
    from deltacommit.io.storage import local

    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": list(range(1000)), "s": [str(i) for i in range(1000)]}))
    whole = dc.DeltaTable(uri).to_arrow()
    monkeypatch.setattr(local, "WHOLE_READ_BYTES", 0)
    if descriptors == "none":
        monkeypatch.setattr(local, "_OWN_DESCRIPTORS", str(tmp_path / "no-such-folder"))
    assert dc.DeltaTable(uri).to_arrow().equals(whole)
    dc.DeltaTable(uri).update({"s": "'x'"}, predicate="id < 10")
    got = dc.DeltaTable(uri).to_arrow().sort_by("id")
    assert got.column("s").to_pylist()[:11] == ["x"] * 10 + ["10"]


def _sized(size: int) -> os.stat_result:
    """A file status saying ``size`` bytes, for reading a pipe as a file of that size."""
    return os.stat_result((0o100644, 0, 0, 1, 0, 0, size, 0, 0, 0))


def test_a_file_that_grows_while_read_is_named_not_read_on() -> None:
    """A local file (a data file, a commit) that holds more than the size checked when it
    was opened is a StorageError naming it, neither read on to an end another writer may keep
    pushing back nor cut to the size seen: here a pipe with more bytes waiting and its writer
    open, which a read to the end would wait on for ever."""
    from deltacommit.errors import StorageError
    from deltacommit.io.storage.local import read_as_checked

    r, w = os.pipe()
    try:
        os.write(w, b"0123456789")
        with pytest.raises(StorageError, match=r"0\.json.*grew while being read.*5 bytes"):
            read_as_checked(r, _sized(5), "/t/_delta_log/0.json", "get")
        os.close(w)
        w = -1
        assert read_as_checked(r, _sized(4), "/t/_delta_log/0.json", "get") == b"6789"
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_a_file_cut_short_while_read_is_named_not_returned_short() -> None:
    """A file that holds fewer bytes than checked when it is read (cut short meanwhile) is a
    StorageError naming it and how much was there, not a shorter content taken for whole."""
    from deltacommit.errors import StorageError
    from deltacommit.io.storage.local import read_as_checked

    r, w = os.pipe()
    try:
        os.write(w, b"012")
        os.close(w)
        with pytest.raises(StorageError, match=r"0\.json.*cut short.*3 of its 8 bytes"):
            read_as_checked(r, _sized(8), "/t/_delta_log/0.json", "get")
    finally:
        os.close(r)
