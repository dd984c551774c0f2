"""The Arrow schema of checkpoint files: one struct column per action type.  Pure.

The schema follows PROTOCOL.md ("Checkpoint Schema") with the field types and nullability that
delta-rs writes, so both delta-rs and Spark read what we write: one row per action, one struct
column per action type, every other column null in that row.  ``add.stats`` is the JSON string
unless ``delta.checkpoint.writeStatsAsJson=false``; unless ``delta.checkpoint.writeStatsAsStruct``
is false (Delta's default is true), ``add`` also has ``stats_parsed`` and
``partitionValues_parsed`` typed by the table schema (see ``parsed_stats``).  Reading keeps the
``stats_parsed`` of the ``add`` rows beside them (``files.action_rows.ActionRows.stats_parsed``).
``remove`` rows carry no ``stats`` or ``tags``: in a checkpoint they are only tombstones for
VACUUM.  A V2-spec checkpoint (``v2Checkpoint`` feature) adds one
``checkpointMetadata`` row and may move its ``add`` and ``remove`` rows to sidecar files that
``sidecar`` rows name; a UUID-named one may also be JSON lines, read into the same shape (``v2``).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = ["ADD", "ADD_LIGHT", "CHECKPOINT_METADATA", "CHECKPOINT_SCHEMA", "DELETION_VECTOR",
           "DOMAIN_METADATA", "METADATA", "PATH_AND_STATS", "PROTOCOL", "REMOVE", "SIDECAR", "STRING_LIST",
           "STRING_MAP", "TXN", "V2_CHECKPOINT_SCHEMA", "V2_COLUMNS"]


def _f(name: str, type_: pa.DataType, nullable: bool = True) -> pa.Field[Any]:
    return pa.field(name, type_, nullable)


STRING_MAP = pa.map_(pa.string(), pa.string())
STRING_LIST = pa.list_(_f("element", pa.string(), False))

DELETION_VECTOR = pa.struct([
    _f("storageType", pa.string(), False),
    _f("pathOrInlineDv", pa.string(), False),
    _f("offset", pa.int32()),
    _f("sizeInBytes", pa.int32(), False),
    _f("cardinality", pa.int64(), False),
    _f("maxRowIndex", pa.int64()),
])

ADD = pa.struct([
    _f("path", pa.string(), False),
    _f("partitionValues", STRING_MAP, False),
    _f("size", pa.int64(), False),
    _f("modificationTime", pa.int64(), False),
    _f("dataChange", pa.bool_(), False),
    _f("stats", pa.string()),
    _f("tags", STRING_MAP),
    _f("deletionVector", DELETION_VECTOR),
    _f("baseRowId", pa.int64()),
    _f("defaultRowCommitVersion", pa.int64()),
    _f("clusteringProvider", pa.string()),
])


#: ``ADD`` without the JSON statistics: the rows a reader that has the checkpoint's typed
#: statistics reads (``ActionRows.light``).
ADD_LIGHT = pa.struct([f for f in ADD if f.name != "stats"])
PATH_AND_STATS = pa.struct([ADD.field("path"), ADD.field("stats")])


REMOVE = pa.struct([
    _f("path", pa.string(), False),
    _f("deletionTimestamp", pa.int64()),
    _f("dataChange", pa.bool_(), False),
    _f("extendedFileMetadata", pa.bool_()),
    _f("partitionValues", STRING_MAP),
    _f("size", pa.int64()),
    _f("deletionVector", DELETION_VECTOR),
    _f("baseRowId", pa.int64()),
    _f("defaultRowCommitVersion", pa.int64()),
])

METADATA = pa.struct([
    _f("id", pa.string(), False),
    _f("name", pa.string()),
    _f("description", pa.string()),
    _f("format", pa.struct([_f("provider", pa.string(), False), _f("options", STRING_MAP, False)]),
       False),
    _f("schemaString", pa.string(), False),
    _f("partitionColumns", STRING_LIST, False),
    _f("createdTime", pa.int64()),
    _f("configuration", STRING_MAP, False),
])

PROTOCOL = pa.struct([
    _f("minReaderVersion", pa.int32(), False),
    _f("minWriterVersion", pa.int32(), False),
    _f("readerFeatures", STRING_LIST),
    _f("writerFeatures", STRING_LIST),
])

TXN = pa.struct([
    _f("appId", pa.string(), False),
    _f("version", pa.int64(), False),
    _f("lastUpdated", pa.int64()),
])

DOMAIN_METADATA = pa.struct([
    _f("domain", pa.string(), False),
    _f("configuration", pa.string(), False),
    _f("removed", pa.bool_(), False),
])

CHECKPOINT_SCHEMA = pa.schema([
    _f("add", ADD),
    _f("remove", REMOVE),
    _f("metaData", METADATA),
    _f("protocol", PROTOCOL),
    _f("txn", TXN),
    _f("domainMetadata", DOMAIN_METADATA),
])

CHECKPOINT_METADATA = pa.struct([
    _f("version", pa.int64(), False),
    _f("tags", STRING_MAP),
])

SIDECAR = pa.struct([
    _f("path", pa.string(), False),
    _f("sizeInBytes", pa.int64(), False),
    _f("modificationTime", pa.int64(), False),
    _f("tags", STRING_MAP),
])


#: Columns only a V2 checkpoint has rows in (``checkpointMetadata``, ``sidecar``).
V2_COLUMNS = ("checkpointMetadata", "sidecar")


#: Every action column a checkpoint may have, V2 ones included (JSON checkpoints are read
#: into this shape).
V2_CHECKPOINT_SCHEMA = pa.schema([*CHECKPOINT_SCHEMA, _f("checkpointMetadata", CHECKPOINT_METADATA),
                                  _f("sidecar", SIDECAR)])
