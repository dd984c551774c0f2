"""A rewrite proves its output before it commits it.

Compaction, Z-order (in this process or in Spark tasks) and row-level deletes replace files
with files they wrote.  A bug anywhere between reading and writing (a schema narrowed, a
row dropped or duplicated, a deletion vector that marks other rows) would otherwise be
committed and become the table's data.  So each rewrite reads what it wrote back through the
one data-file reader and compares it with the rows it should hold (``fingerprint``: the same
multiset of rows, in any order).  On a mismatch the files written are deleted, nothing is
committed, and ``RewriteCheckError`` names the table, the input and what differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import pyarrow as pa

from deltacommit.engine.scan import FileScan
from deltacommit.errors import DeltaCommitError, RewriteCheckError
from deltacommit.io.datafiles import delete_files
from deltacommit.io.dictionary_columns import plain_table
from deltacommit.io.storage.base import ObjectStore
from deltacommit.protocol.actions import Add
from deltacommit.protocol.fingerprint import row_differences, same_values
from deltacommit.protocol.partitions import decode_add_path


def check_rewritten(scan: FileScan, store: ObjectStore, expected: pa.Table,
                    written: Sequence[Add], *, what: str,
                    read_back: Callable[[Sequence[Add]], pa.Table] | None = None) -> None:
    """RewriteCheckError, after deleting ``written`` from ``store``, unless the files
    ``written`` read back (through ``scan``, or ``read_back``) hold exactly the rows of
    ``expected``.  ``what`` names the rewrite and its input for the message.

    Files written without waiting for their upload (``write_data_file(durable=False)``:
    the row-level rewrite) are read back only once their upload has ended: read at once, a
    GET could overtake its PUT and find no file."""
    try:
        store.await_puts([decode_add_path(a.path) for a in written])
        if read_back is None and len(written) == 1 and _equal_in_order(scan, expected,
                                                                      written[0]):
            return
        found = (read_back or scan.read_many)(written) if written else \
            expected.schema.empty_table()
    except DeltaCommitError as e:
        delete_files(store, written)
        raise RewriteCheckError(
            f"{what}: the files written cannot be read back ({e}); they were deleted and "
            "nothing was committed") from None
    # Dictionary columns (a rewrite that kept them, a scan that reads them so) as values.
    problems = row_differences(plain_table(expected), plain_table(found))
    if problems:
        delete_files(store, written)
        raise RewriteCheckError(
            f"{what}: the files written hold {'; '.join(problems)}, not the rows read from "
            f"the input; the {len(written)} files written were deleted and nothing was "
            "committed")


#: Rows of a file read back at a time when it is compared in order (``_equal_in_order``).
CHECK_BATCH_ROWS = 1 << 20


def _equal_in_order(scan: FileScan, expected: pa.Table, written: Add) -> bool:
    """Whether the one file ``written`` reads back (through ``scan``) as exactly the rows of
    ``expected`` in their order: the common case (a rewrite writes its rows in the order it
    made them), compared a batch of ``CHECK_BATCH_ROWS`` at a time instead of holding a
    second copy of every row.  Dictionary columns with the same dictionary are compared by
    their indices, others by their values.  False (the caller then compares as multisets) at the first
    difference of any kind, NaN included, since Arrow's equality does not take NaN as equal
    to itself; a zero of the other sign is a difference (``same_values``), as the
    fingerprints take it, though Arrow's equality does not."""
    streamed = replace(scan, batch_rows=CHECK_BATCH_ROWS)
    at = 0
    for batch in streamed.batches(written.path, written.partition_values,
                                  written.deletion_vector):
        n = batch.num_rows
        if at + n > expected.num_rows:
            return False
        got, want = pa.Table.from_batches([batch]), expected.slice(at, n)
        if not (got.schema.equals(want.schema) and same_values(got, want)):
            # A dictionary column (kept by the rewrite, or read back as one) is compared as
            # its values where the dictionaries or the encodings differ.
            got, want = plain_table(got), plain_table(want)
            if not (got.schema.equals(want.schema) and same_values(got, want)):
                return False
        at += n
    return at == expected.num_rows


__all__ = ["check_rewritten"]
