"""Changing an existing table's properties (``DeltaTable.set_properties``).

Properties that turn a table feature on also upgrade the protocol in the same commit, so
readers never see the property without the feature.  Turning row tracking on for a table
that has files commits each file again with ``dataChange=false`` so that the commit loop
gives it row ids (PROTOCOL.md: every live file of the version enabling it has ids); that
commit reads the whole table, so any concurrent change of files makes it retry from scratch
instead of committing ids for a stale file set.  Turning in-commit timestamps on records
from which version they apply (``engine/commit/stamps.py``).  A CHECK constraint
(``delta.constraints.<name>``) is set only after every live row is found to satisfy it, and the
commit reads the whole table: files written meanwhile fail it (nothing is set) rather than slip
in unchecked.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from typing import Protocol as Interface

from deltacommit.engine.commit.commit_info import json_text
from deltacommit.errors import CheckConstraintViolationError, InvalidArgumentError
from deltacommit.ops.schema_changes import column_mapping_turned_on
from deltacommit.protocol.expressions.declarations import Constraint
from deltacommit.protocol.features import row_tracking
from deltacommit.protocol.property_checks import check_properties
from deltacommit.protocol.table_config.config import RESERVED, TableConfig
from deltacommit.protocol.table_config.features import check_writable
from deltacommit.protocol.table_config.properties import COLUMN_MAPPING_MODE

if TYPE_CHECKING:
    import pyarrow as pa

    from deltacommit.engine.commit.policy import CommitResult
    from deltacommit.engine.scan import FileScan
    from deltacommit.engine.snapshot.snapshot import Snapshot
    from deltacommit.engine.transaction.transaction import Transaction
    from deltacommit.runtime.clock import RandomSource


class PropertiesTable(Interface):
    """What a property change needs of its table (``DeltaTable`` is one); a protocol, so this
    module, which the table calls, does not import the table back."""

    random: RandomSource

    @property
    def uri(self) -> str: ...

    def transaction(self, operation: str = ...,
                    operation_parameters: Mapping[str, Any] | None = ...) -> Transaction: ...

    def file_scan(self, out_schema: pa.Schema) -> FileScan: ...


def set_properties(table: PropertiesTable, properties: Mapping[str, str]) -> CommitResult:
    """Set ``properties`` (and the table features they ask for) in one commit."""
    uri = table.uri
    if not isinstance(properties, Mapping) or not properties:
        raise InvalidArgumentError(f"properties for table {uri} must be a non-empty mapping of "
                                   f"strings, got {properties!r}")
    reserved = sorted(set(properties) & set(RESERVED))
    if reserved:
        raise InvalidArgumentError(
            f"table {uri}: {reserved} are set by the writer that turns the feature on, not by "
            "hand")
    check_properties(properties, uri)
    # The features a property asks for are granted as a new table's would be
    # (``TableConfig.requests``); version and feature requests change the protocol only.
    requests = TableConfig.requests(properties, uri)
    wanted = requests.stored
    txn = table.transaction("SET TBLPROPERTIES", {"properties": json_text(dict(properties))})
    snap = txn.snapshot
    protocol = requests.applied_to(snap.protocol)
    metadata = snap.metadata
    config = dict(metadata.configuration)
    config.update(wanted)
    new_metadata = replace(metadata, configuration=config)
    if COLUMN_MAPPING_MODE in wanted:
        mode = TableConfig(wanted, uri).column_mapping_mode
        current = snap.table_config.column_mapping_mode
        if mode != current and current != "none":
            raise InvalidArgumentError(
                f"table {uri} already uses column mapping mode {current.value!r}; it cannot be "
                f"changed to {mode.value!r} (its files name columns by physical names)")
        if mode != current:
            # Turning column mapping on names every field as the files do (ids and physical
            # names in the schema), in this same commit.
            config = {k: v for k, v in config.items() if k != COLUMN_MAPPING_MODE}
            new_metadata = column_mapping_turned_on(
                uri, replace(metadata, configuration=config), mode.value)
            config = dict(new_metadata.configuration)
    check_writable(uri, protocol, new_metadata)
    was_enabled = snap.table_config.row_tracking_enabled(snap.protocol)
    new_config = TableConfig(config, uri)
    if new_config.row_tracking_enabled(protocol) and not was_enabled:
        config.update(row_tracking.materialized_columns(new_config,
                                                        uuid.UUID(table.random.uuid()).hex))
        new_metadata = replace(new_metadata, configuration=config)
        # Files without ids are committed again (same path, dataChange=false) to get them.
        backfill = [replace(a, data_change=False) for a in snap.iter_files()
                    if a.base_row_id is None]
        if backfill:
            txn.read_whole_table()
            txn.add(backfill)
    checks = _new_checks(metadata.configuration, wanted)
    if checks:
        _check_existing_rows(table, snap, checks)
        # Rows committed meanwhile were not checked: any file added or removed concurrently
        # fails this commit (ConcurrentAppendException / ConcurrentDeleteReadException, as a
        # metadata change conflicts with every add), nothing set; writers that read the old
        # metadata and commit after it fail on the metadata change and check again.
        txn.read_whole_table()
    if protocol is not snap.protocol:
        txn.update_protocol(protocol)
    txn.update_metadata(new_metadata)
    return txn.commit()


def _new_checks(current: Mapping[str, str | None], wanted: Mapping[str, str | None]
                ) -> list[Constraint]:
    """The CHECK constraints ``wanted`` adds or changes (``delta.constraints.<name>``)."""

    before = TableConfig(current).constraints
    return [Constraint("check", name, value)
            for name, value in TableConfig(wanted).constraints.items()
            if value and before.get(name) != value]


def _check_existing_rows(table: PropertiesTable, snap: Snapshot, checks: list[Constraint]) -> None:
    """Every row of ``snap`` must satisfy ``checks`` before they are set: writers enforce a
    CHECK constraint only on the rows they write, so one set over rows that violate it would
    be a false promise to every reader.  (Spark refuses the property in ``SET TBLPROPERTIES``
    and checks the rows in ``ADD CONSTRAINT``; this is the one way to set it here.)"""

    # The evaluator loads with the first constraint set, not with every ``DeltaTable``.
    from deltacommit.protocol.expressions.constraints import check_constraints

    uri = table.uri
    scan = table.file_scan(snap.schema)
    for add in snap.iter_files():
        try:
            check_constraints(scan.read(add), checks, uri)
        except CheckConstraintViolationError as e:
            raise CheckConstraintViolationError(
                f"table {uri}: the constraint cannot be set, rows of version {snap.version} "
                f"(file {add.path}) violate it; the table is unchanged: {e}") from None
