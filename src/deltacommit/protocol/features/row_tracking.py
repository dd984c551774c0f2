"""Row tracking (PROTOCOL.md "Row Tracking"): fresh row ids and row commit versions.  Pure.

Every row a writer commits to a table that supports ``rowTracking`` gets a fresh row id,
``baseRowId`` of its file plus its position in the file, and every file the version it was
committed at (``defaultRowCommitVersion``).  Ids are handed out above the table's high-water
mark, the ``rowIdHighWaterMark`` of the ``delta.rowTracking`` domain, which the same commit
raises to the last id it used.  Both values depend on the version a commit lands at and on
what the versions before it assigned, so they are stamped on each attempt of the commit loop
(``engine/commit/stamps.py``), never when a transaction stages its files: a commit rebased over a
concurrent winner takes ids above the winner's mark, at the new version.

An add that already carries a ``baseRowId`` is a file committed again (a deletion vector
added to it, a backfill): it keeps its ids and its row commit version, as the protocol asks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.errors import CorruptLogError, InvalidArgumentError
from deltacommit.protocol.actions import Add, DomainMetadata, Protocol
from deltacommit.protocol.json_values import loads
from deltacommit.protocol.schema.column_mapping import PHYSICAL_NAME_KEY
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.properties import ROW_COMMIT_VERSION_COLUMN, ROW_ID_COLUMN

#: The system domain holding the row-id high-water mark.
DOMAIN = "delta.rowTracking"
#: Spark's prefixes for the hidden columns that preserve ids of copied rows.
ROW_ID_COLUMN_PREFIX = "_row-id-col-"
COMMIT_VERSION_COLUMN_PREFIX = "_row-commit-version-col-"

#: ``commitInfo.tags`` key: whether the commit kept the stable ids of rows it copied.
PRESERVED_TAG = "delta.rowTracking.preserved"

#: The mark of a table that never assigned a row id.
NO_ROWS = -1


def high_water_mark(domains: Mapping[str, Mapping[str, object]], table: str) -> int:
    """The highest row id assigned so far (``NO_ROWS`` if none)."""
    d = domains.get(DOMAIN)
    if d is None:
        return NO_ROWS
    raw = d.get("configuration")
    try:
        config = json.loads(raw) if isinstance(raw, str) else raw
        mark = config["rowIdHighWaterMark"] if isinstance(config, dict) else None
    except (ValueError, KeyError):
        mark = None
    if isinstance(mark, bool) or not isinstance(mark, int) or mark < NO_ROWS:
        raise CorruptLogError(
            f"table {table}: domain {DOMAIN} has configuration {raw!r}; expected a JSON object "
            "with an integer rowIdHighWaterMark")
    return mark


def mark_action(mark: int) -> DomainMetadata:
    """The ``domainMetadata`` action recording ``mark``, in the form Spark writes."""
    return DomainMetadata(DOMAIN, json.dumps({"rowIdHighWaterMark": mark},
                                             separators=(",", ":")))


def assign(adds: Sequence[Add], mark: int, version: int, table: str) -> tuple[list[Add], int]:
    """``adds`` with fresh ids above ``mark`` at ``version``, and the new mark.

    Files are numbered in the order given, each taking as many ids as it has physical rows
    (``numRecords`` of its statistics, which deletion vectors do not change).
    """
    out: list[Add] = []
    for a in adds:
        if a.base_row_id is not None:
            if a.default_row_commit_version is None:
                a = replace(a, default_row_commit_version=version)
            out.append(a)
            continue
        rows = a.num_records()
        if rows is None:
            raise InvalidArgumentError(
                f"table {table} tracks row ids (writer feature rowTracking), but file {a.path} "
                "has no numRecords in its statistics, so it cannot be given row ids; write "
                "the file with statistics")
        out.append(replace(a, base_row_id=mark + 1, default_row_commit_version=version))
        mark += rows
    return out, mark


def materialized_columns(config: TableConfig, random_hex: str) -> dict[str, str]:
    """The hidden column names a table enabling row tracking must record (kept if present)."""
    return {
        ROW_ID_COLUMN: config.row_id_column or ROW_ID_COLUMN_PREFIX + random_hex,
        ROW_COMMIT_VERSION_COLUMN: config.row_commit_version_column
        or COMMIT_VERSION_COLUMN_PREFIX + random_hex,
    }


def rewrite_columns(config: TableConfig, protocol: Protocol, schema: pa.Schema, what: str
                    ) -> tuple[str, str] | None:
    """The materialized row-id and row-commit-version columns a rewrite (compaction, UPDATE,
    DELETE, MERGE) keeps copied rows' ids and versions in; None when row tracking is not
    enabled (rewritten rows then simply get fresh ids).  ``what`` names the rewrite for the
    error of a table that enables row tracking without naming both columns, or whose columns
    collide with the schema's."""
    if not config.row_tracking_enabled(protocol):
        return None
    rid, ver = config.row_id_column, config.row_commit_version_column
    if not rid or not ver:
        raise InvalidArgumentError(
            f"{what}: the table has row tracking enabled but no {ROW_ID_COLUMN} or "
            f"{ROW_COMMIT_VERSION_COLUMN}, so rewritten rows could not keep their ids")
    clash = sorted({rid, ver} & set(schema.names))
    if clash:
        raise InvalidArgumentError(
            f"{what}: materialized row tracking column(s) {clash} collide with columns of the "
            "table's schema")
    return rid, ver


