"""Executors without deltacommit: deltacommit sends itself to a classic cluster
(``local-cluster``: executor JVMs of their own whose Python workers run another interpreter)
and to a Spark Connect server, and the pipeline runs there as it does locally: an append, the
same stage re-run and skipped, one partition overwritten, the table read back through Spark;
deltalake 1.6.0 reads the same rows.  Meanwhile another local user has planted deltacommit zips
at every name of the shared temp folder they could predict: the executors run our code.

A streaming query over Spark Connect commits each micro-batch from the server's foreachBatch
worker (which lacks deltacommit too), exactly once, under the query's id."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deltacommit.testing import MotoServer, s3_storage_options, unique_name

from .executors import CONNECT_PACKAGES, ConnectServer, executor_python
from .second_user import plant_zips, predictable_zip_paths, shared_temp_folder

APP = Path(__file__).with_name("shipped_app.py")

EXPECTED = sorted([[i, i % 3] for i in range(30) if i % 3] + [[1000 + i, 0] for i in range(5)])


@pytest.fixture(scope="module")
def worker_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # With the Connect client's packages, which a Connect server's foreachBatch worker needs;
    # without deltacommit and boto3.
    return executor_python(tmp_path_factory.mktemp("executors"), CONNECT_PACKAGES)


@pytest.fixture(scope="module")
def connect_server(worker_python: Path,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    with ConnectServer(worker_python, tmp_path_factory.mktemp("connect")) as server:
        yield server


@pytest.fixture(scope="module")
def connect_url(connect_server: ConnectServer) -> str:
    return connect_server.url


@pytest.fixture
def shared_tmp(tmp_path: Path) -> Iterator[Path]:
    """The applications' temp folder: shared like /tmp, with deltacommit zips planted by another
    user at every name they could predict; none of them may ever be imported."""
    marker = tmp_path / "planted-ran"
    with shared_temp_folder() as folder:
        plant_zips(predictable_zip_paths(folder), marker)
        yield folder
        assert not marker.exists(), marker.read_text()


def _run(args: list[str], worker_python: Path, *, tmpdir: Path | None = None,
         cwd: Path | None = None) -> dict[str, object]:
    env = {**os.environ, "PYSPARK_PYTHON": str(worker_python),
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    proc = subprocess.run([sys.executable, str(APP), *args], env=env, capture_output=True,
                          text=True, timeout=600, cwd=cwd)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"exit {proc.returncode}: {proc.stderr[-3000:]}"
    result: dict[str, object] = json.loads(lines[-1])
    return result


def _check_pipeline(result: dict[str, object], uri: str, worker_python: Path,
                    options: dict[str, str] | None = None) -> None:
    assert result["worker_python"] == str(worker_python)
    assert result["worker_has_installed_package"] is False
    assert result["rerun_skipped"] is True
    assert result["first_version"] == 1 and result["overwrite_version"] == 2
    assert sorted(result["rows"]) == EXPECTED  # type: ignore[arg-type]
    peer = deltalake.DeltaTable(uri, storage_options=options).to_pyarrow_table()
    assert sorted([r["id"], r["day"]] for r in peer.to_pylist()) == EXPECTED


Job = tuple[dict[str, object], str, dict[str, str]]


@contextmanager
def _application(args: list[str], worker_python: Path, folder: Path,
                 jobs: list[dict[str, Any]]) -> Iterator[dict[str, Job]]:
    """One application (``args`` choose the cluster) running ``jobs`` one after the other, each
    on its own table: each job's result, table and storage options.  Starting an application
    costs far more than these jobs, and a user's application runs several jobs on one.  Its
    temp folder is shared like /tmp, with zips planted at every name another user could
    predict: none of them may ever be imported."""
    marker = folder / "planted-ran"
    with shared_temp_folder() as tmp:
        plant_zips(predictable_zip_paths(tmp), marker)
        results = _run_plan(jobs, args, worker_python, tmpdir=tmp)
        yield {job["name"]: (results[job["name"]], job["uri"], job["options"]) for job in jobs}
        assert not marker.exists(), marker.read_text()


@pytest.fixture(scope="module")
def classic_cluster(worker_python: Path, moto_server: MotoServer, moto_s3_client: Any,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Job]]:
    """The classic tests' application on ``local-cluster`` (an executor JVM of its own): the
    pipeline on a local table, the same on S3 (the driver commits with boto3; the executors,
    which lack boto3, write and read through pyarrow's S3 file system), and the row-level run."""
    folder = tmp_path_factory.mktemp("classic")
    bucket = unique_name("dc-test")
    moto_s3_client.create_bucket(Bucket=bucket)
    jobs = [{"name": "local", "job": "pipeline", "uri": str(folder / "local"), "options": {}},
            {"name": "s3", "job": "pipeline", "uri": f"s3://{bucket}/t",
             "options": s3_storage_options(moto_server.endpoint)},
            {"name": "rowlevel", "job": "rowlevel", "uri": str(folder / "rowlevel"),
             "options": {}},
            {"name": "rowlevel-tracked", "job": "rowlevel-tracked",
             "uri": str(folder / "rowlevel-tracked"), "options": {}}]
    with _application(["--master", "local-cluster[1,1,1024]"], worker_python, folder,
                      jobs) as results:
        yield results


@pytest.fixture(scope="module")
def connect_client(worker_python: Path, connect_url: str,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Job]]:
    """The Connect tests' client application: the pipeline and the row-level run, whose
    tasks run on the server's workers."""
    folder = tmp_path_factory.mktemp("connect-client")
    jobs = [{"name": "local", "job": "pipeline", "uri": str(folder / "local"), "options": {}},
            {"name": "rowlevel", "job": "rowlevel", "uri": str(folder / "rowlevel"),
             "options": {}},
            {"name": "rowlevel-tracked", "job": "rowlevel-tracked",
             "uri": str(folder / "rowlevel-tracked"), "options": {}}]
    with _application(["--remote", connect_url], worker_python, folder, jobs) as results:
        yield results


