"""AWS access: settings from ``storage_options`` and the environment, clients, and what every
AWS layer shares.

``options``
    the option names (deltalake's) and their defaults
``config``
    ``AwsConfig``: the resolved settings of one table location, and the boto3 clients they
    make (created once per distinct setting and shared)
``resolve``
    ``resolve_aws_config``: options and environment to ``AwsConfig``, every value checked
``retry``
    the one retry and backoff policy of S3 and DynamoDB requests
``errors``
    botocore's failures read one way (imports botocore)
``dynamodb_admin``
    creating, describing and waiting for the DynamoDB tables of the commit protocols (imports
    botocore)

Importing this package imports neither boto3 nor botocore, so local use needs no AWS packages.
It offers every name ``deltacommit.io.aws`` offered as a single module (options, ``AwsConfig``,
``resolve_aws_config``, ...), and ``RetryPolicy``.
"""

from deltacommit.io.aws.config import (
    CONNECT_TIMEOUT_SECONDS,
    DYNAMODB_MAX_ATTEMPTS,
    MAX_POOL_CONNECTIONS,
    READ_TIMEOUT_SECONDS,
    AddressingStyle,
    AwsConfig,
    ConditionalPut,
    ConditionalPutMode,
    TablePathScheme,
    clear_client_cache,
)
from deltacommit.io.aws.options import (
    ACCESS_KEY_ID,
    ACCESS_KEY_ID_DYNAMODB,
    ADDRESSING_STYLE,
    ALLOW_HTTP,
    CONDITIONAL_PUT,
    CONDITIONAL_PUT_ALIAS,
    DEFAULT_DYNAMO_COMMIT_TIMEOUT_MS,
    DEFAULT_DYNAMO_MAX_ELAPSED_REQUEST_TIME,
    DEFAULT_DYNAMO_REPAIR_GRACE_MS,
    DEFAULT_DYNAMO_TABLE_NAME,
    DEFAULT_DYNAMO_TTL_SECONDS,
    DEFAULT_REGION_ENV,
    DYNAMO_BILLING_MODE,
    DYNAMO_MAX_ELAPSED_REQUEST_TIME,
    DYNAMO_REPAIR_GRACE_MS,
    DYNAMO_TABLE_NAME,
    DYNAMO_TABLE_PATH_SCHEME,
    DYNAMO_TTL_SECONDS,
    ENDPOINT_URL,
    ENDPOINT_URL_DYNAMODB,
    FALLBACK_REGION,
    IGNORED_OPTIONS,
    KNOWN_OPTIONS,
    LOCKING_PROVIDER,
    MIN_DYNAMO_TTL_SECONDS,
    PROFILE,
    REGION,
    REGION_DYNAMODB,
    S3_CONDITIONAL_WRITES,
    SECRET_ACCESS_KEY,
    SECRET_ACCESS_KEY_DYNAMODB,
    SESSION_TOKEN,
    SESSION_TOKEN_DYNAMODB,
    UNSUPPORTED_OPTIONS,
)
from deltacommit.io.aws.resolve import parse_conditional_put, resolve_aws_config
from deltacommit.io.aws.retry import RetryPolicy

__all__ = [
    "ACCESS_KEY_ID", "ACCESS_KEY_ID_DYNAMODB", "ADDRESSING_STYLE", "ALLOW_HTTP", "CONDITIONAL_PUT",
    "CONDITIONAL_PUT_ALIAS", "CONNECT_TIMEOUT_SECONDS", "DEFAULT_DYNAMO_COMMIT_TIMEOUT_MS",
    "DEFAULT_DYNAMO_MAX_ELAPSED_REQUEST_TIME", "DEFAULT_DYNAMO_REPAIR_GRACE_MS",
    "DEFAULT_DYNAMO_TABLE_NAME", "DEFAULT_DYNAMO_TTL_SECONDS", "DEFAULT_REGION_ENV",
    "DYNAMODB_MAX_ATTEMPTS", "DYNAMO_BILLING_MODE", "DYNAMO_MAX_ELAPSED_REQUEST_TIME",
    "DYNAMO_REPAIR_GRACE_MS", "DYNAMO_TABLE_NAME", "DYNAMO_TABLE_PATH_SCHEME", "DYNAMO_TTL_SECONDS",
    "ENDPOINT_URL", "ENDPOINT_URL_DYNAMODB", "FALLBACK_REGION", "IGNORED_OPTIONS", "KNOWN_OPTIONS",
    "LOCKING_PROVIDER", "MAX_POOL_CONNECTIONS", "MIN_DYNAMO_TTL_SECONDS", "PROFILE",
    "READ_TIMEOUT_SECONDS", "REGION", "REGION_DYNAMODB", "S3_CONDITIONAL_WRITES",
    "SECRET_ACCESS_KEY", "SECRET_ACCESS_KEY_DYNAMODB", "SESSION_TOKEN", "SESSION_TOKEN_DYNAMODB",
    "UNSUPPORTED_OPTIONS", "AddressingStyle", "AwsConfig", "ConditionalPut", "ConditionalPutMode",
    "RetryPolicy", "TablePathScheme", "clear_client_cache", "parse_conditional_put",
    "resolve_aws_config",
]
