"""Rewrite differential tests: generated schema histories (type widenings, nested fields and
columns added, column mapping renames, deletion vectors, partitions) driven through
compaction, Z-order, deletes, updates and partition overwrites.  Around every step the table's rows
(read file by file, the reader's own path) must be exactly what the step promises: the same
multiset after a rewrite, the input less the deleted rows after a delete; at the end
deltalake 1.6.0 must read the same rows wherever it can read the table (it refuses type
widening).

``DELTACOMMIT_HYPOTHESIS_EXAMPLES`` raises the number of histories (the suite runs a few
dozen, in seconds).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
import os
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.protocol.actions import Protocol
from tests.arrow_strategies import canonical_rows
from tests.delta_tables import peer_read

EXAMPLES = max(1, int(os.environ.get("DELTACOMMIT_HYPOTHESIS_EXAMPLES", "60")) // 3)

#: Legacy protocol versions and the table features they stand for (PROTOCOL.md).
_LEGACY_WRITER = {2: ["appendOnly", "invariants"], 3: ["checkConstraints"],
                  4: ["changeDataFeed", "generatedColumns"], 5: ["columnMapping"],
                  6: ["identityColumns"]}


@dataclasses.dataclass
class History:
    """What the generated table looks like now: its columns' current names and types."""

    uri: str
    partitioned: bool
    mapping: bool
    dvs: bool
    #: Role -> current (name, Arrow type) of each data column; "s" is a struct.
    columns: dict[str, tuple[str, pa.DataType]]
    #: Current names of the struct's fields ("a", then "b" once added) and their types.
    fields: dict[str, tuple[str, pa.DataType]]
    widened: set[str] = dataclasses.field(default_factory=set)
    next_id: int = 0
    renames: int = 0

    def schema(self) -> pa.Schema:
        out = [pa.field("id", pa.int64())]
        if self.partitioned:
            out.append(pa.field("p", pa.string()))
        for role, (name, t) in self.columns.items():
            if role == "s":
                t = pa.struct([(n, ft) for n, ft in self.fields.values()])
            out.append(pa.field(name, t))
        return pa.schema(out)


