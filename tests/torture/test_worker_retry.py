"""A stress writer retries a commit whose answer was lost as the same transaction.

The torture run's claim "zero duplicated acknowledged writes" rests on writers behaving as a
careful application does: after a transient error the same transaction is committed again,
and if the first try had landed the retry reports that version rather than adding the rows a
second time.  Here the commit lands and the answer is lost once (a fault after the put).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.storage.local import LocalStore
from deltacommit.ops.verify import verify_table
from deltacommit.testing import FaultyStore
from deltacommit.testing.stress import SCHEMA, _append


def rows(n: int) -> pa.Table:
    return pa.table({"writer": ["w0"] * n, "incarnation": [0] * n, "seq": list(range(n)),
                     "payload": ["x"] * n}, schema=SCHEMA)


def test_a_commit_whose_answer_was_lost_is_retried_as_the_same_transaction(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)
    store = FaultyStore(LocalStore(uri))
    table = dc.DeltaTable(uri, log_store=ConditionalPutLogStore(store))
    store.fail("put_if_absent", "_delta_log/00000000000000000001.json", after=True)

    result = _append(table, rows(3), "w0#0")

    assert result is not None and result.version == 1
    assert len(store.injections) == 1  # the first try landed and its answer was lost
    assert "transient error (try 1" in capsys.readouterr().err
    report = verify_table(uri)
    assert report.ok, report.problems
    assert report.last_version == 1 and report.rows == 3  # once, not twice
