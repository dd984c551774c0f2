"""Executors without deltacommit: deltacommit sends itself to a classic cluster
(``local-cluster``: executor JVMs of their own whose Python workers run another interpreter)
and to a Spark Connect server, and the pipeline runs there as it does locally: an append, the
same stage re-run and skipped, one partition overwritten, the table read back through Spark;
deltalake 1.6.0 reads the same rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import deltalake
import pytest

from deltacommit.testing import S3Bucket

from .executors import ConnectServer, executor_python

APP = Path(__file__).with_name("shipped_app.py")

EXPECTED = sorted([[i, i % 3] for i in range(30) if i % 3] + [[1000 + i, 0] for i in range(5)])


@pytest.fixture(scope="module")
def worker_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return executor_python(tmp_path_factory.mktemp("executors"))


@pytest.fixture(scope="module")
def connect_url(worker_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with ConnectServer(worker_python, tmp_path_factory.mktemp("connect")) as server:
        yield server.url


def _run(args: list[str], worker_python: Path,
         options: dict[str, str] | None = None) -> dict[str, object]:
    env = {**os.environ, "PYSPARK_PYTHON": str(worker_python),
           "PYSPARK_DRIVER_PYTHON": sys.executable, "DC_STORAGE_OPTIONS": json.dumps(options or {})}
    proc = subprocess.run([sys.executable, str(APP), *args], env=env, capture_output=True,
                          text=True, timeout=600)
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


def test_classic_cluster_whose_executors_lack_the_package(worker_python: Path,
                                                          tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    result = _run(["--uri", uri, "--master", "local-cluster[1,1,1024]"], worker_python)
    _check_pipeline(result, uri, worker_python)


def test_classic_cluster_on_s3_whose_executors_lack_boto3(worker_python: Path,
                                                          s3_bucket: S3Bucket) -> None:
    # The driver commits with boto3 (S3 conditional writes); the executors write and read the
    # data files through pyarrow's S3 file system.
    uri = f"{s3_bucket.uri}/t"
    options = s3_bucket.storage_options
    result = _run(["--uri", uri, "--master", "local-cluster[1,1,1024]"], worker_python, options)
    _check_pipeline(result, uri, worker_python, options)


def test_spark_connect_whose_workers_lack_the_package(worker_python: Path, connect_url: str,
                                                      tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    result = _run(["--uri", uri, "--remote", connect_url], worker_python)
    _check_pipeline(result, uri, worker_python)


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
