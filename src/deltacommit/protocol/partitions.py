"""Partition values, partition directories and ``add.path`` encoding.  Pure: no I/O.

Three encodings meet here, and mixing them up loses files:

1. ``add.partitionValues`` holds each value as a string (PROTOCOL.md "Partition Value
   Serialization"): ``true``/``false``, numbers as text, dates ``YYYY-MM-DD``, timestamps
   ``YYYY-MM-DD HH:MM:SS[.ffffff]`` (in UTC for a timestamp with time zone), decimals in plain
   notation, binary as its bytes read as UTF-8 text (as Spark's cast to string writes them;
   bytes that are not UTF-8 as ``\\uXXXX`` escapes per byte, as delta-rs writes them).  A null is JSON
   null; an empty string also means null, so an empty string partition value is stored as null,
   as Spark does.
2. Directory names are Hive style, ``col=value``, with the characters Hive and Spark escape
   (``ExternalCatalogUtils.escapePathName``) written as ``%XX``, and null as
   ``__HIVE_DEFAULT_PARTITION__``.  The directory name is a convention only: readers take values
   from ``partitionValues``, never from the path.
3. ``add.path`` is a URI reference (RFC 2396), so the directory name is percent-encoded once more:
   the directory ``day=a%3Ab`` is the path ``day=a%253Ab``.  Decoding is one percent-decoding,
   which reads what Spark (raw non-ASCII, ``%20`` for space) and delta-rs (every non-alphanumeric
   character escaped) write alike.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import CorruptLogError, InvalidArgumentError, SchemaMismatchError
from deltacommit.protocol.json_values import float32_text

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

# Hive's FileUtils / Spark's ExternalCatalogUtils.charToEscape (the non-Windows set).
_ESCAPED_CHARS = frozenset(
    [chr(c) for c in range(0x01, 0x20)] + ['"', "#", "%", "'", "*", "/", ":", "=", "?", "\\", "\x7f",
                                           "{", "[", "]", "^"])

# Characters RFC 2396 allows unescaped in a path, apart from alphanumerics and "_.-~" (always
# safe for urllib).  ':' is left out on purpose: in a relative reference it would read as a scheme.
_URI_PATH_SAFE = "/!*'();@&=+$,"

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DATE = dt.date(1970, 1, 1)
_US_PER_UNIT = {"s": (1_000_000, 1), "ms": (1000, 1), "us": (1, 1), "ns": (1, 1000)}
_FLOAT32_MAX = 3.4028234663852886e38
_INT_RANGES = {8: 2**7, 16: 2**15, 32: 2**31, 64: 2**63}
_TIMESTAMP_RE = re.compile(
    r"^(\d{4,})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|[+-]\d{2}(?::?\d{2})?)?$")
_BINARY_ESCAPE_RE = re.compile(r"(?:\\u[0-9A-Fa-f]{4})+")


def value_kind(t: pa.DataType) -> str:
    """The family of values of an Arrow type, as partition values and the SQL predicates over
    them read it: string, bool, int, float, decimal, date, timestamp or binary; '' for any
    other type (nested types, float16), which cannot be a partition column."""
    types = pa.types
    if types.is_string(t) or types.is_large_string(t) or types.is_string_view(t):
        return "string"
    if types.is_boolean(t):
        return "bool"
    if types.is_integer(t):
        return "int"
    if types.is_floating(t) and not types.is_float16(t):
        return "float"
    if types.is_decimal(t):
        return "decimal"
    if types.is_date(t):
        return "date"
    if types.is_timestamp(t):
        return "timestamp"
    if (types.is_binary(t) or types.is_large_binary(t) or types.is_binary_view(t)
            or types.is_fixed_size_binary(t)):
        return "binary"
    return ""


PARTITION_TYPES = ("boolean, integers, float, double, decimal, string, binary, date, timestamp, "
                   "timestamp_ntz")


def is_partition_type(t: pa.DataType) -> bool:
    """Whether a column of this type can partition a table (primitive, not nested)."""
    return value_kind(t) != "" and not (pa.types.is_unsigned_integer(t)
                                        and t.bit_width == 64)


def check_partition_columns(schema: pa.Schema, partition_by: Sequence[str], table: str) -> None:
    """Partition columns must be distinct top-level columns of a primitive type, leaving at least
    one data column (a Parquet file cannot have no columns)."""
    names = schema.names
    for c in partition_by:
        if c not in names:
            raise InvalidArgumentError(
                f"table {table}: partition column {c!r} is not in the schema; columns are {names}")
        t = schema.field(c).type
        if not is_partition_type(t):
            raise InvalidArgumentError(
                f"table {table}: partition column {c!r} has type {t}; partition columns must be "
                f"of type {PARTITION_TYPES}")
        segment = escape_path_name(c) + "="
        if len(segment.encode()) > MAX_PATH_SEGMENT_BYTES - 1:
            raise InvalidArgumentError(
                f"table {table}: partition column name {c[:40]!r}... is too long: its directory "
                f"name would exceed {MAX_PATH_SEGMENT_BYTES} bytes, which file systems refuse")
    if len(set(partition_by)) != len(partition_by):
        raise InvalidArgumentError(f"table {table}: partition columns {list(partition_by)} repeat")
    if partition_by and len(set(partition_by)) == len(names):
        raise InvalidArgumentError(
            f"table {table}: all columns {names} are partition columns; at least one must hold data")


# --------------------------------------------------------------------------- values


def _bad_value(value: object, t: pa.DataType, detail: str = "") -> InvalidArgumentError:
    return InvalidArgumentError(f"partition value {value!r} is not a valid {t} value"
                                + (f": {detail}" if detail else ""))


def format_timestamp_us(us: int) -> str:
    """``YYYY-MM-DD HH:MM:SS[.ffffff]`` of microseconds since the epoch (no zone)."""
    secs, micros = divmod(us, 1_000_000)
    try:
        t = _EPOCH + dt.timedelta(seconds=secs)
    except OverflowError:
        raise InvalidArgumentError(f"timestamp {us} us since the epoch is outside years 1..9999") from None
    text = (f"{t.year:04d}-{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}:{t.second:02d}")
    return text + (f".{micros:06d}" if micros else "")


def _timestamp_us_from_int(v: int, t: pa.TimestampType) -> int:
    mul, div = _US_PER_UNIT[t.unit]
    us, rest = divmod(v * mul, div)
    if rest:
        raise _bad_value(v, t, "Delta partition values have microsecond precision")
    return us


def _datetime_us(v: dt.datetime) -> int:
    """Microseconds since the epoch; a naive datetime is taken as UTC."""
    delta = v - _EPOCH_UTC if v.tzinfo is not None else v - _EPOCH
    return delta // dt.timedelta(microseconds=1)


def _float_text(v: float, t: pa.DataType) -> str:
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    if pa.types.is_float32(t):
        if abs(v) > _FLOAT32_MAX:
            raise _bad_value(v, t, "out of range")
        return float32_text(v)
    return repr(v)


def _scalar_to_python(value: pa.Scalar[Any], t: pa.DataType) -> object:
    if not value.is_valid:
        return None
    raw: Any = value
    if pa.types.is_timestamp(t):
        return int(raw.value)  # raw units; avoids pandas and nanosecond loss in as_py()
    if pa.types.is_date32(t):
        return _EPOCH_DATE + dt.timedelta(days=int(raw.value))
    return value.as_py()


def serialize_partition_value(value: object, arrow_type: pa.DataType) -> str | None:
    """The ``partitionValues`` string of ``value`` in a column of ``arrow_type``; None for null.

    ``value`` is a Python value or a pyarrow scalar; integers given for a timestamp column are
    in the column's unit.
    """
    if isinstance(value, pa.Scalar):
        value = _scalar_to_python(value, arrow_type)
    if value is None:
        return None
    kind = value_kind(arrow_type)
    if kind == "string":
        if not isinstance(value, str):
            raise _bad_value(value, arrow_type, "expected str")
        return value or None  # Delta reads an empty partition value as null
    if kind == "bool":
        if not isinstance(value, bool):
            raise _bad_value(value, arrow_type, "expected bool")
        return "true" if value else "false"
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad_value(value, arrow_type, "expected int")
        return str(value)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _bad_value(value, arrow_type, "expected float")
        return _float_text(float(value), arrow_type)
    if kind == "decimal":
        if isinstance(value, bool) or not isinstance(value, Decimal | int | float):
            raise _bad_value(value, arrow_type, "expected Decimal")
        d = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        if not d.is_finite():
            raise _bad_value(value, arrow_type, "decimals are finite")
        return format(d, "f")
    if kind == "date":
        if isinstance(value, dt.datetime):
            value = value.date()
        if not isinstance(value, dt.date):
            raise _bad_value(value, arrow_type, "expected datetime.date")
        return value.isoformat()
    if kind == "timestamp":
        assert isinstance(arrow_type, pa.TimestampType)
        if isinstance(value, dt.datetime):
            return format_timestamp_us(_datetime_us(value))
        if isinstance(value, int) and not isinstance(value, bool):
            return format_timestamp_us(_timestamp_us_from_int(value, arrow_type))
        raise _bad_value(value, arrow_type, "expected datetime.datetime")
    if kind == "binary":
        if not isinstance(value, bytes | bytearray | memoryview):
            raise _bad_value(value, arrow_type, "expected bytes")
        return _binary_text(bytes(value))
    raise InvalidArgumentError(f"type {arrow_type} cannot be a partition column type "
                               f"(supported: {PARTITION_TYPES})")


def _binary_text(value: bytes) -> str | None:
    """A binary partition value as Spark writes it: the bytes read as UTF-8 text.

    Bytes that are not UTF-8 (Spark cannot write them either) and text that would read back
    as escapes take delta-rs's ``\\uXXXX``-per-byte form, which ``parse_partition_value`` decodes.
    """
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or _BINARY_ESCAPE_RE.fullmatch(text):
        text = "".join(f"\\u{b:04X}" for b in value)
    return text or None


def parse_timestamp_us(text: str, *, what: str = "timestamp") -> tuple[int, bool]:
    """Microseconds since the epoch of a partition-value timestamp, and whether the text
    carried a zone.  Accepts ``YYYY-MM-DD HH:MM:SS[.f...]`` and ISO 8601 with ``T``, ``Z`` or an
    offset; digits beyond microseconds are truncated."""
    m = _TIMESTAMP_RE.match(text.strip())
    if not m:
        raise InvalidArgumentError(f"{what} {text!r} is not of the form YYYY-MM-DD HH:MM:SS[.ffffff]")
    year, month, day, hour, minute, second, frac, zone = m.groups()
    try:
        base = dt.datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0),
                           int(second or 0), int((frac or "").ljust(6, "0")[:6]))
    except ValueError as e:
        raise InvalidArgumentError(f"{what} {text!r} is not a valid timestamp: {e}") from None
    us = (base - _EPOCH) // dt.timedelta(microseconds=1)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset_min = int(digits[:2]) * 60 + int(digits[2:4] or 0)
        us -= sign * offset_min * 60_000_000
    return us, zone is not None


def parse_partition_value(text: str | None, arrow_type: pa.DataType) -> object:
    """The Python value of a ``partitionValues`` string; None for null or empty."""
    if text is None or text == "":
        return None
    kind = value_kind(arrow_type)
    try:
        if kind == "string":
            return text
        if kind == "bool":
            low = text.lower()
            if low in ("true", "false"):
                return low == "true"
            raise _bad_value(text, arrow_type, "expected true or false")
        if kind == "int":
            v = int(text)
            if pa.types.is_unsigned_integer(arrow_type):
                lo, hi = 0, 2 ** arrow_type.bit_width
            else:
                hi = _INT_RANGES[arrow_type.bit_width]
                lo = -hi
            if not lo <= v < hi:
                raise _bad_value(text, arrow_type, "out of range")
            return v
        if kind == "float":
            return float(text)
        if kind == "decimal":
            d = Decimal(text)
            if not d.is_finite():
                raise _bad_value(text, arrow_type, "decimals are finite")
            return d
        if kind == "date":
            return dt.date.fromisoformat(text.strip()[:10])
        if kind == "timestamp":
            assert isinstance(arrow_type, pa.TimestampType)
            us, _ = parse_timestamp_us(text, what="partition value")
            if arrow_type.tz is not None:
                return _EPOCH_UTC + dt.timedelta(microseconds=us)
            return _EPOCH + dt.timedelta(microseconds=us)
        if kind == "binary":
            if _BINARY_ESCAPE_RE.fullmatch(text):
                return bytes(int(text[i + 2:i + 6], 16) & 0xFF for i in range(0, len(text), 6))
            return text.encode("utf-8")
    except (ValueError, InvalidOperation, OverflowError) as e:
        if isinstance(e, InvalidArgumentError):
            raise
        raise _bad_value(text, arrow_type, str(e) or type(e).__name__) from None
    raise InvalidArgumentError(f"type {arrow_type} cannot be a partition column type "
                               f"(supported: {PARTITION_TYPES})")


@functools.lru_cache(maxsize=4096)
def _partition_scalar(text: str | None, arrow_type: pa.DataType) -> pa.Scalar[Any]:
    return pa.scalar(parse_partition_value(text, arrow_type), type=arrow_type)


def partition_column_arrays(values: Mapping[str, str | None], schema: pa.Schema,
                            num_rows: int) -> dict[str, pa.Array[Any]]:
    """Constant columns restoring the partition columns of one data file on read."""
    out: dict[str, pa.Array[Any]] = {}
    for name, text in values.items():
        idx = schema.get_field_index(name)
        if idx < 0:
            raise InvalidArgumentError(f"partition column {name!r} is not in the schema {schema.names}")
        t = schema.field(idx).type
        if text is None or text == "":
            out[name] = pa.nulls(num_rows, type=t)
        else:
            out[name] = pa.repeat(_partition_scalar(text, t), num_rows)  # type: ignore[call-overload]
    return out


# --------------------------------------------------------------------------- paths


def escape_path_name(text: str) -> str:
    """Hive/Spark escaping of one path component: listed characters become ``%XX``."""
    if not any(c in _ESCAPED_CHARS for c in text):
        return text
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED_CHARS else c for c in text)


def unescape_path_name(text: str) -> str:
    """Inverse of escape_path_name (any ``%XX`` is decoded, as Hive does)."""
    if "%" not in text:
        return text
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), text)


# Longest file or directory name most file systems accept (ext4, XFS, APFS; NAME_MAX).
MAX_PATH_SEGMENT_BYTES = 255


def partition_path(items: Sequence[tuple[str, str | None]]) -> str:
    """``col=value/col2=__HIVE_DEFAULT_PARTITION__`` for serialized partition values."""
    parts = []
    for col, value in items:
        v = HIVE_DEFAULT_PARTITION if value is None or value == "" else escape_path_name(value)
        segment = f"{escape_path_name(col)}={v}"
        if len(segment.encode()) > MAX_PATH_SEGMENT_BYTES:
            raise InvalidArgumentError(
                f"partition value {(value or '')[:40]!r}... of column {col!r} is too long: its directory "
                f"name would be {len(segment.encode())} bytes, over the "
                f"{MAX_PATH_SEGMENT_BYTES} file systems accept; nothing was written")
        parts.append(segment)
    return "/".join(parts)


def encode_add_path(relative: str) -> str:
    """The ``add.path`` of a file at ``relative`` (a path under the table root, or an absolute
    URI whose path part is encoded)."""
    scheme_end = relative.find("://")
    if scheme_end > 0 and relative[:scheme_end].isalnum():
        path_start = relative.find("/", scheme_end + 3)
        if path_start < 0:
            return relative
        return relative[:path_start] + urllib.parse.quote(relative[path_start:], safe=_URI_PATH_SAFE)
    return urllib.parse.quote(relative, safe=_URI_PATH_SAFE)


def decode_add_path(path: str) -> str:
    """The file path of an ``add.path`` (relative to the table root unless it is a full URI)."""
    if "%" not in path:
        return path
    try:
        return urllib.parse.unquote(path, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise CorruptLogError(f"add path {path!r} percent-decodes to invalid UTF-8") from None


# --------------------------------------------------------------------------- splitting


def split_by_partition(table: pa.Table, partition_by: Sequence[str]
                       ) -> list[tuple[dict[str, str | None], pa.Table]]:
    """Group rows by their partition values: one (serialized values, data columns) per group.

    Vectorised: each partition column is dictionary-encoded once, rows are ordered by the codes
    with one stable sort and the groups are zero-copy slices of that order, so the Python work is
    per distinct value, not per row.  Rows keep their order within a group; groups are ordered by
    where each column's value first appears, the first partition column first.
    """
    if not partition_by:
        return [({}, table)]
    names = table.column_names
    for c in partition_by:
        if c not in names:
            raise SchemaMismatchError(f"data lacks partition column {c!r}; columns are {names}")
        t = table.schema.field(c).type
        if not is_partition_type(t):
            raise SchemaMismatchError(f"partition column {c!r} has type {t}; partition columns must "
                                      f"be of type {PARTITION_TYPES}")
    if len(set(partition_by)) != len(partition_by):
        raise SchemaMismatchError(f"partition columns {list(partition_by)} repeat")
    data = table.drop_columns(list(partition_by))
    if data.num_columns == 0:
        raise SchemaMismatchError(f"all columns {names} are partition columns; at least one must hold data")
    if table.num_rows == 0:
        return []

    codes: list[pa.ChunkedArray[Any]] = []
    serialized: list[list[str | None]] = []
    for c in partition_by:
        col = table.column(c)
        t = col.type
        encoded = pc.dictionary_encode(col, null_encoding="encode")
        chunks: list[Any] = [ch for ch in encoded.chunks if len(ch)]  # DictionaryArrays
        dictionary = chunks[0].dictionary
        serialized.append([serialize_partition_value(dictionary[i], t) for i in range(len(dictionary))])
        codes.append(pa.chunked_array([ch.indices for ch in chunks], type=chunks[0].indices.type))

    if all(len(s) == 1 for s in serialized):
        return [({c: s[0] for c, s in zip(partition_by, serialized, strict=True)}, data)]

    keys = [f"k{i}" for i in range(len(codes))]
    key_table = pa.table(dict(zip(keys, codes, strict=True)))
    order = pc.sort_indices(key_table, sort_keys=[(k, "ascending") for k in keys])
    sorted_keys = key_table.take(order).combine_chunks()
    sorted_data = data.take(order)

    n = table.num_rows
    changed: pa.Array[Any] | None = None
    for k in keys:
        col = sorted_keys.column(k).chunk(0)
        diff = pc.not_equal(col.slice(1), col.slice(0, n - 1))
        changed = diff if changed is None else pc.or_(changed, diff)
    assert changed is not None
    starts = [0] + [i + 1 for i in pc.indices_nonzero(changed).to_pylist() if i is not None]
    ends = starts[1:] + [n]
    key_columns = [sorted_keys.column(k).chunk(0) for k in keys]
    groups: list[tuple[dict[str, str | None], pa.Table]] = []
    for start, end in zip(starts, ends, strict=True):
        values = {c: serialized[j][key_columns[j][start].as_py()] for j, c in enumerate(partition_by)}
        groups.append((values, sorted_data.slice(start, end - start)))
    return groups
