"""object_store's DynamoCommit: conditional writes on S3 through leases in a DynamoDB table.

Before S3 had ``If-None-Match`` / ``If-Match``, the Rust object_store crate (up to 0.12) made
put-if-absent, put-if-match and copy-if-absent safe on S3 and S3-compatible stores by taking a
lease in DynamoDB first.  This module speaks that protocol exactly, so a deltacommit writer and
an object_store client configured with ``conditional_put = "dynamo:<table>"`` (for example
``obstore`` 0.7.x, or deltalake built on object_store 0.12) exclude each other on the same keys.

The lease table
    Partition key ``path`` (S): the object's key in its bucket (the bucket is not part of it);
    sort key ``etag`` (S): the ETag the operation expects, ``*`` when creating.  Numbers
    ``generation`` (a counter bumped on every reclaim), ``timeout`` (the lease length in ms,
    chosen by the writer that took it) and ``ttl`` (epoch seconds; DynamoDB's TTL deletes old
    leases, which are never released otherwise).  ``create_lease_table`` makes one.

One conditional operation on ``path`` expecting ``etag``
    1. HEAD the object: it existing (create) or having another ETag (update) is the answer,
       with no DynamoDB request at all.
    2. ``PutItem`` the lease with ``attribute_not_exists(#pk)`` (generation 0).
       - Won: run the write while the lease lasts (below).
       - Lost: the condition failure returns the holder's item.  Every ``test_interval``
         (100 ms) HEAD the object again: the holder finishing makes that check fail, which is
         how every loser normally learns the answer.  If the holder has neither finished nor
         released the path after ``timeout x max_clock_skew_rate`` (20 s x 3 by default),
         measured on this writer's clock from when it saw the lease, it is presumed dead:
         ``PutItem`` again with ``attribute_exists(#pk) AND generation = :g`` and generation
         ``g + 1``, which exactly one of several waiting writers wins.
    Leases are timed pessimistically: from just before the ``PutItem`` that took them, and for
    a holder's lease from when the conflict was reported.

Running only while the lease is valid
    A writer whose lease has expired must not write: by then another writer may have
    reclaimed the path.  So the write is not started with less than ``min_write_seconds`` of
    the lease left, no retry of a failed write is started past that point, and each S3 request
    made under the lease uses connect and read timeouts of at most half the time left, so its
    body has been sent before the lease ends and the writer stops waiting for the answer by
    then.  A writer that cannot finish in time fails with the path and the time it had; it
    never writes late.

What is left, and how it is bounded
    S3 may apply a request some time after its last byte arrived, and a request whose answer
    timed out may still have been applied.  A reclaimer waits ``timeout x max_clock_skew_rate``
    on its own clock from when it saw the lease, which began after the holder took it; so while
    clocks run at rates within ``max_clock_skew_rate`` of each other, a write sent within the
    holder's lease is applied before the reclaimer writes unless S3 sits on it for longer than
    ``timeout x (max_clock_skew_rate - 1)`` (40 s with the defaults and equal clock rates)
    after the lease ended.  That slack, not the client, is the bound.  A write whose answer is
    lost is resolved by reading the object back: holding exactly the bytes written means the
    write happened; anything else is reported as an unknown outcome.

Limitations (object_store's own)
    Only these conditional operations are guarded.  Plain puts, copies and deletes, or
    conditional writes by clients not configured with the same lease table, race with them;
    the log store built on this records the mechanism and table in the Delta table so that
    writers configured otherwise refuse to commit.  A path deleted and created again waits for
    the previous creator's lease to go stale (``timeout x max_clock_skew_rate``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from deltacommit.errors import (
    LogStoreError,
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
    StorageConfigError,
    StorageError,
)
from deltacommit.io.aws.config import AwsConfig, ConditionalPut, client_identity
from deltacommit.io.aws.dynamodb_admin import create_table, key_schema, keyed_by, wait_until_active
from deltacommit.io.aws.errors import (
    CONDITION_FAILED,
    TABLE_MISSING,
    answer_lost,
    client_errors,
    describe_error,
    error_code,
    error_message,
    error_response,
    error_status,
    not_sent,
    s3_maybe_applied,
    s3_retryable,
    transport_errors,
)
from deltacommit.io.aws.options import DEFAULT_DYNAMO_COMMIT_TIMEOUT_MS
from deltacommit.io.aws.retry import LEASED_WRITES, RetryPolicy
from deltacommit.io.storage.base import ObjectMeta, ObjectStore, PutMode
from deltacommit.io.storage.forwarding import ForwardingStore
from deltacommit.io.storage.s3 import RequestCounter, S3Store
from deltacommit.runtime.clock import DEFAULT_RANDOM, SYSTEM_CLOCK, Clock, RandomSource

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CopySourceTypeDef

T = TypeVar("T")

# --------------------------------------------------------------------------- protocol constants

#: object_store's defaults (``DynamoCommit::new``).
DEFAULT_TIMEOUT_MS = DEFAULT_DYNAMO_COMMIT_TIMEOUT_MS
DEFAULT_MAX_CLOCK_SKEW_RATE = 3
DEFAULT_TTL_SECONDS = 60 * 60
DEFAULT_TEST_INTERVAL_SECONDS = 0.1

#: Attribute names and the sort key value of a create, as object_store writes them.
ATTR_PATH = "path"
ATTR_ETAG = "etag"
ATTR_GENERATION = "generation"
ATTR_TIMEOUT = "timeout"
ATTR_TTL = "ttl"
CREATE_ETAG = "*"

CONDITION_ACQUIRE = "attribute_not_exists(#pk)"
CONDITION_RECLAIM = "attribute_exists(#pk) AND generation = :g"
_NAMES = {"#pk": ATTR_PATH}

#: Points of a guarded operation where ``hook(step, path)`` is called: the lease is held and
#: nothing is written yet; the object is written and the lease not yet left to expire.  A hook
#: that raises (or ends the process) there models a writer stopped while holding the lease.
LEASE_STEPS = ("after_lock", "after_write")

#: Below this much lease time left, no write is started: it could not be sent in time.
DEFAULT_MIN_WRITE_SECONDS = 0.1
#: Socket timeouts under a lease are one of these (the largest not above half the time left),
#: so a handful of cached S3 clients serve every deadline.
_TIMEOUT_STEPS: tuple[float, ...] = tuple(0.05 * 2**k for k in range(12))



# --------------------------------------------------------------------------- leases


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease item as one writer knows it.

    ``acquired`` is this writer's monotonic time when the lease began as far as it can tell:
    just before the ``PutItem`` that took it, or when a conflict reported another's lease.
    """

    key: str
    etag: str
    generation: int
    timeout_ms: int
    acquired: float

    @property
    def expires(self) -> float:
        """Monotonic time at which the holder must have stopped writing."""
        return self.acquired + self.timeout_ms / 1000.0


