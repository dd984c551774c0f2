"""AWS settings from storage options and the environment, named as deltalake names them."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from deltacommit.errors import StorageConfigError
from deltacommit.io.aws import (
    IGNORED_OPTIONS,
    AwsConfig,
    ConditionalPut,
    clear_client_cache,
    parse_conditional_put,
    resolve_aws_config,
)

ENDPOINT = "http://127.0.0.1:5000"


def resolve(options: dict[str, str] | None = None, env: dict[str, str] | None = None,
            **kwargs: Any) -> AwsConfig:
    return resolve_aws_config(options, environ=env or {}, **kwargs)


# --------------------------------------------------------------------------- lookup order


def test_defaults_without_options_or_environment() -> None:
    cfg = resolve()
    assert cfg == AwsConfig()
    assert cfg.dynamo_table_name == "delta_log"
    assert cfg.dynamo_ttl_seconds == 86_400
    assert cfg.conditional_put == ConditionalPut("etag")
    assert cfg.uses_s3_conditional_writes
    assert cfg.locking_provider is None


def test_storage_options_win_over_the_environment() -> None:
    cfg = resolve({"AWS_REGION": "eu-west-1"}, {"AWS_REGION": "us-west-2"})
    assert cfg.region == "eu-west-1"


def test_lowercase_and_mixed_case_option_names_are_read() -> None:
    cfg = resolve({"aws_region": "eu-west-1", "delta_dynamo_table_name": "locks",
                   "Aws_Allow_Http": "true", "aws_endpoint_url": ENDPOINT})
    assert (cfg.region, cfg.dynamo_table_name, cfg.allow_http, cfg.endpoint_url) == (
        "eu-west-1", "locks", True, ENDPOINT)


def test_the_exact_upper_case_name_wins_over_other_spellings() -> None:
    assert resolve({"aws_region": "a-1", "AWS_REGION": "b-2"}).region == "b-2"
    assert resolve({"AWS_REGION": "b-2", "aws_region": "a-1"}).region == "b-2"


def test_the_environment_fills_in_and_aws_default_region_is_read() -> None:
    env = {"AWS_DEFAULT_REGION": "ap-south-1", "AWS_ENDPOINT_URL": ENDPOINT, "AWS_ALLOW_HTTP": "1",
           "DELTA_DYNAMO_TABLE_NAME": "from_env", "AWS_S3_LOCKING_PROVIDER": "dynamodb"}
    cfg = resolve(None, env)
    assert cfg.region == "ap-south-1"
    assert cfg.endpoint_url == ENDPOINT
    assert cfg.dynamo_table_name == "from_env"
    assert cfg.locking_provider == "dynamodb"
    assert resolve(None, {**env, "AWS_REGION": "eu-north-1"}).region == "eu-north-1"


def test_credentials_and_session_tokens_stay_paired() -> None:
    cfg = resolve({"AWS_ACCESS_KEY_ID": "AKIAOPTIONS", "AWS_SECRET_ACCESS_KEY": "s"},
                  {"AWS_SESSION_TOKEN": "token-for-another-key"})
    assert (cfg.access_key_id, cfg.session_token) == ("AKIAOPTIONS", None)
    env = {"AWS_ACCESS_KEY_ID": "AKIAENV", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t"}
    assert resolve(None, env).session_token == "t"
    assert resolve(None, {"AWS_SESSION_TOKEN": "t"}).session_token is None
    with pytest.raises(StorageConfigError, match=r"AWS_ACCESS_KEY_ID is set .* AWS_SECRET_ACCESS_KEY is not"):
        resolve({"AWS_ACCESS_KEY_ID": "AKIA"})
    with pytest.raises(StorageConfigError, match="AWS_SECRET_ACCESS_KEY_DYNAMODB is set"):
        resolve({"AWS_SECRET_ACCESS_KEY_DYNAMODB": "s"})


def test_dynamodb_overrides() -> None:
    base = {"AWS_ENDPOINT_URL": ENDPOINT, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "eu-west-1",
            "AWS_ACCESS_KEY_ID": "AKIAS3", "AWS_SECRET_ACCESS_KEY": "s3secret"}
    cfg = resolve(base)
    # Without an own endpoint, DynamoDB goes where S3 goes (never silently to real AWS).
    assert cfg.effective_dynamodb_endpoint_url == ENDPOINT
    cfg = resolve({**base, "AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:8000",
                   "AWS_REGION_DYNAMODB": "us-east-2", "AWS_ACCESS_KEY_ID_DYNAMODB": "AKIADDB",
                   "AWS_SECRET_ACCESS_KEY_DYNAMODB": "ddbsecret", "AWS_SESSION_TOKEN_DYNAMODB": "ddbtok"})
    assert cfg.effective_dynamodb_endpoint_url == "http://127.0.0.1:8000"
    assert (cfg.dynamodb_region, cfg.dynamodb_access_key_id, cfg.dynamodb_session_token) == (
        "us-east-2", "AKIADDB", "ddbtok")
    client = cfg.dynamodb_client()
    assert client.meta.endpoint_url == "http://127.0.0.1:8000"
    assert client.meta.region_name == "us-east-2"
    assert cfg.s3_client().meta.region_name == "eu-west-1"


# --------------------------------------------------------------------------- validation


def test_unknown_options_that_look_like_ours_are_refused_with_suggestions() -> None:
    with pytest.raises(StorageConfigError, match=r"unknown storage option 'AWS_ENDPOINT'.*AWS_ENDPOINT_URL"):
        resolve({"AWS_ENDPOINT": ENDPOINT})
    with pytest.raises(StorageConfigError, match=r"'delta_dynamo_tablename'.*DELTA_DYNAMO_TABLE_NAME"):
        resolve({"delta_dynamo_tablename": "x"})
    with pytest.raises(StorageConfigError,
                       match=r"DELTACOMMIT_DYNAMO_TTL_SECOND'.*DELTACOMMIT_DYNAMO_TTL_SECONDS"):
        resolve({"DELTACOMMIT_DYNAMO_TTL_SECOND": "5"})
    with pytest.raises(StorageConfigError, match=r"unknown storage option 'AWS_ZZZZZZZZ'$"):
        resolve({"AWS_ZZZZZZZZ": "1"})


def test_options_deltalake_accepts_for_its_own_http_stack_are_ignored() -> None:
    assert "AWS_S3_POOL_IDLE_TIMEOUT_SECONDS" in IGNORED_OPTIONS
    options = dict.fromkeys(IGNORED_OPTIONS, "15")
    assert resolve(options) == AwsConfig()


def test_options_that_are_not_ours_pass_through() -> None:
    assert resolve({"timeout": "30s", "spark.some.setting": "x"}) == AwsConfig()


def test_extra_keys_named_by_the_caller_are_accepted() -> None:
    resolve({"DELTACOMMIT_SOMETHING_ELSE": "1"}, extra_keys=["DELTACOMMIT_SOMETHING_ELSE"])


def test_role_options_are_refused_rather_than_ignored() -> None:
    with pytest.raises(StorageConfigError, match=r"AWS_IAM_ROLE_ARN.*not supported.*AWS_PROFILE"):
        resolve({"AWS_IAM_ROLE_ARN": "arn:aws:iam::1:role/x"})


def test_plain_http_needs_allow_http() -> None:
    with pytest.raises(StorageConfigError, match=r"plain HTTP.*AWS_ALLOW_HTTP=true"):
        resolve({"AWS_ENDPOINT_URL": ENDPOINT})
    assert resolve({"AWS_ENDPOINT_URL": "https://s3.example.com/"}).endpoint_url == "https://s3.example.com"
    # DynamoDB endpoints are not subject to it, as in deltalake.
    assert resolve({"AWS_ENDPOINT_URL_DYNAMODB": "http://127.0.0.1:8000"}).dynamodb_endpoint_url


def test_endpoints_must_be_urls() -> None:
    with pytest.raises(StorageConfigError, match=r"AWS_ENDPOINT_URL must be a URL.*'localhost:9000'"):
        resolve({"AWS_ENDPOINT_URL": "localhost:9000"})


@pytest.mark.parametrize(("options", "message"), [
    ({"AWS_ALLOW_HTTP": "maybe"}, "AWS_ALLOW_HTTP must be true or false; got 'maybe'"),
    ({"AWS_S3_LOCKING_PROVIDER": "dynamo"}, "AWS_S3_LOCKING_PROVIDER must be one of dynamodb"),
    ({"AWS_S3_ADDRESSING_STYLE": "host"}, "must be one of path, virtual, auto"),
    ({"DELTA_DYNAMO_BILLING_MODE": "cheap"}, "PAY_PER_REQUEST, PROVISIONED"),
    ({"DELTACOMMIT_DYNAMO_TTL_SECONDS": "1.5"}, "whole number"),
    ({"DELTACOMMIT_DYNAMO_TTL_SECONDS": "-1"}, "must be positive"),
    ({"DELTACOMMIT_DYNAMO_TTL_SECONDS": "600"}, "must be at least 3600 seconds"),
    ({"DELTA_DYNAMO_MAX_ELAPSED_REQUEST_TIME": "soon"}, "must be a number"),
    ({"DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME": "gs"}, "uri, s3a, s3"),
    ({"DELTACOMMIT_S3_CONDITIONAL_WRITES": "nope"}, "must be true or false"),
])
def test_bad_values_are_refused_with_the_option_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(StorageConfigError, match=message) as info:
        resolve(options)
    assert f"storage option {next(iter(options))}" in str(info.value)


def test_bad_values_from_the_environment_name_the_variable() -> None:
    with pytest.raises(StorageConfigError, match="environment variable AWS_ALLOW_HTTP"):
        resolve(None, {"AWS_ALLOW_HTTP": "perhaps"})


def test_values_are_normalised() -> None:
    cfg = resolve({"AWS_S3_LOCKING_PROVIDER": " DynamoDB ", "DELTA_DYNAMO_BILLING_MODE": "provisioned",
                   "AWS_S3_ADDRESSING_STYLE": "Virtual", "DELTACOMMIT_DYNAMO_TTL_SECONDS": "3600",
                   "DELTA_DYNAMO_MAX_ELAPSED_REQUEST_TIME": "2.5"})
    assert cfg.locking_provider == "dynamodb"
    assert cfg.dynamo_billing_mode == "PROVISIONED"
    assert cfg.addressing_style == "virtual"
    assert cfg.dynamo_ttl_seconds == 3600
    assert cfg.dynamo_max_elapsed_request_time == 2.5


# --------------------------------------------------------------------------- conditional_put


@pytest.mark.parametrize(("value", "expected"), [
    ("etag", ConditionalPut("etag")),
    (" ETag ", ConditionalPut("etag")),
    ("disabled", ConditionalPut("disabled")),
    ("dynamo:locks", ConditionalPut("dynamo", "locks", 20_000)),
    ("dynamo: table:1300", ConditionalPut("dynamo", "table", 1300)),
    (" dynamo : my-table : 500 ", ConditionalPut("dynamo", "my-table", 500)),
])
def test_conditional_put_values(value: str, expected: ConditionalPut) -> None:
    assert parse_conditional_put(value) == expected


@pytest.mark.parametrize("value", ["dynamo:", "dynamo: :100", "dynamo:t:0", "dynamo:t:soon", "lease",
                                   "dynamo"])
def test_bad_conditional_put_values(value: str) -> None:
    with pytest.raises(StorageConfigError, match="conditional_put"):
        parse_conditional_put(value)


def test_conditional_put_option_names() -> None:
    assert resolve({"conditional_put": "dynamo:a"}).conditional_put.dynamo_table == "a"
    assert resolve({"aws_conditional_put": "dynamo:b"}).conditional_put.dynamo_table == "b"
    assert resolve(None, {"AWS_CONDITIONAL_PUT": "dynamo:c"}).conditional_put.dynamo_table == "c"
    assert not resolve({"conditional_put": "disabled"}).uses_s3_conditional_writes
    assert not resolve({"DELTACOMMIT_S3_CONDITIONAL_WRITES": "false"}).uses_s3_conditional_writes
    with pytest.raises(StorageConfigError,
                       match=r"aws_conditional_put \(storage option aws_conditional_put\)"):
        resolve({"aws_conditional_put": "sometimes"})


# --------------------------------------------------------------------------- derived values


def test_dynamo_table_path() -> None:
    assert resolve().dynamo_table_path("s3://b/t/") == "s3://b/t"
    s3a = resolve({"DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME": "s3a"})
    assert s3a.dynamo_table_path("s3://b/warehouse/t") == "s3a://b/warehouse/t"
    assert s3a.dynamo_table_path("s3a://b/t/") == "s3a://b/t"
    s3 = resolve({"DELTACOMMIT_DYNAMO_TABLE_PATH_SCHEME": "s3"})
    assert s3.dynamo_table_path("s3a://b/t") == "s3://b/t"


def test_secrets_never_appear_in_repr_or_redacted() -> None:
    cfg = resolve({"AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI",
                   "AWS_SESSION_TOKEN": "FwoGZXIvYXdzEtoken", "AWS_ACCESS_KEY_ID_DYNAMODB": "AKIADYNAMO",
                   "AWS_SECRET_ACCESS_KEY_DYNAMODB": "dynamosecret"})
    text = repr(cfg) + str(cfg.redacted())
    for secret in ("wJalrXUtnFEMI", "FwoGZXIvYXdzEtoken", "dynamosecret", "AKIAIOSFODNN7EXAMPLE"):
        assert secret not in text
    assert cfg.redacted()["access_key_id"] == "AKIA…"
    assert cfg.redacted()["secret_access_key"] == "<redacted>"
    assert cfg.redacted()["conditional_put"] == "etag"


# --------------------------------------------------------------------------- clients


def test_clients_are_cached_per_setting_and_created_once_under_concurrency() -> None:
    clear_client_cache()
    cfg = resolve({"AWS_ENDPOINT_URL": ENDPOINT, "AWS_ALLOW_HTTP": "true",
                   "AWS_ACCESS_KEY_ID": "AKIACACHE", "AWS_SECRET_ACCESS_KEY": "s"})
    seen: list[object] = []
    barrier = threading.Barrier(8)

    def grab() -> None:
        barrier.wait()
        seen.append(cfg.s3_client())

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in seen}) == 1
    # Settings that do not concern S3 share the client; ones that do get their own.
    assert resolve({**_opts(cfg), "DELTA_DYNAMO_TABLE_NAME": "other"}).s3_client() is seen[0]
    assert resolve({**_opts(cfg), "AWS_REGION": "eu-west-3"}).s3_client() is not seen[0]
    assert cfg.dynamodb_client() is cfg.dynamodb_client()


def _opts(cfg: AwsConfig) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": cfg.endpoint_url or "", "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": cfg.access_key_id or "", "AWS_SECRET_ACCESS_KEY": "s"}


def test_client_settings() -> None:
    cfg = resolve({"AWS_ENDPOINT_URL": ENDPOINT, "AWS_ALLOW_HTTP": "true"})
    s3 = cfg.s3_client()
    assert s3.meta.config.s3 == {"addressing_style": "path"}  # type: ignore[attr-defined]
    assert s3.meta.config.retries["total_max_attempts"] == 1  # type: ignore[attr-defined]
    assert s3.meta.config.max_pool_connections >= 32  # type: ignore[attr-defined]
    ddb = cfg.dynamodb_client()
    assert ddb.meta.config.retries["mode"] == "standard"  # type: ignore[attr-defined]
    assert ddb.meta.config.retries["total_max_attempts"] > 1  # type: ignore[attr-defined]
    assert ddb.meta.endpoint_url == ENDPOINT
    virtual = resolve({"AWS_ENDPOINT_URL": ENDPOINT, "AWS_ALLOW_HTTP": "true",
                       "AWS_S3_ADDRESSING_STYLE": "virtual"}).s3_client()
    assert virtual.meta.config.s3 == {"addressing_style": "virtual"}  # type: ignore[attr-defined]


def test_a_missing_profile_is_named() -> None:
    # The test environment points AWS_CONFIG_FILE at an empty file: no profile exists.
    with pytest.raises(StorageConfigError, match="AWS_PROFILE names the profile 'analytics'"):
        resolve({"AWS_PROFILE": "analytics"}).s3_client()


def test_option_values_must_be_strings() -> None:
    with pytest.raises(StorageConfigError, match=r"strings.*'AWS_ALLOW_HTTP': True"):
        resolve({"AWS_ALLOW_HTTP": True})  # type: ignore[dict-item]


# --------------------------------------------------------------------------- the retry policy


def test_one_retry_policy_states_each_callers_limits() -> None:
    from deltacommit.io.aws.retry import (
        LEASED_WRITES,
        S3_REQUESTS,
        RetryPolicy,
        dynamodb_throttling,
    )
    from deltacommit.runtime.clock import RandomSource

    rng = RandomSource(3)
    # The S3 store: six requests, delays below 2 s.
    assert [S3_REQUESTS.exhausted(n) for n in (5, 6)] == [False, True]
    assert all(S3_REQUESTS.delay(r, rng) <= min(2.0, 0.05 * 2 ** (r - 1)) for r in range(1, 12))
    # Writes under a lease: no limit of their own (the lease ends them), delays below 1 s.
    assert not LEASED_WRITES.exhausted(10_000, elapsed=1e9)
    assert max(LEASED_WRITES.delay(40, rng) for _ in range(200)) <= 1.0
    # DynamoDB throttling: until the elapsed-time limit, the last pause cut to end at it.
    throttled = dynamodb_throttling(60.0)
    assert (throttled.exhausted(1_000, 59.9), throttled.exhausted(1, 60.0)) == (False, True)
    assert max(throttled.delay(30, rng) for _ in range(200)) <= 5.0
    assert throttled.pause(30, rng, elapsed=59.99) <= 0.01 + 1e-9
    assert RetryPolicy(max_attempts=None).pause(1, rng, elapsed=1e9) <= 0.05
