"""Which protocol versions and table features deltacommit can read and write.  Pure.

A reader that ignores a feature it does not implement returns wrong rows (deletion vectors,
column mapping); a writer that ignores one corrupts the table for everyone.  So both sides
check the protocol up front and refuse with the feature's name.
"""

from __future__ import annotations

from deltacommit.column_mapping import MODES as COLUMN_MAPPING_MODES
from deltacommit.errors import UnsupportedProtocolError
from deltacommit.log.actions import Metadata, Protocol

READER_FEATURES = frozenset({"columnMapping", "deletionVectors", "timestampNtz", "typeWidening",
                             "typeWidening-preview", "v2Checkpoint", "vacuumProtocolCheck"})
# deletionVectors: appends add files without DVs, overwrites and deletes remove files whole
# with the DV of the removed add (the replay key is path and DV id), vacuum keeps DV files.
# columnMapping: files, partitionValues and stats use physical names (column_mapping.py).
# typeWidening: files are written in the table's (widened) types; no type change is applied.
WRITER_FEATURES = frozenset({"appendOnly", "checkConstraints", "columnMapping", "deletionVectors",
                             "invariants", "timestampNtz", "typeWidening", "typeWidening-preview",
                             "v2Checkpoint", "vacuumProtocolCheck",
                             # Commit-level features: the commit loop stamps each version
                             # (engine/stamps.py) with its inCommitTimestamp, row ids and
                             # row-id high-water mark; domains are replayed and checkpointed.
                             "domainMetadata", "inCommitTimestamp", "rowTracking"})
# v2Checkpoint: UUID-named and V2-spec checkpoints (checkpointMetadata, sidecars) are read;
# checkpoints are written UUID-named with delta.checkpointPolicy=v2, never multi-part.

DEFAULT_PROTOCOL = (1, 2)


def _column_mapping(metadata: Metadata | None) -> str:
    if metadata is None:
        return "none"
    return (metadata.configuration.get("delta.columnMapping.mode") or "none").lower()


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
    if r >= 2 and _column_mapping(metadata) not in COLUMN_MAPPING_MODES:
        raise UnsupportedProtocolError(
            f"table {table} uses column mapping mode delta.columnMapping.mode="
            f"{_column_mapping(metadata)}; deltacommit reads modes {list(COLUMN_MAPPING_MODES)}")


def check_writable(table: str, protocol: Protocol, metadata: Metadata | None) -> None:
    check_readable(table, protocol, metadata)
    w = protocol.min_writer_version
    if w in (4, 5) and not _uses_version_4_features(metadata):
        return  # legacy column mapping (writer 5) on a table without CDF or generated columns
    if w in (4, 5, 6) or w > 7:
        raise UnsupportedProtocolError(
            f"table {table} needs writer version {w} (generated or identity columns, change data "
            "feed or column mapping); deltacommit writes versions 1, 2, 3 (CHECK constraints) and 7 with "
            f"features {sorted(WRITER_FEATURES)}")
    if w == 7:
        missing = sorted(set(protocol.writer_features or []) - WRITER_FEATURES)
        if missing:
            raise UnsupportedProtocolError(
                f"table {table} uses writer features {missing} that deltacommit does not support "
                f"(supported: {sorted(WRITER_FEATURES)})")


def _uses_version_4_features(metadata: Metadata | None) -> bool:
    """Whether a table uses what writer version 4 brought (change data feed, generated
    columns): a legacy column-mapping table (writer 5) that uses neither is writable."""
    if metadata is None:
        return False
    cdf = (metadata.configuration.get("delta.enableChangeDataFeed") or "false").lower() == "true"
    return cdf or "delta.generationExpression" in metadata.schema_string


def is_append_only(metadata: Metadata) -> bool:
    return (metadata.configuration.get("delta.appendOnly") or "false").lower() == "true"
