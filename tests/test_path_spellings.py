"""Every spelling of a data file's path that the protocol allows, or that Spark writes, is read,
kept by vacuum (default retention) and verified; files outside the table are refused for reading
and never deleted.  On local disk, and on S3 (moto) with conditional writes and with the
DynamoDB log store."""

from __future__ import annotations

import io
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import deltacommit as dc
from deltacommit.errors import CorruptLogError
from deltacommit.ops.verify import verify_table
from deltacommit.protocol.actions import Add
from deltacommit.runtime.clock import ManualClock
from deltacommit.testing import MotoServer, S3Bucket

SCHEMA = pa.schema([("id", pa.int64())])
EIGHT_DAYS = 8 * 86_400.0


def _parquet(i: int) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": [i]}, schema=SCHEMA), buf)
    return buf.getvalue()


def _spellings_local(root: Path) -> list[tuple[str, str]]:
    """(file name in the table, the add path spelling it)."""
    r = root.as_posix()
    return [("f0.parquet", f"{r}/f0.parquet"), ("f1.parquet", "./f1.parquet"),
            ("f2.parquet", f"file:{r}/f2.parquet"), ("f3.parquet", f"file://localhost{r}/f3.parquet"),
            ("f4.parquet", f"file://{r}/f4.parquet"), ("sub/f5.parquet", "sub/x/../f5.parquet"),
            ("f6.parquet", "%66%36.parquet"), ("f7.parquet", "f7.parquet")]


def _spellings_s3(bucket: str, key: str) -> list[tuple[str, str]]:
    return [("f0.parquet", f"s3a://{bucket}/{key}/f0.parquet"), ("f1.parquet", "./f1.parquet"),
            ("f2.parquet", f"s3://{bucket}/{key}/f2.parquet"),
            ("f3.parquet", f"s3n://{bucket}/{key}/f3.parquet"), ("f4.parquet", f"/{key}/f4.parquet"),
            ("f5.parquet", "%66%35.parquet"), ("f6.parquet", "f6.parquet")]


def _commit_spelled(t: dc.DeltaTable, spellings: list[tuple[str, str]]) -> None:
    store = t.log_store.store
    adds = []
    for i, (name, spelled) in enumerate(spellings):
        data = _parquet(i)
        store.put(name, data)
        adds.append(Add(spelled, {}, len(data), int(time.time() * 1000), True,
                        '{"numRecords":1}'))
    store.put("orphan.parquet", _parquet(99))  # unreferenced: the one file vacuum may delete
    with t.transaction() as txn:
        txn.add(adds)


def _check_vacuum_keeps_live_files(uri: str, options: dict[str, str], n: int) -> None:
    later = dc.DeltaTable(uri, storage_options=options, clock=ManualClock(time.time() + EIGHT_DAYS))
    assert later.vacuum(dry_run=True) == ["orphan.parquet"]
    assert later.vacuum(dry_run=False) == ["orphan.parquet"]
    t = dc.DeltaTable(uri, storage_options=options)
    assert sorted(t.to_arrow()["id"].to_pylist()) == list(range(n))
    report = verify_table(uri, storage_options=options)
    assert report.ok, report.problems


def test_local_spellings_survive_vacuum_and_read(tmp_path: Path) -> None:
    root = tmp_path / "T"
    t = dc.DeltaTable.create(str(root), SCHEMA)
    spellings = _spellings_local(root.resolve())
    _commit_spelled(t, spellings)
    _check_vacuum_keeps_live_files(str(root), {}, len(spellings))


@pytest.mark.parametrize("mode", ["conditional", "dynamodb"])
def test_s3_spellings_survive_vacuum_and_read(mode: str, s3_bucket: S3Bucket,
                                              moto_server: MotoServer) -> None:
    from tests.s3.helpers import dynamo_options, new_log_table

    key = f"T{uuid.uuid4().hex[:6]}"
    uri = f"{s3_bucket.uri}/{key}"
    options = (dict(s3_bucket.storage_options) if mode == "conditional"
               else dynamo_options(s3_bucket, moto_server.endpoint, new_log_table(moto_server.endpoint)))
    t = dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    spellings = _spellings_s3(s3_bucket.name, key)
    _commit_spelled(t, spellings)
    _check_vacuum_keeps_live_files(uri, options, len(spellings))


@pytest.mark.parametrize("spelled", ["../outside/secret.parquet", "%2E%2E/outside/secret.parquet",
                                     "%2e%2e%2foutside%2fsecret.parquet", "{outside}/secret.parquet",
                                     "file://{outside}/secret.parquet"])
