"""AWS configuration from ``storage_options`` and the environment, and cached boto3 clients.

Option names are the ones deltalake (delta-rs) 1.6.0 reads, so a deltalake user's options work
unchanged.  Each option is looked up in ``storage_options`` (any letter case; an exact
upper-case key wins over other spellings), then in the environment, as delta-rs does.

deltalake's names
    ``AWS_ENDPOINT_URL``, ``AWS_REGION`` (environment also ``AWS_DEFAULT_REGION``),
    ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``,
    ``AWS_ALLOW_HTTP`` (an ``http://`` S3 endpoint is refused unless true, as object_store does),
    ``AWS_S3_ADDRESSING_STYLE`` (``path`` | ``virtual`` | ``auto``; default ``path`` when an
    endpoint is given, as object_store does, else boto3's choice),
    ``AWS_S3_LOCKING_PROVIDER`` (only ``dynamodb``: Spark's S3DynamoDBLogStore protocol),
    ``DELTA_DYNAMO_TABLE_NAME`` (default ``delta_log``), ``DELTA_DYNAMO_BILLING_MODE``
    (``PAY_PER_REQUEST`` | ``PROVISIONED``, used when creating that table),
    ``DELTA_DYNAMO_MAX_ELAPSED_REQUEST_TIME`` (seconds, default 60: the longest backoff delay on
    DynamoDB throttling), the DynamoDB overrides ``AWS_ENDPOINT_URL_DYNAMODB``,
    ``AWS_REGION_DYNAMODB``, ``AWS_ACCESS_KEY_ID_DYNAMODB``, ``AWS_SECRET_ACCESS_KEY_DYNAMODB``,
    ``AWS_SESSION_TOKEN_DYNAMODB``, and object_store's ``conditional_put`` /
    ``aws_conditional_put``: ``etag`` (the default: S3 ``If-None-Match``), ``disabled``, or
    ``dynamo:<table>[:<timeout_ms>]`` (object_store's DynamoCommit; whitespace is tolerated).

deltacommit's own names
    ``DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME``: the scheme of ``tablePath`` in Spark-protocol
    DynamoDB entries: ``uri`` (default: the scheme of the table URI, as deltalake writes it),
    ``s3a`` (what Spark writes: choose it when Spark writers share the table) or ``s3``.
    Writers whose ``tablePath`` differ do not exclude each other.
    ``DELTACOMMIT_DYNAMO_TTL_SECONDS``: delay before a completed entry's ``expireTime``
    (default 86400, Spark's and delta-rs's one day; at least 3600).
    ``DELTACOMMIT_DYNAMO_REPAIR_GRACE_MS``: how long an incomplete entry of a writer that
    finishes by moving its temp file (delta-rs) is left to that writer before it is repaired
    (default 2000; 0 repairs at once).  Repairing it while its writer is still moving makes
    that writer see its own commit as a lost race.
    ``DELTACOMMIT_S3_CONDITIONAL_WRITES``: ``false`` makes the S3 store behave as if S3 had no
    conditional writes (``put_if_absent`` refuses); for testing the DynamoDB mechanisms.

Deliberate differences from deltalake, each because the deltalake behaviour loses safety or
surprises: an unrecognised option that looks like one of these (``AWS_*``, ``DELTA_*``,
``DELTACOMMIT_*``) is an error naming close matches instead of being ignored; an
``AWS_S3_LOCKING_PROVIDER`` other than ``dynamodb`` is an error instead of silently meaning
"no DynamoDB"; the DynamoDB endpoint falls back to ``AWS_ENDPOINT_URL`` when
``AWS_ENDPOINT_URL_DYNAMODB`` is not given (as object_store's DynamoCommit does), so a local
test endpoint never leaks requests to real AWS; options are never copied into the process
environment.  A session token from the environment is used only with an access key from the
environment, so keys given in ``storage_options`` are never paired with an unrelated token.

Options deltalake accepts that change nothing here (connection pool tuning, metadata endpoint
settings) are accepted and ignored; see ``IGNORED_OPTIONS``.
"""

from __future__ import annotations

import difflib
import os
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from deltacommit.errors import StorageConfigError

if TYPE_CHECKING:
    from boto3.session import Session
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client

# --------------------------------------------------------------------------- option names

