"""Checkpoint rows as a table state: the non-file actions as objects, the file lists kept in
Arrow and read on demand (``files.lazy_files``).  Pure.

Reading is lenient about the schema (Spark names map entries differently, makes everything
nullable and adds ``stats_parsed``): columns are matched by name and normalised to the canonical
types, a missing column reads as null, as the protocol says, and rows may come in any order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import CorruptLogError, DeltaCommitError
from deltacommit.protocol.actions import Metadata, Protocol, Txn
from deltacommit.protocol.checkpoint.schema import (
    ADD,
    ADD_LIGHT,
    DOMAIN_METADATA,
    METADATA,
    PATH_AND_STATS,
    PROTOCOL,
    REMOVE,
    TXN,
)
from deltacommit.protocol.files.action_rows import ActionRows
from deltacommit.protocol.files.from_arrow import adds_from_arrow, removes_from_arrow
from deltacommit.protocol.files.lazy_files import LazyActionMap
from deltacommit.protocol.replay import TableState
from deltacommit.protocol.schema.arrow import schema_from_json
from deltacommit.protocol.schema.column_mapping import mapping_mode, physical_schema
from deltacommit.protocol.stats.parsed import ntz_paths, stats_json_texts

__all__ = ["column_rows", "decode_checkpoint", "joined_parsed", "joined_rows"]


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


def column_rows(table: pa.Table, name: str, key: str, target: pa.DataType) -> Any:
    """The non-null rows of action column ``name`` (rows whose ``key`` field is set)."""
    picked = _picked(table, name, key)
    if picked is None:
        # Not pa.array([]): building from a Python list makes pyarrow import pandas (0.2 s
        # once per process).  pyarrow's stubs type ``nulls`` per type class, hence the Any.
        any_type: Any = target
        return pa.nulls(0, any_type)
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


def joined_rows(arrays: list[Any], target: pa.DataType) -> Any:
    arrays = [a for a in arrays if len(a)] or arrays[:1]
    if not arrays:
        return pa.array([], target)
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def _concat_rows(tables: Sequence[pa.Table], name: str, key: str, target: pa.DataType) -> Any:
    """``column_rows`` of several files (checkpoint parts, sidecars), each normalised on its own
    because their schemas may differ."""
    return joined_rows([column_rows(t, name, key, target) for t in tables], target)


def _concat_add_rows(tables: Sequence[pa.Table], ntz: frozenset[tuple[str, ...]]
                     ) -> tuple[Any, Any]:
    """``_add_rows`` of several files (one may have ``stats``, another ``stats_parsed``); their
    ``stats_parsed`` too when every file that has some has the same type."""
    pairs = [_add_rows(t, ntz) for t in tables]
    return joined_rows([r for r, _ in pairs], ADD), joined_parsed(pairs)


def _with_texts(light: Any, tables: Sequence[pa.Table]) -> Any:
    """``ADD_LIGHT`` rows made whole with the JSON statistics of the same rows (``tables``:
    ``add.path`` and ``add.stats`` of the files they were read from, in order); None if the
    files no longer have one text per row."""
    texts = _concat_rows(tables, "add", "path", PATH_AND_STATS)
    if len(texts) != len(light) or not pc.all(pc.equal(texts.field("path"),
                                                        light.field("path"))).as_py():
        return None
    children = [texts.field("stats") if f.name == "stats" else light.field(f.name) for f in ADD]
    return pa.StructArray.from_arrays(children, fields=list(ADD),
                                      mask=light.is_null() if light.null_count else None)


def joined_parsed(pairs: Sequence[tuple[Any, Any]]) -> Any:
    """The ``stats_parsed`` of chunks of rows as one array, null for the rows of a chunk
    without any; None unless every chunk that has some has the same type."""
    types = {p.type for _, p in pairs if p is not None}
    if len(types) != 1:
        return None
    [type_] = types
    return joined_rows([p if p is not None else pa.nulls(len(r), type_) for r, p in pairs], type_)


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
    protocols: list[dict[str, Any]] = column_rows(table, "protocol", "minReaderVersion", PROTOCOL).to_pylist()
    metadatas: list[dict[str, Any]] = column_rows(table, "metaData", "id", METADATA).to_pylist()
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
                for t in column_rows(table, "txn", "appId", TXN).to_pylist()]
    except (ValueError, TypeError) as e:
        raise CorruptLogError(f"{source}: {e}") from None
    domains: dict[str, dict[str, object]] = {}
    for d in column_rows(table, "domainMetadata", "domain", DOMAIN_METADATA).to_pylist():
        if not d.get("removed"):
            domains[str(d["domain"])] = {"domain": d["domain"], "configuration": d["configuration"],
                                         "removed": False}
    ntz = _ntz_of(metadata)
    if read_column is None:
        rows, parsed = _add_rows(table, ntz)
        files = ActionRows(rows, adds_from_arrow, stats_parsed=parsed)
        tombstones = ActionRows(column_rows(table, "remove", "path", REMOVE), removes_from_arrow)
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