def _value(t: pa.DataType) -> st.SearchStrategy[Any]:
    base: st.SearchStrategy[Any]
    if pa.types.is_float32(t):
        base = st.floats(width=32)
    elif pa.types.is_float64(t):
        base = st.floats()
    elif pa.types.is_integer(t):
        base = st.integers(-(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1)
    elif pa.types.is_date32(t):
        base = st.dates(dt.date(1970, 1, 1), dt.date(2100, 1, 1))
    elif pa.types.is_timestamp(t):
        base = st.datetimes(dt.datetime(1970, 1, 1), dt.datetime(2100, 1, 1))
    elif pa.types.is_decimal(t):
        limit = decimal.Decimal(10) ** (t.precision - t.scale) - 1
        base = st.decimals(-limit, limit, places=t.scale, allow_nan=False,
                           allow_infinity=False)
    elif pa.types.is_string(t):
        base = st.text(max_size=6)
    elif pa.types.is_struct(t):
        base = st.fixed_dictionaries({f.name: _value(f.type) for f in t})
    else:  # pragma: no cover
        raise AssertionError(t)
    return st.one_of(st.none(), base)


def _witness(t: pa.DataType, i: int) -> Any:
    """A value that needs all of ``t``: one a narrower type (the one it was widened from)
    cannot hold, so that a rewrite narrowing it cannot go unnoticed."""
    if pa.types.is_float32(t):
        return 1.5 + i
    if pa.types.is_float64(t):
        return 0.1 + i
    if pa.types.is_integer(t):
        return 2 ** (t.bit_width - 2) + i
    if pa.types.is_date32(t):
        return dt.date(2024, 1, 1) + dt.timedelta(days=i)
    if pa.types.is_timestamp(t):
        return dt.datetime(2024, 1, 1, 12, 34, 56, 789) + dt.timedelta(seconds=i)
    if pa.types.is_decimal(t):
        return (decimal.Decimal(10) ** (t.precision - t.scale - 1)
                + decimal.Decimal(i % 9 + 1).scaleb(-t.scale))
    if pa.types.is_string(t):
        return f"w{i}"
    if pa.types.is_struct(t):
        return {f.name: _witness(f.type, i) for f in t}
    raise AssertionError(t)  # pragma: no cover


def _rows(h: History, data: st.DataObject, n: int, p: str | None = None) -> pa.Table:
    """``n`` drawn rows and one witness row (``_witness``) in the current schema."""
    schema = h.schema()
    ids = list(range(h.next_id, h.next_id + n + 1))
    h.next_id += n + 1
    columns: dict[str, list[Any]] = {"id": ids}
    if h.partitioned:
        columns["p"] = [p or data.draw(st.sampled_from(["a", "b"])) for _ in ids]
    for f in schema:
        if f.name not in columns:
            columns[f.name] = [_witness(f.type, ids[0])] + [data.draw(_value(f.type))
                                                            for _ in ids[1:]]
    return pa.table(columns, schema=schema)


def _upgraded(protocol: Protocol, features: list[str]) -> Protocol:
    """``protocol`` on table features, with ``features`` added."""
    if protocol.min_writer_version >= 7:
        readers = list(protocol.reader_features or [])
        writers = list(protocol.writer_features or [])
    else:
        readers = ["columnMapping"] if protocol.min_reader_version >= 2 else []
        writers = [f for v, fs in _LEGACY_WRITER.items() if protocol.min_writer_version >= v
                   for f in fs]
    return Protocol(3, 7, list(dict.fromkeys(readers + features)),
                    list(dict.fromkeys(writers + features)))


def _change_schema(h: History, change: Callable[[dict[str, Any]], None],
                   features: list[str] = (), config: dict[str, str] | None = None) -> None:
    """Commit a schema change as Spark's ALTER TABLE does: the new ``schemaString``, new
    fields with column mapping ids, the features it needs."""
    t = dc.DeltaTable(h.uri)
    schema = json.loads(t.metadata.schema_string)
    change(schema)
    configuration = {**t.metadata.configuration, **(config or {})}
    if h.mapping:
        top = int(configuration["delta.columnMapping.maxColumnId"])

        def assign(fields: list[dict[str, Any]]) -> None:
            nonlocal top
            for f in fields:
                md = f.setdefault("metadata", {})
                if "delta.columnMapping.id" not in md:
                    top += 1
                    md["delta.columnMapping.id"] = top
                    md["delta.columnMapping.physicalName"] = f"col-{uuid.uuid4()}"
                if isinstance(f["type"], dict) and f["type"].get("type") == "struct":
                    assign(f["type"]["fields"])

        assign(schema["fields"])
        configuration["delta.columnMapping.maxColumnId"] = str(top)
    metadata = dataclasses.replace(t.metadata, schema_string=json.dumps(schema),
                                   configuration=configuration)
    with t.transaction("CHANGE COLUMN") as txn:
        if features:
            txn.update_protocol(_upgraded(t.protocol, list(features)))
        txn.update_metadata(metadata)


_WIDENINGS: dict[str, tuple[str, str, pa.DataType, list[str]]] = {
    "x": ("float", "double", pa.float64(), []),
    "d": ("date", "timestamp_ntz", pa.timestamp("us"), ["timestampNtz"]),
    "n": ("short", "integer", pa.int32(), []),
    "dec": ("decimal(5,2)", "decimal(10,4)", pa.decimal128(10, 4), []),
    "s.a": ("integer", "long", pa.int64(), []),
}


def _widen(h: History, role: str) -> None:
    old, new, arrow, extra = _WIDENINGS[role]
    if role == "s.a":
        struct_name, field_name = h.columns["s"][0], h.fields["a"][0]
    else:
        struct_name, field_name = h.columns[role][0], None

    def change(schema: dict[str, Any]) -> None:
        for f in schema["fields"]:
            if f["name"] != struct_name:
                continue
            target = f
            if field_name is not None:
                target = next(g for g in f["type"]["fields"] if g["name"] == field_name)
            target["type"] = new
            target.setdefault("metadata", {})["delta.typeChanges"] = [
                {"fromType": old, "toType": new}]

    _change_schema(h, change, ["typeWidening", *extra], {"delta.enableTypeWidening": "true"})
    h.widened.add(role)
    if role == "s.a":
        h.fields["a"] = (h.fields["a"][0], arrow)
    else:
        h.columns[role] = (h.columns[role][0], arrow)


def _add_nested_field(h: History) -> None:
    struct_name = h.columns["s"][0]

    def change(schema: dict[str, Any]) -> None:
        f = next(f for f in schema["fields"] if f["name"] == struct_name)
        f["type"]["fields"].append({"name": "b", "type": "string", "nullable": True,
                                    "metadata": {}})

    _change_schema(h, change)
    h.fields["b"] = ("b", pa.string())


def _add_column(h: History) -> None:
    def change(schema: dict[str, Any]) -> None:
        schema["fields"].append({"name": "y", "type": "string", "nullable": True,
                                 "metadata": {}})

    _change_schema(h, change)
    h.columns["y"] = ("y", pa.string())


def _rename(h: History, role: str) -> None:
    h.renames += 1
    t = dc.DeltaTable(h.uri)
    if role == "s.a":
        new = f"a{h.renames}"
        t.rename_column([h.columns["s"][0], h.fields["a"][0]], new)
        h.fields["a"] = (new, h.fields["a"][1])
    else:
        new = f"{role}{h.renames}"
        t.rename_column(h.columns[role][0], new)
        h.columns[role] = (new, h.columns[role][1])


def _rows_now(uri: str) -> list[str]:
    return canonical_rows(dc.DeltaTable(uri).to_arrow())


def _without(table: pa.Table, column: str, values: list[Any]) -> list[str]:
    """The canonical rows of ``table`` whose ``column`` holds none of ``values``."""
    return canonical_rows(table.filter(pc.invert(pc.is_in(table.column(column),
                                                          pa.array(values)))))


STEPS = st.sampled_from(["write", "write", "write", "widen", "add_nested", "add_column",
                         "rename", "compact", "compact", "z_order", "delete", "update",
                         "overwrite"])


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.booleans(), st.booleans(), st.booleans(), st.lists(STEPS, min_size=3, max_size=10),
       st.data())
