"""The action codec round-trips every protocol field and never drops what it does not know."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deltacommit.errors import CorruptLogError
from deltacommit.protocol.actions import (
    Add,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    Remove,
    Txn,
    UnknownAction,
    action_from_json,
    action_to_json,
    parse_commit,
    serialize_commit,
)

text = st.text(min_size=1, max_size=12)
maybe_text = st.none() | text
str_map = st.dictionaries(text, maybe_text, max_size=3)
ints = st.integers(min_value=0, max_value=2**53)
json_scalar = st.none() | st.booleans() | st.integers(-1000, 1000) | text
extra = st.dictionaries(st.text(min_size=1, max_size=8).map(lambda s: "x_" + s), json_scalar, max_size=2)

protocols = st.builds(Protocol, st.integers(1, 3), st.integers(1, 7),
                      st.none() | st.lists(text, max_size=3), st.none() | st.lists(text, max_size=3),
                      extra)
metadatas = st.builds(
    Metadata, id=text, schema_string=text, partition_columns=st.lists(text, max_size=3),
    configuration=str_map, name=maybe_text, description=maybe_text,
    created_time=st.none() | ints, extra=extra)
adds = st.builds(
    Add, path=text, partition_values=str_map, size=ints, modification_time=ints,
    data_change=st.booleans(), stats=maybe_text, tags=st.none() | str_map,
    deletion_vector=st.none() | st.fixed_dictionaries({"storageType": st.just("u"),
                                                       "pathOrInlineDv": text,
                                                       "sizeInBytes": ints,
                                                       "cardinality": ints}),
    base_row_id=st.none() | ints, default_row_commit_version=st.none() | ints,
    clustering_provider=maybe_text, extra=extra)
removes = st.builds(
    Remove, path=text, deletion_timestamp=st.none() | ints, data_change=st.booleans(),
    extended_file_metadata=st.none() | st.booleans(), partition_values=st.none() | str_map,
    size=st.none() | ints, stats=maybe_text, tags=st.none() | str_map,
    base_row_id=st.none() | ints, default_row_commit_version=st.none() | ints, extra=extra)
txns = st.builds(Txn, app_id=text, version=ints, last_updated=st.none() | ints, extra=extra)
commit_infos = st.builds(CommitInfo, st.dictionaries(text, json_scalar, max_size=4))
unknowns = st.builds(UnknownAction, st.sampled_from(["cdc", "futureAction"]),
                     st.dictionaries(text, json_scalar, max_size=3))
domains = st.builds(DomainMetadata, domain=text, configuration=text, removed=st.booleans(),
                    extra=extra)
actions = protocols | metadatas | adds | removes | txns | commit_infos | domains | unknowns


@given(st.lists(actions, max_size=8))
def test_commit_round_trip(acts: list[object]) -> None:
    data = serialize_commit(acts)  # type: ignore[arg-type]
    assert parse_commit(data, "t") == acts
    # Each line is a JSON object with one key, as the protocol requires.
    for line in data.decode().split("\n")[:-1]:
        assert len(json.loads(line)) == 1


def test_unknown_fields_are_preserved() -> None:
    line = {"add": {"path": "a.parquet", "partitionValues": {}, "size": 1, "modificationTime": 2,
                    "dataChange": True, "newField": {"nested": [1, 2]}}}
    a = action_from_json(line)
    assert isinstance(a, Add)
    assert a.extra == {"newField": {"nested": [1, 2]}}
    assert action_to_json(a) == line


def test_unknown_action_types_are_preserved() -> None:
    line = {"cdc": {"path": "c.parquet", "partitionValues": {}, "size": 1, "dataChange": False}}
    a = action_from_json(line)
    assert isinstance(a, UnknownAction)
    assert action_to_json(a) == line


def test_change_data_files_are_written_as_spark_writes_them() -> None:
    from deltacommit.protocol.actions import AddCDCFile

    cdc = AddCDCFile("_change_data/p=a/cdc-00000-x.c000.snappy.parquet", {"p": "a"}, 9)
    line = {"cdc": {"path": "_change_data/p=a/cdc-00000-x.c000.snappy.parquet",
                    "partitionValues": {"p": "a"}, "size": 9, "dataChange": False}}
    assert action_to_json(cdc) == line
    assert parse_commit(serialize_commit([cdc]), "t") == [UnknownAction("cdc", line["cdc"])]


def test_domain_metadata_decodes_and_keeps_unknown_fields() -> None:
    line = {"domainMetadata": {"domain": "d", "configuration": "{}", "removed": False, "x": 1}}
    a = action_from_json(line)
    assert isinstance(a, DomainMetadata)
    assert (a.domain, a.configuration, a.removed, a.extra) == ("d", "{}", False, {"x": 1})
    assert action_to_json(a) == line


def test_spark_commit_decodes() -> None:
    # The shape Spark writes for a table creation.
    raw = (
        b'{"commitInfo":{"timestamp":1700000000000,"operation":"CREATE TABLE",'
        b'"operationParameters":{"partitionBy":"[]"},"isolationLevel":"Serializable",'
        b'"isBlindAppend":true,"operationMetrics":{},"engineInfo":"Apache-Spark/3.5.0 Delta-Lake/3.1.0",'
        b'"txnId":"9b8c"}}\n'
        b'{"metaData":{"id":"abc","format":{"provider":"parquet","options":{}},'
        b'"schemaString":"{\\"type\\":\\"struct\\",\\"fields\\":[]}","partitionColumns":[],'
        b'"configuration":{},"createdTime":1700000000000}}\n'
        b'{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}\n'
    )
    acts = parse_commit(raw, "00.json")
    assert [type(a) for a in acts] == [CommitInfo, Metadata, Protocol]
    info = acts[0]
    assert isinstance(info, CommitInfo)
    assert info.operation == "CREATE TABLE" and info.is_blind_append is True


@pytest.mark.parametrize(("line", "expect"), [
    (b"{not json", "line 2"),
    (b'{"add": {"path": "x"}}', "required field 'size'"),
    (b'{"add": 5}', "must be a JSON object"),
    (b'{"add": {}, "remove": {}}', "holds 2: ['add', 'remove']"),
    (b'[1, 2]', "must be a JSON object holding one action"),
    (b'{"add": ' * 100_000 + b'{}' + b'}' * 100_000, "nested too deeply"),
    (b'[' * 100_000 + b']' * 100_000, "nested too deeply"),
])
def test_corrupt_lines_name_file_and_line(line: bytes, expect: str) -> None:
    data = b'{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}\n' + line + b"\n"
    with pytest.raises(CorruptLogError) as e:
        parse_commit(data, "_delta_log/00000000000000000007.json")
    assert "00000000000000000007.json" in str(e.value)
    assert "line 2" in str(e.value)
    assert expect in str(e.value)


def test_unknown_keys_and_actions_are_ignored_as_spark_ignores_them() -> None:
    data = (b'{"commitInfo":{"operation":"WRITE"},"someNewAction":["a","1"]}\n'
            b'{"add":{"path":"p","partitionValues":{},"size":1,"modificationTime":0,'
            b'"dataChange":true,"someNewField":1},"someNewAction":{"x":[1]}}\n'
            b'{"someNewAction":{"a":1}}\n'
            b'{}\n')
    acts = parse_commit(data, "_delta_log/00000000000000000005.json")
    assert [type(a).__name__ for a in acts] == ["CommitInfo", "Add", "UnknownAction"]
    add = acts[1]
    assert isinstance(add, Add) and add.path == "p"


def test_invalid_utf8_is_reported() -> None:
    with pytest.raises(CorruptLogError, match="UTF-8"):
        parse_commit(b"\xff\xfe", "f.json")
