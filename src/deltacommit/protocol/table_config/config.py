"""``TableConfig``: a table's properties read once into typed values.  Pure.

A table's ``metaData.configuration`` is a map of strings.  Each property is parsed here, once
per table configuration (a snapshot builds its ``TableConfig`` once per ``metaData``), into a
typed attribute: the rest of the library reads ``config.append_only`` or
``config.log_retention_ms``, never a key and a string comparison of its own.

Reading a table and checking new properties are different duties, and the attributes say
which they follow:

* A table written by another writer may hold values this library would refuse to set.  A
  value whose only use is a tuning knob (a checkpoint interval, a statistics column count, a
  boolean) falls back to its default when malformed, as Spark reads it; one whose meaning
  cannot be guessed (a retention, the isolation level, the column mapping mode, a file size)
  raises a clear ``InvalidArgumentError`` naming the property where it is used, so that no
  commit or deletion is decided on a guess.
* New properties (``DeltaTable.create``, ``DeltaTable.set_properties``) are checked strictly
  by ``check_new``: every ``delta.*`` and ``deltacommit.*`` key must be one this library
  honours (the commit mechanism's ``deltacommit.coordination*`` keys are its log store's),
  and every value must parse; the error names the table, the property, the value and what is
  expected.

What a property asks of the protocol (``delta.enableRowTracking=true`` needs the
``rowTracking`` and ``domainMetadata`` features) is answered by ``requests``: one reading of
the property -> feature table (``feature_requests``) for a new table and a property change
alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any

from deltacommit.errors import CorruptLogError, InvalidArgumentError
from deltacommit.protocol.actions import Metadata, Protocol
from deltacommit.protocol.table_config import properties as p
from deltacommit.protocol.table_config.feature_requests import (
    initial_protocol,
    requested_features,
    take_feature_requests,
    take_version_requests,
    with_features,
)
from deltacommit.protocol.table_config.properties import (
    CheckpointPolicy,
    ColumnMappingMode,
    IsolationLevel,
)

#: Boolean properties, and their value when unset.
BOOLEANS: dict[str, bool] = {
    p.APPEND_ONLY: False,
    p.ENABLE_DELETION_VECTORS: False,
    p.ENABLE_CHANGE_DATA_FEED: False,
    p.ENABLE_ROW_TRACKING: False,
    p.ROW_TRACKING_SUSPENDED: False,
    p.ENABLE_IN_COMMIT_TIMESTAMPS: False,
    p.ENABLE_TYPE_WIDENING: False,
    p.CHECKPOINT_STATS_AS_JSON: True,
    p.CHECKPOINT_STATS_AS_STRUCT: True,
    p.ENABLE_EXPIRED_LOG_CLEANUP: True,
    p.RANDOMIZE_FILE_PREFIXES: False,
    p.TUNE_FILE_SIZES_FOR_REWRITES: False,
    p.SYMLINK_MANIFEST: False,
    p.GROUP_COMMIT_FLEET: False,
    p.DELTA_ENCODED_INTEGERS: True,
}

#: Duration properties, and their value when unset (None: no limit).
DURATIONS: dict[str, str | None] = {
    p.LOG_RETENTION: p.DEFAULT_LOG_RETENTION,
    p.DELETED_FILE_RETENTION: p.DEFAULT_DELETED_FILE_RETENTION,
    p.TXN_RETENTION: None,
    p.CHECKPOINT_RETENTION: None,
}


def _check_mode(text: str, table: str) -> object:
    return TableConfig({p.COLUMN_MAPPING_MODE: text}, table).column_mapping_mode


def _check_auto_compact(text: str, table: str) -> object:
    if text.strip().lower() not in (*p.AUTO_COMPACT_ON, "false"):
        raise p.invalid(table, p.AUTO_COMPACT, text, "true, false, auto or legacy")
    return None


def _check_size(key: str) -> Any:
    return lambda text, table: p.parse_size(text, f"table {table}: {key}")


def _check_policy(text: str, table: str) -> object:
    if text.strip().lower() not in tuple(CheckpointPolicy):
        raise p.invalid(table, p.CHECKPOINT_POLICY, text, "classic or v2")
    return None


def _check_positive(key: str) -> Any:
    return lambda text, table: p.parse_int(text, table, key, minimum=1)


#: How each property a writer may set is checked (strictly) when it is set; the parsers are
#: those the attributes below read with.
CHECKS: dict[str, Any] = {
    **{key: (lambda k: lambda text, table: p.parse_bool(text, table, k))(key)
       for key in BOOLEANS},
    **{key: (lambda k: lambda text, table: p.parse_duration_ms(text, table, k))(key)
       for key in DURATIONS},
    p.AUTO_COMPACT: _check_auto_compact,
    p.AUTO_COMPACT_MIN_NUM_FILES: _check_positive(p.AUTO_COMPACT_MIN_NUM_FILES),
    p.AUTO_COMPACT_MAX_FILE_SIZE: _check_size(p.AUTO_COMPACT_MAX_FILE_SIZE),
    p.TARGET_FILE_SIZE: _check_size(p.TARGET_FILE_SIZE),
    p.RANDOM_PREFIX_LENGTH: _check_positive(p.RANDOM_PREFIX_LENGTH),
    p.CHECKPOINT_INTERVAL: _check_positive(p.CHECKPOINT_INTERVAL),
    p.CHECKPOINT_POLICY: _check_policy,
    p.COLUMN_MAPPING_MODE: _check_mode,
    p.DATA_SKIPPING_NUM_INDEXED_COLS:
        lambda text, table: p.parse_int(text, table, p.DATA_SKIPPING_NUM_INDEXED_COLS,
                                        minimum=-1),
    p.DATA_SKIPPING_STATS_COLUMNS: p.check_stats_columns,
    p.ISOLATION_LEVEL: lambda text, table: IsolationLevel.parse(text, table),
}

#: Every ``delta.*`` key a writer may set (besides ``delta.constraints.<name>`` and the
#: ``delta.feature.<name>`` requests): those checked above and the protocol version requests.
SETTABLE = frozenset(CHECKS) | {p.MIN_READER_VERSION, p.MIN_WRITER_VERSION}

#: Properties only the writer that turns a feature on sets: a value set by hand would claim
#: what the table's history does not hold.
RESERVED = (p.ICT_ENABLEMENT_VERSION, p.ICT_ENABLEMENT_TIMESTAMP, p.ROW_ID_COLUMN,
            p.ROW_COMMIT_VERSION_COLUMN, p.COLUMN_MAPPING_MAX_ID)


def _own_unknown(key: str) -> bool:
    """Whether ``key`` is in deltacommit's namespace (in any case) without being one of its
    properties: a misspelt ``deltacommit.parquet.deltaEncodedIntegers`` would be stored and
    never read, the files written as if it were unset.  The commit mechanism's keys
    (``deltacommit.coordination`` and the settings under it) are its log store's to check."""
    return (key.lower().startswith(p.DELTACOMMIT_PREFIX)
            and not (key == p.COORDINATION or key.startswith(p.COORDINATION + ".")))


