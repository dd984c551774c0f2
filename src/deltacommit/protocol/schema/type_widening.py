"""Type widening (PROTOCOL.md, "Type Widening"): which recorded type changes a reader accepts.  Pure.

A table with the ``typeWidening`` (or ``typeWidening-preview``) feature may have changed a
column's type to a wider one without rewriting its data files, so files written before the
change hold the narrower Parquet type.  Reading such a file is a cast to the table's type
(``scan.FileScan`` and ``column_mapping.to_logical`` do it), exact for every change the
protocol allows.  A change outside that list could lose values in the cast, so the protocol
has readers refuse the table instead: ``check_type_changes`` finds every change a schema
records in its fields' ``delta.typeChanges`` metadata and refuses one this reader cannot read.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from deltacommit.errors import UnsupportedProtocolError
from deltacommit.protocol.json_values import loads
from deltacommit.protocol.schema.walk import schema_fields

TYPE_CHANGES_KEY = "delta.typeChanges"

_INTEGERS = ("byte", "short", "integer", "long")
_SMALL_INTEGERS = ("byte", "short", "integer")
#: Decimal digits of the largest value of each integer type.
_INTEGER_DIGITS = {"byte": 3, "short": 5, "integer": 10, "long": 19}
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_ALIASES = {"int": "integer", "tinyint": "byte", "smallint": "short", "bigint": "long"}


def _norm(t: str) -> str:
    t = t.strip().lower()
    return _ALIASES.get(t, t)


def _decimal(t: str) -> tuple[int, int] | None:
    m = _DECIMAL.match(t)
    return (int(m.group(1)), int(m.group(2))) if m else None


def is_supported_change(from_type: str, to_type: str) -> bool:
    """Whether ``from_type`` -> ``to_type`` (Delta primitive type names) is a widening the
    protocol allows, so every old value reads exactly in the new type."""
    a, b = _norm(from_type), _norm(to_type)
    if a in _INTEGERS and b in _INTEGERS:
        return _INTEGERS.index(a) < _INTEGERS.index(b)
    if b == "double":
        return a == "float" or a in _SMALL_INTEGERS
    if a == "date":
        return b == "timestamp_ntz"
    to_dec = _decimal(b)
    if to_dec is None:
        return False
    p, s = to_dec
    from_dec = _decimal(a)
    if from_dec is not None:
        k1, k2 = p - from_dec[0], s - from_dec[1]
        return k1 >= k2 >= 0
    digits = _INTEGER_DIGITS.get(a)
    # The protocol lists decimal(10 + k1, k2) for byte, short and int; Spark's preview also
    # wrote the narrower decimals that still hold every value (byte -> decimal(4,1)), and the
    # Delta kernels read them, so the test is the one that matters: every value fits.
    return digits is not None and p - s >= digits and s >= 0


def _changes(field: pa.Field[Any], where: str, table: str) -> list[dict[str, Any]]:
    raw = (field.metadata or {}).get(TYPE_CHANGES_KEY.encode())
    if raw is None:
        return []
    try:
        changes = loads(raw)
    except ValueError:
        changes = None
    if not isinstance(changes, list) or not all(
            isinstance(c, dict) and isinstance(c.get("fromType"), str)
            and isinstance(c.get("toType"), str) for c in changes):
        raise UnsupportedProtocolError(
            f"table {table}: column {where!r} has {TYPE_CHANGES_KEY} "
            f"{raw.decode(errors='replace')!r}, expected a list of objects with fromType and "
            "toType")
    return changes


def check_type_changes(schema: pa.Schema, table: str) -> None:
    """Refuse a table whose schema records a type change this reader cannot read."""

    for f, where in schema_fields(schema):
        for c in _changes(f, where, table):
            if not is_supported_change(c["fromType"], c["toType"]):
                path = f"{where}.{c['fieldPath']}" if c.get("fieldPath") else where
                raise UnsupportedProtocolError(
                    f"table {table}: column {path!r} changed type from {c['fromType']} to "
                    f"{c['toType']}, which is not a type widening deltacommit can read")
