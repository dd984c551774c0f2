"""The light clients send what botocore's clients send: the same URL (endpoint, addressing,
path, query) and the same signature, for every operation the storage and log stores use and
every way of configuring the endpoint the light client serves (options, ``AWS_ENDPOINT_URL``,
``AWS_ENDPOINT_URL_S3`` / ``_DYNAMODB``, AWS's own by region; path-style and automatic
addressing; bucket names that can and cannot be host names).  No server: both clients' requests
are caught before they leave (botocore's at ``before-send``, the light client's at its pool),
signed at one fixed time.
"""

from __future__ import annotations

import contextlib
import datetime
import json
from typing import Any
from unittest import mock
from urllib.parse import parse_qsl, urlsplit

import pytest
from botocore.awsrequest import AWSResponse

from deltacommit.io.aws import resolve_aws_config
from deltacommit.io.aws.config import (
    AwsConfig,
    _botocore_dynamodb_client,
    _botocore_s3_client,
    clear_client_cache,
)
from deltacommit.io.aws.light.dynamodb import LightDynamoDBClient
from deltacommit.io.aws.light.http import Endpoint, Response
from deltacommit.io.aws.light.s3 import LightS3Client, endpoint_url_of
from deltacommit.io.aws.light.settings import light_dynamodb, light_s3

MOMENT = datetime.datetime(2026, 11, 28, 10, 30, 0)
KEYS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret/+key",
        "AWS_SESSION_TOKEN": "token+/="}
#: Headers botocore adds for its own bookkeeping, signed but meaning nothing to the service.
BOOKKEEPING = ("amz-sdk-invocation-id", "amz-sdk-request", "x-amz-user-agent")

S3_CASES = [
    ({"AWS_ENDPOINT_URL": "http://127.0.0.1:5000", "AWS_ALLOW_HTTP": "true"}, {}),
    ({"AWS_ENDPOINT_URL": "http://localhost:4566", "AWS_ALLOW_HTTP": "true"}, {}),
    ({"AWS_ENDPOINT_URL": "https://s3.example.com"}, {}),
    ({"AWS_ENDPOINT_URL": "https://s3.example.com:8443", "AWS_S3_ADDRESSING_STYLE": "auto"}, {}),
    ({}, {"AWS_ENDPOINT_URL_S3": "http://localhost:4566"}),
    ({}, {"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:4566"}),
    ({}, {"AWS_ENDPOINT_URL_S3": "https://objects.example.com"}),
    ({"AWS_REGION": "us-east-1"}, {}),
    ({"AWS_REGION": "eu-west-1"}, {}),
    ({"AWS_REGION": "ap-southeast-2", "AWS_S3_ADDRESSING_STYLE": "path"}, {}),
    ({}, {}),
]
BUCKETS = ["bkt-1", "my.dotted.bucket", "ab1", "a" * 63, "192.168.1.10"]
S3_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_object", {"Key": "_delta_log/00000000000000000001.json"}),
    ("head_object", {"Key": "part=a b/ü+%.parquet"}),
    ("put_object", {"Key": "_delta_log/00000000000000000002.json", "Body": b"{}",
                    "IfNoneMatch": "*"}),
    ("put_object", {"Key": "k~x", "Body": b"abc", "IfMatch": '"0123"'}),
    ("put_object", {"Key": "plain", "Body": b""}),
    ("delete_object", {"Key": "dir/obj"}),
    ("list_objects_v2", {"Prefix": "t/_delta_log/", "MaxKeys": 1000,
                         "StartAfter": "t/_delta_log/00000000000000000003.json"}),
    ("list_objects_v2", {"Prefix": "t/a b+c/", "ContinuationToken": "tok/+=="}),
    ("copy_object", {"Key": "dst key", "CopySource": {"Bucket": "src-bkt", "Key": "a b/c"}}),
]


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