@dataclass(frozen=True, slots=True)
class _Acquired:
    lease: Lease


@dataclass(frozen=True, slots=True)
class _Conflict:
    lease: Lease


class LeaseStats(RequestCounter):
    """What the leases of one store did (counts of ``acquired``, ``reclaimed``, ``conflicts``,
    ``polls``, ``expired``), for tests, benchmarks and ``describe``."""


def request_timeout(remaining: float, min_write_seconds: float = DEFAULT_MIN_WRITE_SECONDS) -> float | None:
    """The socket timeout for an S3 request started with ``remaining`` seconds of lease left.

    None when no request may be started.  Half the time left, rounded down to a step: the
    connection and the body then fit in the lease (each bounded by the timeout), and the wait
    for the answer ends at most that much later.
    """
    if remaining < min_write_seconds:
        return None
    half = remaining / 2
    fitting = [s for s in _TIMEOUT_STEPS if s <= half]
    return fitting[-1] if fitting else None


# --------------------------------------------------------------------------- the store


class DynamoCommitStore(ForwardingStore):
    """An object store whose conditional operations are guarded by DynamoCommit leases.

    Reads, listings, plain puts, copies and deletes go straight to ``inner``; conditional puts
    (``PutMode.CREATE``, ``PutMode.update``) and ``copy_if_absent`` take a lease on the path first
    and then write with plain requests, so ``inner`` needs no conditional writes of its own.
    """

    def __init__(self, inner: ObjectStore, table_name: str, client: DynamoDBClient, *,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS,
                 max_clock_skew_rate: int = DEFAULT_MAX_CLOCK_SKEW_RATE,
                 ttl_seconds: int = DEFAULT_TTL_SECONDS,
                 test_interval: float = DEFAULT_TEST_INTERVAL_SECONDS,
                 min_write_seconds: float = DEFAULT_MIN_WRITE_SECONDS,
                 clock: Clock = SYSTEM_CLOCK, random: RandomSource = DEFAULT_RANDOM,
                 stats: LeaseStats | None = None,
                 hook: Callable[[str, str], None] | None = None) -> None:
        if not table_name:
            raise StorageConfigError("DynamoCommit needs the name of its DynamoDB lease table")
        for name, value in (("timeout_ms", timeout_ms), ("max_clock_skew_rate", max_clock_skew_rate),
                            ("ttl_seconds", ttl_seconds)):
            if int(value) != value or value <= 0:
                raise StorageConfigError(f"DynamoCommit {name} must be a positive whole number; "
                                         f"got {value!r}")
        if test_interval <= 0 or min_write_seconds < 0:
            raise StorageConfigError("DynamoCommit test_interval must be positive and "
                                     "min_write_seconds not negative")
        super().__init__(inner)
        self.supports_conditional_put = True
        self.table_name = table_name
        self.timeout_ms = int(timeout_ms)
        self.max_clock_skew_rate = int(max_clock_skew_rate)
        self.ttl_seconds = int(ttl_seconds)
        self.test_interval = test_interval
        self.min_write_seconds = min_write_seconds
        self.stats = stats if stats is not None else LeaseStats()
        #: ``hook(step, path)`` at each of ``LEASE_STEPS`` (tests stop a writer there); fixed at
        #: construction: ``with_hook`` makes a store with another.
        self.hook = hook
        self._client = client
        self._clock = clock
        self._random = random
        self._writer: _Writer = (_S3Writer(inner, clock, random, min_write_seconds)
                                 if isinstance(inner, S3Store)
                                 else _PlainWriter(inner, clock, min_write_seconds))

    @classmethod
    def for_s3(cls, inner: S3Store, setting: ConditionalPut | None = None, *,
               clock: Clock = SYSTEM_CLOCK, **kwargs: Any) -> DynamoCommitStore:
        """The store ``conditional_put = dynamo:<table>[:<timeout_ms>]`` describes.

        DynamoDB is reached with the S3 store's credentials and region at the S3 endpoint, as
        object_store does, unless ``AWS_ENDPOINT_URL_DYNAMODB`` (and the other ``*_DYNAMODB``
        options) say otherwise.
        """
        setting = setting if setting is not None else inner.config.conditional_put
        if setting.mode != "dynamo" or not setting.dynamo_table:
            raise StorageConfigError(
                f"{inner.uri}: DynamoCommit needs conditional_put=dynamo:<table>[:<timeout_ms>]; "
                f"the options say conditional_put={setting}")
        return cls(inner, setting.dynamo_table, inner.config.dynamodb_client(),
                   timeout_ms=setting.dynamo_timeout_ms, clock=clock, **kwargs)

    def identity(self) -> tuple[str, ...] | None:
        """The inner store's location, and the lease table as the client resolved it."""
        where = self.inner.identity()
        if where is None:
            return None
        return (*where, "dynamo-commit", *client_identity(self._client), self.table_name)

    def __repr__(self) -> str:
        return (f"DynamoCommitStore({self.inner!r}, table={self.table_name!r}, "
                f"timeout_ms={self.timeout_ms})")

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def stale_after(self) -> float:
        """Seconds after seeing another's lease before it may be reclaimed."""
        return self.timeout_ms / 1000.0 * self.max_clock_skew_rate

    def lease_key(self, path: str) -> str:
        """The ``path`` attribute of the lease guarding ``path``: the key in its bucket."""
        if isinstance(self.inner, S3Store):
            return f"{self.inner.prefix}/{path}" if self.inner.prefix else path
        return path

    def child(self, prefix: str) -> DynamoCommitStore:
        return self._like(self.inner.child(prefix), self.hook)

    def with_hook(self, hook: Callable[[str, str], None] | None) -> DynamoCommitStore:
        """This store (same location, lease table, settings and statistics) calling ``hook``."""
        return self._like(self.inner, hook)

    def _like(self, inner: ObjectStore, hook: Callable[[str, str], None] | None) -> DynamoCommitStore:
        return DynamoCommitStore(
            inner, self.table_name, self._client, timeout_ms=self.timeout_ms,
            max_clock_skew_rate=self.max_clock_skew_rate, ttl_seconds=self.ttl_seconds,
            test_interval=self.test_interval, min_write_seconds=self.min_write_seconds,
            clock=self._clock, random=self._random, stats=self.stats, hook=hook)

    # ----------------------------------------------------------------- guarded operations

    def put(self, path: str, data: bytes, *, mode: PutMode = PutMode.OVERWRITE) -> ObjectMeta:
        if not mode.conditional:
            return self.inner.put(path, data)
        op = mode.operation
        if mode.kind == "update" and not mode.etag:
            raise PreconditionFailedError(op, self._url(path), "an ETag to match is required")
        return self._conditional_op(op, path, mode.etag,
                                    lambda lease: self._writer.put(op, path, data, lease))

    def delete_many(self, paths: Sequence[str]) -> None:
        # Deletes need no lease: the inner store's batches (DeleteObjects), not one each.
        self.inner.delete_many(paths)

    def copy_if_absent(self, src: str, dst: str) -> ObjectMeta:
        op = "copy-if-absent"
        return self._conditional_op(op, dst, None,
                                    lambda lease: self._writer.copy(op, src, dst, lease))

    def _conditional_op(self, op: str, path: str, etag: str | None,
                        write: Callable[[Lease], ObjectMeta]) -> ObjectMeta:
        key = self.lease_key(path)
        self._check_precondition(op, path, etag)
        checked = self._clock.monotonic()
        previous: Lease | None = None
        while True:
            result = self._try_lock(op, path, key, etag, previous)
            if isinstance(result, _Acquired):
                lease = result.lease
                if lease.acquired - checked > lease.timeout_ms / 1000.0:
                    # The HEAD is older than a lease: a lease taken and left to expire (or removed
                    # by TTL) in between could hide a write.  Holding the lease, one more HEAD is
                    # authoritative for every guarded writer.
                    self._check_precondition(op, path, etag)
                self._step("after_lock", path)
                meta = write(lease)
                self._step("after_write", path)
                return meta
            conflict = result.lease
            self.stats.add("conflicts")
            previous = self._wait_for(op, path, etag, conflict)
            checked = self._clock.monotonic()

    def _step(self, name: str, path: str) -> None:
        if self.hook is not None:
            self.hook(name, path)

    def _wait_for(self, op: str, path: str, etag: str | None, conflict: Lease) -> Lease:
        """Poll the precondition until it fails (raised) or ``conflict`` is stale (returned)."""
        stale_after = conflict.timeout_ms / 1000.0 * self.max_clock_skew_rate
        first = True
        while True:
            if not first:
                self._clock.sleep(self.test_interval)
            first = False
            self.stats.add("polls")
            self._check_precondition(op, path, etag)
            if self._clock.monotonic() - conflict.acquired > stale_after:
                return conflict

    def _check_precondition(self, op: str, path: str, etag: str | None) -> None:
        try:
            meta = self.inner.head(path)
        except ObjectNotFoundError:
            if etag is None:
                return
            raise PreconditionFailedError(op, self._url(path), "object does not exist") from None
        if etag is None:
            raise ObjectExistsError(op, self._url(path), "object already exists")
        if meta.etag != etag:
            raise PreconditionFailedError(
                op, self._url(path), f"the object's ETag is {meta.etag}, not {etag}")

    # ----------------------------------------------------------------- DynamoDB

    def _try_lock(self, op: str, path: str, key: str, etag: str | None,
                  previous: Lease | None) -> _Acquired | _Conflict:
        sort_key = CREATE_ETAG if etag is None else etag
        generation = 0 if previous is None else previous.generation + 1
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "Item": {
                ATTR_PATH: {"S": key},
                ATTR_ETAG: {"S": sort_key},
                ATTR_GENERATION: {"N": str(generation)},
                ATTR_TIMEOUT: {"N": str(self.timeout_ms)},
                ATTR_TTL: {"N": str(int(self._clock.time()) + self.ttl_seconds)},
            },
            "ConditionExpression": CONDITION_ACQUIRE if previous is None else CONDITION_RECLAIM,
            "ExpressionAttributeNames": _NAMES,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if previous is not None:
            request["ExpressionAttributeValues"] = {":g": {"N": str(previous.generation)}}
        while True:
            acquired = self._clock.monotonic()
            try:
                self._client.put_item(**request)
            except client_errors() as e:
                if error_code(e) != CONDITION_FAILED:
                    raise self._dynamodb_error(op, path, "PutItem", e) from e
                returned: Any = error_response(e).get("Item")
                item = returned or self._read_lease(op, path, key, sort_key)
                if item is None:
                    # Gone between our request and the read (TTL, or deleted by hand): take it
                    # afresh.
                    request["ConditionExpression"] = CONDITION_ACQUIRE
                    request.pop("ExpressionAttributeValues", None)
                    request["Item"][ATTR_GENERATION] = {"N": "0"}
                    continue
                return _Conflict(self._lease_from(op, path, key, sort_key, item))
            except transport_errors() as e:
                raise LogStoreError(
                    f"{op} {self._url(path)}: DynamoDB PutItem on lease table {self.table_name!r} "
                    f"failed: {e}") from e
            self.stats.add("acquired" if previous is None else "reclaimed")
            return _Acquired(Lease(key, sort_key, int(request["Item"][ATTR_GENERATION]["N"]),
                                   self.timeout_ms, acquired))

    def _read_lease(self, op: str, path: str, key: str, sort_key: str) -> Mapping[str, Any] | None:
        """The current lease item, for DynamoDB implementations that do not return it with a
        failed condition (``ReturnValuesOnConditionCheckFailure`` is from 2023)."""
        try:
            response = self._client.get_item(
                TableName=self.table_name, ConsistentRead=True,
                Key={ATTR_PATH: {"S": key}, ATTR_ETAG: {"S": sort_key}})
        except client_errors() as e:
            raise self._dynamodb_error(op, path, "GetItem", e) from e
        except transport_errors() as e:
            raise LogStoreError(f"{op} {self._url(path)}: DynamoDB GetItem on lease table "
                                f"{self.table_name!r} failed: {e}") from e
        return response.get("Item")

    def _lease_from(self, op: str, path: str, key: str, sort_key: str,
                    item: Mapping[str, Any]) -> Lease:
        try:
            generation = int(item[ATTR_GENERATION]["N"])
            timeout_ms = int(item[ATTR_TIMEOUT]["N"])
        except (KeyError, TypeError, ValueError):
            raise LogStoreError(
                f"{op} {self._url(path)}: the lease item (path={key!r}, etag={sort_key!r}) in "
                f"DynamoDB table {self.table_name!r} has no numeric generation and timeout: "
                f"{dict(item)!r}; it was not written by a DynamoCommit client") from None
        return Lease(key, sort_key, generation, timeout_ms, self._clock.monotonic())

    def _dynamodb_error(self, op: str, path: str, call: str, e: Exception) -> LogStoreError:
        code = error_code(e)
        if code == TABLE_MISSING:
            return LogStoreError(
                f"{op} {self._url(path)}: the DynamoDB lease table {self.table_name!r} does not "
                f"exist; create it with `deltacommit dynamodb create-table --schema "
                f"dynamo-commit {self.table_name}` (key path HASH, etag RANGE; TTL on ttl)")
        message = error_message(e)
        return LogStoreError(f"{op} {self._url(path)}: DynamoDB {call} on lease table "
                             f"{self.table_name!r} failed: {code or 'error'}"
                             + (f": {message}" if message else ""))

    def _url(self, path: str) -> str:
        return f"{self.uri}/{path}"

    # ----------------------------------------------------------------- for tests and tools

    def take_lease(self, path: str, etag: str | None = None) -> Lease | None:
        """Take the lease on ``path`` and write nothing (None if another holds it).

        What a writer that dies right after locking leaves behind; used to show that others
        overtake it only once the lease is stale.
        """
        result = self._try_lock("take-lease", path, self.lease_key(path), etag, None)
        return result.lease if isinstance(result, _Acquired) else None


