"""V2-spec checkpoints (the ``v2Checkpoint`` feature): one ``checkpointMetadata`` row naming the
version, file actions optionally moved to sidecar files that ``sidecar`` rows name, and
UUID-named checkpoints that may be JSON lines, read here into the Parquet checkpoint's shape.
Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import CorruptLogError
from deltacommit.protocol.checkpoint.decode import column_rows
from deltacommit.protocol.checkpoint.encode import null_rows
from deltacommit.protocol.checkpoint.schema import CHECKPOINT_METADATA, SIDECAR, V2_CHECKPOINT_SCHEMA
from deltacommit.protocol.json_values import loads
from deltacommit.protocol.log.last_checkpoint import SidecarRef

__all__ = ["json_checkpoint_table", "sidecar_references", "split_file_actions", "v2_sidecars",
           "with_sidecars"]


def split_file_actions(table: pa.Table) -> tuple[pa.Table, pa.Table]:
    """A V2 checkpoint's rows split for a sidecar: its non-file actions, and the ``add`` and
    ``remove`` rows for the sidecar file (PROTOCOL.md: all file actions in sidecars or none)."""
    is_file = pc.or_(table.column("add").is_valid(), table.column("remove").is_valid())
    return table.filter(pc.invert(is_file)), table.filter(is_file).select(["add", "remove"])


def with_sidecars(table: pa.Table, sidecars: Sequence[SidecarRef]) -> pa.Table:
    """``table`` (non-file actions) with one ``sidecar`` row per file in ``sidecars``."""
    n, k = table.num_rows, len(sidecars)
    padding = pa.Table.from_arrays([null_rows(k, f.type) for f in table.schema],
                                   schema=table.schema)
    refs = pa.array([r.to_json() | {"tags": None} for r in sidecars], SIDECAR)
    column = pa.concat_arrays([null_rows(n, SIDECAR), refs]) if n else refs
    return pa.concat_tables([table, padding]).append_column(pa.field("sidecar", SIDECAR), column)


def v2_sidecars(table: pa.Table, version: int, source: str, uuid_named: bool
                ) -> list[SidecarRef]:
    """The sidecars a checkpoint's rows reference, after checking its ``checkpointMetadata``.

    A UUID-named checkpoint follows the V2 spec and must hold exactly one
    ``checkpointMetadata`` action; a classic one may (V2 spec) or may not (V1 spec).  Either
    must describe the version its file name says, or it is another version's state.
    """
    metas = column_rows(table, "checkpointMetadata", "version", CHECKPOINT_METADATA).to_pylist()
    if len(metas) > 1 or (uuid_named and not metas):
        raise CorruptLogError(f"{source}: a V2 checkpoint must hold exactly one "
                              f"checkpointMetadata action, found {len(metas)}")
    if metas and metas[0]["version"] != version:
        raise CorruptLogError(f"{source}: checkpointMetadata says version {metas[0]['version']}, "
                              f"the file name {version}")
    out: list[SidecarRef] = []
    for row in column_rows(table, "sidecar", "path", SIDECAR).to_pylist():
        if row.get("sizeInBytes") is None or row.get("modificationTime") is None:
            raise CorruptLogError(f"{source}: sidecar action {row!r} lacks sizeInBytes or "
                                  "modificationTime")
        out.append(SidecarRef(row["path"], row["sizeInBytes"], row["modificationTime"]))
    return out


def sidecar_references(table: pa.Table) -> list[str]:
    """The ``path`` of every ``sidecar`` action in a checkpoint's rows, unchecked: log cleanup
    protects what any checkpoint names, even one a reader would reject."""
    return [str(p) for p in column_rows(table, "sidecar", "path", SIDECAR).field("path").to_pylist()]


def json_checkpoint_table(data: bytes, source: str) -> pa.Table:
    """The rows of a JSON (UUID-named) checkpoint in the Parquet checkpoint's shape, one row
    per line, so both formats decode alike."""
    rows: list[dict[str, Any]] = []
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = loads(line)
        except ValueError as e:
            raise CorruptLogError(f"{source}: line {n} is not JSON ({e}); the checkpoint is torn "
                                  "or damaged") from None
        if not isinstance(obj, dict):
            raise CorruptLogError(f"{source}: line {n} is not an action object")
        rows.append(obj)
    columns = []
    for f in V2_CHECKPOINT_SCHEMA:
        values = [r.get(f.name) for r in rows]
        try:
            columns.append(pa.array(values, _nullable(f.type)))
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise CorruptLogError(f"{source}: {f.name} actions do not match the protocol's "
                                  f"schema: {e}") from None
    return pa.Table.from_arrays(columns, names=V2_CHECKPOINT_SCHEMA.names)


def _nullable(t: pa.DataType) -> pa.DataType:
    """``t`` with every struct field nullable: a JSON action may omit an optional field, and
    a missing required one is reported by the action decoders, not by Arrow."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _nullable(f.type)) for f in t])
    return t
