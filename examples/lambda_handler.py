"""An AWS Lambda function (or any short-lived queue consumer) that appends each event's rows.

Two habits make it cheap and safe:

- **Warm reuse.**  The table object lives at module level: Lambda runs the module once per
  execution environment (its init phase) and every invocation that environment serves reuses
  the object, its clients and its snapshot, so a warm invocation costs one commit (a GET that
  finds nothing new, the data file, the commit).  ``import deltacommit`` itself loads only the
  exceptions; the rest loads with the first call.
- **Exactly once.**  Queues deliver at least once: a retried or duplicated event must not
  append its rows twice.  The event names its producer and numbers its batches; the handler
  commits with ``app_id`` (the producer) and ``app_version`` (the batch number), which the
  table records in the same commit as the rows, so a delivery of a batch already committed is
  skipped (``WriteResult.skipped``).  Batch numbers of one producer must arrive in order, as
  an SQS FIFO message group or a Kinesis shard delivers them: a number at or below the last
  committed one counts as done.

The table is named by ``DELTA_TABLE_URI`` (``s3://bucket/path``); the AWS options come from the
function's environment as deltalake reads them (``AWS_REGION``, ``AWS_S3_LOCKING_PROVIDER``,
``DELTA_DYNAMO_TABLE_NAME``, ...) and its role's credentials.  An event::

    {"producer": "orders-eu", "batch": 41, "rows": [{"id": 1, "amount": 9.5}, ...]}
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa

import deltacommit as dc

TABLE_URI = os.environ["DELTA_TABLE_URI"]


def _open() -> dc.DeltaTable | None:
    """The table, or None before the first event has created it."""
    try:
        return dc.DeltaTable(TABLE_URI)
    except dc.TableNotFoundError:
        return None


#: Opened once per execution environment, in Lambda's init phase.
_table = _open()


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    """Append the event's rows exactly once; returns the version that holds them."""
    global _table
    rows = pa.Table.from_pylist(event["rows"])
    result = dc.write(_table if _table is not None else TABLE_URI, rows,
                      app_id=f"lambda:{event['producer']}", app_version=int(event["batch"]))
    if _table is None:  # this event created the table: keep it for the next invocation
        _table = _open()
    return {"version": result.version, "skipped": result.skipped, "rows": result.num_rows}