ENDPOINT_URL = "AWS_ENDPOINT_URL"
ENDPOINT_URL_DYNAMODB = "AWS_ENDPOINT_URL_DYNAMODB"
REGION = "AWS_REGION"
DEFAULT_REGION_ENV = "AWS_DEFAULT_REGION"
ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"
SESSION_TOKEN = "AWS_SESSION_TOKEN"
ALLOW_HTTP = "AWS_ALLOW_HTTP"
PROFILE = "AWS_PROFILE"
LOCKING_PROVIDER = "AWS_S3_LOCKING_PROVIDER"
ADDRESSING_STYLE = "AWS_S3_ADDRESSING_STYLE"
DYNAMO_TABLE_NAME = "DELTA_DYNAMO_TABLE_NAME"
DYNAMO_BILLING_MODE = "DELTA_DYNAMO_BILLING_MODE"
DYNAMO_MAX_ELAPSED_REQUEST_TIME = "DELTA_DYNAMO_MAX_ELAPSED_REQUEST_TIME"
REGION_DYNAMODB = "AWS_REGION_DYNAMODB"
ACCESS_KEY_ID_DYNAMODB = "AWS_ACCESS_KEY_ID_DYNAMODB"
SECRET_ACCESS_KEY_DYNAMODB = "AWS_SECRET_ACCESS_KEY_DYNAMODB"
SESSION_TOKEN_DYNAMODB = "AWS_SESSION_TOKEN_DYNAMODB"
CONDITIONAL_PUT = "AWS_CONDITIONAL_PUT"
CONDITIONAL_PUT_ALIAS = "CONDITIONAL_PUT"
DYNAMO_TABLE_PATH_SCHEME = "DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME"
DYNAMO_TTL_SECONDS = "DELTACOMMIT_DYNAMO_TTL_SECONDS"
DYNAMO_REPAIR_GRACE_MS = "DELTACOMMIT_DYNAMO_REPAIR_GRACE_MS"
S3_CONDITIONAL_WRITES = "DELTACOMMIT_S3_CONDITIONAL_WRITES"

#: Every option this module reads (upper-case; ``storage_options`` keys match in any case).
KNOWN_OPTIONS: frozenset[str] = frozenset({
    ENDPOINT_URL, ENDPOINT_URL_DYNAMODB, REGION, ACCESS_KEY_ID, SECRET_ACCESS_KEY, SESSION_TOKEN,
    ALLOW_HTTP, PROFILE, LOCKING_PROVIDER, ADDRESSING_STYLE, DYNAMO_TABLE_NAME, DYNAMO_BILLING_MODE,
    DYNAMO_MAX_ELAPSED_REQUEST_TIME, REGION_DYNAMODB, ACCESS_KEY_ID_DYNAMODB,
    SECRET_ACCESS_KEY_DYNAMODB, SESSION_TOKEN_DYNAMODB, CONDITIONAL_PUT, CONDITIONAL_PUT_ALIAS,
    DYNAMO_TABLE_PATH_SCHEME, DYNAMO_TTL_SECONDS, DYNAMO_REPAIR_GRACE_MS, S3_CONDITIONAL_WRITES,
})

#: Options deltalake 1.6.0 accepts that tune its own HTTP stack or credential loading and have
#: no counterpart here; accepted so deltalake users' options work unchanged.
#: ``AWS_DEFAULT_REGION`` is read from the environment by boto3 itself.
IGNORED_OPTIONS: frozenset[str] = frozenset({
    "AWS_DEFAULT_REGION",
    "AWS_S3_POOL_IDLE_TIMEOUT_SECONDS",
    "AWS_STS_POOL_IDLE_TIMEOUT_SECONDS",
    "AWS_S3_GET_INTERNAL_SERVER_ERROR_RETRIES",
    "AWS_EC2_METADATA_DISABLED",
    "AWS_EC2_METADATA_TIMEOUT",
    "AWS_FORCE_CREDENTIAL_LOAD",
    # Writes here are always safe: there is no unsafe rename to allow.
    "AWS_S3_ALLOW_UNSAFE_RENAME",
    # copy-if-absent never overwrites here whatever the setting.
    "AWS_COPY_IF_NOT_EXISTS",
    "COPY_IF_NOT_EXISTS",
})

