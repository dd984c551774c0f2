"""The pure conflict checker: Delta's check order, isolation levels and messages, case by case.

The end-to-end matrix (``test_conflict_matrix.py``) shows the outcomes on real tables; these
cases pin down the rules that matrix cannot isolate: which check wins when a winning commit
trips several, feature drops, and the exact reading of blind appends and SnapshotIsolation.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

from deltacommit.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentModificationException,
    ConcurrentTransactionException,
    InvalidArgumentError,
    MetadataChangedException,
    ProtocolChangedException,
)
from deltacommit.protocol.actions import Action, Add, CommitInfo, Metadata, Protocol, Remove, Txn
from deltacommit.protocol.conflicts import (
    IsolationLevel,
    TransactionSummary,
    WinningCommit,
    check_conflicts,
)
from deltacommit.protocol.expressions.predicates import parse_predicate
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.feature_requests import supported_features

T = "file:///tables/t"
METADATA = Metadata(id="00000000-0000-4000-8000-000000000000",
                    schema_string='{"type":"struct","fields":[]}', partition_columns=["p"],
                    configuration={})
PROTOCOL = Protocol(1, 2)
SER = IsolationLevel.SERIALIZABLE
WS = IsolationLevel.WRITE_SERIALIZABLE
SI = IsolationLevel.SNAPSHOT_ISOLATION


def add(path: str, p: str | None = "a", data_change: bool = True) -> Add:
    return Add(path=path, partition_values={} if p is None else {"p": p}, size=1,
               modification_time=0, data_change=data_change)


def remove(path: str, p: str = "a", data_change: bool = True) -> Remove:
    return add(path, p).to_remove(0, data_change)


def current(level: IsolationLevel = SER, *, reads: tuple[str, ...] = (),
            read_files: tuple[str, ...] = (), unpartitioned: bool = False,
            **kw: Any) -> TransactionSummary:
    return TransactionSummary(
        operation=kw.pop("operation", "WRITE"),
        partition_columns=() if unpartitioned else ("p",),
        partition_types={} if unpartitioned else {"p": pa.string()},
        isolation_level=level,
        read_predicates=tuple(parse_predicate(r) for r in reads),
        read_files=frozenset(read_files),
        read_protocol=PROTOCOL,
        read_metadata=METADATA,
        **kw,
    )


def winner(*actions: Action, operation: str = "WRITE", blind: bool = False,
           version: int = 7) -> WinningCommit:
    info = CommitInfo({"operation": operation, "isBlindAppend": blind, "txnId": "w"})
    return WinningCommit.from_actions(version, [info, *actions])


def raises(exc: type[ConcurrentModificationException], cur: TransactionSummary,
           win: WinningCommit) -> str:
    with pytest.raises(ConcurrentModificationException) as info:
        check_conflicts(cur, win, T)
    assert type(info.value) is exc, f"expected {exc.__name__}, got {type(info.value).__name__}"
    assert info.value.winning_version == win.version
    assert info.value.operation == win.operation
    msg = str(info.value)
    assert f"version {win.version} ({win.operation})" in msg and T in msg
    return msg


# --------------------------------------------------------------------------- check order


def test_protocol_is_checked_before_everything() -> None:
    cur = current(reads=("p = 'a'",), read_files=("f",), read_app_ids=frozenset({"app"}),
                  removed_files=frozenset({"f"}), has_protocol=True)
    win = winner(Protocol(1, 7, None, ["appendOnly", "invariants"]), replace(METADATA, id="x"),
                 Txn("app", 3), add("g"), remove("f"))
    raises(ProtocolChangedException, cur, win)


def test_metadata_before_app_ids_before_files() -> None:
    cur = current(reads=("p = 'a'",), read_files=("f",), read_app_ids=frozenset({"app"}),
                  removed_files=frozenset({"f"}))
    everything = (Txn("app", 3), add("g"), remove("f"))
    msg = raises(MetadataChangedException, cur,
                 winner(replace(METADATA, configuration={"team": "x"}), *everything))
    assert "table properties ['team']" in msg
    msg = raises(ConcurrentTransactionException, cur, winner(*everything))
    assert "'app' version 3" in msg
    msg = raises(ConcurrentAppendException, cur, winner(add("g"), remove("f")))
    assert "added file g to partition p='a'" in msg and "p = 'a'" in msg
    msg = raises(ConcurrentDeleteReadException, cur, winner(remove("f")))
    assert "removed file f (partition p='a')" in msg


def test_delete_delete_needs_a_file_removed_but_not_read() -> None:
    # A low-level transaction that removes a file it took from a listing, without scanning.
    cur = current(removed_files=frozenset({"f"}))
    msg = raises(ConcurrentDeleteDeleteException, cur, winner(remove("f"), operation="DELETE"))
    assert "removed file f (partition p='a'), which this transaction also removes" in msg
    check_conflicts(cur, winner(remove("other")), T)


# --------------------------------------------------------------------------- protocol


def test_winner_protocol_this_writer_cannot_write() -> None:
    msg = raises(ProtocolChangedException, current(),
                 winner(Protocol(3, 7, ["geospatial"], ["geospatial"])))
    assert "geospatial" in msg


def test_winner_dropping_a_feature_conflicts() -> None:
    cur = replace(current(), read_protocol=Protocol(1, 7, None, ["appendOnly", "invariants"]))
    msg = raises(ProtocolChangedException, cur,
                 winner(Protocol(1, 7, None, ["appendOnly"]), operation="DROP FEATURE"))
    assert "['invariants']" in msg
    # The same features named explicitly are not a drop: legacy (1, 2) implies both.
    check_conflicts(current(), winner(Protocol(1, 7, None, ["appendOnly", "invariants"])), T)


def test_supported_features_of_legacy_and_feature_protocols() -> None:
    assert supported_features(Protocol(1, 1)) == frozenset()
    assert supported_features(Protocol(1, 2)) == {"appendOnly", "invariants"}
    assert supported_features(Protocol(2, 5)) >= {"columnMapping", "changeDataFeed",
                                                   "checkConstraints"}
    assert supported_features(Protocol(3, 7, ["timestampNtz"], ["timestampNtz", "appendOnly"])) \
        == {"timestampNtz", "appendOnly"}


# --------------------------------------------------------------------------- appends


def test_blind_appends_count_only_under_serializable() -> None:
    cur = current(reads=("p = 'a'",))
    blind = winner(add("g"), blind=True)
    raises(ConcurrentAppendException, cur, blind)
    check_conflicts(replace(cur, isolation_level=WS), blind, T)
    # A metadata change under WriteSerializable counts blind appends again (Spark).
    raises(ConcurrentAppendException, replace(cur, isolation_level=WS, has_metadata=True), blind)
    # A winner that does not say it is a blind append is treated as not being one.
    unlabelled = WinningCommit.from_actions(7, [add("g")])
    assert not unlabelled.is_blind_append
    raises(ConcurrentAppendException, replace(cur, isolation_level=WS), unlabelled)


def test_compaction_adds_count_whatever_their_data_change_flag() -> None:
    # Spark (and delta-rs) do not filter a winner's adds by dataChange.
    win = winner(remove("f", data_change=False), add("f2", data_change=False),
                 operation="OPTIMIZE")
    for level in (SER, WS):
        raises(ConcurrentAppendException, current(level, reads=("p = 'a'",)), win)


def test_disjoint_partitions_do_not_conflict() -> None:
    cur = current(reads=("p = 'b'",), read_files=("fb",), removed_files=frozenset({"fb"}))
    check_conflicts(cur, winner(add("g"), remove("f"), operation="DELETE"), T)
    cur = current(reads=("p IN ('b', 'c')",))
    check_conflicts(cur, winner(add("g", "a")), T)
    raises(ConcurrentAppendException, cur, winner(add("g", "c")))


def test_unpartitioned_and_whole_table_reads_match_any_add() -> None:
    cur = current(reads=("p = 'zzz'",), unpartitioned=True)
    msg = raises(ConcurrentAppendException, cur, winner(add("g", None)))
    assert "added file g to the table" in msg
    msg = raises(ConcurrentAppendException, current(read_whole_table=True),
                 winner(add("g", "q")))
    assert "the whole table" in msg


def test_blind_append_definition_follows_spark() -> None:
    assert current(added_files=(add("x"),)).is_blind_append
    # Reading an app id is not reading the table; a metadata-only change reads no files.
    assert current(read_app_ids=frozenset({"app"}), has_other_actions=True).is_blind_append
    assert current(has_metadata=True).is_blind_append
    assert current(has_protocol=True).is_blind_append
    assert not current(reads=("p = 'a'",)).is_blind_append
    assert not current(read_whole_table=True).is_blind_append
    assert not current(removed_files=frozenset({"f"})).is_blind_append
    # So a metadata-only change is not invalidated by files added concurrently.
    check_conflicts(current(has_metadata=True), winner(add("g")), T)


# --------------------------------------------------------------------------- deletes


def test_removes_without_data_change_count_for_delete_read() -> None:
    # Spark counts them; delta-rs would let the reader commit and resurrect compacted rows.
    cur = current(SI, read_files=("f",), data_change=False, operation="OPTIMIZE")
    assert cur.effective_isolation is SI
    raises(ConcurrentDeleteReadException, cur,
           winner(remove("f", data_change=False), operation="OPTIMIZE"))


def test_whole_table_read_conflicts_with_any_remove() -> None:
    msg = raises(ConcurrentDeleteReadException, current(read_whole_table=True),
                 winner(remove("elsewhere", "z"), operation="DELETE"))
    assert "whole table" in msg and "elsewhere" in msg


def test_paths_are_compared_decoded() -> None:
    cur = current(read_files=("p=a b/f.parquet",))
    raises(ConcurrentDeleteReadException, cur, winner(remove("p=a%20b/f.parquet")))


# --------------------------------------------------------------------------- isolation


def test_snapshot_isolation_downgrade_rules() -> None:
    compaction = current(data_change=False, operation="OPTIMIZE", read_files=("f",),
                         reads=("p = 'a'",))
    assert compaction.effective_isolation is SI
    assert replace(compaction, isolation_level=WS).effective_isolation is SI
    # Under WriteSerializable the operation must also be one that changes no data.
    assert replace(compaction, isolation_level=WS, operation="WRITE").effective_isolation is WS
    assert replace(compaction, operation="WRITE").effective_isolation is SI
    # Any non-file action keeps the table's level.
    for extra in ({"has_metadata": True}, {"has_protocol": True}, {"has_other_actions": True}):
        assert replace(compaction, **extra).effective_isolation is SER
    assert replace(compaction, data_change=True).effective_isolation is SER
    # At snapshot isolation concurrent appends never conflict.
    check_conflicts(compaction, winner(add("g")), T)


def test_isolation_level_from_table_configuration() -> None:
    assert TableConfig({}, T).isolation_level is SER
    assert TableConfig({"delta.isolationLevel": None}, T).isolation_level is SER
    assert TableConfig({"delta.isolationLevel": "writeserializable"}, T).isolation_level is WS
    with pytest.raises(InvalidArgumentError, match="SnapshotIsolation"):
        _ = TableConfig({"delta.isolationLevel": "SnapshotIsolation"}, T).isolation_level


def test_winning_commit_summary_reads_commit_info() -> None:
    w = WinningCommit.from_actions(3, [
        CommitInfo({"operation": "MERGE", "isBlindAppend": False, "txnId": "abc"}),
        add("x"), remove("y"), Txn("app", 1), METADATA, PROTOCOL])
    assert (w.version, w.operation, w.is_blind_append, w.txn_id) == (3, "MERGE", False, "abc")
    assert [a.path for a in w.added] == ["x"] and [r.path for r in w.removed] == ["y"]
    assert w.metadata is METADATA and w.protocol is PROTOCOL and w.txns[0].app_id == "app"
    assert WinningCommit.from_actions(4, []).operation == "UNKNOWN"
