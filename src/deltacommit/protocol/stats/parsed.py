"""Checkpoint statistics as typed structs (``add.stats_parsed``, ``add.partitionValues_parsed``).  Pure.

With ``delta.checkpoint.writeStatsAsStruct`` (true unless set) a checkpoint carries each file's
statistics as a struct typed by the table schema, and with ``delta.checkpoint.writeStatsAsJson=
false`` it carries nothing else: a reader that only knows the JSON ``stats`` string would lose
every file's row count.  So reading turns a struct back into the JSON text the rest of the
library (and every later checkpoint) uses, and writing builds the struct from that text: here
a row at a time (the reference, and the fallback for texts Arrow's JSON reader refuses),
column-wise in ``stats_json_texts`` (struct to text), ``stats_arrays`` and
``partition_struct_column``.  Both directions follow
the JSON layout of ``stats``: ``numRecords``, ``minValues``/``maxValues`` (only for types with
bounds: numbers, decimals, strings, dates, timestamps, and structs of them), ``nullCount``
(every column) and ``tightBounds``.

A value that does not fit its type is left null: a missing bound only costs skipping, a wrong
one would lose rows.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.arrow_values import int64_array, string_scalar
from deltacommit.protocol.json_values import loads
from deltacommit.protocol.partitions import parse_partition_value, parse_timestamp_us

logger = logging.getLogger(__name__)

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

Path = tuple[str, ...]


# --------------------------------------------------------------------------- types


def _has_bounds(t: pa.DataType) -> bool:
    types = pa.types
    return bool(types.is_integer(t) or types.is_floating(t) or types.is_decimal(t)
                or types.is_string(t) or types.is_large_string(t) or types.is_date(t)
                or types.is_timestamp(t))


def _bounds_type(fields: Sequence[pa.Field[Any]]) -> pa.StructType | None:
    out: list[pa.Field[Any]] = []
    for f in fields:
        if pa.types.is_struct(f.type):
            inner = _bounds_type(list(f.type))
            if inner is not None:
                out.append(pa.field(f.name, inner))
        elif _has_bounds(f.type):
            out.append(pa.field(f.name, f.type))
    return pa.struct(out) if out else None


def _null_count_type(fields: Sequence[pa.Field[Any]]) -> pa.StructType:
    return pa.struct([pa.field(f.name, _null_count_type(list(f.type)) if pa.types.is_struct(f.type)
                               else pa.int64()) for f in fields])


def stats_struct_type(schema: pa.Schema, partition_columns: Sequence[str]) -> pa.StructType:
    """The type of ``stats_parsed`` for a table: its data columns (partition columns have no
    statistics), typed as the schema says."""
    fields = [f for f in schema if f.name not in set(partition_columns)]
    out: list[pa.Field[Any]] = [pa.field("numRecords", pa.int64())]
    bounds = _bounds_type(fields)
    if bounds is not None:
        out += [pa.field("minValues", bounds), pa.field("maxValues", bounds)]
    if fields:
        out.append(pa.field("nullCount", _null_count_type(fields)))
    out.append(pa.field("tightBounds", pa.bool_()))
    return pa.struct(out)


def partition_struct_type(schema: pa.Schema, partition_columns: Sequence[str]) -> pa.StructType:
    """The type of ``partitionValues_parsed``: the partition columns with their schema types."""
    return pa.struct([pa.field(c, schema.field(c).type) for c in partition_columns])


def ntz_paths(schema: pa.Schema | None) -> frozenset[Path]:
    """Column paths whose timestamps carry no zone, so their JSON bounds are written without
    ``Z`` (as Spark writes ``timestamp_ntz`` statistics)."""
    out: set[Path] = set()

    def walk(fields: Sequence[pa.Field[Any]], prefix: Path) -> None:
        for f in fields:
            if pa.types.is_struct(f.type):
                walk(list(f.type), (*prefix, f.name))
            elif pa.types.is_timestamp(f.type) and f.type.tz is None:
                out.add((*prefix, f.name))

    if schema is not None:
        walk(list(schema), ())
    return frozenset(out)


# --------------------------------------------------------------------------- struct -> JSON


def _ms_text(t: dt.datetime, zulu: bool) -> str:
    return (f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
            f".{t.microsecond // 1000:03d}" + ("Z" if zulu else ""))


def _json_value(v: Any, path: Path, upper: bool, ntz: frozenset[Path]) -> Any:
    """A bound as the JSON stats hold it, or None when JSON cannot carry it."""
    if isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, Decimal):
        return v if v.is_finite() else None
    if isinstance(v, dt.datetime):
        zulu = path not in ntz
        if v.tzinfo is not None:
            v = v.astimezone(dt.UTC).replace(tzinfo=None)
        if upper and v.microsecond % 1000:
            try:
                v += dt.timedelta(microseconds=1000 - v.microsecond % 1000)
            except OverflowError:
                return None
        return _ms_text(v, zulu)
    if isinstance(v, dt.date):
        return v.isoformat()
    return None


def _json_object(d: Mapping[str, Any], path: Path, upper: bool, ntz: frozenset[Path]
                 ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if v is None:
            continue
        if isinstance(v, dict):
            out[k] = _json_object(v, (*path, k), upper, ntz)
        else:
            j = _json_value(v, (*path, k), upper, ntz)
            if j is not None:
                out[k] = j
    return out


def _dumps(x: Any) -> str:
    """Compact JSON; decimals keep their exact digits (a float would round them)."""
    if isinstance(x, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + _dumps(v)
                              for k, v in x.items()) + "}"
    if isinstance(x, Decimal):
        return format(x, "f")
    return json.dumps(x, ensure_ascii=False)


def stats_json_from_struct(row: Mapping[str, Any] | None, ntz: frozenset[Path] = frozenset()
                           ) -> str | None:
    """The JSON ``stats`` text of one ``stats_parsed`` value (a dict as Arrow gives it)."""
    if row is None:
        return None
    out: dict[str, Any] = {}
    n = row.get("numRecords")
    if n is not None:
        out["numRecords"] = n
    for key, upper in (("minValues", False), ("maxValues", True)):
        v = row.get(key)
        if isinstance(v, dict):
            out[key] = _json_object(v, (), upper, ntz)
    nc = row.get("nullCount")
    if isinstance(nc, dict):
        out["nullCount"] = _json_object(nc, (), False, ntz)
    tb = row.get("tightBounds")
    if tb is not None:
        out["tightBounds"] = tb
    return _dumps(out) if out else None


#: Arrow's per-row string join (its stubs type a mix of arrays and separators poorly).
_join_each: Any = pc.binary_join_element_wise


def stats_json_texts(parsed: Any, ntz: frozenset[Path] = frozenset()) -> Any:
    """``stats_json_from_struct`` of every row of a ``stats_parsed`` array, as a string array,
    column by column.

    A checkpoint written with ``delta.checkpoint.writeStatsAsJson=false`` holds every file's
    statistics only so; turning 100,000 of them into texts a row at a time (a dict per row, a
    call per value) took seconds.  Here each column's values become JSON fragments at once
    (numbers and plain strings by Arrow, timestamps by NumPy) and Arrow joins each row's
    fragments; only values without such a form (floats, decimals, dates, strings that need
    escapes) go through Python, one by one, as the reference does, so the texts are the same.
    """
    n = len(parsed)
    if not n:
        return pa.array([], pa.string())
    t = parsed.type
    names = [t.field(i).name for i in range(t.num_fields)]
    sections: list[Any] = []
    if "numRecords" in names:
        sections.append(_keyed("numRecords", _leaf_texts(parsed.field("numRecords"),
                                                         ("numRecords",), False, ntz, top=True)))
    for key, upper in (("minValues", False), ("maxValues", True), ("nullCount", False)):
        if key in names and pa.types.is_struct(t.field(key).type):
            sections.append(_keyed(key, _object_texts(parsed.field(key), (), upper, ntz)))
    if "tightBounds" in names:
        sections.append(_keyed("tightBounds", _leaf_texts(parsed.field("tightBounds"),
                                                          ("tightBounds",), False, ntz,
                                                          top=True)))
    joined = _joined(sections, n)
    # A row with no section at all has no statistics (None), as in the reference.
    empty = pc.equal(pc.binary_length(joined), pa.scalar(0, pa.int32()))
    text = _join_each("{", joined, "}", "")
    return pc.if_else(pc.or_(empty, parsed.is_null()), pa.scalar(None, pa.string()), text)


def _joined(parts: list[Any], n: int) -> Any:
    """Each row's non-null ``parts`` joined by commas ("" where none is set).

    ``binary_join_element_wise`` skipping nulls drops the rows where every part is null
    (pyarrow 26), so each row starts with an empty part, whose comma is cut off after."""
    lead = pa.array([""] * n, pa.string())
    if not parts:
        return lead
    joined = _join_each(lead, *parts, ",", null_handling="skip")
    return pc.utf8_slice_codeunits(joined, 1)


def _keyed(key: str, texts: Any) -> Any:
    """``"key":text`` for each text (null where the text is null)."""
    return _join_each(json.dumps(key, ensure_ascii=False) + ":", texts, "")


def _object_texts(arr: Any, path: Path, upper: bool, ntz: frozenset[Path]) -> Any:
    """``_dumps(_json_object(row))`` of each row of a struct array; null for a null row."""
    t = arr.type
    children: list[Any] = []
    for i in range(t.num_fields):
        f = t.field(i)
        child = arr.field(i)
        if pa.types.is_struct(f.type):
            texts = _object_texts(child, (*path, f.name), upper, ntz)
        else:
            texts = _leaf_texts(child, (*path, f.name), upper, ntz)
        children.append(_keyed(f.name, texts))
    text = _join_each("{", _joined(children, len(arr)), "}", "")
    return pc.if_else(arr.is_null(), pa.scalar(None, pa.string()), text)


#: Characters JSON strings must escape (``json.dumps`` with ``ensure_ascii=False``).
_NEEDS_ESCAPE = r'["\\\x00-\x1f]'


def _leaf_texts(arr: Any, path: Path, upper: bool, ntz: frozenset[Path], *,
                top: bool = False) -> Any:
    """The JSON text of each value of a leaf column (null where the row has none).

    ``top``: a top-level value (``numRecords``, ``tightBounds``), which the JSON holds as it is;
    bounds and counts inside the objects go through ``_json_value``."""
    t = arr.type
    if pa.types.is_integer(t):
        return pc.cast(arr, pa.string())
    if pa.types.is_boolean(t):
        return pc.if_else(arr, pa.scalar("true"), pa.scalar("false"))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        arr = arr.cast(pa.string())
        if not len(arr) or not pc.any(pc.match_substring_regex(arr, _NEEDS_ESCAPE)).as_py():
            return _join_each('"', arr, '"', "")
        dumps = json.dumps
        return pa.array([None if v is None else dumps(v, ensure_ascii=False)
                         for v in arr.to_pylist()], pa.string())
    if not top and pa.types.is_timestamp(t) and t.unit in _PER_MS:
        made = _timestamp_texts(arr, _PER_MS[t.unit], upper, path not in ntz)
        if made is not None:
            return made
    values = arr.to_pylist()
    if top:
        return pa.array([None if v is None else _dumps(v) for v in values], pa.string())
    if pa.types.is_floating(t):
        isfinite = math.isfinite
        return pa.array([None if v is None or not isfinite(v) else repr(v) for v in values],
                        pa.string())
    out: list[str | None] = []
    for v in values:
        j = None if v is None else _json_value(v, path, upper, ntz)
        out.append(None if j is None else _dumps(j))
    return pa.array(out, pa.string())


#: Timestamp units whose values are whole microseconds or coarser, by units per millisecond.
_PER_MS = {"ms": 1, "us": 1000}
#: Milliseconds since the epoch of 0001-01-01T00:00:00.000 and of 9999-12-31T23:59:59.999:
#: the instants a Python ``datetime`` (the row-at-a-time reference) can hold.
_FIRST_MS, _LAST_MS = -62_135_596_800_000, 253_402_300_799_999


def _timestamp_texts(arr: Any, per_ms: int, upper: bool, zulu: bool) -> Any:
    """``_json_value`` of each timestamp of ``arr``, formatted by NumPy; None (so the caller
    goes value by value) if one lies outside what a Python ``datetime`` holds.  A lower
    bound is cut to the millisecond, an upper one rounded up (as ``_json_value`` does)."""
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    raw = pc.fill_null(arr.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
    ms = np.floor_divide(raw, per_ms)
    if upper and per_ms > 1:
        ms = ms + (np.mod(raw, per_ms) != 0)
    kept = ms[valid]
    if len(kept) and (kept.min() < _FIRST_MS or kept.max() > _LAST_MS):
        return None
    texts = np.datetime_as_string(ms.astype("datetime64[ms]"), unit="ms")
    quoted = _join_each('"', pa.array(texts, pa.string()), 'Z"' if zulu else '"', "")
    return pc.if_else(pa.array(valid), quoted, pa.scalar(None, pa.string()))


# --------------------------------------------------------------------------- JSON -> struct


def _typed(v: Any, t: pa.DataType, upper: bool) -> Any:
    """``v`` (a JSON value) as a Python value of Arrow type ``t``, or None if it does not fit."""
    try:
        if pa.types.is_struct(t):
            if not isinstance(v, dict):
                return None
            return {f.name: _typed(v.get(f.name), f.type, upper) for f in t}
        if v is None or isinstance(v, dict | list):
            return None
        if pa.types.is_integer(t):
            if isinstance(v, bool) or not isinstance(v, int):
                return None
            bits = t.bit_width
            lo, hi = ((0, 2 ** bits) if pa.types.is_unsigned_integer(t)
                      else (-(2 ** (bits - 1)), 2 ** (bits - 1)))
            return v if lo <= v < hi else None
        if pa.types.is_floating(t):
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
        if pa.types.is_decimal(t):
            if isinstance(v, bool) or not isinstance(v, int | float | str):
                return None
            d = Decimal(str(v))
            q = d.quantize(Decimal(1).scaleb(-t.scale))
            if q != d or len(q.as_tuple().digits) > t.precision:
                return None
            return q
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return v if isinstance(v, str) else None
        if pa.types.is_date(t):
            return dt.date.fromisoformat(v[:10]) if isinstance(v, str) else None
        if pa.types.is_timestamp(t):
            if not isinstance(v, str):
                return None
            us, _ = parse_timestamp_us(v, what="statistic")
            base = _EPOCH_UTC if t.tz is not None else _EPOCH
            return base + dt.timedelta(microseconds=us)
        if pa.types.is_boolean(t):
            return v if isinstance(v, bool) else None
    except (ValueError, InvalidOperation, OverflowError, InvalidArgumentError):
        return None
    return None


def stats_struct_array(stats: Sequence[str | None], type_: pa.StructType) -> pa.Array[Any]:
    """``stats_parsed`` for each JSON ``stats`` text (null where there are no statistics)."""
    rows: list[dict[str, Any] | None] = []
    unreadable = 0
    for text in stats:
        try:
            obj = loads(text) if text else None
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            unreadable += bool(text)
            rows.append(None)
            continue
        rows.append({f.name: _typed(obj.get(f.name), f.type, f.name == "maxValues")
                     for f in type_})
    if unreadable:
        # Statistics are optional: a file whose text is not a JSON object (malformed, nested
        # too deeply to decode) is read, listed and checkpointed without them.
        logger.warning("%d of %d files' statistics are not readable JSON objects; they are "
                       "treated as absent (no file skipping on them)", unreadable, len(stats))
    out: pa.Array[Any] = _nulls_below(pa.array(rows, type_))
    return out


def _nulls_below(arr: Any) -> Any:
    """``arr`` with each null struct row null in every field below it too.  ``pa.array``
    leaves the fields of a null row valid, holding zeros, and ``StructArray.field`` reads them
    as they are: a file without statistics would have numRecords 0 and bounds [0, 0], and file
    skipping would rule it out of any predicate that 0 fails."""
    if not pa.types.is_struct(arr.type):
        return arr
    children = [_nulls_below(c) for c in arr.flatten()]
    mask = arr.is_null() if arr.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(arr.type), mask=mask)


# --------------------------------------------------------------------------- partition values


def _same_keys(values: Any, keys: Sequence[str]) -> list[Any] | None:
    """``partition_strings`` when every row's map holds exactly ``keys`` in the same order (as
    every writer writes them): each key's values are every ``len(keys)``-th entry."""
    n, width = len(values), len(keys)
    if values.null_count or width == 0:
        return None
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[
        values.offset:values.offset + n + 1]
    first = int(offsets[0])
    if int(offsets[-1]) - first != n * width or not (np.diff(offsets) == width).all():
        return None
    flat_keys = values.keys.slice(first, n * width)
    items = values.items.slice(first, n * width)
    out = []
    for j, key in enumerate(keys):
        at = int64_array(np.arange(j, n * width, width, dtype=np.int64))
        if not pc.all(pc.equal(flat_keys.take(at), string_scalar(key))).as_py():
            return None
        out.append(items.take(at).cast(pa.string()))
    return out


