"""What the row-level concurrency tests share: the table features that make a row-level
operation's conflicts row by row, and the upsert they race."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

import deltacommit as dc

#: Deletion vectors and row tracking: the features row-level conflict checks need.
ROW_LEVEL = {"delta.enableDeletionVectors": "true", "delta.enableRowTracking": "true"}


def merge_larger(uri: str, source: dict[int, int], insert: bool,
                 table: dc.DeltaTable | None = None) -> dict[str, Any]:
    """Upsert by ``id``: matched rows take the source's ``v`` where it is larger; unmatched
    source rows are inserted (``insert``).  Runs on ``table`` where given (one opened with a
    hooked log store), else on the table at ``uri``; the MERGE's metrics."""
    merger = (table or dc.DeltaTable(uri)).merge(
        pa.table({"id": pa.array(list(source), pa.int64()),
                  "v": pa.array(list(source.values()), pa.int64())}),
        "t.id = s.id", "s", "t").when_matched_update_all("s.v > t.v")
    if insert:
        merger = merger.when_not_matched_insert_all()
    return merger.execute()
