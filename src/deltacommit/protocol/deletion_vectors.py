"""Deletion vectors: descriptors, Z85, the RoaringBitmapArray format and DV files.  Pure: no I/O.

A deletion vector (PROTOCOL.md "Deletion Vectors", "Deletion Vector Format") marks rows of a
data file as deleted without rewriting it.  An ``add`` or ``remove`` action carries a descriptor:

- ``storageType`` ``'u'``: ``pathOrInlineDv`` is an optional random prefix followed by a
  20-character Z85-encoded UUID; the DV lives at ``<prefix>/deletion_vector_<uuid>.bin``
  relative to the table root.
- ``'i'``: ``pathOrInlineDv`` is the Z85-encoded bitmap itself (``sizeInBytes`` raw bytes).
- ``'p'``: ``pathOrInlineDv`` is an absolute path (same form as ``add.path``).

A DV file is a version byte (1), then for each DV at its ``offset``: a big-endian 4-byte size,
the bitmap bytes and a big-endian CRC-32 of them.  The bitmap ("RoaringBitmapArray") is the
magic number 1681511377, then the 64-bit portable Roaring format: a little-endian 8-byte count
of buckets, and per bucket a 4-byte key (the high 32 bits) and a standard 32-bit Roaring bitmap
(array, bitmap and run containers).  Readers here turn it into sorted row indexes or a mask;
the encoder writes array and bitmap containers only, which every reader accepts.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from deltacommit.errors import CorruptLogError

if TYPE_CHECKING:  # at run time the aliases below spell out numpy.typing's, not imported
    import numpy.typing as npt

MAGIC = 1681511377
NATIVE_MAGIC = 1681511376
FILE_FORMAT_VERSION = 1
_SERIAL_COOKIE_NO_RUN = 12346
_SERIAL_COOKIE = 12347
_NO_OFFSET_THRESHOLD = 4
_ARRAY_MAX = 4096
_UUID_CHARS = 20

Z85_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(Z85_ALPHABET)}

RowIndexes = np.ndarray[Any, np.dtype[np.uint64]]


# --------------------------------------------------------------------------- Z85


def z85_decode(text: str) -> bytes:
    """The bytes of a Z85 string (its length a multiple of 5)."""
    if len(text) % 5:
        raise CorruptLogError(f"Z85 text {text!r} has {len(text)} characters, not a multiple of 5")
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for c in text[i:i + 5]:
            digit = _Z85_INDEX.get(c)
            if digit is None:
                raise CorruptLogError(f"Z85 text {text!r} holds {c!r}, not a Z85 character")
            value = value * 85 + digit
        if value > 0xFFFFFFFF:
            raise CorruptLogError(f"Z85 text {text!r} encodes a value beyond 32 bits")
        out += value.to_bytes(4, "big")
    return bytes(out)


def z85_encode(data: bytes) -> str:
    """Z85 of ``data``, zero-padded to a multiple of 4 bytes (the size is recorded elsewhere)."""
    if len(data) % 4:
        data = data + b"\0" * (4 - len(data) % 4)
    out: list[str] = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i:i + 4], "big")
        chunk = []
        for _ in range(5):
            value, digit = divmod(value, 85)
            chunk.append(Z85_ALPHABET[digit])
        out.extend(reversed(chunk))
    return "".join(out)


# --------------------------------------------------------------------------- descriptor


@dataclass(frozen=True, slots=True)
class DeletionVectorDescriptor:
    """An ``add.deletionVector`` / ``remove.deletionVector``."""

    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None
    max_row_index: int | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any], source: str = "") -> DeletionVectorDescriptor:
        try:
            dv = cls(storage_type=str(d["storageType"]),
                     path_or_inline_dv=str(d["pathOrInlineDv"]),
                     size_in_bytes=int(d["sizeInBytes"]), cardinality=int(d["cardinality"]),
                     offset=None if d.get("offset") is None else int(d["offset"]),
                     max_row_index=None if d.get("maxRowIndex") is None else int(d["maxRowIndex"]))
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptLogError(f"{source or 'deletion vector'}: bad descriptor {d!r}: {e}") from None
        if dv.storage_type not in ("u", "i", "p"):
            raise CorruptLogError(f"{source or 'deletion vector'}: storageType "
                                  f"{dv.storage_type!r} is not 'u', 'i' or 'p'")
        if dv.size_in_bytes < 0 or dv.cardinality < 0 or (dv.offset or 0) < 0:
            raise CorruptLogError(f"{source or 'deletion vector'}: negative size, cardinality "
                                  f"or offset in {d!r}")
        if dv.storage_type == "u" and len(dv.path_or_inline_dv) < _UUID_CHARS:
            raise CorruptLogError(f"{source or 'deletion vector'}: relative DV "
                                  f"{dv.path_or_inline_dv!r} is shorter than a Z85 UUID")
        return dv

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"storageType": self.storage_type,
                               "pathOrInlineDv": self.path_or_inline_dv}
        if self.offset is not None:
            out["offset"] = self.offset
        out["sizeInBytes"] = self.size_in_bytes
        out["cardinality"] = self.cardinality
        if self.max_row_index is not None:
            out["maxRowIndex"] = self.max_row_index
        return out

    @property
    def unique_id(self) -> str:
        """``<storageType><pathOrInlineDv>[@<offset>]``: what tells two DVs of a file apart."""
        base = self.storage_type + self.path_or_inline_dv
        return base if self.offset is None else f"{base}@{self.offset}"

    @property
    def is_inline(self) -> bool:
        return self.storage_type == "i"

    def relative_path(self) -> str | None:
        """For ``'u'``: ``[<prefix>/]deletion_vector_<uuid>.bin``, relative to the table root."""
        if self.storage_type != "u":
            return None
        prefix = self.path_or_inline_dv[:-_UUID_CHARS]
        uid = uuid.UUID(bytes=z85_decode(self.path_or_inline_dv[-_UUID_CHARS:]))
        name = f"deletion_vector_{uid}.bin"
        return f"{prefix}/{name}" if prefix else name

    def absolute_path(self) -> str | None:
        """For ``'p'``: the path as written (a URI, like ``add.path``)."""
        return self.path_or_inline_dv if self.storage_type == "p" else None

    def inline_bytes(self) -> bytes:
        if self.storage_type != "i":
            raise ValueError("not an inline deletion vector")
        data = z85_decode(self.path_or_inline_dv)
        if len(data) < self.size_in_bytes:
            raise CorruptLogError(f"inline deletion vector holds {len(data)} bytes, its "
                                  f"descriptor says {self.size_in_bytes}")
        return data[:self.size_in_bytes]


def relative_dv_path_or_inline(prefix: str, uid: uuid.UUID) -> str:
    """``pathOrInlineDv`` of a ``'u'`` DV stored at ``[<prefix>/]deletion_vector_<uid>.bin``."""
    return prefix + z85_encode(uid.bytes)


def dv_unique_id(d: dict[str, Any] | None) -> str | None:
    """The unique id of a JSON descriptor (None when there is none)."""
    if not d:
        return None
    base = f"{d.get('storageType', '')}{d.get('pathOrInlineDv', '')}"
    return base if d.get("offset") is None else f"{base}@{d['offset']}"


# --------------------------------------------------------------------------- DV files


def extract_from_file(blob: bytes, dv: DeletionVectorDescriptor, source: str) -> bytes:
    """The bitmap bytes of ``dv`` in the content of its DV file, version, size and CRC-32 checked."""
    if not blob:
        raise CorruptLogError(f"{source}: deletion vector file format version None, expected "
                              f"{FILE_FORMAT_VERSION}")
    offset = dv.offset or 0
    return extract_segment(blob[0], blob[offset:offset + 8 + dv.size_in_bytes], dv, source,
                           file_size=len(blob))


def extract_segment(version: int, segment: bytes, dv: DeletionVectorDescriptor, source: str,
                    *, file_size: int | None = None) -> bytes:
    """The bitmap bytes of ``dv`` from the file's version byte and the ``8 + sizeInBytes``
    bytes at its offset (size, bitmap, CRC-32): a reader of one DV of a shared file need not
    read the others."""
    offset = dv.offset or 0
    if version != FILE_FORMAT_VERSION:
        raise CorruptLogError(f"{source}: deletion vector file format version {version}, "
                              f"expected {FILE_FORMAT_VERSION}")
    head = segment[:4]
    if len(head) < 4:
        where = f" ({file_size} bytes)" if file_size is not None else ""
        raise CorruptLogError(f"{source}: deletion vector at offset {offset} is past the end "
                              f"of the file{where}")
    size = int.from_bytes(head, "big")
    if size != dv.size_in_bytes:
        raise CorruptLogError(f"{source}: deletion vector at offset {offset} has {size} bytes, "
                              f"its descriptor says {dv.size_in_bytes}")
    data = segment[4:4 + size]
    crc = segment[4 + size:8 + size]
    if len(data) != size or len(crc) != 4:
        raise CorruptLogError(f"{source}: deletion vector at offset {offset} is truncated")
    if zlib.crc32(data) != int.from_bytes(crc, "big"):
        raise CorruptLogError(f"{source}: deletion vector at offset {offset} fails its CRC-32 "
                              "checksum")
    return data


def encode_file(bitmaps: list[bytes]) -> tuple[bytes, list[int]]:
    """A DV file holding ``bitmaps`` (serialised RoaringBitmapArrays) and their offsets."""
    out = bytearray([FILE_FORMAT_VERSION])
    offsets = []
    for data in bitmaps:
        offsets.append(len(out))
        out += len(data).to_bytes(4, "big") + data + zlib.crc32(data).to_bytes(4, "big")
    return bytes(out), offsets


# --------------------------------------------------------------------------- bitmaps


class _Cursor:
    def __init__(self, data: bytes, source: str) -> None:
        self.data = data
        self.pos = 0
        self.source = source

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptLogError(f"{self.source}: deletion vector bitmap is truncated "
                                  f"(needs {n} bytes at {self.pos} of {len(self.data)})")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> tuple[int, ...]:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))


#: A container: its key (bits 16-31 of its values) and its low 16 bits, as an array of them
#: (``"array"``), as runs of (start, length - 1) pairs (``"runs"``) or as 8192 bytes of
#: little-endian bits (``"bitmap"``).
_Container = tuple[int, str, np.ndarray[Any, np.dtype[Any]]]


def _containers(cur: _Cursor) -> Iterator[_Container]:
    """The containers of one portable 32-bit Roaring bitmap (RoaringFormatSpec), in order."""
    (cookie,) = cur.unpack("<I")
    if cookie & 0xFFFF == _SERIAL_COOKIE:
        n = (cookie >> 16) + 1
        run_flags = np.unpackbits(np.frombuffer(cur.take((n + 7) // 8), np.uint8),
                                  bitorder="little")[:n].astype(bool)
        has_offsets = n >= _NO_OFFSET_THRESHOLD
    elif cookie == _SERIAL_COOKIE_NO_RUN:
        (n,) = cur.unpack("<I")
        run_flags = np.zeros(n, bool)
        has_offsets = True
    else:
        raise CorruptLogError(f"{cur.source}: deletion vector bitmap has Roaring cookie "
                              f"{cookie}, expected {_SERIAL_COOKIE_NO_RUN} or {_SERIAL_COOKIE}")
    header = np.frombuffer(cur.take(4 * n), "<u2").reshape(n, 2) if n else np.zeros((0, 2), "<u2")
    if has_offsets:
        cur.take(4 * n)  # container offsets: containers follow in order anyway
    for i in range(n):
        key = int(header[i, 0])
        card = int(header[i, 1]) + 1
        if run_flags[i]:
            (runs,) = cur.unpack("<H")
            pairs = np.frombuffer(cur.take(4 * runs), "<u2").reshape(runs, 2).astype(np.int64)
            if runs and int((pairs[:, 0] + pairs[:, 1]).max()) > 0xFFFF:
                raise CorruptLogError(f"{cur.source}: deletion vector bitmap has a run past "
                                      "the end of its container")
            yield key, "runs", pairs
        elif card <= _ARRAY_MAX:
            yield key, "array", np.frombuffer(cur.take(2 * card), "<u2")
        else:
            yield key, "bitmap", np.frombuffer(cur.take(8192), np.uint8)


def _container_bits(kind: str, body: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    """A container as 8192 bytes of little-endian bits."""
    if kind == "bitmap":
        return body
    if kind == "array":
        bits = np.zeros(65536, bool)
        bits[body] = True
    else:
        # +1 at each run's start, -1 past its end: a position is set where the sum is positive.
        edges = np.zeros(65537, np.int32)
        np.add.at(edges, body[:, 0], 1)
        np.add.at(edges, body[:, 0] + body[:, 1] + 1, -1)
        bits = np.cumsum(edges[:65536]) > 0
    return np.packbits(bits, bitorder="little")


def _bitmap_array(data: bytes, source: str) -> tuple[_Cursor, Iterator[int]]:
    """A cursor at the first bucket of a serialised RoaringBitmapArray (magic number first)
    and its buckets' keys (the high 32 bits of their values), each read as it is reached:
    the bucket's 32-bit bitmap follows at the cursor."""
    cur = _Cursor(data, source)
    (magic,) = cur.unpack("<i")
    if magic == MAGIC:
        (buckets,) = cur.unpack("<Q")
        return cur, _bucket_keys(cur, buckets, "<I", len(data))
    if int.from_bytes(data[:4], "big") == NATIVE_MAGIC:
        # The older "native" layout (PROTOCOL.md's inline example): big-endian magic and
        # count, then for bucket i (key i) its big-endian size and a portable 32-bit bitmap.
        (buckets,) = cur.unpack(">i")
        return cur, _bucket_keys(cur, buckets, ">I", len(data), native=True)
    raise CorruptLogError(f"{source}: deletion vector magic number {magic}, expected {MAGIC}")


