"""``read()``: a Delta table as a Spark DataFrame, read by Spark tasks with pyarrow.

The driver replays the log and prunes partitions before any data file is opened: the tasks are
handed only the files of the snapshot whose partition values pass ``partition_filters``.  Tasks
read those files through deltacommit's object stores (so S3 needs no hadoop-aws) and restore the
partition columns from each file's ``partitionValues``, never from its directory name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from deltacommit.engine.scan import prune_files
from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.expressions.evaluator import columns_read
from deltacommit.protocol.expressions.parser import parse_expression
from deltacommit.protocol.expressions.row_filters import row_filter
from deltacommit.spark.schema import arrow_to_spark_schema
from deltacommit.spark.shipping import is_connect, ship_package
from deltacommit.spark.tasks import ReadTask
from deltacommit.table import DeltaTable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from deltacommit.protocol.actions import Add

#: At most this many files per core go into one read task's share before tasks are added, so
#: small tables use few tasks and large ones spread over the cluster.
_TASKS_PER_CORE = 4


def read(spark: SparkSession, table_or_uri: DeltaTable | str, version: int | None = None,
         columns: Sequence[str] | None = None, partition_filters: Sequence[Any] | None = None,
         storage_options: Mapping[str, str] | None = None,
         filter: str | None = None) -> DataFrame:
    """The rows of a snapshot (the newest, or ``version``) as a DataFrame.

    ``partition_filters`` are deltalake's ``[(column, op, value), ...]`` over partition columns
    and select files before any is opened; an empty selection gives an empty DataFrame with the
    table's schema.  ``filter`` (SQL) keeps the rows where it is TRUE: the driver lists only the
    files whose partition values and statistics admit such a row (``engine.scan.prune_files``)
    and the read tasks drop the other rows.
    """
    if isinstance(table_or_uri, DeltaTable):
        table = table_or_uri
        if version is not None and version != table.version:
            table = DeltaTable(table.uri, version=version, storage_options=table.storage_options,
                               allow_external_paths=table.allow_external_paths)
    else:
        table = DeltaTable(table_or_uri, version=version, storage_options=storage_options)
    schema = table.schema
    names = schema.names
    if columns is not None:
        if isinstance(columns, str):
            raise InvalidArgumentError(f"columns must be a list of names, got the string {columns!r}")
        unknown = [c for c in columns if c not in names]
        if unknown:
            raise InvalidArgumentError(
                f"table {table.uri} has no column(s) {unknown}; columns are {names}")
    out_schema = pa.schema([schema.field(c) for c in (columns if columns is not None else names)])
    spark_schema = arrow_to_spark_schema(out_schema)
    files = table.files(partition_filters)
    read_schema = out_schema
    if filter is not None:

        where = f"filter of a read of table {table.uri}"
        matching = row_filter(parse_expression(filter, where), schema, where, writes=False)
        kept = {a.path for a in prune_files(table.snapshot, matching.predicate)}
        files = [a for a in files if a.path in kept]
        wanted = columns_read(matching.predicate, schema) | set(out_schema.names)
        read_schema = pa.schema([f for f in schema if f.name in wanted])
    if not files:
        return spark.createDataFrame([], spark_schema)
    task = ReadTask(table.uri, table.storage_options, table.version, out_schema,
                    table.partition_columns, allow_external_paths=table.allow_external_paths,
                    column_mapping=table.file_scan(out_schema).column_mapping,
                    row_filter=filter, read_schema=read_schema)
    ship_package(spark)
    if is_connect(spark):
        return _listing_over_connect(spark, files).mapInArrow(task, spark_schema)
    shares = _balanced_shares(files, spark.sparkContext.defaultParallelism * _TASKS_PER_CORE)
    rdd = spark.sparkContext.parallelize(shares, len(shares)).flatMap(lambda share: share)
    listing = spark.createDataFrame(rdd, ReadTask.INPUT_DDL)
    return listing.mapInArrow(task, spark_schema)


def _listing_over_connect(spark: SparkSession, files: Sequence[Add]) -> DataFrame:
    """The file listing as a DataFrame without a SparkContext: one row per share, spread one
    per Spark partition (round-robin from a single local partition), then exploded in place.

    The client cannot see the cluster's cores, so the share count comes from
    ``spark.sql.shuffle.partitions``, the session's own idea of a job's width."""
    from pyspark.sql import functions as F

    width = int(spark.conf.get("spark.sql.shuffle.partitions", "8") or 8)
    shares = _balanced_shares(files, width)
    rows = [(i, json.dumps([{"path": p, "partition_values": v, "deletion_vector": d}
                            for p, v, d in share])) for i, share in enumerate(shares)]
    element = "array<struct<path:string,partition_values:string,deletion_vector:string>>"
    packed = spark.createDataFrame(rows, "share int, files string").repartition(len(shares))
    return packed.select(F.inline(F.from_json("files", element)))


def _balanced_shares(files: Sequence[Add], tasks: int) -> list[list[tuple[str, str, str | None]]]:
    """Deal files into at most ``tasks`` shares of similar byte size (largest file first into
    the lightest share), one share per Spark partition."""
    n = max(1, min(tasks, len(files)))
    shares: list[list[tuple[str, str, str | None]]] = [[] for _ in range(n)]
    loads = [0] * n
    for a in sorted(files, key=lambda a: a.size, reverse=True):
        i = loads.index(min(loads))
        shares[i].append((a.path, json.dumps(a.partition_values, separators=(",", ":")),
                          json.dumps(a.deletion_vector) if a.deletion_vector else None))
        loads[i] += max(a.size, 1)
    return shares
