"""S3Store against moto: addressing, request counts, error mapping and retries.

What depends on the server's own code (addressing, listing pages, one request per operation,
error answers, what a retried conditional write is answered, batch deletes) also runs against
LocalStack's S3 provider (the ``s3_server`` fixtures); retries and credentials, which the fault
proxy and moto's IAM exercise the same way on any server, run on moto only.

Faults are real HTTP failures: a proxy between the store and moto answers 503, 500 or 409, or
drops the connection, before or after passing the request on.  Credentials are checked by a
private moto with authentication switched on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from deltacommit.errors import (
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
    StorageConfigError,
    StorageError,
)
from deltacommit.io.storage import LocalStore, MemoryStore, open_store
from deltacommit.io.storage.s3 import RetryPolicy, S3Store, parse_s3_uri
from deltacommit.runtime.clock import ManualClock, RandomSource
from deltacommit.testing import (
    Fault,
    FaultInjectingProxy,
    MotoServer,
    S3Bucket,
    S3Implementation,
    port_is_open,
    s3_storage_options,
    unique_name,
)

RETRY = RetryPolicy(max_attempts=4, base_delay=0.1, max_delay=1.0)


def _store(bucket: S3Bucket, *, prefix: str = "t", scheme: str = "s3",
           options: dict[str, str] | None = None, clock: ManualClock | None = None) -> S3Store:
    return S3Store.from_uri(f"{scheme}://{bucket.name}/{prefix}",
                            {**bucket.storage_options, **(options or {})},
                            clock=clock or ManualClock(), random=RandomSource(7), retry=RETRY)


# --------------------------------------------------------------------------- locations


def test_uri_keeps_its_scheme_and_objects_live_under_the_prefix(any_s3_bucket: S3Bucket,
                                                              s3_server: S3Implementation) -> None:
    store = _store(any_s3_bucket, prefix="warehouse/events/", scheme="s3a")
    assert store.uri == f"s3a://{any_s3_bucket.name}/warehouse/events"
    store.put("_delta_log/00000000000000000000.json", b"{}")
    keys = [o["Key"] for o in s3_server.client.list_objects_v2(Bucket=any_s3_bucket.name)["Contents"]]
    assert keys == ["warehouse/events/_delta_log/00000000000000000000.json"]


def test_a_bucket_root_has_no_prefix(any_s3_bucket: S3Bucket, s3_server: S3Implementation) -> None:
    store = S3Store.from_uri(f"s3://{any_s3_bucket.name}", any_s3_bucket.storage_options)
    assert store.uri == f"s3://{any_s3_bucket.name}"
    store.put("x.json", b"1")
    assert [m.path for m in store.list("")] == ["x.json"]
    assert s3_server.client.get_object(Bucket=any_s3_bucket.name, Key="x.json")["Body"].read() == b"1"


def test_a_prefix_does_not_see_its_siblings(any_s3_bucket: S3Bucket) -> None:
    _store(any_s3_bucket, prefix="t").put("a", b"1")
    _store(any_s3_bucket, prefix="t2").put("a", b"2")
    assert [m.path for m in _store(any_s3_bucket, prefix="t").list("")] == ["a"]


@pytest.mark.parametrize("uri", ["s3://", "s3:///path", "gs://bucket/x", "s3://b/x?versionId=1"])
def test_bad_s3_uris_are_refused(uri: str) -> None:
    with pytest.raises(StorageConfigError, match="s3://bucket"):
        parse_s3_uri(uri)


def test_open_store_picks_the_store_by_scheme(s3_bucket: S3Bucket, tmp_path: Any) -> None:
    assert isinstance(open_store(str(tmp_path)), LocalStore)
    assert isinstance(open_store(tmp_path.as_uri()), LocalStore)
    assert isinstance(open_store("memory://m/t"), MemoryStore)
    for scheme in ("s3", "s3a", "s3n"):
        store = open_store(f"{scheme}://{s3_bucket.name}/t", s3_bucket.storage_options)
        assert isinstance(store, S3Store)
        assert store.uri == f"{scheme}://{s3_bucket.name}/t"
    with pytest.raises(StorageConfigError, match=r"abfss://.*file://, memory://, s3://, s3a://, s3n://"):
        open_store("abfss://container@account/t")


def test_open_store_validates_the_options(s3_bucket: S3Bucket) -> None:
    with pytest.raises(StorageConfigError, match="AWS_ENDPOINT_URL"):
        open_store(f"s3://{s3_bucket.name}/t", {**s3_bucket.storage_options, "AWS_ENDPOINT": "x"})


def test_list_follows_continuation_pages(any_s3_bucket: S3Bucket) -> None:
    store = _store(any_s3_bucket)
    store.list_page_size = 2
    names = [f"_delta_log/{v:020d}.json" for v in range(7)]
    for name in reversed(names):
        store.put(name, b"x")
    store.reset_requests()
    assert [m.path for m in store.list("_delta_log/")] == names
    assert store.requests == {"ListObjectsV2": 4}
    assert [m.path for m in store.list("_delta_log/", start_after=names[2])] == names[3:]


# --------------------------------------------------------------------------- request counts


def test_each_operation_is_one_request(any_s3_bucket: S3Bucket) -> None:
    store = _store(any_s3_bucket)
    assert store.requests == {}
    store.put_if_absent("_delta_log/00000000000000000000.json", b"{}")
    assert store.requests == {"PutObject": 1}
    with pytest.raises(ObjectExistsError):
        store.put_if_absent("_delta_log/00000000000000000000.json", b"{}")
    assert store.requests == {"PutObject": 2}  # a 412 is an answer: never retried
    meta = store.head("_delta_log/00000000000000000000.json")
    store.get("_delta_log/00000000000000000000.json")
    store.put_if_match("_delta_log/00000000000000000000.json", b"{ }", meta.etag or "")
    list(store.list("_delta_log/"))
    store.delete("nothing")
    assert store.requests == {"PutObject": 3, "HeadObject": 1, "GetObject": 1, "ListObjectsV2": 1,
                              "DeleteObject": 1}
    assert store.request_count == 7
    store.reset_requests()
    store.copy_if_absent("_delta_log/00000000000000000000.json", "_delta_log/00000000000000000001.json")
    assert store.requests == {"GetObject": 1, "PutObject": 1}


def test_children_share_the_counter(s3_bucket: S3Bucket) -> None:
    store = _store(s3_bucket)
    store.child("_delta_log").put("a", b"1")
    assert store.requests == {"PutObject": 1}


def test_the_counter_is_thread_safe(s3_bucket: S3Bucket) -> None:
    from deltacommit.testing import race

    store = _store(s3_bucket)
    race(list(range(25)), 8, lambda i, k: bool(store.put(f"k{k}-{i}", b"x")))
    assert store.requests == {"PutObject": 200}


# --------------------------------------------------------------------------- error mapping


def test_a_missing_bucket_is_named(s3_server: S3Implementation) -> None:
    bucket = S3Bucket(unique_name("absent"), s3_storage_options(s3_server.endpoint))
    store = _store(bucket)
    for call in (lambda: store.get("x"), lambda: store.put("x", b"1"),
                 lambda: store.put_if_absent("x", b"1"), lambda: list(store.list(""))):
        with pytest.raises(StorageError,
                           match=rf"s3://{bucket.name}/t.*bucket '{bucket.name}' does not exist"):
            call()
    # HEAD answers carry no body, so S3 cannot say which of bucket or key is missing.
    with pytest.raises(ObjectNotFoundError):
        store.head("x")


def test_an_unreachable_endpoint_is_named_after_bounded_retries() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert not port_is_open(port)
    clock = ManualClock()
    bucket = S3Bucket("nowhere", s3_storage_options(f"http://127.0.0.1:{port}"))
    store = _store(bucket, clock=clock)
    with pytest.raises(StorageError, match=rf"get s3://nowhere/t/x failed: cannot connect to the S3 "
                                           rf"endpoint http://127.0.0.1:{port}.*after 4 attempts"):
        store.get("x")
    assert store.requests == {"GetObject": RETRY.max_attempts}
    assert 0 < clock.monotonic() <= 0.1 + 0.2 + 0.4  # three jittered backoffs on the injected clock


def test_conditional_writes_can_be_turned_off(s3_bucket: S3Bucket) -> None:
    for options in ({"DELTACOMMIT_S3_CONDITIONAL_WRITES": "false"}, {"conditional_put": "disabled"}):
        store = _store(s3_bucket, options=options)
        assert store.supports_conditional_put is False
        refused = r"conditional writes to S3 are turned off"
        with pytest.raises(StorageConfigError, match=refused):
            store.put_if_absent("a", b"1")
        with pytest.raises(StorageConfigError, match=refused):
            store.put_if_match("a", b"1", '"x"')
        with pytest.raises(StorageConfigError, match=refused):
            store.copy_if_absent("a", "b")
        assert store.requests == {}
        store.put("plain", b"1")  # everything else still works
    assert _store(s3_bucket).supports_conditional_put is True


@pytest.fixture(scope="module")
def auth_moto() -> Iterator[tuple[MotoServer, str, dict[str, str]]]:
    """A private moto that checks credentials, with a bucket and an IAM user without policies."""
    with MotoServer() as server:
        iam = boto3.client("iam", endpoint_url=server.endpoint, region_name="us-east-1")
        s3 = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1")
        bucket = "guarded"
        s3.create_bucket(Bucket=bucket)
        iam.create_user(UserName="no-policies")
        key = iam.create_access_key(UserName="no-policies")["AccessKey"]
        server.set_auth(True)
        yield server, bucket, {"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}


def _auth_store(auth_moto: tuple[MotoServer, str, dict[str, str]], key_id: str,
                secret: str) -> S3Store:
    server, bucket, _ = auth_moto
    options = {**s3_storage_options(server.endpoint), "AWS_ACCESS_KEY_ID": key_id,
               "AWS_SECRET_ACCESS_KEY": secret}
    return S3Store.from_uri(f"s3://{bucket}/t", options, clock=ManualClock(), retry=RETRY)


def test_an_unknown_access_key_is_reported_as_rejected_credentials(
        auth_moto: tuple[MotoServer, str, dict[str, str]]) -> None:
    secret = "not-the-real-secret-0123456789"
    store = _auth_store(auth_moto, "AKIAUNKNOWNKEY000000", secret)
    with pytest.raises(StorageError, match=r"get s3://guarded/t/x failed: the credentials were rejected "
                                           r"\(InvalidAccessKeyId\).*AKIA…") as info:
        store.get("x")
    assert secret not in str(info.value)
    assert "AKIAUNKNOWNKEY000000" not in str(info.value)
    assert store.requests == {"GetObject": 1}  # rejections are not retried


def test_a_wrong_secret_is_reported_as_rejected_credentials(
        auth_moto: tuple[MotoServer, str, dict[str, str]]) -> None:
    key = auth_moto[2]
    store = _auth_store(auth_moto, key["id"], "wrong-secret-abcdefghijklmnop")
    with pytest.raises(StorageError, match=r"credentials were rejected \(SignatureDoesNotMatch\)") as info:
        store.put("x", b"1")
    assert "wrong-secret" not in str(info.value)


def test_valid_credentials_without_permission_are_reported_as_denied(
        auth_moto: tuple[MotoServer, str, dict[str, str]]) -> None:
    key = auth_moto[2]
    store = _auth_store(auth_moto, key["id"], key["secret"])
    with pytest.raises(StorageError, match=r"put s3://guarded/t/x failed: access denied \(AccessDenied\)"):
        store.put("x", b"1")
    with pytest.raises(StorageError, match=r"head s3://guarded/t/x failed: access denied"):
        store.head("x")


# --------------------------------------------------------------------------- retries


@pytest.fixture
def proxy(moto_server: MotoServer) -> Iterator[FaultInjectingProxy]:
    with FaultInjectingProxy(moto_server.endpoint) as p:
        yield p


@pytest.fixture
def any_proxy(s3_server: S3Implementation) -> Iterator[FaultInjectingProxy]:
    """The fault proxy in front of each S3 implementation in turn: what a server answers to a
    retried conditional write (412, or the object) is its own code."""
    with FaultInjectingProxy(s3_server.endpoint) as p:
        yield p


def _proxied(bucket: S3Bucket, proxy: FaultInjectingProxy, clock: ManualClock) -> S3Store:
    return _store(bucket, options={"AWS_ENDPOINT_URL": proxy.endpoint}, clock=clock)


def test_throttling_is_retried_with_backoff_on_the_injected_clock(
        s3_bucket: S3Bucket, proxy: FaultInjectingProxy) -> None:
    clock = ManualClock()
    store = _proxied(s3_bucket, proxy, clock)
    proxy.inject(Fault(status=503, code="SlowDown", method="PUT", times=2))
    store.put_if_absent("_delta_log/00000000000000000000.json", b"{}")
    assert store.requests == {"PutObject": 3}
    assert [r.status for r in proxy.records] == [503, 503, 200]
    assert 0 < clock.monotonic() <= 0.1 + 0.2
    assert store.get("_delta_log/00000000000000000000.json") == b"{}"


def test_reads_are_retried_after_server_errors_and_dropped_connections(
        s3_bucket: S3Bucket, proxy: FaultInjectingProxy) -> None:
    store = _proxied(s3_bucket, proxy, ManualClock())
    store.put("x", b"payload")
    proxy.inject(Fault(status=500, code="InternalError", method="GET"))
    proxy.inject(Fault(drop=True, method="GET"))
    assert store.get("x") == b"payload"
    assert store.requests["GetObject"] == 3


def test_retries_are_bounded(s3_bucket: S3Bucket, proxy: FaultInjectingProxy) -> None:
    store = _proxied(s3_bucket, proxy, ManualClock())
    proxy.inject(Fault(status=503, code="SlowDown", method="PUT", times=10))
    with pytest.raises(StorageError,
                       match=r"put-if-absent .* SlowDown \(HTTP 503\).*gave up after 4 attempts"):
        store.put_if_absent("a", b"1")
    assert store.requests == {"PutObject": RETRY.max_attempts}
    assert not store.exists("a")


def test_a_409_conflict_on_a_conditional_write_is_retried(s3_bucket: S3Bucket,
                                                         proxy: FaultInjectingProxy) -> None:
    store = _proxied(s3_bucket, proxy, ManualClock())
    proxy.inject(Fault(status=409, code="ConditionalRequestConflict", method="PUT"))
    store.put_if_absent("a", b"1")
    assert store.requests == {"PutObject": 2}
    meta = store.head("a")
    proxy.inject(Fault(status=409, code="ConditionalRequestConflict", method="PUT"))
    store.put_if_match("a", b"2", meta.etag or "")
    assert store.get("a") == b"2"


def test_a_create_whose_answer_was_lost_is_recognised_as_ours(
        any_s3_bucket: S3Bucket, any_proxy: FaultInjectingProxy) -> None:
    """The PUT reaches S3 and creates the object, but the client sees 500 / a reset.

    The retry gets 412; reading the object back shows our bytes, so this writer won.  Treating
    the 412 as a loss would make a committer write its actions again at the next version.
    """
    store = _proxied(any_s3_bucket, any_proxy, ManualClock())
    for fault in (Fault(status=500, code="InternalError", method="PUT", forward=True),
                  Fault(drop=True, method="PUT", forward=True)):
        key = unique_name("_delta_log/v")
        any_proxy.inject(fault)
        meta = store.put_if_absent(key, b"my commit")
        assert meta.size == len(b"my commit")
        assert meta.etag == store.head(key).etag
    assert store.requests == {"PutObject": 4, "GetObject": 2, "HeadObject": 2}


def test_a_lost_answer_does_not_make_another_writers_object_ours(
        any_s3_bucket: S3Bucket, any_proxy: FaultInjectingProxy) -> None:
    store = _proxied(any_s3_bucket, any_proxy, ManualClock())
    store.put_if_absent("v0", b"their commit")
    any_proxy.inject(Fault(status=500, code="InternalError", method="PUT", forward=True))
    with pytest.raises(ObjectExistsError):
        store.put_if_absent("v0", b"my commit")
    assert store.get("v0") == b"their commit"


def test_a_replace_whose_answer_was_lost_is_recognised_as_ours(
        any_s3_bucket: S3Bucket, any_proxy: FaultInjectingProxy) -> None:
    store = _proxied(any_s3_bucket, any_proxy, ManualClock())
    old = store.put("_last_checkpoint", b"v1")
    any_proxy.inject(Fault(drop=True, method="PUT", forward=True))
    new = store.put_if_match("_last_checkpoint", b"v2", old.etag or "")
    assert new.etag != old.etag
    assert store.get("_last_checkpoint") == b"v2"
    # A stale ETag after a lost answer of someone else's content still fails.
    any_proxy.inject(Fault(status=500, code="InternalError", method="PUT", forward=True))
    with pytest.raises(PreconditionFailedError):
        store.put_if_match("_last_checkpoint", b"v3", old.etag or "")


def test_backoff_delays_grow_and_stay_within_bounds() -> None:
    policy = RetryPolicy(max_attempts=10, base_delay=0.05, max_delay=1.0)
    rng = RandomSource(1)
    for retry in range(1, 10):
        bound = min(1.0, 0.05 * 2 ** (retry - 1))
        delays = [policy.delay(retry, rng) for _ in range(50)]
        assert all(0 <= d <= bound for d in delays)
        assert max(delays) > bound / 2  # jitter spreads over the whole range


# --------------------------------------------------------------------------- batch deletes


def test_delete_many_is_one_request_and_ignores_missing_objects(any_s3_bucket: S3Bucket) -> None:
    store = _store(any_s3_bucket)
    for name in ("a", "b/c", "d"):
        store.put(name, b"1")
    store.reset_requests()
    store.delete_many(["a", "b/c", "d", "never-written"])
    assert store.requests == {"DeleteObjects": 1}
    assert [m.path for m in store.list("")] == []


def test_delete_many_falls_back_where_delete_objects_is_not_implemented(
        s3_bucket: S3Bucket, proxy: FaultInjectingProxy) -> None:
    """An S3-compatible store without multi-object delete (it answers NotImplemented) gets one
    DeleteObject per path, from then on without asking again; nothing is left behind."""
    store = _proxied(s3_bucket, proxy, ManualClock())
    for name in ("a", "b", "c", "d"):
        store.put(name, b"1")
    store.reset_requests()
    proxy.inject(Fault(status=501, code="NotImplemented", method="POST", times=100))
    store.delete_many(["a", "b"])
    assert store.requests == {"DeleteObjects": 1, "DeleteObject": 2}
    store.delete_many(["c", "d"])
    assert store.requests == {"DeleteObjects": 1, "DeleteObject": 4}
    assert [m.path for m in store.list("")] == []


@pytest.mark.parametrize(("uri", "spelled"), [("s3://b/a//t", "s3://b/a/t"),
                                              ("s3a://b/a///t/", "s3a://b/a/t")])
def test_an_s3_location_with_an_empty_path_segment_is_refused(uri: str, spelled: str) -> None:
    """Spark's Hadoop paths read ``a//t`` as ``a/t``, deltalake refuses it, and S3 keys it as
    written: a deltacommit writer and a Spark writer given one URI would write two tables."""
    with pytest.raises(StorageConfigError, match="empty path segment") as e:
        parse_s3_uri(uri)
    assert uri in str(e.value) and f"Spell it {spelled!r}" in str(e.value)
    # Leading and trailing slashes of the path are no segment: the key prefix is the same.
    assert parse_s3_uri("s3://b//t/") == ("s3", "b", "t")


@pytest.mark.parametrize(("uri", "spelled"), [("s3://b/a/./t", "s3://b/a/t"),
                                              ("s3a://b/a/x/../t", "s3a://b/a/t"),
                                              ("s3://b/../t/.", "s3://b/t")])
def test_an_s3_location_with_a_dot_segment_is_refused(uri: str, spelled: str) -> None:
    """Spark's Hadoop paths and deltalake's URLs both read ``a/./t`` and ``a/x/../t`` as
    ``a/t``, and S3 keys them as written: a deltacommit writer given one of these URIs and a
    Spark or deltalake writer given the same one would write two tables."""
    with pytest.raises(StorageConfigError, match=r"'\.' or '\.\.' path segment") as e:
        parse_s3_uri(uri)
    assert uri in str(e.value) and f"Spell it {spelled!r}" in str(e.value)
    # Dots within a segment are part of its name.
    assert parse_s3_uri("s3://b/a.b/..t/.x") == ("s3", "b", "a.b/..t/.x")
