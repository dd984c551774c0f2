"""Creating a table: version 0 staged as a transaction on the empty state before it.

A new table's first version is a transaction like any other (delta-kernel-rs makes table
creation one too): it is staged here (``StagedCommit`` with ``read_version`` -1, holding the
``protocol`` and ``metaData`` of the new table) and committed through the one commit loop
(``engine.commit.loop.commit``), so it takes the host's turn, is stamped on each attempt (its
in-commit timestamp, row tracking's marks) and described by the one ``commitInfo`` builder.
A writer that loses the race for version 0 gets ``TableExistsError``: the winner's table
stands, and nothing of the loser's is left.

What is checked before anything is written: the schema (names Spark accepts without column
mapping, partition columns, generated and identity columns), the properties
(``protocol.property_checks``) and that no log exists at the location.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

import pyarrow as pa

from deltacommit.engine.commit.commit_info import json_text
from deltacommit.engine.commit.staged import StagedCommit
from deltacommit.errors import InvalidArgumentError, TableExistsError
from deltacommit.io.logstore.base import LogStore
from deltacommit.protocol.actions import Metadata
from deltacommit.protocol.conflicts import TransactionSummary
from deltacommit.protocol.expressions.declarations import (
    GENERATION_KEY,
    INVARIANTS_KEY,
    generated_columns,
)
from deltacommit.protocol.features import identity, row_tracking
from deltacommit.protocol.partitions import check_partition_columns
from deltacommit.protocol.property_checks import check_properties
from deltacommit.protocol.schema.arrow import needs_timestamp_ntz, schema_to_json
from deltacommit.protocol.schema.column_mapping import assign_column_mapping, strip_column_mapping
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.properties import (
    COLUMN_MAPPING_MAX_ID,
    COLUMN_MAPPING_MODE,
    ColumnMappingMode,
    IsolationLevel,
)
from deltacommit.runtime.clock import Clock, RandomSource

OPERATION = "CREATE TABLE"


def stage_new_table(log_store: LogStore, schema: pa.Schema, *,
                    partition_by: Sequence[str] | None,
                    configuration: Mapping[str, str] | None, name: str | None,
                    description: str | None, clock: Clock, random: RandomSource
                    ) -> StagedCommit:
    """Version 0 of a new table at ``log_store``'s location, checked and staged; refused with
    a clear error (``InvalidArgumentError``, ``TableExistsError``) before anything is written."""
    uri = log_store.table_uri
    if not isinstance(schema, pa.Schema):
        raise InvalidArgumentError(f"schema for new table {uri} must be a pyarrow.Schema, "
                                   f"got {type(schema).__name__}")
    pcols = list(partition_by or [])
    properties = dict(configuration or {})
    check_properties(properties, uri)
    requests = TableConfig.requests(properties, uri)
    mode = TableConfig(properties, uri).column_mapping_mode
    schema = strip_column_mapping(schema)
    if mode is ColumnMappingMode.NONE:
        check_column_names(schema, uri)
    check_partition_columns(schema, pcols, uri)
    # Generated columns this writer could never write and malformed identity columns are
    # refused now, rather than a table every later write refuses.
    if generated_columns(schema):
        # The evaluator loads only for a schema with generated columns: ``DeltaTable`` imports
        # this module, and a cold append must not pay for the expression package.
        from deltacommit.protocol.expressions.generated import check_expressions

        check_expressions(schema, uri)
    identity.identity_columns(schema, uri)
    existing = log_store.list_log(0)
    if existing:
        raise TableExistsError(
            f"a Delta table already exists at {uri} ({len(existing)} log files, newest "
            f"version {max(f.version for f in existing)}); open it with DeltaTable({uri!r})")
    # Protocol requests are not properties: Delta applies them and does not store them.
    config = requests.stored
    config.update(log_store.coordination_config())
    if mode is not ColumnMappingMode.NONE:
        schema, max_id = assign_column_mapping(schema, 0, random.uuid)
        config[COLUMN_MAPPING_MAX_ID] = str(max_id)
    protocol = requests.initial_protocol(schema_features(schema))
    table_config = TableConfig(config, uri)
    if table_config.row_tracking_enabled(protocol):
        config.update(row_tracking.materialized_columns(table_config,
                                                        uuid.UUID(random.uuid()).hex))
    metadata = Metadata(
        id=str(uuid.UUID(random.uuid())), schema_string=schema_to_json(schema),
        partition_columns=pcols, configuration=config, name=name, description=description,
        created_time=int(clock.time() * 1000))
    summary = TransactionSummary(
        operation=OPERATION, partition_columns=tuple(pcols),
        partition_types={c: schema.field(c).type for c in pcols},
        isolation_level=IsolationLevel.SERIALIZABLE, has_metadata=True, has_protocol=True)
    return StagedCommit(
        txn_id=random.uuid(), read_version=-1, operation=OPERATION,
        parameters={"isManaged": "false", "description": description or "",
                    "partitionBy": json_text(pcols), "properties": json_text(config)},
        metrics={}, summary=summary, metadata=metadata, protocol=protocol)


# Characters Spark refuses in column names of tables without column mapping
# (``SchemaUtils.checkFieldNames``): they cannot be stored in Parquet or Hive metadata safely.
_BAD_NAME_CHARS = frozenset(" ,;{}()\n\t=")


def check_column_names(schema: pa.Schema, uri: str) -> None:
    """Refuse column names Spark refuses without column mapping: empty, or containing any of
    `` ,;{}()\\n\\t=``."""

    def visit(t: pa.DataType, prefix: str) -> None:
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                check(t.field(i).name, prefix)
                visit(t.field(i).type, f"{prefix}{t.field(i).name}.")
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            visit(t.value_type, prefix)
        elif pa.types.is_map(t):
            visit(t.key_type, prefix)
            visit(t.item_type, prefix)

    def check(name: str, prefix: str) -> None:
        bad = sorted(set(name) & _BAD_NAME_CHARS)
        if not name or bad:
            what = "is empty" if not name else f"contains {''.join(bad)!r}"
            raise InvalidArgumentError(
                f"table {uri}: column name {prefix + name!r} {what}; Delta allows such names only "
                f"with column mapping: create the table with configuration "
                f"{{'{COLUMN_MAPPING_MODE}': 'name'}}")

    for f in schema:
        check(f.name, "")
        visit(f.type, f"{f.name}.")


def _has_invariants(schema: pa.Schema) -> bool:
    def visit(t: pa.DataType) -> bool:
        return pa.types.is_struct(t) and any(
            INVARIANTS_KEY in (t.field(i).metadata or {}) or visit(t.field(i).type)
            for i in range(t.num_fields))

    return any(INVARIANTS_KEY in (f.metadata or {}) or visit(f.type) for f in schema)


def _has_field_metadata(schema: pa.Schema, key: bytes) -> bool:
    return any(key in (f.metadata or {}) for f in schema)


def schema_features(schema: pa.Schema) -> list[str]:
    """The table features a new table's schema needs: timestamp_ntz columns, column
    invariants, generated and identity columns (generated.py, identity.py)."""
    return [name for name, used in (
        ("timestampNtz", needs_timestamp_ntz(schema)),
        ("invariants", _has_invariants(schema)),
        ("generatedColumns", _has_field_metadata(schema, GENERATION_KEY)),
        ("identityColumns", _has_field_metadata(schema, identity.START.encode()))) if used]
