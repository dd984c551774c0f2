"""The light client's transport and retries, without a service: what a failure to connect, a
server that never answers, throttling, a failed condition and a corrupted answer become.

No wait is unbounded (connect and read timeouts), a request that never left is told apart from
one whose answer was lost, DynamoDB requests are retried as botocore's standard mode retries
them (and say how often, ``RetryAttempts``), and a failed condition is never retried.
"""

from __future__ import annotations

import json
import socket
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from deltacommit.io.aws.errors import (
    answer_lost,
    client_errors,
    error_code,
    not_sent,
    retry_attempts,
    transport_errors,
)
from deltacommit.io.aws.light.dynamodb import LightDynamoDBClient
from deltacommit.io.aws.light.errors import ConnectionLostError, EndpointConnectionError
from deltacommit.io.aws.light.http import Endpoint, HttpPool, Response
from deltacommit.io.aws.light.settings import DynamoDBSettings
from deltacommit.io.aws.light.sigv4 import Credentials


@pytest.fixture
def silent_server() -> Iterator[tuple[str, int]]:
    """A listening socket that never accepts: connections complete (the kernel's backlog) and
    no answer ever comes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server.getsockname()
    finally:
        server.close()


def test_a_server_that_never_answers_costs_the_read_timeout_and_may_have_applied(
        silent_server: tuple[str, int]) -> None:
    host, port = silent_server
    pool = HttpPool(connect_timeout=1.0, read_timeout=0.2, max_idle=2)
    with pytest.raises(answer_lost()) as info:
        pool.request(Endpoint("http", host, port), "PUT", "/b/k", {}, b"x")
    assert isinstance(info.value, ConnectionLostError)
    assert f"http://{host}:{port}" in str(info.value)


def test_a_refused_connection_was_never_sent() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens on it now
    pool = HttpPool(connect_timeout=1.0, read_timeout=1.0, max_idle=2)
    with pytest.raises(not_sent()) as info:
        pool.request(Endpoint("http", "127.0.0.1", port), "GET", "/", {}, b"")
    assert isinstance(info.value, EndpointConnectionError)
    assert isinstance(info.value, transport_errors())


class _ScriptedPool:
    """Answers from a script: a Response, or an exception to raise."""

    connect_timeout = 5.0
    read_timeout = 30.0
    max_idle = 1

    def __init__(self, script: list[Response | Exception]) -> None:
        self.script = list(script)
        self.sent = 0

    def request(self, endpoint: Endpoint, method: str, target: str, headers: dict[str, str],
                body: bytes) -> Response:
        self.sent += 1
        answer = self.script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _answer(status: int, body: dict[str, Any], *, crc: int | None = None) -> Response:
    data = json.dumps(body).encode()
    return Response(status, "", {"x-amz-crc32": str(zlib.crc32(data) if crc is None else crc)}, data)


def _client(pool: _ScriptedPool, sleeps: list[float]) -> LightDynamoDBClient:
    settings = DynamoDBSettings(Credentials("AKID", "secret"), "us-east-1",
                                Endpoint("http", "127.0.0.1", 8000))
    return LightDynamoDBClient(settings, pool, "http://127.0.0.1:8000", 5,  # type: ignore[arg-type]
                               lambda: None, sleep=sleeps.append, uniform=lambda: 1.0)


THROTTLED = {"__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
             "message": "slow down"}


def test_throttling_is_retried_and_counted() -> None:
    sleeps: list[float] = []
    pool = _ScriptedPool([_answer(400, THROTTLED), _answer(500, {"__type": "InternalServerError"}),
                          _answer(200, {"Item": {"k": {"S": "v"}}})])
    result = _client(pool, sleeps).get_item(TableName="t", Key={"k": {"S": "v"}})
    assert result["Item"] == {"k": {"S": "v"}}
    assert retry_attempts(result) == 2 and pool.sent == 3
    assert sleeps == [1.0, 2.0]     # below 2 ** (retry - 1) seconds, drawn at the top here


def test_retries_stop_after_five_attempts_with_the_code_and_count() -> None:
    sleeps: list[float] = []
    pool = _ScriptedPool([_answer(400, THROTTLED) for _ in range(5)])
    with pytest.raises(client_errors()) as info:
        _client(pool, sleeps).put_item(TableName="t", Item={})
    assert error_code(info.value) == "ProvisionedThroughputExceededException"
    assert retry_attempts(info.value) == 4 and pool.sent == 5 and len(sleeps) == 4
    assert max(sleeps) <= 20.0


def test_a_failed_condition_is_an_answer_never_retried_and_carries_the_item() -> None:
    failed = {"__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
              "message": "The conditional request failed", "Item": {"g": {"N": "3"}}}
    sleeps: list[float] = []
    pool = _ScriptedPool([_answer(400, failed)])
    with pytest.raises(client_errors()) as info:
        _client(pool, sleeps).put_item(TableName="t", Item={}, ConditionExpression="x")
    assert error_code(info.value) == "ConditionalCheckFailedException"
    assert info.value.response["Item"] == {"g": {"N": "3"}}  # type: ignore[attr-defined]
    assert retry_attempts(info.value) == 0 and pool.sent == 1 and sleeps == []


def test_a_lost_answer_and_a_corrupted_body_are_retried() -> None:
    sleeps: list[float] = []
    pool = _ScriptedPool([ConnectionLostError("http://127.0.0.1:8000", "reset"),
                          _answer(200, {"Items": []}, crc=1),
                          _answer(200, {"Items": [], "Count": 0})])
    result = _client(pool, sleeps).query(TableName="t", KeyConditionExpression="k = :k")
    assert result["Count"] == 0 and retry_attempts(result) == 2


def test_a_crc_header_that_is_not_a_number_checks_nothing() -> None:
    """A header is Latin-1, whose '²' is a digit to str.isdigit but not to int(): like any
    header that is not a number, it checks nothing, and the answer is read."""
    data = json.dumps({"Items": [], "Count": 0}).encode()
    pool = _ScriptedPool([Response(200, "", {"x-amz-crc32": "\u00b2"}, data)])
    result = _client(pool, []).query(TableName="t", KeyConditionExpression="k = :k")
    assert result["Count"] == 0 and pool.sent == 1


def test_the_last_transport_failure_is_raised_as_maybe_applied() -> None:
    sleeps: list[float] = []
    pool = _ScriptedPool([ConnectionLostError("http://127.0.0.1:8000", "reset") for _ in range(5)])
    with pytest.raises(answer_lost()):
        _client(pool, sleeps).update_item(TableName="t", Key={})
    assert pool.sent == 5


def test_an_emulators_xml_error_is_read_for_its_code() -> None:
    """moto answers a rejected signature on DynamoDB with XML and HTTP 403."""
    xml = (b"<ErrorResponse><Error><Code>UnrecognizedClientException</Code>"
           b"<Message>The security token included in the request is invalid.</Message>"
           b"</Error></ErrorResponse>")
    pool = _ScriptedPool([Response(403, "Forbidden", {}, xml)])
    with pytest.raises(client_errors()) as info:
        _client(pool, []).describe_table(TableName="t")
    assert error_code(info.value) == "UnrecognizedClientException"


class _RegionalPool(_ScriptedPool):
    def __init__(self, script: list[Response | Exception]) -> None:
        super().__init__(script)
        self.hosts: list[tuple[str, str]] = []

    def request(self, endpoint: Endpoint, method: str, target: str, headers: dict[str, str],
                body: bytes) -> Response:
        scope = headers["Authorization"].split("Credential=", 1)[1].split(",", 1)[0]
        self.hosts.append((endpoint.host, scope.split("/")[2]))
        return super().request(endpoint, method, target, headers, body)


def _redirect(region: str) -> Response:
    body = (b"<Error><Code>PermanentRedirect</Code><Message>The bucket you are attempting to "
            b"access must be addressed using the specified endpoint.</Message></Error>")
    return Response(301, "Moved Permanently", {"x-amz-bucket-region": region}, body)


def _s3_client(pool: _ScriptedPool, endpoint: Endpoint | None) -> Any:
    from deltacommit.io.aws.light.s3 import LightS3Client
    from deltacommit.io.aws.light.settings import S3Settings

    settings = S3Settings(Credentials("AKID", "secret"), "us-east-1", endpoint,
                          force_path_style=endpoint is not None)
    return LightS3Client(settings, pool, "https://s3.amazonaws.com",  # type: ignore[arg-type]
                         lambda: None)


def test_a_bucket_in_another_region_is_asked_there_as_botocore_does() -> None:
    """AWS answers a request to the wrong region with the bucket's region and executes
    nothing; the request is signed for that region and sent there, and the next goes there
    at once."""
    ok = Response(200, "OK", {"etag": '"1"'}, b"")
    pool = _RegionalPool([_redirect("eu-west-1"), ok, ok])
    client = _s3_client(pool, None)
    client.put_object(Bucket="bkt", Key="k", Body=b"x", IfNoneMatch="*")
    client.get_object(Bucket="bkt", Key="k")
    assert pool.hosts == [("bkt.s3.amazonaws.com", "us-east-1"),
                          ("bkt.s3.eu-west-1.amazonaws.com", "eu-west-1"),
                          ("bkt.s3.eu-west-1.amazonaws.com", "eu-west-1")]


def test_a_custom_endpoint_is_never_redirected() -> None:
    pool = _RegionalPool([_redirect("eu-west-1")])
    client = _s3_client(pool, Endpoint("http", "127.0.0.1", 5000))
    with pytest.raises(client_errors()) as info:
        client.get_object(Bucket="bkt", Key="k")
    assert error_code(info.value) == "PermanentRedirect" and pool.sent == 1
