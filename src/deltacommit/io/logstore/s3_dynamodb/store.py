"""Spark's S3DynamoDBLogStore protocol: one DynamoDB item per commit decides who owns ``N.json``.

S3 could not create an object exactly once until 2024, so Delta on Spark (and delta-rs up to
1.6.0) let a DynamoDB table decide instead.  Spark fleets still write this way, and a writer
joins them only by speaking the protocol exactly: the same items, the same conditions, the same
repair duty.  Items (``BaseExternalLogStore`` / ``S3DynamoDBLogStore`` in delta-io/delta):

=============  ====  =========================================================================
``tablePath``  S     HASH key: the table URI without a trailing slash (``s3a://`` when shared
                     with Spark, see ``DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME``)
``fileName``   S     RANGE key: ``<20-digit version>.json``
``tempPath``   S     ``.tmp/<fileName>.<uuid>``, relative to ``_delta_log``
``complete``   S     the strings ``"true"`` / ``"false"``
``expireTime`` N     epoch seconds, only on complete entries (TTL attribute; default now + 1 day)
=============  ====  =========================================================================

Writing version N: (0) N.json must not exist; (1) entry N-1, if incomplete, is repaired, and
N-1.json must exist (version 0: entries of a deleted table must not linger); (2) write the temp
file ``T(N)``, then ``PutItem`` the entry with ``attribute_not_exists(fileName)``: the one
linearisation point, a failed condition means another writer owns N; (3) copy ``T(N)`` to
``N.json`` without ever replacing an object; (4) mark the entry complete.  Once the entry
exists the commit has happened: a failure in (3) or (4) is logged and left to the repair that
readers (the latest entry, on every listing and refresh) and the next writer (entry N-1) do.
Only the latest entry can be incomplete, because every writer of N+1 first completes N.

Marking complete is an ``UpdateItem`` with the condition ``complete = "false"`` (as delta-rs
does) rather than Spark's unconditional ``PutItem`` of the whole item: it can only flip an
incomplete entry, so it never resurrects an entry that TTL or ``dynamodb repair`` removed,
never rewrites ``tempPath`` from a repairer's stale copy, and never pushes ``expireTime`` of a
completed entry further out; concurrent repairers all succeed (the losers' failed condition
means "already complete").  Spark and delta-rs read the result identically.

Requests per commit, uncontended writer that already knows the table (the usual case after its
first commit or a refresh): **5** — PUT ``T(N)``, conditional ``PutItem``, conditional PUT
``N.json`` (the bytes are in memory, so no GET of ``T(N)``), DELETE ``T(N)``, ``UpdateItem``.
The first commit of a process to a table adds the fleet-key Queries (one per ``tablePath``
spelling, see ``join_fleet``) and the PUT of ``DYNAMODB_MARKER``, never more: the log store
objects of one table in a process share what they establish (``logstore.knowledge``).  Spark makes about
9 (HEAD N, GetItem N-1, HEAD N-1, PUT T, PutItem, GET T, HEAD + PUT N, PutItem).  The checks of
steps 0 and 1 are skipped only when this process has already established them, from its own
requests (never on the word of another process, such as a host turn's record):

* Step 1 (``GetItem`` N-1, HEAD N-1.json) is skipped when this process saw entry N-1 complete
  and N-1.json present: it completed N-1 itself, or repaired it, or a consistent ``Query`` of
  the latest entry found it complete and the file was then read or listed.  Completion never
  reverts, so that knowledge does not age.  Where it runs, the HEAD is spared when this
  process has read N-1.json, and the consistent read of entry N-1 establishes what step 0
  needs (``_ensure_previous``): after another process's commit, a writer holding the host's
  turn checks both with a ``GetItem`` sent beside its temp file and the GET it read N-1 with.
* Step 0 (HEAD N.json) guards against an N.json whose entry TTL has already deleted.  It is
  skipped when this process established, less than half the entry TTL ago, that N-1 was the
  latest version (a listing, a read miss, a consistent Query of an unexpired latest entry, or
  its own successful ``PutItem`` of N-1, which proves N-1.json and so N.json absent at that
  moment, or an incomplete entry N-1 returned by its own failed claim of N-1: only the latest
  entry can be incomplete).  Any N.json created after that moment was created through an entry
  that lives at least the TTL past its creation, so the conditional ``PutItem`` still sees it.
  This assumes, as Spark's documentation does, that every writer uses the same (or a longer)
  TTL.  A *complete* entry N-1 returned by a failed claim shows less: its writer may have gone
  on to N, but no entry newer than N-1 can expire while N-1's is trusted, so the HEAD is skipped
  only within the expiry margin (``_within_margin``).  An N.json
  found with no entry for it, younger than half the TTL, was written by another mechanism:
  the write is refused (``_check_explained``) rather than retried as a lost race, because the
  catch-up follows the entries and would never reach that version.

A lost race costs the PUT of ``T(N)`` and the failed ``PutItem``; the commit loop then reads
the winners with one consistent ``Query`` (the latest entry, repaired if incomplete: its temp
file is read anyway, so repairing costs one PUT and one ``UpdateItem`` more) and one GET per
missed commit.  Repairing at once races the winner's own copy, but deletes the temp file of a
copied entry early, which rescues a delta-rs repair of it already under way (see below).
Leaving the entry to its writer instead (checked in step 1 of the retry) saved requests but,
in mixed-fleet torture runs beside Spark's writers (whose temp files are never deleted), gave
deltalake writers more "version already exists" failures.  The lost claim's temp file is named
by no entry: a writer deletes its own in batches (``TEMP_SWEEP_BATCH`` per DeleteObjects).

Temp files: unlike Spark, a writer deletes its own ``T(N)`` right after N.json holds the commit,
sending the delete together with step 4 (one round trip for both, not one after the other).
delta-rs (deltalake up to 1.6.0, ``crates/aws/src/logstore/dynamodb_logstore.rs``
``repair_entry`` at python-v1.6.0) repairs an
incomplete entry by *moving* the temp file (``rename_if_not_exists``: copy if N.json is absent,
then delete) and reads an N.json that already exists as "version N already exists"; finding the
temp file gone (``NotFound``) it completes the entry as already moved.  So a kept temp file made
every delta-rs reader or writer that met our entry between copy and completion fail, and the
deletion makes them succeed.  Deleting it only after the completion (so that it could wait for
a batch, as lost claims' do) fails them: the repair retries its move up to three times without
reading the entry again, so the temp file's disappearance rescues a repair already under way
and the completion does not (``tests/compat/test_mixed_fleet_errors.py`` fails that way).  It
is safe for Spark: ``fixDeltaLog`` copies the temp file only
while N.json does not exist (``if (!copied && !fs.exists(targetPath))``, then the complete
``PutItem``; delta-io/delta ``storage/src/main/java/io/delta/storage/BaseExternalLogStore.java``
at bb1057f4367f555b01e299fd1690d85aafc0ac4c, used by ``storage-s3-dynamodb/src/main/java/io/
delta/storage/S3DynamoDBLogStore.java``), and since the temp file goes only once N.json exists,
a Spark repairer never needs it.  Our own repair of an entry whose temp file is gone and whose
N.json exists completes it.  Temp files of crashed writers, of lost claims a process did not
live to sweep, and all of Spark's remain under
``_delta_log/.tmp/``: ``cleanup`` deletes those older than the checkpoint it keeps, or expire
them with an S3 lifecycle rule.

The reverse: an entry of delta-rs's kind (``_commit_<uuid>.json.tmp``) is repaired by moving
too (its temp file is deleted once N.json holds it), and only after its writer had
``DELTACOMMIT_DYNAMO_REPAIR_GRACE_MS`` (measured by the injectable clock from when this log store
first saw the entry) to move it itself; creating N.json under a live delta-rs writer makes it
take its own commit for a lost race and commit the same actions again.  A writer catching up
after a lost race reads a fresh delta-rs entry's content from its temp file without copying it.

Only temp names the protocol's writers create are ever acted on: ``.tmp/<N>.json.<uuid>`` for
entry N (Spark, deltacommit) and ``_commit_<uuid>.json.tmp`` (delta-rs).  An incomplete entry
naming anything else (a commit file, ``_last_checkpoint``, a checkpoint, another version's temp
file) is corrupt: reported with an error, never copied, never deleted.

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

import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from deltacommit.errors import (
    CoordinationMismatchError,
    CorruptLogError,
    LogStoreError,
    ObjectExistsError,
    ObjectNotFoundError,
    VersionExistsError,
)
from deltacommit.io.aws.config import AwsConfig, client_identity
from deltacommit.io.aws.dynamodb_admin import (
    admin_error,
    create_table,
    endpoint_of,
    key_schema,
    keyed_by,
    wait_until_active,
)
from deltacommit.io.aws.errors import (
    CONDITION_FAILED,
    DYNAMODB_CREDENTIALS,
    DYNAMODB_DENIED,
    DYNAMODB_THROTTLED,
    NO_CREDENTIALS,
    TABLE_MISSING,
    error_code,
    error_message,
    retry_attempts,
)
from deltacommit.io.aws.options import DYNAMO_TABLE_PATH_SCHEME as DYNAMO_TABLE_PATH_SCHEME_OPTION
from deltacommit.io.aws.resolve import resolve_aws_config
from deltacommit.io.aws.retry import dynamodb_throttling
from deltacommit.io.logstore import knowledge
from deltacommit.io.logstore.base import (
    COORDINATION_KEY,
    DYNAMODB_MARKER,
    DYNAMODB_MECHANISM,
    Baton,
    LogStore,
    Moment,
)
from deltacommit.io.storage import background
from deltacommit.io.storage.base import ObjectMeta, ObjectStore
from deltacommit.io.storage.s3 import RequestCounter
from deltacommit.protocol.json_values import loads
from deltacommit.protocol.log.names import LOG_DIR, LogFile, commit_name, commit_path
from deltacommit.runtime.clock import DEFAULT_RANDOM, SYSTEM_CLOCK, Clock, RandomSource

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

log = logging.getLogger(__name__)

ATTR_TABLE_PATH = "tablePath"
ATTR_FILE_NAME = "fileName"
ATTR_TEMP_PATH = "tempPath"
ATTR_COMPLETE = "complete"
ATTR_EXPIRE_TIME = "expireTime"

#: Configuration keys a table created through this log store records, beside
#: ``deltacommit.coordination = dynamodb``: a writer whose DynamoDB table or ``tablePath``
#: differs would not be excluded by this one, so it refuses to commit.
TABLE_NAME_KEY = f"{COORDINATION_KEY}.dynamodbTable"
TABLE_PATH_KEY = f"{COORDINATION_KEY}.tablePath"

#: Named points of the commit and repair paths where ``hook`` is called, in order
#: (``after_hand_on`` only when the commit loop holds the host's turn, ``engine.host_turn``).
#: A hook that raises (or ends the process) there models a writer stopped at that point.
STEPS = ("after_write_temp", "after_put_entry", "after_copy", "after_hand_on", "after_complete",
         "repair_after_copy", "repair_after_complete")

FaultHook = Callable[[str, int], None]

_COMMIT_NAME = re.compile(r"^\d{20}\.json$")
#: Wall-clock slack before an entry's expireTime at which TTL might already have removed it
#: (DynamoDB's clock and ours may disagree).
_EXPIRY_MARGIN_SECONDS = 300
#: How long to wait for a table still being created before reporting it.
_CREATING_WAIT_SECONDS = 20.0


# --------------------------------------------------------------------------- entries


@dataclass(frozen=True, slots=True)
class CommitEntry:
    """One item of the protocol (Spark's ``ExternalCommitEntry``)."""

    table_path: str
    file_name: str
    temp_path: str
    complete: bool
    expire_time: int | None = None

    @property
    def version(self) -> int:
        return int(self.file_name.split(".", 1)[0])

    @property
    def temp_key(self) -> str:
        """The temp file's path relative to the table root."""
        return f"{LOG_DIR}/{self.temp_path}"

    def to_item(self) -> dict[str, Any]:
        item: dict[str, Any] = {
            ATTR_TABLE_PATH: {"S": self.table_path},
            ATTR_FILE_NAME: {"S": self.file_name},
            ATTR_TEMP_PATH: {"S": self.temp_path},
            ATTR_COMPLETE: {"S": "true" if self.complete else "false"},
        }
        if self.expire_time is not None:
            item[ATTR_EXPIRE_TIME] = {"N": str(self.expire_time)}
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Any], where: str) -> CommitEntry:
        """Parse an item; LogStoreError naming it if it is not a protocol entry."""
        try:
            table_path = item[ATTR_TABLE_PATH]["S"]
            file_name = item[ATTR_FILE_NAME]["S"]
            temp_path = item[ATTR_TEMP_PATH]["S"]
            complete = item[ATTR_COMPLETE]["S"]
            expire = item.get(ATTR_EXPIRE_TIME)
            expire_time = None if expire is None else int(float(expire["N"]))
        except (KeyError, TypeError, ValueError) as e:
            raise LogStoreError(
                f"{where}: item {_short_item(item)} is not an S3DynamoDBLogStore entry "
                f"(expected string attributes {ATTR_TABLE_PATH}, {ATTR_FILE_NAME}, "
                f"{ATTR_TEMP_PATH}, {ATTR_COMPLETE} and a number {ATTR_EXPIRE_TIME}; {e!r})") from None
        if not _COMMIT_NAME.match(file_name):
            raise LogStoreError(f"{where}: entry {table_path} / {file_name} does not name a "
                                "commit file (expected <20-digit version>.json)")
        if complete not in ("true", "false"):
            raise LogStoreError(f"{where}: entry {table_path} / {file_name} has "
                                f"{ATTR_COMPLETE}={complete!r}; expected the string true or false")
        if temp_path.startswith("/") or "://" in temp_path or ".." in temp_path.split("/"):
            raise LogStoreError(f"{where}: entry {table_path} / {file_name} has {ATTR_TEMP_PATH}="
                                f"{temp_path!r}; expected a path relative to _delta_log")
        if complete == "false" and not _is_temp_name(temp_path, file_name):
            # Repair copies the temp file to N.json and, for delta-rs's names, deletes it: a
            # tempPath naming anything else (a commit, _last_checkpoint, a checkpoint) would
            # copy or delete a committed file.  Never acted on; reported instead.
            raise LogStoreError(
                f"{where}: incomplete entry {table_path} / {file_name} has {ATTR_TEMP_PATH}="
                f"{temp_path!r}, which is not a temp file name Spark (.tmp/{file_name}.<uuid>) "
                "or delta-rs (_commit_<uuid>.json.tmp) writes; the entry is corrupt and nothing "
                "was copied or deleted. Inspect it, then delete the item if the commit is not "
                "needed")
        return cls(table_path, file_name, temp_path, complete == "true", expire_time)


