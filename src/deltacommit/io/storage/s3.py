"""S3 as an object store, on boto3, with S3's conditional writes as the atomic primitive.

A create (``PutMode.CREATE``, ``put_if_absent``) is one ``PutObject`` with ``If-None-Match: *``
and an update (``PutMode.update(etag)``, ``put_if_match``) one with ``If-Match: <etag>``: S3
(since 2024) decides between racing writers, so exactly one creates an object.  Every operation
is one HTTP request in the normal case, because commit latency (and so a table's throughput) is
counted in requests; ``requests`` counts them for benchmarks.

Failures are retried by the AWS layers' one policy (``aws.retry``: exponential backoff with full
jitter, on the injectable clock): throttling (``SlowDown``, 503), other 5xx, and dropped or
timed-out connections; a 409 ``ConditionalRequestConflict`` on a conditional write too, since S3
reports it when another conditional write to the key is in flight and asks callers to retry.  A
412 is an answer, never retried.

A write whose response was lost (5xx, reset, timeout) may still have happened.  When the retry
of such a conditional write then fails its precondition, the store reads the object back: if it
holds exactly the bytes being written, the earlier attempt won and the write succeeds.  Without
that check a writer whose first attempt created ``N.json`` would conclude someone else had, and
commit its actions a second time at ``N+1``.

``copy_if_absent`` is a GET and a conditional PUT (two requests): S3's conditional
``CopyObject`` exists, but moto ignores ``If-None-Match`` on copies, so it could not be shown to
work here, and the objects copied this way (commit files) are small.
"""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

from deltacommit.errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
    StorageConfigError,
    StorageError,
)
from deltacommit.io.aws.config import AwsConfig, client_identity
from deltacommit.io.aws.errors import (
    S3_CREDENTIALS,
    S3_DENIED,
    S3_NOT_FOUND,
    S3_PRECONDITION,
    answer_lost,
    client_errors,
    describe_error,
    error_code,
    no_credentials,
    not_sent,
    s3_maybe_applied,
    s3_retryable,
    transport_errors,
)
from deltacommit.io.aws.light.protocol import http_date
from deltacommit.io.aws.options import CONDITIONAL_PUT_ALIAS, S3_CONDITIONAL_WRITES
from deltacommit.io.aws.resolve import resolve_aws_config
from deltacommit.io.aws.retry import S3_REQUESTS, RetryPolicy
from deltacommit.io.storage.base import DELETE_BATCH, ObjectMeta, ObjectStore, PutMode
from deltacommit.io.storage.s3_location import S3_SCHEMES, parse_s3_uri
from deltacommit.runtime.clock import DEFAULT_RANDOM, SYSTEM_CLOCK, Clock, RandomSource

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import DeleteTypeDef


T = TypeVar("T")

#: The S3 store's retries: six attempts, delays up to 2 s (``RetryPolicy`` is the AWS layers'
#: one policy, importable from here as before).
DEFAULT_RETRY = S3_REQUESTS

log = logging.getLogger(__name__)

#: How an S3-compatible store without multi-object delete answers DeleteObjects.
_NO_BATCH_DELETE = frozenset({"NotImplemented", "MethodNotAllowed", "501", "405"})
__all__ = ["DEFAULT_RETRY", "S3_SCHEMES", "RequestCounter", "RetryPolicy", "S3Store", "parse_s3_uri"]