def partition_strings(values: Any, keys: Sequence[str], occurrence: str = "first"
                      ) -> list[Any]:
    """The ``partitionValues`` entry of each key, one string array per key (null where absent;
    of a key given twice, the ``occurrence``: ``"first"`` or ``"last"``)."""
    if not len(values):
        return [pa.array([], pa.string()) for _ in keys]
    same = _same_keys(values, keys)
    if same is not None:
        return same
    return [pc.map_lookup(values, string_scalar(k), occurrence).cast(pa.string())
            for k in keys]


def _partition_value(text: str | None, t: pa.DataType) -> Any:
    """A partition value as type ``t``; None if it does not parse or fit (a decimal with more
    places or digits than its type)."""
    try:
        value = parse_partition_value(text, t)
        if value is not None:
            pa.scalar(value, t)
    except (InvalidArgumentError, pa.ArrowException, OverflowError, TypeError, ValueError):
        return None
    return value


def _typed_values(strings: Any, t: pa.DataType) -> Any:
    """Partition value texts as type ``t``, each distinct text parsed once."""
    encoded: Any = pc.dictionary_encode(strings)
    parsed = [_partition_value(text, t) for text in encoded.dictionary.to_pylist()]
    return pa.array(parsed, t).take(encoded.indices)


def partition_struct_column(values: Any, type_: pa.StructType) -> Any:
    """``partition_struct_array`` of a ``partitionValues`` map array, column-wise: no Python
    object per file, so a checkpoint of a million files gets it in moments."""
    if not len(values):
        return pa.array([], type_)
    keys = [f.name for f in type_]
    children = [_typed_values(s, f.type)
                for s, f in zip(partition_strings(values, keys, "last"), type_, strict=True)]
    return pa.StructArray.from_arrays(children, fields=list(type_),
                                      mask=values.is_null() if values.null_count else None)


def partition_struct_array(values: Sequence[Mapping[str, str | None] | None],
                           type_: pa.StructType) -> pa.Array[Any]:
    """``partitionValues_parsed`` for each file's ``partitionValues``."""
    rows: list[dict[str, Any] | None] = []
    for pv in values:
        if pv is None:
            rows.append(None)
            continue
        rows.append({f.name: _partition_value(pv.get(f.name), f.type) for f in type_})
    return pa.array(rows, type_)


__all__ = [
    "ntz_paths",
    "partition_strings",
    "partition_struct_array",
    "partition_struct_column",
    "partition_struct_type",
    "stats_json_from_struct",
    "stats_json_texts",
    "stats_struct_array",
    "stats_struct_type",
]
