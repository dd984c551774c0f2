"""The DynamoCommit requests and answers, on moto (S3 and DynamoDB) and dynalite (DynamoDB).

Each test checks what object_store does on the wire: the lease item's attributes, the two
condition expressions, the HEAD precondition that answers without DynamoDB, and the errors.
"""

from __future__ import annotations

from typing import Any

import pytest

from deltacommit.errors import (
    LogStoreError,
    ObjectExistsError,
    ObjectNotFoundError,
    PreconditionFailedError,
    StorageError,
)
from deltacommit.io.logstore.dynamo_commit import leases as dynamo_commit
from deltacommit.io.logstore.dynamo_commit.leases import (
    CONDITION_ACQUIRE,
    CONDITION_RECLAIM,
    DynamoCommitStore,
    create_lease_table,
    request_timeout,
)
from deltacommit.runtime.clock import ManualClock
from deltacommit.testing import Fault, FaultInjectingProxy, MotoServer, S3Bucket, race, unique_name

from .conftest import Recorder, ScriptedClock, guarded, lease_items, s3_store

START = 1_700_000_000.0


def test_a_create_takes_the_lease_item_object_store_writes(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    clock = ManualClock(start=START)
    ddb = Recorder(moto_dynamodb, clock)
    store = guarded(s3_bucket, lease_table, ddb, clock=clock)

    meta = store.put_if_absent("_delta_log/00000000000000000000.json", b"commit 0")

    assert store.get("_delta_log/00000000000000000000.json") == b"commit 0"
    assert meta.etag == store.head("_delta_log/00000000000000000000.json").etag
    [call] = ddb.calls
    assert call.request == {
        "TableName": lease_table,
        "Item": {
            "path": {"S": "t/_delta_log/00000000000000000000.json"},   # key in the bucket
            "etag": {"S": "*"},
            "generation": {"N": "0"},
            "timeout": {"N": "20000"},
            "ttl": {"N": str(int(START) + 3600)},
        },
        "ConditionExpression": "attribute_not_exists(#pk)",
        "ExpressionAttributeNames": {"#pk": "path"},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    assert call.outcome == "ok"
    items = lease_items(moto_dynamodb, lease_table)
    assert items[("t/_delta_log/00000000000000000000.json", "*")]["generation"] == {"N": "0"}
    # Leases are never released: TTL removes them.
    assert len(items) == 1


def test_an_existing_object_is_the_answer_without_a_lease(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    ddb = Recorder(moto_dynamodb, ManualClock())
    store = guarded(s3_bucket, lease_table, ddb)
    store.put("a", b"there")
    with pytest.raises(ObjectExistsError, match=r"put-if-absent s3://.*/t/a failed: object already"):
        store.put_if_absent("a", b"mine")
    store.put("b", b"there")
    with pytest.raises(ObjectExistsError, match="copy-if-absent"):
        store.copy_if_absent("a", "b")
    assert ddb.calls == []
    assert store.get("a") == b"there"


def test_put_if_match_leases_the_expected_etag(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    ddb = Recorder(moto_dynamodb, ManualClock())
    store = guarded(s3_bucket, lease_table, ddb)
    old = store.put("_last_checkpoint", b"v1")
    assert old.etag is not None and old.etag.startswith('"')

    new = store.put_if_match("_last_checkpoint", b"v2", old.etag)

    assert store.get("_last_checkpoint") == b"v2"
    assert new.etag == store.head("_last_checkpoint").etag != old.etag
    [call] = ddb.calls
    assert (call.path, call.etag, call.generation, call.condition) == (
        "t/_last_checkpoint", old.etag, 0, CONDITION_ACQUIRE)

    # A stale ETag and a missing object fail at the HEAD, before DynamoDB.
    with pytest.raises(PreconditionFailedError, match=f"ETag is {new.etag}, not {old.etag}"):
        store.put_if_match("_last_checkpoint", b"v3", old.etag)
    with pytest.raises(PreconditionFailedError, match="does not exist"):
        store.put_if_match("nothing-here", b"v3", old.etag)
    assert len(ddb.calls) == 1
    assert store.get("_last_checkpoint") == b"v2"


def test_copy_if_absent_copies_under_a_create_lease(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    ddb = Recorder(moto_dynamodb, ManualClock())
    store = guarded(s3_bucket, lease_table, ddb)
    store.put("_delta_log/tmp-commit", b"body")

    meta = store.copy_if_absent("_delta_log/tmp-commit", "_delta_log/00000000000000000007.json")

    assert store.get("_delta_log/00000000000000000007.json") == b"body"
    assert meta.size == 4
    assert [(c.path, c.etag) for c in ddb.calls] == [("t/_delta_log/00000000000000000007.json", "*")]
    with pytest.raises(ObjectNotFoundError):
        store.copy_if_absent("_delta_log/missing", "_delta_log/00000000000000000008.json")


def test_unguarded_operations_go_straight_to_s3(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    ddb = Recorder(moto_dynamodb, ManualClock())
    store = guarded(s3_bucket, lease_table, ddb)
    store.put("d/1", b"1")
    store.copy("d/1", "d/2")
    assert [m.path for m in store.list("d/")] == ["d/1", "d/2"]
    store.delete("d/1")
    assert not store.exists("d/1")
    assert store.open_input("d/2").read() == b"1"
    assert ddb.calls == []


def test_a_child_store_leases_the_full_key(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    ddb = Recorder(moto_dynamodb, ManualClock())
    child = guarded(s3_bucket, lease_table, ddb, prefix="warehouse").child("sales")
    child.put_if_absent("_delta_log/00000000000000000000.json", b"{}")
    assert child.uri == f"s3://{s3_bucket.name}/warehouse/sales"
    assert ddb.calls[0].path == "warehouse/sales/_delta_log/00000000000000000000.json"


def test_a_loser_learns_the_answer_from_the_holders_object(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    """The normal losing path: the holder's lease conflicts, and the HEAD re-checked every
    100 ms finds the holder's object."""
    holder = guarded(s3_bucket, lease_table, moto_dynamodb)
    assert holder.take_lease("k") is not None
    clock = ScriptedClock()
    ddb = Recorder(moto_dynamodb, clock)
    waiter = guarded(s3_bucket, lease_table, ddb, clock=clock)
    clock.at(0.35, lambda: holder.inner.put("k", b"holder's"))

    with pytest.raises(ObjectExistsError):
        waiter.put_if_absent("k", b"waiter's")

    assert [(c.condition, c.outcome) for c in ddb.calls] == [(CONDITION_ACQUIRE, "conflict")]
    # Polls at 0, 0.1, 0.2, 0.3 found nothing; the one at 0.4 found the object.
    assert waiter.stats.snapshot() == {"conflicts": 1, "polls": 5}
    assert clock.monotonic() == pytest.approx(0.4)
    assert waiter.get("k") == b"holder's"


def test_a_missing_lease_table_is_named_with_the_command_that_creates_it(
        s3_bucket: S3Bucket, moto_dynamodb: Any) -> None:
    store = guarded(s3_bucket, "no-such-lease-table", moto_dynamodb)
    with pytest.raises(LogStoreError, match=r"lease table 'no-such-lease-table' does not exist; "
                       r"create it with `deltacommit dynamodb create-table --schema "
                       r"dynamo-commit no-such-lease-table`"):
        store.put_if_absent("x", b"1")
    assert not store.exists("x")


def test_a_foreign_item_is_not_mistaken_for_a_lease(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any) -> None:
    moto_dynamodb.put_item(TableName=lease_table,
                           Item={"path": {"S": "t/x"}, "etag": {"S": "*"}, "owner": {"S": "me"}})
    with pytest.raises(LogStoreError, match="has no numeric generation and timeout"):
        guarded(s3_bucket, lease_table, moto_dynamodb).put_if_absent("x", b"1")


# --------------------------------------------------------------------------- writes under the lease


@pytest.fixture
def proxy(moto_server: MotoServer) -> Any:
    with FaultInjectingProxy(moto_server.endpoint) as p:
        yield p


def _proxied(bucket: S3Bucket, proxy: FaultInjectingProxy, table: str, client: Any,
             clock: ManualClock) -> DynamoCommitStore:
    inner = s3_store(bucket, AWS_ENDPOINT_URL=proxy.endpoint)
    return DynamoCommitStore(inner, table, client, clock=clock)


def test_a_throttled_write_is_retried_within_the_lease(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any,
        proxy: FaultInjectingProxy) -> None:
    clock = ManualClock()
    store = _proxied(s3_bucket, proxy, lease_table, moto_dynamodb, clock)
    proxy.inject(Fault(status=503, code="SlowDown", method="PUT", times=2))
    store.put_if_absent("a", b"1")
    assert store.get("a") == b"1"
    assert [r.status for r in proxy.records if r.method == "PUT"] == [503, 503, 200]
    assert 0 < clock.monotonic() < 1


def test_a_write_whose_answer_was_lost_is_recognised_as_ours(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any,
        proxy: FaultInjectingProxy) -> None:
    store = _proxied(s3_bucket, proxy, lease_table, moto_dynamodb, ManualClock())
    proxy.inject(Fault(drop=True, method="PUT", forward=True))
    meta = store.put_if_absent("a", b"mine")
    assert meta.etag == store.head("a").etag
    # One PUT (applied, answer dropped), then a read-back instead of a second write.
    assert [r.method for r in proxy.records if r.method in ("PUT", "GET")] == ["PUT", "GET"]


def test_request_timeouts_fit_in_the_lease_time_left() -> None:
    assert request_timeout(20.0) == pytest.approx(6.4)
    assert request_timeout(10.0) == pytest.approx(3.2)
    assert request_timeout(1.0) == pytest.approx(0.4)
    assert request_timeout(0.1) == pytest.approx(0.05)
    assert request_timeout(0.099) is None
    assert request_timeout(-5.0) is None
    for remaining in (0.1, 0.13, 0.5, 2.7, 19.99, 300.0):
        t = request_timeout(remaining)
        assert t is not None and 2 * t <= remaining


def test_the_write_uses_timeouts_bounded_by_the_lease(
        s3_bucket: S3Bucket, lease_table: str, moto_dynamodb: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock()
    ddb = Recorder(moto_dynamodb, clock)
    store = guarded(s3_bucket, lease_table, ddb, clock=clock)
    used: list[float] = []
    real = dynamo_commit.bounded_s3_client

    def spy(config: Any, timeout: float) -> Any:
        used.append(timeout)
        client = real(config, timeout)
        assert client.meta.config.read_timeout == timeout
        assert client.meta.config.connect_timeout == min(5.0, timeout)
        return client

    monkeypatch.setattr(dynamo_commit, "bounded_s3_client", spy)
    # The writer stalls 18.5 s after taking its lease: 1.5 s are left when it writes.
    ddb.after_acquire = lambda: clock.advance(18.5)
    store.put_if_absent("a", b"1")
    assert used == [pytest.approx(0.4)]
    assert store.get("a") == b"1"


# --------------------------------------------------------------------------- the lease table


def test_create_lease_table_is_idempotent_and_checks_the_schema(moto_dynamodb: Any) -> None:
    name = unique_name("leases")
    first = create_lease_table(moto_dynamodb, name)
    again = create_lease_table(moto_dynamodb, name)
    assert (first.created, first.ttl_enabled) == (True, True)
    assert (again.created, again.ttl_enabled) == (False, True)
    assert "TTL enabled on attribute ttl" in again.describe()
    table = moto_dynamodb.describe_table(TableName=name)["Table"]
    assert {(k["AttributeName"], k["KeyType"]) for k in table["KeySchema"]} == {
        ("path", "HASH"), ("etag", "RANGE")}
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    ttl = moto_dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", "ttl")

    other = unique_name("spark-log")
    moto_dynamodb.create_table(
        TableName=other, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "tablePath", "KeyType": "HASH"},
                   {"AttributeName": "fileName", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "tablePath", "AttributeType": "S"},
                              {"AttributeName": "fileName", "AttributeType": "S"}])
    with pytest.raises(LogStoreError, match=f"table '{other}' exists but is not a DynamoCommit "
                       "lease table.*expected path \\(S\\) HASH and etag \\(S\\) RANGE"):
        create_lease_table(moto_dynamodb, other)


def test_create_lease_table_on_dynalite_waits_for_active_and_reports_no_ttl(
        dynalite_dynamodb: Any) -> None:
    name = unique_name("leases")
    status = create_lease_table(dynalite_dynamodb, name)
    assert (status.created, status.ttl_enabled) == (True, False)
    assert "old leases are not removed" in status.describe()
    assert dynalite_dynamodb.describe_table(TableName=name)["Table"]["TableStatus"] == "ACTIVE"


# --------------------------------------------------------------------------- dynalite


def _on_dynalite(bucket: S3Bucket, table: str, endpoint: str, conditional_put: str | None = None,
                 **kwargs: Any) -> DynamoCommitStore:
    """S3 on moto, leases on dynalite (AWS_ENDPOINT_URL_DYNAMODB), as a deployment would split them."""
    inner = s3_store(bucket, AWS_ENDPOINT_URL_DYNAMODB=endpoint,
                     conditional_put=conditional_put or f"dynamo:{table}")
    return DynamoCommitStore.for_s3(inner, **kwargs)


def test_on_dynalite_a_conflict_reads_the_holders_lease(
        s3_bucket: S3Bucket, dynalite_lease_table: str, dynalite_dynamodb: Any,
        dynalite_server: Any) -> None:
    """dynalite returns no item with a failed condition; the holder's lease is read instead,
    and reclaimed with the generation condition once stale."""
    endpoint = dynalite_server.endpoint
    holder = _on_dynalite(s3_bucket, dynalite_lease_table, endpoint,
                          conditional_put=f"dynamo: {dynalite_lease_table}:1000")
    assert holder.take_lease("k") is not None
    clock = ManualClock()
    waiter = _on_dynalite(s3_bucket, dynalite_lease_table, endpoint, clock=clock)
    ddb = Recorder(waiter._client, clock)
    waiter._client = ddb  # type: ignore[assignment]

    waiter.put_if_absent("k", b"waiter's")

    # The holder's lease is 1 s (its item says so), so it is stale after 3 s, although the
    # waiter's own leases are 20 s.
    assert [(c.condition, c.generation, c.outcome) for c in ddb.calls] == [
        (CONDITION_ACQUIRE, 0, "conflict"), (CONDITION_RECLAIM, 1, "ok")]
    assert ddb.calls[1].request["ExpressionAttributeValues"] == {":g": {"N": "0"}}
    assert 3.0 < ddb.calls[1].at <= 3.1 + 1e-6
    item = lease_items(dynalite_dynamodb, dynalite_lease_table)[("t/k", "*")]
    assert (item["generation"], item["timeout"]) == ({"N": "1"}, {"N": "20000"})
    assert waiter.get("k") == b"waiter's"


def test_on_dynalite_racing_creates_have_one_winner_per_key(
        s3_bucket: S3Bucket, dynalite_lease_table: str, dynalite_server: Any) -> None:
    stores = [_on_dynalite(s3_bucket, dynalite_lease_table, dynalite_server.endpoint)
              for _ in range(4)]
    keys = [f"_delta_log/{v:020d}.json" for v in range(25)]

    def attempt(i: int, key: str) -> bool:
        try:
            stores[i].put_if_absent(key, f"writer {i}".encode())
        except ObjectExistsError:
            return False
        return True

    wins = race(keys, len(stores), attempt)
    assert wins == dict.fromkeys(keys, 1)
    assert sum(s.stats.snapshot().get("conflicts", 0) for s in stores) > 0



def test_any_object_store_can_be_guarded(lease_table: str, moto_dynamodb: Any) -> None:
    """Not only S3: the leases guard whatever store is wrapped (its paths are the lease keys),
    and the write is still refused once the lease has run out."""
    from deltacommit.io.storage import MemoryStore

    clock = ManualClock()
    ddb = Recorder(moto_dynamodb, clock)
    store = DynamoCommitStore(MemoryStore(unique_name("mem")), lease_table, ddb, clock=clock)
    store.put_if_absent("a", b"1")
    with pytest.raises(ObjectExistsError):
        store.put_if_absent("a", b"2")
    ddb.after_acquire = lambda: clock.advance(25)
    with pytest.raises(StorageError, match="nothing was written"):
        store.put_if_absent("b", b"late")
    assert not store.exists("b")
    assert [c.path for c in ddb.calls] == ["a", "b"]
