"""One local SparkSession for every Spark test (starting one costs about 8.5 s).

``local[2,4]``: two cores and up to four attempts per task, so a test can inject a task failure
and watch Spark retry it (plain ``local[2]`` never retries).  Tests that change a session setting
restore it with ``spark_conf``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from deltacommit.spark import local_session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = local_session("deltacommit-tests", "local[2,4]", {
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
    }, quick_start=True)
    yield session
    session.stop()


@pytest.fixture
def spark_conf(spark: Any) -> Iterator[Callable[[str, str], None]]:
    """Set session settings for one test; the previous values come back afterwards."""
    saved: dict[str, str | None] = {}

    def set_conf(key: str, value: str) -> None:
        if key not in saved:
            saved[key] = spark.conf.get(key, None)
        spark.conf.set(key, value)

    yield set_conf
    for key, value in saved.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def parquet_files(root: Path) -> set[str]:
    """Every data file under a table directory, as paths relative to it."""
    return {p.relative_to(root).as_posix() for p in root.rglob("*.parquet")}
