"""A fingerprint of the multiset of an Arrow table's rows.  Pure: no I/O.

A rewrite (compaction, Z-order, a delete, a merge) must prove that the rows it wrote are
exactly the rows it should have written before it commits them.  It cannot compare rows one by
one in order: Z-order reorders them, a delete drops some, Spark tasks return files in any
order.  ``fingerprint`` reduces a table to its row count and sums, modulo 2**64, of a 64-bit
hash of every value of each column and of every whole row.  Sums do not depend on the order of
the rows and add up over pieces (``Fingerprint.__add__``), so the fingerprint of a bin's input
can be compared with that of its output however either was split into files or batches.

The hash of a value depends only on the value, never on how Arrow lays it out (chunks, slices,
dictionary encoding, 32- or 64-bit offsets, which bytes lie under a null):

* a null of any type hashes to one constant; NaN is one value whatever its payload bits
  (Parquet may keep them), and ``-0.0`` is not ``0.0`` (a rewrite keeps the bits);
* fixed-width values (integers, floats, dates, times, timestamps, decimals, intervals) hash
  their bits; strings and binaries their bytes, each byte weighted by its position;
* lists (and maps, lists of entries) hash their elements weighted by position, structs fold
  their fields in order, so ``[1, 2]`` is not ``[2, 1]`` and ``{a: 1, b: 2}`` is not
  ``{a: 2, b: 1}``.

Two different multisets of rows collide only by chance (about 2**-64 per comparison), not by
any regularity of data, so equal fingerprints are the proof a rewrite gives; a mismatch
names the columns whose sums differ.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

U64 = npt.NDArray[np.uint64]

_MASK = (1 << 64) - 1
#: What every null hashes to, of any type (a null struct, list or string alike).
NULL_HASH = 0x9E3779B97F4A7C15
_NAN64 = 0x7FF8000000000000
_NAN32 = 0x7FC00000
_NAN16 = 0x7E00
#: Offsets of position weights (bytes of a string, elements of a list) and of field folds.
_POSITION_SEED = 0x243F6A8885A308D3
_FOLD = 0x100000001B3
_LENGTH = 0xC2B2AE3D27D4EB4F
_ROW_SEED = 0x13198A2E03707344
#: Values hashed per step: bounds the temporary arrays of one column to a few dozen MB.
_ROWS_PER_STEP = 1 << 20
_BYTES_PER_STEP = 1 << 22
#: String columns of at least this many values are dictionary-encoded before hashing.
_DICTIONARY_FROM = 1024


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """Row count, column names and types, and order-independent sums of one table's rows."""

    rows: int
    #: ``(name, type)`` of each column, in order.
    columns: tuple[tuple[str, str], ...]
    #: Per column: the sum, modulo 2**64, of the hashes of its values.
    column_sums: tuple[int, ...]
    #: The sum, modulo 2**64, of the hashes of whole rows (two of them, independently mixed).
    row_sums: tuple[int, int]

    def __add__(self, other: Fingerprint) -> Fingerprint:
        if other.columns != self.columns:
            raise ValueError(f"fingerprints of different columns: {list(self.columns)} and "
                             f"{list(other.columns)}")
        return Fingerprint(
            self.rows + other.rows, self.columns,
            tuple((a + b) & _MASK for a, b in zip(self.column_sums, other.column_sums,
                                                  strict=True)),
            ((self.row_sums[0] + other.row_sums[0]) & _MASK,
             (self.row_sums[1] + other.row_sums[1]) & _MASK))

    def __sub__(self, other: Fingerprint) -> Fingerprint:
        """The fingerprint of this multiset without ``other``'s rows (a delete's expectation:
        the input less the rows it deletes); meaningful when ``other`` is a part of it."""
        if other.columns != self.columns:
            raise ValueError(f"fingerprints of different columns: {list(self.columns)} and "
                             f"{list(other.columns)}")
        return Fingerprint(
            self.rows - other.rows, self.columns,
            tuple((a - b) & _MASK for a, b in zip(self.column_sums, other.column_sums,
                                                  strict=True)),
            ((self.row_sums[0] - other.row_sums[0]) & _MASK,
             (self.row_sums[1] - other.row_sums[1]) & _MASK))

    def differences(self, other: Fingerprint) -> list[str]:
        """What ``other`` (the rows found) has that differs from these (the rows expected),
        in words; empty when the fingerprints are equal."""
        out: list[str] = []
        if self.columns != other.columns:
            return [f"columns {[f'{n}: {t}' for n, t in other.columns]} where "
                    f"{[f'{n}: {t}' for n, t in self.columns]} were expected"]
        if self.rows != other.rows:
            out.append(f"{other.rows} rows where {self.rows} were expected")
        changed = [name for (name, _), a, b in zip(self.columns, self.column_sums,
                                                   other.column_sums, strict=True) if a != b]
        if changed:
            out.append(f"other values in column(s) {changed}")
        if not out and self.row_sums != other.row_sums:
            out.append("the same values of each column combined into other rows")
        return out


