"""deltacommit beside the newest deltalake (1.6.6), on moto's S3 and on LocalStack's.

Fleets now mix in the newest deltalake, which commits by S3 conditional put whatever it is told:
from 1.6.1 on it ignores ``AWS_S3_LOCKING_PROVIDER=dynamodb`` (it prints an ERROR line and
carries on).  Two cases:

* a table on conditional put: deltacommit and deltalake 1.6.6 processes append at once; every
  acknowledged row is there exactly once, and neither side meets an error (deltalake's "Failed
  to commit transaction", its own retries running out, would be one);
* a table pinned to Spark's DynamoDB protocol, written by deltalake 1.6.6 configured for
  DynamoDB: its commits have no entries, so deltacommit's DynamoDB writers refuse with the clear
  error (and leave no temp file), nothing committed is lost, and ``deltacommit doctor`` names
  the writer and why.
"""

from __future__ import annotations

from pathlib import Path

import deltalake
import pytest

import deltacommit as dc
from deltacommit.cli import main as cli_main
from deltacommit.errors import CoordinationMismatchError
from deltacommit.io.logstore.base import DYNAMODB_MARKER
from deltacommit.io.logstore.fleet_sign import SPARK_TEMP_PREFIX
from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore
from deltacommit.testing import DELTALAKE_LATEST_VERSION, MotoServer, S3Bucket, S3Implementation
from tests.s3.helpers import SCHEMA, batch, dynamo_options, new_log_table

from .latest_peer import digests_hold, pairs, run_fleet

APPENDS = 15


def test_the_peer_is_the_newest_deltalake(deltalake_latest: Path) -> None:
    import subprocess

    done = subprocess.run([str(deltalake_latest), "-c", "import deltalake; print(deltalake.__version__)"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == DELTALAKE_LATEST_VERSION


def test_mixed_fleet_on_conditional_put_loses_and_fails_nothing(
        any_s3_bucket: S3Bucket, s3_server: S3Implementation, deltalake_latest: Path) -> None:
    uri, options = f"{any_s3_bucket.uri}/t", any_s3_bucket.storage_options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    result = run_fleet(uri, options, deltalake_latest, ours=[0, 1], peers=[2, 3], appends=APPENDS)
    assert result.ours_failed == {}
    for w, peer in result.peers.items():
        assert peer.version == DELTALAKE_LATEST_VERSION
        assert peer.errors == {}, (w, peer.errors, peer.stderr[-2000:])
        assert peer.acked == list(range(APPENDS))
    expected = result.expected_rows()
    assert expected == {(w, b): 1 for w in range(4) for b in range(APPENDS)}
    ours = dc.DeltaTable(uri, storage_options=options)
    assert ours.version == 4 * APPENDS
    assert pairs(ours.to_arrow()) == expected
    assert pairs(deltalake.DeltaTable(uri, storage_options=options).to_pyarrow_table()) == expected
    assert digests_hold(ours.log_store.store, result) == []


@pytest.fixture
def dynamo_pinned(any_s3_bucket: S3Bucket, s3_server: S3Implementation,
                  moto_server: MotoServer) -> tuple[str, dict[str, str]]:
    """A table created through Spark's DynamoDB protocol (entries on moto's DynamoDB, objects on
    each S3 implementation), so it records ``deltacommit.coordination = dynamodb``."""
    options = dynamo_options(any_s3_bucket, moto_server.endpoint, new_log_table(moto_server.endpoint))
    uri = f"{any_s3_bucket.uri}/t"
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    for b in range(2):
        dc.write(uri, batch(0, b), storage_options=options)
    return uri, options


def test_newest_deltalake_told_dynamodb_is_refused_by_deltacommit_and_named_by_doctor(
        dynamo_pinned: tuple[str, dict[str, str]], deltalake_latest: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    uri, options = dynamo_pinned
    assert dc.DeltaTable(uri, storage_options=options).configuration["deltacommit.coordination"] \
        == "dynamodb"
    result = run_fleet(uri, options, deltalake_latest, ours=[], peers=[1], appends=3)
    peer = result.peers[1]
    assert peer.acked == [0, 1, 2] and peer.errors == {}  # it commits by conditional put
    assert "no longer** supports S3DynamoDBLogStores" in peer.stderr  # said in an ERROR line only

    with pytest.raises(CoordinationMismatchError, match=r"00000000000000000005\.json.*no entry"):
        dc.write(uri, batch(0, 9), storage_options=options)
    # Nothing committed is lost: every acknowledged row reads back, and the refused write left
    # no temp file of its own (only the protocol's marker stays).
    table = dc.DeltaTable(uri, storage_options=options)
    assert table.version == 5
    assert pairs(table.to_arrow()) == {(0, 0): 1, (0, 1): 1, (1, 0): 1, (1, 1): 1, (1, 2): 1}
    store = DynamoDBLogStore.open(uri, options).store
    assert [m.path for m in store.list(SPARK_TEMP_PREFIX)] == [DYNAMODB_MARKER]

    capsys.readouterr()
    args = ["doctor", uri] + [a for k, v in options.items() for a in ("-o", f"{k}={v}")]
    assert cli_main(args) != 0
    out = capsys.readouterr().out
    print(out)
    assert f"versions 3-5 have no DynamoDB entry; written by deltalake {DELTALAKE_LATEST_VERSION} " \
           "(delta-rs)" in out
    assert "ignores AWS_S3_LOCKING_PROVIDER=dynamodb since 1.6.1" in out


def test_merges_of_the_newest_deltalake_beside_deltacommit_merges_and_appends_lose_nothing(
        s3_bucket: S3Bucket, deltalake_latest: Path) -> None:
    """On conditional put: a deltacommit process MERGEs keys of its own and one appends, while
    a deltalake 1.6.6 process MERGEs keys of its own (each MERGE inserts its key where absent,
    so a MERGE submitted again after a conflict is safe).  Every acknowledged key is there once,
    and each side fails only by the conflicts its own rules define, each submitted again."""
    uri, options = f"{s3_bucket.uri}/merges", s3_bucket.storage_options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    merges = 6
    result = run_fleet(uri, options, deltalake_latest, ours=[0, 1], peers=[2], appends=merges,
                       our_mergers=(0,), peer_mode="merge")
    assert result.ours_failed == {}
    peer = result.peers[2]
    assert peer.acked == list(range(merges)), (peer.errors, peer.stderr[-2000:])
    assert all(k == "gave-up-after-retries" or k.startswith("conflict: ") for k in peer.errors), \
        peer.errors
    expected = result.expected_rows()
    assert expected == {(w, b): 1 for w in range(3) for b in range(merges)}
    ours = dc.DeltaTable(uri, storage_options=options)
    assert pairs(ours.to_arrow()) == expected
    assert pairs(deltalake.DeltaTable(uri, storage_options=options).to_pyarrow_table()) == expected
    assert [h["operation"] for h in ours.history()].count("MERGE") == 2 * merges
    assert digests_hold(ours.log_store.store, result) == []
