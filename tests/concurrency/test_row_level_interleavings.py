"""Row-level operations against a winner committed between their read and their commit.

The winner commits from inside the loser's run, after the loser planned its changes on the
older version and before it stages them (``_between``), so the loser meets the winner in the
commit loop.  Each case compares the table with the serial result computed on plain Python
rows: the winner first, then the loser as it would run on the winner's table.  A loser that
cannot land so must conflict and leave the winner's table as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.errors import ConcurrentModificationException
from deltacommit.ops.rowlevel import job as rowlevel_job

ROW_LEVEL = {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"}
Rows = dict[int, int]


def _table(tmp_path: Path) -> tuple[str, Rows]:
    """Ids 0..19, ``v`` = id, in two files of ten rows."""
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": pa.array(range(20), pa.int64()),
                            "v": pa.array(range(20), pa.int64())}),
             configuration=ROW_LEVEL, target_file_rows=10)
    return uri, {i: i for i in range(20)}


def _rows(uri: str) -> Rows:
    table = dc.DeltaTable(uri).to_arrow()
    out = {int(r["id"]): int(r["v"]) for r in table.to_pylist()}
    assert len(out) == table.num_rows, "a row is duplicated"
    return out


def _between(monkeypatch: pytest.MonkeyPatch, winner: Callable[[], object]) -> None:
    """Run ``winner`` once, inside the next row-level operation, after it planned."""
    real = rowlevel_job.RowLevelJob.stage
    pending = [winner]

    def stage(job: rowlevel_job.RowLevelJob, attempt: object) -> None:
        if pending:
            pending.pop()()
        real(job, attempt)  # type: ignore[arg-type]

    monkeypatch.setattr(rowlevel_job.RowLevelJob, "stage", stage)


def _merge(uri: str, source: Rows, insert: bool) -> None:
    """Upsert: matched rows take the source's ``v`` where it is larger; unmatched source rows
    are inserted (``insert``)."""
    merger = dc.DeltaTable(uri).merge(
        pa.table({"id": pa.array(list(source), pa.int64()),
                  "v": pa.array(list(source.values()), pa.int64())}),
        "t.id = s.id", "s", "t").when_matched_update_all("s.v > t.v")
    if insert:
        merger = merger.when_not_matched_insert_all()
    merger.execute()


def _serial_merge(rows: Rows, source: Rows, insert: bool) -> Rows:
    out = dict(rows)
    for k, v in source.items():
        if k in out:
            out[k] = max(out[k], v)
        elif insert:
            out[k] = v
    return out


@pytest.mark.parametrize("insert", [True, False])
def test_a_merge_over_a_deleted_row_it_matched_but_left_unchanged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, insert: bool) -> None:
    """Row 3 matches source row 3 but keeps its larger ``v``: it only keeps that source row
    from being inserted.  A winner deletes row 3; the MERGE after it inserts (3, -1).  Landed
    on top of the winner without the insert, the row would be lost: the MERGE must conflict.
    Without a WHEN NOT MATCHED clause the deleted row decides nothing and the MERGE lands."""
    uri, rows = _table(tmp_path)
    _between(monkeypatch, lambda: dc.DeltaTable(uri).delete("id = 3"))
    source = {3: -1, 5: 50}
    rows.pop(3)
    if insert:
        with pytest.raises(ConcurrentModificationException):
            _merge(uri, source, insert)
        assert _rows(uri) == rows
    else:
        _merge(uri, source, insert)
        assert _rows(uri) == _serial_merge(rows, source, insert)
