"""Signs that a table's fleet commits through Spark's DynamoDB protocol.

Kept with the log stores because it is a fact about commit mechanisms the commit engine checks
before committing (``engine.guard``), and ``coordination`` reports to operators.
"""

from __future__ import annotations

from deltacommit.io.logstore.base import DYNAMODB_MARKER
from deltacommit.io.storage.base import ObjectStore

#: Where Spark's S3DynamoDBLogStore writes a commit's temp file (``.tmp/<N>.json.<uuid>``); it
#: never deletes them, so they outlive the commit that wrote them.
SPARK_TEMP_PREFIX = "_delta_log/.tmp/"


def dynamodb_fleet_sign(store: ObjectStore, mechanism: str) -> str | None:
    """Evidence that a table recording no mechanism is written through DynamoDB, or None.

    A table created by Spark or delta-rs records nothing, yet its fleet may commit through
    Spark's DynamoDB protocol, which neither a conditional put nor a DynamoCommit lease
    excludes.  Spark's temp files in ``_delta_log/.tmp/`` stay after every commit, so one is a
    durable sign; deltacommit deletes its own once the commit is in place and leaves a marker
    there instead.  delta-rs's ``_delta_log/_commit_<uuid>.json.tmp`` is not: delta-rs writes it
    for every log store but its default one and renames it away on success, so it proves
    nothing about DynamoDB and is not looked for.

    Cost: one LIST request of one page (only its first key is read), made only for unpinned
    tables off the local file system (where every writer shares the file system's atomic create)
    by a writer not itself on the DynamoDB protocol.  ``DeltaTable`` asks once per table object.
    """
    if mechanism == "dynamodb" or store.local_path("") is not None:
        return None
    for meta in store.list(SPARK_TEMP_PREFIX):
        if meta.path == DYNAMODB_MARKER:
            return (f"Spark's S3DynamoDBLogStore protocol (marker {meta.path}, left by "
                    "deltacommit writers on that protocol)")
        return f"Spark's S3DynamoDBLogStore (temp file {meta.path})"
    return None
