"""The names of a table's properties, the values they take, and how each is read.  Pure.

Every key of ``metaData.configuration`` this library reads or writes is named here, once: a
misspelt key in a module would be a property silently ignored.  ``TableConfig`` (``config.py``)
reads them into typed values; the parsers here say what a valid value is, so that the checks
of new properties and the readers of a table's properties agree on it.
"""

from __future__ import annotations

import re
from enum import StrEnum

from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.table_config.intervals import parse_interval_ms

# --------------------------------------------------------------------------- keys (Delta)

APPEND_ONLY = "delta.appendOnly"
AUTO_COMPACT = "delta.autoOptimize.autoCompact"
AUTO_COMPACT_MIN_NUM_FILES = "delta.autoOptimize.autoCompact.minNumFiles"
AUTO_COMPACT_MAX_FILE_SIZE = "delta.autoOptimize.autoCompact.maxFileSize"
CHECKPOINT_INTERVAL = "delta.checkpointInterval"
CHECKPOINT_POLICY = "delta.checkpointPolicy"
CHECKPOINT_RETENTION = "delta.checkpointRetentionDuration"
CHECKPOINT_STATS_AS_JSON = "delta.checkpoint.writeStatsAsJson"
CHECKPOINT_STATS_AS_STRUCT = "delta.checkpoint.writeStatsAsStruct"
COLUMN_MAPPING_MODE = "delta.columnMapping.mode"
COLUMN_MAPPING_MAX_ID = "delta.columnMapping.maxColumnId"
DATA_SKIPPING_NUM_INDEXED_COLS = "delta.dataSkippingNumIndexedCols"
DATA_SKIPPING_STATS_COLUMNS = "delta.dataSkippingStatsColumns"
DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
ENABLE_CHANGE_DATA_FEED = "delta.enableChangeDataFeed"
ENABLE_DELETION_VECTORS = "delta.enableDeletionVectors"
ENABLE_EXPIRED_LOG_CLEANUP = "delta.enableExpiredLogCleanup"
ENABLE_IN_COMMIT_TIMESTAMPS = "delta.enableInCommitTimestamps"
ENABLE_ROW_TRACKING = "delta.enableRowTracking"
ENABLE_TYPE_WIDENING = "delta.enableTypeWidening"
ICT_ENABLEMENT_VERSION = "delta.inCommitTimestampEnablementVersion"
ICT_ENABLEMENT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"
ISOLATION_LEVEL = "delta.isolationLevel"
LOG_RETENTION = "delta.logRetentionDuration"
RANDOM_PREFIX_LENGTH = "delta.randomPrefixLength"
RANDOMIZE_FILE_PREFIXES = "delta.randomizeFilePrefixes"
ROW_TRACKING_SUSPENDED = "delta.rowTrackingSuspended"
ROW_ID_COLUMN = "delta.rowTracking.materializedRowIdColumnName"
ROW_COMMIT_VERSION_COLUMN = "delta.rowTracking.materializedRowCommitVersionColumnName"
SYMLINK_MANIFEST = "delta.compatibility.symlinkFormatManifest.enabled"
TARGET_FILE_SIZE = "delta.targetFileSize"
TUNE_FILE_SIZES_FOR_REWRITES = "delta.tuneFileSizesForRewrites"
TXN_RETENTION = "delta.setTransactionRetentionDuration"

#: ``delta.constraints.<name>``: a CHECK constraint (the value is its SQL expression).
CONSTRAINT_PREFIX = "delta.constraints."
#: ``delta.feature.<name>=supported``: a request for a table feature, applied to the protocol
#: and never stored (as are the two version requests below).
FEATURE_PREFIX = "delta.feature."
MIN_READER_VERSION = "delta.minReaderVersion"
MIN_WRITER_VERSION = "delta.minWriterVersion"

# --------------------------------------------------------------------------- keys (deltacommit)

#: deltacommit's own namespace: a key under it that is none of the keys below is refused when
#: set (``TableConfig.check_new``), as an unknown ``delta.*`` key is.
DELTACOMMIT_PREFIX = "deltacommit."

#: The commit mechanism the table's writers use (``logstore.registry``): writers configured
#: for another refuse to commit.  Settings of the mechanism are keyed below it
#: (``deltacommit.coordination.dynamodbTable``, ``...leaseTable``).
COORDINATION = "deltacommit.coordination"
#: Every deltacommit writer of the table publishes its transaction for the fleet to commit
#: (``engine.group.fleet``): many hosts, one version per round.
GROUP_COMMIT_FLEET = "deltacommit.groupCommit.fleet"
#: Integer columns of close, mostly distinct values (ids, times) are written
#: DELTA_BINARY_PACKED (``io.integer_encodings``); ``false`` keeps PLAIN and dictionaries only,
#: for readers that refuse the encoding (Spark's vectorized reader before 3.3).
DELTA_ENCODED_INTEGERS = "deltacommit.parquet.deltaEncodedIntegers"

# --------------------------------------------------------------------------- values


