"""Torn, partial and foreign-form checkpoints: skipped for an older one or the log, never trusted."""

from __future__ import annotations

import io
import json
import logging
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import deltacommit as dc
from deltacommit.errors import MissingVersionError
from deltacommit.protocol.log.names import LAST_CHECKPOINT, LOG_DIR, checkpoint_path, commit_path

from .helpers import file_set, ids_of, local_table, open_table, rows


def build(root: Path, n: int = 9, interval: int = 4) -> tuple[list[int], dict[str, object]]:
    """A table with checkpoints every ``interval`` versions and one delete; its rows and files."""
    t, _ = local_table(root, configuration={"delta.checkpointInterval": str(interval)},
                       partition_by=["day"])
    for i in range(n):
        dc.write(t, rows([i], day=f"d{i % 2}"))
    t.delete("day = 'd0'")
    dc.write(t, rows([50], day="d0"))
    return ids_of(t.to_arrow()), dict(file_set(t))


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_truncated_checkpoint_is_skipped_for_the_log(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "t"
    want, files = build(root)  # versions 0..11, checkpoints at 4 and 8
    for keep in (0.5, 0.99, 0.0):
        truncate(root / checkpoint_path(8), keep)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="deltacommit.checkpoint"):
            t = open_table(root)
        assert t.version == 11
        assert ids_of(t.to_arrow()) == want
        assert file_set(t) == files
        assert [r.getMessage().split(" of ")[0] for r in caplog.records] == [
            f"skipping checkpoint {8:020d}.checkpoint.parquet"]


def test_truncated_checkpoint_falls_back_to_an_older_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "t"
    want, files = build(root)
    truncate(root / checkpoint_path(8))
    for v in range(4):
        (root / commit_path(v)).unlink()  # only checkpoint 4 and the log after it remain
    t = open_table(root)
    assert ids_of(t.to_arrow()) == want and file_set(t) == files


def test_torn_checkpoint_with_nothing_to_fall_back_on_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "t"
    build(root)
    truncate(root / checkpoint_path(8))
    (root / checkpoint_path(4)).unlink()
    for v in range(8):
        (root / commit_path(v)).unlink()
    with pytest.raises(MissingVersionError, match="could not be used"):
        open_table(root)


def test_checkpoint_with_fewer_rows_than_last_checkpoint_says_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "t"
    want, files = build(root)
    path = root / checkpoint_path(8)
    table = pq.read_table(path)
    hint = json.loads((root / LAST_CHECKPOINT).read_text())
    assert hint["version"] == 8 and hint["size"] == table.num_rows
    # A valid Parquet file that lost its last rows (the adds and tombstones at the end).
    pq.write_table(table.slice(0, table.num_rows - 2), path)
    t = open_table(root)
    assert ids_of(t.to_arrow()) == want and file_set(t) == files


def test_checkpoint_without_protocol_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "t"
    want, files = build(root)
    (root / LAST_CHECKPOINT).unlink()  # no size to compare: the content check must catch it
    path = root / checkpoint_path(8)
    table = pq.read_table(path)
    pq.write_table(table.slice(1), path)  # row 0 is the protocol
    t = open_table(root)
    assert ids_of(t.to_arrow()) == want and file_set(t) == files


def test_multi_part_checkpoint_is_read_and_an_incomplete_one_ignored(tmp_path: Path) -> None:
    root = tmp_path / "t"
    want, files = build(root)
    log = root / LOG_DIR
    table = pq.read_table(log / f"{8:020d}.checkpoint.parquet")
    (log / f"{8:020d}.checkpoint.parquet").unlink()
    half = table.num_rows // 2
    for part, piece in ((1, table.slice(0, half)), (2, table.slice(half))):
        pq.write_table(piece, log / f"{8:020d}.checkpoint.{part:010d}.{2:010d}.parquet")
    (log / "_last_checkpoint").write_text(json.dumps({"version": 8, "size": table.num_rows,
                                                      "parts": 2}))
    for v in range(8):
        (root / commit_path(v)).unlink()
    t = open_table(root)
    assert ids_of(t.to_arrow()) == want and file_set(t) == files
    # Without its second part the set is unusable, and the log before it is gone.
    (log / f"{8:020d}.checkpoint.{2:010d}.{2:010d}.parquet").unlink()
    with pytest.raises(MissingVersionError):
        open_table(root)


def test_uuid_named_checkpoint_without_checkpoint_metadata_is_skipped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A UUID-named checkpoint must follow the V2 spec; a V1-shaped one is not trusted.
    root = tmp_path / "t"
    want, files = build(root)
    log = root / LOG_DIR
    body = io.BytesIO()
    pq.write_table(pq.read_table(log / f"{8:020d}.checkpoint.parquet"), body)
    name = f"{9:020d}.checkpoint.{uuid.uuid4()}.parquet"
    (log / name).write_bytes(body.getvalue())
    with caplog.at_level(logging.WARNING, logger="deltacommit.checkpoint"):
        t = open_table(root)
    assert ids_of(t.to_arrow()) == want and file_set(t) == files
    assert any(name in r.getMessage() and "checkpointMetadata" in r.getMessage()
               for r in caplog.records)


