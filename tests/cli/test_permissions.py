"""Every command on a table another user owns, or one this user may not read: a one-line
``deltacommit: error`` naming the path, the refusal and the user, exit status 77 (``EX_NOPERM``)
and no traceback; nothing of the table changed.  Run as a second user through ``setpriv`` (the
suite runs as root), or with permissions taken away otherwise."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import deltacommit as dc
from deltacommit.cli import EXIT_ACCESS_DENIED
from tests.other_user import deny_all, deny_writes, run_cli, shared_dir


def _contents(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def folder() -> Iterator[Path]:
    with shared_dir() as path:
        yield path


def _table(folder: Path) -> str:
    """A partitioned table with small files to compact, one removed file for vacuum, and an
    input file to append."""
    uri = str(folder / "t")
    dc.write(uri, pa.table({"id": [1, 2], "day": ["a", "b"]}), partition_by=["day"])
    dc.write(uri, pa.table({"id": [3], "day": ["a"]}), mode="append")
    dc.write(uri, pa.table({"id": [4], "day": ["c"]}), mode="append")
    dc.DeltaTable(uri).delete("day = 'c'")
    pq.write_table(pa.table({"id": [5], "day": ["a"]}), folder / "in.parquet")
    return uri


def _refused(result: object, *words: str) -> None:
    import subprocess

    assert isinstance(result, subprocess.CompletedProcess)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == EXIT_ACCESS_DENIED, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("deltacommit: error: "), result.stderr
    assert "Permission denied" in lines[0] and "runs as uid" in lines[0], lines[0]
    for w in words:
        assert w in lines[0], (w, lines[0])


WRITES = [
    ("append", ["{in}"]),
    ("optimize", []),
    ("vacuum", ["--retention-hours", "0", "--no-enforce-retention", "--execute"]),
    ("checkpoint", []),
    ("delete", ["--where", "day = 'a'"]),
]


@pytest.mark.parametrize(("command", "extra"), WRITES, ids=[c for c, _ in WRITES])
def test_a_command_that_writes_to_a_folder_it_may_not_write_is_refused_clearly(
        command: str, extra: list[str], folder: Path) -> None:
    uri = _table(folder)
    deny_writes(Path(uri))
    before = _contents(Path(uri))
    result = run_cli(command, uri, *(a.format(**{"in": str(folder / "in.parquet")})
                                     for a in extra))
    _refused(result, str(Path(uri)))
    assert _contents(Path(uri)) == before


READS = [("show", []), ("history", []), ("append", ["{in}"]), ("optimize", []),
         ("vacuum", []), ("checkpoint", []), ("cleanup", []), ("delete", ["--where", "day = 'a'"]),
         ("coordination", []), ("verify", [])]


@pytest.mark.parametrize(("command", "extra"), READS, ids=[c for c, _ in READS])
def test_every_command_on_a_table_it_may_not_read_is_refused_clearly(
        command: str, extra: list[str], folder: Path) -> None:
    uri = _table(folder)
    before = _contents(Path(uri))
    deny_all(Path(uri))
    args = [command, uri] if command != "coordination" else [command, "show", uri]
    result = run_cli(*args, *(a.format(**{"in": str(folder / "in.parquet")}) for a in extra))
    _refused(result, str(Path(uri)))
    Path(uri).chmod(0o755)
    assert _contents(Path(uri)) == before


def test_creating_a_table_where_it_may_not_write_is_refused_clearly(folder: Path) -> None:
    (folder / "private").mkdir()
    deny_all(folder / "private")
    _refused(run_cli("create", str(folder / "private" / "t"), "--schema", "id:long"))
    (folder / "readonly").mkdir()
    deny_writes(folder / "readonly")
    _refused(run_cli("create", str(folder / "readonly" / "t"), "--schema", "id:long"),
             str(folder / "readonly"))
    assert not (folder / "readonly" / "t").exists() or not any(
        (folder / "readonly" / "t").rglob("*.json"))
