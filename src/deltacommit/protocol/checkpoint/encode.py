"""A table state as checkpoint rows: one row per action, every other action column null in that
row (``null_rows``), required children of null rows filled with placeholders so that Parquet
writers accept them (``fill_required``), and the typed statistics the table's configuration
asks for (``CheckpointOptions``).  Pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import CorruptLogError, DeltaCommitError
from deltacommit.protocol.actions import Add, Metadata, Protocol, Remove
from deltacommit.protocol.checkpoint.decode import joined_parsed, joined_rows
from deltacommit.protocol.checkpoint.schema import (
    ADD,
    CHECKPOINT_METADATA,
    CHECKPOINT_SCHEMA,
    DELETION_VECTOR,
    DOMAIN_METADATA,
    METADATA,
    PROTOCOL,
    REMOVE,
    STRING_MAP,
    TXN,
)
from deltacommit.protocol.files.from_arrow import adds_from_arrow
from deltacommit.protocol.files.lazy_files import LazyActionMap, rebased_map
from deltacommit.protocol.replay import TableState
from deltacommit.protocol.schema.arrow import schema_from_json
from deltacommit.protocol.schema.column_mapping import (
    mapping_mode,
    physical_names,
    physical_schema,
)
from deltacommit.protocol.stats.arrays import stats_from_struct
from deltacommit.protocol.stats.parsed import (
    partition_struct_column,
    partition_struct_type,
    stats_struct_type,
)
from deltacommit.protocol.table_config.config import TableConfig

__all__ = ["CheckpointOptions", "EncodedCheckpoint", "adds_to_arrow", "encode_checkpoint", "fill_required",
           "live_add_chunks", "null_rows", "removes_to_arrow"]


def _map_array(dicts: list[dict[str, str | None] | None], type_: pa.DataType = STRING_MAP
               ) -> Any:
    offsets = [0]
    keys: list[str] = []
    values: list[str | None] = []
    mask: list[bool] = []
    for d in dicts:
        if d is None:
            mask.append(True)
        else:
            mask.append(False)
            keys.extend(d.keys())
            values.extend(d.values())
        offsets.append(len(keys))
    from_arrays: Any = pa.MapArray.from_arrays
    return from_arrays(
        pa.array(offsets, pa.int32()), pa.array(keys, pa.string()), pa.array(values, pa.string()),
        type=type_, mask=pa.array(mask, pa.bool_()) if any(mask) else None)


def _dv_array(dvs: list[dict[str, Any] | None]) -> Any:
    if all(d is None for d in dvs):
        return pa.nulls(len(dvs), DELETION_VECTOR)
    return pa.array(dvs, DELETION_VECTOR)


def _filler(n: int, type_: pa.DataType, nullable: bool) -> Any:
    """``n`` placeholder values for the children of null rows.

    A null ``add`` row still has ``add.path`` beneath it, and Parquet writers (pyarrow's and
    delta-rs's schema alike) refuse nulls in a field declared non-nullable even under a null
    parent, so required children get an empty value instead.
    """
    repeat: Any = pa.repeat
    if pa.types.is_struct(type_):
        return pa.StructArray.from_arrays([_filler(n, f.type, f.nullable) for f in type_],
                                          fields=list(type_),
                                          mask=repeat(True, n) if nullable and n else None)
    if nullable:
        nulls: Any = pa.nulls
        return nulls(n, type_)
    if pa.types.is_map(type_):
        from_arrays: Any = pa.MapArray.from_arrays
        return from_arrays(repeat(pa.scalar(0, pa.int32()), n + 1), pa.array([], pa.string()),
                           pa.array([], pa.string()), type=type_)
    if pa.types.is_list(type_):
        return pa.ListArray.from_arrays(repeat(pa.scalar(0, pa.int32()), n + 1),
                                        pa.array([], pa.string()), type=type_)
    return repeat(_placeholder(type_), n)


#: Null rows already built, by action type: each checkpoint pads every action column with
#: them, and building them (a placeholder per required child) cost as much as encoding the
#: actions of a small table.  Arrow arrays are immutable, so slices of one are shared.
_NULL_ROWS: dict[pa.DataType, Any] = {}
_NULL_ROWS_KEPT = 1 << 16
_NULL_ROWS_TYPES = 64


def null_rows(n: int, type_: pa.StructType) -> Any:
    """``n`` null rows of an action column."""
    if n > _NULL_ROWS_KEPT:
        return _filler(n, type_, True)
    rows = _NULL_ROWS.get(type_)
    if rows is None or len(rows) < n:
        grown = max(n, 1024, 0 if rows is None else 2 * len(rows))
        rows = _filler(min(_NULL_ROWS_KEPT, grown), type_, True)
        if len(_NULL_ROWS) >= _NULL_ROWS_TYPES:
            _NULL_ROWS.clear()
        _NULL_ROWS[type_] = rows
    return rows.slice(0, n)


def _placeholder(type_: pa.DataType) -> Any:
    if pa.types.is_string(type_):
        return pa.scalar("", type_)
    if pa.types.is_boolean(type_):
        return pa.scalar(False, type_)
    return pa.scalar(0, type_)


def fill_required(arr: Any) -> Any:
    """``arr`` with placeholders wherever a non-nullable child is null.

    Such nulls sit only under null parents (a missing deletion vector, a null ``add`` row):
    Arrow readers produce them and Parquet writers reject them.  Rows whose key field is null
    were dropped when the checkpoint was read, so no real value is ever replaced.
    """
    type_ = arr.type
    children = []
    changed = False
    for i, f in enumerate(type_):
        child = arr.field(i)
        new = child
        if pa.types.is_struct(f.type):
            new = fill_required(child)
            if not f.nullable and new.null_count:
                new = pa.StructArray.from_arrays([new.field(j) for j in range(f.type.num_fields)],
                                                 fields=list(f.type))
        elif not f.nullable and child.null_count:
            if pa.types.is_map(f.type):
                from_arrays: Any = pa.MapArray.from_arrays
                new = from_arrays(child.offsets, child.keys, child.items, type=f.type)
            elif pa.types.is_list(f.type):
                new = pa.ListArray.from_arrays(child.offsets, child.values, type=f.type)
            else:
                new = pc.fill_null(child, _placeholder(f.type))
        changed = changed or new is not child
        children.append(new)
    if not changed:
        return arr
    return pa.StructArray.from_arrays(children, fields=list(type_),
                                      mask=arr.is_null() if arr.null_count else None)


def _struct(type_: pa.StructType, children: list[Any]) -> pa.StructArray:
    return pa.StructArray.from_arrays(children, fields=list(type_))


def adds_to_arrow(adds: list[Add]) -> pa.StructArray:
    """Canonical ``add`` rows, built column by column (fast for large file lists)."""
    return _struct(ADD, [
        pa.array([a.path for a in adds], pa.string()),
        _map_array([a.partition_values for a in adds]),
        pa.array([a.size for a in adds], pa.int64()),
        pa.array([a.modification_time for a in adds], pa.int64()),
        pa.array([a.data_change for a in adds], pa.bool_()),
        pa.array([a.stats for a in adds], pa.string()),
        _map_array([a.tags for a in adds]),
        _dv_array([a.deletion_vector for a in adds]),
        pa.array([a.base_row_id for a in adds], pa.int64()),
        pa.array([a.default_row_commit_version for a in adds], pa.int64()),
        pa.array([a.clustering_provider for a in adds], pa.string()),
    ])


def removes_to_arrow(removes: list[Remove]) -> pa.StructArray:
    return _struct(REMOVE, [
        pa.array([r.path for r in removes], pa.string()),
        pa.array([r.deletion_timestamp for r in removes], pa.int64()),
        pa.array([r.data_change for r in removes], pa.bool_()),
        pa.array([r.extended_file_metadata for r in removes], pa.bool_()),
        _map_array([r.partition_values for r in removes]),
        pa.array([r.size for r in removes], pa.int64()),
        _dv_array([r.deletion_vector for r in removes]),
        pa.array([r.base_row_id for r in removes], pa.int64()),
        pa.array([r.default_row_commit_version for r in removes], pa.int64()),
    ])


def _live_rows(m: dict[str, Any], to_arrow: Any) -> Any:
    if isinstance(m, LazyActionMap):
        return m.arrow_rows(to_arrow)
    return to_arrow(list(m.values()))


def live_add_chunks(files: dict[str, Add], *, texts: bool = True) -> list[tuple[Any, Any]]:
    """The live files as canonical ``add`` rows, in chunks (a state's checkpoint rows still
    kept, then the adds since), each with the checkpoint's ``stats_parsed`` of its rows (None
    for the adds since, or if it has none).  No ``Add`` object is built for a checkpoint row.
    Without ``texts``, checkpoint rows may come as ``ADD_LIGHT`` (no JSON statistics)."""
    if not isinstance(files, LazyActionMap):
        return [(adds_to_arrow(list(files.values())), None)]
    return files.parsed_chunks(adds_to_arrow, texts=texts)


def _live_adds(files: dict[str, Add]) -> tuple[Any, Any]:
    """Every live ``add`` row, and the ``stats_parsed`` of the checkpoint they were read from
    for each (None if there is none)."""
    chunks = live_add_chunks(files)
    return joined_rows([r for r, _ in chunks], ADD), joined_parsed(chunks)


def _protocol_row(p: Protocol) -> dict[str, Any]:
    reader = p.reader_features if p.min_reader_version >= 3 else None
    writer = p.writer_features if p.min_writer_version >= 7 else None
    if p.min_reader_version >= 3 and reader is None:
        reader = []
    if p.min_writer_version >= 7 and writer is None:
        writer = []
    return {"minReaderVersion": p.min_reader_version, "minWriterVersion": p.min_writer_version,
            "readerFeatures": reader, "writerFeatures": writer}


def _metadata_row(m: Metadata) -> dict[str, Any]:
    return {
        "id": m.id, "name": m.name, "description": m.description,
        "format": {"provider": m.format.provider, "options": list(m.format.options.items())},
        "schemaString": m.schema_string, "partitionColumns": list(m.partition_columns),
        "createdTime": m.created_time, "configuration": list(m.configuration.items()),
    }


@dataclass(frozen=True, slots=True)
class EncodedCheckpoint:
    table: pa.Table
    num_add_files: int
    #: The state's file map backed by the ``add`` rows just encoded (``lazy_files.rebased_map``),
    #: for the writer to keep in place of it; None if it could not be had for free.
    files: dict[str, Add] | None = None


@dataclass(frozen=True, slots=True)
class CheckpointOptions:
    """How a table's configuration shapes its checkpoints (PROTOCOL.md "Checkpoints").

    ``v2``: a V2-spec checkpoint, whose first row is its ``checkpointMetadata`` action.
    ``stats_json``/``stats_struct``: ``delta.checkpoint.writeStatsAsJson`` and
    ``delta.checkpoint.writeStatsAsStruct``, both true unless set (Delta's defaults: readers
    of the typed ``stats_parsed`` need not parse each file's JSON text).
    """

    v2: bool = False
    stats_json: bool = True
    stats_struct: bool = True

    @classmethod
    def of(cls, protocol: Protocol, config: TableConfig) -> CheckpointOptions:
        """The options a table asks for (``TableConfig.v2_checkpoints``: UUID-named V2
        checkpoints need the policy and the ``v2Checkpoint`` feature)."""
        return cls(v2=config.v2_checkpoints(protocol), stats_json=config.checkpoint_stats_as_json,
                   stats_struct=config.checkpoint_stats_as_struct)


def _parsed_add_columns(adds: Any, metadata: Metadata, options: CheckpointOptions,
                        previous: Any = None) -> Any:
    """``adds`` with ``stats_parsed`` and ``partitionValues_parsed`` added (typed by the table
    schema) and/or ``stats`` dropped, as the options say.

    Both are built column-wise (``stats_arrays.parse_stats``: Arrow's JSON reader; partition
    values parsed once per distinct value).  ``previous`` is the ``stats_parsed`` the state's
    checkpoint had for each row (or None): taken over where it gives what parsing would.
    """
    if options.stats_json and not options.stats_struct:
        return adds
    names = [f.name for f in ADD]
    children = [adds.field(n) for n in names]
    fields = list(ADD)
    if not options.stats_json:
        i = names.index("stats")
        del children[i], fields[i]
    if options.stats_struct:
        try:
            parsed = _parsed_columns(adds, metadata, previous)
        except (DeltaCommitError, KeyError):
            # A schema this library cannot type (or that lacks a partition column): the typed
            # columns are optional, the statistics are not.
            if not options.stats_json:
                raise
            parsed = []
        for f, arr in parsed:
            fields.append(f)
            children.append(arr)
    return pa.StructArray.from_arrays(children, fields=fields)


def _parsed_columns(adds: Any, metadata: Metadata, previous: Any) -> list[tuple[Any, Any]]:
    """``partitionValues_parsed`` (partitioned tables only) and ``stats_parsed`` of ``adds``."""

    schema = schema_from_json(metadata.schema_string)
    parts = list(metadata.partition_columns)
    mode = mapping_mode(metadata.configuration)
    if mode != "none":
        # Column-mapping tables key stats and partition values by physical name; so do
        # their parsed forms (PROTOCOL.md, "Column Mapping").
        physical = physical_names(schema, mode)
        parts = [physical.get(c, c) for c in parts]
        schema = physical_schema(schema, mode)
    out: list[tuple[Any, Any]] = []
    if parts:
        ptype = partition_struct_type(schema, parts)
        out.append((pa.field("partitionValues_parsed", ptype),
                    partition_struct_column(adds.field("partitionValues"), ptype)))
    stype = stats_struct_type(schema, parts)
    out.append((pa.field("stats_parsed", stype),
                stats_from_struct(previous, adds.field("stats"), stype, stype)))
    return out


def encode_checkpoint(state: TableState, tombstone_cutoff_ms: int,
                      txn_cutoff_ms: int | None = None,
                      options: CheckpointOptions = CheckpointOptions()) -> EncodedCheckpoint:
    """The checkpoint rows of ``state``: checkpointMetadata (V2 only), protocol, metaData,
    txns, domains, adds, tombstones.

    Tombstones deleted at or before ``tombstone_cutoff_ms`` (or without a deletion time) have
    expired and are dropped, as are application transactions last updated before
    ``txn_cutoff_ms`` when the table sets ``delta.setTransactionRetentionDuration``.
    """
    if state.protocol is None or state.metadata is None:
        raise CorruptLogError(
            f"cannot checkpoint version {state.version}: the state lacks a protocol or metaData")
    txns = [t for t in state.app_txns.values()
            if txn_cutoff_ms is None or t.last_updated is None or t.last_updated >= txn_cutoff_ms]
    domains = [d for d in state.domains.values() if not d.get("removed")]
    adds, previous = _live_adds(state.files)
    removes = _live_rows(state.tombstones, removes_to_arrow)
    if len(removes):
        ts = removes.field("deletionTimestamp")
        keep = pc.fill_null(pc.greater(ts, pa.scalar(tombstone_cutoff_ms, pa.int64())), False)
        removes = removes.filter(keep)
    rows = adds
    adds = _parsed_add_columns(fill_required(adds), state.metadata, options,
                               previous if options.stats_struct else None)
    parsed = (adds.field("stats_parsed") if adds.type.get_field_index("stats_parsed") >= 0
              else previous)
    removes = fill_required(removes)
    sections: list[tuple[str, Any]] = []
    if options.v2:
        sections.append(("checkpointMetadata", pa.array(
            [{"version": state.version, "tags": None}], CHECKPOINT_METADATA)))
    sections += [
        ("protocol", pa.array([_protocol_row(state.protocol)], PROTOCOL)),
        ("metaData", pa.array([_metadata_row(state.metadata)], METADATA)),
        ("txn", pa.array([{"appId": t.app_id, "version": t.version, "lastUpdated": t.last_updated}
                          for t in txns], TXN)),
        ("domainMetadata", pa.array([{"domain": str(d.get("domain", "")),
                                      "configuration": _domain_config(d), "removed": False}
                                     for d in domains], DOMAIN_METADATA)),
        ("add", adds),
        ("remove", removes),
    ]
    total = sum(len(a) for _, a in sections)
    columns: dict[str, Any] = {}
    before = 0
    for name, arr in sections:
        type_ = arr.type
        parts = []
        if before:
            parts.append(null_rows(before, type_))
        if len(arr):
            parts.append(arr)
        after = total - before - len(arr)
        if after:
            parts.append(null_rows(after, type_))
        columns[name] = pa.concat_arrays(parts) if len(parts) > 1 else parts[0]
        before += len(arr)
    order = [f.name for f in CHECKPOINT_SCHEMA] + (["checkpointMetadata"] if options.v2 else [])
    table = pa.Table.from_arrays([columns[n] for n in order],
                                 schema=pa.schema([pa.field(n, columns[n].type) for n in order]))
    return EncodedCheckpoint(table, len(adds),
                             rebased_map(state.files, rows, parsed, adds_from_arrow))


def _domain_config(d: dict[str, Any]) -> str:
    c = d.get("configuration", "")
    return c if isinstance(c, str) else json.dumps(c, separators=(",", ":"))
