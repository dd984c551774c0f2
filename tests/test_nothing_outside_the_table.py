"""Destructive operations stay inside the table: operator mistakes with symbolic links, odd
deletion-vector prefixes, retention 0 and a deleted checkpoint never make log cleanup or
VACUUM delete a file outside the table, a live file, or a link the operator made."""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.errors import DeltaCommitError
from deltacommit.io.storage.local import LocalStore
from deltacommit.protocol.actions import Add, Protocol
from deltacommit.protocol.deletion_vectors import (
    encode_bitmap_array,
    encode_file,
    relative_dv_path_or_inline,
)
from deltacommit.protocol.log.names import LOG_DIR, commit_path
from deltacommit.protocol.log.paths import parse_location, vacuum_keys
from deltacommit.runtime.clock import ManualClock

DAY = 86_400.0


def _age(path: Path, days: float) -> None:
    """Backdate ``path`` (not what a link points to) by ``days``."""
    old = time.time() - days * DAY
    os.utime(path, (old, old), follow_symlinks=False)


def _outside(tmp_path: Path, name: str, files: list[str]) -> Path:
    """A folder beside the table holding old files that must survive."""
    folder = tmp_path / name
    folder.mkdir()
    for f in files:
        (folder / f).write_bytes(b"precious")
        _age(folder / f, 40)
    return folder


def _ids(uri: str) -> list[int]:
    return sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist())


# --------------------------------------------------------------------------- log cleanup


def test_cleanup_after_an_ordinary_write_never_follows_a_linked_tmp_or_sidecars_folder(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    uri = str(tmp_path / "t")
    config = {"delta.checkpointInterval": "3", "delta.logRetentionDuration": "interval 1 day"}
    for i in range(3):
        dc.write(uri, pa.table({"id": [i]}), configuration=config if i == 0 else None)
    log = Path(uri) / LOG_DIR
    for p in log.iterdir():
        _age(p, 10)
    tmp_victims = _outside(tmp_path, "elsewhere-tmp", [f"{commit_path(1)[11:]}.{uuid.uuid4()}",
                                                        "notes.txt"])
    sidecar_victims = _outside(tmp_path, "elsewhere-sidecars", [f"{uuid.uuid4()}.parquet"])
    (log / ".tmp").symlink_to(tmp_victims, target_is_directory=True)
    (log / "_sidecars").symlink_to(sidecar_victims, target_is_directory=True)
    with caplog.at_level(logging.WARNING, logger="deltacommit.io.storage.local"):
        for i in range(3, 6):  # version 6 checkpoints; its hook cleans up before checkpoint 3
            dc.write(uri, pa.table({"id": [i]}))
    assert not (log / commit_path(0).split("/")[1]).exists()  # the cleanup did run ...
    for folder in (tmp_victims, sidecar_victims):  # ... and deleted nothing outside the table
        assert sorted(p.name for p in folder.iterdir()) and all(
            p.read_bytes() == b"precious" for p in folder.iterdir())
    assert (log / ".tmp").is_symlink() and (log / "_sidecars").is_symlink()
    assert "symbolic link" in caplog.text
    assert _ids(uri) == list(range(6))


def test_cleanup_never_follows_a_linked_log_folder(tmp_path: Path) -> None:
    """A whole ``_delta_log`` linked from elsewhere is read, never cleaned through."""
    real = tmp_path / "real-log-table"
    config = {"delta.checkpointInterval": "2", "delta.logRetentionDuration": "interval 1 day"}
    for i in range(3):
        dc.write(str(real), pa.table({"id": [i]}), configuration=config if i == 0 else None)
    linked = tmp_path / "linked"
    linked.mkdir()
    for p in real.iterdir():
        if p.suffix == ".parquet":
            shutil.copy(p, linked / p.name)
    (linked / LOG_DIR).symlink_to(real / LOG_DIR, target_is_directory=True)
    for p in (real / LOG_DIR).iterdir():
        _age(p, 10)
    before = sorted(p.name for p in (real / LOG_DIR).iterdir())
    t = dc.DeltaTable(str(linked))
    assert t.cleanup_log() == [] and sorted(p.name for p in (real / LOG_DIR).iterdir()) == before
    assert _ids(str(linked)) == [0, 1, 2]


# --------------------------------------------------------------------------- vacuum


def test_vacuum_leaves_a_linked_partition_folder_and_what_it_holds(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [1], "p": ["a"]}), partition_by=["p"])
    elsewhere = _outside(tmp_path, "p=b", ["part-old.parquet"])
    link = Path(uri) / "p=b"
    link.symlink_to(elsewhere, target_is_directory=True)
    _age(link, 40)
    orphan = Path(uri) / "p=a" / "orphan.parquet"
    orphan.write_bytes(b"x")
    _age(orphan, 40)
    t = dc.DeltaTable(uri)
    listed = t.vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False)
    assert listed == ["p=a/orphan.parquet"]
    assert t.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False) == listed
    assert link.is_symlink() and (elsewhere / "part-old.parquet").read_bytes() == b"precious"
    assert not orphan.exists()
    assert _ids(uri) == [1]


