"""Resolved AWS settings of one table location, and the boto3 clients they make.

Which options exist, and how deltacommit reads them differently from deltalake, is described in
``deltacommit.io.aws.options``; how options and the environment become an ``AwsConfig`` in
``deltacommit.io.aws.resolve``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from deltacommit.errors import StorageConfigError
from deltacommit.io.aws.options import (
    CLIENT_SWITCH,
    DEFAULT_DYNAMO_COMMIT_TIMEOUT_MS,
    DEFAULT_DYNAMO_MAX_ELAPSED_REQUEST_TIME,
    DEFAULT_DYNAMO_REPAIR_GRACE_MS,
    DEFAULT_DYNAMO_TABLE_NAME,
    DEFAULT_DYNAMO_TTL_SECONDS,
    FALLBACK_REGION,
    PROFILE,
)
from deltacommit.runtime.process_state import ForkSafeLock, process_wide

if TYPE_CHECKING:
    from botocore.session import Session
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_s3 import S3Client

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
    """Resolved AWS settings of one table location.  Hashable: clients are cached by it.

    Its clients are the light ones of ``deltacommit.io.aws.light`` where these settings need
    nothing only botocore does, and botocore's otherwise (``DELTACOMMIT_AWS_CLIENT=botocore``:
    always); both have botocore's method names, results and error codes."""

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
        return _s3_client(self, timeout)

    def dynamodb_client(self) -> DynamoDBClient:
        """A shared boto3 DynamoDB client for these settings (botocore standard retries).

        A retried conditional write can fail its condition because its own first attempt
        succeeded with the response lost; callers that must know whether they won have to check
        the item (the Spark protocol compares ``tempPath``).
        """
        return _dynamodb_client(self)

    def dynamodb_credentials(self) -> tuple[str | None, str | None, str | None]:
        """Key id, secret and token for DynamoDB: the ``*_DYNAMODB`` ones when given."""
        if self.dynamodb_access_key_id is not None:
            return self.dynamodb_access_key_id, self.dynamodb_secret_access_key, self.dynamodb_session_token
        return self.access_key_id, self.secret_access_key, self.session_token


def client_identity(client: Any) -> tuple[str, str, str]:
    """Where and as whom a boto3 client sends its requests, as botocore resolved them: the
    endpoint (from the options, ``AWS_ENDPOINT_URL_<SERVICE>``, ``AWS_ENDPOINT_URL``, the
    config files, or the region's default), the region, and the access key id it signs with
    ("anonymous" without credentials).  What the settings that made it say can differ:
    botocore reads sources they do not name."""
    meta = getattr(client, "meta", None)
    endpoint = str(getattr(meta, "endpoint_url", "") or "")
    region = str(getattr(meta, "region_name", "") or "")
    if getattr(client, "light", False):
        return endpoint, region, str(client.signer_identity())
    signer = "anonymous"
    try:
        # botocore keeps the credentials a client signs with on its request signer; they are
        # resolved when the client is made.
        credentials = client._request_signer._credentials
        if credentials is not None:
            signer = str(credentials.get_frozen_credentials().access_key)
    except Exception:  # a client of another shape, or credentials that fail to resolve
        signer = "unknown"
    return endpoint, region, signer


def _shorten_key_id(key_id: str) -> str:
    return key_id[:4] + "…" if len(key_id) > 4 else "…"


# --------------------------------------------------------------------------- clients

# Creating a client costs tens of milliseconds and clients are thread-safe, so one per distinct
# setting serves every table and thread of the process.  botocore is imported only when a client
# is first asked for, so local use needs no AWS packages, and boto3 is not imported at all: its
# sessions add nothing a client needs.  The clients of one profile share one botocore session,
# whose loader reads each service model, the endpoint rules and the partitions once for the S3
# and DynamoDB clients alike (creating a session and its endpoint resolver costs as much as a
# client); a client made with keys from the options signs with those keys, a client made without
# with the session's credential chain.  Both caches are process-wide by design (what they hold
# is derived from settings and the environment alone); ``clear_client_cache`` empties them.
_CLIENTS: dict[tuple[Any, ...], Any] = {}
_SESSIONS: dict[str | None, Session] = {}
_CLIENTS_LOCK = ForkSafeLock()


def _forget_clients_in_child() -> None:
    """A forked child makes its own clients: the parent's pool the parent's sockets."""
    _CLIENTS.clear()
    _SESSIONS.clear()


process_wide("AWS clients and botocore sessions (io.aws.config)", _forget_clients_in_child)