class TableConfig:
    """A table's properties as typed values, each parsed on first use and kept.

    ``table`` names the table in errors.  The configuration is copied: a ``TableConfig``
    describes one ``metaData`` and never changes.
    """

    def __init__(self, configuration: Mapping[str, str | None], table: str = "") -> None:
        self.raw: Mapping[str, str | None] = MappingProxyType(dict(configuration))
        self.table = table

    @classmethod
    def of(cls, metadata: Metadata | None, table: str = "") -> TableConfig:
        """The configuration of ``metadata`` (empty for a table that has none yet)."""
        return cls({} if metadata is None else metadata.configuration, table)

    def __repr__(self) -> str:
        return f"TableConfig({dict(self.raw)!r})"

    # ------------------------------------------------------------------ readers

    def _flag(self, key: str) -> bool:
        """A boolean property: its default when unset, true only for ``true`` (any case), as
        Delta readers take it."""
        value = self.raw.get(key)
        if value is None:
            return BOOLEANS[key]
        return value.strip().lower() == "true"

    def _duration(self, key: str) -> int | None:
        value = self.raw.get(key) or DURATIONS[key]
        return None if value is None else p.parse_duration_ms(value, self.table, key)

    def _lenient_int(self, key: str, default: int, minimum: int) -> int:
        value = self.raw.get(key)
        if value is None:
            return default
        try:
            n = int(value.strip())
        except ValueError:
            return default
        return n if n >= minimum else default

    # ------------------------------------------------------------------ booleans

    @cached_property
    def append_only(self) -> bool:
        """``delta.appendOnly``: no commit may remove data."""
        return self._flag(p.APPEND_ONLY)

    @cached_property
    def group_commit_fleet(self) -> bool:
        """``deltacommit.groupCommit.fleet``: every deltacommit writer of the table publishes
        its transactions for fleet-wide group commit (``engine.group.fleet``)."""
        return self._flag(p.GROUP_COMMIT_FLEET)

    @cached_property
    def delta_encoded_integers(self) -> bool:
        """``deltacommit.parquet.deltaEncodedIntegers`` (true unless set): data files write
        integer columns of close, mostly distinct values DELTA_BINARY_PACKED."""
        return self._flag(p.DELTA_ENCODED_INTEGERS)

    @cached_property
    def enable_deletion_vectors(self) -> bool:
        return self._flag(p.ENABLE_DELETION_VECTORS)

    @cached_property
    def enable_change_data_feed(self) -> bool:
        return self._flag(p.ENABLE_CHANGE_DATA_FEED)

    @cached_property
    def enable_row_tracking(self) -> bool:
        return self._flag(p.ENABLE_ROW_TRACKING)

    @cached_property
    def row_tracking_suspended(self) -> bool:
        return self._flag(p.ROW_TRACKING_SUSPENDED)

    @cached_property
    def enable_in_commit_timestamps(self) -> bool:
        return self._flag(p.ENABLE_IN_COMMIT_TIMESTAMPS)

    @cached_property
    def enable_type_widening(self) -> bool:
        return self._flag(p.ENABLE_TYPE_WIDENING)

    @cached_property
    def checkpoint_stats_as_json(self) -> bool:
        """``delta.checkpoint.writeStatsAsJson`` (true unless set otherwise)."""
        return self._flag(p.CHECKPOINT_STATS_AS_JSON)

    @cached_property
    def checkpoint_stats_as_struct(self) -> bool:
        """``delta.checkpoint.writeStatsAsStruct`` (true unless set otherwise)."""
        return self._flag(p.CHECKPOINT_STATS_AS_STRUCT)

    @cached_property
    def enable_expired_log_cleanup(self) -> bool:
        """``delta.enableExpiredLogCleanup`` (true unless set otherwise)."""
        return self._flag(p.ENABLE_EXPIRED_LOG_CLEANUP)

    # ------------------------------------------------------------------ durations (ms)

    @cached_property
    def log_retention_ms(self) -> int:
        """``delta.logRetentionDuration`` (30 days unless set)."""
        value = self._duration(p.LOG_RETENTION)
        assert value is not None
        return value

    @cached_property
    def deleted_file_retention_ms(self) -> int:
        """``delta.deletedFileRetentionDuration`` (one week unless set)."""
        value = self._duration(p.DELETED_FILE_RETENTION)
        assert value is not None
        return value

    @cached_property
    def set_transaction_retention_ms(self) -> int | None:
        """``delta.setTransactionRetentionDuration``: None keeps application ids forever."""
        return self._duration(p.TXN_RETENTION)

    @cached_property
    def checkpoint_retention_ms(self) -> int | None:
        return self._duration(p.CHECKPOINT_RETENTION)

    # ------------------------------------------------------------------ numbers

    @cached_property
    def checkpoint_interval(self) -> int:
        """``delta.checkpointInterval``: a checkpoint every this many versions (10 unless set
        to a positive integer)."""
        return self._lenient_int(p.CHECKPOINT_INTERVAL, p.DEFAULT_CHECKPOINT_INTERVAL, 1)

    @cached_property
    def data_skipping_num_indexed_cols(self) -> int:
        """``delta.dataSkippingNumIndexedCols``: how many leaf columns get statistics (-1:
        all; 32 unless set to an integer)."""
        value = self.raw.get(p.DATA_SKIPPING_NUM_INDEXED_COLS)
        if value is None:
            return p.DEFAULT_INDEXED_COLUMNS
        try:
            return int(value.strip())
        except ValueError:
            return p.DEFAULT_INDEXED_COLUMNS

    @cached_property
    def data_skipping_stats_columns(self) -> list[tuple[str, ...]] | None:
        """``delta.dataSkippingStatsColumns``: the column paths that get statistics, which
        overrides the count above; None if unset."""
        value = self.raw.get(p.DATA_SKIPPING_STATS_COLUMNS)
        return None if value is None else p.stats_columns(value)

    @cached_property
    def target_file_size(self) -> int | None:
        """``delta.targetFileSize`` in bytes; None if unset."""
        value = self.raw.get(p.TARGET_FILE_SIZE)
        return p.parse_size(value, f"table {self.table}: {p.TARGET_FILE_SIZE}") if value else None

    @cached_property
    def auto_compact(self) -> bool:
        """``delta.autoOptimize.autoCompact``: ``true``, ``auto`` or ``legacy``."""
        value = self.raw.get(p.AUTO_COMPACT)
        return (value or "false").strip().lower() in p.AUTO_COMPACT_ON

    @cached_property
    def auto_compact_min_num_files(self) -> int | None:
        """``delta.autoOptimize.autoCompact.minNumFiles``; None if unset or not a number."""
        value = self.raw.get(p.AUTO_COMPACT_MIN_NUM_FILES)
        try:
            return int(value) if value else None
        except ValueError:
            return None

    @cached_property
    def auto_compact_max_file_size(self) -> int | None:
        """``delta.autoOptimize.autoCompact.maxFileSize`` in bytes; None if unset."""
        value = self.raw.get(p.AUTO_COMPACT_MAX_FILE_SIZE)
        return (p.parse_size(value, f"table {self.table}: {p.AUTO_COMPACT_MAX_FILE_SIZE}")
                if value else None)

    # ------------------------------------------------------------------ enumerations

    @cached_property
    def column_mapping_mode(self) -> ColumnMappingMode:
        """``delta.columnMapping.mode`` (``none`` unless set)."""
        raw = self.raw.get(p.COLUMN_MAPPING_MODE)
        text = (raw or "none").strip().lower()
        try:
            return ColumnMappingMode(text)
        except ValueError:
            where = f"table {self.table}: " if self.table else ""
            raise InvalidArgumentError(
                f"{where}{p.COLUMN_MAPPING_MODE} must be one of "
                f"{[m.value for m in ColumnMappingMode]}, got {raw!r}") from None

    @cached_property
    def checkpoint_policy(self) -> CheckpointPolicy:
        """``delta.checkpointPolicy``: V2 only when it says ``v2``."""
        text = (self.raw.get(p.CHECKPOINT_POLICY) or "").strip().lower()
        return CheckpointPolicy.V2 if text == CheckpointPolicy.V2 else CheckpointPolicy.CLASSIC

    @cached_property
    def isolation_level(self) -> IsolationLevel:
        """``delta.isolationLevel`` (Serializable unless set, as in Delta)."""
        text = self.raw.get(p.ISOLATION_LEVEL) or IsolationLevel.SERIALIZABLE.value
        return IsolationLevel.parse(text, self.table)

    # ------------------------------------------------------------------ names and maps

    @cached_property
    def row_id_column(self) -> str | None:
        """The hidden column materializing row ids (set when row tracking is turned on)."""
        return self.raw.get(p.ROW_ID_COLUMN)

    @cached_property
    def row_commit_version_column(self) -> str | None:
        return self.raw.get(p.ROW_COMMIT_VERSION_COLUMN)

    @cached_property
    def constraints(self) -> dict[str, str | None]:
        """CHECK constraints: name -> SQL expression (``delta.constraints.<name>``; the prefix
        compared without case, as Spark does)."""
        n = len(p.CONSTRAINT_PREFIX)
        return {key[n:]: value for key, value in sorted(self.raw.items())
                if key.lower().startswith(p.CONSTRAINT_PREFIX)}

    @cached_property
    def coordination(self) -> dict[str, str]:
        """``deltacommit.coordination`` and the settings under it: the commit mechanism the
        table's writers use."""
        return {k: v for k, v in self.raw.items()
                if (k == p.COORDINATION or k.startswith(p.COORDINATION + "."))
                and v is not None}

    @cached_property
    def in_commit_timestamp_enablement(self) -> tuple[int, int] | None:
        """``(version, timestamp)`` from which commits carry in-commit timestamps, if the
        feature was turned on for a table with history; None otherwise."""
        v, ts = self.raw.get(p.ICT_ENABLEMENT_VERSION), self.raw.get(p.ICT_ENABLEMENT_TIMESTAMP)
        if v is None and ts is None:
            return None
        try:
            return int(v or ""), int(ts or "")
        except ValueError:
            raise CorruptLogError(
                f"table {self.table}: {p.ICT_ENABLEMENT_VERSION}={v!r} and "
                f"{p.ICT_ENABLEMENT_TIMESTAMP}={ts!r} must both be integers") from None

    @cached_property
    def in_commit_timestamp_floor(self) -> int | None:
        """The enablement timestamp where it is an integer: a lower bound for the next
        in-commit timestamp when the commit holding the previous one is gone."""
        ts = self.raw.get(p.ICT_ENABLEMENT_TIMESTAMP)
        digits = ts.strip().lstrip("-") if ts is not None else ""
        # ASCII digits alone: '²' is a digit that int() refuses.
        return int(ts) if ts is not None and digits.isascii() and digits.isdigit() else None

    # ------------------------------------------------------------------ with the protocol

    def row_tracking_supported(self, protocol: Protocol) -> bool:
        """Whether writers must assign row ids: the feature is listed and not suspended."""
        return ("rowTracking" in (protocol.writer_features or ())
                and protocol.min_writer_version >= 7 and not self.row_tracking_suspended)

    def row_tracking_enabled(self, protocol: Protocol) -> bool:
        """Whether readers may rely on ids being present, and writers must preserve them."""
        return self.row_tracking_supported(protocol) and self.enable_row_tracking

    def in_commit_timestamps_enabled(self, protocol: Protocol) -> bool:
        """Whether every commit must carry an in-commit timestamp."""
        return ("inCommitTimestamp" in (protocol.writer_features or ())
                and protocol.min_writer_version >= 7 and self.enable_in_commit_timestamps)

    def in_commit_timestamps_start(self, protocol: Protocol) -> int | None:
        """The first version whose commits carry in-commit timestamps (None: none do)."""
        if not self.in_commit_timestamps_enabled(protocol):
            return None
        e = self.in_commit_timestamp_enablement
        return 0 if e is None else e[0]

    def change_data_feed_enabled(self, protocol: Protocol) -> bool:
        """Whether writers must produce change data for row-level changes (PROTOCOL.md "Writer
        Requirements for AddCDCFile"): the property counts on writer versions 4 to 6, and on
        7 only with the ``changeDataFeed`` feature."""
        w = protocol.min_writer_version
        if w < 4 or (w >= 7 and "changeDataFeed" not in (protocol.writer_features or [])):
            return False
        return self.enable_change_data_feed

    def deletion_vectors_enabled(self, protocol: Protocol) -> bool:
        """Whether writers may add deletion vectors (PROTOCOL.md: only with the property)."""
        return self.enable_deletion_vectors and "deletionVectors" in (
            protocol.writer_features or [])

    def v2_checkpoints(self, protocol: Protocol) -> bool:
        """Whether checkpoints are written UUID-named in the V2 spec: the policy asks for it
        and the protocol has the ``v2Checkpoint`` feature, without which readers would not
        recognise them."""
        return (self.checkpoint_policy is CheckpointPolicy.V2
                and "v2Checkpoint" in (protocol.reader_features or [])
                and "v2Checkpoint" in (protocol.writer_features or []))

    # ------------------------------------------------------------------ new properties

    @staticmethod
    def check_new(properties: Mapping[str, object], table: str) -> None:
        """Refuse new properties this library would not honour: a ``delta.*`` key it does not
        know (a typo would be silently ignored), one only the writer turning a feature on
        sets, and any value that does not parse.  (CHECK constraint expressions are checked
        by the expression parser, ``protocol.property_checks``.)"""
        for key, value in properties.items():
            if not isinstance(value, str):
                raise InvalidArgumentError(
                    f"table {table}: configuration value of {key!r} must be a string, got "
                    f"{value!r}")
            check = CHECKS.get(key)
            if check is not None:
                check(value, table)
                continue
            if key.lower().startswith(p.CONSTRAINT_PREFIX):
                if not key[len(p.CONSTRAINT_PREFIX):]:
                    raise InvalidArgumentError(f"table {table}: CHECK constraint {key!r} has no "
                                               "name")
                continue
            if key.startswith(p.FEATURE_PREFIX) or key in SETTABLE:
                continue
            if key in RESERVED:
                raise InvalidArgumentError(
                    f"table {table}: {key} is set by the writer that turns the feature on, not "
                    "by hand")
            if key.startswith("delta.") or _own_unknown(key):
                import difflib  # for this error's suggestion only

                close = difflib.get_close_matches(key, sorted(SETTABLE), n=2)
                hint = f"; did you mean {' or '.join(close)}?" if close else ""
                raise InvalidArgumentError(
                    f"table {table}: unsupported table property {key!r}{hint}")

    @staticmethod
    def requests(properties: Mapping[str, str], table: str) -> PropertyRequests:
        """What ``properties`` ask of the table: the properties stored, the features they ask
        for (by property or ``delta.feature.<name>``), and the protocol versions asked for.
        The one reading for a new table and a property change alike."""
        stored: dict[str, str | None] = dict(properties)
        reader_version, writer_version = take_version_requests(stored, table)
        features = requested_features(stored)
        take_feature_requests(stored, table)
        return PropertyRequests(stored, tuple(features), reader_version, writer_version)


@dataclass(frozen=True, slots=True)
class PropertyRequests:
    """What new properties ask of a table (``TableConfig.requests``)."""

    #: The properties to store: requests (``delta.feature.*``, the version requests) removed.
    stored: dict[str, str | None]
    #: Features asked for, with what they require, in the order a protocol lists them.
    features: tuple[str, ...]
    reader_version: int
    writer_version: int

    def initial_protocol(self, schema_features: Iterable[str] = ()) -> Protocol:
        """The protocol of a new table with these properties and a schema needing
        ``schema_features``: the lowest that supports them all."""
        return initial_protocol([*self.features, *schema_features], self.reader_version,
                                self.writer_version)

    def applied_to(self, protocol: Protocol) -> Protocol:
        """``protocol`` raised to support what these properties ask for (``protocol`` itself
        if it does already): the same features a new table with them gets."""
        return with_features(protocol, self.features, self.reader_version, self.writer_version)
