"""The read verbs: a table's files (optionally by partition), its add actions as one Arrow
table, and its rows (optionally filtered), behind ``DeltaTable.files``, ``get_add_actions``,
``to_arrow`` and ``file_scan``.

The facade loads this module on a table's first read, and with it the data-file reader
(``engine.scan``), the expression parser and evaluator, file pruning and the add-action
columns: a process that only appends (a Lambda function's cold write) never loads them
(``tests/s3/test_light_client.py``, ``NOT_LOADED_BY_APPENDS``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from deltacommit.engine.scan import FileScan, prune_files, select_files
from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.add_actions import TextsNeeded, add_actions_table
from deltacommit.protocol.expressions.evaluator import columns_read
from deltacommit.protocol.expressions.parser import parse_expression
from deltacommit.protocol.expressions.predicates import (
    TRUE,
    Predicate,
    from_partition_filters,
    parse_predicate,
)
from deltacommit.protocol.expressions.row_filters import row_filter
from deltacommit.runtime.threads import CallThreads

if TYPE_CHECKING:
    from deltacommit.engine.snapshot.snapshot import Snapshot
    from deltacommit.io.logstore.base import LogStore
    from deltacommit.protocol.actions import Add
    from deltacommit.protocol.expressions.ast import Expr
    from deltacommit.protocol.table_config.config import TableConfig

__all__ = ["ReadTable", "add_actions", "file_scan", "files", "partition_predicate", "to_arrow"]


class ReadTable(Protocol):
    """What a read needs of its table (``DeltaTable`` is one); a protocol, so this module,
    which the table calls, does not import the table back."""

    storage_options: dict[str, str]
    allow_external_paths: bool
    log_store: LogStore

    @property
    def uri(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def snapshot(self) -> Snapshot: ...

    @property
    def schema(self) -> pa.Schema: ...

    @property
    def partition_columns(self) -> list[str]: ...

    @property
    def table_config(self) -> TableConfig: ...

    def files(self, partition_filters: Sequence[Any] | None = None,
              predicate: str | None = None) -> list[Add]: ...

    def file_scan(self, out_schema: pa.Schema) -> FileScan: ...


def partition_predicate(partition_filters: Sequence[Any] | None,
                        predicate: str | None) -> Predicate:
    """The predicate over partition columns that SQL text or deltalake's DNF filters give
    (TRUE for neither)."""
    if predicate is not None:
        return parse_predicate(predicate)
    if partition_filters:
        return from_partition_filters(partition_filters)
    return TRUE


def files(table: ReadTable, partition_filters: Sequence[Any] | None,
          predicate: str | None) -> list[Add]:
    """The add actions of the table's snapshot whose partition values may match."""
    pred = partition_predicate(partition_filters, predicate)
    pred.check_columns(table.partition_columns, table.uri)
    return select_files(table.snapshot, pred)


def add_actions(table: ReadTable, flatten: bool,
                partition_filters: Sequence[Any] | None) -> pa.Table:
    """``DeltaTable.get_add_actions``: built from the checkpoint's Arrow rows, without a
    Python object per file (``protocol/add_actions.py``)."""
    snap = table.snapshot
    keep = None
    if partition_filters:
        pred = from_partition_filters(partition_filters)
        pred.check_columns(snap.partition_columns, table.uri)
        types = {c: snap.schema.field(c).type for c in snap.partition_columns}
        keep = lambda values: pred.evaluate(values, types)  # noqa: E731
    dvs = "deletionVectors" in (snap.protocol.reader_features or ())

    def listing(texts: bool) -> pa.Table:
        chunks = snap.add_rows_parsed(texts=texts)
        return add_actions_table([rows for rows, _ in chunks], snap.schema,
                                 snap.partition_columns, snap.configuration, flatten=flatten,
                                 deletion_vectors=dvs, keep=keep, table=table.uri,
                                 stats_parsed=[parsed for _, parsed in chunks])

    # First without reading the checkpoint's JSON statistics, which its typed ones
    # usually make unneeded; with them when the typed ones do not answer for every file.
    try:
        return listing(texts=False)
    except TextsNeeded:
        return listing(texts=True)


def to_arrow(table: ReadTable, columns: Sequence[str] | None,
             partition_filters: Sequence[Any] | None, filter: str | Expr | None) -> pa.Table:
    """``DeltaTable.to_arrow``: partitions pruned before any file is opened, and with a
    ``filter`` only the files whose partition values and statistics admit a matching row
    (``engine.scan.prune_files``)."""
    schema = table.schema
    names = schema.names
    if columns is not None:
        unknown = [c for c in columns if c not in names]
        if unknown:
            raise InvalidArgumentError(
                f"table {table.uri} has no column(s) {unknown}; columns are {names}")
    out_schema = pa.schema([schema.field(c) for c in (columns or names)])
    matching = None
    if filter is not None:
        where = f"filter of a read of table {table.uri}"
        predicate = parse_expression(filter, where) if isinstance(filter, str) else filter
        matching = row_filter(predicate, schema, where, writes=False)
    found = table.files(partition_filters)
    if matching is not None:
        kept = {a.path for a in prune_files(table.snapshot, matching.predicate)}
        found = [a for a in found if a.path in kept]
    read_schema = out_schema
    if matching is not None:
        wanted = columns_read(matching.predicate, schema) | set(out_schema.names)
        read_schema = pa.schema([f for f in schema if f.name in wanted])
    if not found:
        return out_schema.empty_table()
    read = table.file_scan(read_schema).read
    local = table.log_store.store.local_path("") is not None
    if len(found) == 1 or (local and not any(a.deletion_vector for a in found)):
        tables = [read(a) for a in found]
    else:
        # Remote reads wait on the network; applying deletion vectors copies every
        # column, work the threads share even on a local disk.
        workers = min(os.cpu_count() or 1, 16) if local else 16
        with CallThreads(max_workers=min(workers, len(found))) as pool:
            tables = list(pool.map(read, found))
    if matching is not None:
        tables = [t.filter(matching.matches(t)).select(out_schema.names) for t in tables]
    return pa.concat_tables(tables)


def file_scan(table: ReadTable, out_schema: pa.Schema) -> FileScan:
    """The data-file reader of the table's snapshot, reading into ``out_schema``."""
    return FileScan(table.uri, table.version, out_schema, table.partition_columns,
                    storage_options=table.storage_options,
                    allow_external_paths=table.allow_external_paths,
                    column_mapping=table.table_config.column_mapping_mode.value,
                    given_store=table.log_store.store)
