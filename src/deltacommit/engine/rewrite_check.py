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

import pyarrow as pa

from deltacommit.engine.scan import FileScan
from deltacommit.errors import DeltaCommitError, RewriteCheckError
from deltacommit.io.datafiles import delete_files
from deltacommit.io.storage.base import ObjectStore
from deltacommit.protocol.actions import Add
from deltacommit.protocol.fingerprint import row_differences


def check_rewritten(scan: FileScan, store: ObjectStore, expected: pa.Table,
                    written: Sequence[Add], *, what: str,
                    read_back: Callable[[Sequence[Add]], pa.Table] | None = None) -> None:
    """RewriteCheckError, after deleting ``written`` from ``store``, unless the files
    ``written`` read back (through ``scan``, or ``read_back``) hold exactly the rows of
    ``expected``.  ``what`` names the rewrite and its input for the message."""
    try:
        found = (read_back or scan.read_many)(written) if written else \
            expected.schema.empty_table()
    except DeltaCommitError as e:
        delete_files(store, written)
        raise RewriteCheckError(
            f"{what}: the files written cannot be read back ({e}); they were deleted and "
            "nothing was committed") from None
    problems = row_differences(expected, found)
    if problems:
        delete_files(store, written)
        raise RewriteCheckError(
            f"{what}: the files written hold {'; '.join(problems)}, not the rows read from "
            f"the input; the {len(written)} files written were deleted and nothing was "
            "committed")


__all__ = ["check_rewritten"]