def _botocore_request(client: Any, operation: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def before_send(request: Any, **_: Any) -> AWSResponse:
        headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
        seen.update(method=request.method, url=request.url, headers=headers)
        return AWSResponse(request.url, 200, {}, _Raw(b""))

    def before_sign(request: Any, **_: Any) -> None:
        for name in BOOKKEEPING:
            if name in request.headers:
                del request.headers[name]

    client.meta.events.register("before-sign", before_sign)
    client.meta.events.register("before-send", before_send)
    # The empty answer may not parse; the request was caught already.
    with mock.patch("botocore.auth.get_current_datetime", return_value=MOMENT), \
            contextlib.suppress(Exception):
        getattr(client, operation)(**kwargs)
    return seen


class _CatchingPool:
    connect_timeout = 5.0
    read_timeout = 30.0
    max_idle = 1

    def __init__(self, body: bytes = b"") -> None:
        self.seen: dict[str, Any] = {}
        self.body = body

    def request(self, endpoint: Endpoint, method: str, target: str, headers: dict[str, str],
                body: bytes) -> Response:
        self.seen.update(method=method, url=endpoint.url + target, headers=dict(headers))
        return Response(200, "OK", {}, self.body)


def _light_request(make: Any, operation: str, kwargs: dict[str, Any], body: bytes) -> dict[str, Any]:
    pool = _CatchingPool(body)
    client = make(pool)
    with mock.patch("deltacommit.io.aws.light.protocol.amz_date",
                    return_value=MOMENT.strftime("%Y%m%dT%H%M%SZ")), contextlib.suppress(Exception):
        getattr(client, operation)(**kwargs)
    return pool.seen


def _same_request(botocore: dict[str, Any], light: dict[str, Any]) -> None:
    b, mine = urlsplit(botocore["url"]), urlsplit(light["url"])
    assert (mine.scheme, mine.netloc, mine.path) == (b.scheme, b.netloc, b.path)
    assert sorted(parse_qsl(mine.query, keep_blank_values=True)) == \
        sorted(parse_qsl(b.query, keep_blank_values=True))
    assert light["method"] == botocore["method"]
    assert light["headers"]["Authorization"] == botocore["headers"]["Authorization"]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("AWS_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                 "AWS_ENDPOINT_URL_DYNAMODB", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    clear_client_cache()
    return monkeypatch


@pytest.mark.parametrize(("options", "env"), S3_CASES)
def test_s3_requests_match_botocore(clean_env: pytest.MonkeyPatch, options: dict[str, str],
                                    env: dict[str, str]) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    config = resolve_aws_config({**KEYS, **options})
    settings = light_s3(config)
    assert not isinstance(settings, str), settings
    botocore_client = _botocore_s3_client(config, None)

    def make(pool: Any) -> LightS3Client:
        return LightS3Client(settings, pool, endpoint_url_of(settings, config.endpoint_url),
                             lambda: None)

    assert make(_CatchingPool()).meta.endpoint_url == botocore_client.meta.endpoint_url
    for bucket in BUCKETS:
        for operation, kwargs in S3_CALLS:
            call = {"Bucket": bucket, **kwargs}
            expected = _botocore_request(botocore_client, operation, call)
            _same_request(expected, _light_request(make, operation, call, b""))


DYNAMODB_CASES = [
    {"AWS_ENDPOINT_URL": "http://127.0.0.1:8000", "AWS_ALLOW_HTTP": "true"},
    {"AWS_ENDPOINT_URL_DYNAMODB": "http://localhost:8000", "AWS_ALLOW_HTTP": "true"},
    {"AWS_REGION": "eu-central-1"},
    {"AWS_REGION": "eu-central-1", "AWS_REGION_DYNAMODB": "us-west-2"},
    {},
]
DYNAMODB_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("put_item", {"TableName": "delta_log", "Item": {"tablePath": {"S": "s3://b/t"},
                                                      "fileName": {"S": "00000000000000000001.json"}},
                  "ConditionExpression": "attribute_not_exists(fileName)"}),
    ("get_item", {"TableName": "delta_log", "ConsistentRead": True,
                  "Key": {"tablePath": {"S": "s3://b/t"}, "fileName": {"S": "x"}}}),
    ("query", {"TableName": "delta_log", "KeyConditionExpression": "#p = :p",
               "ExpressionAttributeNames": {"#p": "tablePath"},
               "ExpressionAttributeValues": {":p": {"S": "s3://b/t ü"}},
               "ConsistentRead": True, "ScanIndexForward": False, "Limit": 1}),
    ("describe_table", {"TableName": "delta_log"}),
    ("update_item", {"TableName": "delta_log", "Key": {"tablePath": {"S": "p"}, "fileName": {"S": "f"}},
                     "UpdateExpression": "SET complete = :t",
                     "ExpressionAttributeValues": {":t": {"S": "true"}}}),
]


@pytest.mark.parametrize("options", DYNAMODB_CASES)
def test_dynamodb_requests_match_botocore(clean_env: pytest.MonkeyPatch,
                                          options: dict[str, str]) -> None:
    config = resolve_aws_config({**KEYS, **options})
    settings = light_dynamodb(config)
    assert not isinstance(settings, str), settings
    botocore_client = _botocore_dynamodb_client(config)

    def make(pool: Any) -> LightDynamoDBClient:
        return LightDynamoDBClient(settings, pool,
                                   config.effective_dynamodb_endpoint_url or settings.endpoint.url,
                                   1, lambda: None)

    assert make(_CatchingPool()).meta.endpoint_url == botocore_client.meta.endpoint_url
    assert make(_CatchingPool()).meta.region_name == botocore_client.meta.region_name
    for operation, kwargs in DYNAMODB_CALLS:
        expected = _botocore_request(botocore_client, operation, kwargs)
        _same_request(expected, _light_request(make, operation, kwargs, b"{}"))


def test_config_is_hashable_with_light_fields() -> None:
    """The client cache keys on the settings (sanity: a served config resolves twice alike)."""
    a = resolve_aws_config({**KEYS, "AWS_REGION": "eu-west-1"})
    b = resolve_aws_config({**KEYS, "AWS_REGION": "eu-west-1"})
    assert isinstance(a, AwsConfig) and hash(a) == hash(b)
    assert json.dumps(a.redacted())
