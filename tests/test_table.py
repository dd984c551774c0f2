"""The table API on local tables: create, write, read, history, update, time travel."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.protocol.log.names import commit_path

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("v", pa.float64())])


def rows(ids: range, day: str) -> pa.Table:
    return pa.table({"id": list(ids), "day": [day] * len(ids), "v": [i / 2 for i in ids]},
                    schema=SCHEMA)


def test_create_records_protocol_metadata_and_coordination(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = dc.DeltaTable.create(uri, SCHEMA, partition_by=["day"],
                             configuration={"delta.checkpointInterval": "5"}, name="events")
    assert t.version == 0
    assert (t.protocol.min_reader_version, t.protocol.min_writer_version) == (1, 2)
    assert t.partition_columns == ["day"]
    assert t.configuration["delta.checkpointInterval"] == "5"
    assert t.configuration["deltacommit.coordination"] == "conditional"
    assert t.schema == SCHEMA
    first = [json.loads(line) for line in (Path(uri) / commit_path(0)).read_text().splitlines()]
    assert [next(iter(a)) for a in first] == ["commitInfo", "protocol", "metaData"]


def test_write_read_filter_history(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    r1 = dc.write(uri, rows(range(0, 10), "2026-11-21"), partition_by=["day"])
    r2 = dc.write(uri, rows(range(10, 15), "2026-11-22"))
    assert (r1.version, r2.version) == (1, 2)
    assert r1.attempts == 1 and not r1.skipped
    t = dc.DeltaTable(uri)
    assert t.to_arrow().num_rows == 15
    assert t.to_arrow(partition_filters=[("day", "=", "2026-11-22")]).column("id").to_pylist() == \
        list(range(10, 15))
    assert t.to_arrow(columns=["v"]).schema.names == ["v"]
    assert len(t.files(partition_filters=[("day", "=", "2026-11-21")])) == 1
    files = t.files()
    assert all(f.path.startswith("day=2026-11-2") for f in files)
    stats = json.loads(files[0].stats or "{}")
    assert stats["numRecords"] in (10, 5)
    h = t.history()
    assert [e["version"] for e in h] == [2, 1, 0]
    assert h[0]["operation"] == "WRITE" and h[0]["readVersion"] == 1
    assert h[0]["isBlindAppend"] is True
    assert t.history(limit=1)[0]["version"] == 2


def test_overwrite_with_predicate_replaces_only_matching_partitions(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, rows(range(0, 10), "a"), partition_by=["day"])
    dc.write(uri, rows(range(10, 20), "b"))
    dc.write(uri, rows(range(100, 102), "b"), mode="overwrite", predicate="day = 'b'")
    got = dc.DeltaTable(uri).to_arrow()
    assert sorted(got.column("id").to_pylist()) == list(range(10)) + [100, 101]
    dc.write(uri, rows(range(7, 8), "c"), mode="overwrite")
    assert dc.DeltaTable(uri).to_arrow().column("id").to_pylist() == [7]


def test_idempotent_writes_are_skipped(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    r = dc.write(uri, rows(range(3), "a"), app_id="stage-1", app_version=1)
    assert not r.skipped
    again = dc.write(uri, rows(range(3), "a"), app_id="stage-1", app_version=1)
    assert again.skipped and again.version == r.version
    older = dc.write(uri, rows(range(3), "a"), app_id="stage-1", app_version=0)
    assert older.skipped
    newer = dc.write(uri, rows(range(3, 4), "a"), app_id="stage-1", app_version=2)
    assert not newer.skipped
    t = dc.DeltaTable(uri)
    assert t.app_version("stage-1") == 2
    assert t.to_arrow().num_rows == 4


def test_update_and_time_travel(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, rows(range(3), "a"))
    reader = dc.DeltaTable(uri)
    dc.write(uri, rows(range(3, 5), "a"))
    dc.write(uri, rows(range(5, 6), "a"))
    assert reader.version == 1
    assert reader.update() == 3
    assert reader.to_arrow().num_rows == 6
    old = dc.DeltaTable(uri, version=1)
    assert old.version == 1 and old.to_arrow().num_rows == 3
    with pytest.raises(dc.InvalidArgumentError, match="version 1"):
        old.update()
    with pytest.raises(dc.TableNotFoundError, match="version 9"):
        dc.DeltaTable(uri, version=9)


def test_low_level_transaction_and_delete(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, rows(range(5), "a"), partition_by=["day"])
    dc.write(uri, rows(range(5, 8), "b"))
    t = dc.DeltaTable(uri)
    with t.transaction("DELETE") as txn:
        old = txn.scan(partition_filters=[("day", "=", "a")])
        assert len(old) == 1
        txn.remove(old)
    assert txn.result is not None and txn.result.version == 3
    assert sorted(t.to_arrow().column("id").to_pylist()) == [5, 6, 7]
    r = t.delete("day = 'b'")
    assert r["version"] == 4 and r["num_deleted_rows"] == 3
    assert t.to_arrow().num_rows == 0
    assert dc.DeltaTable(uri).history(1)[0]["operation"] == "DELETE"


def test_empty_table_reads_as_empty(tmp_path: Path) -> None:
    t = dc.DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    assert t.to_arrow().num_rows == 0
    assert t.to_arrow().schema == SCHEMA


def test_concurrent_creators_one_wins(tmp_path: Path) -> None:
    import threading

    uri = str(tmp_path / "t")
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def create() -> None:
        barrier.wait()
        try:
            dc.DeltaTable.create(uri, SCHEMA)
            result = "created"
        except dc.TableExistsError:
            result = "exists"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(outcomes) == ["created"] + ["exists"] * 7
