"""Rows marked deleted by deletion vectors, proven before anything is committed.

A row-level DELETE, and UPDATE and MERGE on a table that allows deletion vectors, keep the
Parquet files whose rows they change: each such file's ``add`` is committed again with a
deletion vector marking the rows gone (the union of the old and the new ones), all new
vectors in one ``deletion_vector_<uuid>.bin`` at the table root, as Spark writes them
(``write_deletion_vectors``).  Before that is committed, ``check_output`` reads each new
vector back from the file just written and proves it leaves exactly the rows that should
stay; otherwise the vector file is deleted and ``RewriteCheckError`` says so.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Protocol as Interface

import pyarrow as pa

from deltacommit.engine.commit.row_rebase import wide_stats
from deltacommit.errors import RewriteCheckError
from deltacommit.io.deletion_vectors import kept_rows
from deltacommit.protocol.actions import Add
from deltacommit.protocol.deletion_vectors import encode_file, relative_dv_path_or_inline
from deltacommit.protocol.fingerprint import row_differences
from deltacommit.protocol.log.paths import parse_location

if TYPE_CHECKING:
    from deltacommit.io.logstore.base import LogStore
    from deltacommit.io.storage.base import ObjectStore


def write_deletion_vectors(store: ObjectStore, kept: Sequence[tuple[Add, bytes, int]]
                           ) -> tuple[list[Add], str | None]:
    """Each file of ``kept`` (its add as read, its new deletion vector's bitmap, the rows that
    marks) committed again with that deletion vector: the new adds, and the one
    ``deletion_vector_<uuid>.bin`` at the table root holding every bitmap (as Spark writes
    them; None when ``kept`` is empty).  A row-level DELETE, UPDATE and MERGE mark rows so."""
    if not kept:
        return [], None
    content, offsets = encode_file([b for _, b, _ in kept])
    uid = uuid.uuid4()
    dv_file = f"deletion_vector_{uid}.bin"
    store.put(dv_file, content)
    key = relative_dv_path_or_inline("", uid)
    adds = [Add(a.path, dict(a.partition_values), a.size, a.modification_time,
                # Bounds of the physical rows, no longer tight for the live ones.
                stats=wide_stats(a.stats), tags=a.tags,
                # The same file committed again keeps its row ids (row tracking).
                base_row_id=a.base_row_id,
                default_row_commit_version=a.default_row_commit_version,
                deletion_vector={"storageType": "u", "pathOrInlineDv": key,
                                 "offset": off, "sizeInBytes": len(blob),
                                 "cardinality": card})
            for (a, blob, card), off in zip(kept, offsets, strict=True)]
    return adds, dv_file


class ProvingTable(Interface):
    """What proving a deletion vector needs of its table."""

    @property
    def uri(self) -> str: ...

    @property
    def storage_options(self) -> dict[str, str]: ...

    @property
    def allow_external_paths(self) -> bool: ...

    @property
    def log_store(self) -> LogStore: ...


def check_output(table: ProvingTable, proofs: list[tuple[Add, pa.Table, pa.Table]],
                 adds: list[Add], dv_file: str | None, where: str) -> None:
    """RewriteCheckError, after deleting ``dv_file``, unless every touched file's rows as
    its new deletion vector (read back from storage) leaves them are the rows expected: a
    file without a new ``add`` must keep none."""

    store = table.log_store.store
    root = parse_location(table.uri)
    by_path = {a.path: a for a in adds}
    for old, data, expected in proofs:
        new = by_path.get(old.path)
        try:
            if new is None:
                found = data.slice(0, 0)
            else:
                assert new.deletion_vector is not None
                found = data.filter(kept_rows(
                    store, root, table.uri, new.deletion_vector, data_file=new.path,
                    num_rows=data.num_rows, storage_options=table.storage_options,
                    allow_external=table.allow_external_paths))
            problems = row_differences(expected, found)
        except Exception as e:
            if dv_file is not None:
                store.delete(dv_file)
            raise RewriteCheckError(f"{where}: the deletion vector written for {old.path} "
                                    f"cannot be read back ({e}); it was deleted and nothing "
                                    "was committed") from None
        if problems:
            if dv_file is not None:
                store.delete(dv_file)
            raise RewriteCheckError(
                f"{where}: the new deletion vector of {old.path} leaves {'; '.join(problems)}, "
                "not its live rows less those the predicate matches; the deletion-vector file "
                "was deleted and nothing was committed")


__all__ = ["ProvingTable", "check_output", "write_deletion_vectors"]