def _cached(key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = make()
            _CLIENTS[key] = client
        return client


def clear_client_cache() -> None:
    """Forget cached clients and sessions (after credentials or the AWS config files change)."""
    with _CLIENTS_LOCK:
        _CLIENTS.clear()
        _SESSIONS.clear()


def _s3_client(config: AwsConfig, timeout: float | None) -> S3Client:
    key = ("s3", config.endpoint_url, config.region, config.access_key_id,
           config.secret_access_key, config.session_token, config.profile,
           config.addressing_style, timeout, os.environ.get(CLIENT_SWITCH))
    return _cached(key, lambda: _make_s3_client(config, timeout))  # type: ignore[no-any-return]


def _dynamodb_client(config: AwsConfig) -> DynamoDBClient:
    ak, sk, tok = config.dynamodb_credentials()
    key = ("dynamodb", config.effective_dynamodb_endpoint_url,
           config.dynamodb_region or config.region, ak, sk, tok, config.profile,
           os.environ.get(CLIENT_SWITCH))
    return _cached(key, lambda: _make_dynamodb_client(config))  # type: ignore[no-any-return]


def _make_s3_client(config: AwsConfig, timeout: float | None) -> S3Client:
    """The light client where it serves ``config`` exactly (``io.aws.light``), else botocore's."""
    from deltacommit.io.aws.light import light_s3_client

    cap = CONNECT_TIMEOUT_SECONDS if timeout is None else min(CONNECT_TIMEOUT_SECONDS, timeout)
    read_cap = READ_TIMEOUT_SECONDS if timeout is None else min(READ_TIMEOUT_SECONDS, timeout)
    light = light_s3_client(config, connect_timeout=cap, read_timeout=read_cap,
                            max_connections=MAX_POOL_CONNECTIONS,
                            fallback=lambda: _locked_botocore_s3_client(config, timeout))
    if light is not None:
        return light  # type: ignore[return-value]
    return _botocore_s3_client(config, timeout)


def _locked_botocore_s3_client(config: AwsConfig, timeout: float | None) -> S3Client:
    with _CLIENTS_LOCK:
        return _botocore_s3_client(config, timeout)


def _botocore_s3_client(config: AwsConfig, timeout: float | None) -> S3Client:
    from botocore.config import Config
    from botocore.handlers import add_expect_header

    style = config.addressing_style or ("path" if config.endpoint_url else None)
    s3_settings: dict[str, Any] = {"addressing_style": style} if style else {}
    cap = CONNECT_TIMEOUT_SECONDS if timeout is None else min(CONNECT_TIMEOUT_SECONDS, timeout)
    read_cap = READ_TIMEOUT_SECONDS if timeout is None else min(READ_TIMEOUT_SECONDS, timeout)
    botocore_config = Config(
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
    client: S3Client = _client("s3", config, (config.access_key_id, config.secret_access_key,
                                              config.session_token),
                               config.endpoint_url, config.region, botocore_config)
    # botocore sends every PutObject with "Expect: 100-continue", which costs a round trip
    # before the body goes out (and, on servers that answer 412 without reading the body,
    # a stall).  Commit files are small and commit latency is the table's throughput limit.
    client.meta.events.unregister("before-call.s3", add_expect_header)
    return client


def _make_dynamodb_client(config: AwsConfig) -> DynamoDBClient:
    """The light client where it serves ``config`` exactly (``io.aws.light``), else botocore's."""
    from deltacommit.io.aws.light import light_dynamodb_client

    light = light_dynamodb_client(
        config, connect_timeout=CONNECT_TIMEOUT_SECONDS, read_timeout=READ_TIMEOUT_SECONDS,
        max_connections=MAX_POOL_CONNECTIONS, max_attempts=DYNAMODB_MAX_ATTEMPTS,
        fallback=lambda: _locked_botocore_dynamodb_client(config))
    if light is not None:
        return light  # type: ignore[return-value]
    return _botocore_dynamodb_client(config)


def _locked_botocore_dynamodb_client(config: AwsConfig) -> DynamoDBClient:
    with _CLIENTS_LOCK:
        return _botocore_dynamodb_client(config)


def _botocore_dynamodb_client(config: AwsConfig) -> DynamoDBClient:
    from botocore.config import Config

    botocore_config = Config(
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        read_timeout=READ_TIMEOUT_SECONDS,
        max_pool_connections=MAX_POOL_CONNECTIONS,
        retries={"mode": "standard", "total_max_attempts": DYNAMODB_MAX_ATTEMPTS},
    )
    return _client(  # type: ignore[no-any-return]
        "dynamodb", config, config.dynamodb_credentials(), config.effective_dynamodb_endpoint_url,
        config.dynamodb_region or config.region, botocore_config)


def _client(service: str, config: AwsConfig, credentials: tuple[str | None, ...],
            endpoint_url: str | None, region: str | None, botocore_config: Any) -> Any:
    """A botocore client of ``service`` (called with ``_CLIENTS_LOCK`` held: botocore sessions
    are not thread-safe, their clients are)."""
    from botocore.exceptions import ProfileNotFound

    access_key_id, secret, token = credentials
    # Explicit keys win over the profile, as in boto3; without keys the profile (or botocore's
    # own chain: environment, shared files, container and instance roles) supplies them.
    profile = config.profile if access_key_id is None else None
    try:
        session = _session(profile)
        return session.create_client(
            service, region_name=region or session.get_config_variable("region")
            or FALLBACK_REGION, endpoint_url=endpoint_url, aws_access_key_id=access_key_id,
            aws_secret_access_key=secret, aws_session_token=token, config=botocore_config)
    except ProfileNotFound:
        raise StorageConfigError(
            f"{PROFILE} names the profile {config.profile!r}, which is not in the AWS config "
            "files (~/.aws/config, ~/.aws/credentials, or AWS_CONFIG_FILE / "
            "AWS_SHARED_CREDENTIALS_FILE)") from None


def _session(profile: str | None) -> Session:
    """The process's botocore session of ``profile`` (None: the default chain)."""
    session = _SESSIONS.get(profile)
    if session is None:
        import botocore.session

        session = botocore.session.Session(profile=profile)
        _SESSIONS[profile] = session
    return session
