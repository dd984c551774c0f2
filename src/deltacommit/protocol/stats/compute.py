"""Per-file Delta statistics (``add.stats``), computed as Spark computes them.  Pure: no I/O.

Readers skip whole files with these numbers, so a wrong bound loses rows silently.  The rules
follow Spark's ``StatisticsCollection`` because Spark is the reader most tables have:

* ``numRecords``, then ``minValues``, ``maxValues`` and ``nullCount`` as objects mirroring the
  schema (structs nest).  Only the first ``num_indexed_cols`` leaf columns are indexed (leaves of
  structs counted in order, as ``delta.dataSkippingNumIndexedCols``; negative means all).
* min/max only for numbers, decimals, strings, dates and timestamps (Spark's
  ``SkippingEligibleDataType``): not for booleans, binary, arrays or maps.  nullCount for every
  indexed leaf, arrays and maps included.  A struct whose indexed leaves allow min/max appears in
  minValues/maxValues even when all its values are null (as ``{}``), as Spark writes it.
* Strings: the min is cut to ``string_prefix_length`` characters; the max is cut the same way and
  then, so that it stays >= every value, extended past characters >= U+FFFD and ended with the
  tie-breaker U+FFFD (``truncateMaxStringAgg``).  Characters are Unicode code points, so the bound
  also holds for characters outside the Basic Multilingual Plane, which Spark, counting UTF-16
  units, can get wrong.
* Timestamps are written with millisecond precision, ``2026-11-22T10:00:00.123Z`` (no ``Z`` for
  timestamp_ntz, as Spark's JSON writer does).  The min is truncated down; the max is rounded
  *up* to the next millisecond when it has a sub-millisecond part.  Spark truncates both and
  makes its own reader add 1 ms; rounding up keeps the bound correct for readers that do not
  (Iceberg conversion, older kernels) and is merely 1 ms looser for those that do.
* Floats: NaN is ignored (a column of only NaN has no bounds) and an infinite bound is left out,
  as delta-rs does, since JSON cannot carry either.  float32 bounds are written in the shortest
  form that reads back as the same float32 (``0.1``, not ``0.10000000149011612``).
* A column whose values are all null has ``nullCount == numRecords`` and no bounds.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, TypeAlias, cast

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.json_values import float32_text, json_float_text, loads

logger = logging.getLogger(__name__)

TIE_BREAKER = "\ufffd"
DEFAULT_NUM_INDEXED_COLS = 32
DEFAULT_STRING_PREFIX_LENGTH = 32

# A JSON object under construction: keys to already-encoded JSON fragments or nested objects.
_Obj: TypeAlias = dict[str, "str | _Obj"]

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DATE = dt.date(1970, 1, 1)
_TO_MS = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}


def truncate_min_string(value: str, prefix_length: int) -> str:
    """A lower bound of ``value`` at most ``prefix_length`` characters long."""
    return value[:prefix_length]


def truncate_max_string(value: str, prefix_length: int) -> str:
    """An upper bound of ``value``: its prefix, extended past characters >= U+FFFD, then U+FFFD."""
    if len(value) <= prefix_length:
        return value
    end = prefix_length
    while end < len(value) and value[end] >= TIE_BREAKER:
        end += 1
    return value[:end] + TIE_BREAKER


def _ms_text(ms: int, zulu: bool) -> str | None:
    secs, millis = divmod(ms, 1000)
    try:
        t = _EPOCH + dt.timedelta(seconds=secs)
    except OverflowError:
        return None
    return (f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
            f".{millis:03d}" + ("Z" if zulu else ""))


def _timestamp_bounds(t: pa.TimestampType, lo: int, hi: int) -> tuple[str | None, str | None]:
    mul, div = _TO_MS[t.unit]
    lo_ms = lo * mul // div
    hi_ms = -((-hi * mul) // div)  # ceiling: the max must stay >= every value
    zulu = t.tz is not None
    return _ms_text(lo_ms, zulu), _ms_text(hi_ms, zulu)


def _date_text(days: int) -> str | None:
    try:
        return (_EPOCH_DATE + dt.timedelta(days=days)).isoformat()
    except OverflowError:
        return None


def _bounds(t: pa.DataType, col: pa.ChunkedArray[Any], prefix: int) -> tuple[str | None, str | None]:
    """JSON fragments for the min and max of ``col``, or None where no bound can be written."""
    if pa.types.is_string_view(t):
        col = col.cast(pa.string())
    lo: Any  # typed scalars; .value is the raw integer for dates and timestamps
    hi: Any
    if len(col) == 1:
        # One value is its own min and max (a null one is neither, as ``min_max`` finds);
        # a compute call per column would cost more than the rest of a one-row file's stats.
        lo = hi = col[0]
    else:
        mm = pc.min_max(col)
        lo, hi = mm["min"], mm["max"]
    return _bound_texts(t, lo, hi, prefix)


def _bound_texts(t: pa.DataType, lo: Any, hi: Any, prefix: int
                 ) -> tuple[str | None, str | None]:
    """JSON fragments for a column of type ``t`` whose least and greatest values are the
    scalars ``lo`` and ``hi`` (null scalars: no value), or None where no bound can be
    written."""
    if not lo.is_valid or not hi.is_valid:
        return None, None
    if pa.types.is_integer(t):
        return str(lo.as_py()), str(hi.as_py())
    if pa.types.is_floating(t):
        a, b = lo.as_py(), hi.as_py()
        text = float32_text if pa.types.is_float32(t) else (lambda v: json_float_text(repr(v)))
        fa = text(a) if a == a and abs(a) != float("inf") else None
        fb = text(b) if b == b and abs(b) != float("inf") else None
        return fa, fb
    if pa.types.is_decimal(t):
        da: Decimal = lo.as_py()
        db: Decimal = hi.as_py()
        return format(da, "f"), format(db, "f")
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        dump = json.dumps
        return (dump(truncate_min_string(lo.as_py(), prefix), ensure_ascii=False),
                dump(truncate_max_string(hi.as_py(), prefix), ensure_ascii=False))
    if pa.types.is_timestamp(t):
        ta, tb = _timestamp_bounds(t, lo.value, hi.value)
        return (None if ta is None else f'"{ta}"'), (None if tb is None else f'"{tb}"')
    if pa.types.is_date32(t) or pa.types.is_date64(t):
        per_day = 1 if pa.types.is_date32(t) else 86_400_000
        da_text, db_text = _date_text(lo.value // per_day), _date_text(hi.value // per_day)
        return (None if da_text is None else f'"{da_text}"'), (None if db_text is None else f'"{db_text}"')
    return None, None


def _has_bounds(t: pa.DataType) -> bool:
    types = pa.types
    return bool(types.is_integer(t) or types.is_floating(t) or types.is_decimal(t)
                or types.is_string(t) or types.is_large_string(t) or types.is_string_view(t)
                or types.is_date(t) or types.is_timestamp(t))


class _Collector:
    __slots__ = ("known", "left", "prefix")

    def __init__(self, num_indexed_cols: int, prefix: int,
                 known: Mapping[str, tuple[Any, Any]] | None = None) -> None:
        self.left = num_indexed_cols if num_indexed_cols >= 0 else -1
        self.prefix = prefix
        self.known = known or {}

    def fields(self, fields: list[tuple[str, pa.DataType, pa.ChunkedArray[Any]]],
               top: bool = True) -> tuple[_Obj | None, _Obj | None, _Obj | None]:
        """(minValues, maxValues, nullCount) objects for these fields (``top``: the table's
        own columns, which ``known`` may give bounds of); None where the schema gives that
        object no entries at all."""
        mins: _Obj = {}
        maxs: _Obj = {}
        nulls: _Obj = {}
        any_bounds = False
        for name, t, col in fields:
            if self.left == 0:
                break
            if pa.types.is_dictionary(t):
                # The values' nulls are the indices' where no dictionary holds a null; and
                # bounds the writer gave need no values at all.
                t = t.value_type
                if not (top and name in self.known) or any(
                        cast("pa.DictionaryArray[Any, Any]", c).dictionary.null_count
                        for c in col.chunks):
                    col = col.cast(t)
            if pa.types.is_struct(t):
                children = [(t.field(i).name, t.field(i).type, c) for i, c in enumerate(col.flatten())]
                cmin, cmax, cnull = self.fields(children, top=False)
                if cmin is not None and cmax is not None:
                    mins[name], maxs[name] = cmin, cmax
                    any_bounds = True
                if cnull is not None:
                    nulls[name] = cnull
                continue
            if self.left > 0:
                self.left -= 1
            nulls[name] = str(col.null_count)
            if _has_bounds(t):
                any_bounds = True
                given = self.known.get(name) if top else None
                lo, hi = (_bound_texts(t, pa.scalar(given[0], t), pa.scalar(given[1], t),
                                       self.prefix) if given is not None
                          else _bounds(t, col, self.prefix))
                if lo is not None:
                    mins[name] = lo
                if hi is not None:
                    maxs[name] = hi
        if not any_bounds:
            return None, None, nulls or None
        return mins, maxs, nulls or None


def _encode(obj: _Obj) -> str:
    parts = []
    for k, v in obj.items():
        parts.append(_json_key(k) + ":" + (v if isinstance(v, str) else _encode(v)))
    return "{" + ",".join(parts) + "}"


@functools.lru_cache(maxsize=4096)
def _json_key(name: str) -> str:
    """A column name as a JSON string (the same few names, file after file)."""
    return json.dumps(name, ensure_ascii=False)


def compute_stats(table: pa.Table, num_indexed_cols: int = DEFAULT_NUM_INDEXED_COLS,
                  string_prefix_length: int = DEFAULT_STRING_PREFIX_LENGTH,
                  known_bounds: Mapping[str, tuple[Any, Any]] | None = None) -> str:
    """The ``stats`` JSON of one data file holding ``table`` (partition columns excluded).

    ``known_bounds``: the least and greatest values (Python values of the column's type;
    both None for a column without values) of some of ``table``'s own columns, known
    already (``footer_bounds``: from the statistics the Parquet writer computed while
    encoding them), used instead of computing them again."""
    if string_prefix_length < 1:
        raise InvalidArgumentError(
            f"string prefix length for statistics must be at least 1, got {string_prefix_length}")
    collector = _Collector(num_indexed_cols, string_prefix_length, known_bounds)
    fields = [(f.name, f.type, table.column(i)) for i, f in enumerate(table.schema)]
    mins, maxs, nulls = collector.fields(fields)
    out = '{"numRecords":' + str(table.num_rows)
    if mins is not None and maxs is not None:
        out += ',"minValues":' + _encode(mins) + ',"maxValues":' + _encode(maxs)
    if nulls is not None:
        out += ',"nullCount":' + _encode(nulls)
    return out + "}"


_NUM_RECORDS_PREFIX = '{"numRecords":'


def stats_num_records(stats_json: str | None, source: str = "") -> int | None:
    """``numRecords`` of a stats JSON string; None when absent or unreadable (stats are
    optional: unreadable ones are absent ones, with a warning naming ``source``)."""
    if not stats_json:
        return None
    if stats_json.startswith(_NUM_RECORDS_PREFIX):
        # Fast path for the layout Spark, delta-rs and deltacommit write: numRecords first.
        end = len(_NUM_RECORDS_PREFIX)
        stop = end
        while stop < len(stats_json) and stats_json[stop] in "0123456789":
            stop += 1
        if stop > end and stop < len(stats_json) and stats_json[stop] in ",}":
            return int(stats_json[end:stop])
    try:
        parsed = loads(stats_json)
    except ValueError as e:
        logger.warning("ignoring the statistics of %s: %s; they are treated as absent",
                       source or "a file", e)
        return None
    n = parsed.get("numRecords") if isinstance(parsed, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None
