"""Row-level DELETE that writes deletion vectors instead of rewriting files.

Used by ``DeltaTable.delete`` when the table allows new deletion vectors
(``delta.enableDeletionVectors=true`` and the ``deletionVectors`` writer feature) and the
predicate references data columns.  Each file with matching rows keeps its Parquet file: its
``add`` is replaced by one whose DV marks the union of the old and the newly deleted rows, all
new DVs in one ``deletion_vector_<uuid>.bin`` at the table root (as Spark writes them); a file
left with no row is removed outright.  Rows are deleted where the predicate is TRUE (SQL logic:
NULL deletes nothing).
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import InvalidArgumentError
from deltacommit.log.actions import Add
from deltacommit.log.deletion_vectors import (
    encode_bitmap_array,
    encode_file,
    relative_dv_path_or_inline,
)
from deltacommit.predicates import (
    And,
    Comparison,
    Constant,
    InList,
    IsNull,
    Literal,
    Not,
    Or,
    Predicate,
)
from deltacommit.table import _FileReader

if TYPE_CHECKING:
    from deltacommit.table import DeltaTable
    from deltacommit.transaction import CommitResult

_ARROW_OPS = {"=": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal",
              ">": "greater", ">=": "greater_equal"}
_NULL_BOOL = pa.scalar(None, pa.bool_())
_pc: Any = pc  # pyarrow.compute's stubs do not cover functions applied to expressions


def deletes_write_dvs(table: DeltaTable) -> bool:
    """Whether writers may add deletion vectors to ``table`` (PROTOCOL.md: only with the property)."""
    p = table.protocol
    enabled = (table.configuration.get("delta.enableDeletionVectors") or "").lower() == "true"
    return enabled and "deletionVectors" in (p.writer_features or [])


def _literal(literal: Literal, t: pa.DataType, where: str) -> pa.Scalar[Any] | None:
    """``literal`` as a scalar of the column type ``t``; None for NULL."""
    if literal.kind == "null":
        return None
    value: Any = literal.value
    try:
        if pa.types.is_floating(t) and isinstance(value, Decimal | int | str):
            value = float(value)
        elif pa.types.is_timestamp(t) and isinstance(value, dt.datetime):
            tz = getattr(t, "tz", None)
            if tz is not None and value.tzinfo is None:
                value = value.replace(tzinfo=dt.UTC)
            elif tz is None and value.tzinfo is not None:
                value = value.astimezone(dt.UTC).replace(tzinfo=None)
        out: pa.Scalar[Any] = pa.scalar(value).cast(t)
        return out
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError,
            TypeError) as e:
        raise InvalidArgumentError(f"{where}: cannot compare a {t} column with "
                                   f"{literal.to_sql()}: {e}") from None


def to_expression(p: Predicate, schema: pa.Schema, where: str = "predicate") -> pc.Expression:
    """An Arrow expression with the predicate's SQL three-valued logic."""
    expression: pc.Expression = _expression(p, schema, where)
    return expression


