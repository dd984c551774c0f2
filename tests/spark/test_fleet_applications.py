"""Two Spark applications (two processes, each with its own SparkSession and its own turn
folder, standing for two hosts) append with ``dcs.write`` to one local table whose writers
share versions through fleet-wide group commit: every batch lands exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.commit.commit_info import committed_txn_ids
from deltacommit.protocol.fleet.record import FLEET_DIR

pytestmark = pytest.mark.spark

APP = Path(__file__).with_name("writer_app.py")
WRITERS, COMMITS, ROWS = 2, 5, 10


def test_two_spark_applications_on_a_fleet_table_land_every_batch_exactly_once(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "events")
    schema = pa.schema([("writer", pa.int32()), ("batch", pa.int32()), ("id", pa.int64())])
    dc.DeltaTable.create(uri, schema, partition_by=["writer"],
                         configuration={"deltacommit.groupCommit.fleet": "true"})
    logs = [tmp_path / f"writer-{w}.log" for w in range(WRITERS)]
    apps = []
    for w in range(WRITERS):
        turns = tmp_path / f"turns-{w}"
        turns.mkdir(mode=0o700)
        env = {**os.environ, "DELTACOMMIT_TURN_DIR": str(turns)}
        # Spark's logs go to files: a full stderr pipe would stall an application.
        apps.append(subprocess.Popen(
            [sys.executable, str(APP), "--uri", uri, "--writer", str(w), "--commits",
             str(COMMITS), "--rows", str(ROWS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=logs[w].open("w"), text=True, env=env))
    try:
        for app, log in zip(apps, logs, strict=True):
            assert app.stdout is not None
            line = app.stdout.readline()
            assert line.strip() == "ready", \
                f"application did not start: {line!r}\n{log.read_text()[-3000:]}"
        for app in apps:
            assert app.stdin is not None
            app.stdin.write("go\n")
            app.stdin.flush()
        outputs = [app.communicate(timeout=240)[0] for app in apps]
    finally:
        for app in apps:
            if app.poll() is None:
                app.kill()
                app.wait()
    for app, log in zip(apps, logs, strict=True):
        assert app.returncode == 0, log.read_text()[-3000:]

    lines = [json.loads(x) for out in outputs for x in out.splitlines() if x.startswith("{")]
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
