"""Row-level concurrency across processes: 4 processes x 8 row-level updates (UPDATE, MERGE
upserts, and a DELETE by deletion vectors with the rows written again) of disjoint keys that share every
data file, beside an appender whose rows match no update and a compaction
running over and over (``deltacommit.testing.rowlevel``).

With deletion vectors and row tracking no update aborts, and the final table is the serial
result: each update's rows carry its value once, every acknowledged append is present once.
With Spark's file-level rules (row tracking off) updates abort and are run again; the table
still ends equal to the serial result.  ``bench/rowlevel_concurrency.py`` prints both figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deltacommit.testing.rowlevel import Layout, run


@pytest.mark.parametrize("kind", ["update", "merge", "delete-insert"])
def test_row_level_updates_never_abort(tmp_path: Path, kind: str) -> None:
    figures = run(str(tmp_path / "t"), row_level=True, layout=Layout(4, 8, 10),
                  compaction_interval=0.05, kind=kind)
    assert figures["equals_serial"], figures
    assert figures["aborted_operations"] == 0, figures
    # The updates did meet concurrent commits (and were checked and rebased over them).
    assert sum(figures["updates_rebased_over"].values()) > 0, figures


def test_file_level_rules_abort_and_still_end_serial(tmp_path: Path) -> None:
    figures = run(str(tmp_path / "t"), row_level=False, layout=Layout(4, 2, 10),
                  compaction_interval=0.5)
    assert figures["equals_serial"], figures
    print(figures)