def test_reads_never_leave_the_table(tmp_path: Path, spelled: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.parquet"
    secret.write_bytes(_parquet(7))
    root = tmp_path / "T"
    t = dc.DeltaTable.create(str(root), SCHEMA)
    path = spelled.format(outside=outside.resolve().as_posix())
    with t.transaction() as txn:
        txn.add([Add(path, {}, secret.stat().st_size, 0, True)])
    with pytest.raises(CorruptLogError, match="outside the table location"):
        dc.DeltaTable(str(root)).to_arrow()
    # Opting in (a shallow clone) reads it; vacuum never deletes it either way.
    opted = dc.DeltaTable(str(root), allow_external_paths=True)
    assert opted.to_arrow()["id"].to_pylist() == [7]
    later = dc.DeltaTable(str(root), clock=ManualClock(time.time() + EIGHT_DAYS))
    later.vacuum(dry_run=False)
    assert secret.exists()


def test_vacuum_refuses_when_a_live_path_cannot_be_resolved(tmp_path: Path) -> None:
    root = tmp_path / "T"
    t = dc.DeltaTable.create(str(root), SCHEMA)
    store = t.log_store.store
    store.put("orphan.parquet", _parquet(1))
    # Our writers refuse such a path; a log written by someone else may hold one.
    with pytest.raises(CorruptLogError, match="invalid UTF-8"), t.transaction() as txn:
        txn.add([Add("bad%ff%fe.parquet", {}, 1, 0, True)])
    add = Add("bad%ff%fe.parquet", {}, 1, 0, True)
    (root / "_delta_log" / "00000000000000000001.json").write_text(
        json.dumps({"add": add.to_json()}) + "\n")
    later = dc.DeltaTable(str(root), clock=ManualClock(time.time() + EIGHT_DAYS))
    with pytest.raises(CorruptLogError, match="nothing was deleted"):
        later.vacuum(dry_run=False)
    assert (root / "orphan.parquet").exists()


def test_vacuum_keeps_deletion_vector_files(tmp_path: Path) -> None:
    root = tmp_path / "T"
    t = dc.DeltaTable.create(str(root), SCHEMA)
    store = t.log_store.store
    data = _parquet(1)
    store.put("f.parquet", data)
    dv_file = "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    store.put(dv_file, b"\x01")
    dv: dict[str, Any] = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
                          "offset": 1, "sizeInBytes": 1, "cardinality": 0}
    log = root / "_delta_log" / "00000000000000000001.json"
    add = Add("f.parquet", {}, len(data), 0, True, None, None, dv)
    log.write_text(json.dumps({"add": add.to_json()}) + "\n")
    later = dc.DeltaTable(str(root), clock=ManualClock(time.time() + EIGHT_DAYS))
    assert later.vacuum(dry_run=True) == []


def test_files_removed_after_a_checkpoint_stay_removed_whatever_their_spelling(
        tmp_path: Path) -> None:
    """Absolute spellings are not their own keys: a checkpoint row removed afterwards is hidden
    by its canonical key, so the file list and the next checkpoint must match rows by key, not
    by the path as written (a removed file in a checkpoint comes back for every reader)."""
    from deltacommit.engine.snapshot import state_cache

    root = tmp_path / "T"
    t = dc.DeltaTable.create(str(root), SCHEMA)
    # No escaped path among them: each row's key differs from its path only by its spelling.
    spellings = [s for s in _spellings_local(root.resolve()) if "%" not in s[1]]
    _commit_spelled(t, spellings)
    t.checkpoint()
    state_cache.clear()
    reopened = dc.DeltaTable(str(root))  # the checkpoint's rows, kept as Arrow
    now = int(time.time() * 1000)
    with reopened.transaction() as txn:  # removed as another writer would: by path, unread
        txn.remove([Add(spelled, {}, 0, now, True).to_remove(now) for _, spelled in spellings[:5]])
    survivors = sorted(i for i in range(len(spellings)) if i >= 5)
    assert sorted(reopened.get_add_actions()["num_records"].to_pylist()) == [1] * len(survivors)
    reopened.checkpoint()
    state_cache.clear()
    fresh = dc.DeltaTable(str(root))
    assert sorted(fresh.to_arrow()["id"].to_pylist()) == survivors
    assert len(fresh.get_add_actions()) == len(survivors)
    assert verify_table(str(root)).ok
