"""The DynamoDB side of the log store: the state the other layers build on, every request on
the log table, and the entries read.

DynamoDB throttling (``ProvisionedThroughputExceededException``, ``ThrottlingException``) is
retried with jittered exponential backoff until ``DELTA_DYNAMO_MAX_ELAPSED_REQUEST_TIME`` has
passed, then reported as a LogStoreError; a throttled request was not executed, so retrying a
conditional write is safe.  A conditional ``PutItem`` whose failed condition follows a retry
(the first attempt's answer was lost) is checked with a consistent ``GetItem``: if the entry
carries our ``tempPath``, the first attempt won.

The first DynamoDB request of a process checks the table's key schema once (``DescribeTable``),
so a missing table or a wrong schema is reported with how to fix it instead of surfacing as
endless lost races.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from deltacommit.errors import LogStoreError
from deltacommit.io.aws.config import AwsConfig, client_identity
from deltacommit.io.aws.dynamodb_admin import endpoint_of
from deltacommit.io.aws.errors import (
    CONDITION_FAILED,
    DYNAMODB_CREDENTIALS,
    DYNAMODB_DENIED,
    DYNAMODB_THROTTLED,
    TABLE_MISSING,
    client_errors,
    error_code,
    error_message,
    error_response,
    no_credentials,
    retry_attempts,
    transport_errors,
)
from deltacommit.io.aws.retry import dynamodb_throttling
from deltacommit.io.logstore import knowledge
from deltacommit.io.logstore.base import DYNAMODB_MECHANISM, LogStore, Moment
from deltacommit.io.logstore.s3_dynamodb.admin import check_key_schema, create_table_hint
from deltacommit.io.logstore.s3_dynamodb.entry import (
    ATTR_COMPLETE,
    ATTR_EXPIRE_TIME,
    ATTR_FILE_NAME,
    ATTR_TABLE_PATH,
    CommitEntry,
    entry_key,
)
from deltacommit.io.logstore.s3_dynamodb.facts import EntryFacts
from deltacommit.io.storage.base import ObjectStore
from deltacommit.io.storage.s3 import RequestCounter
from deltacommit.protocol.log.names import commit_name
from deltacommit.runtime.clock import DEFAULT_RANDOM, SYSTEM_CLOCK, Clock, RandomSource
from deltacommit.runtime.process_state import ForkSafeLock, process_wide

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["ConditionFailed", "EntryClient", "FaultHook"]

FaultHook = Callable[[str, int], None]


#: Wall-clock slack before an entry's expireTime at which TTL might already have removed it
#: (DynamoDB's clock and ours may disagree).
_EXPIRY_MARGIN_SECONDS = 300
#: How long to wait for a table still being created before reporting it.
_CREATING_WAIT_SECONDS = 20.0


#: The partition key of a table's fleet round keys is this prefix and its ``tablePath``.
FLEET_ROUNDS_PREFIX = "deltacommit-fleet-rounds:"
#: Seconds after which DynamoDB's TTL may remove a round key.
FLEET_ROUND_TTL_SECONDS = 86_400

_CHECKED: set[tuple[str, str]] = set()
_CHECKED_LOCK = ForkSafeLock()
process_wide("DynamoDB log tables checked (io.logstore.s3_dynamodb.client)", _CHECKED.clear)


class ConditionFailed(Exception):
    """A conditional write's condition did not hold; ``retried``: after a retried request;
    ``item``: the item that failed it, where the request asked for it and the service
    returned it (DynamoDB does; emulators may not)."""

    def __init__(self, retried: bool, item: Mapping[str, Any] | None = None) -> None:
        super().__init__("condition failed")
        self.retried = retried
        self.item = item


class EntryClient(LogStore):
    """The log store's DynamoDB table: its state, the requests (throttling retried, failures
    explained), the entries read, and the clock and expiry rules the checks rely on.

    The lowest layer of ``DynamoDBLogStore``; ``hook(step, version)`` is called at each name
    in ``log_store.STEPS``, ``client`` replaces the shared DynamoDB client of ``config``.
    """

    mechanism = DYNAMODB_MECHANISM

    def __init__(self, store: ObjectStore, config: AwsConfig, *,
                 client: DynamoDBClient | None = None, hook: FaultHook | None = None,
                 clock: Clock = SYSTEM_CLOCK, random: RandomSource = DEFAULT_RANDOM) -> None:
        self.store = store
        self.config = config
        self.table_name = config.dynamo_table_name
        self.table_path = config.dynamo_table_path(store.uri)
        self.ttl_seconds = config.dynamo_ttl_seconds
        self.repair_grace_ms = max(0, config.dynamo_repair_grace_ms)
        self._client = client if client is not None else config.dynamodb_client()
        self._hook = hook
        self._clock = clock
        self._random = random
        self._counter = RequestCounter()
        #: Throttled requests are retried until DELTA_DYNAMO_MAX_ELAPSED_REQUEST_TIME has passed.
        self._retry = dynamodb_throttling(config.dynamo_max_elapsed_request_time)
        # What this process has established about the table's entries (``facts``),
        # shared by its log store objects (``logstore.knowledge``): each
        # ``dc.write(uri)`` opens a new one.  Objects with their own client, hook or clock
        # (tests, tools) keep their own, since their view of time or of requests differs.
        # Keyed by what the clients resolved (``identity``): one bucket name behind two S3
        # endpoints (one of them from ``AWS_ENDPOINT_URL_S3``), or one DynamoDB table name in
        # two accounts, are two tables whose entries share nothing.
        fresh = client is None and hook is None and clock is SYSTEM_CLOCK
        where = self.identity() or ()
        self._k = (knowledge.shared(store.uri, (*where, self.table_path), EntryFacts)
                   if fresh else EntryFacts())
        self._lock = self._k.lock
        joined = self._k.joined_path
        if joined is not None:
            self.table_path = joined
        #: Entries that beat a claim of this object, by version, and when it was sent
        #: (``_put_entry``, ``read_after_loss``).
        self._taken: dict[int, tuple[CommitEntry, Moment]] = {}

    @property
    def endpoint(self) -> str:
        return endpoint_of(self._client)

    @property
    def client(self) -> DynamoDBClient:
        return self._client

    @property
    def requests(self) -> dict[str, int]:
        """DynamoDB requests made so far by API operation, retries included."""
        return self._counter.snapshot()

    def reset_requests(self) -> None:
        self._counter.reset()

    def identity(self) -> tuple[str, ...] | None:
        """The location, and the DynamoDB table as the client resolved it (endpoint, region,
        credentials).  Not the ``tablePath``, which differs between spellings of one table
        (``s3a://``, ``s3://``) until the fleet's is joined."""
        where = super().identity()
        if where is None:
            return None
        return (*where, "dynamodb", *client_identity(self._client), self.table_name)

    def _now(self) -> Moment:
        return self._clock.monotonic(), self._clock.time()

    def _knows_absent(self, version: int) -> bool:
        """Whether N.json provably did not exist recently enough that PutItem alone excludes it."""
        with self._lock:
            latest = self._k.latest
        if latest is None or latest[0] != version - 1:
            return False
        # Both clocks must agree it is recent: the monotonic one stands still while the
        # machine sleeps, the wall clock may be stepped.
        mono, wall = self._now()
        elapsed = max(mono - latest[1][0], wall - latest[1][1])
        return 0 <= elapsed < self.ttl_seconds / 2

    def _trusted(self, entry: CommitEntry) -> bool:
        """Whether no newer entry can have been removed by TTL while this one remains."""
        if entry.expire_time is None:
            return True
        return entry.expire_time > self._clock.time() + _EXPIRY_MARGIN_SECONDS

    def _within_margin(self, since: Moment) -> Moment:
        """``since`` moved back so that knowledge noted at it lasts the expiry margin, not half
        the TTL.  An entry that beat a claim, complete, does not show that it is the newest (its
        writer may have gone on); trusted, it shows that no newer entry can expire within the
        margin (every writer uses the same TTL), which is all that step 0 guards against."""
        shift = max(0.0, self.ttl_seconds / 2 - _EXPIRY_MARGIN_SECONDS)
        return since[0] - shift, since[1] - shift

    def latest_entry(self) -> CommitEntry | None:
        """The entry with the highest version (consistent read), or None."""
        response = self._call("Query", KeyConditionExpression="#p = :p",
                              ExpressionAttributeNames={"#p": ATTR_TABLE_PATH},
                              ExpressionAttributeValues={":p": {"S": self.table_path}},
                              ConsistentRead=True, ScanIndexForward=False, Limit=1)
        items = response.get("Items", [])
        return self._parse(items[0]) if items else None

    def get_entry(self, version: int) -> CommitEntry | None:
        return self._get_entry(version)

    def _get_entry(self, version: int) -> CommitEntry | None:
        response = self._call("GetItem", Key=entry_key(self.table_path, commit_name(version)),
                              ConsistentRead=True)
        item = response.get("Item")
        return self._parse(item) if item else None

    def entries(self, *, incomplete_only: bool = False) -> Iterator[CommitEntry]:
        """Every entry of this table, oldest first (consistent reads, all pages)."""
        args: dict[str, Any] = {
            "KeyConditionExpression": "#p = :p",
            "ExpressionAttributeNames": {"#p": ATTR_TABLE_PATH},
            "ExpressionAttributeValues": {":p": {"S": self.table_path}},
            "ConsistentRead": True,
        }
        if incomplete_only:
            args["FilterExpression"] = "#c = :f"
            args["ExpressionAttributeNames"]["#c"] = ATTR_COMPLETE
            args["ExpressionAttributeValues"][":f"] = {"S": "false"}
        while True:
            response = self._call("Query", **args)
            for item in response.get("Items", []):
                yield self._parse(item)
            last = response.get("LastEvaluatedKey")
            if not last:
                return
            args["ExclusiveStartKey"] = last

    def _parse(self, item: Mapping[str, Any]) -> CommitEntry:
        return CommitEntry.from_item(item, f"DynamoDB table {self.table_name}")

    def claim_fleet_round(self, version: int) -> bool:
        """The round key of fleet-wide group commit in DynamoDB (the log's S3 need not support
        conditional writes): a conditional ``PutItem`` under a partition key of its own,
        ``FLEET_ROUNDS_PREFIX`` + ``tablePath``, never the table's ``tablePath``, whose latest
        item delta-rs's and Spark's writers query.  It carries ``expireTime``, so TTL removes
        it (a day on); a hint only, as ``LogStore.claim_fleet_round`` says."""
        expire = int(self._clock.time()) + FLEET_ROUND_TTL_SECONDS
        try:
            self._call("PutItem", Item={
                ATTR_TABLE_PATH: {"S": FLEET_ROUNDS_PREFIX + self.table_path},
                ATTR_FILE_NAME: {"S": f"{version:020d}"},
                ATTR_EXPIRE_TIME: {"N": str(expire)},
            }, ConditionExpression=f"attribute_not_exists({ATTR_FILE_NAME})")
        except ConditionFailed:
            return False
        return True

    def _step(self, name: str, version: int) -> None:
        if self._hook is not None:
            self._hook(name, version)

    def _call(self, api: str, **kwargs: Any) -> dict[str, Any]:
        """One DynamoDB operation on the log table, with throttling retried by backoff.

        A failed condition raises ``ConditionFailed``; every other failure a LogStoreError
        naming the table, the endpoint and what to do.
        """
        self._check_table()
        method = getattr(self._client, _snake(api))
        start = self._clock.monotonic()
        retries = 0
        while True:
            self._counter.add(api)
            try:
                response: dict[str, Any] = method(TableName=self.table_name, **kwargs)
            except client_errors() as e:
                code = error_code(e)
                attempts = retry_attempts(e)
                self._count_retries(api, attempts)
                if code == CONDITION_FAILED:
                    item = error_response(e).get("Item")
                    raise ConditionFailed(retried=attempts > 0 or retries > 0,
                                          item=item if isinstance(item, dict) else None
                                          ) from None
                if code in DYNAMODB_THROTTLED:
                    retries += 1
                    elapsed = self._clock.monotonic() - start
                    if not self._retry.exhausted(retries, elapsed):
                        self._clock.sleep(self._retry.pause(retries, self._random, elapsed))
                        continue
                    raise LogStoreError(
                        f"{api} on DynamoDB table {self.table_name} at {self.endpoint} was throttled "
                        f"({code}) for {elapsed:.1f} s ({retries} retries); the table's capacity "
                        "is too low for this load: use PAY_PER_REQUEST billing or raise it, or "
                        "raise DELTA_DYNAMO_MAX_ELAPSED_REQUEST_TIME") from e
                raise self._error(api, e) from e
            except no_credentials() as e:
                raise LogStoreError(
                    f"{api} on DynamoDB table {self.table_name}: no usable AWS credentials ({e}); set "
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the *_DYNAMODB variants)") from e
            except transport_errors() as e:
                raise LogStoreError(f"{api} on DynamoDB table {self.table_name} at {self.endpoint} "
                                    f"failed: {e}") from e
            self._count_retries(api, retry_attempts(response))
            return response

    def _count_retries(self, api: str, attempts: int) -> None:
        for _ in range(attempts):
            self._counter.add(api)

    def _error(self, api: str, e: Exception) -> LogStoreError:
        code = error_code(e)
        message = error_message(e)
        where = f"DynamoDB table {self.table_name} at {self.endpoint}"
        if code == TABLE_MISSING:
            return LogStoreError(f"{where} does not exist (needed by AWS_S3_LOCKING_PROVIDER=dynamodb "
                                 f"for table {self.table_uri}): {create_table_hint(self.table_name)}")
        if code in DYNAMODB_CREDENTIALS:
            return LogStoreError(f"{api} on {where}: the credentials were rejected ({code}): check "
                                 "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the *_DYNAMODB "
                                 "variants)")
        if code in DYNAMODB_DENIED:
            return LogStoreError(f"{api} on {where}: access denied ({code}): the protocol needs "
                                 "dynamodb:GetItem, Query, PutItem and UpdateItem on the table")
        if code == "ValidationException":
            return LogStoreError(f"{api} on {where} was refused ({message}); the table must be keyed "
                                 f"({ATTR_TABLE_PATH} S HASH, {ATTR_FILE_NAME} S RANGE)")
        return LogStoreError(f"{api} on {where} failed: {code or 'error'}: {message}")

    def _check_table(self) -> None:
        """Once per process and table: it exists, is keyed as the protocol needs, is usable."""
        key = (self.endpoint, self.table_name)
        with _CHECKED_LOCK:
            if key in _CHECKED:
                return
        where = f"DynamoDB table {self.table_name} at {self.endpoint}"
        deadline = self._clock.monotonic() + _CREATING_WAIT_SECONDS
        while True:
            self._counter.add("DescribeTable")
            try:
                table = self._client.describe_table(TableName=self.table_name)["Table"]
            except client_errors() as e:
                if error_code(e) in DYNAMODB_DENIED:
                    # Allowed to use the table but not to describe it (delta-rs documents no
                    # DescribeTable permission): errors will surface from the operations.
                    break
                raise self._error("DescribeTable", e) from e
            except no_credentials() as e:
                raise LogStoreError(f"{where}: no usable AWS credentials ({e})") from e
            except transport_errors() as e:
                raise LogStoreError(f"{where} cannot be reached: {e}") from e
            check_key_schema(table, self.table_name, self.endpoint)
            status = table.get("TableStatus", "ACTIVE")
            if status != "CREATING":
                break
            if self._clock.monotonic() > deadline:
                raise LogStoreError(f"{where} is still being created after "
                                    f"{_CREATING_WAIT_SECONDS:.0f} s")
            self._clock.sleep(0.25)
        with _CHECKED_LOCK:
            _CHECKED.add(key)


def _snake(api: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in api).lstrip("_")
