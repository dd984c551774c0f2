"""Renaming and dropping columns of a column-mapping table, and turning column mapping on:
one metadata-only commit each.

Without column mapping, data files name columns by their display names, so a rename would leave
every existing file's column unfound and a drop would need every file rewritten; such tables
are refused.  With column mapping (``column_mapping.py``) files name columns by physical names
that never change: a rename changes only the display name in the schema, a drop only removes
the field from it, and no data file is touched (Spark's ``ALTER TABLE ... RENAME COLUMN`` and
``DROP COLUMN``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from typing import Protocol as Interface

from deltacommit.engine.commit.commit_info import json_text
from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.actions import Metadata, Protocol
from deltacommit.protocol.expressions.declarations import table_constraints
from deltacommit.protocol.schema.arrow import delta_schema_dict
from deltacommit.protocol.schema.column_mapping import (
    MAX_COLUMN_ID_KEY,
    MODE_KEY,
    dropped_field,
    mapped_schema_dict,
    mapping_mode,
    renamed_field,
)
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.properties import ColumnMappingMode

if TYPE_CHECKING:
    import pyarrow as pa

    from deltacommit.engine.commit.policy import CommitResult
    from deltacommit.engine.transaction.transaction import Transaction


class SchemaTable(Interface):
    """What a schema change needs of a table (``table.DeltaTable`` is one)."""

    @property
    def uri(self) -> str: ...

    @property
    def metadata(self) -> Metadata: ...

    @property
    def schema(self) -> pa.Schema: ...

    @property
    def protocol(self) -> Protocol: ...

    @property
    def partition_columns(self) -> list[str]: ...

    @property
    def configuration(self) -> dict[str, str | None]: ...

    @property
    def table_config(self) -> TableConfig: ...

    def transaction(self, operation: str = ...,
                    operation_parameters: Mapping[str, Any] | None = ...) -> Transaction: ...


def _path(column: str | Sequence[str]) -> list[str]:
    # A string is one top-level name (with column mapping a name may hold dots); a nested
    # field is named by the sequence of names leading to it.
    return [column] if isinstance(column, str) else list(column)


def _check_mapped(table: SchemaTable, what: str) -> None:
    if table.table_config.column_mapping_mode == ColumnMappingMode.NONE:
        raise InvalidArgumentError(
            f"table {table.uri}: {what} needs column mapping (data files name columns by "
            "their names otherwise); create the table with configuration "
            "{'delta.columnMapping.mode': 'name'}")


def _check_unconstrained(table: SchemaTable, path: list[str], what: str) -> None:
    """Refuse changing a column a constraint names: its expression would name a column that
    no longer exists (Spark refuses the same)."""

    # The parser loads with a rename or a drop, not with the table facade (an append).
    from deltacommit.protocol.expressions.predicates import parse_predicate

    target = ".".join(path)
    for c in table_constraints(table.schema, table.configuration, table.uri):
        try:
            columns = set(parse_predicate(c.expression).columns())
        except InvalidArgumentError:
            columns = set()
        if c.kind == "invariant":
            columns.add(c.name)
        for name in columns:
            if name == target or name.startswith(target + ".") or target.startswith(name + "."):
                raise InvalidArgumentError(
                    f"table {table.uri}: cannot {what} column {target!r}: the {c.kind} "
                    f"constraint {c.name!r} ({c.expression}) refers to it; drop the constraint "
                    "first")


def _commit(table: SchemaTable, operation: str, parameters: Mapping[str, Any],
            schema: dict[str, Any], partition_columns: list[str],
            configuration: dict[str, str | None] | None = None,
            protocol: Protocol | None = None) -> CommitResult:
    metadata = replace(table.metadata, partition_columns=partition_columns,
                       schema_string=json.dumps(schema, separators=(",", ":"), ensure_ascii=False),
                       configuration=(dict(table.metadata.configuration) if configuration is None
                                      else configuration))
    with table.transaction(operation, parameters) as txn:
        if protocol is not None:
            txn.update_protocol(protocol)
        txn.update_metadata(metadata)
    assert txn.result is not None
    return txn.result


def rename_column(table: SchemaTable, column: str | Sequence[str], new_name: str) -> CommitResult:
    """Give a column (or a nested struct field) a new display name; a renamed partition
    column stays the partition column."""

    path = _path(column)
    _check_mapped(table, "renaming a column")
    _check_unconstrained(table, path, "rename")
    schema = renamed_field(delta_schema_dict(table.metadata.schema_string), path, new_name,
                           table.uri)
    pcols = [new_name if len(path) == 1 and c == path[0] else c for c in table.partition_columns]
    return _commit(table, "RENAME COLUMN",
                   {"oldColumnPath": ".".join(path), "newColumnPath": ".".join([*path[:-1],
                                                                                 new_name])},
                   schema, pcols)


def drop_column(table: SchemaTable, column: str | Sequence[str]) -> CommitResult:
    """Remove a column (or a nested struct field) from the schema; its data stays in the
    files, unread, until they are rewritten."""

    path = _path(column)
    _check_mapped(table, "dropping a column")
    if len(path) == 1 and path[0] in table.partition_columns:
        raise InvalidArgumentError(
            f"table {table.uri}: cannot drop partition column {path[0]!r}")
    _check_unconstrained(table, path, "drop")
    schema = dropped_field(delta_schema_dict(table.metadata.schema_string), path, table.uri)
    return _commit(table, "DROP COLUMNS", {"columns": json_text([".".join(path)])}, schema,
                   list(table.partition_columns))


def enable_column_mapping(table: SchemaTable, mode: str = "name") -> CommitResult:
    """Turn on column mapping (``name`` mode) for a table created without it: ids for every
    field, physical names equal to the current names (so every existing file reads as before),
    ``delta.columnMapping.mode`` and ``maxColumnId`` set, and the protocol raised to reader 2 /
    writer 5 (or the ``columnMapping`` feature on a table-features protocol), as setting the
    property does (``properties.set_properties``).  Renames and drops are possible from then
    on."""
    metadata = column_mapping_turned_on(table.uri, table.metadata, mode)
    protocol = TableConfig.requests({MODE_KEY: mode}, table.uri).applied_to(table.protocol)
    return _commit(table, "SET TBLPROPERTIES", {"properties": json_text({MODE_KEY: mode})},
                   json.loads(metadata.schema_string), list(table.partition_columns),
                   dict(metadata.configuration), protocol)


def column_mapping_turned_on(uri: str, metadata: Metadata, mode: str) -> Metadata:
    """``metadata`` of a table without column mapping with mapping mode ``mode`` turned on:
    every field gets an id and its current name as physical name, so existing files read as
    before.  Only ``name`` mode can be turned on (existing files carry no field ids)."""

    current = mapping_mode(metadata.configuration, uri)
    if current != "none":
        raise InvalidArgumentError(
            f"table {uri} already uses column mapping mode {current!r}")
    if mode != "name":
        raise InvalidArgumentError(
            f"table {uri}: an existing table can turn on column mapping mode 'name' only "
            f"(its files carry no field ids for mode {mode!r}), as with Spark")
    schema, max_id = mapped_schema_dict(delta_schema_dict(metadata.schema_string), 0)
    return replace(metadata,
                   schema_string=json.dumps(schema, separators=(",", ":"), ensure_ascii=False),
                   configuration={**metadata.configuration, MODE_KEY: mode,
                                  MAX_COLUMN_ID_KEY: str(max_id)})
