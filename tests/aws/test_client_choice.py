"""Which settings the light client serves, and that it refuses everything else (pure: the
environment and the config file's state are given, nothing is sent).

Served: static keys (options or environment) with the region and endpoint from the options or
the environment.  Every case below it cannot reproduce exactly goes to botocore with a reason.
"""

from __future__ import annotations

import re

import pytest

from deltacommit.errors import StorageConfigError
from deltacommit.io.aws import resolve_aws_config
from deltacommit.io.aws.light.settings import S3Settings, light_dynamodb, light_s3

KEYS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"}
LOCAL = {"AWS_ENDPOINT_URL": "http://127.0.0.1:5000", "AWS_ALLOW_HTTP": "true"}
BASE_ENV = {"AWS_CONFIG_FILE": "/dev/null"}


def _s3(options: dict[str, str], env: dict[str, str] | None = None,
        config_file: bool = False) -> S3Settings | str:
    environ = {**BASE_ENV, **(env or {})}
    config = resolve_aws_config(options, environ=environ)
    return light_s3(config, environ=environ, config_file_exists=config_file)


@pytest.mark.parametrize(("options", "env"), [
    ({**KEYS, **LOCAL}, {}),
    (LOCAL, KEYS),                                          # Lambda: keys in the environment
    (LOCAL, {**KEYS, "AWS_SESSION_TOKEN": "tok"}),
    ({**KEYS, "AWS_REGION": "eu-west-1"}, {}),              # AWS's own endpoints
    (KEYS, {"AWS_DEFAULT_REGION": "ap-south-1"}),
    (KEYS, {"AWS_ENDPOINT_URL_S3": "http://localhost:4566"}),
    ({**KEYS, **LOCAL}, {"AWS_CA_BUNDLE": "/etc/ca.pem"}),  # plain HTTP needs no CA bundle
    ({**KEYS, **LOCAL}, {"DELTACOMMIT_AWS_CLIENT": "auto"}),
])
def test_static_keys_with_known_endpoints_are_served(options: dict[str, str],
                                                      env: dict[str, str]) -> None:
    assert isinstance(_s3(options, env), S3Settings)


@pytest.mark.parametrize(("options", "env", "config_file", "reason"), [
    ({**KEYS, **LOCAL}, {"DELTACOMMIT_AWS_CLIENT": "botocore"}, False, "DELTACOMMIT_AWS_CLIENT"),
    (LOCAL, {}, False, "no static keys"),                                  # instance/container role
    (LOCAL, {"AWS_WEB_IDENTITY_TOKEN_FILE": "/t", "AWS_ROLE_ARN": "arn"}, False, "no static keys"),
    ({**LOCAL, "AWS_PROFILE": "dev"}, {}, False, "static keys|profile"),
    ({**KEYS, **LOCAL}, {"AWS_PROFILE": "dev"}, False, "profile"),
    ({**KEYS, **LOCAL}, {"AWS_DEFAULT_PROFILE": "dev"}, False, "AWS_DEFAULT_PROFILE"),
    ({**KEYS, **LOCAL}, {}, True, "config file"),                          # SSO, endpoints, region
    ({**KEYS, "AWS_REGION": "eu-west-1"}, {"AWS_CA_BUNDLE": "/etc/ca.pem"}, False, "AWS_CA_BUNDLE"),
    ({**KEYS, "AWS_ENDPOINT_URL": "https://s3.example.com"}, {"REQUESTS_CA_BUNDLE": "/x.pem"},
     False, "REQUESTS_CA_BUNDLE"),
    ({**KEYS, **LOCAL}, {"HTTP_PROXY": "http://proxy:3128"}, False, "HTTP_PROXY"),
    ({**KEYS, **LOCAL}, {"https_proxy": "http://proxy:3128"}, False, "https_proxy"),
    ({**KEYS, "AWS_REGION": "eu-west-1"}, {"AWS_USE_FIPS_ENDPOINT": "true"}, False, "FIPS"),
    ({**KEYS, "AWS_REGION": "eu-west-1"}, {"AWS_USE_DUALSTACK_ENDPOINT": "true"}, False, "DUALSTACK"),
    ({**KEYS, "AWS_REGION": "us-east-1"}, {"AWS_S3_US_EAST_1_REGIONAL_ENDPOINT": "regional"},
     False, "US_EAST_1"),
    ({**KEYS, "AWS_REGION": "cn-north-1"}, {}, False, "partition"),
    ({**KEYS, "AWS_REGION": "us-gov-west-1"}, {}, False, "partition"),
    ({**KEYS, **LOCAL, "AWS_S3_ADDRESSING_STYLE": "virtual"}, {}, False, "virtual"),
    ({**KEYS, "AWS_ENDPOINT_URL": "http://127.0.0.1:5000/base", "AWS_ALLOW_HTTP": "true"}, {},
     False, "path"),
])
def test_everything_else_goes_to_botocore_with_a_reason(
        options: dict[str, str], env: dict[str, str], config_file: bool, reason: str) -> None:
    answer = _s3(options, env, config_file)
    assert isinstance(answer, str)
    assert re.search(reason, answer, re.IGNORECASE), answer


def test_dynamodb_uses_its_own_keys_region_and_endpoint() -> None:
    environ = dict(BASE_ENV)
    options = {**KEYS, **LOCAL, "AWS_REGION": "eu-west-1", "AWS_REGION_DYNAMODB": "us-west-2",
               "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:8000",
               "AWS_ACCESS_KEY_ID_DYNAMODB": "DDBKEY", "AWS_SECRET_ACCESS_KEY_DYNAMODB": "s2"}
    settings = light_dynamodb(resolve_aws_config(options, environ=environ), environ=environ,
                              config_file_exists=False)
    assert not isinstance(settings, str)
    assert (settings.region, settings.endpoint.url, settings.credentials.access_key_id) == (
        "us-west-2", "http://127.0.0.1:8000", "DDBKEY")


def test_dynamodb_without_static_keys_goes_to_botocore() -> None:
    environ = dict(BASE_ENV)
    answer = light_dynamodb(resolve_aws_config(LOCAL, environ=environ), environ=environ,
                            config_file_exists=False)
    assert isinstance(answer, str) and "no static keys" in answer


def test_a_misspelt_switch_is_refused_by_name() -> None:
    with pytest.raises(StorageConfigError, match="DELTACOMMIT_AWS_CLIENT must be auto or botocore"):
        _s3({**KEYS, **LOCAL}, {"DELTACOMMIT_AWS_CLIENT": "boto"})
