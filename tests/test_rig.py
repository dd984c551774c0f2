"""The test rig itself: local servers start and stop, and their conditional writes are atomic.

The S3 races run on each S3 implementation (moto, LocalStack's own provider): a conditional
write is only as atomic as the server's code for it.

Every exclusion test in the suite is only as good as the server under it: a server that lets
two racing conditional writes both succeed would make a lost-commit bug look like a pass, or a
correct log store look broken.  These tests count winners of forced races on each server.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.handlers import add_expect_header

from deltacommit.testing import (
    Dynalite,
    DynaliteNotInstalledError,
    LocalStackS3,
    MotoServer,
    S3Bucket,
    S3Implementation,
    find_python,
    localstack_unavailable,
    port_is_open,
    race,
    unique_name,
    wait_table_active,
)

CONTENDERS = 8
KEYS = 120


def _answers(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(endpoint + "/", timeout=5):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def _client(service: str, endpoint: str) -> Any:
    # No client-side retries: a retried conditional write would blur who won.
    config = Config(retries={"mode": "standard", "total_max_attempts": 1},
                    max_pool_connections=CONTENDERS * 2)
    client = boto3.client(service, endpoint_url=endpoint, region_name="us-east-1", config=config)
    # moto answers a 412 without reading the body; with "Expect: 100-continue" that stalls.
    client.meta.events.unregister("before-call.s3", add_expect_header)
    return client


# --------------------------------------------------------------------------- start and stop


def test_moto_starts_answers_and_stops_with_its_port_closed() -> None:
    server = MotoServer()
    server.start()
    try:
        assert server.running
        assert _answers(server.endpoint)
        port = server.port
        assert port is not None
    finally:
        server.stop()
    assert not server.running
    assert not port_is_open(port)


def test_dynalite_starts_answers_and_stops_with_its_port_closed(dynalite_server: Dynalite) -> None:
    # A second instance beside the session's: each binds its own port.
    with Dynalite(dynalite_server.package_dir) as server:
        port = server.port
        assert port is not None and port != dynalite_server.port
        client = _client("dynamodb", server.endpoint)
        assert client.list_tables()["TableNames"] == []
    assert not port_is_open(port)
    assert dynalite_server.running


def test_localstack_answers_s3_and_stops_with_its_port_and_folder_gone(
        localstack_server: LocalStackS3) -> None:
    client = _client("s3", localstack_server.endpoint)
    client.create_bucket(Bucket="rig-localstack")
    client.put_object(Bucket="rig-localstack", Key="k", Body=b"1")
    assert client.get_object(Bucket="rig-localstack", Key="k")["Body"].read() == b"1"
    # A second instance beside the session's: its own port and its own folder, both gone
    # once it stops.
    with LocalStackS3(localstack_server.python) as server:
        port, root = server.port, server.root
        assert port is not None and port != localstack_server.port
        assert root is not None and Path(root).is_dir()
        assert _client("s3", server.endpoint).list_buckets()["Buckets"] == []
    assert not port_is_open(port)
    assert not Path(root).exists()
    assert localstack_server.running


def test_without_python_3_13_localstack_tests_are_skipped_with_the_reason(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    assert find_python((3, 13)) is None
    reason = localstack_unavailable()
    assert not reason.installable
    assert "Python 3.13 is not available" in str(reason) and "skipped" in str(reason)


def test_a_missing_dynalite_says_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(DynaliteNotInstalledError, match=r"run `make test`"):
        Dynalite(tmp_path / "node_modules" / "dynalite")


def test_moto_reset_forgets_buckets(moto_server: MotoServer) -> None:
    # A private server: resetting the session's would pull buckets from under other tests.
    with MotoServer() as server:
        client = _client("s3", server.endpoint)
        client.create_bucket(Bucket="before-reset")
        server.reset()
        assert client.list_buckets()["Buckets"] == []
    assert moto_server.running


def test_moto_reports_the_cpu_time_its_requests_cost(moto_server: MotoServer) -> None:
    # The benchmark divides this by its run's wall time: how busy the one server thread was.
    client = _client("s3", moto_server.endpoint)
    client.create_bucket(Bucket="cpu-seconds")
    before = moto_server.cpu_seconds()
    assert before is not None and before > 0
    for i in range(200):
        client.put_object(Bucket="cpu-seconds", Key=f"k{i}", Body=b"x")
    after = moto_server.cpu_seconds()
    assert after is not None and after > before
    stopped = MotoServer()
    assert stopped.cpu_seconds() is None  # never started: nothing to report


def test_s3_bucket_fixture_gives_an_empty_bucket_and_options(s3_bucket: S3Bucket,
                                                            moto_server: MotoServer) -> None:
    assert s3_bucket.storage_options["AWS_ENDPOINT_URL"] == moto_server.endpoint
    assert s3_bucket.storage_options["AWS_ALLOW_HTTP"] == "true"
    client = _client("s3", moto_server.endpoint)
    assert client.list_objects_v2(Bucket=s3_bucket.name).get("KeyCount") == 0


# --------------------------------------------------------------------------- atomicity


def _won(call: Any) -> bool:
    """Whether a conditional write won: 412 (and 409, which S3 may answer to a conditional
    write racing another on the same key) is a loss, anything else an error."""
    try:
        call()
    except ClientError as e:
        if e.response["Error"]["Code"] in ("PreconditionFailed", "ConditionalRequestConflict"):
            return False
        raise
    return True


def test_s3_if_none_match_has_exactly_one_winner_per_key(any_s3_bucket: S3Bucket,
                                                        s3_server: S3Implementation) -> None:
    client = _client("s3", s3_server.endpoint)
    bodies: dict[str, bytes] = {}

    def attempt(index: int, key: str) -> bool:
        body = f"writer {index}".encode()
        won = _won(lambda: client.put_object(Bucket=any_s3_bucket.name, Key=key, Body=body,
                                             IfNoneMatch="*"))
        if won:
            bodies[key] = body
        return won

    keys = [f"_delta_log/{v:020d}.json" for v in range(KEYS)]
    wins = race(keys, CONTENDERS, attempt)
    assert {k: n for k, n in wins.items() if n != 1} == {}
    assert sum(wins.values()) == KEYS
    for key in keys[:10]:  # the object holds the winner's bytes
        assert client.get_object(Bucket=any_s3_bucket.name, Key=key)["Body"].read() == bodies[key]


def test_s3_if_match_has_exactly_one_winner_per_version_read(any_s3_bucket: S3Bucket,
                                                            s3_server: S3Implementation) -> None:
    """Contenders that all read the same ETag replace the object: one wins, the rest get 412
    (``_last_checkpoint`` and DynamoCommit-free replaces rest on this)."""
    client = _client("s3", s3_server.endpoint)
    keys = [f"_delta_log/_last_checkpoint-{i}" for i in range(KEYS // 4)]
    etags = {k: client.put_object(Bucket=any_s3_bucket.name, Key=k, Body=b"read")["ETag"]
             for k in keys}

    def attempt(index: int, key: str) -> bool:
        return _won(lambda: client.put_object(Bucket=any_s3_bucket.name, Key=key, IfMatch=etags[key],
                                              Body=f"writer {index}".encode()))

    wins = race(keys, CONTENDERS, attempt)
    assert {k: n for k, n in wins.items() if n != 1} == {}


def _multipart(client: Any, bucket: str, key: str, body: bytes) -> tuple[str, str]:
    """A multipart upload of one part, uploaded and not yet completed: (upload id, part ETag)."""
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    part = client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=body)
    return upload, part["ETag"]


def _complete(client: Any, bucket: str, key: str, upload: tuple[str, str]) -> None:
    client.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload[0], IfNoneMatch="*",
        MultipartUpload={"Parts": [{"ETag": upload[1], "PartNumber": 1}]})


def test_s3_multipart_completion_with_if_none_match_never_replaces(
        any_s3_bucket: S3Bucket, s3_server: S3Implementation) -> None:
    """A large object written in parts is created exactly once as well: completing an upload
    with ``If-None-Match: *`` fails on an existing key (412) and changes nothing."""
    client = _client("s3", s3_server.endpoint)
    bucket = any_s3_bucket.name
    client.put_object(Bucket=bucket, Key="taken", Body=b"first")
    late = _multipart(client, bucket, "taken", b"second")
    assert not _won(lambda: _complete(client, bucket, "taken", late))
    assert client.get_object(Bucket=bucket, Key="taken")["Body"].read() == b"first"


def test_moto_racing_multipart_completions_have_exactly_one_winner(
        s3_bucket: S3Bucket, moto_server: MotoServer) -> None:
    """Of several uploads racing to complete one key with ``If-None-Match: *``, exactly one wins.

    Run on moto only.  LocalStack 2026.3.0 refuses a completion on an existing key (the test
    above) but checks and writes without one lock, so two racing completions can both succeed
    (seen once in about ten whole-suite runs).  deltacommit never writes a commit, checkpoint or
    record in parts, so nothing of ours rests on that race; this test keeps the rig honest for
    the peers that do (a large checkpoint written by Spark or deltalake).
    """
    client = _client("s3", moto_server.endpoint)
    bucket = s3_bucket.name
    contenders = 4
    keys = [f"_delta_log/{v:020d}.checkpoint.parquet" for v in range(20)]
    uploads = {(i, k): _multipart(client, bucket, k, f"writer {i}".encode())
               for k in keys for i in range(contenders)}
    winners: dict[str, int] = {}

    def attempt(index: int, key: str) -> bool:
        won = _won(lambda: _complete(client, bucket, key, uploads[(index, key)]))
        if won:
            winners[key] = index
        return won

    wins = race(keys, contenders, attempt)
    assert {k: n for k, n in wins.items() if n != 1} == {}
    for key in keys:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert body == f"writer {winners[key]}".encode()


def _dynamodb_race(client: Any) -> dict[str, int]:
    table = unique_name("rig")
    client.create_table(
        TableName=table, BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
    wait_table_active(client, table)

    def attempt(index: int, key: str) -> bool:
        try:
            client.put_item(TableName=table, Item={"pk": {"S": key}, "writer": {"N": str(index)}},
                            ConditionExpression="attribute_not_exists(pk)")
        except ClientError as e:
            if e.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True

    wins = race([f"key-{i}" for i in range(KEYS)], CONTENDERS, attempt)
    # Every key holds exactly one item, written by the thread that won it.
    for key in list(wins)[:10]:
        item = client.get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True)
        assert "Item" in item
    return wins


def test_moto_dynamodb_conditional_put_item_has_exactly_one_winner_per_key(
        moto_server: MotoServer) -> None:
    wins = _dynamodb_race(_client("dynamodb", moto_server.endpoint))
    assert {k: n for k, n in wins.items() if n != 1} == {}


def test_dynalite_conditional_put_item_has_exactly_one_winner_per_key(
        dynalite_server: Dynalite) -> None:
    wins = _dynamodb_race(_client("dynamodb", dynalite_server.endpoint))
    assert {k: n for k, n in wins.items() if n != 1} == {}


def test_race_releases_all_contenders_together() -> None:
    # The harness itself: every contender attempts every key, and they overlap in time.
    inside = 0
    peak = 0
    lock = threading.Lock()
    all_in = threading.Barrier(4)

    def attempt(index: int, key: int) -> bool:
        nonlocal inside, peak
        with lock:
            inside += 1
            peak = max(peak, inside)
        all_in.wait(timeout=10)  # passes only if all four are inside at once
        with lock:
            inside -= 1
        return index == 0

    wins = race(list(range(5)), 4, attempt)
    assert wins == dict.fromkeys(range(5), 1)
    assert peak == 4


def test_race_reraises_a_contenders_error() -> None:
    def attempt(index: int, key: int) -> bool:
        if key == 2 and index == 1:
            raise RuntimeError("boom")
        return index == 0

    with pytest.raises(RuntimeError, match="boom"):
        race(list(range(5)), 3, attempt)