def empty_fingerprint(schema: pa.Schema) -> Fingerprint:
    """The fingerprint of no rows of ``schema``."""
    return Fingerprint(0, tuple((f.name, str(f.type)) for f in schema),
                       tuple(0 for _ in schema), (0, 0))


def fingerprint(data: pa.Table | pa.RecordBatch) -> Fingerprint:
    """The fingerprint of ``data``'s rows (see the module's docstring)."""
    table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
    total = empty_fingerprint(table.schema)
    for start in range(0, table.num_rows, _ROWS_PER_STEP):
        piece = table.slice(start, _ROWS_PER_STEP)
        total = total + _fingerprint_columns(
            piece.schema, [_one_array(piece.column(i)) for i in range(piece.num_columns)],
            piece.num_rows)
    return total


def fingerprint_arrays(names: Sequence[str], arrays: Sequence[pa.Array[Any]]) -> Fingerprint:
    """The fingerprint of the rows of equally long ``arrays`` named ``names``."""
    schema = pa.schema([pa.field(n, a.type) for n, a in zip(names, arrays, strict=True)])
    return fingerprint(pa.Table.from_arrays(list(arrays), schema=schema))


def _one_array(col: pa.ChunkedArray[Any]) -> pa.Array[Any]:
    combined: pa.Array[Any]
    if col.num_chunks == 0:
        combined = pa.nulls(0, col.type)
        return combined
    try:
        combined = col.combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowCapacityError):
        # Too many bytes for one array's 32-bit offsets: the same values, 64-bit offsets.
        wide = _widened(col.type)
        combined = pa.concat_arrays([c.cast(wide) for c in col.chunks])
    return combined


def _widened(t: pa.DataType) -> pa.DataType:
    """``t`` with 64-bit offsets wherever it has 32-bit ones (hashes do not change)."""
    if pa.types.is_string(t):
        return pa.large_string()
    if pa.types.is_binary(t):
        return pa.large_binary()
    if pa.types.is_list(t):
        return pa.large_list(_widened(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_widened(f.type)) for f in t])
    return t


def _fingerprint_columns(schema: pa.Schema, arrays: list[pa.Array[Any]], n: int
                         ) -> Fingerprint:
    sums: list[int] = []
    row = np.full(n, _ROW_SEED, dtype=np.uint64)
    for i, arr in enumerate(arrays):
        h = value_hashes(arr)
        sums.append(_sum(h))
        row = _mix(row * np.uint64(_FOLD) + h + np.uint64(i + 1))
    return Fingerprint(n, tuple((f.name, str(f.type)) for f in schema), tuple(sums),
                       (_sum(_mix(row)), _sum(_mix(row ^ np.uint64(_LENGTH)))))


def _view(buf: pa.Buffer | None, dtype: Any, count: int = -1) -> Any:
    """The values of an Arrow buffer as a NumPy array, without a copy."""
    if buf is None:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(memoryview(buf), dtype=dtype, count=count)


def _sum(h: U64) -> int:
    return int(h.sum(dtype=np.uint64)) & _MASK if len(h) else 0