#: Options deltalake accepts whose effect this library does not provide: refusing them is safer
#: than silently running with different credentials than the user asked for.
UNSUPPORTED_OPTIONS: Mapping[str, str] = {
    "AWS_IAM_ROLE_ARN": "assume the role with a profile instead (AWS_PROFILE naming a profile "
                        "with role_arn in ~/.aws/config), or the standard AWS_ROLE_ARN and "
                        "AWS_WEB_IDENTITY_TOKEN_FILE environment variables",
    "AWS_IAM_ROLE_SESSION_NAME": "see AWS_IAM_ROLE_ARN",
}

_OUR_PREFIXES = ("AWS_", "DELTA_", "DELTACOMMIT_")

DEFAULT_DYNAMO_TABLE_NAME = "delta_log"
DEFAULT_DYNAMO_TTL_SECONDS = 86_400
#: How long a fresh incomplete entry of a moving writer (delta-rs) is left to it.  Its move is
#: a copy, a delete and an UpdateItem: tens of milliseconds, seconds under load.
DEFAULT_DYNAMO_REPAIR_GRACE_MS = 2_000
#: The shortest ``DELTACOMMIT_DYNAMO_TTL_SECONDS`` accepted.  The entry of version N is what
#: makes a second ``PutItem`` for N fail: once TTL has deleted it, a writer that has not yet
#: seen version N (stalled, partitioned, or reading a lagging listing) can win N again and
#: overwrite a commit.  An entry must therefore outlive every writer's view of the log; Spark
#: and delta-rs keep a day, and an hour still covers stalls and retries with a wide margin,
#: while anything shorter trades safety for a smaller table.
MIN_DYNAMO_TTL_SECONDS = 3_600
DEFAULT_DYNAMO_MAX_ELAPSED_REQUEST_TIME = 60.0
#: object_store's DynamoCommit lease length when ``dynamo:<table>`` gives none.
DEFAULT_DYNAMO_COMMIT_TIMEOUT_MS = 20_000
#: A region is needed to sign requests; a local endpoint works with any, and Spark's
#: S3DynamoDBLogStore defaults its DynamoDB region to this one.
FALLBACK_REGION = "us-east-1"

# Client settings.  Pool size covers the thread pools that read data files in parallel.
CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 30.0
MAX_POOL_CONNECTIONS = 64
#: DynamoDB clients retry throttling, 5xx and connection errors themselves (botocore "standard"
#: mode, which never retries ConditionalCheckFailedException).  S3 clients make one attempt: the
#: S3 store retries with its own clock and counts every request.
DYNAMODB_MAX_ATTEMPTS = 5

ConditionalPutMode = Literal["etag", "disabled", "dynamo"]
TablePathScheme = Literal["uri", "s3a", "s3"]
AddressingStyle = Literal["path", "virtual", "auto"]


@dataclass(frozen=True, slots=True)
class ConditionalPut:
    """object_store's ``conditional_put`` setting."""

    mode: ConditionalPutMode = "etag"
    dynamo_table: str | None = None
    dynamo_timeout_ms: int = DEFAULT_DYNAMO_COMMIT_TIMEOUT_MS

    def __str__(self) -> str:
        if self.mode == "dynamo":
            return f"dynamo:{self.dynamo_table}:{self.dynamo_timeout_ms}"
        return self.mode


_SECRET_FIELDS = frozenset({
    "secret_access_key", "session_token", "dynamodb_secret_access_key", "dynamodb_session_token",
})
_KEY_ID_FIELDS = frozenset({"access_key_id", "dynamodb_access_key_id"})