# --------------------------------------------------------------------------- writing under a lease


class _Writer:
    """Writes made while holding a lease: never started late, never waiting past it."""

    def __init__(self, inner: ObjectStore, clock: Clock, min_write_seconds: float) -> None:
        self.inner = inner
        self.clock = clock
        self.min_write_seconds = min_write_seconds

    def put(self, op: str, path: str, data: bytes, lease: Lease) -> ObjectMeta:
        raise NotImplementedError

    def copy(self, op: str, src: str, dst: str, lease: Lease) -> ObjectMeta:
        raise NotImplementedError

    def _remaining(self, lease: Lease) -> float:
        return lease.expires - self.clock.monotonic()

    def _expired(self, op: str, path: str, lease: Lease, remaining: float, what: str) -> StorageError:
        return StorageError(
            op, f"{self.inner.uri}/{path}",
            f"{what} with {max(remaining, 0.0) * 1000:.0f} ms of its {lease.timeout_ms} ms "
            f"DynamoDB lease (generation {lease.generation}) left, less than the "
            f"{self.min_write_seconds * 1000:.0f} ms a write needs; refusing to write after the "
            "lease could have been reclaimed by another writer (nothing was written)")


class _PlainWriter(_Writer):
    """Any store: one call, started only with enough lease left (in-process stores in tests)."""

    def put(self, op: str, path: str, data: bytes, lease: Lease) -> ObjectMeta:
        self._check(op, path, lease)
        return self.inner.put(path, data)

    def copy(self, op: str, src: str, dst: str, lease: Lease) -> ObjectMeta:
        self._check(op, dst, lease)
        return self.inner.copy(src, dst)

    def _check(self, op: str, path: str, lease: Lease) -> None:
        remaining = self._remaining(lease)
        if remaining < self.min_write_seconds:
            raise self._expired(op, path, lease, remaining, "the write was due")