def _mix(x: U64) -> U64:
    """MurmurHash3's 64-bit finaliser: every input bit affects every output bit."""
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xFF51AFD7ED558CCD)
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xC4CEB9FE1A85EC53)
    return x ^ (x >> np.uint64(33))


def _with_nulls(arr: pa.Array[Any], h: U64) -> U64:
    if arr.null_count == 0:
        return h
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    return np.where(valid, h, np.uint64(NULL_HASH))


def value_hashes(arr: pa.Array[Any]) -> U64:
    """A 64-bit hash of each value of ``arr`` (``NULL_HASH`` for nulls)."""
    t = arr.type
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    if pa.types.is_null(t):
        return np.full(n, NULL_HASH, dtype=np.uint64)
    if isinstance(t, pa.ExtensionType):
        return value_hashes(arr.storage)  # type: ignore[attr-defined]
    if pa.types.is_dictionary(t):
        dict_arr: Any = arr
        hashes = value_hashes(dict_arr.dictionary)
        indices = dict_arr.indices.fill_null(0).to_numpy(zero_copy_only=False)
        return _with_nulls(arr, hashes[indices] if len(hashes) else
                           np.full(n, NULL_HASH, dtype=np.uint64))
    if pa.types.is_boolean(t):
        bits = arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint64)
        return _with_nulls(arr, _mix(bits + np.uint64(0x5851F42D4C957F2D)))
    if pa.types.is_struct(t):
        return _with_nulls(arr, _struct_hashes(arr))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        list_arr: Any = arr
        offsets = list_arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        return _with_nulls(arr, _sequence_hashes(list_arr.values, offsets, elements=True))
    if pa.types.is_fixed_size_list(t):
        fixed: Any = arr
        size = t.list_size
        offsets = (np.arange(n + 1, dtype=np.int64) + arr.offset) * size
        return _with_nulls(arr, _sequence_hashes(fixed.values, offsets, elements=True))
    if (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)
            or pa.types.is_large_binary(t)):
        if n >= _DICTIONARY_FROM and _repetitive(arr):
            # Arrow's dictionary encoding costs less than hashing every value's bytes when
            # values repeat (most string columns): each distinct value is hashed once.
            return value_hashes(arr.dictionary_encode())
        return _with_nulls(arr, _bytes_hashes(arr))
    if pa.types.is_fixed_size_binary(t):
        width = t.byte_width
        raw = _view(arr.buffers()[1], np.uint8)
        offsets = (np.arange(n + 1, dtype=np.int64) + arr.offset) * width
        return _with_nulls(arr, _byte_sequence_hashes(raw, offsets))
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        target = pa.large_string() if pa.types.is_string_view(t) else pa.large_binary()
        return value_hashes(arr.cast(target))
    bit_width = _bit_width(t)
    if bit_width is not None and arr.buffers()[1] is not None:
        return _with_nulls(arr, _fixed_width_hashes(arr, t, bit_width))
    return _python_hashes(arr)


