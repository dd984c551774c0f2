"""Reading the deletion vector of a data file through the table's store.

The format is decoded by the pure ``log.deletion_vectors``; this module only fetches the bytes:
inline DVs from the descriptor, ``'u'`` DVs from ``[<prefix>/]deletion_vector_<uuid>.bin`` under
the table root, ``'p'`` DVs from their absolute path (outside the table only when the caller
allows external paths, as for data files).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from deltacommit.errors import (
    CorruptLogError,
    NotARegularFileError,
    ObjectNotFoundError,
    StorageError,
)
from deltacommit.io.datafiles import open_data_file
from deltacommit.io.storage.base import ObjectStore
from deltacommit.io.storage.local import open_regular
from deltacommit.protocol.deletion_vectors import (
    DeletionVectorDescriptor,
    check_descriptor,
    decode_bitmap_array,
    deleted_bits,
    deleted_mask,
    extract_from_file,
    extract_segment,
)
from deltacommit.protocol.log.paths import Location, deletion_vector_path, locate_data_file


def dv_file_path(dv: DeletionVectorDescriptor) -> str | None:
    """The DV file of ``dv`` as an ``add.path``-style reference (None for inline DVs): the
    one spelling VACUUM resolves too (``log.paths.deletion_vector_path``)."""
    return deletion_vector_path(dv.to_json())


def deleted_rows(store: ObjectStore, root: Location, table: str, descriptor: Mapping[str, Any],
                 *, data_file: str, num_rows: int,
                 storage_options: Mapping[str, str] | None = None,
                 allow_external: bool = False) -> npt.NDArray[np.uint64]:
    """Sorted indexes of the rows that ``descriptor`` deletes from ``data_file`` (of
    ``num_rows`` rows, which bound what is read and decoded)."""
    dv, data, what = _bitmap_bytes(store, root, table, descriptor, data_file=data_file,
                                   num_rows=num_rows, storage_options=storage_options,
                                   allow_external=allow_external)
    rows = decode_bitmap_array(data, what, num_rows=num_rows)
    _check_cardinality(dv, len(rows), what)
    return rows


def kept_rows(store: ObjectStore, root: Location, table: str, descriptor: Mapping[str, Any],
              *, data_file: str, num_rows: int, storage_options: Mapping[str, str] | None = None,
              allow_external: bool = False) -> pa.BooleanArray:
    """An Arrow mask of the ``num_rows`` rows of ``data_file``, False at each row that
    ``descriptor`` deletes: the DV's bitmap containers become the mask's bits as they are."""
    dv, data, what = _bitmap_bytes(store, root, table, descriptor, data_file=data_file,
                                   num_rows=num_rows, storage_options=storage_options,
                                   allow_external=allow_external)
    deleted, count = deleted_bits(data, num_rows, what)
    _check_cardinality(dv, count, what)
    keep = np.invert(deleted)
    if num_rows % 8:
        keep[-1] &= (1 << num_rows % 8) - 1  # padding bits clear, as Arrow's builders leave them
    return cast(pa.BooleanArray, pa.BooleanArray.from_buffers(
        pa.bool_(), num_rows, [None, pa.py_buffer(keep.data)]))


def _check_cardinality(dv: DeletionVectorDescriptor, count: int, what: str) -> None:
    if count != dv.cardinality:
        raise CorruptLogError(f"{what}: holds {count} rows, its descriptor says "
                              f"{dv.cardinality}")


def _bitmap_bytes(store: ObjectStore, root: Location, table: str, descriptor: Mapping[str, Any],
                  *, data_file: str, num_rows: int, storage_options: Mapping[str, str] | None,
                  allow_external: bool) -> tuple[DeletionVectorDescriptor, bytes, str]:
    """The descriptor, the serialised bitmap it points at (checked against its size and
    CRC-32) and how errors name it.

    The descriptor is checked against the data file's ``num_rows`` and the DV file's size
    before a byte is read: ``sizeInBytes`` decides how much is read, and a forged one must
    not make the reader allocate it."""

    what = f"table {table}: deletion vector of {data_file}"
    dv = DeletionVectorDescriptor.from_json(dict(descriptor), what)
    path = dv_file_path(dv)
    check_descriptor(dv, num_rows, f"{what} ({dv.storage_type}{dv.path_or_inline_dv})"
                     if path is None else f"{what} ({path})")
    if path is None:
        return dv, dv.inline_bytes(), what
    resolved = locate_data_file(root, path, table=table, allow_external=allow_external)
    where = (f"{table}/{resolved.relative}" if resolved.relative is not None
             else resolved.location.uri())
    what = f"table {table}: deletion vector file {where} (of {data_file})"
    try:
        source, _ = open_data_file(store, resolved, storage_options)
        if isinstance(source, str):
            # A local DV file may hold the DVs of many data files: read only this one.
            # Opened as a regular file only (``open_regular``): a FIFO in its place is
            # refused, not waited on.
            try:
                fd, st = open_regular(source, "read", follow_link=True)
            except NotARegularFileError as e:
                raise CorruptLogError(f"{what}: {e.detail}; it is not read") from None
            with open(fd, "rb") as f:
                file_size = st.st_size
                if (dv.offset or 0) + 8 + dv.size_in_bytes > file_size:
                    raise CorruptLogError(
                        f"{what}: the deletion vector at offset {dv.offset or 0} of "
                        f"{dv.size_in_bytes} bytes ends past the end of the file "
                        f"({file_size} bytes)")
                version = f.read(1)
                f.seek(dv.offset or 0)
                segment = f.read(8 + dv.size_in_bytes)
            content = None
        else:
            with source:
                content = source.read()
    except (ObjectNotFoundError, FileNotFoundError):
        raise StorageError("read", where, f"deletion vector of data file {data_file} is "
                                          "missing") from None
    except (pa.ArrowInvalid, OSError) as e:
        raise CorruptLogError(f"{what}: cannot read it: {e}") from None
    if content is not None:
        return dv, extract_from_file(content, dv, what), what
    if not version:
        raise CorruptLogError(f"{what}: the file is empty")
    return dv, extract_segment(version[0], segment, dv, what), what


def keep_mask(rows: npt.NDArray[np.uint64], num_rows: int, what: str) -> pa.BooleanArray:
    """An Arrow mask, False at each deleted row of a file of ``num_rows`` rows."""

    return pa.array(~deleted_mask(rows, num_rows, what), pa.bool_())
