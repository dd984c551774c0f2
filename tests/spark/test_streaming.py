"""Structured Streaming into Delta tables: every micro-batch committed exactly once, also when
Spark replays a batch after a crash between the Delta commit and its own commit log."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import deltacommit as dc
from deltacommit import spark as dcs
from deltacommit.errors import DeltaCommitError, InvalidArgumentError

pytestmark = pytest.mark.spark

SCHEMA = "source string, id long"


def _drop_file(folder: Path, source: str, first: int, rows: int) -> None:
    """One input file of the file source (written whole, then renamed in, as a source must)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{source}-{first}.tmp"
    pq.write_table(pa.table({"source": [source] * rows,
                             "id": pa.array(range(first, first + rows), pa.int64())}), tmp)
    tmp.rename(folder / f"{source}-{first:06d}.parquet")


def _run(spark: Any, source: Path, uri: str, checkpoint: Path, **kw: Any) -> Any:
    stream = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
              .parquet(str(source)))
    query = dcs.write_stream(stream, uri, checkpoint_location=str(checkpoint),
                             trigger={"availableNow": True}, **kw)
    query.awaitTermination()
    assert query.exception() is None
    return query


def query_id(checkpoint: Path) -> str:
    """The id Spark gave the query checkpointed in ``checkpoint``."""
    return str(json.loads((checkpoint / "metadata").read_text())["id"])


def _ids(uri: str) -> Counter[tuple[str, int]]:
    rows = dc.DeltaTable(uri).to_arrow().to_pylist()
    return Counter((r["source"], r["id"]) for r in rows)


def _forget_last_batch(checkpoint: Path) -> int:
    """Delete the newest entry of Spark's commit log: the crash after the Delta commit."""
    commits = sorted((p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()),
                     key=lambda p: int(p.name))
    last = commits[-1]
    last.unlink()
    crc = last.with_name(f".{last.name}.crc")
    if crc.exists():
        crc.unlink()
    return int(last.name)


def _batch_versions(uri: str, app_id: str) -> list[int]:
    """The batch ids committed for ``app_id``, one per commit that carries its txn action."""
    out: list[int] = []
    log = Path(uri) / "_delta_log"
    for f in sorted(log.glob("*.json")):
        for line in f.read_text().splitlines():
            txn = json.loads(line).get("txn")
            if txn and txn["appId"] == app_id:
                out.append(int(txn["version"]))
    return out


def test_a_replayed_batch_is_skipped(spark: Any, tmp_path: Path) -> None:
    source, uri, ckpt = tmp_path / "in", str(tmp_path / "t"), tmp_path / "ckpt"
    for i in range(3):
        _drop_file(source, "a", i * 10, 10)
    _run(spark, source, uri, ckpt, partition_by=["source"])
    assert _ids(uri) == Counter({("a", i): 1 for i in range(30)})

    replayed = _forget_last_batch(ckpt)
    _drop_file(source, "a", 30, 10)
    first_id = query_id(ckpt)
    query = _run(spark, source, uri, ckpt, partition_by=["source"])
    assert query.id == first_id  # the same query, restarted from its checkpoint
    # Spark did run the forgotten batch again, then the new one.
    assert [p["batchId"] for p in query.recentProgress][:2] == [replayed, replayed + 1]
    assert _ids(uri) == Counter({("a", i): 1 for i in range(40)})
    # Batch ids 0..3 each committed once; the replay of ``replayed`` committed nothing.
    assert _batch_versions(uri, query.id) == [0, 1, 2, 3]
    assert replayed == 2
    peer = deltalake.DeltaTable(uri).to_pyarrow_table()
    assert peer.num_rows == 40