def _repetitive(arr: pa.Array[Any]) -> bool:
    """Whether a sample of ``arr``'s values repeats enough for dictionary encoding to pay."""
    step = max(1, len(arr) // _DICTIONARY_FROM)
    sample = arr.take(np.arange(0, len(arr), step, dtype=np.int64))
    distinct = pc.count_distinct(sample).as_py()
    return bool(distinct * 2 <= len(sample))


def _bit_width(t: pa.DataType) -> int | None:
    try:
        width = t.bit_width
    except ValueError:
        return None
    return width if width in (8, 16, 32, 64, 128, 256) else None


def _fixed_width_hashes(arr: pa.Array[Any], t: pa.DataType, bit_width: int) -> U64:
    n = len(arr)
    buf = arr.buffers()[1]
    if bit_width <= 64:
        dtype = np.dtype(f"<u{bit_width // 8}")
        raw = _view(buf, dtype=dtype, count=arr.offset + n)[arr.offset:]
        bits = raw.astype(np.uint64)
        if pa.types.is_floating(t):
            nan = {64: _NAN64, 32: _NAN32, 16: _NAN16}[bit_width]
            as_float = raw.view({64: np.float64, 32: np.float32, 16: np.float16}[bit_width])
            bits = np.where(np.isnan(as_float), np.uint64(nan), bits)
        return _mix(bits + np.uint64(bit_width))
    words = bit_width // 64
    raw = _view(buf, dtype="<u8", count=(arr.offset + n) * words)
    raw = raw[arr.offset * words:].reshape(n, words)
    h = np.full(n, bit_width, dtype=np.uint64)
    for w in range(words):
        h = _mix(h * np.uint64(_FOLD) + raw[:, w])
    return h


def _struct_hashes(arr: pa.Array[Any]) -> U64:
    struct: Any = arr
    h = np.full(len(arr), len(arr.type), dtype=np.uint64)
    for i in range(arr.type.num_fields):
        h = _mix(h * np.uint64(_FOLD) + value_hashes(struct.field(i)) + np.uint64(i + 1))
    return h


def _bytes_hashes(arr: pa.Array[Any]) -> U64:
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    buffers = arr.buffers()
    n = len(arr)
    offsets = _view(buffers[1], dtype=np.int64 if large else np.int32,
                            count=arr.offset + n + 1)[arr.offset:].astype(np.int64)
    return _byte_sequence_hashes(_view(buffers[2], np.uint8), offsets)


def _byte_sequence_hashes(raw: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]) -> U64:
    """Hashes of the byte strings ``raw[offsets[i]:offsets[i + 1]]``, a bounded number of
    bytes at a time."""
    n = len(offsets) - 1
    out = np.empty(n, dtype=np.uint64)
    start = 0
    while start < n:
        # As many values as fit in one step's bytes (at least one).
        limit = offsets[start] + _BYTES_PER_STEP
        end = int(np.searchsorted(offsets, limit, side="right")) - 1
        end = min(max(end, start + 1), n)
        piece = offsets[start:end + 1]
        base = int(piece[0])
        out[start:end] = _word_hashes(raw[base:int(piece[-1])], piece - base)
        start = end
    return out