def _run_plan(plan: list[dict[str, Any]], args: list[str], worker_python: Path, *,
              tmpdir: Path) -> dict[str, dict[str, object]]:
    env = {**os.environ, "PYSPARK_PYTHON": str(worker_python),
           "PYSPARK_DRIVER_PYTHON": sys.executable, "TMPDIR": str(tmpdir)}
    proc = subprocess.run([sys.executable, str(APP), "--plan", json.dumps(plan), *args], env=env,
                          capture_output=True, text=True, timeout=600)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            result = json.loads(line)
            results[result.pop("job")] = result
    assert set(results) == {job["name"] for job in plan}, \
        f"exit {proc.returncode}: {proc.stderr[-3000:]}"
    return results


def test_classic_cluster_whose_executors_lack_the_package(
        classic_cluster: dict[str, Job], worker_python: Path) -> None:
    result, uri, _ = classic_cluster["local"]
    _check_pipeline(result, uri, worker_python)


def test_classic_cluster_on_s3_whose_executors_lack_boto3(
        classic_cluster: dict[str, Job], worker_python: Path) -> None:
    result, uri, options = classic_cluster["s3"]
    _check_pipeline(result, uri, worker_python, options)


def test_spark_connect_whose_workers_lack_the_package(connect_client: dict[str, Job],
                                                      worker_python: Path) -> None:
    result, uri, _ = connect_client["local"]
    _check_pipeline(result, uri, worker_python)


#: What ``shipped_app.py --rowlevel`` leaves: ids 0-4 updated (n 10), 5-19 untouched (n 0),
#: 20-34 upserted (n 1) but 25 deleted by the MERGE, 35-39 inserted then deleted.
ROW_LEVEL = sorted([[i, i % 3, 10] for i in range(5)] + [[i, i % 3, 0] for i in range(5, 20)]
                   + [[i, i % 3, 1] for i in range(20, 35) if i != 25])


def _check_row_level(result: dict[str, object], uri: str, worker_python: Path) -> None:
    assert result["worker_python"] == str(worker_python)
    assert result["worker_has_installed_package"] is False
    assert result["merged"] == [9, 1, 10]
    assert result["updated"] == 5 and result["deleted"] == 5
    assert sorted(result["rows"]) == ROW_LEVEL  # type: ignore[arg-type]
    peer = deltalake.DeltaTable(uri).to_pyarrow_table()
    assert sorted([r["id"], r["day"], r["n"]] for r in peer.to_pylist()) == ROW_LEVEL


def _check_row_level_tracked(result: dict[str, object], uri: str, worker_python: Path) -> None:
    """The tracked run left the same rows plus the three appended ones, and each verb landed
    after the append it raced (read before it, committed after it)."""
    assert result["worker_python"] == str(worker_python)
    assert result["worker_has_installed_package"] is False
    assert result["appended"] == [10, 11, 12]
    assert result["rebased"] == ["DELETE", "MERGE", "UPDATE"]
    assert result["merged"] == [9, 1, 10]
    assert result["updated"] == 5 and result["deleted"] == 5
    assert sorted(result["rows"]) == sorted(  # type: ignore[arg-type]
        [*ROW_LEVEL, *([k, k % 3, 7] for k in (10, 11, 12))])


