"""The MERGE join (``plan.match_pairs`` with the source indexed once, ``index_source``) gives
exactly the pairs the merge condition is TRUE for, judged pair by pair over every (target row,
source row), whatever the keys' types: integers of two widths, floating point with NaN, -0.0
and NULL, strings, dates, booleans, decimals, several keys, and conditions with more than the
equalities."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from deltacommit.io.datafiles import WriteTarget
from deltacommit.ops.merge.plan import MergePlan, index_source, match_pairs
from deltacommit.protocol.expressions.evaluator import AliasScope, predicate_mask
from deltacommit.protocol.expressions.parser import parse_expression

_FLOATS = st.sampled_from([0.0, -0.0, 1.0, 2.5, float("nan"), -1.0, None])
_KINDS: dict[str, tuple[pa.DataType, pa.DataType, Any]] = {
    "int": (pa.int64(), pa.int32(), st.one_of(st.none(), st.integers(-3, 3))),
    "float": (pa.float64(), pa.float32(), _FLOATS),
    "int_float": (pa.int64(), pa.float64(), st.one_of(st.none(), st.integers(-2, 2))),
    "string": (pa.string(), pa.large_string(), st.one_of(st.none(), st.sampled_from(
        ["", "a", "b", "ab", "é"]))),
    "date": (pa.date32(), pa.date32(), st.one_of(st.none(), st.dates(
        dt.date(2020, 1, 1), dt.date(2020, 1, 4)))),
    "bool": (pa.bool_(), pa.bool_(), st.one_of(st.none(), st.booleans())),
    "decimal": (pa.decimal128(5, 2), pa.decimal128(5, 2), st.one_of(st.none(), st.sampled_from(
        [decimal.Decimal("1.00"), decimal.Decimal("-1.50"), decimal.Decimal("0.00")]))),
}
_CONDITIONS = ["t.k = s.k", "s.k = t.k AND t.g = s.g", "t.k = s.k AND t.g < s.g",
               "t.k = s.k AND s.g > 0", "t.k = s.k OR t.g = s.g", "t.g = s.g AND t.k = s.k"]


def _plan(schema: pa.Schema, on: str) -> MergePlan:
    target = WriteTarget("memory://t", schema, (), 32, ())
    return MergePlan("memory://t", target, parse_expression(on), "s", "t")


def _every_pair(plan: MergePlan, target: pa.Table, source: pa.Table
                ) -> list[tuple[int, int]]:
    ti = np.repeat(np.arange(target.num_rows), source.num_rows)
    si = np.tile(np.arange(source.num_rows), target.num_rows)
    scope = AliasScope({"t": target.take(ti), "s": source.take(si)})
    mask = np.asarray(predicate_mask(plan.on, scope).to_numpy(zero_copy_only=False), bool)
    return list(zip(ti[mask].tolist(), si[mask].tolist(), strict=True))


@st.composite
def _case(draw: Any) -> tuple[str, pa.Table, pa.Table]:
    kind = draw(st.sampled_from(sorted(_KINDS)))
    ttype, stype, values = _KINDS[kind]
    nt, ns = draw(st.integers(0, 12)), draw(st.integers(0, 12))
    groups = st.one_of(st.none(), st.integers(-1, 1))
    target = pa.table({"k": pa.array(draw(st.lists(values, min_size=nt, max_size=nt)), ttype),
                       "g": pa.array(draw(st.lists(groups, min_size=nt, max_size=nt)),
                                     pa.int64())})
    source = pa.table({"k": pa.array(draw(st.lists(values, min_size=ns, max_size=ns)), stype),
                       "g": pa.array(draw(st.lists(groups, min_size=ns, max_size=ns)),
                                     pa.int32())})
    return draw(st.sampled_from(_CONDITIONS)), target, source


@settings(max_examples=300, deadline=None)
@given(_case(), st.integers(1, 3))
def test_the_indexed_join_gives_exactly_the_pairs_the_condition_holds_for(
        case: tuple[str, pa.Table, pa.Table], pieces: int) -> None:
    on, target, source = case
    plan = _plan(target.schema, on)
    index = index_source(plan, source)
    expected = _every_pair(plan, target, source) if target.num_rows and source.num_rows else []
    # The same index serves every file: the target's rows in several pieces.
    step = max(1, -(-target.num_rows // pieces))
    found: list[tuple[int, int]] = []
    for start in range(0, target.num_rows, step):
        piece = target.slice(start, step)
        ti, si = match_pairs(plan, piece, source, index)
        found.extend((int(t) + start, int(s)) for t, s in zip(ti, si, strict=True))
    assert found == sorted(expected)
    ti, si = match_pairs(plan, target, source)  # built on the spot
    assert list(zip(ti.tolist(), si.tolist(), strict=True)) == sorted(expected)
