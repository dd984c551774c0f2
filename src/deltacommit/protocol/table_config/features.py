"""Which protocol versions and table features deltacommit can read and write.  Pure.

A reader that ignores a feature it does not implement returns wrong rows (deletion vectors,
column mapping); a writer that ignores one corrupts the table for everyone.  So both sides
check the protocol up front and refuse with the feature's name.
"""

from __future__ import annotations

from deltacommit.errors import InvalidArgumentError, UnsupportedProtocolError
from deltacommit.protocol.actions import Metadata, Protocol
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.properties import COLUMN_MAPPING_MODE, ColumnMappingMode

READER_FEATURES = frozenset({"columnMapping", "deletionVectors", "timestampNtz", "typeWidening",
                             "typeWidening-preview", "v2Checkpoint", "vacuumProtocolCheck",
                             "variantType", "variantType-preview"})
# deletionVectors: appends add files without DVs, overwrites and deletes remove files whole
# with the DV of the removed add (the replay key is path and DV id), vacuum keeps DV files.
# columnMapping: files, partitionValues and stats use physical names (column_mapping.py).
# typeWidening: files are written in the table's (widened) types; no type change is applied.
# variantType: it only allows columns of type variant, and the schema parser refuses any such
# column (protocol/schema/arrow.py), so a table that has none reads and writes as without the
# feature.  deltalake 1.6.6 names it in every table-features protocol it writes.
WRITER_FEATURES = frozenset({"appendOnly", "checkConstraints", "columnMapping", "deletionVectors",
                             "invariants", "timestampNtz", "typeWidening", "typeWidening-preview",
                             "v2Checkpoint", "vacuumProtocolCheck", "variantType",
                             "variantType-preview",
                             # Commit-level features: the commit loop stamps each version
                             # (engine/commit/stamps.py) with its inCommitTimestamp, row ids and
                             # row-id high-water mark; domains are replayed and checkpointed.
                             "domainMetadata", "inCommitTimestamp", "rowTracking",
                             # generated.py, identity.py (datafiles.conform_rows); change data
                             # feed: writes add and remove whole files only, and refuses the
                             # row-level deletes that would need cdc files (dv_delete).
                             "changeDataFeed", "generatedColumns", "identityColumns"})
# v2Checkpoint: UUID-named and V2-spec checkpoints (checkpointMetadata, sidecars) are read;
# checkpoints are written UUID-named with delta.checkpointPolicy=v2, never multi-part.


def check_readable(table: str, protocol: Protocol, metadata: Metadata | None) -> None:
    r = protocol.min_reader_version
    if r > 3:
        raise UnsupportedProtocolError(
            f"table {table} needs reader version {r}; deltacommit reads versions 1 to 3")
    if r == 3:
        missing = sorted(set(protocol.reader_features or []) - READER_FEATURES)
        if missing:
            raise UnsupportedProtocolError(
                f"table {table} uses reader features {missing} that deltacommit does not support "
                f"(supported: {sorted(READER_FEATURES)})")
    if r >= 2:
        try:
            _ = TableConfig.of(metadata, table).column_mapping_mode
        except InvalidArgumentError:
            assert metadata is not None
            raise UnsupportedProtocolError(
                f"table {table} uses column mapping mode {COLUMN_MAPPING_MODE}="
                f"{metadata.configuration.get(COLUMN_MAPPING_MODE)}; deltacommit reads modes "
                f"{[m.value for m in ColumnMappingMode]}") from None


def check_writable(table: str, protocol: Protocol, metadata: Metadata | None) -> None:
    check_readable(table, protocol, metadata)
    w = protocol.min_writer_version
    if w > 7:
        raise UnsupportedProtocolError(
            f"table {table} needs writer version {w}; deltacommit writes versions 1 to 6, and 7 "
            f"with features {sorted(WRITER_FEATURES)}")
    if w == 7:
        missing = sorted(set(protocol.writer_features or []) - WRITER_FEATURES)
        if missing:
            raise UnsupportedProtocolError(
                f"table {table} uses writer features {missing} that deltacommit does not support "
                f"(supported: {sorted(WRITER_FEATURES)})")