def test_row_level_checks_on_a_classic_cluster_whose_executors_lack_the_package(
        classic_cluster: dict[str, Job], worker_python: Path) -> None:
    result, uri, _ = classic_cluster["rowlevel-tracked"]
    _check_row_level_tracked(result, uri, worker_python)


def test_row_level_checks_over_spark_connect_whose_workers_lack_the_package(
        connect_client: dict[str, Job], worker_python: Path) -> None:
    result, uri, _ = connect_client["rowlevel-tracked"]
    _check_row_level_tracked(result, uri, worker_python)


def test_merge_update_and_delete_on_a_classic_cluster_whose_executors_lack_the_package(
        classic_cluster: dict[str, Job], worker_python: Path) -> None:
    result, uri, _ = classic_cluster["rowlevel"]
    _check_row_level(result, uri, worker_python)


def test_merge_update_and_delete_over_spark_connect_whose_workers_lack_the_package(
        connect_client: dict[str, Job], worker_python: Path) -> None:
    result, uri, _ = connect_client["rowlevel"]
    _check_row_level(result, uri, worker_python)


def test_without_shipping_the_error_names_the_module_and_the_fix(worker_python: Path,
                                                                connect_url: str,
                                                                tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    result = _run(["--uri", uri, "--remote", connect_url, "--no-ship"], worker_python)
    error = str(result["error"])
    assert "cannot import 'deltacommit'" in error and uri in error
    assert "spark.deltacommit.shipPackage" in error
    # Nothing was committed beyond the table's creation.
    assert deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == 0


def _files(folder: Path, first: int, count: int) -> None:
    """``count`` input files of 5 rows each (ids from ``first``), each renamed in whole."""
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(first, first + count):
        tmp = folder / f".{n}.tmp"
        pq.write_table(pa.table({"id": pa.array(range(n * 5, n * 5 + 5), pa.int64()),
                                 "day": pa.array([n] * 5, pa.int32())}), tmp)
        tmp.rename(folder / f"part-{n:04d}.parquet")


def _txn_versions(uri: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for f in sorted((Path(uri) / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            txn = json.loads(line).get("txn")
            if txn:
                out.setdefault(txn["appId"], []).append(int(txn["version"]))
    return out


def test_spark_connect_streams_each_batch_once_under_the_query_id(
        worker_python: Path, connect_server: ConnectServer, tmp_path: Path,
        shared_tmp: Path) -> None:
    # The checkpoint is relative: the server resolves it in its own working folder, the client
    # runs in another.  Then the query crashes after a Delta commit, and later its checkpoint
    # is deleted to start again from scratch on a new source.
    client = tmp_path / "client"
    client.mkdir()
    relative = f"ckpt-{uuid.uuid4().hex[:8]}"
    checkpoint = connect_server.workdir / relative
    uri, source_a, source_b = str(tmp_path / "t"), tmp_path / "in-a", tmp_path / "in-b"

    def stream(source: Path) -> dict[str, object]:
        result = _run(["--uri", uri, "--remote", connect_server.url, "--stream", str(source),
                       "--checkpoint", relative], worker_python, tmpdir=shared_tmp, cwd=client)
        assert result["error"] is None, result["error"]
        return result

    _files(source_a, 0, 2)
    first = stream(source_a)
    assert first["batches"] == [0, 1] and not (client / relative).exists()
    assert json.loads((checkpoint / "metadata").read_text())["id"] == first["query_id"]
    commits = checkpoint / "commits"
    (commits / "1").unlink()  # the crash: batch 1 is in the table, not in Spark's commit log
    (commits / ".1.crc").unlink(missing_ok=True)
    _files(source_a, 2, 1)
    restarted = stream(source_a)
    assert restarted["query_id"] == first["query_id"] and restarted["batches"] == [1, 2]
    shutil.rmtree(checkpoint)
    _files(source_b, 10, 1)
    fresh = stream(source_b)
    assert fresh["query_id"] != first["query_id"] and fresh["batches"] == [0]

    rows = deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist()
    assert Counter(rows) == Counter([*range(15), *range(50, 55)])
    assert _txn_versions(uri) == {str(first["query_id"]): [0, 1, 2],
                                  str(fresh["query_id"]): [0]}
    # The server ends each query's foreachBatch worker; its private folders (the zip it was
    # carried, the zip it sent to the executors) go with it.
    deadline = time.monotonic() + 60
    while _private_folders(connect_server.tmpdir) and time.monotonic() < deadline:
        time.sleep(0.2)  # the server stops workers on its own schedule; nothing to wait on
    assert not _private_folders(connect_server.tmpdir)


def _private_folders(tmpdir: Path) -> list[str]:
    return [p.name for p in tmpdir.iterdir()
            if p.name.startswith(("deltacommit-ship-", "deltacommit-sink-"))]
