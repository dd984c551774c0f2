"""Arrow values built without pyarrow's conversion from Python objects.

``pa.array`` and ``pa.scalar`` of Python values (numpy arrays included) first ask whether the
value is a pandas object, which makes pyarrow import pandas: about 0.2 s, once per process.  A
reader that lists a table's files needs only a few such values (a string to compare with, an
index array); building them from buffers keeps that import off the first read of a process,
where deltalake pays nothing of the kind.  Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["int64_array", "null_scalar", "string_array", "string_scalar", "true_scalar"]


def string_scalar(text: str) -> Any:
    """``pa.scalar(text, pa.string())``, built from its bytes."""
    data = text.encode("utf-8")
    offsets = np.array([0, len(data)], dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(offsets.data),
                                                  pa.py_buffer(data)])[0]


def null_scalar(type_: pa.DataType) -> Any:
    """``pa.scalar(None, type_)``, taken from an array of nulls."""
    any_type: Any = type_  # pyarrow's stubs type ``nulls`` per type class
    return pa.nulls(1, any_type)[0]


def true_scalar() -> Any:
    """``pa.scalar(True)``, taken from a one-bit buffer."""
    return pa.Array.from_buffers(pa.bool_(), 1, [None, pa.py_buffer(b"\x01")])[0]


def int64_array(values: np.ndarray[Any, Any]) -> Any:
    """``pa.array(values)`` of a one-dimensional numpy array as int64, sharing a contiguous
    copy's buffer."""
    flat = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(flat), [None, pa.py_buffer(flat.data)])


def string_array(texts: Sequence[str]) -> Any:
    """``pa.array(texts, pa.string())`` of strings (no nulls), built from their bytes."""
    encoded = [t.encode("utf-8") for t in texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    if offsets[-1] < 2**31:
        return pa.Array.from_buffers(pa.string(), len(encoded), [
            None, pa.py_buffer(offsets.astype(np.int32).data), pa.py_buffer(b"".join(encoded))])
    return pa.Array.from_buffers(pa.large_string(), len(encoded), [
        None, pa.py_buffer(offsets.data), pa.py_buffer(b"".join(encoded))]).cast(pa.string())
