"""Row-level operations against deltalake 1.6.0 on the same random tables.

Hypothesis generates a table (partitioned or not, written in several files, NULLs in every
column, duplicate keys) and an operation: an upsert MERGE, a conditional MERGE with every
clause kind, an UPDATE or a row-level DELETE.  deltacommit runs it on one copy (copy-on-write,
or with deletion vectors), deltalake on another; the rows must be equal, and deltalake must
read exactly what deltacommit wrote.

``DELTACOMMIT_HYPOTHESIS_EXAMPLES`` raises the number of examples (a dozen by default, in
seconds).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import deltalake
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deltacommit as dc
from tests.arrow_strategies import canonical_rows
from tests.delta_tables import peer_read

EXAMPLES = max(1, int(os.environ.get("DELTACOMMIT_HYPOTHESIS_EXAMPLES", "36")) // 3)

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.float64()), ("s", pa.string()),
                    ("p", pa.string())])

_ids = st.one_of(st.none(), st.integers(0, 30))
_values = st.one_of(st.none(), st.integers(-20, 20).map(float))
_strings = st.one_of(st.none(), st.sampled_from(["a", "b", "c", "zz"]))
_parts = st.sampled_from(["x", "y", "z"])


@st.composite
def _rows(draw: Any, min_size: int = 0, max_size: int = 12, unique_ids: bool = False
          ) -> pa.Table:
    n = draw(st.integers(min_size, max_size))
    ids = draw(st.lists(st.integers(0, 40), min_size=n, max_size=n, unique=True)) \
        if unique_ids else draw(st.lists(_ids, min_size=n, max_size=n))
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "v": pa.array(draw(st.lists(_values, min_size=n, max_size=n)), pa.float64()),
                     "s": pa.array(draw(st.lists(_strings, min_size=n, max_size=n)), pa.string()),
                     "p": pa.array(draw(st.lists(_parts, min_size=n, max_size=n)),
                                   pa.string())}, schema=SCHEMA)


_UPDATES = st.sampled_from([{"v": "v * 2"}, {"v": "v + 1", "s": "'u'"}, {"s": "NULL"},
                            {"p": "'x'"}, {"v": "CASE WHEN v > 0 THEN v ELSE 0 END"}])
_PREDICATES = st.sampled_from([None, "id > 15", "v IS NULL", "s = 'a' OR v < 0",
                               "p = 'y'", "p = 'x' AND id < 10", "id IN (1, 2, 3, 20)"])
_DELETES = st.sampled_from(["id > 15", "v IS NULL", "s = 'a' OR v < 0", "id IN (1, 2, 3, 20)",
                            "p = 'y' AND v > 0", "v >= 0 AND s IS NOT NULL"])


@st.composite
def _operation(draw: Any) -> tuple[str, Any]:
    kind = draw(st.sampled_from(["upsert", "conditional", "update", "delete"]))
    if kind in ("upsert", "conditional"):
        return kind, draw(_rows(max_size=10, unique_ids=True))
    if kind == "update":
        return kind, (draw(_UPDATES), draw(_PREDICATES))
    return kind, draw(_DELETES)


def _apply(table: Any, kind: str, arg: Any) -> None:
    """The operation with deltalake's API, which ``dc.DeltaTable`` shares."""
    if kind == "upsert":
        (table.merge(arg, "t.id = s.id", source_alias="s", target_alias="t")
         .when_matched_update_all().when_not_matched_insert_all().execute())
    elif kind == "conditional":
        (table.merge(arg, "t.id = s.id AND t.p = s.p", source_alias="s", target_alias="t")
         .when_matched_delete("s.v < -10")
         .when_matched_update({"v": "t.v + s.v", "s": "s.s"}, "s.v IS NOT NULL")
         .when_matched_update({"s": "'matched'"})
         .when_not_matched_insert({"id": "s.id", "v": "s.v", "p": "s.p"}, "s.v > 0")
         .when_not_matched_insert_all()
         .when_not_matched_by_source_update({"v": "t.v - 100"}, "t.v > 10")
         .when_not_matched_by_source_delete("t.s = 'c'")
         .execute())
    elif kind == "update":
        updates, predicate = arg
        table.update(updates, predicate=predicate) if predicate is not None \
            else table.update(updates)
    else:
        table.delete(arg)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batches=st.lists(_rows(min_size=1), min_size=1, max_size=3),
       partitioned=st.booleans(), dvs=st.booleans(),
       operations=st.lists(_operation(), min_size=1, max_size=2))
def test_row_level_operations_equal_deltalakes(batches: list[pa.Table], partitioned: bool,
                                               dvs: bool,
                                               operations: list[tuple[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = f"{tmp}/ours", f"{tmp}/theirs"
        config = {"delta.enableDeletionVectors": "true"} if dvs else None
        dc.DeltaTable.create(ours, SCHEMA, partition_by=["p"] if partitioned else None,
                             configuration=config)
        for b in batches:
            dc.write(ours, b)
        if dvs:
            # deltalake writes no deletion vectors: its copy holds the same rows without.
            dc.DeltaTable.create(theirs, SCHEMA, partition_by=["p"] if partitioned else None)
            for b in batches:
                dc.write(theirs, b)
        else:
            shutil.copytree(ours, theirs)
        for kind, arg in operations:
            _apply(dc.DeltaTable(ours), kind, arg)
            _apply(deltalake.DeltaTable(theirs), kind, arg)
            expected = canonical_rows(deltalake.DeltaTable(theirs).to_pyarrow_table()
                                      .select(SCHEMA.names))
            assert canonical_rows(dc.DeltaTable(ours).to_arrow()) == expected, (kind, arg)
        assert canonical_rows(peer_read(ours).select(SCHEMA.names)) == expected