class _S3Writer(_Writer):
    """S3 requests whose socket timeouts are bounded by the lease time left.

    Plain ``PutObject`` / ``CopyObject``: the lease, not S3, provides the condition, so this
    works on stores without conditional writes.  Transient failures are retried while the lease
    allows; a write whose answer was lost is resolved by reading the object back.
    """

    inner: S3Store

    def __init__(self, inner: S3Store, clock: Clock, random: RandomSource,
                 min_write_seconds: float, retry: RetryPolicy = LEASED_WRITES) -> None:
        super().__init__(inner, clock, min_write_seconds)
        self.random = random
        self.retry = retry

    def _key(self, path: str) -> str:
        prefix = self.inner.prefix
        return f"{prefix}/{path}" if prefix else path

    def put(self, op: str, path: str, data: bytes, lease: Lease) -> ObjectMeta:
        bucket, key = self.inner.bucket, self._key(path)
        response = self._under_lease(
            op, "PutObject", path, lease, lambda c: c.put_object(Bucket=bucket, Key=key, Body=data),
            resolve=lambda: self._holds(path, data))
        if isinstance(response, ObjectMeta):
            return response
        return ObjectMeta(path, len(data), int(self.clock.time() * 1000), response.get("ETag"))

    def copy(self, op: str, src: str, dst: str, lease: Lease) -> ObjectMeta:
        source: CopySourceTypeDef = {"Bucket": self.inner.bucket, "Key": self._key(src)}
        bucket, key = self.inner.bucket, self._key(dst)
        self._under_lease(
            op, "CopyObject", dst, lease,
            lambda c: c.copy_object(Bucket=bucket, Key=key, CopySource=source),
            resolve=lambda: self._same_as(src, dst))
        return self.inner.head(dst)

    def _under_lease(self, op: str, api: str, path: str, lease: Lease,
                     call: Callable[[S3Client], T],
                     resolve: Callable[[], ObjectMeta | None]) -> T | ObjectMeta:
        attempt = 0
        maybe_applied = False
        last: Exception | None = None
        while True:
            remaining = self._remaining(lease)
            timeout = request_timeout(remaining, self.min_write_seconds)
            if timeout is None:
                if last is None:
                    raise self._expired(op, path, lease, remaining, "the write was due")
                if maybe_applied:
                    found = resolve()
                    if found is not None:
                        return found
                    raise StorageError(
                        op, f"{self.inner.uri}/{path}",
                        f"the write under the DynamoDB lease (generation {lease.generation}) did "
                        f"not complete within the lease ({last}); the object does not hold the "
                        "bytes written, but a request S3 received may still be applied: the "
                        "outcome is unknown") from last
                raise self._expired(op, path, lease, remaining,
                                    f"the write failed ({last}) and could not be retried") from last
            attempt += 1
            self.inner.count_request(api)
            try:
                return call(bounded_s3_client(self.inner.config, timeout))
            except client_errors() as e:
                if error_code(e) == "NoSuchKey" or error_status(e) == 404:
                    raise ObjectNotFoundError(op, f"{self.inner.uri}/{path}",
                                              "no such object (or source object)") from e
                if not s3_retryable(e):
                    raise StorageError(op, f"{self.inner.uri}/{path}", describe_error(e)) from e
                maybe_applied = maybe_applied or s3_maybe_applied(e)
                last = e
            except not_sent() as e:
                last = e  # never reached the server
            except answer_lost() as e:
                maybe_applied = True  # sent, answer lost: it may have been applied
                last = e
            if maybe_applied:
                found = resolve()
                if found is not None:
                    return found
            # The lease, not the policy, ends the retries: a pause that would leave too little
            # of it for the next write is not taken (that write then finds the lease over).
            delay = self.retry.delay(attempt, self.random)
            if self._remaining(lease) - delay >= self.min_write_seconds:
                self.clock.sleep(delay)

    def _holds(self, path: str, data: bytes) -> ObjectMeta | None:
        try:
            if self.inner.get(path) == data:
                return self.inner.head(path)
        except ObjectNotFoundError:
            return None
        return None

    def _same_as(self, src: str, dst: str) -> ObjectMeta | None:
        try:
            return self._holds(dst, self.inner.get(src))
        except ObjectNotFoundError:
            return None




