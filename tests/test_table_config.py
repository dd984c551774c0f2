"""``TableConfig``: every table property parsed once into a typed value.  Pure.

Reading a table's properties never fails on a tuning knob (a malformed checkpoint interval or
boolean reads as Delta readers read it), and fails clearly, naming the property, on one whose
meaning cannot be guessed.  Checking new properties refuses every value that does not parse,
and the error names the table, the property, the value and what is expected.  Whatever the
text, only deltacommit errors come out (hypothesis).
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from deltacommit.errors import CorruptLogError, DeltaCommitError, InvalidArgumentError
from deltacommit.protocol.actions import Metadata, Protocol
from deltacommit.protocol.property_checks import check_properties
from deltacommit.protocol.table_config import properties as p
from deltacommit.protocol.table_config.config import (
    BOOLEANS,
    CHECKS,
    RESERVED,
    SETTABLE,
    TableConfig,
)
from deltacommit.protocol.table_config.properties import (
    CheckpointPolicy,
    ColumnMappingMode,
    IsolationLevel,
)

T = "s3://bucket/t"

#: Every attribute a reader of a table may ask for.
ATTRIBUTES = [
    "append_only", "enable_deletion_vectors", "enable_change_data_feed", "enable_row_tracking",
    "row_tracking_suspended", "enable_in_commit_timestamps", "enable_type_widening",
    "checkpoint_stats_as_json", "checkpoint_stats_as_struct", "enable_expired_log_cleanup",
    "log_retention_ms", "deleted_file_retention_ms", "set_transaction_retention_ms",
    "checkpoint_retention_ms", "checkpoint_interval", "data_skipping_num_indexed_cols",
    "data_skipping_stats_columns", "target_file_size", "auto_compact",
    "auto_compact_min_num_files", "auto_compact_max_file_size", "column_mapping_mode",
    "checkpoint_policy", "isolation_level", "row_id_column", "row_commit_version_column",
    "constraints", "coordination", "in_commit_timestamp_enablement",
    "in_commit_timestamp_floor",
]

#: A malformed value of each property a writer may set, and words its error must contain.
BAD: dict[str, tuple[str, str]] = {
    **{key: ("yes please", "true or false") for key in BOOLEANS},
    p.LOG_RETENTION: ("forever", "is not a duration"),
    p.DELETED_FILE_RETENTION: ("1 month", "is not a duration"),
    p.TXN_RETENTION: ("soon", "is not a duration"),
    p.CHECKPOINT_RETENTION: ("-1 day", "is not a duration"),
    p.CHECKPOINT_INTERVAL: ("zero", "positive integer"),
    p.RANDOM_PREFIX_LENGTH: ("0", "positive integer"),
    p.AUTO_COMPACT_MIN_NUM_FILES: ("many", "positive integer"),
    p.DATA_SKIPPING_NUM_INDEXED_COLS: ("-2", "at least -1"),
    p.DATA_SKIPPING_STATS_COLUMNS: ("a..b, `c", "comma-separated list of column names"),
    p.TARGET_FILE_SIZE: ("big", "size in bytes"),
    p.AUTO_COMPACT_MAX_FILE_SIZE: ("0mb", "size in bytes"),
    p.AUTO_COMPACT: ("sometimes", "true, false, auto or legacy"),
    p.CHECKPOINT_POLICY: ("v3", "classic or v2"),
    p.COLUMN_MAPPING_MODE: ("position", "one of ['none', 'name', 'id']"),
    p.ISOLATION_LEVEL: ("SnapshotIsolation", "'Serializable' or 'WriteSerializable'"),
}


def test_every_settable_property_has_a_check_and_a_bad_value_tested() -> None:
    assert set(BAD) == set(CHECKS)
    assert set(CHECKS) | {p.MIN_READER_VERSION, p.MIN_WRITER_VERSION} == SETTABLE


@pytest.mark.parametrize("key", sorted(BAD))
def test_a_bad_value_names_the_table_the_property_the_value_and_what_is_expected(
        key: str) -> None:
    value, expected = BAD[key]
    with pytest.raises(InvalidArgumentError) as e:
        check_properties({key: value}, T)
    message = str(e.value)
    assert T in message and key in message and repr(value) in message and expected in message


def test_defaults_of_an_empty_configuration() -> None:
    c = TableConfig({}, T)
    assert not c.append_only and not c.enable_deletion_vectors
    assert c.checkpoint_stats_as_json and c.checkpoint_stats_as_struct
    assert c.enable_expired_log_cleanup
    assert c.log_retention_ms == 30 * 86_400_000
    assert c.deleted_file_retention_ms == 7 * 86_400_000
    assert c.set_transaction_retention_ms is None and c.checkpoint_retention_ms is None
    assert c.checkpoint_interval == 10 and c.data_skipping_num_indexed_cols == 32
    assert c.data_skipping_stats_columns is None and c.target_file_size is None
    assert c.column_mapping_mode is ColumnMappingMode.NONE
    assert c.checkpoint_policy is CheckpointPolicy.CLASSIC
    assert c.isolation_level is IsolationLevel.SERIALIZABLE
    assert c.constraints == {} and c.coordination == {}
    assert c.in_commit_timestamp_enablement is None


def test_typed_values() -> None:
    c = TableConfig({
        p.APPEND_ONLY: "TRUE", p.CHECKPOINT_INTERVAL: " 3 ", p.LOG_RETENTION: "interval 2 days",
        p.TXN_RETENTION: "interval 1 hour", p.DATA_SKIPPING_STATS_COLUMNS: "a, `b.c`.d",
        p.TARGET_FILE_SIZE: "128mb", p.AUTO_COMPACT: "auto", p.COLUMN_MAPPING_MODE: "Name",
        p.CHECKPOINT_POLICY: "v2", p.ISOLATION_LEVEL: "writeserializable",
        "delta.constraints.positive": "id > 0", "Delta.Constraints.small": "id < 9",
        p.COORDINATION: "dynamodb", p.COORDINATION + ".dynamodbTable": "log",
        p.ICT_ENABLEMENT_VERSION: "4", p.ICT_ENABLEMENT_TIMESTAMP: "1700000000000",
    }, T)
    assert c.append_only and c.checkpoint_interval == 3
    assert c.log_retention_ms == 2 * 86_400_000 and c.set_transaction_retention_ms == 3_600_000
    assert c.data_skipping_stats_columns == [("a",), ("b.c", "d")]
    assert c.target_file_size == 128 << 20 and c.auto_compact
    assert c.column_mapping_mode is ColumnMappingMode.NAME
    assert c.checkpoint_policy is CheckpointPolicy.V2
    assert c.isolation_level is IsolationLevel.WRITE_SERIALIZABLE
    assert c.constraints == {"positive": "id > 0", "small": "id < 9"}
    assert c.coordination == {"deltacommit.coordination": "dynamodb",
                              "deltacommit.coordination.dynamodbTable": "log"}
    assert c.in_commit_timestamp_enablement == (4, 1_700_000_000_000)
    assert c.in_commit_timestamp_floor == 1_700_000_000_000


def test_tuning_knobs_another_writer_spelled_badly_read_as_their_defaults() -> None:
    c = TableConfig({p.CHECKPOINT_INTERVAL: "0", p.DATA_SKIPPING_NUM_INDEXED_COLS: "x",
                     p.CHECKPOINT_STATS_AS_JSON: "yes", p.CHECKPOINT_POLICY: "v9",
                     p.AUTO_COMPACT_MIN_NUM_FILES: "lots"}, T)
    assert c.checkpoint_interval == 10 and c.data_skipping_num_indexed_cols == 32
    assert not c.checkpoint_stats_as_json  # only "true" is true, as Delta readers read it
    assert c.checkpoint_policy is CheckpointPolicy.CLASSIC
    assert c.auto_compact_min_num_files is None
    # '²' is a digit to str.isdigit, not to int(): read as no timestamp, not an exception.
    assert TableConfig({p.ICT_ENABLEMENT_TIMESTAMP: "\u00b2"}, T).in_commit_timestamp_floor is None


@pytest.mark.parametrize(("key", "attribute"), [
    (p.LOG_RETENTION, "log_retention_ms"),
    (p.DELETED_FILE_RETENTION, "deleted_file_retention_ms"),
    (p.ISOLATION_LEVEL, "isolation_level"),
    (p.COLUMN_MAPPING_MODE, "column_mapping_mode"),
    (p.TARGET_FILE_SIZE, "target_file_size"),
])
def test_a_value_whose_meaning_cannot_be_guessed_fails_where_it_is_used(
        key: str, attribute: str) -> None:
    c = TableConfig({key: "nonsense"}, T)  # building it never fails
    with pytest.raises(InvalidArgumentError) as e:
        getattr(c, attribute)
    assert key in str(e.value) and "nonsense" in str(e.value)


def test_a_half_recorded_enablement_is_a_corrupt_log() -> None:
    with pytest.raises(CorruptLogError, match="must both be integers"):
        _ = TableConfig({p.ICT_ENABLEMENT_VERSION: "3"}, T).in_commit_timestamp_enablement


def test_features_need_both_the_protocol_and_the_property() -> None:
    on = TableConfig({p.ENABLE_ROW_TRACKING: "true", p.ENABLE_IN_COMMIT_TIMESTAMPS: "true",
                      p.ENABLE_DELETION_VECTORS: "true", p.ENABLE_CHANGE_DATA_FEED: "true",
                      p.CHECKPOINT_POLICY: "v2"})
    legacy = Protocol(1, 2)
    assert not on.row_tracking_enabled(legacy) and not on.in_commit_timestamps_enabled(legacy)
    assert not on.deletion_vectors_enabled(legacy) and not on.change_data_feed_enabled(legacy)
    assert not on.v2_checkpoints(legacy)
    assert on.change_data_feed_enabled(Protocol(1, 4))
    full = Protocol(3, 7, ["deletionVectors", "v2Checkpoint"],
                    ["deletionVectors", "v2Checkpoint", "domainMetadata", "rowTracking",
                     "inCommitTimestamp", "changeDataFeed"])
    assert on.row_tracking_enabled(full) and on.in_commit_timestamps_enabled(full)
    assert on.deletion_vectors_enabled(full) and on.change_data_feed_enabled(full)
    assert on.v2_checkpoints(full) and on.in_commit_timestamps_start(full) == 0
    suspended = TableConfig({p.ENABLE_ROW_TRACKING: "true", p.ROW_TRACKING_SUSPENDED: "true"})
    assert not suspended.row_tracking_supported(full)
    assert TableConfig({}).row_tracking_supported(full)


def test_unknown_and_reserved_keys_are_refused_with_a_hint() -> None:
    with pytest.raises(InvalidArgumentError, match=r"did you mean delta\.appendOnly"):
        check_properties({"delta.appendOnlyy": "true"}, T)
    for key in RESERVED:
        with pytest.raises(InvalidArgumentError, match="set by the writer that turns"):
            check_properties({key: "1"}, T)
    with pytest.raises(InvalidArgumentError, match="must be a string"):
        check_properties({p.APPEND_ONLY: True}, T)
    with pytest.raises(InvalidArgumentError, match="has no name"):
        check_properties({p.CONSTRAINT_PREFIX: "id > 0"}, T)
    with pytest.raises(InvalidArgumentError, match="cannot be enforced"):
        check_properties({p.CONSTRAINT_PREFIX + "c": "id >"}, T)
    with pytest.raises(InvalidArgumentError, match=r"did you mean deltacommit\.groupCommit\.fleet"):
        check_properties({"deltacommit.groupcommit.fleet": "true"}, T)
    # Other engines' keys, and the commit mechanism's, are left to their owners.
    check_properties({"spark.sql.x": "1", "deltacommit.coordination": "conditional",
                      "deltacommit.coordination.dynamodbTable": "log",
                      p.FEATURE_PREFIX + "rowTracking": "supported",
                      p.MIN_WRITER_VERSION: "7"}, T)


def test_requests_are_the_one_reading_of_the_property_feature_table() -> None:
    asks = TableConfig.requests({p.ENABLE_ROW_TRACKING: "true", p.MIN_WRITER_VERSION: "7",
                                 p.FEATURE_PREFIX + "timestampNtz": "supported",
                                 p.APPEND_ONLY: "true"}, T)
    assert asks.stored == {p.ENABLE_ROW_TRACKING: "true", p.APPEND_ONLY: "true"}
    assert asks.features == ("timestampNtz", "domainMetadata", "rowTracking", "appendOnly")
    assert (asks.reader_version, asks.writer_version) == (0, 7)
    new = asks.initial_protocol()
    assert (new.min_reader_version, new.min_writer_version) == (3, 7)
    assert set(new.writer_features or ()) == {"timestampNtz", "domainMetadata", "rowTracking",
                                               "appendOnly"}
    assert asks.applied_to(new) is new  # a protocol that has them all is kept as it is


def test_a_snapshot_builds_its_config_once_per_metadata() -> None:
    from deltacommit.engine.snapshot.snapshot import Commit, Snapshot
    from deltacommit.io.logstore import ConditionalPutLogStore
    from deltacommit.io.storage.memory import MemoryStore
    from deltacommit.protocol.actions import CommitInfo
    from deltacommit.protocol.replay import TableState

    store = ConditionalPutLogStore(MemoryStore("config-once"))
    m = Metadata("i", '{"type":"struct","fields":[]}', [], {p.CHECKPOINT_INTERVAL: "4"})
    state = TableState()
    state.apply(0, [Protocol(1, 2), m])
    s0 = Snapshot(store, state)
    assert Snapshot(store, TableState()).table_config.raw == {}  # before version 0
    config = s0.table_config
    s1 = s0.with_commit(Commit(1, [CommitInfo({"operation": "WRITE"})]))
    assert s1.table_config is config and config.checkpoint_interval == 4
    m2 = Metadata("i", m.schema_string, [], {p.CHECKPOINT_INTERVAL: "5"})
    s2 = s1.with_commit(Commit(2, [m2]))
    assert s2.table_config is not config and s2.table_config.checkpoint_interval == 5


TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)


@given(st.dictionaries(st.sampled_from(sorted(CHECKS) + [p.ICT_ENABLEMENT_VERSION,
                                                         p.ICT_ENABLEMENT_TIMESTAMP,
                                                         p.CONSTRAINT_PREFIX + "c"]),
                       st.one_of(TEXT, st.none()), max_size=6))
def test_any_configuration_reads_into_values_or_a_deltacommit_error(
        configuration: dict[str, str | None]) -> None:
    c = TableConfig(configuration, T)
    for name in ATTRIBUTES:
        with contextlib.suppress(DeltaCommitError):
            getattr(c, name)
    for protocol in (Protocol(1, 2), Protocol(3, 7, ["v2Checkpoint"],
                                              ["v2Checkpoint", "rowTracking", "domainMetadata",
                                               "inCommitTimestamp"])):
        try:
            c.in_commit_timestamps_start(protocol)
            c.row_tracking_enabled(protocol)
            c.v2_checkpoints(protocol)
        except DeltaCommitError:
            pass


@given(st.dictionaries(st.sampled_from(sorted(SETTABLE)) | TEXT, TEXT, max_size=4))
@example({"delta.minReaderVersion": "\u00b2"})  # a digit to str.isdigit, not to int()
def test_any_new_properties_are_accepted_or_refused_with_a_deltacommit_error(
        properties: dict[str, str]) -> None:
    try:
        check_properties(properties, T)
        TableConfig.requests(properties, T).initial_protocol()
    except DeltaCommitError:
        pass


@given(st.sampled_from(sorted(CHECKS)), TEXT)
def test_a_value_the_check_accepts_reads_without_error(key: str, value: str) -> None:
    try:
        check_properties({key: value}, T)
    except InvalidArgumentError:
        return
    c = TableConfig({key: value}, T)
    for name in ATTRIBUTES:
        getattr(c, name)