def _bucket_keys(cur: _Cursor, buckets: int, key_format: str, size: int, native: bool = False
                 ) -> Iterator[int]:
    if not 0 <= buckets <= size:
        raise CorruptLogError(f"{cur.source}: deletion vector claims {buckets} buckets in "
                              f"{size} bytes")
    for i in range(buckets):
        (key,) = cur.unpack(key_format)
        # A native bucket's key is its index; what was read is its size (the bitmap parses
        # itself).
        yield i if native else key


#: A container of a whole RoaringBitmapArray: the value of its first possible row (bucket key
#: and container key), its kind and its body (as ``_Container``).
_Placed = tuple[int, str, np.ndarray[Any, np.dtype[Any]]]


def _last_bit(body: npt.NDArray[np.uint8]) -> int | None:
    """The highest set bit of a bitmap container's 8192 bytes (None if none is set)."""
    nz = np.flatnonzero(body)
    if not len(nz):
        return None
    byte = int(nz[-1])
    return byte * 8 + int(body[byte]).bit_length() - 1


def _checked_containers(data: bytes, num_rows: int, source: str) -> tuple[list[_Placed], int]:
    """The containers of a serialised RoaringBitmapArray, each checked before any is
    expanded, and how many rows they hold together.

    Expanding a container costs memory in proportion to the rows it covers, not to its bytes:
    a run covers up to 65536 rows in 4 bytes.  So every container must lie inside the file's
    ``num_rows`` rows, after the one before it (keys strictly increasing), with its values
    strictly increasing (sorted, non-overlapping runs).  Then the rows they hold are distinct
    rows of the file: decoding them can never take more than ``num_rows`` values, whatever the
    bytes say.
    """
    cur, keys = _bitmap_array(data, source)
    out: list[_Placed] = []
    total = 0
    previous = -1
    for key in keys:
        if not 0 <= key < 2**31:
            raise CorruptLogError(f"{source}: deletion vector has bucket key {key}, beyond the "
                                  "row indexes a file can have")
        for low_key, kind, body in _containers(cur):
            base = (key << 32) | (low_key << 16)
            if base <= previous:
                raise CorruptLogError(f"{source}: deletion vector holds its containers out of "
                                      f"order (the one for rows from {base} follows the one "
                                      f"for rows from {previous})")
            previous = base
            last: int | None
            if kind == "array":
                if len(body) > 1 and not bool(np.all(body[1:] > body[:-1])):
                    raise CorruptLogError(f"{source}: deletion vector has an array container "
                                          f"(rows from {base}) that is not strictly increasing")
                count, last = len(body), (int(body[-1]) if len(body) else None)
            elif kind == "runs":
                ends = body[:, 0] + body[:, 1]
                if len(body) > 1 and not bool(np.all(body[1:, 0] > ends[:-1])):
                    raise CorruptLogError(f"{source}: deletion vector has a run container (rows "
                                          f"from {base}) whose runs overlap or are out of order")
                count = int((body[:, 1] + 1).sum())
                last = int(ends[-1]) if len(body) else None
            else:
                count = int(_POPCOUNT[body].sum(dtype=np.int64))
                last = _last_bit(body)
            if last is not None and base + last >= num_rows:
                raise CorruptLogError(f"{source}: deletes row {base + last} of a file of "
                                      f"{num_rows} rows")
            total += count
            out.append((base, kind, body))
    return out, total


