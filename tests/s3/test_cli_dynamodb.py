"""``deltacommit dynamodb create-table | status | repair`` against moto and dynalite."""

from __future__ import annotations

import json

import pytest

import deltacommit as dc
from deltacommit.cli import main
from deltacommit.testing import unique_name

from .helpers import SCHEMA, DynamoSetup, batch, dynamodb_client
from .test_dynamodb_log_store import append_stopped, create


def _flags(options: dict[str, str]) -> list[str]:
    return [f"--storage-option={k}={v}" for k, v in options.items()]


def test_create_table_makes_a_pay_per_request_table_with_ttl(dynamo: DynamoSetup,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    name = unique_name("cli-log")
    options = {**dynamo.options, "DELTA_DYNAMO_TABLE_NAME": name}
    assert main(["dynamodb", "create-table", "--json", *_flags(options)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["table"], out["schema"], out["created"], out["status"]) == (
        name, "delta-log", True, "ACTIVE")
    client = dynamodb_client(dynamo.endpoint)
    table = client.describe_table(TableName=name)["Table"]
    assert table["TableStatus"] == "ACTIVE"
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert {(k["AttributeName"], k["KeyType"]) for k in table["KeySchema"]} == {
        ("tablePath", "HASH"), ("fileName", "RANGE")}
    if dynamo.backend == "moto":
        ttl = client.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", "expireTime")
        assert out["ttl"] == "enabled on expireTime"
    # Usable at once, and creating it again is harmless.
    assert dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=options).version == 0
    assert main(["dynamodb", "create-table", "--table-name", name, *_flags(dynamo.options)]) == 0
    text = capsys.readouterr().out
    assert f"DynamoDB table {name} already exists" in text
    if dynamo.backend == "dynalite":   # no TTL there: said, not fatal
        assert "warning: TTL could not be enabled on expireTime" in text


def test_status_shows_the_latest_and_incomplete_entries(dynamo: DynamoSetup,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    table = create(dynamo)
    dc.write(table, batch(0, 0))
    flags = [dynamo.uri(), *_flags(dynamo.options)]
    assert main(["dynamodb", "status", *flags]) == 0
    text = capsys.readouterr().out
    assert f"tablePath {dynamo.uri()}" in text
    assert "latest entry: version 1 (complete, expireTime" in text
    assert "incomplete entries: none" in text

    version = append_stopped(dynamo, "after_put_entry")
    assert main(["dynamodb", "status", "--json", *flags]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["latest"]["version"] == version and out["latest"]["complete"] is False
    assert [e["version"] for e in out["incomplete"]] == [version]
    assert out["incomplete"][0]["tempPath"].startswith(".tmp/00000000000000000002.json.")
    assert out["ttl"].startswith("enabled on expireTime" if dynamo.backend == "moto" else "")
    # Reporting repairs nothing.
    assert not dynamo.entries(dynamo.uri())[-1].complete


def test_repair_completes_incomplete_entries(dynamo: DynamoSetup, capsys: pytest.CaptureFixture[str]) -> None:
    create(dynamo)
    version = append_stopped(dynamo, "after_put_entry")
    flags = [dynamo.uri(), *_flags(dynamo.options)]
    assert main(["dynamodb", "repair", *flags]) == 0
    assert f"version {version}: copied and completed" in capsys.readouterr().out
    assert all(e.complete for e in dynamo.entries(dynamo.uri()))
    assert main(["dynamodb", "repair", *flags]) == 0
    assert "no incomplete entries" in capsys.readouterr().out
    version = append_stopped(dynamo, "after_copy")
    assert main(["dynamodb", "repair", "--json", *flags]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(e["version"], e["action"]) for e in out["entries"]] == [(version, "completed")]


def test_repair_drops_stale_entries_of_a_deleted_table(dynamo: DynamoSetup,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    table = create(dynamo)
    dc.write(table, batch(0, 0))
    flags = [dynamo.uri(), *_flags(dynamo.options)]
    assert main(["dynamodb", "repair", "--drop-stale-entries", *flags]) == 1
    assert "not stale and are kept" in capsys.readouterr().err
    store = table.log_store.store
    for meta in list(store.list("")):
        store.delete(meta.path)
    assert main(["dynamodb", "repair", "--drop-stale-entries", *flags]) == 0
    assert "deleted 2 stale entries" in capsys.readouterr().out
    assert dynamo.entries(dynamo.uri()) == []


def test_status_of_a_missing_table_names_the_command_that_creates_it(
        dynamo: DynamoSetup, capsys: pytest.CaptureFixture[str]) -> None:
    options = {**dynamo.options, "DELTA_DYNAMO_TABLE_NAME": "no-such-log-table"}
    assert main(["dynamodb", "status", dynamo.uri(), *_flags(options)]) == 1
    err = capsys.readouterr().err
    assert "DynamoDB table no-such-log-table" in err
    assert "deltacommit dynamodb create-table --table-name no-such-log-table" in err


@pytest.mark.parametrize("temp_path", ["00000000000000000001.json", "_last_checkpoint",
                                       ".tmp/00000000000000000001.json.abc",
                                       "00000000000000000000.checkpoint.parquet", ".tmp/x"])
def test_an_entry_naming_a_committed_file_as_its_temp_is_reported_never_acted_on(
        dynamo: DynamoSetup, temp_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Repair copies an incomplete entry's temp file to N.json and may delete it: a tempPath
    that names a committed log file must be refused, not copied or deleted."""
    from deltacommit.errors import LogStoreError

    table = create(dynamo)
    dc.write(table, batch(0, 0))
    table.checkpoint()
    client = dynamodb_client(dynamo.endpoint)
    client.put_item(TableName=dynamo.table, Item={
        "tablePath": {"S": dynamo.uri()}, "fileName": {"S": "00000000000000000002.json"},
        "tempPath": {"S": temp_path}, "complete": {"S": "false"}})
    store = table.log_store.store
    before = {m.path: store.get(m.path) for m in store.list("")}
    with pytest.raises(LogStoreError, match="not a temp file name"):
        dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    flags = [dynamo.uri(), *_flags(dynamo.options)]
    for command in (["dynamodb", "status"], ["dynamodb", "repair"], ["show"]):
        assert main([*command, *flags]) != 0
        assert "not a temp file name" in capsys.readouterr().err
    assert {m.path: store.get(m.path) for m in store.list("")} == before


def test_repair_finds_the_entries_under_the_fleets_tablepath(
        dynamo: DynamoSetup, capsys: pytest.CaptureFixture[str]) -> None:
    """Spark's writers key their entries ``s3a://bucket/t``; an operator repairs the table by
    the ``s3://`` URI the writers' errors name.  The repair looks where the fleet's entries
    are, as the writers do, instead of reporting "no incomplete entries" under the URI as given
    while every writer stays stopped on the unrecoverable one (or the stale ones)."""
    from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore

    from .test_dynamodb_log_store import Stop, stop_at

    spark = {**dynamo.options, "DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME": "s3a"}
    uri = dynamo.uri()
    s3a = "s3a://" + uri.split("://", 1)[1]
    table = dc.DeltaTable.create(uri, SCHEMA, storage_options=spark)
    dc.write(table, batch(0, 0))
    stopped = DynamoDBLogStore.open(uri, spark, hook=stop_at("after_put_entry"))
    with pytest.raises(Stop):
        dc.write(dc.DeltaTable(uri, storage_options=spark, log_store=stopped), batch(1, 0))
    entry = dynamo.entries(s3a)[-1]
    assert (entry.version, entry.complete) == (2, False)
    stopped.store.delete(entry.temp_key)

    flags = [uri, *_flags(dynamo.options)]
    assert main(["dynamodb", "repair", *flags]) == 1
    assert "version 2: unrecoverable" in capsys.readouterr().out
    assert main(["dynamodb", "repair", "--drop-unrecoverable", *flags]) == 0
    assert "version 2: dropped" in capsys.readouterr().out
    assert [e.version for e in dynamo.entries(s3a)] == [0, 1]

    store = table.log_store.store
    for meta in list(store.list("")):
        store.delete(meta.path)
    assert main(["dynamodb", "repair", "--drop-stale-entries", *flags]) == 0
    assert f"deleted 2 stale entries of {s3a}" in capsys.readouterr().out
    assert dynamo.entries(s3a) == []


def test_a_log_table_recreated_empty_is_rejoined_by_restoring_the_newest_entry(
        dynamo: DynamoSetup, capsys: pytest.CaptureFixture[str]) -> None:
    """The DynamoDB table deleted and created again empty while the log goes on: the newest
    commits have no entry, so a writer that did not see them made refuses every commit for
    half the entries' TTL (12 h), taking them for another mechanism's.  Its error names the
    way out, and ``repair --restore-entry`` (the operator vouching that every writer commits
    through this table) writes the newest commit's entry, complete, after which writers go on
    from the version after it."""
    from deltacommit.engine.snapshot import state_cache
    from deltacommit.errors import CoordinationMismatchError
    from deltacommit.io.logstore.s3_dynamodb.admin import create_log_table

    from .test_dynamodb_log_store import rows

    uri = dynamo.uri()
    table = create(dynamo)
    dc.write(table, batch(0, 0))
    client = dynamodb_client(dynamo.endpoint)
    client.delete_table(TableName=dynamo.table)
    client.get_waiter("table_not_exists").wait(TableName=dynamo.table,
                                               WaiterConfig={"Delay": 0.05, "MaxAttempts": 200})
    create_log_table(client, dynamo.table)
    state_cache.clear()  # a process that never saw the entries
    with pytest.raises(CoordinationMismatchError,
                       match=rf"dynamodb repair {uri} --restore-entry"):
        dc.write(uri, batch(1, 0), storage_options=dynamo.options)

    flags = [uri, *_flags(dynamo.options)]
    assert main(["dynamodb", "repair", "--restore-entry", *flags]) == 0
    assert "restored the complete entry of version 1" in capsys.readouterr().out
    [entry] = dynamo.entries(uri)
    assert (entry.version, entry.complete) == (1, True) and entry.expire_time is not None
    assert main(["dynamodb", "repair", "--restore-entry", "--json", *flags]) == 0
    assert json.loads(capsys.readouterr().out)["restored"] is False

    state_cache.clear()
    assert dc.write(uri, batch(1, 0), storage_options=dynamo.options).version == 2
    assert [e.version for e in dynamo.entries(uri)] == [1, 2]
    assert rows(dc.DeltaTable(uri, storage_options=dynamo.options)) == [(0, 0), (1, 0)]


def test_restore_entry_refuses_options_other_than_the_recorded_ones(
        dynamo: DynamoSetup, capsys: pytest.CaptureFixture[str]) -> None:
    """The entry goes under the tablePath the table records, or nowhere: one under another
    spelling would split the fleet instead of rejoining it."""
    uri = dynamo.uri()
    create(dynamo)
    dynamo.delete_entries(uri)
    s3a = {**dynamo.options, "DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME": "s3a"}
    assert main(["dynamodb", "repair", "--restore-entry", uri, *_flags(s3a)]) == 1
    assert "records deltacommit.coordination.tablePath" in capsys.readouterr().err
    assert dynamo.items(uri) == [] and dynamo.items("s3a://" + uri.split("://", 1)[1]) == []


def test_repair_of_a_split_fleet_completes_the_configured_spelling_s_entries(
        dynamo: DynamoSetup, capsys: pytest.CaptureFixture[str]) -> None:
    """Entries under two spellings (a split fleet, which writers refuse): the repair still
    completes the incomplete entries under the configured one, which block its writers."""
    import uuid

    from deltacommit.engine.snapshot import state_cache
    from deltacommit.protocol.log.names import LOG_DIR, commit_name, commit_path

    uri = dynamo.uri()
    table = create(dynamo)
    commit = b'{"commitInfo":{"operation":"WRITE"}}\n'
    temp = f".tmp/{commit_name(1)}.{uuid.uuid4()}"
    table.log_store.store.put(f"{LOG_DIR}/{temp}", commit)
    client = dynamodb_client(dynamo.endpoint)
    client.put_item(TableName=dynamo.table, Item={
        "tablePath": {"S": uri}, "fileName": {"S": commit_name(1)},
        "tempPath": {"S": temp}, "complete": {"S": "false"}})
    client.put_item(TableName=dynamo.table, Item={
        "tablePath": {"S": "s3a://" + uri.split("://", 1)[1]}, "fileName": {"S": commit_name(0)},
        "tempPath": {"S": f".tmp/{commit_name(0)}.{uuid.uuid4()}"}, "complete": {"S": "true"}})
    state_cache.clear()  # the command runs in a process of its own
    assert main(["dynamodb", "repair", uri, *_flags(dynamo.options)]) == 0
    assert "version 1: copied and completed" in capsys.readouterr().out
    assert table.log_store.store.get(commit_path(1)) == commit
    assert [(e.version, e.complete) for e in dynamo.entries(uri)] == [(0, True), (1, True)]


def test_restore_entry_keys_the_entry_as_the_table_records(
        dynamo: DynamoSetup, capsys: pytest.CaptureFixture[str]) -> None:
    """Run with the URI's own spelling on a table recording ``s3a://``: the entry goes
    under the recorded spelling, which the writers follow."""
    from deltacommit.engine.snapshot import state_cache

    uri = dynamo.uri()
    s3a = "s3a://" + uri.split("://", 1)[1]
    create(dynamo, DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME="s3a")
    dynamo.delete_entries(s3a)
    state_cache.clear()
    assert main(["dynamodb", "repair", "--restore-entry", uri, *_flags(dynamo.options)]) == 0
    assert f"restored the complete entry of version 0 of {s3a}" in capsys.readouterr().out
    assert [e.version for e in dynamo.entries(s3a)] == [0] and dynamo.entries(uri) == []
