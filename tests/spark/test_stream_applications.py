"""Two Spark applications (two driver processes, as two clusters) stream into one S3 table
through the DynamoDB log store while a deltalake 1.6.0 writer appends to it; then one query is
restarted after its last Spark commit-log entry is deleted.  Every row is present exactly once."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import deltacommit as dc
from deltacommit.testing import MotoServer, S3Bucket
from tests.s3.helpers import SCHEMA, deltalake_appender, dynamo_options, new_log_table

pytestmark = pytest.mark.spark

APP = Path(__file__).with_name("stream_app.py")
FILES, ROWS, PEER_APPENDS = 5, 20, 10


def _file(folder: Path, writer: int, n: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{n}.tmp"
    pq.write_table(pa.table({"writer": [writer] * ROWS,
                             "batch": [n * 1000 + i for i in range(ROWS)]}, schema=SCHEMA), tmp)
    tmp.rename(folder / f"part-{n:04d}.parquet")


def _start(uri: str, source: Path, checkpoint: Path, name: str, options: dict[str, str],
           log: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "DC_STORAGE_OPTIONS": json.dumps(options)}
    app = subprocess.Popen([sys.executable, str(APP), "--uri", uri, "--source", str(source),
                            "--checkpoint", str(checkpoint), "--name", name],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("w"),
                           text=True, env=env)
    assert app.stdout is not None
    line = app.stdout.readline()
    assert line.strip() == "ready", f"{name} did not start: {line!r}\n{log.read_text()[-3000:]}"
    return app


def _finish(app: subprocess.Popen[str], log: Path) -> dict[str, Any]:
    out, _ = app.communicate(timeout=300)
    assert app.returncode == 0, log.read_text()[-3000:]
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def test_two_streaming_applications_and_a_deltalake_writer(
        spark: Any, moto_server: MotoServer, s3_bucket: S3Bucket, tmp_path: Path) -> None:
    options = dynamo_options(s3_bucket, moto_server.endpoint, new_log_table(moto_server.endpoint))
    uri = f"{s3_bucket.uri}/events"
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    sources = {w: tmp_path / f"in-{w}" for w in (10, 11)}
    checkpoints = {w: tmp_path / f"ckpt-{w}" for w in (10, 11)}
    for w, folder in sources.items():
        for n in range(FILES):
            _file(folder, w, n)
    apps = {w: _start(uri, sources[w], checkpoints[w], f"q{w}", options, tmp_path / f"{w}.log")
            for w in (10, 11)}
    peer_out: queue.Queue[Any] = queue.Queue()
    peer = threading.Thread(target=deltalake_appender,
                            args=(uri, options, 1, PEER_APPENDS, threading.Barrier(1), peer_out))
    for app in apps.values():
        assert app.stdin is not None
        app.stdin.write("go\n")
        app.stdin.flush()
    peer.start()
    results = {w: _finish(app, tmp_path / f"{w}.log") for w, app in apps.items()}
    peer.join(timeout=300)
    writer, acked = peer_out.get(timeout=5)
    assert writer == 1 and not isinstance(acked, str), acked
    for w in (10, 11):
        assert results[w]["batches"] == list(range(FILES))

    # Query 10 crashed after its last Delta commit: Spark's commit log lacks that batch.
    commits = checkpoints[10] / "commits"
    last = max((p for p in commits.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    last.unlink()
    last.with_name(f".{last.name}.crc").unlink(missing_ok=True)
    _file(sources[10], 10, FILES)
    restarted = _start(uri, sources[10], checkpoints[10], "q10", options, tmp_path / "10b.log")
    assert restarted.stdin is not None
    restarted.stdin.write("go\n")
    restarted.stdin.flush()
    again = _finish(restarted, tmp_path / "10b.log")
    assert again["batches"] == [FILES - 1, FILES]  # the replay, then the new file

    expected = Counter({(1, b): 1 for b in range(PEER_APPENDS)})
    expected.update({(10, n * 1000 + i): 1 for n in range(FILES + 1) for i in range(ROWS)})
    expected.update({(11, n * 1000 + i): 1 for n in range(FILES) for i in range(ROWS)})
    for data in (dc.DeltaTable(uri, storage_options=options).to_arrow(),
                 deltalake.DeltaTable(uri, storage_options=options).to_pyarrow_table()):
        got = Counter(zip(data.column("writer").to_pylist(), data.column("batch").to_pylist(),
                          strict=True))
        assert got == expected, {"duplicated": +(got - expected), "missing": +(expected - got)}
