"""Delta tables from PySpark without Delta's JVM jars: Spark tasks write and read the Parquet
data files with pyarrow, the driver commits through deltacommit.

    from deltacommit import spark as dcs
    result = dcs.write(df, "s3://bucket/events", mode="append", partition_by=["day"],
                       app_id="ingest", app_version=42, storage_options=opts)
    df = dcs.read(spark, "s3://bucket/events", partition_filters=[("day", "=", "2026-11-22")])

Executors need only pyarrow (and pandas, for Spark's Arrow path): deltacommit sends its own
code to them on a session's first job, over classic sessions and Spark Connect alike
(``shipping.py``).  Spark Connect sessions (``SparkSession.builder.remote(...)``) work for
``write`` and ``read``; install the ``connect`` extra for the client.
"""

from __future__ import annotations

from deltacommit.ops.write import WriteResult
from deltacommit.spark.merge import SparkMerger, merge
from deltacommit.spark.optimize import optimize
from deltacommit.spark.reader import read
from deltacommit.spark.rowlevel import delete, update
from deltacommit.spark.schema import (
    arrow_to_spark_schema,
    arrow_to_spark_type,
    as_nullable,
    delta_to_spark_schema,
    spark_to_arrow_schema,
    spark_to_arrow_type,
)
from deltacommit.spark.session import local_session
from deltacommit.spark.streaming import foreach_batch, write_stream
from deltacommit.spark.writer import write, write_files

__all__ = [
    "SparkMerger",
    "WriteResult",
    "arrow_to_spark_schema",
    "arrow_to_spark_type",
    "as_nullable",
    "delete",
    "delta_to_spark_schema",
    "foreach_batch",
    "local_session",
    "merge",
    "optimize",
    "read",
    "spark_to_arrow_schema",
    "spark_to_arrow_type",
    "update",
    "write",
    "write_files",
    "write_stream",
]
