"""Checkpoint files: their Arrow schema and the conversion to and from table state.  Pure.

The schema follows PROTOCOL.md ("Checkpoint Schema") with the field types and nullability that
delta-rs writes, so both delta-rs and Spark read what we write: one row per action, one struct
column per action type, every other column null in that row.  ``add.stats`` is the JSON string
unless ``delta.checkpoint.writeStatsAsJson=false``; unless ``delta.checkpoint.writeStatsAsStruct``
is false (Delta's default is true), ``add`` also has ``stats_parsed`` and
``partitionValues_parsed`` typed by the table schema (see ``parsed_stats``).  Reading keeps the
``stats_parsed`` of the ``add`` rows beside them (``lazy_files.ActionRows.stats_parsed``).
``remove`` rows carry no ``stats`` or ``tags``: in a checkpoint they are only tombstones for
VACUUM.  A V2-spec checkpoint (``v2Checkpoint`` feature) adds one
``checkpointMetadata`` row and may move its ``add`` and ``remove`` rows to sidecar files that
``sidecar`` rows name; a UUID-named one may also be JSON lines, read here into the same shape.

Reading is lenient about the schema (Spark names map entries differently, makes everything
nullable and adds ``stats_parsed``): columns are matched by name and normalised to the canonical
types, a missing column reads as null, as the protocol says, and rows may come in any order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import CorruptLogError, DeltaCommitError
from deltacommit.protocol.actions import Add, Metadata, Protocol, Remove, Txn
from deltacommit.protocol.files.lazy_files import (
    ActionRows,
    LazyActionMap,
    adds_from_arrow,
    map_dicts,
    rebased_map,
    removes_from_arrow,
)
from deltacommit.protocol.json_values import loads
from deltacommit.protocol.log.last_checkpoint import SidecarRef
from deltacommit.protocol.log.replay import TableState
from deltacommit.protocol.schema.arrow import schema_from_json
from deltacommit.protocol.stats.arrays import stats_from_struct
from deltacommit.protocol.stats.parsed import (
    ntz_paths,
    partition_struct_column,
    partition_struct_type,
    stats_json_texts,
    stats_struct_type,
)
from deltacommit.protocol.table_config.config import TableConfig


def _f(name: str, type_: pa.DataType, nullable: bool = True) -> pa.Field[Any]:
    return pa.field(name, type_, nullable)


STRING_MAP = pa.map_(pa.string(), pa.string())
STRING_LIST = pa.list_(_f("element", pa.string(), False))

DELETION_VECTOR = pa.struct([
    _f("storageType", pa.string(), False),
    _f("pathOrInlineDv", pa.string(), False),
    _f("offset", pa.int32()),
    _f("sizeInBytes", pa.int32(), False),
    _f("cardinality", pa.int64(), False),
    _f("maxRowIndex", pa.int64()),
])

ADD = pa.struct([
    _f("path", pa.string(), False),
    _f("partitionValues", STRING_MAP, False),
    _f("size", pa.int64(), False),
    _f("modificationTime", pa.int64(), False),
    _f("dataChange", pa.bool_(), False),
    _f("stats", pa.string()),
    _f("tags", STRING_MAP),
    _f("deletionVector", DELETION_VECTOR),
    _f("baseRowId", pa.int64()),
    _f("defaultRowCommitVersion", pa.int64()),
    _f("clusteringProvider", pa.string()),
])

#: ``ADD`` without the JSON statistics: the rows a reader that has the checkpoint's typed
#: statistics reads (``ActionRows.light``).
ADD_LIGHT = pa.struct([f for f in ADD if f.name != "stats"])
_PATH_AND_STATS = pa.struct([ADD.field("path"), ADD.field("stats")])

REMOVE = pa.struct([
    _f("path", pa.string(), False),
    _f("deletionTimestamp", pa.int64()),
    _f("dataChange", pa.bool_(), False),
    _f("extendedFileMetadata", pa.bool_()),
    _f("partitionValues", STRING_MAP),
    _f("size", pa.int64()),
    _f("deletionVector", DELETION_VECTOR),
    _f("baseRowId", pa.int64()),
    _f("defaultRowCommitVersion", pa.int64()),
])

METADATA = pa.struct([
    _f("id", pa.string(), False),
    _f("name", pa.string()),
    _f("description", pa.string()),
    _f("format", pa.struct([_f("provider", pa.string(), False), _f("options", STRING_MAP, False)]),
       False),
    _f("schemaString", pa.string(), False),
    _f("partitionColumns", STRING_LIST, False),
    _f("createdTime", pa.int64()),
    _f("configuration", STRING_MAP, False),
])

PROTOCOL = pa.struct([
    _f("minReaderVersion", pa.int32(), False),
    _f("minWriterVersion", pa.int32(), False),
    _f("readerFeatures", STRING_LIST),
    _f("writerFeatures", STRING_LIST),
])

TXN = pa.struct([
    _f("appId", pa.string(), False),
    _f("version", pa.int64(), False),
    _f("lastUpdated", pa.int64()),
])

DOMAIN_METADATA = pa.struct([
    _f("domain", pa.string(), False),
    _f("configuration", pa.string(), False),
    _f("removed", pa.bool_(), False),
])

CHECKPOINT_SCHEMA = pa.schema([
    _f("add", ADD),
    _f("remove", REMOVE),
    _f("metaData", METADATA),
    _f("protocol", PROTOCOL),
    _f("txn", TXN),
    _f("domainMetadata", DOMAIN_METADATA),
])

CHECKPOINT_METADATA = pa.struct([
    _f("version", pa.int64(), False),
    _f("tags", STRING_MAP),
])

SIDECAR = pa.struct([
    _f("path", pa.string(), False),
    _f("sizeInBytes", pa.int64(), False),
    _f("modificationTime", pa.int64(), False),
    _f("tags", STRING_MAP),
])

#: Columns only a V2 checkpoint has rows in (``checkpointMetadata``, ``sidecar``).
V2_COLUMNS = ("checkpointMetadata", "sidecar")

#: Every action column a checkpoint may have, V2 ones included (JSON checkpoints are read
#: into this shape).
V2_CHECKPOINT_SCHEMA = pa.schema([*CHECKPOINT_SCHEMA, _f("checkpointMetadata", CHECKPOINT_METADATA),
                                  _f("sidecar", SIDECAR)])


# --------------------------------------------------------------------------- encoding


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
    return _concat([r for r, _ in chunks], ADD), _joined_parsed(chunks)


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
    from deltacommit.protocol.schema.column_mapping import (
        mapping_mode,
        physical_names,
        physical_schema,
    )

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
        out.append((_f("partitionValues_parsed", ptype),
                    partition_struct_column(adds.field("partitionValues"), ptype)))
    stype = stats_struct_type(schema, parts)
    out.append((_f("stats_parsed", stype),
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
                                 schema=pa.schema([_f(n, columns[n].type) for n in order]))
    return EncodedCheckpoint(table, len(adds),
                             rebased_map(state.files, rows, parsed, adds_from_arrow))


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
    return pa.concat_tables([table, padding]).append_column(_f("sidecar", SIDECAR), column)


def _domain_config(d: dict[str, Any]) -> str:
    c = d.get("configuration", "")
    return c if isinstance(c, str) else json.dumps(c, separators=(",", ":"))


# --------------------------------------------------------------------------- decoding


def _normalise(arr: Any, target: pa.DataType) -> Any:
    """``arr`` as ``target``, matching struct fields by name and filling missing ones with nulls."""
    if arr.type == target:
        return arr
    if pa.types.is_struct(target):
        if not pa.types.is_struct(arr.type):
            raise CorruptLogError(f"expected a struct of {target}, found {arr.type}")
        s: Any = arr
        names = {arr.type.field(i).name for i in range(arr.type.num_fields)}
        children = [_normalise(s.field(f.name), f.type) if f.name in names
                    else pa.nulls(len(arr), f.type) for f in target]
        return pa.StructArray.from_arrays(children, fields=list(target),
                                          mask=arr.is_null() if arr.null_count else None)
    if pa.types.is_map(target):
        if not pa.types.is_map(arr.type):
            raise CorruptLogError(f"expected a map, found {arr.type}")
        m: Any = arr
        offsets, start, end = _rebased_offsets(m)
        from_arrays: Any = pa.MapArray.from_arrays
        return from_arrays(
            offsets, m.keys.slice(start, end - start).cast(pa.string()),
            m.items.slice(start, end - start).cast(pa.string()), type=target,
            mask=arr.is_null() if arr.null_count else None)
    if pa.types.is_list(target) and (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        lst: Any = arr
        offsets, start, end = _rebased_offsets(lst)
        return pa.ListArray.from_arrays(
            offsets.cast(pa.int32()), lst.values.slice(start, end - start).cast(pa.string()),
            type=target, mask=arr.is_null() if arr.null_count else None)
    return arr.cast(target)


def _rebased_offsets(arr: Any) -> tuple[Any, int, int]:
    """The offsets of a list or map array rebased to start at 0, and its range in the values.

    A row picked out of the middle of a checkpoint (Spark puts the protocol row anywhere) is a
    slice whose offsets do not start at 0, and Arrow refuses a null mask on such offsets.
    """
    offsets = arr.offsets
    if len(offsets) == 0:
        return pa.array([0], offsets.type), 0, 0
    start = offsets[0].as_py()
    end = offsets[len(offsets) - 1].as_py()
    rebased = pc.subtract(offsets, pa.scalar(start, offsets.type))
    return rebased, start, end


def _column(table: pa.Table, name: str) -> Any:
    if name not in table.column_names:
        return None
    col = table.column(name)
    return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)


def _picked(table: pa.Table, name: str, key: str) -> Any:
    """The non-null rows of action column ``name`` (rows whose ``key`` field is set), as the
    file has them; None if it has no such column."""
    arr = _column(table, name)
    if arr is None:
        return None
    if not pa.types.is_struct(arr.type):
        raise CorruptLogError(f"column {name!r} is {arr.type}, not a struct")
    s: Any = arr
    if key in {arr.type.field(i).name for i in range(arr.type.num_fields)}:
        mask = pc.and_(arr.is_valid(), s.field(key).is_valid())
    else:
        mask = pa.array([False] * len(arr))
    return _select(arr, mask)


def _rows(table: pa.Table, name: str, key: str, target: pa.DataType) -> Any:
    """The non-null rows of action column ``name`` (rows whose ``key`` field is set)."""
    picked = _picked(table, name, key)
    if picked is None:
        return pa.array([], target)
    return _normalise(picked, target)


def _add_rows(table: pa.Table, ntz: frozenset[tuple[str, ...]]) -> tuple[Any, Any]:
    """The ``add`` rows, and their ``stats_parsed`` (None if the file has none).

    Statistics held only as ``stats_parsed`` become the JSON ``stats`` text; ``ntz`` names
    the columns whose timestamps have no zone.
    """
    picked = _picked(table, "add", "path")
    if picked is None:
        return pa.array([], ADD), None
    parsed = None
    if "stats_parsed" in {picked.type.field(i).name for i in range(picked.type.num_fields)}:
        parsed = picked.field("stats_parsed")
        if not pa.types.is_struct(parsed.type) or parsed.null_count == len(parsed):
            parsed = None
    return _normalise(_stats_from_struct(picked, ntz), ADD), parsed


def _stats_from_struct(arr: Any, ntz: frozenset[tuple[str, ...]]) -> Any:
    """``add`` rows whose ``stats`` is filled from ``stats_parsed`` where only that is set
    (``delta.checkpoint.writeStatsAsJson=false``), so row counts survive the checkpoint."""
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    if "stats_parsed" not in names or not len(arr):
        return arr
    parsed = arr.field("stats_parsed")
    if parsed.null_count == len(parsed):
        return arr
    stats = arr.field("stats") if "stats" in names else pa.nulls(len(arr), pa.string())
    if not pc.any(pc.and_(stats.is_null(), parsed.is_valid())).as_py():
        return arr
    texts = pc.coalesce(stats.cast(pa.string()), stats_json_texts(parsed, ntz))
    children = [arr.field(n) for n in names if n != "stats"] + [texts]
    fields = [arr.type.field(n) for n in names if n != "stats"] + [pa.field("stats", pa.string())]
    return pa.StructArray.from_arrays(children, fields=fields,
                                      mask=arr.is_null() if arr.null_count else None)


def _ntz_of(metadata: Metadata) -> frozenset[tuple[str, ...]]:
    """The column paths of ``timestamp_ntz`` columns as statistics key them: by physical name
    in a column-mapping table, as its ``stats_parsed`` is."""
    from deltacommit.protocol.schema.column_mapping import mapping_mode, physical_schema

    try:
        schema = schema_from_json(metadata.schema_string)
        mode = mapping_mode(metadata.configuration)
        return ntz_paths(schema if mode == "none" else physical_schema(schema, mode))
    except DeltaCommitError:
        return frozenset()  # a schema this library cannot type: timestamps read as zoned


def _select(arr: Any, mask: Any) -> Any:
    """``arr.filter(mask)``, but a zero-copy slice when the selected rows are contiguous (as a
    checkpoint written in sections has them): filtering would copy every ``stats`` string."""
    idx: Any = pc.indices_nonzero(mask)
    n = len(idx)
    if n == 0:
        return arr.slice(0, 0)
    first = idx[0].as_py()
    if idx[n - 1].as_py() - first + 1 == n:
        return arr.slice(first, n)
    return arr.filter(mask)


def _pairs(v: Any) -> dict[str, str | None]:
    if v is None:
        return {}
    if isinstance(v, dict):
        return v
    return dict(v)


def _concat(arrays: list[Any], target: pa.DataType) -> Any:
    arrays = [a for a in arrays if len(a)] or arrays[:1]
    if not arrays:
        return pa.array([], target)
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def _concat_rows(tables: Sequence[pa.Table], name: str, key: str, target: pa.DataType) -> Any:
    """``_rows`` of several files (checkpoint parts, sidecars), each normalised on its own
    because their schemas may differ."""
    return _concat([_rows(t, name, key, target) for t in tables], target)


def _concat_add_rows(tables: Sequence[pa.Table], ntz: frozenset[tuple[str, ...]]
                     ) -> tuple[Any, Any]:
    """``_add_rows`` of several files (one may have ``stats``, another ``stats_parsed``); their
    ``stats_parsed`` too when every file that has some has the same type."""
    pairs = [_add_rows(t, ntz) for t in tables]
    return _concat([r for r, _ in pairs], ADD), _joined_parsed(pairs)


def _with_texts(light: Any, tables: Sequence[pa.Table]) -> Any:
    """``ADD_LIGHT`` rows made whole with the JSON statistics of the same rows (``tables``:
    ``add.path`` and ``add.stats`` of the files they were read from, in order); None if the
    files no longer have one text per row."""
    texts = _concat_rows(tables, "add", "path", _PATH_AND_STATS)
    if len(texts) != len(light) or not pc.all(pc.equal(texts.field("path"),
                                                        light.field("path"))).as_py():
        return None
    children = [texts.field("stats") if f.name == "stats" else light.field(f.name) for f in ADD]
    return pa.StructArray.from_arrays(children, fields=list(ADD),
                                      mask=light.is_null() if light.null_count else None)


def _joined_parsed(pairs: Sequence[tuple[Any, Any]]) -> Any:
    """The ``stats_parsed`` of chunks of rows as one array, null for the rows of a chunk
    without any; None unless every chunk that has some has the same type."""
    types = {p.type for _, p in pairs if p is not None}
    if len(types) != 1:
        return None
    [type_] = types
    return _concat([p if p is not None else pa.nulls(len(r), type_) for r, p in pairs], type_)


def _deferred_stats_parsed(tables: Sequence[pa.Table] | None) -> Any:
    """The ``stats_parsed`` of the ``add`` rows from ``tables`` (the files the rows were read
    from, read again for ``add.stats_parsed``: one value per ``add`` row, in file order); None
    unless each file has a struct of one type (``ActionRows`` checks it has one per row)."""
    if tables is None:
        return None
    parsed: list[Any] = []
    for t in tables:
        arr = _column(t, "add")
        if arr is None or not pa.types.is_struct(arr.type):
            continue
        names = {arr.type.field(i).name for i in range(arr.type.num_fields)}
        if "stats_parsed" not in names:
            return None
        parsed.append(_select(arr, arr.is_valid()).field("stats_parsed"))
    if not parsed or len({a.type for a in parsed}) != 1 or not pa.types.is_struct(parsed[0].type):
        return None
    out = parsed[0] if len(parsed) == 1 else pa.concat_arrays(parsed)
    return None if out.null_count == len(out) else out


def decode_checkpoint(table: pa.Table, version: int, source: str,
                      read_column: Callable[[str], Sequence[pa.Table]] | None = None, *,
                      read_stats_parsed: Callable[[], Sequence[pa.Table] | None] | None = None,
                      read_light: Callable[[], Sequence[pa.Table]] | None = None,
                      read_texts: Callable[[], Sequence[pa.Table]] | None = None
                      ) -> TableState:
    """The table state a checkpoint holds; CorruptLogError if it lacks what every one must have.

    The file lists stay in Arrow (see ``lazy_files``); only the handful of non-file actions are
    turned into objects here.  With ``read_column``, ``table`` need not hold the ``add`` and
    ``remove`` columns: they are read through it when first needed, one table per file that
    holds them (parts of the checkpoint and its sidecars).  With ``read_stats_parsed`` too, the
    ``add`` column is read without ``stats_parsed`` (every row has its JSON text), which is
    read through it (``add.stats_parsed`` of the same files, or None if they cannot be read or
    have changed) only when the typed statistics are asked for; ``add`` rows read whole
    still carry ``stats_parsed`` where no row has a JSON text (it is their statistics).  With
    ``read_light`` as well (the ``add`` column of the same files without ``stats`` and
    ``stats_parsed``), a reader of the typed statistics alone never reads or builds the texts
    (``ActionRows.light``); ``read_texts`` (``add.path`` with ``add.stats``) completes such
    rows later, or without it they are read again whole.
    """
    protocols: list[dict[str, Any]] = _rows(table, "protocol", "minReaderVersion", PROTOCOL).to_pylist()
    metadatas: list[dict[str, Any]] = _rows(table, "metaData", "id", METADATA).to_pylist()
    if len(protocols) != 1:
        raise CorruptLogError(f"{source}: a checkpoint must hold exactly one protocol action, "
                              f"found {len(protocols)}")
    if len(metadatas) != 1:
        raise CorruptLogError(f"{source}: a checkpoint must hold exactly one metaData action, "
                              f"found {len(metadatas)}")
    p = protocols[0]
    m = metadatas[0]
    try:
        protocol = Protocol.from_json({k: v for k, v in p.items() if v is not None})
        fmt = m.get("format") or {}
        metadata = Metadata.from_json({
            **{k: v for k, v in m.items() if v is not None},
            "format": {"provider": fmt.get("provider") or "parquet",
                       "options": _pairs(fmt.get("options"))},
            "configuration": _pairs(m.get("configuration")),
        })
        txns = [Txn.from_json({k: v for k, v in t.items() if v is not None})
                for t in _rows(table, "txn", "appId", TXN).to_pylist()]
    except (ValueError, TypeError) as e:
        raise CorruptLogError(f"{source}: {e}") from None
    domains: dict[str, dict[str, object]] = {}
    for d in _rows(table, "domainMetadata", "domain", DOMAIN_METADATA).to_pylist():
        if not d.get("removed"):
            domains[str(d["domain"])] = {"domain": d["domain"], "configuration": d["configuration"],
                                         "removed": False}
    ntz = _ntz_of(metadata)
    if read_column is None:
        rows, parsed = _add_rows(table, ntz)
        files = ActionRows(rows, adds_from_arrow, stats_parsed=parsed)
        tombstones = ActionRows(_rows(table, "remove", "path", REMOVE), removes_from_arrow)
    else:
        reader = read_column
        deferred = read_stats_parsed
        light = read_light if deferred is not None else None
        texts = read_texts
        files = ActionRows(None, adds_from_arrow, lambda: _concat_add_rows(reader("add"), ntz),
                           load_stats_parsed=None if deferred is None
                           else lambda: _deferred_stats_parsed(deferred()),
                           load_light=None if light is None
                           else lambda: _concat_rows(light(), "add", "path", ADD_LIGHT),
                           complete=None if texts is None
                           else lambda rows: _with_texts(rows, texts()))
        tombstones = ActionRows(None, removes_from_arrow,
                                lambda: _concat_rows(reader("remove"), "remove", "path", REMOVE))
    return TableState(
        version=version,
        protocol=protocol,
        metadata=metadata,
        files=LazyActionMap(files),
        tombstones=LazyActionMap(tombstones),
        app_txns={t.app_id: t for t in txns},
        domains=domains,
    )


# --------------------------------------------------------------------------- V2 checkpoints


def v2_sidecars(table: pa.Table, version: int, source: str, uuid_named: bool
                ) -> list[SidecarRef]:
    """The sidecars a checkpoint's rows reference, after checking its ``checkpointMetadata``.

    A UUID-named checkpoint follows the V2 spec and must hold exactly one
    ``checkpointMetadata`` action; a classic one may (V2 spec) or may not (V1 spec).  Either
    must describe the version its file name says, or it is another version's state.
    """
    metas = _rows(table, "checkpointMetadata", "version", CHECKPOINT_METADATA).to_pylist()
    if len(metas) > 1 or (uuid_named and not metas):
        raise CorruptLogError(f"{source}: a V2 checkpoint must hold exactly one "
                              f"checkpointMetadata action, found {len(metas)}")
    if metas and metas[0]["version"] != version:
        raise CorruptLogError(f"{source}: checkpointMetadata says version {metas[0]['version']}, "
                              f"the file name {version}")
    out: list[SidecarRef] = []
    for row in _rows(table, "sidecar", "path", SIDECAR).to_pylist():
        if row.get("sizeInBytes") is None or row.get("modificationTime") is None:
            raise CorruptLogError(f"{source}: sidecar action {row!r} lacks sizeInBytes or "
                                  "modificationTime")
        out.append(SidecarRef(row["path"], row["sizeInBytes"], row["modificationTime"]))
    return out


def sidecar_references(table: pa.Table) -> list[str]:
    """The ``path`` of every ``sidecar`` action in a checkpoint's rows, unchecked: log cleanup
    protects what any checkpoint names, even one a reader would reject."""
    return [str(p) for p in _rows(table, "sidecar", "path", SIDECAR).field("path").to_pylist()]


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


__all__ = [
    "ADD",
    "CHECKPOINT_SCHEMA",
    "METADATA",
    "PROTOCOL",
    "REMOVE",
    "TXN",
    "V2_CHECKPOINT_SCHEMA",
    "CheckpointOptions",
    "EncodedCheckpoint",
    "decode_checkpoint",
    "encode_checkpoint",
    "json_checkpoint_table",
    "map_dicts",
    "sidecar_references",
    "split_file_actions",
    "v2_sidecars",
    "with_sidecars",
]
