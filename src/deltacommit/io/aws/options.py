"""The storage options that configure AWS access, their names and their defaults.

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

from collections.abc import Mapping

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

#: Prefixes of the options this library owns: an unknown option with one is an error.
OPTION_PREFIXES = ("AWS_", "DELTA_", "DELTACOMMIT_")

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

#: ``botocore`` makes every S3 and DynamoDB client a botocore one; ``auto`` (the default) uses
#: the light client (``deltacommit.io.aws.light``) where it serves the settings exactly.  Read
#: from the environment only: it chooses a client, not a table's settings.
CLIENT_SWITCH = "DELTACOMMIT_AWS_CLIENT"
