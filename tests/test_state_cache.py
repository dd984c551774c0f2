"""The process's cached table states: opening a table by URI again costs an update, not a
load, and never returns another table's state (deleted and re-created at the same path), a
state older than what another process committed, or anything when switched off."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine import state_cache
from deltacommit.testing import S3Bucket


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    state_cache.clear()


def _opened_requests(uri: str, options: dict[str, str]) -> dict[str, int]:
    t = dc.DeltaTable(uri, storage_options=options)
    return dict(t.log_store.store.requests)


def test_reopening_by_uri_reads_two_small_objects_instead_of_the_log(s3_bucket: S3Bucket) -> None:
    uri, options = f"{s3_bucket.uri}/t", s3_bucket.storage_options
    for i in range(12):
        dc.write(uri, pa.table({"id": [i]}), storage_options=options)
    state_cache.clear()
    cold = _opened_requests(uri, options)
    assert cold.get("ListObjectsV2", 0) >= 1 and sum(cold.values()) > 5
    warm = _opened_requests(uri, options)
    # The commit at the cached version (identity) and the next version (a miss): two GETs.
    assert warm == {"GetObject": 2}
    assert dc.DeltaTable(uri, storage_options=options).to_arrow().num_rows == 12


def test_a_table_deleted_and_created_again_is_not_mistaken_for_the_old_one(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for i in range(5):
        dc.write(uri, pa.table({"id": [i]}))
    assert dc.DeltaTable(uri).version == 5
    shutil.rmtree(uri)
    dc.write(uri, pa.table({"name": ["a"]}))
    dc.write(uri, pa.table({"name": ["b"]}))
    # Same path, same number of versions as a prefix of the old table's: another table.
    for i in range(3, 6):
        dc.write(uri, pa.table({"name": [str(i)]}))
    t = dc.DeltaTable(uri)
    assert t.schema.names == ["name"] and t.version == 5
    assert sorted(t.to_arrow().column("name").to_pylist()) == ["3", "4", "5", "a", "b"]


def test_deleted_table_is_not_found(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [1]}))
    dc.DeltaTable(uri)
    shutil.rmtree(uri)
    with pytest.raises(dc.TableNotFoundError):
        dc.DeltaTable(uri)


def test_commits_of_another_process_are_seen(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [0]}))
    assert dc.DeltaTable(uri).version == 1
    code = ("import deltacommit as dc, pyarrow as pa, sys\n"
            "for i in range(1, 4): dc.write(sys.argv[1], pa.table({'id': [i]}))")
    subprocess.run([sys.executable, "-c", code, uri], check=True)
    t = dc.DeltaTable(uri)
    assert t.version == 4 and sorted(t.to_arrow().column("id").to_pylist()) == [0, 1, 2, 3]


def test_switched_off_every_open_loads(tmp_path: Path, s3_bucket: S3Bucket,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    uri, options = f"{s3_bucket.uri}/t", s3_bucket.storage_options
    dc.write(uri, pa.table({"id": [0]}), storage_options=options)
    monkeypatch.setenv(state_cache.SWITCH, "off")
    assert _opened_requests(uri, options).get("ListObjectsV2", 0) >= 1
    assert _opened_requests(uri, options).get("ListObjectsV2", 0) >= 1


def test_the_cache_is_bounded(tmp_path: Path) -> None:
    for i in range(state_cache.CAPACITY + 6):
        dc.write(str(tmp_path / f"t{i}"), pa.table({"id": [i]}))
        dc.DeltaTable(str(tmp_path / f"t{i}"))
    assert len(state_cache._entries) == state_cache.CAPACITY


def test_a_pinned_version_is_never_served_from_the_cache(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for i in range(3):
        dc.write(uri, pa.table({"id": [i]}))
    dc.DeltaTable(uri)
    assert dc.DeltaTable(uri, version=1).to_arrow().column("id").to_pylist() == [0]