class RequestCounter:
    """HTTP requests per S3 API operation, retries included; shared by a store and its children."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, operation: str) -> None:
        with self._lock:
            self._counts[operation] = self._counts.get(operation, 0) + 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


class _Attempts:
    """What the attempts of one operation learned: whether an earlier one may have taken effect."""

    __slots__ = ("ambiguous",)

    def __init__(self) -> None:
        self.ambiguous = False


class S3Store(ObjectStore):
    #: Keys per ListObjectsV2 page (S3's maximum); smaller only to exercise paging in tests.
    list_page_size = 1000

    def __init__(self, bucket: str, prefix: str = "", *, config: AwsConfig | None = None,
                 scheme: str = "s3", clock: Clock = SYSTEM_CLOCK,
                 random: RandomSource = DEFAULT_RANDOM, retry: RetryPolicy = DEFAULT_RETRY,
                 client: S3Client | None = None, counter: RequestCounter | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.scheme = scheme
        self.config = config if config is not None else resolve_aws_config(None)
        self.uri = f"{scheme}://{bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self.supports_conditional_put = self.config.uses_s3_conditional_writes
        self._client = client if client is not None else self.config.s3_client()
        self._clock = clock
        self._random = random
        self._retry = retry
        self._counter = counter if counter is not None else RequestCounter()
        #: Cleared when the endpoint answers DeleteObjects with NotImplemented.
        self._batch_delete = True

    @classmethod
    def from_uri(cls, uri: str, storage_options: Mapping[str, str] | None = None, *,
                 clock: Clock = SYSTEM_CLOCK, random: RandomSource = DEFAULT_RANDOM,
                 retry: RetryPolicy = DEFAULT_RETRY) -> S3Store:
        scheme, bucket, prefix = parse_s3_uri(uri)
        config = resolve_aws_config(storage_options)
        return cls(bucket, prefix, config=config, scheme=scheme, clock=clock, random=random,
                   retry=retry)

    def __repr__(self) -> str:
        where = f", endpoint={self.config.endpoint_url!r}" if self.config.endpoint_url else ""
        return f"S3Store({self.uri!r}{where})"

    def identity(self) -> tuple[str, ...] | None:
        """The bucket and prefix, at the endpoint and region the client resolved (from the
        options, ``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, the config files...) with
        the credentials it signs with: one bucket name on two endpoints or accounts is two
        locations, and ``s3a://`` and ``s3://`` spell one."""
        return ("s3", *client_identity(self._client), self.bucket, self.prefix)

    # ----------------------------------------------------------------- request accounting

    @property
    def requests(self) -> dict[str, int]:
        """HTTP requests made so far by S3 operation (``PutObject``, ``GetObject``, ...)."""
        return self._counter.snapshot()

    @property
    def request_count(self) -> int:
        return self._counter.total()

    def reset_requests(self) -> None:
        self._counter.reset()

    def count_request(self, operation: str) -> None:
        """Record a request made on this store's behalf by a wrapper with its own client."""
        self._counter.add(operation)

    # ----------------------------------------------------------------- paths

    def _key(self, path: str) -> str:
        return f"{self.prefix}/{path}" if self.prefix else path

    def _rel(self, key: str) -> str:
        return key[len(self.prefix) + 1:] if self.prefix else key

    def _url(self, path: str) -> str:
        return f"{self.uri}/{path}"

    def child(self, prefix: str) -> S3Store:
        return S3Store(self.bucket, self._key(prefix.strip("/")), config=self.config,
                       scheme=self.scheme, clock=self._clock, random=self._random,
                       retry=self._retry, client=self._client, counter=self._counter)

    # ----------------------------------------------------------------- operations

    def get(self, path: str) -> bytes:
        return self._get(path, "get")[0]

    def _get(self, path: str, op: str) -> tuple[bytes, ObjectMeta]:
        key = self._key(path)

        def call() -> tuple[bytes, ObjectMeta]:
            response = self._client.get_object(Bucket=self.bucket, Key=key)
            data = response["Body"].read()
            return data, ObjectMeta(path, len(data), _ms(response.get("LastModified")),
                                    response.get("ETag"))

        try:
            return self._request("GetObject", op, path, call)
        except client_errors() as e:
            raise self._error(op, path, e) from e

    def head(self, path: str) -> ObjectMeta:
        key = self._key(path)
        try:
            response = self._request("HeadObject", "head", path,
                                     lambda: self._client.head_object(Bucket=self.bucket, Key=key))
        except client_errors() as e:
            raise self._error("head", path, e) from e
        return ObjectMeta(path, int(response.get("ContentLength", 0)),
                          _ms(response.get("LastModified")), response.get("ETag"))

    def put(self, path: str, data: bytes, *, mode: PutMode = PutMode.OVERWRITE) -> ObjectMeta:
        if mode.kind == "create":
            return self._put_if_absent(path, data, mode.operation)
        if mode.kind == "update":
            return self._put_if_match(path, data, mode.etag or "")
        key = self._key(path)
        try:
            response = self._request(
                "PutObject", "put", path,
                lambda: self._client.put_object(Bucket=self.bucket, Key=key, Body=data))
        except client_errors() as e:
            raise self._error("put", path, e) from e
        return self._written(path, data, response)

    def _put_if_absent(self, path: str, data: bytes, op: str) -> ObjectMeta:
        self._require_conditional_writes(op, path)
        key = self._key(path)
        attempts = _Attempts()
        try:
            response = self._request(
                "PutObject", op, path,
                lambda: self._client.put_object(Bucket=self.bucket, Key=key, Body=data,
                                                IfNoneMatch="*"),
                conditional=True, attempts=attempts)
        except client_errors() as e:
            if error_code(e) not in S3_PRECONDITION:
                raise self._error(op, path, e) from e
            if attempts.ambiguous:
                mine = self._holds(path, data, op)
                if mine is not None:
                    return mine
            raise ObjectExistsError(op, self._url(path), "object already exists") from None
        return self._written(path, data, response)

    def _put_if_match(self, path: str, data: bytes, etag: str) -> ObjectMeta:
        op = "put-if-match"
        self._require_conditional_writes(op, path)
        key = self._key(path)
        attempts = _Attempts()
        try:
            response = self._request(
                "PutObject", op, path,
                lambda: self._client.put_object(Bucket=self.bucket, Key=key, Body=data,
                                                IfMatch=etag),
                conditional=True, attempts=attempts)
        except client_errors() as e:
            code = error_code(e)
            if code in S3_NOT_FOUND:
                raise PreconditionFailedError(op, self._url(path), "object does not exist") from None
            if code not in S3_PRECONDITION:
                raise self._error(op, path, e) from e
            if attempts.ambiguous:
                mine = self._holds(path, data, op)
                if mine is not None:
                    return mine
            raise PreconditionFailedError(
                op, self._url(path), f"the object's ETag is no longer {etag}") from None
        return self._written(path, data, response)

    def delete(self, path: str) -> None:
        key = self._key(path)
        try:
            self._request("DeleteObject", "delete", path,
                          lambda: self._client.delete_object(Bucket=self.bucket, Key=key))
        except client_errors() as e:
            if error_code(e) in S3_NOT_FOUND:
                return
            raise self._error("delete", path, e) from e

    def delete_many(self, paths: Sequence[str]) -> None:
        """One DeleteObjects request per 1,000 paths (S3's limit), instead of one each; one
        request per path on an S3-compatible store that does not implement it."""
        for i in range(0, len(paths), DELETE_BATCH):
            batch = list(paths[i:i + DELETE_BATCH])
            if self._batch_delete and len(batch) > 1:
                self._delete_batch(batch)
            else:
                super().delete_many(batch)

    def _delete_batch(self, paths: list[str]) -> None:
        request: DeleteTypeDef = {"Objects": [{"Key": self._key(p)} for p in paths], "Quiet": True}
        try:
            response = self._request(
                "DeleteObjects", "delete", paths[0],
                lambda: self._client.delete_objects(Bucket=self.bucket, Delete=request))
        except client_errors() as e:
            if error_code(e) in _NO_BATCH_DELETE:
                log.info("%s does not implement DeleteObjects (%s); deleting one object per "
                         "request", self.uri, error_code(e))
                self._batch_delete = False
                super().delete_many(paths)
                return
            raise self._error("delete", paths[0], e) from e
        failed = [err for err in response.get("Errors", []) if err.get("Code") not in S3_NOT_FOUND]
        if failed:
            first = failed[0]
            raise StorageError("delete", f"s3://{self.bucket}/{first.get('Key')}",
                               f"{len(failed)} of {len(paths)} objects were not deleted "
                               f"({first.get('Code')}: {first.get('Message')})")

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectMeta]:
        return self._list(self._key(prefix), None if start_after is None else self._key(start_after),
                          prefix)

    def _list(self, key_prefix: str, start_after: str | None, prefix: str) -> Iterator[ObjectMeta]:
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": key_prefix,
                                    "MaxKeys": self.list_page_size}
            if token is not None:
                args["ContinuationToken"] = token
            elif start_after is not None:
                args["StartAfter"] = start_after
            try:
                page = self._request("ListObjectsV2", "list", prefix,
                                     lambda a=args: self._client.list_objects_v2(**a))  # type: ignore[misc]
            except client_errors() as e:
                raise self._error("list", prefix, e) from e
            for item in page.get("Contents", []):
                yield ObjectMeta(self._rel(item["Key"]), int(item.get("Size", 0)),
                                 _ms(item.get("LastModified")), item.get("ETag"))
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")
            if not token:
                return

    def copy(self, src: str, dst: str) -> ObjectMeta:
        source = {"Bucket": self.bucket, "Key": self._key(src)}
        key = self._key(dst)
        try:
            self._request("CopyObject", "copy", dst,
                          lambda: self._client.copy_object(Bucket=self.bucket, Key=key,
                                                           CopySource=source))  # type: ignore[arg-type]
        except client_errors() as e:
            if error_code(e) in S3_NOT_FOUND:
                raise ObjectNotFoundError("copy", self._url(src), "source object does not exist") from e
            raise self._error("copy", dst, e) from e
        # CopyObject does not report the size; one HEAD does.
        return self.head(dst)

    def copy_if_absent(self, src: str, dst: str) -> ObjectMeta:
        self._require_conditional_writes("copy-if-absent", dst)
        data, _ = self._get(src, "copy-if-absent")
        return self._put_if_absent(dst, data, "copy-if-absent")

    def open_input(self, path: str) -> BinaryIO:
        return io.BytesIO(self.get(path))

    # ----------------------------------------------------------------- internals

    def _require_conditional_writes(self, op: str, path: str) -> None:
        if not self.supports_conditional_put:
            raise StorageConfigError(
                f"{op} {self._url(path)}: conditional writes to S3 are turned off "
                f"({S3_CONDITIONAL_WRITES}=false or {CONDITIONAL_PUT_ALIAS.lower()}=disabled), so "
                "this store cannot create an object exactly once; use a commit mechanism that "
                "coordinates through DynamoDB (AWS_S3_LOCKING_PROVIDER=dynamodb or "
                "conditional_put=dynamo:<table>)")

    def _holds(self, path: str, data: bytes, op: str) -> ObjectMeta | None:
        """The object's metadata if it holds exactly ``data`` (an earlier attempt of ours won)."""
        try:
            current, meta = self._get(path, op)
        except ObjectNotFoundError:
            return None
        return meta if current == data else None

    def _written(self, path: str, data: bytes, response: Mapping[str, Any]) -> ObjectMeta:
        headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        modified = _http_date_ms(headers.get("date")) or int(self._clock.time() * 1000)
        return ObjectMeta(path, len(data), modified, response.get("ETag"))

    def _request(self, api: str, op: str, path: str, call: Callable[[], T], *,
                 conditional: bool = False, attempts: _Attempts | None = None) -> T:
        """Run ``call`` (one HTTP request), retrying transient failures by the retry policy.

        ClientErrors that are answers (404, 412, 403, ...) propagate for the caller to map; a
        failure still transient after the last attempt becomes a StorageError.
        """
        attempts = attempts if attempts is not None else _Attempts()
        attempt = 0
        while True:
            attempt += 1
            self._counter.add(api)
            try:
                return call()
            except client_errors() as e:
                if not s3_retryable(e, conditional=conditional):
                    raise
                if s3_maybe_applied(e):
                    attempts.ambiguous = True
                if self._retry.exhausted(attempt):
                    raise StorageError(op, self._url(path),
                                       f"{describe_error(e)}; gave up after {attempt} attempts") from e
            except not_sent() as e:
                # The request never reached the server.
                if self._retry.exhausted(attempt):
                    raise StorageError(
                        op, self._url(path),
                        f"cannot connect to the S3 endpoint {self._endpoint()} ({e}); "
                        f"gave up after {attempt} attempts") from e
            except answer_lost() as e:
                # Closed, reset or timed out after sending: the request may have taken effect.
                attempts.ambiguous = True
                if self._retry.exhausted(attempt):
                    raise StorageError(
                        op, self._url(path),
                        f"connection to the S3 endpoint {self._endpoint()} failed ({e}); "
                        f"gave up after {attempt} attempts") from e
            except no_credentials() as e:
                raise StorageError(
                    op, self._url(path),
                    f"no usable AWS credentials ({e}): set AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY (storage options or environment) or AWS_PROFILE") from e
            except transport_errors() as e:
                raise StorageError(op, self._url(path), str(e)) from e
            self._clock.sleep(self._retry.delay(attempt, self._random))

    def _endpoint(self) -> str:
        return self.config.endpoint_url or f"the AWS default for region {self.config.region or '?'}"

    def _error(self, op: str, path: str, e: Exception) -> StorageError:
        code = error_code(e)
        url = self._url(path)
        if code == "NoSuchBucket":
            return StorageError(op, url, f"bucket {self.bucket!r} does not exist"
                                + (f" at {self.config.endpoint_url}" if self.config.endpoint_url else ""))
        if code in S3_NOT_FOUND:
            return ObjectNotFoundError(op, url, "no such object")
        if code in S3_CREDENTIALS:
            return StorageError(op, url, f"the credentials were rejected ({code}): check "
                                f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN "
                                f"(access key id {self.config.redacted()['access_key_id']})")
        if code in S3_DENIED:
            return StorageError(op, url, f"access denied ({code}): the credentials were rejected "
                                f"or are not allowed this operation on bucket {self.bucket!r}")
        return StorageError(op, url, describe_error(e))


def _ms(value: object) -> int:
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    return 0


def _http_date_ms(value: str | None) -> int | None:
    if not value:
        return None
    moment = http_date(value)
    return None if moment is None else int(moment.timestamp() * 1000)
