"""Bad input on S3 tables in DynamoDB mode: each fails with an error that says what is wrong
and how to fix it, and none loses or half-writes a commit."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest

import deltacommit as dc
from deltacommit.cli import main
from deltacommit.errors import LogStoreError, StorageError
from deltacommit.io.logstore import open_log_store
from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore
from deltacommit.protocol.log.names import commit_path
from deltacommit.testing import (
    MotoServer,
    S3Bucket,
    s3_storage_options,
    unique_name,
    wait_table_active,
)

from .helpers import SCHEMA, DynamoSetup, batch, dynamo_options, dynamodb_client, new_log_table
from .test_dynamodb_log_store import append_stopped, create, rows


def _flags(options: dict[str, str]) -> list[str]:
    return [f"--storage-option={k}={v}" for k, v in options.items()]


def _objects(bucket: S3Bucket) -> list[str]:
    s3 = boto3.client("s3", endpoint_url=bucket.storage_options["AWS_ENDPOINT_URL"],
                      region_name="us-east-1")
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket.name).get("Contents", [])]


# --------------------------------------------------------------------------- the DynamoDB table


def test_a_missing_dynamodb_table_says_how_to_create_it(dynamo: DynamoSetup) -> None:
    missing = unique_name("no-such-log")
    options = {**dynamo.options, "DELTA_DYNAMO_TABLE_NAME": missing}
    with pytest.raises(LogStoreError, match=rf"DynamoDB table {missing} at http://\S+ does not exist "
                                            r".*`deltacommit dynamodb create-table --table-name "
                                            rf"{missing}`"):
        dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=options)
    assert _objects(dynamo.bucket) == []
    # The command it names makes a table the next attempt works with.
    assert main(["dynamodb", "create-table", *_flags(options)]) == 0
    assert dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=options).version == 0


@pytest.mark.parametrize("keys", [
    [("path", "HASH"), ("etag", "RANGE")],      # object_store's DynamoCommit lease table
    [("tablePath", "HASH")],                    # no range key: every version would collide
    [("tablePath", "HASH"), ("fileName", "RANGE", "N")],
])
def test_a_table_with_the_wrong_key_schema_is_refused(dynamo: DynamoSetup, keys: list[tuple[str, ...]]
                                                      ) -> None:
    client = dynamodb_client(dynamo.endpoint)
    name = unique_name("wrong-keys")
    client.create_table(
        TableName=name, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": k[0], "AttributeType": k[2] if len(k) > 2 else "S"}
                              for k in keys],
        KeySchema=[{"AttributeName": k[0], "KeyType": k[1]} for k in keys])
    wait_table_active(client, name)
    options = {**dynamo.options, "DELTA_DYNAMO_TABLE_NAME": name}
    with pytest.raises(LogStoreError, match=rf"DynamoDB table {name} at \S+ has the key schema "
                                            r"\(.*\), but Spark's S3DynamoDBLogStore protocol needs "
                                            r"\(tablePath S HASH, fileName S RANGE\)"):
        dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=options)
    assert client.scan(TableName=name)["Items"] == []
    assert _objects(dynamo.bucket) == []
    assert main(["dynamodb", "create-table", "--table-name", name, *_flags(options)]) == 1


def test_a_missing_bucket_is_named_and_nothing_is_claimed(dynamo: DynamoSetup) -> None:
    uri = f"s3://{unique_name('no-such-bucket')}/t"
    with pytest.raises(StorageError, match=r"bucket '\S+' does not exist at http://"):
        dc.DeltaTable.create(uri, SCHEMA, storage_options=dynamo.options)
    ls = open_log_store(uri, dynamo.options)
    with pytest.raises(StorageError, match=r"s3://\S+/t/_delta_log/\S+ failed: bucket '\S+' does "
                                           r"not exist"):
        ls.write_commit(0, b'{"commitInfo":{}}\n')
    # Storage is reached before any entry: none claims a version whose content was not stored.
    assert dynamo.entries(uri) == []


# --------------------------------------------------------------------------- credentials


@pytest.fixture
def auth_moto() -> Iterator[tuple[MotoServer, S3Bucket, str, dict[str, str]]]:
    """A private moto with a DynamoDB-mode table already written, and an IAM user allowed S3
    only; credentials are checked once the fixture yields."""
    with MotoServer() as server:
        s3 = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1")
        bucket = S3Bucket(unique_name("guarded"), s3_storage_options(server.endpoint))
        s3.create_bucket(Bucket=bucket.name)
        table = new_log_table(server.endpoint)
        options = dynamo_options(bucket, server.endpoint, table)
        t = dc.DeltaTable.create(f"{bucket.uri}/t", SCHEMA, storage_options=options)
        dc.write(t, batch(0, 0))
        iam = boto3.client("iam", endpoint_url=server.endpoint, region_name="us-east-1")
        iam.create_user(UserName="s3-only")
        iam.put_user_policy(UserName="s3-only", PolicyName="s3", PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="s3-only")["AccessKey"]
        server.set_auth(True)
        try:
            yield server, bucket, table, {"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}
        finally:
            server.set_auth(False)


def _after_auth(auth_moto: tuple[MotoServer, S3Bucket, str, dict[str, str]]) -> dc.DeltaTable:
    server, bucket, table, _ = auth_moto
    server.set_auth(False)
    t = dc.DeltaTable(f"{bucket.uri}/t", storage_options=dynamo_options(bucket, server.endpoint, table))
    assert t.version == 1 and rows(t) == [(0, 0)]
    return t


def test_rejected_dynamodb_credentials_are_reported_without_the_secret(
        auth_moto: tuple[MotoServer, S3Bucket, str, dict[str, str]]) -> None:
    server, bucket, table, key = auth_moto
    secret = "not-the-real-secret-0123456789"
    options = {**dynamo_options(bucket, server.endpoint, table),
               "AWS_ACCESS_KEY_ID": key["id"], "AWS_SECRET_ACCESS_KEY": key["secret"],
               "AWS_ACCESS_KEY_ID_DYNAMODB": "AKIAUNKNOWNKEY000000",
               "AWS_SECRET_ACCESS_KEY_DYNAMODB": secret}
    with pytest.raises(LogStoreError, match=rf"DynamoDB table {table} at \S+: the credentials were "
                                            r"rejected \(InvalidClientTokenId\)") as info:
        dc.write(f"{bucket.uri}/t", batch(1, 0), storage_options=options)
    assert secret not in str(info.value)
    _after_auth(auth_moto)


def test_rejected_s3_credentials_are_reported_before_anything_is_claimed(
        auth_moto: tuple[MotoServer, S3Bucket, str, dict[str, str]]) -> None:
    server, bucket, table, _ = auth_moto
    options = {**dynamo_options(bucket, server.endpoint, table),
               "AWS_ACCESS_KEY_ID": "AKIAUNKNOWNKEY000000", "AWS_SECRET_ACCESS_KEY": "x" * 30}
    with pytest.raises(StorageError, match=r"the credentials were rejected \(InvalidAccessKeyId\)"):
        dc.write(f"{bucket.uri}/t", batch(1, 0), storage_options=options)
    _after_auth(auth_moto)


def test_credentials_without_dynamodb_permission_are_reported_as_denied(
        auth_moto: tuple[MotoServer, S3Bucket, str, dict[str, str]]) -> None:
    server, bucket, table, key = auth_moto
    options = {**dynamo_options(bucket, server.endpoint, table),
               "AWS_ACCESS_KEY_ID": key["id"], "AWS_SECRET_ACCESS_KEY": key["secret"]}
    with pytest.raises(LogStoreError, match=r"Query on DynamoDB table \S+ at \S+: access denied "
                                            r"\(AccessDenied\): the protocol needs dynamodb:GetItem"):
        dc.DeltaTable(f"{bucket.uri}/t", storage_options=options)
    _after_auth(auth_moto)


# --------------------------------------------------------------------------- temp files


def test_an_incomplete_entry_whose_temp_file_is_gone_is_reported_not_hidden(
        dynamo: DynamoSetup, capsys: pytest.CaptureFixture[str]) -> None:
    table = create(dynamo)
    dc.write(table, batch(0, 0))
    version = append_stopped(dynamo, "after_put_entry")
    entry = dynamo.entries(dynamo.uri())[-1]
    ls = open_log_store(dynamo.uri(), dynamo.options)
    ls.store.delete(entry.temp_key)
    expect = (rf"incomplete entry for version {version}, but neither its temp file "
              rf"_delta_log/\.tmp/\S+ nor \S+ exists, so the commit cannot be completed\. Nothing "
              r"was changed\..*--drop-unrecoverable")
    with pytest.raises(LogStoreError, match=expect):
        dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    with pytest.raises(LogStoreError, match=expect):
        dc.write(table, batch(0, 1))
    # Never marked complete: that would hide a missing version from every reader.
    assert not dynamo.entries(dynamo.uri())[-1].complete

    flags = [dynamo.uri(), *_flags(dynamo.options)]
    assert main(["dynamodb", "repair", *flags]) == 1
    assert "unrecoverable" in capsys.readouterr().out
    assert main(["dynamodb", "repair", "--drop-unrecoverable", *flags]) == 0
    assert f"version {version}: dropped" in capsys.readouterr().out
    # The version is free again; the table goes on from the last complete commit.
    assert dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options).version == version - 1
    assert dc.write(table, batch(0, 1)).version == version
    assert rows(dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)) == [(0, 0), (0, 1)]


def test_a_temp_file_moved_away_after_the_copy_is_not_needed(dynamo: DynamoSetup) -> None:
    """delta-rs repairs by moving T(N) to N.json: a later repairer finds only N.json."""
    create(dynamo)
    version = append_stopped(dynamo, "after_copy")
    entry = dynamo.entries(dynamo.uri())[-1]
    ls = open_log_store(dynamo.uri(), dynamo.options)
    ls.store.delete(entry.temp_key)
    reader = dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)
    assert reader.version == version and rows(reader) == [(7, 0)]
    assert dynamo.entries(dynamo.uri())[-1].complete


def test_an_item_that_is_not_a_commit_entry_is_named(dynamo: DynamoSetup) -> None:
    create(dynamo)
    dynamo.client.put_item(TableName=dynamo.table, Item={
        "tablePath": {"S": dynamo.uri()}, "fileName": {"S": "00000000000000000001.json"},
        "complete": {"BOOL": True}})
    with pytest.raises(LogStoreError, match=rf"DynamoDB table {dynamo.table}: item .* is not an "
                                            r"S3DynamoDBLogStore entry"):
        dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)


def test_a_stopped_writer_does_not_block_reads_of_earlier_versions(dynamo: DynamoSetup) -> None:
    table = create(dynamo)
    dc.write(table, batch(0, 0))
    append_stopped(dynamo, "after_put_entry")
    pinned = dc.DeltaTable(dynamo.uri(), version=1, storage_options=dynamo.options)
    assert rows(pinned) == [(0, 0)]
    ls = pinned.log_store
    assert isinstance(ls, DynamoDBLogStore)
    assert ls.store.exists(commit_path(2))   # loading repaired the latest entry on the way
