"""``DeltaTable.create``: version 0 is a transaction committed through the commit loop.

Racing creators of one location give one table and a clear ``TableExistsError`` to every
loser, counted: exactly one winner, the others refused, one version 0 in the log and it is
the winner's.  A creator that passed its "no table here" check before the winner wrote still
loses cleanly, through the loop (the race for version 0 is the one every version runs).
Version 0 takes the host turn (it leaves the turn's record) and is stamped like any version.
S3 (conditional writes and DynamoDB) racers are in ``tests/s3/test_create_race.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.commit.host_turn import HostTurn
from deltacommit.io.logstore import ConditionalPutLogStore
from deltacommit.io.storage.faults import FaultyStore
from deltacommit.io.storage.local import LocalStore
from deltacommit.protocol.log.names import commit_path
from deltacommit.runtime.clock import ManualClock
from tests.create_race import check_one_table, race

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string())])
RACERS = 8


@pytest.mark.parametrize("turns", [True, False], ids=["turns", "racing"])
def test_racing_creators_give_one_table_and_a_clear_error_to_each_loser(
        tmp_path: Path, turns: bool) -> None:
    uri = str(tmp_path / "t")
    policy = dc.CommitPolicy(host_turns=turns)
    won, lost = race(RACERS, lambda i: dc.DeltaTable.create(
        uri, SCHEMA, description=f"racer {i}", policy=policy))
    check_one_table(uri, won, lost, RACERS)
    assert dc.DeltaTable(uri).metadata.description == won[0].metadata.description  # type: ignore[attr-defined]


def test_a_creator_that_found_no_table_loses_version_0_with_table_exists(
        tmp_path: Path) -> None:
    """The loser checked the location before the winner wrote: the claim of version 0 decides
    (through the commit loop), and the loser's error is the table's existence, not a
    conflict; nothing of the loser's is left behind."""
    uri = str(tmp_path / "t")
    slow = FaultyStore(LocalStore(uri))
    listed = slow.hang("list", "_delta_log/", after=True)
    policy = dc.CommitPolicy(host_turns=False)
    outcome: list[BaseException | dc.DeltaTable] = []

    def create_slowly() -> None:
        try:
            outcome.append(dc.DeltaTable.create(
                uri, SCHEMA, log_store=ConditionalPutLogStore(slow), policy=policy))
        except BaseException as e:
            outcome.append(e)

    loser = threading.Thread(target=create_slowly)
    loser.start()
    listed.wait_reached()  # the loser found no log, and waits before it claims version 0
    winner = dc.DeltaTable.create(uri, SCHEMA, policy=policy, description="winner")
    listed.release()
    loser.join()
    [error] = outcome
    assert isinstance(error, dc.TableExistsError), repr(error)
    assert "concurrently" in str(error) and str(tmp_path / "t") in str(error)
    assert [i.operation for i in slow.injections] == ["list"]
    table = dc.DeltaTable(uri)
    assert (table.version, table.metadata.id) == (0, winner.metadata.id)
    log = sorted(p.name for p in (Path(uri) / "_delta_log").iterdir())
    assert log == [commit_path(0).split("/")[-1]]


def test_version_0_takes_the_host_turn_and_records_itself(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = dc.DeltaTable.create(uri, SCHEMA)
    turn = HostTurn.for_table(table.log_store, 1.0)
    assert turn is not None
    record = turn.record()
    assert record is not None
    digest = hashlib.sha256((Path(uri) / commit_path(0)).read_bytes()).hexdigest()
    assert (record.version, record.digest, record.settled, record.pid) == (
        0, digest, True, os.getpid())
    # The first write is claimed after it, at once, and names it as the commit it follows.
    r = dc.write(table, pa.table({"id": [1], "day": ["a"]}, schema=SCHEMA))
    assert (r.version, r.attempts) == (1, 1)
    info = json.loads((Path(uri) / commit_path(1)).read_text().splitlines()[0])["commitInfo"]
    assert info["deltacommit.previousCommit"] == digest


def test_version_0_is_stamped_and_described_like_any_version(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    clock = ManualClock(start=1_800_000_000.0)
    table = dc.DeltaTable.create(uri, SCHEMA, clock=clock, configuration={
        "delta.enableInCommitTimestamps": "true", "delta.enableRowTracking": "true"})
    lines = [json.loads(line) for line in (Path(uri) / commit_path(0)).read_text().splitlines()]
    info = lines[0]["commitInfo"]
    # In-commit timestamp and row tracking's tag, from stamps.py; the one commitInfo builder:
    # a new table read no version and counts no files.
    assert info["inCommitTimestamp"] == info["timestamp"] == 1_800_000_000_000
    assert info["tags"] == {"delta.rowTracking.preserved": "true"}
    assert "readVersion" not in info and info["operationMetrics"] == {}
    assert (info["operation"], info["isBlindAppend"], info["isolationLevel"]) == (
        "CREATE TABLE", True, "Serializable")
    assert info["txnId"] and info["engineInfo"].startswith("deltacommit/")
    assert [next(iter(a)) for a in lines] == ["commitInfo", "protocol", "metaData"]
    config = table.table_config
    assert config.in_commit_timestamps_enabled(table.protocol)
    assert config.in_commit_timestamp_enablement is None  # on from version 0
    assert config.row_tracking_enabled(table.protocol)
    assert config.row_id_column and config.row_commit_version_column
    # The next version's timestamp follows version 0's although the clock has not moved.
    r = dc.write(table, pa.table({"id": [1], "day": ["a"]}, schema=SCHEMA))
    info1 = json.loads((Path(uri) / commit_path(r.version)).read_text().splitlines()[0])
    assert info1["commitInfo"]["inCommitTimestamp"] == 1_800_000_000_001


def test_racing_writes_to_a_new_location_create_it_once_and_land_every_row(
        tmp_path: Path) -> None:
    """``dc.write`` creates a missing table through ``DeltaTable.create``: the racers that lose
    version 0 open the winner's table and append to it."""
    uri = str(tmp_path / "t")
    won, lost = race(RACERS, lambda i: dc.write(
        uri, pa.table({"id": [i], "day": ["a"]}, schema=SCHEMA)))
    assert lost == []
    versions = sorted(r.version for r in won)  # type: ignore[attr-defined]
    assert versions == list(range(1, RACERS + 1))
    table = dc.DeltaTable(uri)
    assert sorted(table.to_arrow().column("id").to_pylist()) == list(range(RACERS))
    operations = [h["operation"] for h in table.history()]
    assert operations.count("CREATE TABLE") == 1 and operations[-1] == "CREATE TABLE"


def test_a_creator_refused_up_front_writes_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    with pytest.raises(dc.InvalidArgumentError, match=r"delta\.appendOnly must be true or false"):
        dc.DeltaTable.create(uri, SCHEMA, configuration={"delta.appendOnly": "maybe"})
    assert not (Path(uri) / "_delta_log").exists()
    dc.DeltaTable.create(uri, SCHEMA)
    with pytest.raises(dc.TableExistsError, match="already exists"):
        dc.DeltaTable.create(uri, SCHEMA)