def test_two_queries_into_one_table_then_a_restart(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, pa.schema([("source", pa.string()), ("id", pa.int64())]),
                         partition_by=["source"])
    sources = {s: tmp_path / f"in-{s}" for s in ("a", "b")}
    ckpts = {s: tmp_path / f"ckpt-{s}" for s in ("a", "b")}
    for s, folder in sources.items():
        for i in range(3):
            _drop_file(folder, s, i * 5, 5)
    queries = []
    for s in ("a", "b"):
        stream = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
                  .parquet(str(sources[s])))
        queries.append(dcs.write_stream(stream, uri, checkpoint_location=str(ckpts[s]),
                                        trigger={"availableNow": True}, query_name=f"q{s}"))
    for q in queries:  # both run at once, racing for versions
        q.awaitTermination()
        assert q.exception() is None
    _forget_last_batch(ckpts["a"])
    _drop_file(sources["a"], "a", 15, 5)
    _run(spark, sources["a"], uri, ckpts["a"])
    expected = Counter({("a", i): 1 for i in range(20)} | {("b", i): 1 for i in range(15)})
    got = _ids(uri)
    assert got == expected, {"duplicated": +(got - expected), "missing": +(expected - got)}
    ids = {s: query_id(ckpts[s]) for s in ("a", "b")}
    assert ids["a"] != ids["b"] and ids["a"] == queries[0].id
    assert _batch_versions(uri, ids["a"]) == [0, 1, 2, 3]
    assert _batch_versions(uri, ids["b"]) == [0, 1, 2]


