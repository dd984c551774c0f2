"""Reading the deletion vector of a data file through the table's store.

The format is decoded by the pure ``log.deletion_vectors``; this module only fetches the bytes:
inline DVs from the descriptor, ``'u'`` DVs from ``[<prefix>/]deletion_vector_<uuid>.bin`` under
the table root, ``'p'`` DVs from their absolute path (outside the table only when the caller
allows external paths, as for data files).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from deltacommit.errors import CorruptLogError, ObjectNotFoundError, StorageError
from deltacommit.log.deletion_vectors import (
    DeletionVectorDescriptor,
    decode_bitmap_array,
    extract_from_file,
    extract_segment,
)
from deltacommit.log.paths import Location, locate_data_file
from deltacommit.storage.base import ObjectStore


def dv_file_path(dv: DeletionVectorDescriptor) -> str | None:
    """The DV file of ``dv`` as an ``add.path``-style reference (None for inline DVs)."""
    rel = dv.relative_path()
    if rel is not None:
        return quote(rel, safe="/")
    return dv.absolute_path()


def deleted_rows(store: ObjectStore, root: Location, table: str, descriptor: Mapping[str, Any],
                 *, data_file: str, storage_options: Mapping[str, str] | None = None,
                 allow_external: bool = False) -> npt.NDArray[np.uint64]:
    """Sorted indexes of the rows that ``descriptor`` deletes from ``data_file``."""
    from deltacommit.datafiles import open_data_file

    what = f"table {table}: deletion vector of {data_file}"
    dv = DeletionVectorDescriptor.from_json(dict(descriptor), what)
    path = dv_file_path(dv)
    if path is None:
        data = dv.inline_bytes()
    else:
        resolved = locate_data_file(root, path, table=table, allow_external=allow_external)
        where = (f"{table}/{resolved.relative}" if resolved.relative is not None
                 else resolved.location.uri())
        what = f"table {table}: deletion vector file {where} (of {data_file})"
        try:
            source, _ = open_data_file(store, resolved, storage_options)
            if isinstance(source, str):
                # A local DV file may hold the DVs of many data files: read only this one.
                with open(source, "rb") as f:
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
            data = extract_from_file(content, dv, what)
        else:
            if not version:
                raise CorruptLogError(f"{what}: the file is empty")
            data = extract_segment(version[0], segment, dv, what)
    rows = decode_bitmap_array(data, what)
    if len(rows) != dv.cardinality:
        raise CorruptLogError(f"{what}: holds {len(rows)} rows, its descriptor says "
                              f"{dv.cardinality}")
    return rows


def keep_mask(rows: npt.NDArray[np.uint64], num_rows: int, what: str) -> pa.BooleanArray:
    """An Arrow mask, False at each deleted row of a file of ``num_rows`` rows."""
    from deltacommit.log.deletion_vectors import deleted_mask

    return pa.array(~deleted_mask(rows, num_rows, what), pa.bool_())
