"""Two Spark applications (two processes, each with its own SparkSession and its own turn
folder, standing for two hosts) append with ``dcs.write`` to one local table whose writers
share versions through fleet-wide group commit: every batch lands exactly once."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.commit.commit_info import committed_txn_ids
from deltacommit.protocol.fleet.record import FLEET_DIR

from .applications import run_writer_apps

pytestmark = pytest.mark.spark

WRITERS, COMMITS, ROWS = 2, 5, 10


def test_two_spark_applications_on_a_fleet_table_land_every_batch_exactly_once(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "events")
    schema = pa.schema([("writer", pa.int32()), ("batch", pa.int32()), ("id", pa.int64())])
    dc.DeltaTable.create(uri, schema, partition_by=["writer"],
                         configuration={"deltacommit.groupCommit.fleet": "true"})
    logs = [tmp_path / f"writer-{w}.log" for w in range(WRITERS)]
    envs = []
    for w in range(WRITERS):
        turns = tmp_path / f"turns-{w}"
        turns.mkdir(mode=0o700)
        envs.append({**os.environ, "DELTACOMMIT_TURN_DIR": str(turns)})
    lines = run_writer_apps(uri, envs, logs, commits=COMMITS, rows=ROWS)
    commits = [x for x in lines if "version" in x]
    assert len(commits) == WRITERS * COMMITS and not any(c["skipped"] for c in commits)
    table = dc.DeltaTable(uri)
    # Each acknowledged batch is in the version it was acknowledged with, and no
    # transaction is in two versions.
    carried = Counter(t for c in table.log.known_commits(1, table.version)
                      for t in committed_txn_ids(c.commit_info))
    assert carried and set(carried.values()) == {1}
    assert len(carried) == WRITERS * COMMITS
    rows = table.to_arrow().to_pylist()
    counts = Counter((r["writer"], r["batch"]) for r in rows)
    assert counts == {(w, b): ROWS for w in range(WRITERS) for b in range(COMMITS)}
    assert all(table.app_version(f"writer-{w}") == COMMITS - 1 for w in range(WRITERS))
    # They went through the fleet (its folder exists), and left no record behind.
    folder = tmp_path / "events" / FLEET_DIR
    assert folder.is_dir() and not [p for p in folder.iterdir() if p.suffix == ".json"]