def _short_item(item: Mapping[str, Any]) -> str:
    text = repr(dict(item))
    return text if len(text) <= 300 else text[:300] + "…"


def _key(table_path: str, file_name: str) -> dict[str, Any]:
    return {ATTR_TABLE_PATH: {"S": table_path}, ATTR_FILE_NAME: {"S": file_name}}


class _Unrecoverable(LogStoreError):
    """An incomplete entry whose temp file and commit file are both gone."""


@dataclass(eq=False)
class _Knowledge:
    """What a process has established about one table's entries (see the module docstring)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Every entry <= good_upto is complete and its commit file exists.
    good_upto: int = -1
    #: Recent versions whose commit file this process read (``_READ_KEPT`` at most).
    read: set[int] = field(default_factory=set)
    #: latest[0] was the newest version at the moment latest[1].
    latest: tuple[int, Moment] | None = None
    #: When a moving writer's incomplete entry was first seen (by tempPath), while waited for.
    first_seen: dict[str, float] = field(default_factory=dict)
    #: The tablePath spellings found in use at first use (see ``join_fleet``); None before.
    fleet_keys: dict[str, int] | None = None
    #: The spelling joined, where it differs from the configured one.
    joined_path: str | None = None
    mechanism_checked: bool = False
    #: ``DYNAMODB_MARKER`` is written.
    marked: bool = False
    #: Temp files of claims lost to another writer (no entry names them), deleted together
    #: (``_sweep_temps``), and when the oldest began to wait.
    spent: list[str] = field(default_factory=list)
    spent_since: float = 0.0


class _ConditionFailed(Exception):
    """A conditional write's condition did not hold; ``retried``: after a retried request;
    ``item``: the item that failed it, where the request asked for it and the service
    returned it (DynamoDB does; emulators may not)."""

    def __init__(self, retried: bool, item: Mapping[str, Any] | None = None) -> None:
        super().__init__("condition failed")
        self.retried = retried
        self.item = item


# --------------------------------------------------------------------------- table checks


def create_table_hint(table_name: str) -> str:
    return (f"create it with `deltacommit dynamodb create-table --table-name {table_name}` "
            "(PAY_PER_REQUEST, TTL on expireTime), or as Spark's documentation describes: "
            f"aws dynamodb create-table --table-name {table_name} --attribute-definitions "
            "AttributeName=tablePath,AttributeType=S AttributeName=fileName,AttributeType=S "
            "--key-schema AttributeName=tablePath,KeyType=HASH AttributeName=fileName,KeyType=RANGE "
            "--billing-mode PAY_PER_REQUEST")


def check_key_schema(description: Mapping[str, Any], table_name: str, endpoint: str) -> None:
    """LogStoreError unless the table is keyed (tablePath S HASH, fileName S RANGE)."""
    if not keyed_by(description, ATTR_TABLE_PATH, ATTR_FILE_NAME):
        keys, types = key_schema(description)
        found = ", ".join(f"{name} {types.get(name, '?')} {kind}" for name, kind in keys.items())
        raise LogStoreError(
            f"DynamoDB table {table_name} at {endpoint} has the key schema ({found}), but Spark's "
            f"S3DynamoDBLogStore protocol needs ({ATTR_TABLE_PATH} S HASH, {ATTR_FILE_NAME} S RANGE); "
            "point DELTA_DYNAMO_TABLE_NAME at a table made for it, or "
            + create_table_hint("<new name>"))


_CHECKED: set[tuple[str, str]] = set()
_CHECKED_LOCK = threading.Lock()



@dataclass(frozen=True, slots=True)
class TableSetup:
    """What ``create_log_table`` did."""

    created: bool
    status: str
    ttl: str
    endpoint: str
    ttl_warning: str = ""


def create_log_table(client: DynamoDBClient, table_name: str, *,
                     billing_mode: str = "PAY_PER_REQUEST", timeout: float = 60.0,
                     clock: Clock = SYSTEM_CLOCK) -> TableSetup:
    """Create the protocol's table (or accept an existing one keyed right), wait until ACTIVE,
    and enable TTL on ``expireTime`` so completed entries are removed after their delay.

    Without TTL, complete entries pile up forever (Spark's store does not enable it either);
    an endpoint without TTL support (dynalite) is reported in ``ttl_warning``, not refused.
    """
    endpoint = endpoint_of(client)
    what = f"DynamoDB table {table_name} at {endpoint}"
    created = create_table(client, table_name, hash_key=ATTR_TABLE_PATH, range_key=ATTR_FILE_NAME,
                           billing_mode=billing_mode, what=what)
    table = wait_until_active(client, table_name, what=what, clock=clock, timeout=timeout, poll=0.05)
    check_key_schema(table, table_name, endpoint)
    warning = ""
    try:
        client.update_time_to_live(TableName=table_name, TimeToLiveSpecification={
            "Enabled": True, "AttributeName": ATTR_EXPIRE_TIME})
    except ClientError as e:
        code, message = error_code(e), error_message(e)
        if code == "ValidationException" and "already enabled" in message.lower():
            pass
        elif code in ("UnknownOperationException", "UnrecognizedClientException",
                      "ValidationException", "AccessDeniedException"):
            warning = (f"TTL could not be enabled on {ATTR_EXPIRE_TIME} ({code}: {message}); "
                       "completed entries will not expire: enable it with aws dynamodb "
                       f"update-time-to-live --table-name {table_name} --time-to-live-specification "
                       f"Enabled=true,AttributeName={ATTR_EXPIRE_TIME}")
        else:
            raise admin_error("UpdateTimeToLive", what, e) from e
    return TableSetup(created, "ACTIVE", ttl_status(client, table_name), endpoint, warning)


def ttl_status(client: DynamoDBClient, table_name: str) -> str:
    """``enabled on expireTime``, ``disabled``, ... or why it cannot be known."""
    try:
        description = client.describe_time_to_live(TableName=table_name)["TimeToLiveDescription"]
    except ClientError as e:
        return f"unknown ({error_code(e)}: the endpoint does not report TTL)"
    status = str(description.get("TimeToLiveStatus", "DISABLED")).lower()
    attribute = description.get("AttributeName")
    if attribute and status in ("enabled", "enabling"):
        text = f"{status} on {attribute}"
        if attribute != ATTR_EXPIRE_TIME:
            text += f" (the protocol's entries expire by {ATTR_EXPIRE_TIME}: they will never expire)"
        return text
    return f"{status} (completed entries never expire)"


# --------------------------------------------------------------------------- the log store


@dataclass(frozen=True, slots=True)
class RepairReport:
    """What ``repair`` found and did for one incomplete entry."""

    version: int
    temp_path: str
    action: str  # "copied and completed", "completed", "unrecoverable", "dropped"
    detail: str = ""


class DynamoDBLogStore(LogStore):
    """Commits through a DynamoDB table shared with Spark's S3DynamoDBLogStore and delta-rs.

    ``hook(step, version)`` is called at each name in ``STEPS``; tests use it to stop a writer
    between two steps.  ``client`` replaces the shared DynamoDB client of ``config``.
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
        # What this process has established about the table's entries (see the module
        # docstring), shared by its log store objects (``logstore.knowledge``): each
        # ``dc.write(uri)`` opens a new one.  Objects with their own client, hook or clock
        # (tests, tools) keep their own, since their view of time or of requests differs.
        # Keyed by what the clients resolved (``identity``): one bucket name behind two S3
        # endpoints (one of them from ``AWS_ENDPOINT_URL_S3``), or one DynamoDB table name in
        # two accounts, are two tables whose entries share nothing.
        fresh = client is None and hook is None and clock is SYSTEM_CLOCK
        where = self.identity() or ()
        self._k = (knowledge.shared(store.uri, (*where, self.table_path), _Knowledge)
                   if fresh else _Knowledge())
        self._lock = self._k.lock
        joined = self._k.joined_path
        if joined is not None:
            self.table_path = joined
        #: Entries that beat a claim of this object, by version, and when it was sent
        #: (``_put_entry``, ``read_after_loss``).
        self._taken: dict[int, tuple[CommitEntry, Moment]] = {}

    @classmethod
    def open(cls, uri: str, storage_options: Mapping[str, str] | None = None, *,
             hook: FaultHook | None = None, clock: Clock = SYSTEM_CLOCK,
             random: RandomSource = DEFAULT_RANDOM) -> DynamoDBLogStore:
        """The log store of an S3 table URI, whatever ``AWS_S3_LOCKING_PROVIDER`` says."""
        from deltacommit.io.storage import open_store

        store = open_store(uri, storage_options)
        config = getattr(store, "config", None)
        if not isinstance(config, AwsConfig):
            config = resolve_aws_config(storage_options)
        return cls(store, config, hook=hook, clock=clock, random=random)

    def __repr__(self) -> str:
        return f"DynamoDBLogStore({self.table_path!r}, table={self.table_name!r})"

    # ----------------------------------------------------------------- description

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

    def coordination_config(self) -> dict[str, str]:
        self.join_fleet(check_mechanism=False)
        return {COORDINATION_KEY: self.mechanism, TABLE_NAME_KEY: self.table_name,
                TABLE_PATH_KEY: self.table_path}

    # ----------------------------------------------------------------- the fleet key

    def fleet_keys(self) -> dict[str, int]:
        """Every spelling of this table's location that has entries, with its newest version
        (one consistent Query of one item per spelling)."""
        found: dict[str, int] = {}
        for spelling in table_path_spellings(self.table_path):
            response = self._call("Query", KeyConditionExpression="#p = :p",
                                  ExpressionAttributeNames={"#p": ATTR_TABLE_PATH},
                                  ExpressionAttributeValues={":p": {"S": spelling}},
                                  ConsistentRead=True, ScanIndexForward=False, Limit=1)
            items = response.get("Items", [])
            if items:
                found[spelling] = self._parse(items[0]).version
        return found

    def join_fleet(self, *, check_mechanism: bool = True) -> None:
        """Use the ``tablePath`` the table's other writers use; refuse when that is ambiguous.

        Writers whose ``tablePath`` differ do not exclude each other: Spark writes
        ``s3a://bkt/t`` (``s3a://bkt/`` for a bucket-root table), deltalake the URI it was
        given.  On first use this log store looks under every spelling and joins the one in
        use.  Refused: entries under more than one spelling (the fleet is already split), an
        explicitly configured spelling other than the one in use, and a log with recent
        commits but no entry under any spelling (its writers use another mechanism).
        """
        if self._k.fleet_keys is not None:
            if check_mechanism and not self._k.fleet_keys and not self._k.mechanism_checked:
                self._check_no_other_mechanism(self._pin_hint())
                self._k.mechanism_checked = True
            return
        found = self.fleet_keys()
        pin = self._pin_hint()
        if len(found) > 1:
            keys = ", ".join(f"{k} (newest version {v})" for k, v in sorted(found.items()))
            raise CoordinationMismatchError(
                f"table {self.table_uri}: DynamoDB table {self.table_name} has entries under "
                f"several tablePath spellings: {keys}. Writers using different spellings do not "
                f"exclude each other, so nothing is committed; {pin}")
        if found:
            (key, _), = found.items()
            if key != self.table_path:
                if self.config.dynamo_table_path_scheme != "uri":
                    raise CoordinationMismatchError(
                        f"table {self.table_uri}: the fleet's entries use tablePath {key!r} but "
                        f"this writer is configured for {self.table_path!r}; they would not "
                        f"exclude each other. {pin}")
                log.info("table %s: joining the tablePath %s its other writers use (configured "
                         "%s)", self.table_uri, key, self.table_path)
                self.table_path = key
                self._k.joined_path = key
        elif check_mechanism:
            self._check_no_other_mechanism(pin)
            self._k.mechanism_checked = True
        self._k.fleet_keys = found

    def _pin_hint(self) -> str:
        return (f"pin one with the {DYNAMO_TABLE_PATH_SCHEME_OPTION} option (s3a, s3 or uri) on "
                "every writer, or move the table to one mechanism with `deltacommit coordination "
                "set`")

    def _check_no_other_mechanism(self, pin: str) -> None:
        """A log with a commit younger than the entries' TTL but no entry under any spelling
        is written by writers not on this protocol (S3 conditional put does not exclude it)."""
        newest = None
        for f in super().list_log(self._listing_start()):
            if f.kind == "commit" and (newest is None or f.version > newest.version):
                newest = f
        if newest is None or newest.last_modified_ms is None:
            return
        age_s = self._clock.time() - newest.last_modified_ms / 1000
        if age_s < self.ttl_seconds / 2 and not self._switched_here(newest.version):
            raise CoordinationMismatchError(
                f"table {self.table_uri}: version {newest.version} was committed {age_s:.0f} s ago "
                f"but DynamoDB table {self.table_name} has no entry for this table under any "
                f"tablePath spelling ({', '.join(table_path_spellings(self.table_path))}): its "
                "writers use another DynamoDB table (check DELTA_DYNAMO_TABLE_NAME) or another "
                "commit mechanism (S3 conditional writes?), neither of which excludes this "
                f"writer. Nothing was committed; {pin}")

    def _switched_here(self, version: int) -> bool:
        """Whether ``version`` is the metaData commit that moved the table to this protocol
        (``deltacommit coordination set --to dynamodb``): the commits before it were made
        through the old mechanism, which its writers no longer use once they honour the pin."""
        try:
            data = self.store.get(commit_path(version))
        except ObjectNotFoundError:
            return False
        for line in data.splitlines():
            try:
                action = loads(line)
            except ValueError:
                continue
            meta = action.get("metaData") if isinstance(action, dict) else None
            if isinstance(meta, dict):
                conf = meta.get("configuration") or {}
                return bool(conf.get(COORDINATION_KEY) == self.mechanism
                            and conf.get(TABLE_NAME_KEY) == self.table_name)
        return False

    def _listing_start(self) -> int:
        try:
            hint = loads(self.store.get(f"{LOG_DIR}/_last_checkpoint"))
            return max(0, int(hint.get("version", 0)))
        except (ObjectNotFoundError, ValueError, TypeError, AttributeError):
            return 0

    def identity(self) -> tuple[str, ...] | None:
        """The location, and the DynamoDB table as the client resolved it (endpoint, region,
        credentials).  Not the ``tablePath``, which differs between spellings of one table
        (``s3a://``, ``s3://``) until the fleet's is joined."""
        where = super().identity()
        if where is None:
            return None
        return (*where, "dynamodb", *client_identity(self._client), self.table_name)

    def describe(self) -> Iterator[tuple[str, str]]:
        yield from super().describe()
        yield "dynamodb table", self.table_name
        yield "dynamodb endpoint", self.endpoint
        yield "tablePath", self.table_path

    # ----------------------------------------------------------------- knowledge

    def _note_good(self, version: int) -> None:
        with self._lock:
            self._k.good_upto = max(self._k.good_upto, version)

    def _now(self) -> Moment:
        return self._clock.monotonic(), self._clock.time()

    def _note_latest(self, version: int, since: Moment) -> None:
        with self._lock:
            if self._k.latest is None or version > self._k.latest[0] \
                    or (version == self._k.latest[0] and since > self._k.latest[1]):
                self._k.latest = (version, since)

    def _note_read(self, version: int) -> None:
        """This process read ``version``'s commit file: step 1 need not look for it."""
        with self._lock:
            read = self._k.read
            read.add(version)
            if len(read) > _READ_KEPT:
                read.difference_update(sorted(read)[:len(read) - _READ_KEPT])

    def _was_read(self, version: int) -> bool:
        with self._lock:
            return version in self._k.read

    def _knows_good(self, version: int) -> bool:
        with self._lock:
            return version <= self._k.good_upto

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

    # ----------------------------------------------------------------- writing

    def write_commit(self, version: int, data: bytes) -> None:
        self.write_commit_when_ready(version, data, _nothing)

    def write_commit_when_ready(self, version: int, data: bytes,
                                ready: Callable[[], None], baton: Baton | None = None) -> None:
        """``_write_commit``, and a refused commit leaves no temp file: a writer that refuses
        (the fleet is split, another mechanism writes the table) is usually about to stop, so
        its temp file (and those of its lost claims) is deleted now, not queued for a sweep
        that would never come (``_spend_temp``)."""
        try:
            self._write_commit(version, data, ready, baton)
        except CoordinationMismatchError:
            self._sweep_temps()
            raise

    def _write_commit(self, version: int, data: bytes, ready: Callable[[], None],
                      baton: Baton | None) -> None:
        """The steps below; ``ready`` is awaited between the temp file and the entry, so the
        checks and the temp file's put overlap the uploads of the version's data files.

        With the host's turn (``baton``), steps 1 and 0 wait until just before the entry: the
        writer the turn came from is usually still marking entry N-1 complete, and says so in
        the turn's record; this writer's temp file goes out meanwhile.  Then step 1 checks
        entry N-1 itself (completing it, should that writer have died or taken longer than the
        turn's patience), whatever the record says: the word of another process is when to
        look, never what is there.  Step 1's consistent read of entry N-1 also serves step 0
        (``_ensure_previous``).  Both still come before the entry of N, so only the latest
        entry is ever incomplete."""
        if self._k.fleet_keys is None or not (self._k.fleet_keys or self._k.mechanism_checked):
            self.join_fleet()
        file_name = commit_name(version)
        target = commit_path(version)
        deferred = version > 0 and baton is not None and not self._knows_good(version - 1)
        # Step 0: an N.json whose entry TTL already removed.
        if not deferred and not self._knows_absent(version):
            self._check_absent(version)
        # Step 1: the previous commit is complete and present; no stale entries at version 0.
        if version > 0:
            if not deferred and not self._knows_good(version - 1):
                self._ensure_previous(version - 1)
        else:
            first = self._get_entry(0)
            if first is not None:
                if first.complete and not self.store.exists(target):
                    raise LogStoreError(self._stale_message(first))
                raise VersionExistsError(self.table_uri, version)
        if not self._k.marked:
            # Temp files are deleted once their commit is in place, so they no longer show a
            # writer on S3 conditional writes that this table is coordinated through DynamoDB;
            # this marker does (``logstore.fleet_sign.dynamodb_fleet_sign``), once per log store.
            self.store.put(DYNAMODB_MARKER, MARKER_TEXT)
            self._k.marked = True
        # Step 2: temp file, then the entry: the linearisation point.
        entry = CommitEntry(self.table_path, file_name,
                            f".tmp/{file_name}.{self._random.uuid()}", complete=False)
        # Deferred, entry N-1 is read while the temp file goes out: its writer sent its
        # completion when it handed the turn on, before this writer read N-1.json, so it is
        # usually complete by now; if not, it is waited for and read again below.
        early = background.submit(lambda: self._read_entry(version - 1)) if deferred else None
        self.store.put(entry.temp_key, data)
        self._step("after_write_temp", version)
        try:
            ready()
            if deferred:
                assert baton is not None and early is not None
                seen: tuple[Moment, CommitEntry | None] | None = early.result()
                if seen is not None and seen[1] is not None and not seen[1].complete:
                    baton.await_previous(version - 1)
                    seen = None
                if not self._knows_good(version - 1):
                    self._ensure_previous(version - 1, seen)
                if not self._knows_absent(version):
                    self._check_absent(version)
        except BaseException:
            self._spend_temp(entry.temp_key)  # never named by an entry
            raise
        claimed_at = self._now()
        try:
            self._put_entry(entry)
        except VersionExistsError:
            self._spend_temp(entry.temp_key)  # another writer owns N: no entry names this file
            raise
        self._note_latest(version, claimed_at)
        self._step("after_put_entry", version)
        # Steps 3 and 4: the commit has happened; failures here are repaired by others.
        if not self._copy_own(entry, data):
            return
        self._step("after_copy", version)
        # N.json holds the commit: the temp file goes as the entry is completed, both requests
        # at once.  A delta-rs reader or writer repairing the entry meanwhile moves the temp
        # file and takes an N.json that already exists as a lost race; finding the temp file
        # gone it completes the entry as moved.  Its repair retries the move a few times
        # without reading the entry again, so only the temp file's disappearance (not our
        # completion) rescues one that began before it: the delete is sent as soon as N.json
        # exists, whatever the completion does.  Spark's fixDeltaLog copies only while N.json
        # is absent.
        deleting = background.submit(lambda: self._delete_temp(entry))
        try:
            if baton is not None:
                # The host's next writer may claim N+1 while this one completes N (after the
                # delete is sent: the window a delta-rs repair fails in stays as short).
                baton.written(version)
                self._step("after_hand_on", version)
            completed = self._complete(entry, quiet=True)
        finally:
            deleting.result()
        if completed:
            self._note_good(version)
        self._step("after_complete", version)

    def _check_absent(self, version: int) -> None:
        """VersionExistsError if N.json exists.  Without an entry for it, a young N.json was
        written by another mechanism: refused (``_check_explained``), since the catch-up after
        a lost race follows the entries and would never reach it."""
        try:
            meta = self.store.head(commit_path(version))
        except ObjectNotFoundError:
            return
        if self._get_entry(version) is None:
            self._check_explained(version, meta)
        raise VersionExistsError(self.table_uri, version)

    def _put_entry(self, entry: CommitEntry) -> None:
        """Step 2's claim.  A lost claim keeps the entry that beat it (returned by the failed
        request) for ``read_after_loss``: the catch-up then needs no Query to find it."""
        since = self._now()
        try:
            self._call("PutItem", Item=entry.to_item(),
                       ConditionExpression=f"attribute_not_exists({ATTR_FILE_NAME})",
                       ReturnValuesOnConditionCheckFailure="ALL_OLD")
        except _ConditionFailed as failed:
            current: CommitEntry | None = None
            if failed.retried:
                # Our first attempt may have been the one that created the entry.
                current = self._get_entry(entry.version)
                if current is not None and current.temp_path == entry.temp_path:
                    return
            elif failed.item is not None:
                try:
                    current = self._parse(failed.item)
                except LogStoreError:
                    current = None  # read again, and reported, by the ordinary catch-up
            if current is not None:  # the item at the claim's key: the entry of this version
                with self._lock:
                    self._taken[entry.version] = (current, since)
                    while len(self._taken) > _TAKEN_KEPT:
                        del self._taken[min(self._taken)]
            raise VersionExistsError(self.table_uri, entry.version) from None

    def _copy_own(self, entry: CommitEntry, data: bytes) -> bool:
        """Step 3 with the bytes in memory; whether N.json now holds them.

        An existing N.json is never replaced.  It normally holds our bytes (a reader repaired
        our entry first); anything else means the version existed while its entry had expired,
        so our entry is completed (N.json is in place) and the version is reported taken.
        """
        target = commit_path(entry.version)
        try:
            self._create(target, data)
            return True
        except ObjectExistsError:
            pass
        except Exception as e:  # the commit stands; readers copy T(N) later
            log.warning("commit %s of %s is claimed in DynamoDB table %s but copying it to "
                        "%s failed (%s); the next reader or writer will complete it",
                        entry.version, self.table_uri, self.table_name, target, e)
            return False
        try:
            existing = self.store.get(target)
        except Exception as e:
            log.warning("commit %s of %s: %s already exists and could not be read back (%s)",
                        entry.version, self.table_uri, target, e)
            return False
        if existing == data:
            return True
        try:
            self._check_explained(entry.version, self.store.head(target))
        except CoordinationMismatchError:
            # Our claim is void (N.json holds another writer's commit): withdrawn, so the
            # version stays unexplained and every writer of this protocol refuses after it.
            try:
                self._drop(entry)
            except LogStoreError as e:
                log.warning("could not withdraw entry %s of %s: %s", entry.file_name,
                            self.table_path, e)
            self._delete_temp(entry)
            raise
        except ObjectNotFoundError:  # pragma: no cover - it was just read
            pass
        self._complete(entry, quiet=True)  # N.json is in place: the entry must not block others
        log.warning("version %s of %s existed without a live DynamoDB entry (expired by TTL?); "
                    "this commit is retried at a later version", entry.version, self.table_uri)
        raise VersionExistsError(self.table_uri, entry.version)

    def _check_explained(self, version: int, meta: ObjectMeta) -> None:
        """Refuse when ``version``'s commit file has no entry of this protocol but is younger
        than half the entries' TTL: no TTL can have removed its entry, so another mechanism
        (S3 conditional writes, another DynamoDB table or ``tablePath``) wrote it, and that
        mechanism does not exclude this one."""
        age_s = self._clock.time() - meta.last_modified_ms / 1000
        if age_s >= self.ttl_seconds / 2 or self._switched_here(version):
            return
        raise CoordinationMismatchError(
            f"table {self.table_uri}: {LOG_DIR}/{commit_name(version)} was written {age_s:.0f} s "
            f"ago but DynamoDB table {self.table_name} has no entry for it under tablePath "
            f"{self.table_path}: another mechanism is writing this table (S3 conditional "
            "writes, another DynamoDB table or tablePath), and it does not exclude this writer. "
            "This commit was not made; move every writer to one mechanism (`deltacommit "
            f"coordination set`) or pin the tablePath with {DYNAMO_TABLE_PATH_SCHEME_OPTION}")

    def _create(self, path: str, data: bytes) -> None:
        """Create ``path`` unless it exists, with S3's conditional write where available.

        Without it (``DELTACOMMIT_S3_CONDITIONAL_WRITES=false``), check then write, as Spark's
        Hadoop ``create(overwrite=false)`` does: every copier copies the same ``T(N)``, so the
        race can only write identical bytes.
        """
        if self.store.supports_conditional_put:
            self.store.put_if_absent(path, data)
            return
        if self.store.exists(path):
            raise ObjectExistsError("copy-if-absent", f"{self.table_uri}/{path}", "object already exists")
        self.store.put(path, data)

    def _read_entry(self, version: int) -> tuple[Moment, CommitEntry | None]:
        """Entry ``version`` read consistently, and when the read was sent."""
        since = self._now()
        return since, self._get_entry(version)

    def _ensure_previous(self, version: int,
                         seen: tuple[Moment, CommitEntry | None] | None = None) -> None:
        """Step 1 for N = version + 1: entry ``version`` complete and its file present (the
        file known present where this process read it).  ``seen``: the entry as just read
        (``_read_entry``), else it is read here.

        The entry, read consistently, also shows what step 0 needs: incomplete, it is the
        latest (only the latest can be); complete and trusted, no newer entry can expire
        within the margin (``read_after_loss`` reasons alike)."""
        since, entry = seen if seen is not None else self._read_entry(version)
        if entry is not None and (not entry.complete or self._trusted(entry)):
            self._note_latest(version, since if not entry.complete else self._within_margin(since))
        if entry is not None and not entry.complete:
            self._repair(entry)
        elif entry is None:
            # One HEAD, as the existence check it replaces: the file's age tells an entry TTL
            # removed from one that never existed (another mechanism wrote the version).
            try:
                self._check_explained(version, self.store.head(commit_path(version)))
            except ObjectNotFoundError:
                raise CorruptLogError(
                    f"table {self.table_uri}: previous commit {LOG_DIR}/{commit_name(version)} "
                    f"does not exist in the object store and DynamoDB table {self.table_name} "
                    f"has no entry for it (expired?); version {version + 1} cannot be written "
                    "after a missing version") from None
        elif not self._was_read(version) and not self.store.exists(commit_path(version)):
            where = f"DynamoDB table {self.table_name} has a complete entry for it"
            raise CorruptLogError(
                f"table {self.table_uri}: previous commit {LOG_DIR}/{commit_name(version)} does not "
                f"exist in the object store but {where}; version {version + 1} cannot be written "
                "after a missing version")
        self._note_good(version)

    def _stale_message(self, entry: CommitEntry) -> str:
        return (f"old entries for table {self.table_path} still exist in DynamoDB table "
                f"{self.table_name} (version {entry.version} is complete but "
                f"{LOG_DIR}/{entry.file_name} does not exist): the table was deleted and is being "
                "re-created at the same location before the entries expired. Remove them with "
                f"`deltacommit dynamodb repair {self.table_uri} --drop-stale-entries` (or wait "
                "for TTL to delete them)")

    # ----------------------------------------------------------------- marking complete

    def _complete(self, entry: CommitEntry, *, quiet: bool) -> bool:
        """Step 4; whether the entry is complete now.  ``quiet``: log failures, don't raise."""
        expire = int(self._clock.time()) + self.ttl_seconds
        try:
            self._call("UpdateItem", Key=_key(entry.table_path, entry.file_name),
                       UpdateExpression=f"SET #c = :t, {ATTR_EXPIRE_TIME} = :e",
                       ConditionExpression="#c = :f",
                       ExpressionAttributeNames={"#c": ATTR_COMPLETE},
                       ExpressionAttributeValues={":t": {"S": "true"}, ":f": {"S": "false"},
                                                  ":e": {"N": str(expire)}})
        except _ConditionFailed:
            return True  # completed by someone else (or removed by repair)
        except Exception as e:
            if not quiet:
                raise
            log.warning("marking entry %s of %s complete in DynamoDB table %s failed (%s); "
                        "the next reader or writer will complete it",
                        entry.file_name, self.table_path, self.table_name, e)
            return False
        return True

    # ----------------------------------------------------------------- repair

    def _repair(self, entry: CommitEntry) -> bytes:
        """Copy ``T(N)`` to N.json (never replacing it) and complete the entry; N's content.

        Every repairer copies the same ``T(N)``, so concurrent repairs (and the writer's own
        copy) are benign.  The temp file may be gone because delta-rs repairs by moving it;
        then N.json must exist.  If neither exists the commit cannot be recovered: reported,
        never marked complete (which would hide a missing version).

        A temp file delta-rs wrote is moved, not copied: deleted once N.json holds it.  delta-rs
        finishes its own commit by moving its temp file and treats an N.json that already
        exists as a lost race, committing the same actions again at a later version; finding
        the temp file gone instead, it completes the entry as a repair it was beaten to.
        """
        if _moved_by_writer(entry):
            entry = self._await_mover(entry)
            if entry.complete:
                self._note_good(entry.version)
                return self._read_moved(entry)
        version = entry.version
        target = commit_path(version)
        data = self._read_temp(entry)
        if data is None:
            data = self._read_moved(entry)
        else:
            try:
                self._create(target, data)
            except ObjectExistsError:
                data = self.store.get(target)
            # N.json holds the commit: the temp file goes before the entry is completed, for
            # every writer's entry.  delta-rs moves temp files and fails on one whose N.json
            # exists; Spark's repair copies only while N.json is absent, and Spark's writer
            # does not read its temp file after its own copy.
            self._delete_temp(entry)
            self._step("repair_after_copy", version)
        self._complete(entry, quiet=True)
        self._note_good(version)
        self._step("repair_after_complete", version)
        return data

    def _await_mover(self, entry: CommitEntry) -> CommitEntry:
        """Leave a moving writer's incomplete entry to it for ``repair_grace_ms`` from when this
        log store first saw it: until the entry is complete, its temp file is gone (moved), or
        the grace is over (the writer presumably died).  Returns the entry as last read.

        A delta-rs writer finishes its commit by copying its temp file to N.json and deleting
        it; should a repairer create N.json first, that writer takes its own commit for a lost
        race and commits the same actions again at N+1.
        """
        key = entry.temp_path
        with self._lock:
            first = self._k.first_seen.setdefault(key, self._clock.monotonic())
        settled = self._wait_for_mover(entry, first + self.repair_grace_ms / 1000)
        with self._lock:
            # Finished, moved, or about to be repaired by the caller: no longer waited for.
            # Forgetting it keeps a long-lived process beside delta-rs writers from keeping
            # one record per commit they ever left to finish.
            self._k.first_seen.pop(key, None)
        return settled

    def _wait_for_mover(self, entry: CommitEntry, deadline: float) -> CommitEntry:
        while True:
            if not self.store.exists(entry.temp_key):
                return entry
            now = self._clock.monotonic()
            if now >= deadline:
                log.info("repairing the incomplete entry of version %s of %s: its writer has not "
                         "moved %s within %d ms", entry.version, self.table_uri, entry.temp_path,
                         self.repair_grace_ms)
                return entry
            self._clock.sleep(min(_MOVER_POLL_S, deadline - now))
            current = self._get_entry(entry.version)
            if current is None:
                raise _Unrecoverable(self._unrecoverable_message(entry))
            if current.complete or current.temp_path != entry.temp_path:
                return current

    def _read_temp(self, entry: CommitEntry) -> bytes | None:
        try:
            return self.store.get(entry.temp_key)
        except ObjectNotFoundError:
            return None

    def _read_moved(self, entry: CommitEntry) -> bytes:
        """N.json of an entry whose temp file is gone (moved there by delta-rs, or removed)."""
        try:
            return self.store.get(commit_path(entry.version))
        except ObjectNotFoundError:
            raise _Unrecoverable(self._unrecoverable_message(entry)) from None

    def _spend_temp(self, key: str) -> None:
        """Queue the temp file of a lost claim for deletion with others (``_sweep_temps``).

        Nothing can ever read it, so it need not go at once; Spark's writer never deletes
        them, and deleting each at once would cost a request per lost race."""
        with self._lock:
            if not self._k.spent:
                self._k.spent_since = self._clock.monotonic()
            self._k.spent.append(key)
            due = (len(self._k.spent) >= TEMP_SWEEP_BATCH
                   or self._clock.monotonic() - self._k.spent_since >= TEMP_SWEEP_AGE_S)
        if due:
            self._sweep_temps()

    def _sweep_temps(self) -> None:
        """Delete the queued temp files of lost claims.  Best effort: those left behind (by a
        failure here, or fewer than a batch when the process ends) cost only storage, and log
        cleanup deletes them with the log they belong to, as it does Spark's, which are never
        deleted."""
        with self._lock:
            keys, self._k.spent = self._k.spent, []
        if not keys:
            return
        try:
            self.store.delete_many(keys)
        except Exception as e:
            log.warning("could not delete %d spent temp files of %s (%s); log cleanup will",
                        len(keys), self.table_uri, e)

    def _delete_temp(self, entry: CommitEntry) -> None:
        try:
            self.store.delete(entry.temp_key)
        except ObjectNotFoundError:
            pass  # moved by a delta-rs repairer
        except Exception as e:  # N.json is in place; a leftover temp file costs only storage
            log.warning("could not delete temp file %s/%s after copying it (%s)",
                        self.table_uri, entry.temp_key, e)

    def _unrecoverable_message(self, entry: CommitEntry) -> str:
        return (f"table {self.table_uri}: DynamoDB table {self.table_name} has an incomplete entry "
                f"for version {entry.version}, but neither its temp file {LOG_DIR}/{entry.temp_path} "
                f"nor {LOG_DIR}/{entry.file_name} exists, so the commit cannot be completed. "
                "Nothing was changed. If the table was deleted and re-created, or the temp file "
                "was removed by a lifecycle rule, drop the entry with `deltacommit dynamodb "
                f"repair {self.table_uri} --drop-unrecoverable` (the commit is lost either way)")

    def _refresh(self, *, catching_up: bool = False) -> tuple[int | None, tuple[int, bytes] | None]:
        """The latest version per DynamoDB (None if unknown), repairing the latest entry.

        Returns the repaired commit's content too, so a reader that needs it does not read it
        again.  An entry past its expiry is not trusted as the latest: TTL may already have
        removed newer ones.

        ``catching_up`` (a writer reading the commit that just beat it) leaves a delta-rs
        writer's incomplete entry to that writer, which is almost certainly still finishing it
        and fails if its N.json appears under it (see ``_repair``); the content is read from
        where it is.  Should that writer have died, the next writer's step 1 completes it.
        """
        since = self._now()
        entry = self.latest_entry()
        if entry is None:
            return None, None
        repaired = None
        if not entry.complete:
            if catching_up and _moved_by_writer(entry):
                data = self._read_temp(entry)
                repaired = (entry.version, data if data is not None else self._read_moved(entry))
            else:
                repaired = (entry.version, self._repair(entry))
        elif not self._trusted(entry):
            return None, None
        self._note_latest(entry.version, since)
        return entry.version, repaired

    def repair(self, *, drop_unrecoverable: bool = False) -> list[RepairReport]:
        """Complete every incomplete entry of this table (``deltacommit dynamodb repair``).

        Only the latest entry is normally incomplete; older ones (left by a writer that skipped
        step 1) are completed the same way, since copies never replace a file.  An entry whose
        commit is unrecoverable is reported, or with ``drop_unrecoverable`` deleted (only if it
        is still incomplete and unchanged).
        """
        out: list[RepairReport] = []
        for entry in self.entries(incomplete_only=True):
            existed = self.store.exists(commit_path(entry.version))
            try:
                self._repair(entry)
            except _Unrecoverable as e:
                if not drop_unrecoverable:
                    out.append(RepairReport(entry.version, entry.temp_path, "unrecoverable", str(e)))
                    continue
                self._drop(entry)
                out.append(RepairReport(entry.version, entry.temp_path, "dropped",
                                        "incomplete entry without temp file or commit file deleted"))
                continue
            out.append(RepairReport(entry.version, entry.temp_path,
                                    "completed" if existed else "copied and completed"))
        return out

    def _drop(self, entry: CommitEntry) -> None:
        try:
            self._call("DeleteItem", Key=_key(entry.table_path, entry.file_name),
                       ConditionExpression="#c = :f AND #t = :tp",
                       ExpressionAttributeNames={"#c": ATTR_COMPLETE, "#t": ATTR_TEMP_PATH},
                       ExpressionAttributeValues={":f": {"S": "false"}, ":tp": {"S": entry.temp_path}})
        except _ConditionFailed:
            raise LogStoreError(f"entry {entry.file_name} of {self.table_path} changed while being "
                                "dropped; run the repair again") from None

    def drop_stale_entries(self) -> int:
        """Delete every entry of this ``tablePath`` when the table has no commit files left.

        For a table deleted and re-created at the same location before TTL removed the old
        entries (which would otherwise make version 0 fail).  Refused while any commit exists.
        """
        listed = [f for f in super().list_log(0) if f.kind == "commit"]
        if listed:
            raise LogStoreError(
                f"table {self.table_uri} has {len(listed)} commit files (newest version "
                f"{max(f.version for f in listed)}); its DynamoDB entries are not stale and are kept")
        count = 0
        for entry in self.entries():
            try:
                self._call("DeleteItem", Key=_key(entry.table_path, entry.file_name))
            except _ConditionFailed:  # pragma: no cover - unconditional
                continue
            count += 1
        return count

    # ----------------------------------------------------------------- reading

    def read_commit(self, version: int) -> bytes:
        """N.json; if absent but claimed by an incomplete entry, repaired first."""
        target = commit_path(version)
        try:
            data = self.store.get(target)
        except ObjectNotFoundError:
            pass
        else:
            self._note_read(version)
            return data
        entry = self._get_entry(version)
        if entry is None:
            raise ObjectNotFoundError("get", f"{self.table_uri}/{target}", "no such object")
        if not entry.complete:
            return self._repair(entry)
        try:
            # Completed between our GET and GetItem by a repairer that had just copied it.
            return self.store.get(target)
        except ObjectNotFoundError:
            raise CorruptLogError(
                f"table {self.table_uri}: DynamoDB table {self.table_name} has a complete entry "
                f"for version {version} but {LOG_DIR}/{commit_name(version)} does not exist") from None

    def list_log(self, from_version: int = 0) -> list[LogFile]:
        """Repair the latest entry (as Spark's ``listFrom`` does), then list."""
        since = self._now()
        latest, _ = self._refresh()
        files = super().list_log(from_version)
        commits = [f.version for f in files if f.kind == "commit"]
        if not files and from_version <= 0:
            self._note_latest(-1, since)  # no version exists yet: version 0 needs no HEAD
        if commits:
            newest = max(commits)
            self._note_latest(newest, since)
            if latest is not None and latest == newest:
                self._note_good(newest)
        return files

    def latest_version_hint(self) -> int | None:
        return self._refresh()[0]

    def read_commits_after(self, version: int) -> list[tuple[int, bytes]]:
        """One consistent Query finds the latest version; then one GET per newer commit."""
        since = self._now()
        latest, repaired = self._refresh(catching_up=True)
        if latest is None:
            # No trustworthy entry (none yet, or expired): the listing says what exists.
            listed = [f.version for f in super().list_log(version + 1) if f.kind == "commit"]
            out = self.read_range(version + 1, max(listed)) if listed else []
            self._note_latest(out[-1][0] if out else version, since)
            return out
        if latest <= version:
            return []
        if repaired is not None:
            out = self.read_range(version + 1, latest - 1) + [repaired]
        else:
            out = self.read_range(version + 1, latest)
            self._note_good(latest)
        return out

    def read_after_loss(self, version: int) -> list[tuple[int, bytes]]:
        """Version ``version`` by the entry our failed claim returned, without the Query that
        finds the latest entry: the next claim finds any newer one.

        The entry is usually incomplete (its writer had claimed the version a moment before
        us), so it is read again while N.json is read: complete by then, the next claim's
        step 1 has nothing left to ensure.  Otherwise step 1 completes it, repairing it if its
        writer died.  With N.json absent the writer is between its claim and its copy: the
        content is read from the temp file the entry names, which is left to that writer, as
        ``_refresh`` does when catching up.  Without a usable entry (an emulator that does not
        return it, or one TTL may soon remove), the ordinary catch-up reads.
        """
        with self._lock:
            found = self._taken.pop(version, None)
        if found is None or (found[0].complete and not self._trusted(found[0])):
            return self.read_commits_after(version - 1)
        entry, since = found
        again = None if entry.complete else background.submit(
            lambda: self._get_entry(version))
        try:
            data: bytes | None = self.store.get(commit_path(version))
        except ObjectNotFoundError:
            data = None
        current = entry if again is None else again.result()
        if current is None:
            return self.read_commits_after(version - 1)  # removed meanwhile (repair, TTL)
        if data is None:
            data = None if current.complete else self._read_temp(current)
            if data is None:  # copied or moved meanwhile
                return self.read_commits_after(version - 1)
        elif current.complete:
            self._note_good(version)
        self._note_latest(version, since if not entry.complete else self._within_margin(since))
        return [(version, data)]

    def _within_margin(self, since: Moment) -> Moment:
        """``since`` moved back so that knowledge noted at it lasts the expiry margin, not half
        the TTL.  An entry that beat a claim, complete, does not show that it is the newest (its
        writer may have gone on); trusted, it shows that no newer entry can expire within the
        margin (every writer uses the same TTL), which is all that step 0 guards against."""
        shift = max(0.0, self.ttl_seconds / 2 - _EXPIRY_MARGIN_SECONDS)
        return since[0] - shift, since[1] - shift

    # ----------------------------------------------------------------- entries

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
        response = self._call("GetItem", Key=_key(self.table_path, commit_name(version)),
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

    # ----------------------------------------------------------------- requests

    def _step(self, name: str, version: int) -> None:
        if self._hook is not None:
            self._hook(name, version)

    def _call(self, api: str, **kwargs: Any) -> dict[str, Any]:
        """One DynamoDB operation on the log table, with throttling retried by backoff.

        A failed condition raises ``_ConditionFailed``; every other failure a LogStoreError
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
            except ClientError as e:
                code = error_code(e)
                attempts = retry_attempts(e)
                self._count_retries(api, attempts)
                if code == CONDITION_FAILED:
                    item = e.response.get("Item")
                    raise _ConditionFailed(retried=attempts > 0 or retries > 0,
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
            except NO_CREDENTIALS as e:
                raise LogStoreError(
                    f"{api} on DynamoDB table {self.table_name}: no usable AWS credentials ({e}); set "
                    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the *_DYNAMODB variants)") from e
            except BotoCoreError as e:
                raise LogStoreError(f"{api} on DynamoDB table {self.table_name} at {self.endpoint} "
                                    f"failed: {e}") from e
            self._count_retries(api, retry_attempts(response))
            return response

    def _count_retries(self, api: str, attempts: int) -> None:
        for _ in range(attempts):
            self._counter.add(api)

    def _error(self, api: str, e: ClientError) -> LogStoreError:
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
            except ClientError as e:
                if error_code(e) in DYNAMODB_DENIED:
                    # Allowed to use the table but not to describe it (delta-rs documents no
                    # DescribeTable permission): errors will surface from the operations.
                    break
                raise self._error("DescribeTable", e) from e
            except NO_CREDENTIALS as e:
                raise LogStoreError(f"{where}: no usable AWS credentials ({e})") from e
            except BotoCoreError as e:
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


_TOKEN = r"[0-9A-Za-z][0-9A-Za-z\-]*"
_DELTA_RS_TEMP = re.compile(rf"_commit_{_TOKEN}\.json\.tmp")


#: Entries of lost claims kept for the catch-up after each (one per thread racing normally).
_TAKEN_KEPT = 16
#: Versions whose commit file a process read, kept for step 1 (``_note_read``): the newest.
_READ_KEPT = 64

#: The temp files of lost claims are deleted this many at a time (one DeleteObjects request on
#: S3), or once the oldest has waited this long, at the next lost race.
TEMP_SWEEP_BATCH = 32
TEMP_SWEEP_AGE_S = 30.0


def _is_temp_name(temp_path: str, file_name: str) -> bool:
    """Whether ``temp_path`` is a temp file name one of the protocol's writers creates for
    ``file_name``: Spark's and ours ``.tmp/<N>.json.<uuid>``, delta-rs's
    ``_commit_<uuid>.json.tmp``."""
    prefix = f".tmp/{file_name}."
    if temp_path.startswith(prefix):
        return re.fullmatch(_TOKEN, temp_path[len(prefix):]) is not None
    return _DELTA_RS_TEMP.fullmatch(temp_path) is not None


# How often a repairer waiting for a moving writer looks again.
_MOVER_POLL_S = 0.025


MARKER_TEXT = (b"This table is committed to through Spark's S3DynamoDBLogStore protocol; writers "
               b"using S3 conditional writes do not exclude its writers.\n")


def table_path_spellings(table_path: str) -> list[str]:
    """Every ``tablePath`` a Spark, Hadoop or delta-rs writer may use for this location:
    the ``s3``, ``s3a`` and ``s3n`` schemes, and with a trailing slash for a bucket root."""
    scheme, sep, rest = table_path.partition("://")
    if not sep or scheme.lower() not in ("s3", "s3a", "s3n"):
        return [table_path]
    rest = rest.rstrip("/")
    bucket_root = "/" not in rest
    out = []
    for s in ("s3", "s3a", "s3n"):
        out.append(f"{s}://{rest}")
        if bucket_root:
            out.append(f"{s}://{rest}/")
    if table_path in out:
        out.remove(table_path)
    return [table_path, *out]


def _moved_by_writer(entry: CommitEntry) -> bool:
    """Whether the entry's writer finishes by moving its temp file (delta-rs) rather than
    copying it (Spark, deltacommit): delta-rs keeps temp files beside the commits
    (``_commit_<uuid>.json.tmp``), the copying writers under ``.tmp/``."""
    return not entry.temp_path.startswith(".tmp/")


def _snake(api: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in api).lstrip("_")


def _nothing() -> None:
    """``write_commit``'s wait: a caller of it has nothing in flight."""