def _expression(p: Predicate, schema: pa.Schema, where: str) -> Any:
    def field_type(column: str) -> pa.DataType:
        if column not in schema.names:
            raise InvalidArgumentError(f"{where}: no column {column!r}; columns are {schema.names}")
        found: pa.DataType = schema.field(column).type
        return found

    if isinstance(p, Constant):
        return _pc.scalar(bool(p.value))
    if isinstance(p, Comparison):
        value = _literal(p.literal, field_type(p.column), where)
        if value is None:
            return _pc.scalar(_NULL_BOOL)
        fn: Any = getattr(pc, _ARROW_OPS[p.op])
        out: pc.Expression = fn(_pc.field(p.column), _pc.scalar(value))
        return out
    if isinstance(p, InList):
        t = field_type(p.column)
        values = [_literal(x, t, where) for x in p.literals]
        present = [v for v in values if v is not None]
        member: Any = _pc.is_in(_pc.field(p.column), value_set=pa.array(present, t))
        found = _pc.if_else(member, _pc.scalar(True), _pc.scalar(
            _NULL_BOOL if len(present) < len(values) else False))
        found = _pc.if_else(_pc.is_valid(_pc.field(p.column)), found, _pc.scalar(_NULL_BOOL))
        return _pc.invert(found) if p.negated else found
    if isinstance(p, IsNull):
        field_type(p.column)
        return _pc.is_valid(_pc.field(p.column)) if p.negated else _pc.is_null(_pc.field(p.column))
    if isinstance(p, Not):
        return _pc.invert(_expression(p.child, schema, where))
    if isinstance(p, And | Or):
        parts = [_expression(c, schema, where) for c in p.children]
        combined = parts[0]
        for part in parts[1:]:
            combined = (_pc.and_kleene(combined, part) if isinstance(p, And)
                        else _pc.or_kleene(combined, part))
        return combined
    raise InvalidArgumentError(f"{where}: {type(p).__name__} is not supported in a row-level delete")


def delete_with_deletion_vectors(table: DeltaTable, predicate: Predicate) -> CommitResult:
    from deltacommit.deletion_vector_io import deleted_rows
    from deltacommit.table import _json_list

    where = f"delete from table {table.uri} where {predicate.to_sql()}"
    expression = to_expression(predicate, table.schema, where)
    with table.transaction("DELETE", {"predicate": _json_list([predicate.to_sql()])}) as txn:
        files = txn.scan()
        reader = _PhysicalRows(table, table.schema)
        removes: list[Add] = []
        kept: list[tuple[Add, bytes, int]] = []
        deleted_now = 0
        for add in files:
            data = reader(add)
            n = data.num_rows
            hit = (data.append_column("__row", pa.array(np.arange(n, dtype=np.int64)))
                   .filter(expression).column("__row").to_numpy())
            old = (deleted_rows(table.log_store.store, reader.root, table.uri,
                                add.deletion_vector, data_file=add.path,
                                storage_options=table.storage_options,
                                allow_external=table.allow_external_paths)
                   if add.deletion_vector else np.zeros(0, np.uint64))
            rows = np.union1d(old.astype(np.int64), hit)
            if len(rows) == len(old):
                continue
            deleted_now += len(rows) - len(old)
            removes.append(add)
            if len(rows) < n:
                kept.append((add, encode_bitmap_array(rows), len(rows)))
        adds: list[Add] = []
        if kept:
            content, offsets = encode_file([b for _, b, _ in kept])
            uid = uuid.uuid4()
            table.log_store.store.put(f"deletion_vector_{uid}.bin", content)
            key = relative_dv_path_or_inline("", uid)
            adds = [Add(a.path, dict(a.partition_values), a.size, a.modification_time,
                        stats=a.stats, tags=a.tags,
                        deletion_vector={"storageType": "u", "pathOrInlineDv": key,
                                         "offset": off, "sizeInBytes": len(blob),
                                         "cardinality": card})
                    for (a, blob, card), off in zip(kept, offsets, strict=True)]
        txn.remove(removes)
        txn.add(adds)
        txn.operation_metrics["numRemovedFiles"] = str(len(removes) - len(adds))
        txn.operation_metrics["numDeletionVectorsAdded"] = str(len(adds))
        txn.operation_metrics["numDeletionVectorsRemoved"] = str(
            sum(1 for a in removes if a.deletion_vector))
        txn.operation_metrics["numDeletedRows"] = str(deleted_now)
    assert txn.result is not None
    return txn.result


class _PhysicalRows(_FileReader):
    """Every physical row of a file, in file order (deleted ones too): DVs index them."""

    def _drop_deleted(self, add: Add, data: pa.Table, rel: str) -> pa.Table:
        return data


__all__ = ["delete_with_deletion_vectors", "deletes_write_dvs", "to_expression"]
