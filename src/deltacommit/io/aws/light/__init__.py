"""A small S3 and DynamoDB client without botocore, for the configurations it serves exactly.

Importing botocore and creating an S3 or DynamoDB client cost a cold process (a Lambda
function, a queue consumer) about as much as a whole write; the commit path needs a handful of
operations.  ``deltacommit.io.aws.config`` asks ``light_s3_client`` / ``light_dynamodb_client``
first and makes a botocore client only where they answer None: where the settings need
something only botocore does (profiles, SSO, web identity, container or instance credentials,
the config files, CA bundles, proxies, virtual-host addressing, FIPS or dual-stack endpoints,
ARNs), or ``DELTACOMMIT_AWS_CLIENT=botocore``.

``settings``
    whether a configuration is served, and the endpoint, region and keys it then uses
``sigv4``
    AWS Signature Version 4, pure
``http``
    keep-alive connections, thread-safe, every wait bounded
``protocol``
    one signed request, and error answers read into botocore's shapes
``s3``, ``dynamodb``
    the clients: botocore's method names, arguments, results and error codes
``errors``
    the failures, shaped as botocore's (``deltacommit.io.aws.errors`` reads both)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from deltacommit.io.aws.light.http import HttpPool
from deltacommit.io.aws.light.s3 import LightS3Client, endpoint_url_of
from deltacommit.io.aws.light.settings import CLIENT_SWITCH, AwsSettings, light_dynamodb, light_s3

if TYPE_CHECKING:
    from deltacommit.io.aws.light.dynamodb import LightDynamoDBClient

__all__ = ["CLIENT_SWITCH", "LightS3Client", "light_dynamodb_client", "light_s3_client"]

log = logging.getLogger(__name__)


def light_s3_client(config: AwsSettings, *, connect_timeout: float, read_timeout: float,
                    max_connections: int, fallback: Callable[[], Any]) -> LightS3Client | None:
    """A light S3 client for ``config``, or None where botocore must serve it."""
    settings = light_s3(config)
    if isinstance(settings, str):
        log.debug("S3 requests go through botocore: %s", settings)
        return None
    pool = HttpPool(connect_timeout=connect_timeout, read_timeout=read_timeout,
                    max_idle=max_connections)
    return LightS3Client(settings, pool, endpoint_url_of(settings, config.endpoint_url), fallback)


def light_dynamodb_client(config: AwsSettings, *, connect_timeout: float, read_timeout: float,
                          max_connections: int, max_attempts: int,
                          fallback: Callable[[], Any]) -> LightDynamoDBClient | None:
    """A light DynamoDB client for ``config``, or None where botocore must serve it."""
    settings = light_dynamodb(config)
    if isinstance(settings, str):
        log.debug("DynamoDB requests go through botocore: %s", settings)
        return None
    # The DynamoDB client's module loads with the first DynamoDB client: a writer on S3
    # conditional puts never needs it.
    from deltacommit.io.aws.light.dynamodb import LightDynamoDBClient

    pool = HttpPool(connect_timeout=connect_timeout, read_timeout=read_timeout,
                    max_idle=max_connections)
    endpoint_url = config.effective_dynamodb_endpoint_url or settings.endpoint.url
    return LightDynamoDBClient(settings, pool, endpoint_url, max_attempts, fallback)
