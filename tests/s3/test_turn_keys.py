"""The name of a table's host turn (``host_turn.turn_key``) comes from what the clients resolved.

Two tables that are not the same (one bucket name on two endpoints, in two regions, under two
accounts, behind two DynamoDB tables) never share a turn, whichever source the setting came
from (botocore honours ``AWS_ENDPOINT_URL_S3``, which the storage options never see); two
spellings of one table (``s3a://``, ``s3://``, a trailing slash) always do.  No request is
made: the clients are only built.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from deltacommit.engine.commit.host_turn import turn_key
from deltacommit.io.aws.config import clear_client_cache
from deltacommit.io.logstore import open_log_store

BASE = {"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_ALLOW_HTTP": "true"}
STAGING, PRODUCTION = "http://127.0.0.1:9001", "http://127.0.0.1:9002"


@pytest.fixture(autouse=True)
def fresh_clients() -> Iterator[None]:
    """Clients are cached by their settings, not by the environment they were made in."""
    clear_client_cache()
    yield
    clear_client_cache()


def key(uri: str, options: Mapping[str, str]) -> str:
    clear_client_cache()
    made = turn_key(open_log_store(uri, dict(options)))
    assert made is not None
    return made


def test_an_endpoint_from_the_environment_names_another_turn(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", STAGING)
    staging = key("s3://b/t", BASE)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", PRODUCTION)
    production = key("s3://b/t", BASE)
    assert staging != production
    # The same endpoint given as an option is the same table.
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    assert key("s3://b/t", {**BASE, "AWS_ENDPOINT_URL": STAGING}) == staging


def test_region_credentials_and_profile_name_other_turns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options = {**BASE, "AWS_ENDPOINT_URL": STAGING}
    first = key("s3://b/t", options)
    assert key("s3://b/t", {**options, "AWS_REGION": "eu-west-1"}) != first
    assert key("s3://b/t", {**options, "AWS_ACCESS_KEY_ID": "another-account"}) != first
    # Credentials from a profile: the key id it resolves to, whatever the profile is called.
    credentials = tmp_path / "credentials"
    credentials.write_text("[staging]\naws_access_key_id = testing\naws_secret_access_key = x\n"
                           "[production]\naws_access_key_id = prod-key\n"
                           "aws_secret_access_key = y\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    keyless = {k: v for k, v in options.items() if not k.startswith("AWS_SECRET")
               and k != "AWS_ACCESS_KEY_ID"}
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    staging = key("s3://b/t", {**keyless, "AWS_PROFILE": "staging"})
    production = key("s3://b/t", {**keyless, "AWS_PROFILE": "production"})
    assert staging == first and production != first


def test_every_spelling_of_one_table_names_one_turn() -> None:
    options = {**BASE, "AWS_ENDPOINT_URL": STAGING}
    spellings = ["s3://b/t", "s3a://b/t", "s3a://b/t/", "s3n://b/t", "s3://b//t"]
    assert len({key(uri, options) for uri in spellings}) == 1
    assert key("s3://b/u", options) != key("s3://b/t", options)
    assert key("s3://c/t", options) != key("s3://b/t", options)


def test_the_dynamodb_table_and_endpoint_name_the_turn_but_not_the_table_paths_spelling(
        monkeypatch: pytest.MonkeyPatch) -> None:
    options = {**BASE, "AWS_ENDPOINT_URL": STAGING, "AWS_S3_LOCKING_PROVIDER": "dynamodb",
               "DELTA_DYNAMO_TABLE_NAME": "delta_log"}
    first = key("s3://b/t", options)
    assert key("s3a://b/t", options) == first  # its tablePath differs, the table does not
    assert key("s3://b/t", {**options, "DELTA_DYNAMO_TABLE_NAME": "other_log"}) != first
    assert key("s3://b/t", {**options, "AWS_ENDPOINT_URL_DYNAMODB": PRODUCTION}) != first
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", PRODUCTION)
    assert key("s3://b/t", options) != first
    monkeypatch.delenv("AWS_ENDPOINT_URL_DYNAMODB")
    # Another mechanism is another turn (the two do not exclude each other anyway).
    conditional = {k: v for k, v in options.items() if k != "AWS_S3_LOCKING_PROVIDER"}
    assert key("s3://b/t", conditional) != first


def test_local_spellings_of_one_folder_name_one_turn(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "t")
    spellings = [str(tmp_path / "t"), f"file://{tmp_path}/t", str(tmp_path / "link"),
                 f"{tmp_path}/./t/"]
    assert len({key(uri, {}) for uri in spellings}) == 1
    assert key(str(tmp_path / "u"), {}) != key(str(tmp_path / "t"), {})


def test_what_a_process_keeps_per_table_is_kept_apart_as_the_turns_are(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's table states (``state_cache``) and what its DynamoDB log stores
    established (``logstore.knowledge``) are keyed by the same resolved values: a bucket of
    one name behind another endpoint from the environment shares neither."""
    from deltacommit.engine.snapshot import state_cache
    from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore

    options = {**BASE, "AWS_S3_LOCKING_PROVIDER": "dynamodb",
               "AWS_ENDPOINT_URL_DYNAMODB": STAGING}
    opened = {}
    for name, endpoint in (("staging", STAGING), ("production", PRODUCTION)):
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
        clear_client_cache()
        opened[name] = open_log_store("s3://b/t", options)
    staging, production = opened["staging"], opened["production"]
    assert isinstance(staging, DynamoDBLogStore) and isinstance(production, DynamoDBLogStore)
    assert staging._k is not production._k
    assert state_cache.key_of(staging, options) != state_cache.key_of(production, options)
    # One table opened twice shares both (the knowledge per tablePath spelling).
    again = open_log_store("s3://b/t", options)
    assert again._k is production._k  # type: ignore[attr-defined]
    assert state_cache.key_of(again, options) == state_cache.key_of(production, options)