def bounded_s3_client(config: AwsConfig, timeout: float) -> S3Client:
    """An S3 client like ``config.s3_client()`` whose connect and read timeouts are ``timeout``
    (capped at the usual ones); cached per step of ``request_timeout``."""
    return config.s3_client(timeout=timeout)


# --------------------------------------------------------------------------- the lease table


@dataclass(frozen=True, slots=True)
class LeaseTableStatus:
    """What ``create_lease_table`` found or did."""

    table: str
    created: bool
    #: False when TTL is not on attribute ``ttl``: the DynamoDB implementation has none
    #: (dynalite) or the table's TTL is on another attribute.  Old leases then stay until removed
    #: some other way, which costs storage, not correctness.
    ttl_enabled: bool

    def describe(self) -> str:
        what = "created" if self.created else "already exists with the DynamoCommit key schema"
        ttl = ("TTL enabled on attribute ttl" if self.ttl_enabled
               else "TTL is not enabled on attribute ttl (unsupported by this DynamoDB, or on "
                    "another attribute), so old leases are not removed")
        return f"lease table {self.table}: {what}; {ttl}"


def create_lease_table(client: DynamoDBClient, name: str, *,
                       billing_mode: str = "PAY_PER_REQUEST", clock: Clock = SYSTEM_CLOCK,
                       wait_seconds: float = 60.0) -> LeaseTableStatus:
    """Create the DynamoCommit lease table (as object_store documents it) and enable its TTL.

    An existing table is accepted if its key schema is ``path`` HASH, ``etag`` RANGE (both
    strings); any other schema is an error, since leases written to it would not exclude
    object_store clients.  Waits until the table is ACTIVE, because the first commit follows.
    """
    if not name:
        raise LogStoreError("a lease table needs a name")
    what = f"DynamoDB lease table {name!r}"
    created = create_table(client, name, hash_key=ATTR_PATH, range_key=ATTR_ETAG,
                           billing_mode=billing_mode, what=what)
    table = wait_until_active(client, name, what=what, clock=clock, timeout=wait_seconds)
    if not keyed_by(table, ATTR_PATH, ATTR_ETAG):
        keys, types = key_schema(table)
        raise LogStoreError(
            f"DynamoDB table {name!r} exists but is not a DynamoCommit lease table: its key "
            f"schema is {sorted(keys.items())} with types {types}, expected path (S) HASH and "
            "etag (S) RANGE")
    return LeaseTableStatus(name, created, _enable_ttl(client, name))


def _enable_ttl(client: DynamoDBClient, name: str) -> bool:
    try:
        current = client.describe_time_to_live(TableName=name).get("TimeToLiveDescription", {})
        if current.get("TimeToLiveStatus") in ("ENABLED", "ENABLING"):
            return current.get("AttributeName") == ATTR_TTL
        client.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": ATTR_TTL})
    except client_errors() as e:
        if error_code(e) in ("UnknownOperationException", "UnrecognizedClientException",
                             "NotImplementedError"):
            return False
        raise LogStoreError(f"cannot enable TTL on attribute {ATTR_TTL!r} of DynamoDB lease "
                            f"table {name!r}: {describe_error(e)}") from e
    return True
