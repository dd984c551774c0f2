"""deltacommit and obstore 0.7.3 (object_store 0.12.3, ``conditional_put="dynamo:<table>"``)
sharing one lease table on moto.

obstore is the real Rust implementation of DynamoCommit; these tests race it against
deltacommit's and show that each honours the other's leases.
"""

from __future__ import annotations

import time
from typing import Any

import obstore
import pytest
from obstore.exceptions import AlreadyExistsError, PreconditionError
from obstore.store import S3Store as ObS3Store

from deltacommit.errors import ObjectExistsError, PreconditionFailedError
from deltacommit.io.logstore.dynamo_commit.leases import CONDITION_ACQUIRE, CONDITION_RECLAIM
from deltacommit.runtime.clock import ManualClock
from deltacommit.testing import TEST_AWS_ENV, MotoServer, S3Bucket, race

from .conftest import Recorder, guarded, lease_items

PREFIX = "t"


def obstore_store(moto_server: MotoServer, bucket: S3Bucket, table: str,
                  timeout_ms: int | None = None) -> ObS3Store:
    setting = f"dynamo:{table}" + (f":{timeout_ms}" if timeout_ms is not None else "")
    return ObS3Store(bucket.name, prefix=PREFIX, endpoint=moto_server.endpoint, region="us-east-1",
                     access_key_id=TEST_AWS_ENV["AWS_ACCESS_KEY_ID"],
                     secret_access_key=TEST_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
                     conditional_put=setting, client_options={"allow_http": True})


def test_racing_creates_have_one_winner_per_key_across_both_implementations(
        moto_server: MotoServer, s3_bucket: S3Bucket, lease_table: str) -> None:
    ours = [guarded(s3_bucket, lease_table, _client(s3_bucket)) for _ in range(2)]
    theirs = [obstore_store(moto_server, s3_bucket, lease_table) for _ in range(2)]
    keys = [f"_delta_log/{v:020d}.json" for v in range(40)]
    winner_of: dict[str, list[str]] = {k: [] for k in keys}

    def attempt(i: int, key: str) -> bool:
        name = f"{'deltacommit' if i < 2 else 'obstore'}-{i}"
        payload = name.encode()
        try:
            if i < 2:
                ours[i].put_if_absent(key, payload)
            else:
                obstore.put(theirs[i - 2], key, payload, mode="create")
        except (ObjectExistsError, AlreadyExistsError):
            return False
        winner_of[key].append(name)
        return True

    wins = race(keys, 4, attempt)

    assert wins == dict.fromkeys(keys, 1)
    for key, [name] in winner_of.items():
        assert ours[0].get(key) == name.encode()             # the winner's bytes, whole
    kinds = {name.split("-")[0] for [name] in winner_of.values()}
    assert kinds == {"deltacommit", "obstore"}, winner_of    # both implementations won races
    assert sum(s.stats.snapshot().get("conflicts", 0) for s in ours) > 0
    # Every key was created under exactly one lease item, generation 0, in the shared table.
    items = lease_items(_client(s3_bucket), lease_table)
    assert {(p, e) for p, e in items} == {(f"{PREFIX}/{k}", "*") for k in keys}
    assert {i["generation"]["N"] for i in items.values()} == {"0"}


def test_racing_updates_of_one_etag_have_one_winner_across_both_implementations(
        moto_server: MotoServer, s3_bucket: S3Bucket, lease_table: str) -> None:
    ours = guarded(s3_bucket, lease_table, _client(s3_bucket))
    theirs = obstore_store(moto_server, s3_bucket, lease_table)
    keys = [f"_last_checkpoint_{n}" for n in range(15)]
    etags = {k: ours.put(k, b"v0").etag for k in keys}

    def attempt(i: int, key: str) -> bool:
        etag = etags[key]
        assert etag is not None
        try:
            if i == 0:
                ours.put_if_match(key, b"deltacommit", etag)
            else:
                obstore.put(theirs, key, b"obstore", mode={"e_tag": etag})
        except (PreconditionFailedError, PreconditionError):
            return False
        return True

    wins = race(keys, 2, attempt)

    assert wins == dict.fromkeys(keys, 1)
    assert {ours.get(k) for k in keys} <= {b"deltacommit", b"obstore"}
    items = lease_items(_client(s3_bucket), lease_table)
    assert {(p, e) for p, e in items} == {(f"{PREFIX}/{k}", etags[k]) for k in keys}


def test_obstore_waits_out_a_lease_deltacommit_holds_then_reclaims_it(
        moto_server: MotoServer, s3_bucket: S3Bucket, lease_table: str) -> None:
    """A deltacommit writer dies holding a 400 ms lease: obstore waits 400 ms x 3 (timed by
    the real clock, as obstore has no other) and then reclaims it with generation 1."""
    dead = guarded(s3_bucket, lease_table, _client(s3_bucket), timeout_ms=400)
    assert dead.take_lease("k") is not None
    theirs = obstore_store(moto_server, s3_bucket, lease_table)

    started = time.monotonic()
    obstore.put(theirs, "k", b"obstore", mode="create")
    waited = time.monotonic() - started

    assert waited >= 1.2
    assert dead.get("k") == b"obstore"
    item = lease_items(_client(s3_bucket), lease_table)[(f"{PREFIX}/k", "*")]
    assert (item["generation"], item["timeout"]) == ({"N": "1"}, {"N": "20000"})


def test_deltacommit_honours_and_reclaims_a_lease_obstore_left(
        moto_server: MotoServer, s3_bucket: S3Bucket, lease_table: str) -> None:
    """obstore created the object (lease generation 0, 500 ms); the object was deleted, so the
    next create finds obstore's lease, waits it out and reclaims it as object_store would."""
    theirs = obstore_store(moto_server, s3_bucket, lease_table, timeout_ms=500)
    obstore.put(theirs, "k", b"obstore", mode="create")
    obstore.delete(theirs, "k")
    clock = ManualClock()
    ddb = Recorder(_client(s3_bucket), clock)
    ours = guarded(s3_bucket, lease_table, ddb, clock=clock)

    ours.put_if_absent("k", b"deltacommit")

    assert [(c.condition, c.generation, c.outcome) for c in ddb.calls] == [
        (CONDITION_ACQUIRE, 0, "conflict"), (CONDITION_RECLAIM, 1, "ok")]
    assert 1.5 < ddb.calls[1].at <= 1.6 + 1e-6
    assert ours.get("k") == b"deltacommit"
    with pytest.raises(AlreadyExistsError):
        obstore.put(theirs, "k", b"obstore again", mode="create")


def _client(bucket: S3Bucket) -> Any:
    from deltacommit.io.aws import resolve_aws_config

    return resolve_aws_config(bucket.storage_options).dynamodb_client()