def test_rewrites_keep_every_row_through_schema_histories(
        partitioned: bool, mapping: bool, dvs: bool, steps: list[str],
        data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory(prefix="dc-history-") as root:
        h = History(f"{root}/t", partitioned, mapping, dvs,
                    columns={"x": ("x", pa.float32()), "d": ("d", pa.date32()),
                             "n": ("n", pa.int16()), "dec": ("dec", pa.decimal128(5, 2)),
                             "s": ("s", pa.struct([("a", pa.int32())]))},
                    fields={"a": ("a", pa.int32())})
        config = {}
        if mapping:
            config["delta.columnMapping.mode"] = "name"
        if dvs:
            config["delta.enableDeletionVectors"] = "true"
        dc.DeltaTable.create(h.uri, h.schema(), partition_by=["p"] if partitioned else None,
                             configuration=config)
        for _ in range(2):
            dc.write(h.uri, _rows(h, data, data.draw(st.integers(1, 4))))
        for step in steps + ["compact"]:
            before_table = dc.DeltaTable(h.uri).to_arrow()
            before = canonical_rows(before_table)
            if step == "write":
                rows = _rows(h, data, data.draw(st.integers(1, 4)))
                dc.write(h.uri, rows)
                assert _rows_now(h.uri) == sorted(
                    before + canonical_rows(rows.cast(dc.DeltaTable(h.uri).to_arrow().schema)))
                continue
            if step == "widen":
                left = sorted(set(_WIDENINGS) - h.widened)
                if left:
                    _widen(h, data.draw(st.sampled_from(left)))
            elif step == "add_nested" and "b" not in h.fields:
                _add_nested_field(h)
            elif step == "add_column" and "y" not in h.columns:
                _add_column(h)
            elif step == "rename" and mapping:
                _rename(h, data.draw(st.sampled_from(["x", "d", "n", "s.a"])))
            elif step == "compact":
                dc.DeltaTable(h.uri).optimize.compact()
            elif step == "z_order":
                names = [h.columns[r][0] for r in ("x", "d", "n", "dec")]
                by = data.draw(st.lists(st.sampled_from(["id", *names]), min_size=1,
                                        max_size=2, unique=True))
                dc.DeltaTable(h.uri).optimize.z_order(by)
            elif step == "update":
                # Copy-on-write or deletion vectors: every file read with its own schema.
                chosen = sorted(data.draw(st.sets(st.integers(0, h.next_id), max_size=4)))
                if chosen:
                    name = h.columns["x"][0]
                    dc.DeltaTable(h.uri).update(
                        {name: "NULL"}, predicate=f"id IN ({', '.join(map(str, chosen))})")
                    hit = pc.is_in(before_table.column("id"), pa.array(chosen, pa.int64()))
                    col = before_table.column(name)
                    expected_table = before_table.set_column(
                        before_table.schema.get_field_index(name), before_table.schema.field(name),
                        pc.if_else(hit, pa.nulls(len(col), col.type), col))
                    assert _rows_now(h.uri) == canonical_rows(expected_table)
                continue
            elif step == "delete":
                t = dc.DeltaTable(h.uri)
                if dvs or not partitioned:  # rows of any file: deletion vectors, copy-on-write
                    doomed = sorted(data.draw(st.sets(st.integers(0, h.next_id), max_size=4)))
                    if doomed:
                        t.delete(f"id IN ({', '.join(map(str, doomed))})")
                        assert _rows_now(h.uri) == _without(before_table, "id", doomed)
                else:  # whole partitions
                    part = data.draw(st.sampled_from(["a", "b"]))
                    t.delete(f"p = '{part}'")
                    assert _rows_now(h.uri) == _without(before_table, "p", [part])
                continue
            elif step == "overwrite" and partitioned:
                part = data.draw(st.sampled_from(["a", "b"]))
                rows = _rows(h, data, data.draw(st.integers(1, 3)), p=part)
                dc.write(h.uri, rows, mode="overwrite", predicate=f"p = '{part}'")
                expected = _without(before_table, "p", [part]) + canonical_rows(
                    rows.cast(dc.DeltaTable(h.uri).to_arrow().schema))
                assert _rows_now(h.uri) == sorted(expected)
                continue
            # Schema changes and rewrites change no row (a widened or added column reads
            # as before, converted, or null).
            if step in ("compact", "z_order"):
                assert _rows_now(h.uri) == before, step
        ours = dc.DeltaTable(h.uri).to_arrow()
        if not h.widened:  # deltalake 1.6.0 refuses type widening
            peer = peer_read(h.uri).select(ours.column_names).cast(ours.schema)
            assert canonical_rows(peer) == canonical_rows(ours)
