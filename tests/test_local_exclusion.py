"""Exclusion on a local table: 8 processes x 50 appends, every commit exactly once."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
from collections import Counter
from pathlib import Path

import pyarrow as pa

import deltacommit as dc
from deltacommit.protocol.log.names import commit_path

WRITERS = 8
APPENDS = 50
SCHEMA = pa.schema([("writer", pa.int32()), ("batch", pa.int32())])


def _writer(uri: str, writer: int, start: mp.synchronize.Barrier,
            out: mp.Queue[list[tuple[int, int, str]]]) -> None:
    table = dc.DeltaTable(uri)
    acked: list[tuple[int, int, str]] = []
    start.wait()
    for b in range(APPENDS):
        data = pa.table({"writer": [writer], "batch": [b]}, schema=SCHEMA)
        r = dc.write(table, data)
        acked.append((b, r.version, r.digest))
    out.put(acked)


def test_eight_processes_fifty_appends_each(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(WRITERS)
    out: mp.Queue[list[tuple[int, int, str]]] = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(uri, w, start, out)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    journals = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0

    table = dc.DeltaTable(uri)
    assert table.version == WRITERS * APPENDS

    # Every acknowledged commit owns a distinct version, and the file at that version is
    # byte-for-byte the one its writer wrote: nobody replaced it.
    versions = Counter(v for j in journals for _, v, _ in j)
    assert sorted(versions) == list(range(1, WRITERS * APPENDS + 1))
    assert set(versions.values()) == {1}
    for j in journals:
        for _, v, digest in j:
            body = (Path(uri) / commit_path(v)).read_bytes()
            assert hashlib.sha256(body).hexdigest() == digest

    # Every appended batch is present exactly once.
    rows = table.to_arrow()
    seen = Counter(zip(rows.column("writer").to_pylist(), rows.column("batch").to_pylist(),
                       strict=True))
    assert seen == Counter({(w, b): 1 for w in range(WRITERS) for b in range(APPENDS)})