class ColumnMappingMode(StrEnum):
    """``delta.columnMapping.mode``: how data files name the table's columns."""

    NONE = "none"
    NAME = "name"
    ID = "id"


class CheckpointPolicy(StrEnum):
    """``delta.checkpointPolicy``: classic checkpoints, or V2 (UUID-named, with sidecars)."""

    CLASSIC = "classic"
    V2 = "v2"


class IsolationLevel(StrEnum):
    """``delta.isolationLevel``, and the level a transaction actually runs at (snapshot
    isolation is never chosen, only reached by a transaction that changes no data)."""

    SERIALIZABLE = "Serializable"
    WRITE_SERIALIZABLE = "WriteSerializable"
    SNAPSHOT_ISOLATION = "SnapshotIsolation"

    @classmethod
    def parse(cls, text: str, table: str) -> IsolationLevel:
        """A level a table (or a transaction's override) may ask for, compared without case."""
        for level in (cls.SERIALIZABLE, cls.WRITE_SERIALIZABLE):
            if text.lower() == level.value.lower():
                return level
        raise InvalidArgumentError(
            f"table {table}: {ISOLATION_LEVEL}={text!r} is not valid; expected "
            "'Serializable' or 'WriteSerializable'")


#: ``delta.autoOptimize.autoCompact`` values that turn auto-compaction on (Databricks spells
#: its modes ``auto`` and ``legacy``); ``false`` turns it off.
AUTO_COMPACT_ON = ("true", "auto", "legacy")

DEFAULT_CHECKPOINT_INTERVAL = 10
DEFAULT_LOG_RETENTION = "interval 30 days"
DEFAULT_DELETED_FILE_RETENTION = "interval 1 week"
#: deltalake's and Spark's default for ``delta.dataSkippingNumIndexedCols``.
DEFAULT_INDEXED_COLUMNS = 32

# --------------------------------------------------------------------------- parsers


def invalid(table: str, key: str, value: str | None, expected: str) -> InvalidArgumentError:
    """The one error for a property value: the table, the property, what it must be and the
    value it has."""
    return InvalidArgumentError(f"table {table}: {key} must be {expected}, got {value!r}")


def parse_bool(text: str, table: str, key: str) -> bool:
    """``true`` or ``false``, without case (Spark's ``toBoolean``)."""
    low = text.strip().lower()
    if low not in ("true", "false"):
        raise invalid(table, key, text, "true or false")
    return low == "true"


def parse_int(text: str, table: str, key: str, *, minimum: int | None = None) -> int:
    """A decimal integer, at least ``minimum`` if given."""
    s = text.strip()
    if not re.fullmatch(r"[-+]?\d{1,19}", s) or (minimum is not None and int(s) < minimum):
        what = "an integer" if minimum is None else (
            "a positive integer" if minimum == 1 else f"an integer of at least {minimum}")
        raise invalid(table, key, text, what)
    return int(s)


def parse_duration_ms(text: str, table: str, key: str) -> int:
    """A calendar interval without months or years (``interval 1 week``), in milliseconds."""
    try:
        return parse_interval_ms(text)
    except ValueError as e:
        raise InvalidArgumentError(f"table {table}: property {key}={text!r} is not a duration "
                                   f"such as 'interval 7 days': {e}") from None


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40}
_SIZE = re.compile(r"^(\d+)\s*([a-z]*)$", re.IGNORECASE)


def parse_size(value: str, what: str) -> int:
    """A size as Delta writes ``delta.targetFileSize``: bytes, or a number with b/k/m/g/t;
    ``what`` names the setting in the error."""
    m = _SIZE.match(value.strip())
    if m is None or m.group(2).lower() not in _UNITS or int(m.group(1)) < 1:
        raise InvalidArgumentError(f"{what} must be a positive size in bytes such as 104857600 "
                                   f"or 128mb, got {value!r}")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def _split_outside_backticks(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    quoted = False
    for ch in text:
        if ch == "`":
            quoted = not quoted
            cur.append(ch)
        elif ch == sep and not quoted:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def check_stats_columns(text: str, table: str) -> list[tuple[str, ...]]:
    """``stats_columns``, refusing a list no reader could match: an unbalanced backtick or an
    empty name in a dotted path."""
    columns = stats_columns(text)
    if text.count("`") % 2 or any(not name for path in columns for name in path):
        raise invalid(table, DATA_SKIPPING_STATS_COLUMNS, text,
                      "a comma-separated list of column names (nested names dotted, a name "
                      "holding dots or commas in backticks)")
    return columns


def stats_columns(text: str) -> list[tuple[str, ...]]:
    """The column paths of ``delta.dataSkippingStatsColumns`` (comma-separated, nested names
    dotted, any name in backticks)."""
    out: list[tuple[str, ...]] = []
    for item in _split_outside_backticks(text, ","):
        item = item.strip()
        if not item:
            continue
        names = []
        for name in _split_outside_backticks(item, "."):
            name = name.strip()
            if len(name) >= 2 and name[0] == "`" and name[-1] == "`":
                name = name[1:-1].replace("``", "`")
            names.append(name)
        out.append(tuple(names))
    return out