def _word_hashes(raw: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]) -> U64:
    """Hashes of the byte strings ``raw[offsets[i]:offsets[i + 1]]`` (``offsets[0]`` is 0),
    eight bytes at a time: each string is cut into little-endian words from its own first
    byte (the last one zero-padded), each word mixed with its position in the string, the
    mixed words summed and the sum mixed with the string's length."""
    lengths = np.diff(offsets)
    words_per = (lengths + 7) >> 3
    total = int(words_per.sum())
    if total == 0:
        return _mix(lengths.astype(np.uint64) * np.uint64(_LENGTH))
    first = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(words_per)])
    position = np.arange(total, dtype=np.int64) - np.repeat(first[:-1], words_per)
    at = np.repeat(offsets[:-1], words_per) + 8 * position
    # The word starting at byte ``at``: the aligned word holding it shifted down, and the
    # next one's low bytes shifted up (two shifts, so that none is by 64 bits).
    aligned = np.zeros((len(raw) + 23) // 8, dtype=np.uint64)
    aligned.view(np.uint8)[:len(raw)] = raw
    q = at >> 3
    r = (at & 7).astype(np.uint64) * np.uint64(8)
    words = (aligned[q] >> r) | ((aligned[q + 1] << np.uint64(1)) << (np.uint64(63) - r))
    # The last word of each string keeps only the string's bytes.
    ends = lengths > 0
    last = first[1:][ends] - 1
    tail = (lengths[ends] - 8 * (words_per[ends] - 1)).astype(np.uint64)
    words[last] &= np.uint64(_MASK) >> (np.uint64(64) - np.uint64(8) * tail)
    mixed = _mix(words ^ (position.astype(np.uint64) * np.uint64(_POSITION_SEED)))
    sums = np.concatenate([np.zeros(1, dtype=np.uint64), np.cumsum(mixed, dtype=np.uint64)])
    h = sums[first[1:]] - sums[first[:-1]]
    return _mix(h + lengths.astype(np.uint64) * np.uint64(_LENGTH))


def _sequence_hashes(values: pa.Array[Any], offsets: npt.NDArray[np.int64], *,
                     elements: bool) -> U64:
    """Hashes of the lists ``values[offsets[i]:offsets[i + 1]]``."""
    if len(offsets) < 2:
        return np.zeros(0, dtype=np.uint64)
    base, top = int(offsets[0]), int(offsets[-1])
    child = value_hashes(values.slice(base, top - base)) if elements else np.zeros(0, np.uint64)
    return _segment_hashes(child, offsets - base)


def _segment_hashes(values: U64, offsets: npt.NDArray[np.int64]) -> U64:
    """For each segment ``values[offsets[i]:offsets[i + 1]]`` (``offsets[0]`` is 0): the sum
    of its values, each multiplied by a weight of its position in the segment, mixed with the
    segment's length."""
    lengths = np.diff(offsets)
    total = len(values)
    if total:
        longest = int(lengths.max())
        weights = _mix(np.arange(longest, dtype=np.uint64) + np.uint64(_POSITION_SEED))
        weights |= np.uint64(1)
        starts = offsets[:-1]
        position = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
        weighted = values * weights[position]
        sums = np.concatenate([np.zeros(1, dtype=np.uint64), np.cumsum(weighted,
                                                                       dtype=np.uint64)])
        h = sums[offsets[1:]] - sums[starts]
    else:
        h = np.zeros(len(lengths), dtype=np.uint64)
    return _mix(h + lengths.astype(np.uint64) * np.uint64(_LENGTH))


def _python_hashes(arr: pa.Array[Any]) -> U64:
    """Hashes of values of a type without a vectorised rule (unions, views of lists): from
    each value's Python form.  Delta tables hold none of these; kept so that no type fails."""
    out = np.empty(len(arr), dtype=np.uint64)
    for i, v in enumerate(arr.to_pylist()):
        if v is None:
            out[i] = NULL_HASH
        else:
            digest = hashlib.blake2b(repr(v).encode("utf-8", "surrogatepass"), digest_size=8)
            out[i] = int.from_bytes(digest.digest(), "little")
    return out


def row_differences(expected: pa.Table, actual: pa.Table) -> list[str]:
    """What differs between the rows of ``expected`` and ``actual`` as multisets, in words;
    empty when they hold the same rows in any order.

    Rows compared in the same order and found equal need no hashing (a compaction keeps
    the order it read); otherwise, or when NaN makes Arrow's equality fail, fingerprints
    decide."""
    if (expected.num_rows == actual.num_rows and expected.schema.equals(actual.schema)
            and same_values(expected, actual)):
        return []
    if not expected.schema.equals(actual.schema):
        return [f"columns {_described(actual.schema)} where {_described(expected.schema)} "
                "were expected"]
    return fingerprint(expected).differences(fingerprint(actual))


def same_values(a: pa.Table | pa.ChunkedArray[Any] | pa.Array[Any],
                b: pa.Table | pa.ChunkedArray[Any] | pa.Array[Any]) -> bool:
    """Whether ``a`` and ``b`` hold the same values in the same order, as the fingerprints
    tell values apart: Arrow's equality, and every zero of a floating-point value (at any
    depth) of the same sign, which Arrow's equality does not look at (``-0.0 == 0.0``) and a
    rewrite must keep.  False also where Arrow's equality is (NaN); a caller that must know
    then compares fingerprints.  Every comparison in order that stands in for the
    fingerprints (a rewrite's proof, a column found unchanged) is this one.  An array and a
    chunked array are compared as chunked arrays."""
    if isinstance(a, pa.Array) and isinstance(b, pa.ChunkedArray):
        a = pa.chunked_array([a], type=a.type)
    elif isinstance(a, pa.ChunkedArray) and isinstance(b, pa.Array):
        b = pa.chunked_array([b], type=b.type)
    if not a.equals(b):  # type: ignore[arg-type]
        return False
    if isinstance(a, pa.Table) and isinstance(b, pa.Table):
        return all(_zero_signs_agree(x, y) for x, y in zip(a.columns, b.columns, strict=True))
    if isinstance(a, pa.Table) or isinstance(b, pa.Table):
        return False
    return _zero_signs_agree(a, b)


def _has_floats(t: pa.DataType) -> bool:
    if pa.types.is_floating(t):
        return True
    if pa.types.is_dictionary(t):
        return _has_floats(t.value_type)
    return any(_has_floats(t.field(i).type) for i in range(t.num_fields))


def _zero_signs_agree(a: pa.ChunkedArray[Any] | pa.Array[Any],
                      b: pa.ChunkedArray[Any] | pa.Array[Any]) -> bool:
    """For ``a`` and ``b`` that Arrow's equality finds equal: whether their floating-point
    values (top-level or nested) have their negative zeros at the same places (equal
    values other than zeros have the same sign anyway)."""
    if not _has_floats(a.type):
        return True
    found_a, found_b = _negative_zeros(a), _negative_zeros(b)
    return (found_a is not None and found_b is not None and found_a.keys() == found_b.keys()
            and all(np.array_equal(found_a[i], found_b[i]) for i in found_a))


def _negative_zeros(column: pa.ChunkedArray[Any] | pa.Array[Any]
                    ) -> dict[int, npt.NDArray[np.intp]] | None:
    """Leaf (the n-th floating-point leaf of the type) -> where its values over all chunks
    are ``-0.0``, for the leaves that have any (so that chunking does not matter); None for a
    type it cannot take apart (a caller then does not take the values as the same)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    found: dict[int, list[npt.NDArray[np.intp]]] = {}
    seen: dict[int, int] = {}
    for chunk in chunks:
        leaves = _float_leaves(chunk)
        if leaves is None:
            return None
        for i, leaf in enumerate(leaves):
            # A null (also one below a null struct: ``flatten``) reads as NaN.
            values = leaf.to_numpy(zero_copy_only=False)
            zeros = np.flatnonzero(values == 0)
            zeros = zeros[np.signbit(values[zeros])]
            if len(zeros):
                found.setdefault(i, []).append(zeros + seen.get(i, 0))
            seen[i] = seen.get(i, 0) + len(values)
    return {i: np.concatenate(parts) for i, parts in found.items()}


def _float_leaves(arr: pa.Array[Any]) -> list[pa.Array[Any]] | None:
    t = arr.type
    if pa.types.is_floating(t):
        return [arr]
    if not _has_floats(t):
        return []
    if isinstance(arr, pa.DictionaryArray):
        return _float_leaves(arr.dictionary_decode())
    if isinstance(arr, pa.StructArray):
        parts: list[pa.Array[Any]] = []
        for field_values in arr.flatten():  # a null struct's fields null
            found = _float_leaves(field_values)
            if found is None:
                return None
            parts.extend(found)
        return parts
    if isinstance(t, pa.MapType):
        # As a list of its entries (structs of key and value), which flatten takes.
        entries = pa.struct([t.key_field, t.item_field])
        arr = arr.cast(pa.list_(pa.field("entries", entries, nullable=False)))
    if isinstance(arr, (pa.ListArray, pa.LargeListArray, pa.FixedSizeListArray)):
        return _float_leaves(arr.flatten())  # a null list's elements are not there
    return None


def _described(schema: pa.Schema) -> list[str]:
    return [f"{f.name}: {f.type}" for f in schema]


def fingerprint_tables(tables: Iterable[pa.Table], schema: pa.Schema) -> Fingerprint:
    """The fingerprint of the rows of all ``tables`` (each of ``schema``) together."""
    total = empty_fingerprint(schema)
    for t in tables:
        total = total + fingerprint(t)
    return total


__all__ = ["NULL_HASH", "Fingerprint", "empty_fingerprint", "fingerprint", "fingerprint_arrays",
           "fingerprint_tables", "row_differences", "same_values", "value_hashes"]
