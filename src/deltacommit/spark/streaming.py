"""Structured Streaming into a Delta table, each micro-batch committed exactly once.

Spark records a micro-batch as done in its own commit log only after the sink returns, so a
query that crashes between the Delta commit and that record replays the batch on restart, with
the same batch id.  Each batch therefore commits through ``write(..., app_id=A,
app_version=batch_id)``: the commit carries the ``txn`` action ``(A, batch_id)``, and a replayed
batch finds it and is skipped before any Spark job runs.

``A`` must name the query, the same across restarts and different for two queries on one table.
``write_stream`` derives it from the checkpoint location, which is exactly what Spark uses to
recognise a query across restarts; ``foreach_batch`` takes it from the caller.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from deltacommit.errors import InvalidArgumentError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

    from deltacommit.table import DeltaTable

#: Output modes a Delta sink can honour with appends; Spark's "complete" and "update" rewrite
#: or upsert earlier results, which needs an overwrite or a MERGE per batch.
_MODES = ("append",)


def stream_app_id(checkpoint_location: str) -> str:
    """The ``txn`` app id of the query checkpointed at ``checkpoint_location``.

    Every spelling of one location gives one id (``s3a://b/c/`` and ``s3://b/c``; a relative
    path, its absolute form and ``file:`` URIs), so a restart that spells the checkpoint the
    way Spark reports it still finds the batches it committed."""
    from deltacommit.log.paths import parse_location

    location = checkpoint_location
    if "://" not in location and not location.startswith("file:"):
        location = os.path.abspath(location)
    canonical = parse_location(location).uri().rstrip("/")
    return "deltacommit-stream-" + hashlib.sha256(canonical.encode()).hexdigest()[:24]


def foreach_batch(table_or_uri: DeltaTable | str, *, app_id: str,
                  partition_by: Sequence[str] | None = None,
                  storage_options: Mapping[str, str] | None = None,
                  configuration: Mapping[str, str] | None = None,
                  target_file_rows: int | None = None) -> Callable[[DataFrame, int], None]:
    """A function for ``DataFrame.writeStream.foreachBatch`` that appends each micro-batch
    once: batch ``n`` commits with the ``txn`` action ``(app_id, n)`` and a replay of it is
    skipped.  ``app_id`` must stay the same when the query restarts."""
    if not app_id:
        raise InvalidArgumentError("foreach_batch needs an app_id naming the streaming query")

    def commit_batch(batch: DataFrame, batch_id: int) -> None:
        from deltacommit.spark.writer import write

        write(batch, table_or_uri, mode="append", partition_by=partition_by, app_id=app_id,
              app_version=int(batch_id), storage_options=storage_options,
              configuration=configuration, target_file_rows=target_file_rows)

    return commit_batch


def write_stream(df: DataFrame, table_or_uri: DeltaTable | str, *, checkpoint_location: str,
                 mode: str = "append", partition_by: Sequence[str] | None = None,
                 trigger: Mapping[str, Any] | None = None, query_name: str | None = None,
                 storage_options: Mapping[str, str] | None = None,
                 configuration: Mapping[str, str] | None = None) -> StreamingQuery:
    """Start a streaming query appending ``df`` to a Delta table, exactly once per batch.

    ``trigger`` takes ``DataStreamWriter.trigger``'s keywords as a dict, e.g.
    ``{"availableNow": True}`` or ``{"processingTime": "10 seconds"}``.
    """
    uri = table_or_uri if isinstance(table_or_uri, str) else table_or_uri.uri
    if mode not in _MODES:
        raise InvalidArgumentError(
            f"table {uri}: streaming output mode {mode!r} is not supported; a Delta sink here "
            "appends each micro-batch (mode='append'); for 'complete' or 'update' write each "
            "batch yourself in foreachBatch (for example dcs.write(batch, uri, mode='overwrite'))")
    if not getattr(df, "isStreaming", False):
        raise InvalidArgumentError(
            f"table {uri}: write_stream needs a streaming DataFrame (spark.readStream...); "
            "use dcs.write for a batch DataFrame")
    if not checkpoint_location:
        raise InvalidArgumentError(f"table {uri}: write_stream needs a checkpoint_location")
    sink = foreach_batch(table_or_uri, app_id=stream_app_id(checkpoint_location),
                         partition_by=partition_by, storage_options=storage_options,
                         configuration=configuration)
    writer = (df.writeStream.outputMode("append")
              .option("checkpointLocation", checkpoint_location)
              .foreachBatch(sink))
    if trigger:
        writer = writer.trigger(**dict(trigger))
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()
