"""The light DynamoDB client: DynamoDB's JSON protocol with botocore's method names, result
dicts, ``ClientError`` codes and "standard" retries.

Every operation is ``POST /`` with ``X-Amz-Target: DynamoDB_20120810.<Operation>`` and the
arguments as JSON, which is what botocore sends for the low-level client's keyword arguments
(attribute values stay in DynamoDB's typed form, ``{"S": ...}``).  The operations the log stores
and their administration call are sent here (``PutItem``, ``GetItem``, ``UpdateItem``,
``DeleteItem``, ``Query``, ``DescribeTable``, ``CreateTable``, ``DescribeTimeToLive``,
``UpdateTimeToLive``); anything else, and any argument holding bytes (binary attributes, which
botocore base64-encodes), goes to a botocore client made on first need.

Retries are botocore's standard mode as our botocore DynamoDB clients are configured
(``DYNAMODB_MAX_ATTEMPTS`` attempts in all): throttling, transient codes, 500/502/503/504, a
body whose CRC32 does not match, and connection failures, after a delay drawn uniformly below
``2 ** (retry - 1)`` seconds (at most 20).  ``ResponseMetadata.RetryAttempts`` (on results and
on ``ClientError``) says how many, which the log stores use to tell a condition failed by their
own earlier attempt.  ``ConditionalCheckFailedException`` is never retried.
"""

from __future__ import annotations

import json
import random
import time
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from deltacommit.io.aws.light.client import LightClient
from deltacommit.io.aws.light.errors import ClientError, ConnectionLostError, TransportError
from deltacommit.io.aws.light.http import HttpPool, Response
from deltacommit.io.aws.light.protocol import json_error_response, metadata, send
from deltacommit.io.aws.light.settings import DynamoDBSettings
from deltacommit.io.aws.light.sigv4 import payload_hash

__all__ = ["OPERATIONS", "LightDynamoDBClient"]

OPERATIONS = {
    "put_item": "PutItem", "get_item": "GetItem", "update_item": "UpdateItem",
    "delete_item": "DeleteItem", "query": "Query", "describe_table": "DescribeTable",
    "create_table": "CreateTable", "describe_time_to_live": "DescribeTimeToLive",
    "update_time_to_live": "UpdateTimeToLive",
}
#: botocore's standard retry mode: throttling and transient error codes.
_RETRIED_CODES = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottledException",
    "TooManyRequestsException", "ProvisionedThroughputExceededException",
    "TransactionInProgressException", "RequestLimitExceeded", "BandwidthLimitExceeded",
    "LimitExceededException", "RequestThrottled", "SlowDown", "PriorRequestNotComplete",
    "EC2ThrottledException", "RequestTimeout", "RequestTimeoutException",
})
_RETRIED_STATUS = frozenset({500, 502, 503, 504})
_MAX_BACKOFF_SECONDS = 20.0
#: DescribeTable and CreateTable answer with epoch seconds where botocore gives datetimes.
_TIMESTAMPS = frozenset({"CreationDateTime", "LastIncreaseDateTime", "LastDecreaseDateTime",
                         "LastUpdateToPayPerRequestDateTime", "InaccessibleEncryptionDateTime",
                         "ArchivalDateTime"})


class LightDynamoDBClient(LightClient[DynamoDBSettings]):
    """A DynamoDB client without botocore for settings ``light_dynamodb`` accepted; thread-safe."""

    def __init__(self, settings: DynamoDBSettings, pool: HttpPool, endpoint_url: str,
                 max_attempts: int, fallback: Callable[[], Any],
                 sleep: Callable[[float], None] = time.sleep,
                 uniform: Callable[[], float] = random.random) -> None:
        super().__init__(settings, pool, endpoint_url, fallback)
        self._max_attempts = max_attempts
        self._sleep = sleep
        self._random = uniform

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        operation = OPERATIONS.get(name)
        if operation is None:
            return getattr(self._botocore(), name)

        def call(**kwargs: Any) -> dict[str, Any]:
            if _holds_bytes(kwargs):
                return getattr(self._botocore(), name)(**kwargs)  # type: ignore[no-any-return]
            return self._call(operation, kwargs)

        return call

    def _call(self, operation: str, arguments: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(arguments).encode("utf-8")  # as botocore spells it
        headers = {"Content-Type": "application/x-amz-json-1.0",
                   "X-Amz-Target": f"DynamoDB_20120810.{operation}"}
        settings = self._settings
        attempt = 0
        while True:
            attempt += 1
            retries = attempt - 1
            self._announce("dynamodb", operation)
            try:
                response = send(self._pool, settings.endpoint, method="POST", path="/", params=None,
                                headers=headers, body=body, body_sha256=payload_hash(body),
                                credentials=settings.credentials, region=settings.region,
                                service="dynamodb")
                _check_crc32(response, settings.endpoint.url)
            except TransportError:
                if attempt >= self._max_attempts:
                    raise
                self._backoff(attempt)
                continue
            if response.status < 300:
                result = _parse(response, operation)
                result["ResponseMetadata"] = metadata(response, retries)
                return result
            error = json_error_response(response, retries)
            code = error["Error"]["Code"]
            retryable = code in _RETRIED_CODES or response.status in _RETRIED_STATUS
            if not retryable or attempt >= self._max_attempts:
                raise ClientError(error, operation)
            self._backoff(attempt)

    def _backoff(self, attempt: int) -> None:
        self._sleep(min(self._random() * 2 ** (attempt - 1), _MAX_BACKOFF_SECONDS))


def _check_crc32(response: Response, where: str) -> None:
    """DynamoDB sends the CRC32 of its body; botocore retries an answer that does not match."""
    expected = response.headers.get("x-amz-crc32")
    # ASCII digits alone: a header is Latin-1, whose '²' is a digit int() refuses.
    if expected is not None and expected.isascii() and expected.isdigit() \
            and int(expected) != zlib.crc32(response.body):
        raise ConnectionLostError(where, "the answer's CRC32 does not match its body")


def _parse(response: Response, operation: str) -> dict[str, Any]:
    if not response.body:
        return {}
    try:
        result = json.loads(response.body)
    except ValueError:
        error = {"Error": {"Code": "InvalidResponse",
                           "Message": "the answer is not the JSON DynamoDB sends"},
                 "ResponseMetadata": metadata(response)}
        raise ClientError(error, "DynamoDB") from None
    if not isinstance(result, dict):
        return {}
    if operation in ("DescribeTable", "CreateTable"):
        _timestamps(result)
    return result


def _timestamps(value: Any) -> None:
    """Epoch-second timestamps of table descriptions as botocore's datetimes."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in _TIMESTAMPS and isinstance(inner, (int, float)):
                value[key] = datetime.fromtimestamp(inner, UTC)
            else:
                _timestamps(inner)
    elif isinstance(value, list):
        for inner in value:
            _timestamps(inner)


def _holds_bytes(value: Any) -> bool:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return True
    if isinstance(value, dict):
        return any(_holds_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple, set)):
        return any(_holds_bytes(v) for v in value)
    return False
