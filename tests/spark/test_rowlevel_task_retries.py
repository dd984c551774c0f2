"""A Spark task of a row-level verb that fails after writing and is run again by Spark.

Spark collects the documents of the attempt that succeeded only, so the rows a failed
attempt reported never reach the driver: the verb records the rows of the attempt that
succeeded, lands beside a concurrent append of rows it does not act on, and the table
equals the serial result (the files the failed attempt wrote stay unreferenced).

The failing work is defined here and pickled by value, so the executors run it; it makes
its task flush each file's rewrite at once (``FLUSH_ROWS``) so that the attempt has written
before it fails, and puts the executor's ``FLUSH_ROWS`` back before it returns.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from deltacommit import spark as dcs
from deltacommit.spark.rowlevel_tasks import UpdateWork
from tests.concurrency.hooks import commit_between
from tests.concurrency.row_level import ROW_LEVEL
from tests.spark.test_rowlevel_concurrency import (
    _append,
    _initial,
    _landed_after_winner,
    _rows,
    _table,
)


@dataclass
class _FailsOnceAfterWriting:
    """``inner`` on each file; the first attempt fails at its second file, after the
    first was written (``marker`` says it did)."""

    inner: Any
    marker: str
    files: int
    calls: list[int] = field(default_factory=list)
    flush_rows: list[int] = field(default_factory=list)

    def __call__(self, rewrite: Any, file: Any, source: Any) -> Any:
        tasks = importlib.import_module("deltacommit.spark.rowlevel_tasks")
        self.calls.append(1)
        if len(self.calls) == 1:
            self.flush_rows.append(tasks.FLUSH_ROWS)
            tasks.FLUSH_ROWS = 1
        if len(self.calls) == self.files or (
                len(self.calls) == 2 and not os.path.exists(self.marker)):
            tasks.FLUSH_ROWS = self.flush_rows[0]
        if len(self.calls) == 2 and not os.path.exists(self.marker):
            with open(self.marker, "w"):
                pass
            raise RuntimeError("the task fails once, after writing")
        return self.inner(rewrite, file, source)


def test_an_update_whose_task_failed_after_writing_records_the_rows_of_its_retry(
        spark: Any, spark_conf: Callable[[str, str], None], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark_conf("spark.sql.shuffle.partitions", "1")  # one task, all four files
    uri = _table(tmp_path, ROW_LEVEL)
    marker = tmp_path / "failed"
    rowlevel = importlib.import_module("deltacommit.spark.rowlevel")
    monkeypatch.setattr(rowlevel, "UpdateWork", lambda *a: _FailsOnceAfterWriting(
        UpdateWork(*a), str(marker), 4))
    appended = {7: 1007}
    commit_between(monkeypatch, _append(uri, appended))
    result = dcs.update(uri, {"v": "v + 100"}, "id IN (3, 13, 25, 35)", spark=spark)
    assert marker.exists()  # the first attempt failed
    assert result["num_updated_rows"] == 4
    _landed_after_winner(uri, "UPDATE")
    serial = [(i, v + 100 if i in (3, 13, 25, 35) else v) for i, v in _initial()]
    assert _rows(uri) == sorted(serial + list(appended.items()))
