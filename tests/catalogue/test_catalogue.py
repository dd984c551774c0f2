"""A catalogue of bad inputs and misconfigurations: each a clear error, the table unchanged.

Every case builds a real table (local, on S3, or on S3 with Spark's DynamoDB protocol, on the
session's single-threaded moto), optionally damages it the way the case describes, records
every object's bytes (and every DynamoDB entry), then does the wrong thing through the public
interface.  It must fail with the stated error type and a message naming the table, file or
key and what was expected; afterwards every object and entry must be exactly as before, and
the committed rows must still read back wherever the case's own damage allows.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.cli import main
from deltacommit.engine.snapshot import state_cache
from deltacommit.errors import (
    CoordinationMismatchError,
    CorruptLogError,
    InvalidArgumentError,
    LogStoreError,
    MissingVersionError,
    SchemaMismatchError,
    StorageConfigError,
    StorageError,
    TableExistsError,
    TableNotFoundError,
    UnsupportedProtocolError,
)
from deltacommit.protocol.log.names import commit_path
from deltacommit.testing import MotoServer, S3Bucket

from ..s3.helpers import dynamo_options, new_log_table, query_items

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("day", pa.string())])
ROWS = pa.table({"id": [1, 2], "day": ["a", "b"]}, schema=SCHEMA)


class CLIFailed(Exception):
    """The command exited non-zero; the message is what it printed on stderr."""


@dataclass
class Ctx:
    kind: str
    uri: str
    options: dict[str, str]
    root: Path | None = None
    bucket: S3Bucket | None = None
    moto: MotoServer | None = None
    log_table: str | None = None
    rows: int = 2
    extra: dict[str, Any] = field(default_factory=dict)

    def table(self, **options: str) -> dc.DeltaTable:
        return dc.DeltaTable(self.uri, storage_options={**self.options, **options})

    def write(self, data: pa.Table = ROWS, **options: str) -> Any:
        return dc.write(self.uri, data, storage_options={**self.options, **options})

    def log_file(self, version: int) -> Path:
        assert self.root is not None
        return Path(self.uri) / commit_path(version)

    def objects(self) -> Iterator[tuple[str, bytes]]:
        if self.root is not None:
            for p in sorted(self.root.rglob("*")):
                if p.is_file():
                    yield str(p.relative_to(self.root)), p.read_bytes()
            return
        assert self.bucket is not None and self.moto is not None
        s3 = boto3.client("s3", endpoint_url=self.moto.endpoint, region_name="us-east-1")
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket.name):
            for o in page.get("Contents", []):
                yield o["Key"], s3.get_object(Bucket=self.bucket.name, Key=o["Key"])["Body"].read()

    def state(self) -> dict[str, str]:
        out = {k: hashlib.sha256(v).hexdigest() for k, v in self.objects()}
        if self.log_table is not None:
            assert self.moto is not None
            client = boto3.client("dynamodb", endpoint_url=self.moto.endpoint,
                                  region_name="us-east-1")
            for item in query_items(client, self.log_table, self.uri):
                out["dynamodb:" + item["fileName"]["S"]] = json.dumps(item, sort_keys=True)
        return out


def cli(*args: str) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(list(args))
    if code != 0:
        raise CLIFailed(err.getvalue())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# --------------------------------------------------------------------------- damage


def append_action(action: dict[str, Any]) -> Callable[[Ctx], None]:
    def damage(ctx: Ctx) -> None:
        ctx.log_file(2).write_text(json.dumps(action) + "\n")
    return damage


def append_actions(actions: list[dict[str, Any]]) -> Callable[[Ctx], None]:
    def damage(ctx: Ctx) -> None:
        ctx.log_file(2).write_text("".join(json.dumps(a) + "\n" for a in actions))
    return damage


def stray_commit(version: int) -> Callable[[Ctx], None]:
    def damage(ctx: Ctx) -> None:
        ctx.log_file(version).write_bytes(ctx.log_file(1).read_bytes())
    return damage


def invariant_table(ctx: Ctx) -> None:
    assert ctx.root is not None
    meta = {"delta.invariants": json.dumps({"expression": {"expression": "id > 0"}})}
    uri = str(ctx.root / "inv")
    dc.DeltaTable.create(uri, pa.schema([pa.field("id", pa.int64(), metadata=meta)]))
    ctx.extra["inv"] = uri


def check_table(ctx: Ctx) -> None:
    assert ctx.root is not None
    uri = str(ctx.root / "chk")
    dc.DeltaTable.create(uri, pa.schema([("id", pa.int64())]),
                         configuration={"delta.constraints.positive": "id > 0"})
    ctx.extra["chk"] = uri


def checkpoint_then_clean(spoil: Callable[[Path], None]) -> Callable[[Ctx], None]:
    """A checkpoint at version 1, version 2 after it, the JSON commits it covers deleted (as log
    cleanup does), then ``spoil`` applied to the checkpoint file."""
    def damage(ctx: Ctx) -> None:
        ctx.table().checkpoint()
        ctx.write(pa.table({"id": [3], "day": ["a"]}, schema=SCHEMA))
        for v in (0, 1):
            ctx.log_file(v).unlink()
        spoil(Path(ctx.uri) / "_delta_log" / "00000000000000000001.checkpoint.parquet")
    return damage


def truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[:len(data) // 2])


def delete_middle_version(ctx: Ctx) -> None:
    for _ in range(2):
        ctx.write()
    ctx.log_file(2).unlink()


def delete_a_data_file(ctx: Ctx) -> None:
    path = ctx.table().files()[0].path
    (Path(ctx.uri) / path).unlink()
    ctx.extra["file"] = path


def delete_all_objects(ctx: Ctx) -> None:
    assert ctx.bucket is not None and ctx.moto is not None
    s3 = boto3.client("s3", endpoint_url=ctx.moto.endpoint, region_name="us-east-1")
    for key, _ in list(ctx.objects()):
        s3.delete_object(Bucket=ctx.bucket.name, Key=key)


def bad_csv(ctx: Ctx) -> None:
    assert ctx.root is not None
    (ctx.root.parent / "input.csv").write_text("id,day\n1,a\nnot-a-number,b\n")


def wrong_key_schema_table(ctx: Ctx) -> None:
    assert ctx.moto is not None
    client = boto3.client("dynamodb", endpoint_url=ctx.moto.endpoint, region_name="us-east-1")
    name = ctx.log_table + "-wrong" if ctx.log_table else "wrong"
    client.create_table(TableName=name, KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                        BillingMode="PAY_PER_REQUEST")
    ctx.extra["wrong"] = name


# --------------------------------------------------------------------------- the catalogue


@dataclass(frozen=True)
class Case:
    id: str
    kind: str  # local | s3 | dynamodb
    act: Callable[[Ctx], object]
    error: type[Exception]
    says: tuple[str, ...]  # substrings of the message; {uri} is the table's URI
    damage: Callable[[Ctx], None] | None = None
    reads_back: bool = True


_data = pa.table({"id": [3], "day": ["c"]}, schema=SCHEMA)

CASES = [
    # damaged logs
    Case("corrupt-commit-json", "local", lambda c: c.table(), CorruptLogError,
         ("{uri}", "00000000000000000001.json"),
         damage=lambda c: c.log_file(1).write_text(c.log_file(1).read_text() + "{not json\n"),
         reads_back=False),
    Case("truncated-commit", "local", lambda c: c.table(), CorruptLogError,
         ("{uri}", "00000000000000000001.json"),
         damage=lambda c: truncate(c.log_file(1)), reads_back=False),
    Case("garbage-checkpoint-with-the-log-cleaned", "local", lambda c: c.table(),
         MissingVersionError, ("{uri}", "checkpoint(s) at version 1 could not be used"),
         damage=checkpoint_then_clean(lambda p: p.write_bytes(b"garbage")), reads_back=False),
    Case("truncated-checkpoint-with-the-log-cleaned", "local", lambda c: c.table(),
         MissingVersionError, ("{uri}", "00000000000000000000.json is missing"),
         damage=checkpoint_then_clean(truncate), reads_back=False),
    Case("last-checkpoint-names-a-deleted-checkpoint", "local", lambda c: c.table(),
         MissingVersionError, ("{uri}", "00000000000000000000.json is missing",
                               "no usable checkpoint"),
         damage=checkpoint_then_clean(lambda p: p.unlink()), reads_back=False),
    Case("missing-version-in-the-middle", "local", lambda c: c.table(), MissingVersionError,
         ("{uri}", "lacks version(s) 2"), damage=delete_middle_version, reads_back=False),
    Case("deleted-data-file", "local", lambda c: c.table().to_arrow(), StorageError,
         ("{uri}/day=", "data file of version 1 is missing"), damage=delete_a_data_file,
         reads_back=False),
    # protocol and metadata the table uses but deltacommit does not support
    Case("reader-version-4", "local", lambda c: c.table(), UnsupportedProtocolError,
         ("{uri}", "needs reader version 4"),
         damage=append_action({"protocol": {"minReaderVersion": 4, "minWriterVersion": 7}}),
         reads_back=False),
    Case("unknown-reader-feature", "local", lambda c: c.table(), UnsupportedProtocolError,
         ("{uri}", "reader features ['fancyReaderFeature']"),
         damage=append_action({"protocol": {
             "minReaderVersion": 3, "minWriterVersion": 7,
             "readerFeatures": ["fancyReaderFeature"], "writerFeatures": ["fancyReaderFeature"]}}),
         reads_back=False),
    # deltalake 1.6.6 names variantType in every table-features protocol it writes: read and
    # written where no column is a variant, refused by the column's type where one is.
    Case("variant-column", "local", lambda c: c.table(), UnsupportedProtocolError,
         ("{uri}", "column 'v'", "Delta type 'variant'", "variantType", "is not supported"),
         damage=append_actions([
             {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                           "readerFeatures": ["variantType"], "writerFeatures": ["variantType"]}},
             {"metaData": {
                 "id": "x", "format": {"provider": "parquet", "options": {}},
                 "schemaString": json.dumps({"type": "struct", "fields": [
                     {"name": "id", "type": "long", "nullable": True, "metadata": {}},
                     {"name": "day", "type": "string", "nullable": True, "metadata": {}},
                     {"name": "v", "type": "variant", "nullable": True, "metadata": {}}]}),
                 "partitionColumns": ["day"], "configuration": {}}}]),
         reads_back=False),
    Case("unknown-writer-feature", "local", lambda c: c.write(_data), UnsupportedProtocolError,
         ("{uri}", "writer features ['fancyWriterFeature']"),
         damage=append_action({"protocol": {"minReaderVersion": 1, "minWriterVersion": 7,
                                            "writerFeatures": ["fancyWriterFeature"]}})),
    Case("malformed-schema-string", "local", lambda c: c.table().schema, CorruptLogError,
         ("{uri}", "schemaString is not valid JSON"),
         damage=append_action({"metaData": {
             "id": "x", "format": {"provider": "parquet", "options": {}},
             "schemaString": "{not json", "partitionColumns": [], "configuration": {}}}),
         reads_back=False),
    # data that does not fit the table
    Case("append-missing-column", "local", lambda c: c.write(pa.table({"id": [3]})),
         SchemaMismatchError, ("{uri}", "missing columns: day")),
    Case("append-extra-column", "local",
         lambda c: c.write(pa.table({"id": [3], "day": ["a"], "surprise": [1.5]})),
         SchemaMismatchError, ("{uri}", "surprise")),
    Case("append-wrong-type", "local",
         lambda c: c.write(pa.table({"id": ["three"], "day": ["a"]})),
         SchemaMismatchError, ("{uri}", "id: table has long, data has string")),
    Case("partition-by-mismatch", "local",
         lambda c: dc.write(c.uri, _data, partition_by=["id"]), InvalidArgumentError,
         ("{uri}", "partitioned by ['day'], not ['id']")),
    Case("overwrite-predicate-on-a-data-column", "local",
         lambda c: dc.write(c.uri, _data, mode="overwrite", predicate="id = 1"),
         InvalidArgumentError, ("{uri}", "'id', which is not a partition column")),
    Case("invalid-predicate-syntax", "local",
         lambda c: dc.write(c.uri, _data, mode="overwrite", predicate="day ==== 'c'"),
         InvalidArgumentError, ("invalid predicate", "day ==== 'c'")),
    Case("write-to-a-historical-version", "local",
         lambda c: dc.write(dc.DeltaTable(c.uri, version=0), _data), InvalidArgumentError,
         ("{uri}", "version 0", "read-only")),
    # tables that are not there, or already are
    Case("create-over-an-existing-table", "local", lambda c: dc.DeltaTable.create(c.uri, SCHEMA),
         TableExistsError, ("{uri}",)),
    Case("open-a-location-without-a-table", "local",
         lambda c: dc.DeltaTable(c.uri + "-nothing"), TableNotFoundError,
         ("{uri}-nothing", "_delta_log")),
    # table properties
    Case("log-retention-not-a-duration", "local",
         lambda c: dc.DeltaTable.create(c.uri + "-new", SCHEMA,
                                        configuration={"delta.logRetentionDuration": "forever"}),
         InvalidArgumentError, ("{uri}-new", "delta.logRetentionDuration='forever'",
                                "is not a duration")),
    Case("checkpoint-interval-not-a-number", "local",
         lambda c: dc.DeltaTable.create(c.uri + "-new", SCHEMA,
                                        configuration={"delta.checkpointInterval": "zero"}),
         InvalidArgumentError, ("{uri}-new", "delta.checkpointInterval must be a positive")),
    Case("misspelt-table-property", "local",
         lambda c: dc.DeltaTable.create(c.uri + "-new", SCHEMA,
                                        configuration={"delta.appendOnlyy": "true"}),
         InvalidArgumentError, ("{uri}-new", "did you mean delta.appendOnly")),
    # command line input
    Case("cli-csv-with-a-bad-row", "local",
         lambda c: cli("append", c.uri, str(Path(c.uri).parent.parent / "input.csv")), CLIFailed,
         ("{uri}", "input.csv", "id int64", "invalid value 'not-a-number'"), damage=bad_csv),
    Case("cli-missing-input-file", "local",
         lambda c: cli("append", c.uri, "/nonexistent/input.parquet"), CLIFailed,
         ("input file /nonexistent/input.parquet does not exist",)),
    # S3 options
    Case("misspelt-storage-option", "s3", lambda c: c.table(AWS_ENDPIONT_URL="http://x"),
         StorageConfigError, ("'AWS_ENDPIONT_URL'", "did you mean AWS_ENDPOINT_URL")),
    Case("bad-conditional-put-value", "s3", lambda c: c.table(conditional_put="sometimes"),
         StorageConfigError, ("must be etag, disabled or dynamo:<table>", "'sometimes'")),
    Case("unreachable-s3-endpoint", "s3",
         lambda c: c.table(AWS_ENDPOINT_URL=f"http://127.0.0.1:{c.extra['port']}"), StorageError,
         ("{uri}/_delta_log", "cannot connect to the S3 endpoint http://127.0.0.1:{port}")),
    Case("wrong-credentials", "s3",
         lambda c: c.table(AWS_ACCESS_KEY_ID="AKIAWRONGKEY", AWS_SECRET_ACCESS_KEY="nope"),
         StorageError, ("{uri}/_delta_log", "credentials were rejected", "AWS_ACCESS_KEY_ID")),
    # coordination
    Case("conditional-writer-on-a-dynamodb-table", "dynamodb",
         lambda c: dc.write(c.uri, _data, storage_options=c.extra["s3"]),
         CoordinationMismatchError,
         ("{uri}", "deltacommit.coordination='dynamodb'", "configured for 'conditional'")),
    Case("table-path-scheme-mismatch", "dynamodb",
         lambda c: c.write(_data, DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME="s3a"),
         CoordinationMismatchError, ("{uri}", "the fleet's entries use tablePath '{uri}'",
                                     "'s3a://")),
    Case("locking-provider-and-dynamo-conditional-put", "dynamodb",
         lambda c: c.table(conditional_put="dynamo:leases"), StorageConfigError,
         ("{uri}", "AWS_S3_LOCKING_PROVIDER=dynamodb", "conditional_put=dynamo:leases",
          "choose one")),
    Case("dynamodb-ttl-too-short", "dynamodb",
         lambda c: c.write(_data, DELTACOMMIT_DYNAMO_TTL_SECONDS="60"), StorageConfigError,
         ("DELTACOMMIT_DYNAMO_TTL_SECONDS must be at least 3600", "got 60")),
    Case("unreachable-dynamodb-endpoint", "dynamodb",
         lambda c: c.write(_data, AWS_ENDPOINT_URL_DYNAMODB=f"http://127.0.0.1:{c.extra['port']}"),
         LogStoreError, ("http://127.0.0.1:{port}", "cannot be reached")),
    Case("missing-dynamodb-table", "dynamodb",
         lambda c: c.write(_data, DELTA_DYNAMO_TABLE_NAME="no-such-table"), LogStoreError,
         ("no-such-table", "does not exist", "{uri}", "deltacommit dynamodb create-table")),
    Case("wrong-dynamodb-key-schema", "dynamodb",
         lambda c: c.write(_data, DELTA_DYNAMO_TABLE_NAME=c.extra["wrong"]), LogStoreError,
         ("key schema (id S HASH)", "(tablePath S HASH, fileName S RANGE)"),
         damage=wrong_key_schema_table),
    Case("stale-entries-after-the-table-is-re-created", "dynamodb",
         lambda c: dc.DeltaTable.create(c.uri, SCHEMA, storage_options=c.options),
         LogStoreError, ("old entries for table {uri}", "--drop-stale-entries"),
         damage=delete_all_objects, reads_back=False),
    # paths, bounds and malformed logs (data safety)
    Case("add-path-outside-the-table", "local", lambda c: c.table().to_arrow(), CorruptLogError,
         ("{uri}", "../outside/x.parquet", "outside the table location", "allow_external_paths"),
         damage=append_action({"add": {"path": "../outside/x.parquet", "partitionValues": {},
                                       "size": 1, "modificationTime": 0, "dataChange": True}}),
         reads_back=False),
    Case("add-path-escaping-by-percent-encoding", "local", lambda c: c.table().to_arrow(),
         CorruptLogError, ("{uri}", "%2e%2e%2foutside", "outside the table location"),
         damage=append_action({"add": {"path": "%2e%2e%2foutside%2fx.parquet",
                                       "partitionValues": {}, "size": 1,
                                       "modificationTime": 0, "dataChange": True}}),
         reads_back=False),
    Case("two-protocols-in-one-commit", "local", lambda c: c.write(_data), CorruptLogError,
         ("{uri}", "00000000000000000002.json", "two protocol actions in one commit"),
         damage=append_actions([{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                                {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}]),
         reads_back=False),
    Case("reader-version-3-without-reader-features", "local", lambda c: c.table(), CorruptLogError,
         ("{uri}", "minReaderVersion 3 but no readerFeatures list"),
         damage=append_action({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                            "writerFeatures": []}}),
         reads_back=False),
    Case("txn-version-beyond-64-bits-in-the-log", "local", lambda c: c.table(), CorruptLogError,
         ("{uri}", "00000000000000000002.json", "outside the signed 64-bit range"),
         damage=append_action({"txn": {"appId": "x", "version": 2**64}}), reads_back=False),
    Case("app-version-beyond-64-bits", "local",
         lambda c: dc.write(c.uri, _data, app_id="ingest", app_version=2**63),
         InvalidArgumentError, ("'ingest'", "from 0 to 2**63-1", str(2**63))),
    Case("stray-commit-a-trillion-versions-ahead", "local", lambda c: c.table(),
         MissingVersionError, ("{uri}", "lacks version(s) 2-999999999999"),
         damage=stray_commit(10**12), reads_back=False),
    Case("vacuum-retention-not-finite", "local",
         lambda c: c.table().vacuum(retention_hours=float("nan")), InvalidArgumentError,
         ("vacuum of {uri}", "retention_hours must be a finite number", "nan")),
    Case("vacuum-retention-1e400-from-the-cli", "local",
         lambda c: cli("vacuum", c.uri, "--retention-hours", "1e400"), CLIFailed,
         ("retention_hours must be a finite number", "inf")),
    Case("predicate-nested-5000-deep", "local",
         lambda c: cli("delete", c.uri, "--where", "(" * 5000 + "day = 'a'" + ")" * 5000),
         CLIFailed, ("nests deeper than 100 levels",)),
    Case("partition-value-over-255-bytes", "local",
         lambda c: c.write(pa.table({"id": [3], "day": ["x" * 300]}, schema=SCHEMA)),
         InvalidArgumentError, ("column 'day' is too long", "255")),
    Case("history-limit-negative", "local", lambda c: cli("history", c.uri, "--limit", "-1"),
         CLIFailed, ("limit must be a positive integer", "-1")),
    Case("append-a-directory", "local",
         lambda c: cli("append", c.uri, str(Path(c.uri).parent)), CLIFailed,
         ("is a directory", "name the data files in it")),
    Case("invariant-violated", "local",
         lambda c: dc.write(c.extra["inv"], pa.table({"id": [-1]})), dc.InvariantViolationError,
         ("column 'id' (id > 0)", "'id': -1", "nothing was written"), damage=invariant_table),
    Case("check-constraint-violated", "local",
         lambda c: dc.write(c.extra["chk"], pa.table({"id": [0]})),
         dc.CheckConstraintViolationError, ("CHECK constraint 'positive' (id > 0)", "'id': 0"),
         damage=check_table),
    Case("boolean-property-not-a-boolean", "local",
         lambda c: dc.DeltaTable.create(str(Path(c.uri).parent / "t2"), SCHEMA,
                                        configuration={"delta.appendOnly": "yes please"}),
         InvalidArgumentError, ("delta.appendOnly must be true or false", "'yes please'")),
    Case("protocol-request-unsupported", "local",
         lambda c: dc.DeltaTable.create(str(Path(c.uri).parent / "t2"), SCHEMA,
                                        configuration={"delta.minWriterVersion": "5"}),
         InvalidArgumentError, ("delta.minWriterVersion=5", "cannot write")),
    Case("column-name-spark-refuses", "local",
         lambda c: dc.DeltaTable.create(str(Path(c.uri).parent / "t2"),
                                        pa.schema([("a b", pa.int64())])),
         InvalidArgumentError, ("column name 'a b' contains ' '", "column mapping")),
]


@pytest.fixture
def ctx(request: pytest.FixtureRequest, tmp_path: Path) -> Ctx:
    case: Case = request.param
    if case.kind == "local":
        root = tmp_path / "root"
        c = Ctx(case.kind, str(root / "t"), {}, root=root)
    else:
        moto: MotoServer = request.getfixturevalue("moto_server")
        bucket: S3Bucket = request.getfixturevalue("s3_bucket")
        s3 = dict(bucket.storage_options)
        if case.kind == "dynamodb":
            log_table = new_log_table(moto.endpoint)
            c = Ctx(case.kind, f"{bucket.uri}/t", dynamo_options(bucket, moto.endpoint, log_table),
                    bucket=bucket, moto=moto, log_table=log_table)
        else:
            c = Ctx(case.kind, f"{bucket.uri}/t", s3, bucket=bucket, moto=moto)
        c.extra["s3"] = s3
    dc.DeltaTable.create(c.uri, SCHEMA, partition_by=["day"], storage_options=c.options)
    dc.write(c.uri, ROWS, storage_options=c.options)
    c.extra["port"] = closed_port()
    return c


@pytest.mark.parametrize("ctx", CASES, ids=[c.id for c in CASES], indirect=True)
def test_bad_input_is_a_clear_error_and_the_table_is_unchanged(ctx: Ctx, request: pytest.FixtureRequest
                                                               ) -> None:
    case: Case = request.node.callspec.params["ctx"]
    if case.damage is not None:
        case.damage(ctx)
        # Damage is done by someone else: the table is opened as a new process opens it, not
        # from this process's cached state of it (which still holds the undamaged table).
        state_cache.clear()
    before = ctx.state()
    moto = ctx.moto
    auth = case.id == "wrong-credentials"
    if auth:
        assert moto is not None
        moto.set_auth(True)
    try:
        with pytest.raises(case.error) as raised:
            case.act(ctx)
    finally:
        if auth:
            assert moto is not None
            moto.set_auth(False)
    message = str(raised.value)
    for expected in case.says:
        text = expected.replace("{uri}", _shown_uri(ctx.uri)).replace(
            "{port}", str(ctx.extra["port"]))
        assert text in message, f"{case.id}: {text!r} not in {message!r}"
    assert ctx.state() == before, f"{case.id}: the table changed"
    if case.reads_back:
        assert ctx.table().to_arrow().num_rows == ctx.rows


def _shown_uri(uri: str) -> str:
    """Local tables are named as ``file://`` URIs in messages."""
    return uri if "://" in uri else f"file://{uri}"


def test_the_catalogue_is_large_enough() -> None:
    assert len(CASES) >= 25
    assert len({c.id for c in CASES}) == len(CASES)
