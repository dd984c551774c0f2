"""Torture: writer processes killed with SIGKILL at random while they commit, then the checker.

Eight writers append to one table on S3 (moto, single-threaded, so its conditional writes are
atomic) for a bounded time while the supervisor kills one at random about every two seconds
and restarts it; every acknowledged write must then be in the log exactly once, in the version
and the bytes it was acknowledged with, and the table must read back.  Once with S3
conditional writes, once with Spark's DynamoDB protocol (where a kill between the PutItem and
the copy leaves an entry the next writer must repair).  ``make torture`` runs the same for
minutes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deltacommit.cli import main
from deltacommit.io.journal import read_journals
from deltacommit.ops.verify import verify_table
from deltacommit.protocol.log.names import commit_path
from deltacommit.testing import MotoServer, S3Bucket
from deltacommit.testing.stress import run_stress

from ..s3.helpers import dynamo_options, new_log_table

WRITERS = 8
SECONDS = 14.0
KILL_RATE = 0.5


@pytest.mark.parametrize("mode", ["conditional", "dynamodb"])
def test_eight_writers_killed_at_random_lose_and_duplicate_nothing(
        mode: str, s3_bucket: S3Bucket, moto_server: MotoServer, tmp_path: Path) -> None:
    if mode == "dynamodb":
        options = dynamo_options(s3_bucket, moto_server.endpoint, new_log_table(moto_server.endpoint))
    else:
        options = dict(s3_bucket.storage_options)
    uri = f"{s3_bucket.uri}/torture"
    report = run_stress(uri, writers=WRITERS, seconds=SECONDS, kill_rate=KILL_RATE,
                        storage_options=options, rows_per_commit=5,
                        journal_dir=tmp_path / "journals", seed=20261122)
    v = report.verify
    assert v is not None
    assert v.ok, v.problems
    assert not report.failed_writers, report.failed_writers
    assert report.kills > 0 and report.restarts >= report.kills
    assert report.commits > 0 and v.acknowledged == report.commits
    # Every acknowledged write is a distinct transaction in the log; the log may also hold
    # writes whose writer was killed before it could journal them, but none twice.
    assert v.transactions >= report.commits + 1  # + the table's creation
    assert v.rows == 5 * (v.transactions - 1)
    assert report.ok


def test_cli_stress_on_a_local_table_and_a_broken_history_is_caught(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(tmp_path / "t")
    jdir = tmp_path / "journals"
    code = main(["stress", uri, "--writers", "3", "--seconds", "4", "--kill-rate", "1",
                 "--seed", "7", "--journal-dir", str(jdir), "--json"])
    doc = json.loads(capsys.readouterr().out)
    # On failure, say which part failed: a writer's exit (its log's tail), the history check's
    # problems, or no acknowledged commit at all.
    assert code == 0, json.dumps({k: doc[k] for k in (
        "commits", "kills", "restarts", "failed_writers", "elapsed")} | {
        "problems": (doc["verify"] or {}).get("problems")}, indent=1)
    assert doc["ok"] and doc["commits"] > 0 and doc["verify"]["problems"] == []
    assert doc["kills"] > 0
    # Take one acknowledged commit out of the log: the same journals now fail the check,
    # naming the lost write, so the torture test above cannot pass vacuously.
    entries = read_journals([jdir])
    victim = max(entries, key=lambda e: e.version)
    (Path(uri) / commit_path(victim.version)).unlink()
    report = verify_table(uri, entries)
    assert any(victim.txn_id in p and "lost write" in p for p in report.problems), report.problems
    assert main(["verify", uri, "--journal", str(jdir)]) == 1


def test_stress_refuses_a_table_of_another_schema(tmp_path: Path) -> None:
    import pyarrow as pa

    import deltacommit as dc
    from deltacommit.errors import InvalidArgumentError

    uri = str(tmp_path / "other")
    dc.DeltaTable.create(uri, pa.schema([pa.field("id", pa.int64())]))
    with pytest.raises(InvalidArgumentError, match="needs an empty location"):
        run_stress(uri, writers=1, seconds=1)


def test_a_mixed_fleet_killed_at_random_loses_and_duplicates_nothing(
        s3_bucket: S3Bucket, moto_server: MotoServer, tmp_path: Path) -> None:
    """deltacommit writers beside deltalake 1.6.0 and the Spark S3DynamoDBLogStore emulator, all
    killed at random: every write any of them acknowledged is in the table exactly once, and
    deltacommit adds no error of a kind the peers do not already raise among themselves."""
    options = dynamo_options(s3_bucket, moto_server.endpoint, new_log_table(moto_server.endpoint))
    # The peers commit far more slowly than deltacommit's writers (a Spark emulator commit loses
    # most races to them): 30 s with a kill every 5 s gives each peer lives long enough to land,
    # and deltacommit's writers pause 0.1 s between appends, or they win nearly every version.
    report = run_stress(f"{s3_bucket.uri}/mixed", writers=2, seconds=30, kill_rate=0.2,
                        storage_options=options, rows_per_commit=5,
                        journal_dir=tmp_path / "journals", seed=7,
                        peers=["deltalake", "spark-emulator"], writer_pause=0.1)
    assert report.verify is not None and report.verify.ok, report.verify.problems
    assert not report.failed_writers, report.failed_writers
    peers = report.peers
    assert peers is not None
    assert peers.lost == {} and peers.duplicated_rows == 0, peers.to_json()
    assert peers.acknowledged["deltalake"] > 0 and peers.acknowledged["spark-emulator"] > 0
    assert report.commits > 0
    # Spark's kept temp file is the one window in which deltalake fails a repair ("version
    # already exists"); no other kind of peer error may appear.
    for kind, errors in peers.errors.items():
        assert set(errors) <= {"version-already-exists", "gave-up-after-retries"}, (kind, errors)
    assert "deltacommit" not in peers.errors


@pytest.mark.parametrize("mechanism", ["conditional", "dynamodb"])
def test_a_fleet_of_hosts_killed_at_random_beside_peers_loses_and_duplicates_nothing(
        mechanism: str, s3_bucket: S3Bucket, moto_server: MotoServer, tmp_path: Path) -> None:
    """``stress --fleet``: three writers standing for three hosts (a turn folder each) on a
    table with fleet-wide group commit, killed at random beside deltalake 1.6.0 (and on
    DynamoDB the Spark emulator): every acknowledged write of anyone is in the log exactly
    once, in the version it was acknowledged at, and versions carried several writers'
    transactions, so writers were told versions that other hosts claimed for them."""
    import deltacommit as dc
    from deltacommit.testing.stress import FLEET_PROPERTY

    if mechanism == "dynamodb":
        options = dynamo_options(s3_bucket, moto_server.endpoint,
                                 new_log_table(moto_server.endpoint))
        peers = ["deltalake", "spark-emulator"]
    else:
        options, peers = dict(s3_bucket.storage_options), ["deltalake"]
    uri = f"{s3_bucket.uri}/fleet"
    jdir = tmp_path / "journals"
    report = run_stress(uri, writers=3, seconds=12, kill_rate=0.25, storage_options=options,
                        rows_per_commit=5, journal_dir=jdir, seed=11, peers=peers, fleet=True)
    v = report.verify
    assert v is not None and v.ok, v.problems if v else None
    assert not report.failed_writers, report.failed_writers
    assert report.kills > 0 and report.commits > 0 and v.acknowledged == report.commits
    assert report.peers is not None and report.peers.ok, report.peers.to_json()
    assert all(n > 0 for n in report.peers.acknowledged.values()), report.peers.to_json()
    assert set(report.peers.acknowledged) == set(peers)
    for kind, errors in report.peers.errors.items():
        assert set(errors) <= {"version-already-exists", "gave-up-after-retries"}, (kind, errors)
    assert "deltacommit" not in report.peers.errors
    # A fleet table, and every writer a host of its own.
    assert dc.DeltaTable(uri, storage_options=options).configuration[FLEET_PROPERTY] == "true"
    assert sorted(p.name for p in (jdir / "turns").iterdir()) == ["w0", "w1", "w2"]
    # The fleet committed for each other: some version holds several writers' transactions.
    assert v.largest_group > 1, report.to_json()
    assert report.transactions_per_version is not None and report.transactions_per_version > 1


def test_cli_stress_fleet_runs_writers_as_hosts_on_a_fleet_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``deltacommit stress --fleet`` sets the property on the table it creates, gives every
    writer a turn folder of its own and reports the transactions per version."""
    import deltacommit as dc
    from deltacommit.testing.stress import FLEET_PROPERTY

    uri = str(tmp_path / "t")
    jdir = tmp_path / "journals"
    code = main(["stress", uri, "--fleet", "--writers", "2", "--seconds", "6", "--seed", "5",
                 "--journal-dir", str(jdir), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    assert doc["fleet"] and doc["as_hosts"] and doc["commits"] > 0
    assert doc["transactions_per_version"] >= 1 and doc["verify"]["largest_group"] >= 1
    assert dc.DeltaTable(uri).configuration[FLEET_PROPERTY] == "true"
    assert sorted(p.name for p in (jdir / "turns").iterdir()) == ["w0", "w1"]