def test_foreach_batch_for_users_own_streams(spark: Any, tmp_path: Path) -> None:
    source, uri, ckpt = tmp_path / "in", str(tmp_path / "t"), tmp_path / "ckpt"
    for i in range(2):
        _drop_file(source, "a", i * 4, 4)
    sink = dcs.foreach_batch(uri, app_id="my-query")
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    q = (stream.writeStream.option("checkpointLocation", str(ckpt)).foreachBatch(sink)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    _forget_last_batch(ckpt)
    q = (stream.writeStream.option("checkpointLocation", str(ckpt)).foreachBatch(sink)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    assert _ids(uri) == Counter({("a", i): 1 for i in range(8)})
    assert _batch_versions(uri, "my-query") == [0, 1]


def _foreach_batch_run(spark: Any, source: Path, checkpoint: Path, sink: Any) -> Any:
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    query = (stream.writeStream.option("checkpointLocation", str(checkpoint)).foreachBatch(sink)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None
    return query


def test_a_stream_started_again_from_an_emptied_checkpoint_commits_its_batches(
        spark: Any, tmp_path: Path) -> None:
    # The operator deletes the checkpoint to start the stream from scratch (on a new source):
    # Spark gives the query a new id and numbers its batches from 0 again.  They are new work.
    uri, ckpt = str(tmp_path / "t"), tmp_path / "ckpt"
    for i in range(3):
        _drop_file(tmp_path / "in-a", "a", i * 10, 10)
    first = _run(spark, tmp_path / "in-a", uri, ckpt)
    shutil.rmtree(ckpt)
    for i in range(2):
        _drop_file(tmp_path / "in-b", "b", i * 10, 10)
    second = _run(spark, tmp_path / "in-b", uri, ckpt)
    assert second.id != first.id
    assert _ids(uri) == Counter({("a", i): 1 for i in range(30)} | {("b", i): 1 for i in range(20)})
    assert _batch_versions(uri, first.id) == [0, 1, 2]
    assert _batch_versions(uri, second.id) == [0, 1]


def test_foreach_batch_names_the_query_by_its_id(spark: Any, tmp_path: Path) -> None:
    uri, ckpt = str(tmp_path / "t"), tmp_path / "ckpt"
    sink = dcs.foreach_batch(uri)  # one function for every run below
    for i in range(2):
        _drop_file(tmp_path / "in-a", "a", i * 4, 4)
    first = _foreach_batch_run(spark, tmp_path / "in-a", ckpt, sink)
    _forget_last_batch(ckpt)  # the crash after the Delta commit: batch 1 is replayed
    _foreach_batch_run(spark, tmp_path / "in-a", ckpt, sink)
    shutil.rmtree(ckpt)  # then a start from scratch on a new source
    _drop_file(tmp_path / "in-b", "b", 0, 4)
    second = _foreach_batch_run(spark, tmp_path / "in-b", ckpt, sink)
    assert _ids(uri) == Counter({("a", i): 1 for i in range(8)} | {("b", i): 1 for i in range(4)})
    assert _batch_versions(uri, first.id) == [0, 1]
    assert _batch_versions(uri, second.id) == [0]


def test_two_queries_whose_relative_checkpoints_python_would_resolve_alike(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Spark resolves a relative checkpoint against its driver's working folder, which is fixed
    # when the JVM starts; Python's moves with os.chdir.  Query B's relative checkpoint is a
    # folder of its own for Spark, but the same folder as query A's for Python.
    from deltacommit.spark.streaming import _legacy_stream_app_id, read_query_id

    jvm_cwd = spark.sparkContext._jvm.System.getProperty("user.dir")
    spark_side = tmp_path / "spark-side" / "ckpt"
    relative = os.path.relpath(spark_side, jvm_cwd)
    ups = Path(relative).parts.count("..")
    python_cwd = tmp_path.joinpath(*(["d"] * ups))
    python_cwd.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(python_cwd)
    python_side = Path(os.path.abspath(relative))
    assert python_side != spark_side and tmp_path in python_side.parents
    # A location-derived id would call the two queries one.
    assert _legacy_stream_app_id(str(python_side)) == _legacy_stream_app_id(relative)

    uri = str(tmp_path / "t")
    for i in range(2):
        _drop_file(tmp_path / "in-a", "a", i * 5, 5)
        _drop_file(tmp_path / "in-b", "b", i * 5, 5)
    a = _run(spark, tmp_path / "in-a", uri, python_side)
    stream = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
              .parquet(str(tmp_path / "in-b")))
    b = dcs.write_stream(stream, uri, checkpoint_location=relative,
                         trigger={"availableNow": True})
    b.awaitTermination()
    assert b.exception() is None
    assert query_id(spark_side) == b.id and query_id(python_side) == a.id != b.id
    # Where the id has to be read from the checkpoint (Spark Connect), Spark resolves it too.
    assert read_query_id(spark, relative, uri) == b.id
    assert _ids(uri) == Counter({(s, i): 1 for s in "ab" for i in range(10)})
    assert _batch_versions(uri, a.id) == [0, 1] and _batch_versions(uri, b.id) == [0, 1]


def test_the_query_id_is_read_from_the_checkpoint_named_not_a_glob_of_it(
        spark: Any, tmp_path: Path) -> None:
    from deltacommit.spark.streaming import read_query_id

    uri = str(tmp_path / "t")
    _drop_file(tmp_path / "in", "a", 0, 1)
    named = _run(spark, tmp_path / "in", uri, tmp_path / "ckpt[12]")
    _run(spark, tmp_path / "in", uri, tmp_path / "ckpt1")  # what the glob would match
    assert read_query_id(spark, str(tmp_path / "ckpt[12]"), uri) == named.id
    with pytest.raises(DeltaCommitError, match="cannot read the streaming query's id"):
        read_query_id(spark, str(tmp_path / "ckpt*"), uri)


def test_a_batch_an_earlier_release_committed_just_before_a_crash_is_skipped(
        spark: Any, tmp_path: Path) -> None:
    # Earlier releases named a write_stream query by a digest of its checkpoint's location.
    from deltacommit.spark.streaming import _legacy_stream_app_id

    uri, ckpt = str(tmp_path / "t"), tmp_path / "ckpt"
    legacy = _legacy_stream_app_id(str(ckpt))
    for i in range(3):
        _drop_file(tmp_path / "in", "a", i * 5, 5)
    _foreach_batch_run(spark, tmp_path / "in", ckpt, dcs.foreach_batch(uri, app_id=legacy))
    _forget_last_batch(ckpt)  # the crash: batch 2 is in the table, not in Spark's commit log
    _drop_file(tmp_path / "in", "a", 15, 5)
    restarted = _run(spark, tmp_path / "in", uri, ckpt)  # this release
    assert [p["batchId"] for p in restarted.recentProgress][:2] == [2, 3]
    assert _ids(uri) == Counter({("a", i): 1 for i in range(20)})
    assert _batch_versions(uri, legacy) == [0, 1, 2]
    assert _batch_versions(uri, restarted.id) == [3]

    # A first batch 0 is always new work: here the earlier release's run committed batch 0
    # only, and the checkpoint was then deleted to start again on a new source.
    uri2, ckpt2 = str(tmp_path / "t2"), tmp_path / "ckpt2"
    legacy2 = _legacy_stream_app_id(str(ckpt2))
    _drop_file(tmp_path / "in2", "a", 0, 5)
    _foreach_batch_run(spark, tmp_path / "in2", ckpt2, dcs.foreach_batch(uri2, app_id=legacy2))
    shutil.rmtree(ckpt2)
    _drop_file(tmp_path / "in3", "b", 0, 5)
    again = _run(spark, tmp_path / "in3", uri2, ckpt2)
    assert _ids(uri2) == Counter({(s, i): 1 for s in "ab" for i in range(5)})
    assert _batch_versions(uri2, again.id) == [0]


def test_refusals_name_the_table_and_the_way_out(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    stream = spark.readStream.schema(SCHEMA).parquet(str(tmp_path))
    for mode in ("complete", "update"):
        with pytest.raises(InvalidArgumentError, match=f"{mode}.*not supported.*foreachBatch"):
            dcs.write_stream(stream, uri, checkpoint_location=str(tmp_path / "c"), mode=mode)
    with pytest.raises(InvalidArgumentError, match="needs a streaming DataFrame"):
        dcs.write_stream(spark.range(1), uri, checkpoint_location=str(tmp_path / "c"))
    with pytest.raises(InvalidArgumentError, match="app_id"):
        dcs.foreach_batch(uri, app_id="")
    assert not Path(uri).exists()


class _ConnectSession:
    """Stands for a Spark Connect session (recognised by its module)."""

    __module__ = "pyspark.sql.connect.session"


class _ConnectBatch:
    sparkSession = _ConnectSession()


def test_over_connect_foreach_batch_needs_the_checkpoint_to_name_the_query(
        tmp_path: Path) -> None:
    # The server's foreachBatch worker is told the batch id only: without the checkpoint (or an
    # app_id) the batch fails clearly, before anything is written.
    uri = str(tmp_path / "t")
    with pytest.raises(InvalidArgumentError, match=f"table {uri}.*Spark Connect.*checkpoint_loc"):
        dcs.foreach_batch(uri)(_ConnectBatch(), 0)  # type: ignore[arg-type]
    assert not Path(uri).exists()


@pytest.mark.parametrize("log_store", ["s3-conditional", "s3-dynamodb"])
def test_a_replayed_batch_is_skipped_on_s3(spark: Any, moto_server: Any, s3_bucket: Any,
                                           tmp_path: Path, log_store: str) -> None:
    import boto3

    from deltacommit.io.logstore.s3_dynamodb.admin import create_log_table
    from deltacommit.testing import unique_name

    options = dict(s3_bucket.storage_options)
    if log_store == "s3-dynamodb":
        log_table = unique_name("delta-log")
        create_log_table(boto3.client("dynamodb", endpoint_url=moto_server.endpoint,
                                      region_name="us-east-1"), log_table)
        options |= {"AWS_S3_LOCKING_PROVIDER": "dynamodb", "DELTA_DYNAMO_TABLE_NAME": log_table,
                    "AWS_ENDPOINT_URL_DYNAMODB": moto_server.endpoint}
    source, ckpt, uri = tmp_path / "in", tmp_path / "ckpt", f"{s3_bucket.uri}/stream"
    for i in range(2):
        _drop_file(source, "a", i * 10, 10)
    _run(spark, source, uri, ckpt, storage_options=options)
    _forget_last_batch(ckpt)
    _drop_file(source, "a", 20, 10)
    _run(spark, source, uri, ckpt, storage_options=options)
    rows = dc.DeltaTable(uri, storage_options=options).to_arrow().to_pylist()
    assert Counter((r["source"], r["id"]) for r in rows) == Counter({("a", i): 1 for i in range(30)})
    txns = [h for h in dc.DeltaTable(uri, storage_options=options).history()
            if h.get("operation") == "WRITE"]
    assert len(txns) == 3  # batches 0, 1, 2; the replay of batch 1 committed nothing
