"""Stray files in ``_delta_log`` far ahead of the log: found from one listing, never probed
version by version, and never trusted over the commits."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.errors import MissingVersionError
from deltacommit.ops.verify import verify_table
from deltacommit.protocol.log.names import checkpoint_path, commit_path, version_gaps

SCHEMA = pa.schema([("id", pa.int64())])


def _table(root: Path, commits: int = 3) -> dc.DeltaTable:
    t = dc.DeltaTable.create(str(root), SCHEMA)
    for i in range(commits):
        dc.write(t, pa.table({"id": [i]}, schema=SCHEMA))
    return t


@pytest.mark.parametrize("stray", [10**6, 10**12, 2**63 - 1])
def test_a_far_future_commit_is_one_gap_found_from_the_listing(tmp_path: Path, stray: int) -> None:
    root = tmp_path / "t"
    _table(root)
    shutil.copy(root / commit_path(1), root / commit_path(stray))
    with pytest.raises(MissingVersionError, match=f"lacks version\\(s\\) 4-{stray - 1}"):
        dc.DeltaTable(str(root))
    report = verify_table(str(root))
    assert not report.ok
    assert any(f"4-{stray - 1}" in p for p in report.problems)
    # The versions before the stray file still read; writers refuse to write on top.
    assert dc.DeltaTable(str(root), version=3).to_arrow().num_rows == 3
    with pytest.raises(MissingVersionError):
        dc.write(str(root), pa.table({"id": [9]}, schema=SCHEMA))


def test_a_version_beyond_64_bits_is_not_a_log_file(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _table(root)
    shutil.copy(root / commit_path(1), root / "_delta_log" / "99999999999999999999.json")
    t = dc.DeltaTable(str(root))
    assert t.version == 3 and t.to_arrow().num_rows == 3
    assert verify_table(str(root)).ok


def test_a_stray_checkpoint_beyond_every_commit_is_ignored_and_verify_fails(tmp_path: Path) -> None:
    root = tmp_path / "t"
    other = tmp_path / "other"
    _table(root)
    o = _table(other, commits=1)
    o.checkpoint()
    stray = 10**9
    shutil.copy(other / checkpoint_path(1), root / checkpoint_path(stray))
    t = dc.DeltaTable(str(root))
    assert t.version == 3 and sorted(t.to_arrow()["id"].to_pylist()) == [0, 1, 2]
    report = verify_table(str(root))
    assert not report.ok
    assert any(str(stray) in p and "newer than the newest commit" in p for p in report.problems)


def test_version_gaps_cost_follows_the_listing() -> None:
    assert version_gaps([0, 1, 2, 5, 10**12], 0, 10**12) == [(3, 4), (6, 10**12 - 1)]
    assert version_gaps([], 3, 7) == [(3, 7)]
    assert version_gaps([3, 4, 5], 3, 5) == []
    assert len(version_gaps(list(range(0, 100, 2)), 0, 99, limit=5)) == 5
