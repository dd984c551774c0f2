"""The fleet record codec (``protocol.fleet.record``), which is pure: every record it encodes
decodes to the same record, and every malformed input (bytes, JSON of the wrong shape, a
record with one field broken, a path leaving the table) is a ValueError saying what is wrong,
never another exception.  Records are written by anyone who can write the bucket."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltacommit.protocol.actions import Add, DomainMetadata, Metadata, Protocol, Remove, Txn
from deltacommit.protocol.conflicts import TransactionSummary
from deltacommit.protocol.fleet.record import (
    FleetRecord,
    decode_record,
    encode_record,
    record_path,
    round_path,
    txn_id_of,
    version_of_round,
)
from deltacommit.protocol.replay import file_key
from deltacommit.protocol.table_config.properties import IsolationLevel

FAST = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

_names = st.text(st.sampled_from("abcdefgxyz0123456789_-"), min_size=1, max_size=12)
_ids = st.text(st.sampled_from("abcdef0123456789-_"), min_size=1, max_size=64)
_segment = st.text(st.sampled_from("abcxyz0123456789_-= "), min_size=1, max_size=10).filter(
    lambda s: s not in (".", "..") and not s.startswith(("_delta_log", "_deltacommit_fleet")))
_paths = st.lists(_segment, min_size=1, max_size=3).map("/".join)
_longs = st.integers(0, 2 ** 63 - 1)
_READ_PROTOCOL = Protocol(1, 2)
_READ_METADATA = Metadata("table-id", '{"type":"struct","fields":[]}', [])


@st.composite
def records(draw: st.DrawFn) -> FleetRecord:
    adds = tuple(Add(path=p, partition_values={}, size=draw(_longs),
                     modification_time=draw(st.integers(0, 2 ** 53)),
                     data_change=draw(st.booleans()),
                     stats=draw(st.none() | st.just('{"numRecords":1}')))
                 for p in draw(st.lists(_paths, max_size=4, unique=True)))
    removes = tuple(Remove(path=p, deletion_timestamp=draw(st.integers(0, 2 ** 53)),
                           data_change=draw(st.booleans()))
                    for p in draw(st.lists(_paths, max_size=3, unique=True)))
    app_ids = draw(st.lists(_names, max_size=3, unique=True))
    txns = tuple(Txn(a, draw(_longs), draw(st.integers(0, 2 ** 53))) for a in app_ids)
    domains = tuple(DomainMetadata(d, draw(st.text(max_size=20)))
                    for d in draw(st.lists(_names, max_size=2, unique=True)))
    read_version = draw(st.integers(0, 2 ** 40))
    summary = TransactionSummary(
        operation=draw(st.sampled_from(["WRITE", "DELETE", "STREAMING UPDATE"])),
        partition_columns=(), partition_types={},
        isolation_level=draw(st.sampled_from(list(IsolationLevel))),
        read_files=frozenset(draw(st.lists(_paths, max_size=3))),
        read_whole_table=draw(st.booleans()),
        read_app_ids=frozenset(app_ids) | frozenset(draw(st.lists(_names, max_size=2))),
        added_files=adds, removed_files=frozenset(file_key(r.path) for r in removes),
        has_metadata=False, has_protocol=False, has_other_actions=bool(txns) or bool(domains),
        data_change=any(a.data_change for a in adds) or any(r.data_change for r in removes),
        read_protocol=_READ_PROTOCOL, read_metadata=_READ_METADATA,
        domains=frozenset(d.domain for d in domains), partition_physical_names={})
    return FleetRecord(
        txn_id=draw(_ids), owner=draw(st.text(max_size=30)), table_id="table-id",
        read_version=read_version, read_digest=draw(st.text("0123456789abcdef", max_size=64)),
        bound=read_version + draw(st.integers(0, 64)), deadline_ms=draw(st.integers(0, 2 ** 53)),
        operation=summary.operation,
        parameters=draw(st.dictionaries(_names, st.text(max_size=10), max_size=3)),
        metrics=draw(st.dictionaries(_names, st.text(max_size=10), max_size=3)),
        summary=summary, adds=adds, removes=removes, txns=txns, domains=domains,
        app_ids=frozenset(app_ids))


@FAST
@given(records())
def test_every_record_round_trips(record: FleetRecord) -> None:
    data = encode_record(record)
    back = decode_record(data)
    assert back == record
    assert encode_record(back) == data


@FAST
@given(st.binary(max_size=300))
def test_any_bytes_are_a_record_or_a_value_error(data: bytes) -> None:
    try:
        decode_record(data)
    except ValueError as e:
        assert str(e)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats(allow_nan=False)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=10)


@FAST
@given(records(), st.data())
def test_a_record_with_any_field_broken_is_a_value_error_or_still_a_record(
        record: FleetRecord, data: st.DataObject) -> None:
    body: dict[str, Any] = json.loads(encode_record(record))
    key = data.draw(st.sampled_from(sorted(body)))
    if data.draw(st.booleans()):
        del body[key]
    else:
        body[key] = data.draw(_json)
    try:
        decode_record(json.dumps(body).encode())
    except ValueError as e:
        assert str(e)


@FAST
@given(records(), st.data())
def test_a_record_with_any_action_broken_is_a_value_error_or_still_a_record(
        record: FleetRecord, data: st.DataObject) -> None:
    body: dict[str, Any] = json.loads(encode_record(record))
    if not body["actions"]:
        return
    i = data.draw(st.integers(0, len(body["actions"]) - 1))
    [(_kind, action)] = body["actions"][i].items()
    field = data.draw(st.sampled_from(sorted(action)))
    action[field] = data.draw(_json)
    try:
        decode_record(json.dumps(body).encode())
    except ValueError as e:
        assert str(e)


@pytest.mark.parametrize("path", [
    "../x.parquet", "a/../../x.parquet", "%2E%2E/x.parquet", "%252E%252E/x.parquet",
    "a%2F..%2F..%2Fx.parquet", "/abs.parquet", "file:/x.parquet", "s3a://b/x.parquet",
    "_delta_log/00000000000000000001.json", "_deltacommit_fleet/r.json", "a//b.parquet",
    "a/./b.parquet", "a\\..\\b.parquet", "a%00b.parquet", ""])
def test_a_path_leaving_the_table_is_a_value_error(path: str) -> None:
    record = FleetRecord(
        txn_id="t", owner="o", table_id="table-id", read_version=1, read_digest="d", bound=2,
        deadline_ms=1, operation="WRITE", parameters={}, metrics={},
        summary=TransactionSummary(operation="WRITE", partition_columns=(), partition_types={},
                                   isolation_level=IsolationLevel.SERIALIZABLE,
                                   read_protocol=_READ_PROTOCOL,
                                   read_metadata=_READ_METADATA),
        adds=(Add(path=path, partition_values={}, size=1, modification_time=1),))
    with pytest.raises(ValueError, match="path"):
        decode_record(encode_record(record))


def test_a_txn_action_whose_app_id_was_not_read_is_a_value_error() -> None:
    record = FleetRecord(
        txn_id="t", owner="o", table_id="table-id", read_version=1, read_digest="d", bound=2,
        deadline_ms=1, operation="WRITE", parameters={}, metrics={},
        summary=TransactionSummary(operation="WRITE", partition_columns=(), partition_types={},
                                   isolation_level=IsolationLevel.SERIALIZABLE,
                                   read_protocol=_READ_PROTOCOL,
                                   read_metadata=_READ_METADATA),
        txns=(Txn("app", 5),), app_ids=frozenset({"app"}))
    with pytest.raises(ValueError, match="readAppIds"):
        decode_record(encode_record(record))


@FAST
@given(_ids, _longs)
def test_names_round_trip(txn_id: str, version: int) -> None:
    assert txn_id_of(record_path(txn_id)) == txn_id
    if version < 10 ** 20:
        assert version_of_round(round_path(version)) == version


@FAST
@given(st.text(max_size=90))
def test_any_name_is_a_txn_id_or_none(name: str) -> None:
    got = txn_id_of(f"_deltacommit_fleet/{name}")
    assert got is None or (name == f"{got}.json" and got.isascii())
    v = version_of_round(f"_deltacommit_fleet/{name}")
    assert v is None or name == f"{v:020d}.round"
