"""Identity columns: values a writer allocates above the table's high-water mark.  Pure.

PROTOCOL.md "Identity Columns": a column whose field metadata holds ``delta.identity.start``
and ``delta.identity.step`` gets, in rows that leave it out, values ``start + k * step``
beyond ``delta.identity.highWaterMark``, and the commit that writes them raises the mark.  The
mark lives in the schema, so every write that generates values commits a ``metaData`` action;
two such writers therefore conflict (``conflicts.check_conflicts``: a concurrent metadata
change), and the loser allocates again above the winner's mark (``writer.write`` and the
``Appender`` redo the write from the new snapshot).  That is what keeps values unique across
concurrent writers without any coordination beyond the log.

A writer that cannot take part in that protocol (a Spark task on an executor, which cannot
know which values the other tasks take) gets no allocation, and ``datafiles.conform_rows``
refuses rows without the column rather than invent values.  Explicit values are accepted
only when ``delta.identity.allowExplicitInsert`` is true; they do not move the mark, as in
Delta.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from deltacommit.errors import InvalidArgumentError, UnsupportedProtocolError
from deltacommit.protocol.actions import MAX_LONG, Metadata
from deltacommit.protocol.json_values import loads

START = "delta.identity.start"
STEP = "delta.identity.step"
HIGH_WATER_MARK = "delta.identity.highWaterMark"
#: ``commitInfo.tags`` key Spark sets on a commit whose metadata change only raises
#: high-water marks; its conflict checker lets such a winner pass a transaction that changes
#: no metadata itself (``ConflictChecker.checkNoMetadataUpdates``), and so does ours.
SCHEMA_UPDATE_TAG = "delta.identity.schemaUpdate"
ALLOW_EXPLICIT_INSERT = "delta.identity.allowExplicitInsert"
MIN_LONG = -MAX_LONG - 1


@dataclass(frozen=True, slots=True)
class IdentityColumn:
    """A top-level identity column as the read snapshot describes it."""

    name: str
    start: int
    step: int
    high_water_mark: int | None
    allow_explicit_insert: bool


@dataclass(frozen=True, slots=True)
class Allocation:
    """``count`` values ``first, first + step, ...`` of one identity column for one write."""

    column: str
    first: int
    step: int
    count: int

    @property
    def last(self) -> int:
        return self.first + (self.count - 1) * self.step

    def values(self) -> pa.Array[Any]:
        return pa.array(range(self.first, self.last + self.step, self.step), pa.int64())


def _long(meta: Mapping[bytes, bytes], key: str, column: str, table: str) -> int | None:
    raw = meta.get(key.encode())
    if raw is None:
        return None
    try:
        value = loads(raw)
    except ValueError:
        value = None
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_LONG <= value <= MAX_LONG:
        raise UnsupportedProtocolError(
            f"table {table}: identity column {column!r} has {key}={raw.decode(errors='replace')!r}"
            ", expected a 64-bit integer")
    return value


def identity_columns(schema: pa.Schema, table: str) -> list[IdentityColumn]:
    """The identity columns of a table schema (top-level ``long`` columns, as Delta allows)."""
    out: list[IdentityColumn] = []
    for f in schema:
        meta = f.metadata or {}
        start = _long(meta, START, f.name, table)
        if start is None:
            continue
        step = _long(meta, STEP, f.name, table)
        if step is None or step == 0:
            raise UnsupportedProtocolError(
                f"table {table}: identity column {f.name!r} has {STEP}={step!r}, expected a "
                "non-zero 64-bit integer")
        if not pa.types.is_int64(f.type):
            raise UnsupportedProtocolError(
                f"table {table}: identity column {f.name!r} has type {f.type}, expected long")
        explicit = (meta.get(ALLOW_EXPLICIT_INSERT.encode()) or b"false").lower() == b"true"
        out.append(IdentityColumn(f.name, start, step,
                                  _long(meta, HIGH_WATER_MARK, f.name, table), explicit))
    return out


def next_value(column: IdentityColumn) -> int:
    """The first value ``start + k * step`` (k >= 0) beyond the high-water mark."""
    start, step, mark = column.start, column.step, column.high_water_mark
    if mark is None:
        return start
    # k: the number of steps from start to just past the mark, in the step's direction
    k = max(0, ((mark - start) // step if step > 0 else (start - mark) // -step) + 1)
    return start + k * step


def allocate(columns: Iterable[IdentityColumn], data_columns: Sequence[str], num_rows: int,
             table: str) -> dict[str, Allocation]:
    """Values for every identity column the data leaves out; refuses an overflow (the
    protocol forbids wrapping), and explicit values where they are not allowed."""
    out: dict[str, Allocation] = {}
    for c in columns:
        if c.name in data_columns:
            check_explicit(c, table)
            continue
        if num_rows == 0:
            continue
        alloc = Allocation(c.name, next_value(c), c.step, num_rows)
        if not MIN_LONG <= alloc.first <= MAX_LONG or not MIN_LONG <= alloc.last <= MAX_LONG:
            raise InvalidArgumentError(
                f"table {table}: identity column {c.name!r} would overflow a 64-bit integer "
                f"generating {num_rows} value(s) from {alloc.first} by {c.step}; nothing was "
                "written")
        out[c.name] = alloc
    return out


def check_explicit(column: IdentityColumn, table: str) -> None:
    if not column.allow_explicit_insert:
        raise InvalidArgumentError(
            f"table {table}: column {column.name!r} is an identity column GENERATED ALWAYS "
            f"({ALLOW_EXPLICIT_INSERT}=false); leave it out of the data and its values are "
            "generated")


def fill_identity(data: pa.Table, columns: Sequence[IdentityColumn],
                  allocations: Mapping[str, Allocation], schema: pa.Schema, table: str
                  ) -> pa.Table:
    """``data`` with the values of ``allocations`` appended for identity columns it lacks;
    a lacking column without an allocation is refused (this writer cannot generate it)."""
    for c in columns:
        if c.name in data.column_names:
            check_explicit(c, table)
            continue
        alloc = allocations.get(c.name)
        if alloc is None and data.num_rows == 0:
            values: pa.Array[Any] = pa.array([], pa.int64())
        elif alloc is None:
            raise InvalidArgumentError(
                f"table {table}: the data lacks identity column {c.name!r}, and this writer "
                "cannot generate its values (they must be allocated by the committing writer: "
                "write with deltacommit.write, deltacommit.append or the Appender)")
        elif alloc.count != data.num_rows:
            raise InvalidArgumentError(
                f"table {table}: {alloc.count} identity value(s) were allocated for column "
                f"{c.name!r} but the data has {data.num_rows} row(s)")
        else:
            values = alloc.values()
        data = data.append_column(schema.field(c.name), values.cast(schema.field(c.name).type))
    return data


def with_high_water_marks(metadata: Metadata, allocations: Iterable[Allocation]) -> Metadata:
    """``metadata`` whose schema records each allocation's last value as the column's
    high-water mark (the rest of the schema string kept as it was)."""
    marks = {a.column: a.last for a in allocations}
    if not marks:
        return metadata
    schema: dict[str, Any] = json.loads(metadata.schema_string)
    for f in schema.get("fields", []):
        if f.get("name") in marks:
            f.setdefault("metadata", {})[HIGH_WATER_MARK] = marks[f["name"]]
    return replace(metadata, schema_string=json.dumps(schema, separators=(",", ":"),
                                                      ensure_ascii=False))


def _without_marks(metadata: Metadata) -> Metadata:
    schema: dict[str, Any] = json.loads(metadata.schema_string)
    for f in schema.get("fields", []):
        (f.get("metadata") or {}).pop(HIGH_WATER_MARK, None)
    return replace(metadata, schema_string=json.dumps(schema, separators=(",", ":")))


def is_mark_update(before: Metadata | None, after: Metadata | None) -> bool:
    """Whether ``after`` is a metadata change (from ``before``) of high-water marks alone."""
    return (before is not None and after is not None and before != after
            and only_marks_changed(before, after))


def only_marks_changed(before: Metadata, after: Metadata) -> bool:
    """Whether ``after`` differs from ``before`` in identity high-water marks alone: a
    concurrent identity writer won, and this one may allocate again and retry."""
    if before == after:
        return True
    try:
        return _without_marks(before) == _without_marks(after)
    except ValueError:
        return False


__all__ = ["SCHEMA_UPDATE_TAG", "Allocation", "IdentityColumn", "allocate", "fill_identity",
           "identity_columns", "is_mark_update", "next_value", "only_marks_changed",
           "with_high_water_marks"]
