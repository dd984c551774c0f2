"""Checkpoints both ways with delta-rs: each reads the other's, with the log before it deleted."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pyarrow as pa

import deltacommit as dc
from deltacommit.protocol.files.lazy_files import LazyActionMap
from deltacommit.protocol.log.names import LOG_DIR, commit_path
from deltacommit.testing import S3Bucket

from .helpers import SCHEMA, rows


def sorted_rows(table: pa.Table) -> list[dict[str, object]]:
    return sorted(table.select(["id", "day", "v"]).to_pylist(), key=lambda r: (r["id"], r["v"]))


def their_paths(dt: deltalake.DeltaTable) -> set[str]:
    actions = pa.table(dt.get_add_actions())
    return set(actions.column("path").to_pylist())


def drop_commits_before(root: Path, version: int) -> None:
    for v in range(version):
        (root / commit_path(v)).unlink(missing_ok=True)


def test_deltalake_reads_a_table_that_only_our_checkpoint_describes(tmp_path: Path) -> None:
    root = tmp_path / "t"
    uri = str(root)
    t = dc.DeltaTable.create(uri, SCHEMA, partition_by=["day"],
                             configuration={"delta.checkpointInterval": "5"})
    for i in range(6):
        dc.write(t, rows(range(i * 10, i * 10 + 3), day=f"2026-11-{20 + i % 3}"),
                 app_id="loader", app_version=i)
    t.delete("day = '2026-11-20'")
    dc.write(t, rows([99], day="2026-11-20"), app_id="loader", app_version=6)
    for i in range(6, 9):
        dc.write(t, rows([100 + i], day="2026-11-23 10:00"))  # a value that needs escaping
    assert t.version == 11
    drop_commits_before(root, 10)  # only checkpoint 10 and commit 11 remain
    theirs = deltalake.DeltaTable(uri)
    ours = dc.DeltaTable(uri)
    assert theirs.version() == ours.version == 11
    assert sorted_rows(theirs.to_pyarrow_table()) == sorted_rows(ours.to_arrow())
    assert their_paths(theirs) == {a.path for a in ours.files()}
    assert theirs.transaction_version("loader") == ours.app_version("loader") == 6
    # delta-rs keeps writing on top of our checkpoint, and we read what it wrote.
    deltalake.write_deltalake(uri, rows([500], day="2026-11-24"), mode="append")
    ours.update()
    assert sorted_rows(ours.to_arrow()) == sorted_rows(deltalake.DeltaTable(uri).to_pyarrow_table())


def test_we_read_a_table_that_only_a_deltalake_checkpoint_describes(tmp_path: Path) -> None:
    root = tmp_path / "t"
    uri = str(root)
    deltalake.write_deltalake(uri, rows(range(0, 5), day="a"), partition_by=["day"])
    deltalake.write_deltalake(uri, rows(range(5, 10), day="b"), mode="append")
    deltalake.write_deltalake(uri, rows(range(10, 12), day="b"), mode="overwrite",
                              predicate="day = 'b'")
    deltalake.write_deltalake(uri, rows(range(20, 23), day="c=d/e"), mode="append")
    dt = deltalake.DeltaTable(uri)
    dt.delete("day = 'a'")
    dt = deltalake.DeltaTable(uri)
    dt.create_checkpoint()
    checkpoint_version = dt.version()
    drop_commits_before(root, checkpoint_version)
    deltalake.write_deltalake(uri, rows(range(30, 32), day="a"), mode="append")
    theirs = deltalake.DeltaTable(uri)
    ours = dc.DeltaTable(uri)
    assert ours.version == theirs.version() == checkpoint_version + 1
    state = ours.snapshot.state
    assert isinstance(state.files, LazyActionMap)
    assert sorted_rows(ours.to_arrow()) == sorted_rows(theirs.to_pyarrow_table())
    assert {a.path for a in ours.files()} == their_paths(theirs)
    # Their tombstones came through (the overwritten and deleted files).
    assert len(state.tombstones) == 2
    # And we can commit on top, checkpoint, and delta-rs reads that.
    dc.write(ours, rows([40], day="b"))
    ours.checkpoint()
    drop_commits_before(root, ours.version)
    again = deltalake.DeltaTable(uri)
    assert sorted_rows(again.to_pyarrow_table()) == sorted_rows(dc.DeltaTable(uri).to_arrow())
    assert (root / LOG_DIR / "_last_checkpoint").exists()


def test_checkpoints_on_s3_both_ways(s3_bucket: S3Bucket) -> None:
    """On S3 (moto): our checkpoint is published with a conditional put and delta-rs loads the
    table from it once the commits before it are gone; then the other way round."""
    import boto3

    opts = s3_bucket.storage_options
    uri = f"{s3_bucket.uri}/t"
    t = dc.DeltaTable.create(uri, SCHEMA, partition_by=["day"], storage_options=opts,
                             configuration={"delta.checkpointInterval": "3"})
    for i in range(4):
        dc.write(t, rows([i], day=f"d{i % 2}"))
    s3 = boto3.client("s3", endpoint_url=opts["AWS_ENDPOINT_URL"], region_name="us-east-1")
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket.name,
                                                 Prefix="t/_delta_log/")["Contents"]}
    assert f"t/{LOG_DIR}/{3:020d}.checkpoint.parquet" in keys
    for v in range(3):
        s3.delete_object(Bucket=s3_bucket.name, Key=f"t/{commit_path(v)}")
    theirs = deltalake.DeltaTable(uri, storage_options=opts)
    assert theirs.version() == 4
    assert sorted_rows(theirs.to_pyarrow_table()) == sorted_rows(
        dc.DeltaTable(uri, storage_options=opts).to_arrow())
    deltalake.write_deltalake(uri, rows([10], day="d0"), mode="append", storage_options=opts)
    theirs = deltalake.DeltaTable(uri, storage_options=opts)
    theirs.create_checkpoint()
    for v in range(3, 5):
        s3.delete_object(Bucket=s3_bucket.name, Key=f"t/{commit_path(v)}")
    ours = dc.DeltaTable(uri, storage_options=opts)
    assert ours.version == 5
    assert sorted_rows(ours.to_arrow()) == sorted_rows(theirs.to_pyarrow_table())
