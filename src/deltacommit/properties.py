"""Changing an existing table's properties (``DeltaTable.set_properties``).

Properties that turn a table feature on also upgrade the protocol in the same commit, so
readers never see the property without the feature.  Turning row tracking on for a table
that has files commits each file again with ``dataChange=false`` so that the commit loop
gives it row ids (PROTOCOL.md: every live file of the version enabling it has ids); that
commit reads the whole table, so any concurrent change of files makes it retry from scratch
instead of committing ids for a stale file set.  Turning in-commit timestamps on records
from which version they apply (``engine/stamps.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from deltacommit.engine.commit_info import json_text
from deltacommit.errors import InvalidArgumentError
from deltacommit.log import in_commit_timestamps, row_tracking
from deltacommit.log.feature_requests import (
    requested_features,
    take_feature_requests,
    with_writer_features,
)
from deltacommit.log.features import check_writable

if TYPE_CHECKING:
    from deltacommit.engine.policy import CommitResult
    from deltacommit.table import DeltaTable

#: Properties only the writer that turns a feature on may set.
_RESERVED = (in_commit_timestamps.ENABLEMENT_VERSION_KEY,
             in_commit_timestamps.ENABLEMENT_TIMESTAMP_KEY,
             row_tracking.ROW_ID_COLUMN_KEY, row_tracking.COMMIT_VERSION_COLUMN_KEY)


def set_properties(table: DeltaTable, properties: Mapping[str, str]) -> CommitResult:
    """Set ``properties`` (and the table features they ask for) in one commit."""
    from deltacommit.table import check_configuration

    uri = table.uri
    if not isinstance(properties, Mapping) or not properties:
        raise InvalidArgumentError(f"properties for table {uri} must be a non-empty mapping of "
                                   f"strings, got {properties!r}")
    check_configuration(properties, uri)
    reserved = sorted(set(properties) & set(_RESERVED))
    if reserved:
        raise InvalidArgumentError(
            f"table {uri}: {reserved} are set by the writer that turns the feature on, not by "
            "hand")
    wanted: dict[str, str | None] = dict(properties)
    features = requested_features(wanted)
    take_feature_requests(wanted, uri)
    txn = table.transaction("SET TBLPROPERTIES", {"properties": json_text(dict(properties))})
    snap = txn.snapshot
    protocol = with_writer_features(snap.protocol, features)
    metadata = snap.metadata
    config = dict(metadata.configuration)
    config.update(wanted)
    new_metadata = replace(metadata, configuration=config)
    check_writable(uri, protocol, new_metadata)
    was_enabled = row_tracking.is_enabled(snap.protocol, metadata)
    if row_tracking.is_enabled(protocol, new_metadata) and not was_enabled:
        config.update(row_tracking.materialized_columns(
            config, uuid.UUID(table.random.uuid()).hex))
        new_metadata = replace(metadata, configuration=config)
        # Files without ids are committed again (same path, dataChange=false) to get them.
        backfill = [replace(a, data_change=False) for a in snap.iter_files()
                    if a.base_row_id is None]
        if backfill:
            txn.read_whole_table()
            txn.add(backfill)
    if protocol is not snap.protocol:
        txn.update_protocol(protocol)
    txn.update_metadata(new_metadata)
    return txn.commit()