@dataclass(frozen=True, slots=True)
class AwsConfig:
    """Resolved AWS settings of one table location.  Hashable: clients are cached by it."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    profile: str | None = None
    allow_http: bool = False
    addressing_style: AddressingStyle | None = None
    locking_provider: Literal["dynamodb"] | None = None
    dynamo_table_name: str = DEFAULT_DYNAMO_TABLE_NAME
    dynamo_billing_mode: Literal["PAY_PER_REQUEST", "PROVISIONED"] = "PAY_PER_REQUEST"
    dynamo_max_elapsed_request_time: float = DEFAULT_DYNAMO_MAX_ELAPSED_REQUEST_TIME
    dynamodb_endpoint_url: str | None = None
    dynamodb_region: str | None = None
    dynamodb_access_key_id: str | None = None
    dynamodb_secret_access_key: str | None = None
    dynamodb_session_token: str | None = None
    conditional_put: ConditionalPut = field(default_factory=ConditionalPut)
    dynamo_table_path_scheme: TablePathScheme = "uri"
    dynamo_ttl_seconds: int = DEFAULT_DYNAMO_TTL_SECONDS
    dynamo_repair_grace_ms: int = DEFAULT_DYNAMO_REPAIR_GRACE_MS
    s3_conditional_writes: bool = True

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.redacted().items())
        return f"AwsConfig({inner})"

    # ----------------------------------------------------------------- derived settings

    @property
    def uses_s3_conditional_writes(self) -> bool:
        """Whether S3 itself may be asked for ``If-None-Match`` / ``If-Match`` writes."""
        return self.s3_conditional_writes and self.conditional_put.mode != "disabled"

    @property
    def effective_dynamodb_endpoint_url(self) -> str | None:
        return self.dynamodb_endpoint_url or self.endpoint_url

    def dynamo_table_path(self, table_uri: str) -> str:
        """``tablePath`` of a table's Spark-protocol entries: no trailing slash, chosen scheme."""
        path = table_uri.rstrip("/")
        if self.dynamo_table_path_scheme != "uri" and "://" in path:
            path = f"{self.dynamo_table_path_scheme}://{path.split('://', 1)[1]}"
        return path

    def redacted(self) -> dict[str, Any]:
        """The settings for error messages and logs: secrets hidden, key ids shortened."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                out[f.name] = None
            elif f.name in _SECRET_FIELDS:
                out[f.name] = "<redacted>"
            elif f.name in _KEY_ID_FIELDS:
                out[f.name] = _shorten_key_id(str(value))
            elif isinstance(value, ConditionalPut):
                out[f.name] = str(value)
            else:
                out[f.name] = value
        return out

    # ----------------------------------------------------------------- clients

    def s3_client(self, timeout: float | None = None) -> S3Client:
        """A shared boto3 S3 client for these settings (one attempt per call, no retries).

        ``timeout`` caps the connect and read timeouts, for requests that must finish within a
        deadline (writes under a DynamoCommit lease); callers should round it to a few steps so
        that the cache stays small.
        """
        key = ("s3", self.endpoint_url, self.region, self.access_key_id, self.secret_access_key,
               self.session_token, self.profile, self.addressing_style, timeout)
        return _cached(key, lambda: self._make_s3_client(timeout))  # type: ignore[no-any-return]

    def dynamodb_client(self) -> DynamoDBClient:
        """A shared boto3 DynamoDB client for these settings (botocore standard retries).

        A retried conditional write can fail its condition because its own first attempt
        succeeded with the response lost; callers that must know whether they won have to check
        the item (the Spark protocol compares ``tempPath``).
        """
        ak, sk, tok = self._dynamodb_credentials()
        key = ("dynamodb", self.effective_dynamodb_endpoint_url, self.dynamodb_region or self.region,
               ak, sk, tok, self.profile)
        return _cached(key, self._make_dynamodb_client)  # type: ignore[no-any-return]

    def _dynamodb_credentials(self) -> tuple[str | None, str | None, str | None]:
        if self.dynamodb_access_key_id is not None:
            return self.dynamodb_access_key_id, self.dynamodb_secret_access_key, self.dynamodb_session_token
        return self.access_key_id, self.secret_access_key, self.session_token

    def _make_s3_client(self, timeout: float | None = None) -> S3Client:
        from botocore.config import Config
        from botocore.handlers import add_expect_header

        style = self.addressing_style or ("path" if self.endpoint_url else None)
        s3_settings: dict[str, Any] = {"addressing_style": style} if style else {}
        cap = CONNECT_TIMEOUT_SECONDS if timeout is None else min(CONNECT_TIMEOUT_SECONDS, timeout)
        read_cap = READ_TIMEOUT_SECONDS if timeout is None else min(READ_TIMEOUT_SECONDS, timeout)
        config = Config(
            connect_timeout=cap,
            read_timeout=read_cap,
            max_pool_connections=MAX_POOL_CONNECTIONS,
            retries={"mode": "standard", "total_max_attempts": 1},
            s3=s3_settings,  # type: ignore[arg-type]
            # Checksums only where S3 requires them: S3-compatible stores vary in support, and
            # delta-rs/object_store send none by default.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        session = self._session(self.access_key_id, self.secret_access_key, self.session_token)
        region = self.region or session.region_name or FALLBACK_REGION
        client = session.client("s3", endpoint_url=self.endpoint_url, region_name=region, config=config)
        # botocore sends every PutObject with "Expect: 100-continue", which costs a round trip
        # before the body goes out (and, on servers that answer 412 without reading the body,
        # a stall).  Commit files are small and commit latency is the table's throughput limit.
        client.meta.events.unregister("before-call.s3", add_expect_header)
        return client

    def _make_dynamodb_client(self) -> DynamoDBClient:
        from botocore.config import Config

        config = Config(
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            read_timeout=READ_TIMEOUT_SECONDS,
            max_pool_connections=MAX_POOL_CONNECTIONS,
            retries={"mode": "standard", "total_max_attempts": DYNAMODB_MAX_ATTEMPTS},
        )
        session = self._session(*self._dynamodb_credentials())
        region = self.dynamodb_region or self.region or session.region_name or FALLBACK_REGION
        return session.client("dynamodb", endpoint_url=self.effective_dynamodb_endpoint_url,
                              region_name=region, config=config)

    def _session(self, access_key_id: str | None, secret: str | None,
                 token: str | None) -> Session:
        import boto3.session
        from botocore.exceptions import ProfileNotFound

        # Explicit keys win over the profile, as in boto3; without keys the profile (or boto3's
        # own chain: environment, shared files, container and instance roles) supplies them.
        try:
            return boto3.session.Session(
                aws_access_key_id=access_key_id, aws_secret_access_key=secret,
                aws_session_token=token, profile_name=self.profile if access_key_id is None else None)
        except ProfileNotFound:
            raise StorageConfigError(
                f"{PROFILE} names the profile {self.profile!r}, which is not in the AWS config "
                "files (~/.aws/config, ~/.aws/credentials, or AWS_CONFIG_FILE / "
                "AWS_SHARED_CREDENTIALS_FILE)") from None


_CLIENTS: dict[tuple[Any, ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _cached(key: tuple[Any, ...], make: Any) -> Any:
    # Creating a client costs tens of milliseconds and clients are thread-safe, so one per
    # distinct setting serves every table and thread of the process.
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = make()
            _CLIENTS[key] = client
        return client


def clear_client_cache() -> None:
    """Forget cached clients (after credentials rotate, or between tests)."""
    with _CLIENTS_LOCK:
        _CLIENTS.clear()


def _shorten_key_id(key_id: str) -> str:
    return key_id[:4] + "…" if len(key_id) > 4 else "…"


# --------------------------------------------------------------------------- resolution


class _Options:
    """Lookup over storage options (any case) and then the environment."""

    def __init__(self, storage_options: Mapping[str, str], environ: Mapping[str, str]) -> None:
        self.opts: dict[str, str] = {}
        self.spelled: dict[str, str] = {}
        for key, value in storage_options.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise StorageConfigError(
                    f"storage options are strings, as in deltalake; got {key!r}: {value!r}")
            upper = key.upper()
            if upper not in self.opts or key == upper:
                self.opts[upper] = value
                self.spelled[upper] = key
        self.environ = environ

    def from_options(self, name: str) -> str | None:
        value = self.opts.get(name)
        return None if value is None else value.strip()

    def get(self, name: str, *env_names: str) -> str | None:
        value = self.from_options(name)
        if value is not None:
            return value or None
        for env_name in (name, *env_names):
            env_value = self.environ.get(env_name)
            if env_value is not None and env_value.strip():
                return env_value.strip()
        return None

    def source(self, name: str) -> str:
        if name in self.opts:
            return f"storage option {self.spelled[name]}"
        return f"environment variable {name}"


def resolve_aws_config(storage_options: Mapping[str, str] | None,
                       *, environ: Mapping[str, str] | None = None,
                       extra_keys: Collection[str] = ()) -> AwsConfig:
    """The AWS settings the options and environment describe; StorageConfigError if unusable.

    ``extra_keys`` names further options (upper-case) that the caller reads itself, so they are
    not reported as unknown.
    """
    options = dict(storage_options or {})
    env = os.environ if environ is None else environ
    _check_keys(options, extra_keys)
    o = _Options(options, env)

    endpoint_url = _endpoint(o, ENDPOINT_URL)
    allow_http = _bool(o, ALLOW_HTTP, False)
    if endpoint_url and endpoint_url.lower().startswith("http://") and not allow_http:
        raise StorageConfigError(
            f"{ENDPOINT_URL} {endpoint_url!r} uses plain HTTP, which is refused unless "
            f"{ALLOW_HTTP}=true is set (as deltalake requires)")

    access_key_id = o.get(ACCESS_KEY_ID)
    secret = o.get(SECRET_ACCESS_KEY)
    # A token belongs to the key it was issued with: take it from where the key came from.
    if access_key_id is None:
        token = None
    elif ACCESS_KEY_ID in o.opts:
        token = o.from_options(SESSION_TOKEN) or None
    else:
        token = o.get(SESSION_TOKEN)
    _check_key_pair(o, ACCESS_KEY_ID, SECRET_ACCESS_KEY, access_key_id, secret)

    ddb_key = o.get(ACCESS_KEY_ID_DYNAMODB)
    ddb_secret = o.get(SECRET_ACCESS_KEY_DYNAMODB)
    _check_key_pair(o, ACCESS_KEY_ID_DYNAMODB, SECRET_ACCESS_KEY_DYNAMODB, ddb_key, ddb_secret)

    return AwsConfig(
        endpoint_url=endpoint_url,
        region=o.get(REGION, DEFAULT_REGION_ENV),
        access_key_id=access_key_id,
        secret_access_key=secret,
        session_token=token,
        profile=o.get(PROFILE),
        allow_http=allow_http,
        addressing_style=_choice(o, ADDRESSING_STYLE, ("path", "virtual", "auto"), None),  # type: ignore[arg-type]
        locking_provider=_choice(o, LOCKING_PROVIDER, ("dynamodb",), None),  # type: ignore[arg-type]
        dynamo_table_name=o.get(DYNAMO_TABLE_NAME) or DEFAULT_DYNAMO_TABLE_NAME,
        dynamo_billing_mode=_choice(o, DYNAMO_BILLING_MODE, ("PAY_PER_REQUEST", "PROVISIONED"),  # type: ignore[arg-type]
                                    "PAY_PER_REQUEST", upper=True),
        dynamo_max_elapsed_request_time=_number(o, DYNAMO_MAX_ELAPSED_REQUEST_TIME,
                                                DEFAULT_DYNAMO_MAX_ELAPSED_REQUEST_TIME),
        dynamodb_endpoint_url=_endpoint(o, ENDPOINT_URL_DYNAMODB),
        dynamodb_region=o.get(REGION_DYNAMODB),
        dynamodb_access_key_id=ddb_key,
        dynamodb_secret_access_key=ddb_secret,
        dynamodb_session_token=o.get(SESSION_TOKEN_DYNAMODB) if ddb_key is not None else None,
        conditional_put=_conditional_put(o),
        dynamo_table_path_scheme=_choice(o, DYNAMO_TABLE_PATH_SCHEME, ("uri", "s3a", "s3"),  # type: ignore[arg-type]
                                         "uri"),
        dynamo_ttl_seconds=_ttl_seconds(o),
        dynamo_repair_grace_ms=int(_number(o, DYNAMO_REPAIR_GRACE_MS, DEFAULT_DYNAMO_REPAIR_GRACE_MS,
                                           integer=True, unit="milliseconds", allow_zero=True)),
        s3_conditional_writes=_bool(o, S3_CONDITIONAL_WRITES, True),
    )


def _check_keys(options: Mapping[str, str], extra_keys: Collection[str]) -> None:
    known = KNOWN_OPTIONS | IGNORED_OPTIONS | {k.upper() for k in extra_keys}
    for key in options:
        upper = key.upper()
        if upper in UNSUPPORTED_OPTIONS:
            raise StorageConfigError(
                f"storage option {key!r} is not supported by deltacommit: {UNSUPPORTED_OPTIONS[upper]}")
        if upper in known or not upper.startswith(_OUR_PREFIXES):
            continue
        close = difflib.get_close_matches(upper, sorted(KNOWN_OPTIONS | {k.upper() for k in extra_keys}),
                                          n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise StorageConfigError(f"unknown storage option {key!r}{hint}")


def _check_key_pair(o: _Options, key_name: str, secret_name: str,
                    key: str | None, secret: str | None) -> None:
    if (key is None) != (secret is None):
        given, missing = (key_name, secret_name) if key is not None else (secret_name, key_name)
        raise StorageConfigError(f"{given} is set ({o.source(given)}) but {missing} is not: "
                                 "set both or neither")


def _endpoint(o: _Options, name: str) -> str | None:
    value = o.get(name)
    if value is None:
        return None
    if "://" not in value:
        raise StorageConfigError(
            f"{name} must be a URL such as http://127.0.0.1:5000 or https://s3.example.com; "
            f"got {value!r} ({o.source(name)})")
    return value.rstrip("/")


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _bool(o: _Options, name: str, default: bool) -> bool:
    value = o.get(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise StorageConfigError(f"{name} must be true or false; got {value!r} ({o.source(name)})")


def _choice(o: _Options, name: str, allowed: tuple[str, ...], default: str | None,
            *, upper: bool = False) -> str | None:
    value = o.get(name)
    if value is None:
        return default
    normal = value.upper() if upper else value.lower()
    if normal not in allowed:
        raise StorageConfigError(
            f"{name} must be one of {', '.join(allowed)}; got {value!r} ({o.source(name)})")
    return normal


def _number(o: _Options, name: str, default: float, *, integer: bool = False,
            unit: str = "seconds", allow_zero: bool = False) -> float:
    value = o.get(name)
    if value is None:
        return default
    try:
        number = float(int(value)) if integer else float(value)
    except ValueError:
        kind = "a whole number" if integer else "a number"
        raise StorageConfigError(
            f"{name} must be {kind} of {unit}; got {value!r} ({o.source(name)})") from None
    if number < 0 or (number == 0 and not allow_zero):
        limit = "zero or positive" if allow_zero else "positive"
        raise StorageConfigError(f"{name} must be {limit}; got {value!r} ({o.source(name)})")
    return number


def _ttl_seconds(o: _Options) -> int:
    ttl = int(_number(o, DYNAMO_TTL_SECONDS, DEFAULT_DYNAMO_TTL_SECONDS, integer=True))
    if ttl < MIN_DYNAMO_TTL_SECONDS:
        raise StorageConfigError(
            f"{DYNAMO_TTL_SECONDS} must be at least {MIN_DYNAMO_TTL_SECONDS} seconds (one hour); "
            f"got {ttl} ({o.source(DYNAMO_TTL_SECONDS)}). A DynamoDB entry deleted by TTL while "
            "a writer has not yet seen its version lets that writer commit the version again; "
            "the default, as in Spark and delta-rs, is 86400 (one day)")
    return ttl


def _conditional_put(o: _Options) -> ConditionalPut:
    name = CONDITIONAL_PUT if o.get(CONDITIONAL_PUT) is not None else CONDITIONAL_PUT_ALIAS
    raw = o.get(CONDITIONAL_PUT) or o.from_options(CONDITIONAL_PUT_ALIAS)
    if not raw:
        return ConditionalPut()
    return parse_conditional_put(raw, f"{name.lower()} ({o.source(name)})")


def parse_conditional_put(value: str, where: str = "conditional_put") -> ConditionalPut:
    """``etag``, ``disabled`` or ``dynamo:<table>[:<timeout_ms>]``, whitespace tolerated."""
    text = value.strip()
    lowered = text.lower()
    if lowered in ("etag", "disabled"):
        return ConditionalPut(mode=lowered)  # type: ignore[arg-type]
    scheme, sep, rest = text.partition(":")
    if scheme.strip().lower() == "dynamo" and sep:
        table, _, timeout = rest.partition(":")
        table = table.strip()
        if not table:
            raise StorageConfigError(f"{where}: dynamo:<table>[:<timeout_ms>] needs a table name; "
                                     f"got {value!r}")
        if not timeout.strip():
            return ConditionalPut(mode="dynamo", dynamo_table=table)
        try:
            timeout_ms = int(timeout.strip())
        except ValueError:
            timeout_ms = 0
        if timeout_ms <= 0:
            raise StorageConfigError(f"{where}: the timeout in dynamo:<table>:<timeout_ms> must be "
                                     f"a positive number of milliseconds; got {value!r}")
        return ConditionalPut(mode="dynamo", dynamo_table=table, dynamo_timeout_ms=timeout_ms)
    raise StorageConfigError(
        f"{where} must be etag, disabled or dynamo:<table>[:<timeout_ms>]; got {value!r}")