def test_vacuum_leaves_linked_files_live_or_not(tmp_path: Path) -> None:
    """A data or deletion-vector file replaced by a link to a copy elsewhere (an operator
    moving data by hand) is read through the link and never deleted by VACUUM."""
    uri, add = _dv_table(tmp_path, prefix="")
    dv_file = next(Path(uri).glob("deletion_vector_*.bin"))
    moved = tmp_path / "moved"
    moved.mkdir()
    for f in (dv_file, Path(uri) / add.path):
        shutil.move(f, moved / f.name)
        f.symlink_to(moved / f.name)
        _age(f, 40)
    stray = moved / "stray.parquet"
    stray.write_bytes(b"precious")
    (Path(uri) / "stray.parquet").symlink_to(stray)
    _age(Path(uri) / "stray.parquet", 40)
    t = dc.DeltaTable(uri)
    t.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False,
             protect_uncommitted=False)
    assert sorted(p.name for p in moved.iterdir()) == sorted(
        [dv_file.name, Path(add.path).name, "stray.parquet"])
    assert (Path(uri) / "stray.parquet").is_symlink()
    assert _ids(uri) == [i for i in range(100) if i % 10]


def _dv_table(tmp_path: Path, prefix: str) -> tuple[str, Add]:
    """A table whose one file has a deletion vector (rows 0, 10, ... 90) stored by id under
    ``prefix`` (a folder name, written literally)."""
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": list(range(100))}))
    t = dc.DeltaTable(uri)
    [add] = t.files()
    deleted = list(range(0, 100, 10))
    bitmap = encode_bitmap_array(deleted)
    content, [offset] = encode_file([bitmap])
    uid = uuid.uuid4()
    folder = Path(uri) / prefix if prefix else Path(uri)
    folder.mkdir(exist_ok=True)
    (folder / f"deletion_vector_{uid}.bin").write_bytes(content)
    dv: dict[str, Any] = {"storageType": "u",
                          "pathOrInlineDv": relative_dv_path_or_inline(prefix, uid),
                          "offset": offset, "sizeInBytes": len(bitmap),
                          "cardinality": len(deleted)}
    with t.transaction("DELETE") as txn:
        txn.update_protocol(Protocol(3, 7, ["deletionVectors"], ["deletionVectors"]))
        txn.remove([add])
        new = Add(add.path, add.partition_values, add.size, add.modification_time,
                  stats=add.stats, deletion_vector=dv)
        txn.add([new])
    return uri, new


@pytest.mark.parametrize("prefix", ["%41", "a:b", "x%2Fy", "%"])
def test_vacuum_keeps_a_live_deletion_vector_whatever_its_prefix(tmp_path: Path,
                                                                 prefix: str) -> None:
    uri, add = _dv_table(tmp_path, prefix)
    assert add.deletion_vector is not None
    expected = [i for i in range(100) if i % 10]
    assert _ids(uri) == expected  # the reader finds the file in the folder named literally
    stored = sorted(str(p.relative_to(uri)) for p in Path(uri).rglob("deletion_vector_*"))
    # A peer decoding the prefix once more (as a URL join does) would look in another folder:
    # a file there is kept too.
    other = Path(uri) / "A" / Path(stored[0]).name
    if prefix == "%41":
        other.parent.mkdir()
        other.write_bytes(b"kept: a peer may read it")
        _age(other, 40)
    t = dc.DeltaTable(uri)
    t.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False,
             protect_uncommitted=False)
    assert sorted(str(p.relative_to(uri)) for p in Path(uri).rglob("deletion_vector_*")) == \
        sorted(stored + ([str(other.relative_to(uri))] if prefix == "%41" else []))
    assert _ids(uri) == expected