def hidden_fields(names: Sequence[str], column_mapping: str) -> list[pa.Field[Any]]:
    """The materialized columns ``names`` as fields a rewrite reads and writes beside the
    table's schema.  They are stored under these very names; on a table with column mapping
    (``column_mapping`` ``name`` or ``id``), where files are read and written by physical name,
    they carry them as their physical names (Spark's materialized columns are not in the schema
    and have no other)."""
    mapped = column_mapping != "none"
    return [pa.field(n, pa.int64(), metadata={PHYSICAL_NAME_KEY: n} if mapped else None)
            for n in names]


def stable_ids(add: Add, materialized_ids: pa.Array[Any] | pa.ChunkedArray[Any],
               materialized_versions: pa.Array[Any] | pa.ChunkedArray[Any], table: str
               ) -> tuple[pa.Array[Any], pa.Array[Any]]:
    """The stable row ids and row commit versions of a file's physical rows, in order: the
    materialized value where the file has one, else the default (``baseRowId`` plus the
    row's position, the file's ``defaultRowCommitVersion``)."""
    if add.base_row_id is None or add.default_row_commit_version is None:
        raise InvalidArgumentError(
            f"table {table} has row tracking enabled, but file {add.path} has no baseRowId or "
            "defaultRowCommitVersion, so its rows' ids cannot be preserved")
    n = len(materialized_ids)
    fresh = pa.array(np.arange(add.base_row_id, add.base_row_id + n, dtype=np.int64))
    ids = pc.coalesce(materialized_ids.combine_chunks()
                      if isinstance(materialized_ids, pa.ChunkedArray) else materialized_ids,
                      fresh)
    version = pa.scalar(add.default_row_commit_version, pa.int64())
    versions = pc.coalesce(materialized_versions.combine_chunks()
                           if isinstance(materialized_versions, pa.ChunkedArray)
                           else materialized_versions, version)
    assert isinstance(ids, pa.Array) and isinstance(versions, pa.Array)
    return ids, versions


def stats_without_columns(stats: str | None, names: Sequence[str]) -> str | None:
    """A file's statistics without the hidden materialized columns ``names`` (they are not
    part of the table's schema, so readers must not see bounds for them)."""
    if stats is None or not names:
        return stats
    try:
        parsed = loads(stats)
    except ValueError:
        return None  # unreadable statistics are absent statistics (they are optional)
    if not isinstance(parsed, dict):
        return None
    for key in ("minValues", "maxValues", "nullCount"):
        section = parsed.get(key)
        if isinstance(section, dict):
            for n in names:
                section.pop(n, None)
    return json.dumps(parsed, separators=(",", ":"))

