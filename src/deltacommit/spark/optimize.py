"""``optimize()``: compaction whose bins are rewritten by Spark tasks.

The driver does what ``DeltaTable.optimize.compact`` does (plan bins per partition, commit at
most about a thousand replaced files per version with ``dataChange=false``, keep only the bins
still intact after a concurrent delete) and hands the rewriting to Spark: one task per bin reads
the bin's files and writes the new ones, so a table larger than one machine is compacted by the
cluster.  Tasks write files but never commit; a bin that loses to a concurrent remove has its
new files deleted by the driver.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from deltacommit.errors import DeltaCommitError
from deltacommit.io.datafiles import WriteTarget
from deltacommit.ops.driver import discard
from deltacommit.ops.optimize import CompactionBin
from deltacommit.protocol.actions import Add
from deltacommit.spark.shipping import run_tasks
from deltacommit.spark.tasks import RESULT_DDL, CompactTask
from deltacommit.table import DeltaTable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SparkBinRewriter:
    """Rewrites bins in one Spark job per call, one task per bin."""

    def __init__(self, spark: SparkSession, table: DeltaTable) -> None:
        self.spark = spark
        self.table = table

    def __call__(self, bins: Sequence[CompactionBin], target: WriteTarget
                 ) -> Iterator[CompactionBin]:
        if not bins:
            return
        spark, table = self.spark, self.table
        task = CompactTask(target, table.storage_options, table.version,
                           allow_external_paths=table.allow_external_paths)
        rows = [(i, json.dumps([[a.path, a.partition_values, a.deletion_vector]
                                for a in b.files])) for i, b in enumerate(bins)]
        listing = spark.createDataFrame(rows, CompactTask.INPUT_DDL).repartition(len(bins))
        results = run_tasks(listing, task, RESULT_DDL, table.uri)
        added: dict[int, list[Add]] = {i: [] for i in range(len(bins))}
        failures: list[dict[str, str]] = []
        for row in results:
            doc = json.loads(row[0])
            if "add" in doc:
                added[int(doc["bin"])].append(Add.from_json(doc["add"]))
            else:
                failures.append(doc["error"])
        if failures:
            discard(table.store, [a for adds in added.values() for a in adds])
            raise DeltaCommitError(f"compaction of table {table.uri}: "
                                   f"{failures[0].get('message', '')}"
                                   + (f" (and {len(failures) - 1} more bins)"
                                      if len(failures) > 1 else ""))
        for i, b in enumerate(bins):
            b.added = added[i]
            b.checked = True  # by its task (``CompactTask``), before it reported the files
            yield b


def optimize(spark: SparkSession, table_or_uri: DeltaTable | str, *,
             partition_filters: Sequence[Any] | None = None, target_size: int | None = None,
             min_commit_interval: float | None = None, predicate: str | None = None,
             storage_options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Compact a table's small files with Spark tasks; the same arguments and metrics as
    ``DeltaTable.optimize.compact``."""
    table = (table_or_uri if isinstance(table_or_uri, DeltaTable)
             else DeltaTable(table_or_uri, storage_options=storage_options))
    return table.optimize.compact(
        partition_filters, target_size, min_commit_interval=min_commit_interval,
        predicate=predicate, rewriter=SparkBinRewriter(spark, table))