def test_vacuum_keeps_every_reading_of_a_live_path() -> None:
    root = parse_location("/data/t")
    assert vacuum_keys(root, "a%2541.parquet") == {"a%41.parquet", "a%2541.parquet",
                                                    "aA.parquet"}
    assert vacuum_keys(root, "plain/x.parquet") == {"plain/x.parquet"}
    assert vacuum_keys(root, "a%3Ab/x.bin") == {"a:b/x.bin", "a%3Ab/x.bin"}
    assert vacuum_keys(root, "file:///elsewhere/x.parquet") == set()
    # Outside the table once decoded; taken literally, a file of that odd name inside it.
    assert vacuum_keys(root, "..%2F..%2Fetc%2Fpasswd") == {"..%2F..%2Fetc%2Fpasswd"}


def test_local_deletes_never_pass_through_a_link(tmp_path: Path) -> None:
    victim = _outside(tmp_path, "victim", ["f.parquet"])
    root = tmp_path / "t"
    (root / "d").mkdir(parents=True)
    (root / "d" / "link").symlink_to(victim, target_is_directory=True)
    (root / "ok.parquet").write_bytes(b"x")
    store = LocalStore(root)
    assert [m.path for m in store.list_contained("")] == ["ok.parquet"]
    assert list(store.list_contained("d/link/")) == []
    store.delete_contained(["d/link/f.parquet", "d/link", "../victim/f.parquet",
                            "d/../../victim/f.parquet", "ok.parquet"])
    assert (victim / "f.parquet").exists() and (root / "d" / "link").is_symlink()
    assert not (root / "ok.parquet").exists()


# --------------------------------------------------------------------------- retention 0


def test_retention_zero_keeps_files_a_writer_has_not_committed_yet(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [1]}))
    staged = Path(uri) / "part-staged.parquet"  # a writer's file, its commit still to come
    staged.write_bytes(b"x")
    old = Path(uri) / "part-orphan.parquet"  # a failed writer's, long ago
    old.write_bytes(b"x")
    _age(old, 1 / 12)  # two hours
    t = dc.DeltaTable(uri)
    assert t.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False) == \
        ["part-orphan.parquet"]
    assert staged.exists()
    # A clock a second ahead: the staged file is older than the vacuum's reading of it, as a
    # file written a moment before is not when the file system stamps it coarsely.
    t = dc.DeltaTable(uri, clock=ManualClock(time.time() + 1))
    assert t.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False,
                    protect_uncommitted=False) == ["part-staged.parquet"]


def test_a_file_removed_by_a_commit_goes_with_retention_zero(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [1]}))
    dc.write(uri, pa.table({"id": [2]}), mode="overwrite")
    # A clock a second ahead: the tombstone is older than the vacuum's reading of it.
    t = dc.DeltaTable(uri, clock=ManualClock(time.time() + 1))
    [gone] = [p.name for p in Path(uri).glob("*.parquet")
              if p.name not in {a.path for a in t.files()}]
    assert t.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False) == \
        [gone]
    assert _ids(uri) == [2]


# --------------------------------------------------------------------------- damaged logs


def test_vacuum_of_a_table_whose_checkpoint_was_deleted_deletes_nothing_it_needs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DELTACOMMIT_TABLE_CACHE", "off")  # every open reads the log
    uri = str(tmp_path / "t")
    config = {"delta.checkpointInterval": "3"}
    for i in range(5):
        dc.write(uri, pa.table({"id": [i]}), configuration=config if i == 0 else None)
    data = sorted(p.name for p in Path(uri).glob("*.parquet"))
    for p in Path(uri).rglob("*"):
        if p.is_file():
            _age(p, 40)
    for cp in (Path(uri) / LOG_DIR).glob("*.checkpoint.parquet"):
        cp.unlink()
    try:
        deleted = dc.DeltaTable(uri).vacuum(retention_hours=0, dry_run=False,
                                            enforce_retention_duration=False)
    except DeltaCommitError:
        deleted = []  # refusing is as good as keeping
    assert deleted == []
    assert sorted(p.name for p in Path(uri).glob("*.parquet")) == data
    assert _ids(uri) == list(range(5))
    # With the commits before it gone too, the table cannot be read: VACUUM refuses.
    for v in range(3):
        (Path(uri) / commit_path(v)).unlink()
    with pytest.raises(DeltaCommitError):
        dc.DeltaTable(uri).vacuum(retention_hours=0, dry_run=False,
                                  enforce_retention_duration=False)
    assert sorted(p.name for p in Path(uri).glob("*.parquet")) == data