def _container_values(kind: str, body: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """The low 16 bits of a checked container's values, sorted."""
    if kind == "runs":
        lengths = body[:, 1] + 1
        starts = np.repeat(body[:, 0] - np.concatenate(([0], np.cumsum(lengths)[:-1])),
                           lengths)
        values: npt.NDArray[np.int64] = starts + np.arange(int(lengths.sum()))
        return values
    if kind == "array":
        return body.astype(np.int64)
    return np.flatnonzero(np.unpackbits(body, bitorder="little")).astype(np.int64)


def decode_bitmap_array(data: bytes, source: str = "deletion vector", *,
                        num_rows: int) -> RowIndexes:
    """Sorted row indexes of a serialised RoaringBitmapArray (magic number first) of a file
    of ``num_rows`` rows; every container is checked to lie inside the file before any is
    expanded, so the result never holds more than ``num_rows`` values."""
    containers, count = _checked_containers(data, num_rows, source)
    out = np.empty(count, np.uint64)
    at = 0
    for base, kind, body in containers:
        values = _container_values(kind, body)
        out[at:at + len(values)] = values.astype(np.uint64) + np.uint64(base)
        at += len(values)
    return out


_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], np.uint8)


def deleted_bits(data: bytes, num_rows: int, source: str = "deletion vector"
                 ) -> tuple[npt.NDArray[np.uint8], int]:
    """The rows a serialised RoaringBitmapArray deletes from a file of ``num_rows`` rows as
    Arrow lays out a boolean array (bit ``i % 8`` of byte ``i // 8`` for row ``i``), and how
    many rows that is.

    A bitmap container already is that layout for its 65536 rows, so a scan's mask is made
    without listing the deleted rows (``decode_bitmap_array``).  The containers are checked
    to lie inside the file first (``_checked_containers``)."""
    containers, count = _checked_containers(data, num_rows, source)
    size = -(-num_rows // 8)
    out = np.zeros(-(-num_rows // 65536) * 8192, np.uint8)
    for base, kind, body in containers:
        block = out[base >> 3:(base >> 3) + 8192]
        np.bitwise_or(block, _container_bits(kind, body), out=block)
    return out[:size], count


def max_serialized_size(num_rows: int) -> int:
    """The most bytes a RoaringBitmapArray of rows of a file of ``num_rows`` rows can take:
    per container (one per 65536 rows) a header, an offset and the larger of a bitmap (8192
    bytes) and an array or runs of its rows (2 bytes a row, 4 a run of at least 2 rows), per
    bucket (one per 2^32 rows) its key, count and size.  A descriptor claiming more is not one
    of this file, and nothing that large is read for it."""
    containers = max(1, -(-num_rows // 65536))
    buckets = max(1, -(-num_rows // 2**32))
    return 12 + 16 * buckets + containers * (8 + 1 + 8192 + 4) + 2 * num_rows


def check_descriptor(dv: DeletionVectorDescriptor, num_rows: int, source: str) -> None:
    """Refuse a descriptor that cannot belong to a file of ``num_rows`` rows, before anything
    it points at is read: more rows deleted than the file has, a highest row past its end, or
    more bytes than any bitmap of its rows takes."""
    if dv.cardinality > num_rows:
        raise CorruptLogError(f"{source}: deletes {dv.cardinality} rows of a file of "
                              f"{num_rows} rows")
    if dv.max_row_index is not None and dv.max_row_index >= num_rows:
        raise CorruptLogError(f"{source}: its maxRowIndex {dv.max_row_index} is past the end "
                              f"of a file of {num_rows} rows")
    bound = max_serialized_size(num_rows)
    if dv.size_in_bytes > bound:
        raise CorruptLogError(f"{source}: sizeInBytes {dv.size_in_bytes} is more than a "
                              f"deletion vector of a file of {num_rows} rows can take "
                              f"({bound} bytes); nothing was read")


def encode_bitmap_array(rows: Any) -> bytes:
    """A serialised RoaringBitmapArray of the row indexes ``rows`` (any order, no negatives).

    Containers are arrays up to 4096 values and bitmaps above, without run containers, in the
    no-run layout with container offsets, as the Java library writes before ``runOptimize``.
    """
    values = np.unique(np.asarray(rows, dtype=np.uint64))
    out = bytearray(struct.pack("<i", MAGIC))
    highs = (values >> np.uint64(32)).astype(np.uint64)
    keys, starts = np.unique(highs, return_index=True)
    bounds = list(starts) + [len(values)]
    out += struct.pack("<Q", len(keys))
    for i, key in enumerate(keys):
        if int(key) >= 2**31:
            raise ValueError(f"row index {int(key) << 32} is beyond what a deletion vector holds")
        low = (values[bounds[i]:bounds[i + 1]] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        out += struct.pack("<I", int(key))
        out += _encode_roaring32(low)
    return bytes(out)


def _encode_roaring32(values: npt.NDArray[np.uint32]) -> bytes:
    hi = (values >> np.uint32(16)).astype(np.uint16)
    keys, starts = np.unique(hi, return_index=True)
    bounds = list(starts) + [len(values)]
    n = len(keys)
    header = bytearray(struct.pack("<II", _SERIAL_COOKIE_NO_RUN, n))
    bodies: list[bytes] = []
    for i, key in enumerate(keys):
        low = (values[bounds[i]:bounds[i + 1]] & np.uint32(0xFFFF)).astype("<u2")
        header += struct.pack("<HH", int(key), len(low) - 1)
        if len(low) <= _ARRAY_MAX:
            bodies.append(low.tobytes())
        else:
            bits = np.zeros(65536, np.uint8)
            bits[low] = 1
            bodies.append(np.packbits(bits, bitorder="little").tobytes())
    offset = len(header) + 4 * n
    for body in bodies:
        header += struct.pack("<I", offset)
        offset += len(body)
    return bytes(header) + b"".join(bodies)


def deleted_mask(rows: RowIndexes, num_rows: int, source: str = "deletion vector"
                 ) -> npt.NDArray[np.bool_]:
    """A boolean array, True at each deleted row of a file of ``num_rows`` rows."""
    if len(rows) and int(rows[-1]) >= num_rows:
        raise CorruptLogError(f"{source}: deletes row {int(rows[-1])} of a file of {num_rows} rows")
    mask = np.zeros(num_rows, bool)
    mask[rows.astype(np.int64)] = True
    return mask


__all__ = [
    "MAGIC",
    "DeletionVectorDescriptor",
    "decode_bitmap_array",
    "deleted_bits",
    "deleted_mask",
    "dv_unique_id",
    "encode_bitmap_array",
    "encode_file",
    "extract_from_file",
    "relative_dv_path_or_inline",
    "z85_decode",
    "z85_encode",
]
