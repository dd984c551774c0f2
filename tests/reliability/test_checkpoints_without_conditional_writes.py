"""Checkpoints on S3 stores without conditional writes, under Spark's DynamoDB protocol.

The DynamoDB protocol exists for S3-compatible stores that lack ``If-None-Match``
(``DELTACOMMIT_S3_CONDITIONAL_WRITES=false``): its commits copy with a check then a plain put,
as Spark's Hadoop ``create(overwrite=false)`` does.  Checkpoints are published the same way
there (an existence check, then a plain put), since such a store refuses ``put_if_absent``:
without that, these tables would never get a checkpoint.
"""

from __future__ import annotations

from deltacommit.protocol.log.names import checkpoint_path

from .conftest import MakeRig
from .harness import CHECKPOINT_INTERVAL, History


def test_a_dynamodb_table_on_s3_without_conditional_writes_is_checkpointed(
        make_rig: MakeRig) -> None:
    rig = make_rig("dynamodb")
    for options in (rig.s3_options, rig.options):
        options["DELTACOMMIT_S3_CONDITIONAL_WRITES"] = "false"
    history = History(rig)
    writer = history.writer("w")
    assert not writer.table.log_store.store.supports_conditional_put
    for _ in range(CHECKPOINT_INTERVAL):
        history.append(writer)
    history.check()
    assert writer.table.log_store.store.exists(checkpoint_path(CHECKPOINT_INTERVAL))
