"""The ``checkpoint``, ``cleanup`` and ``vacuum`` commands."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import deltacommit as dc
from deltacommit.cli import main
from deltacommit.protocol.log.names import LOG_DIR, checkpoint_path

from .helpers import local_table, rows


def test_checkpoint_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "t"
    t, _ = local_table(root)
    dc.write(t, rows([1, 2]))
    assert main(["checkpoint", str(root)]) == 0
    out = capsys.readouterr().out
    assert "checkpoint at version 1 written: 3 actions, 1 files" in out
    assert (root / checkpoint_path(1)).exists()
    assert main(["checkpoint", str(root), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["version"] == 1 and info["created"] is False


def test_cleanup_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "t"
    t, _ = local_table(root, configuration={"delta.checkpointInterval": "3",
                                            "delta.enableExpiredLogCleanup": "false"})
    for i in range(4):
        dc.write(t, rows([i]))
    old = time.time() - 60 * 86_400
    for p in (root / LOG_DIR).iterdir():
        os.utime(p, (old, old))
    assert main(["cleanup", str(root), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("would delete 3 expired log files")
    assert len(list((root / LOG_DIR).glob("*.json"))) == 5
    assert main(["cleanup", str(root), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert len(result["files"]) == 3 and result["dry_run"] is False
    assert len(list((root / LOG_DIR).glob("*.json"))) == 2


def test_vacuum_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "t"
    t, _ = local_table(root)
    dc.write(t, rows([1]))
    (root / "orphan.parquet").write_bytes(b"x")
    old = time.time() - 3600
    os.utime(root / "orphan.parquet", (old, old))
    assert main(["vacuum", str(root)]) == 0
    assert capsys.readouterr().out.startswith("would delete 0 unreferenced data files")
    assert main(["vacuum", str(root), "--retention-hours", "0.5"]) == 1
    assert "shorter than the table's" in capsys.readouterr().err
    assert main(["vacuum", str(root), "--retention-hours", "0.5", "--no-enforce-retention"]) == 0
    assert "orphan.parquet" in capsys.readouterr().out
    assert (root / "orphan.parquet").exists()
    assert main(["vacuum", str(root), "--retention-hours", "0.5", "--no-enforce-retention",
                 "--execute", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["files"] == ["orphan.parquet"]
    assert not (root / "orphan.parquet").exists()
    assert dc.DeltaTable(str(root)).to_arrow().num_rows == 1
