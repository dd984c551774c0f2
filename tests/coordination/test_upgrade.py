"""Moving a table's commit mechanism: from Spark's DynamoDB protocol to S3 conditional writes.

The switch is one metaData commit made through the DynamoDB protocol.  After it, a transaction
that read the table before the switch fails with MetadataChangedException, every deltacommit
writer still configured for DynamoDB refuses with an error naming what the table expects, and
conditional-put writers commit; deltalake still reads the table, and the history checker finds
every acknowledged write exactly once.
"""

from __future__ import annotations

import deltalake
import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.cli import main
from deltacommit.errors import CoordinationMismatchError, MetadataChangedException
from deltacommit.io.journal import JournalEntry
from deltacommit.ops.coordination import (
    coordination_status,
    recorded_coordination,
    set_coordination,
)
from deltacommit.ops.verify import verify_table
from deltacommit.testing import MotoServer, S3Bucket

from ..s3.helpers import SCHEMA, batch, dynamo_options, new_log_table


def _rows(table: pa.Table) -> list[tuple[int, int]]:
    return sorted(zip(table.column("writer").to_pylist(), table.column("batch").to_pylist(),
                      strict=True))


def test_dynamodb_to_conditional(s3_bucket: S3Bucket, moto_server: MotoServer) -> None:
    uri = f"{s3_bucket.uri}/t"
    dyn = dynamo_options(s3_bucket, moto_server.endpoint, new_log_table(moto_server.endpoint))
    s3 = dict(s3_bucket.storage_options)
    acked: list[JournalEntry] = []
    table = dc.DeltaTable.create(uri, SCHEMA, storage_options=dyn)
    assert recorded_coordination(table.configuration)["deltacommit.coordination"] == "dynamodb"
    for b in range(2):
        acked.append(JournalEntry.from_result(dc.write(table, batch(0, b))))
    # Before the switch a conditional-put writer refuses: the table expects DynamoDB.
    with pytest.raises(CoordinationMismatchError, match=r"deltacommit\.coordination='dynamodb'"):
        dc.write(dc.DeltaTable(uri, storage_options=s3), batch(9, 0))
    in_flight = dc.DeltaTable(uri, storage_options=dyn)  # read before the switch

    result = set_coordination(uri, storage_options=dyn, new_storage_options=s3)
    assert result is not None and result.version == 3
    assert set_coordination(uri, storage_options=s3, new_storage_options=s3) is None
    assert dc.DeltaTable(uri, storage_options=s3).version == 3  # nothing committed

    with pytest.raises(MetadataChangedException):
        dc.write(in_flight, batch(1, 0))
    with pytest.raises(CoordinationMismatchError) as e:
        dc.write(dc.DeltaTable(uri, storage_options=dyn), batch(1, 1))
    assert "records deltacommit.coordination='conditional'" in str(e.value)
    assert uri in str(e.value) and "deltacommit coordination" in str(e.value)
    # Changing it again must go through the mechanism the table now records.
    with pytest.raises(CoordinationMismatchError, match="must be committed through the one"):
        set_coordination(uri, storage_options=dyn, new_storage_options=dyn)

    new = dc.DeltaTable(uri, storage_options=s3)
    for b in range(2, 4):
        acked.append(JournalEntry.from_result(dc.write(new, batch(0, b))))
    status = coordination_status(uri, s3)
    assert status.recorded == {"deltacommit.coordination": "conditional"}
    assert status.writer_may_commit
    assert not coordination_status(uri, dyn).writer_may_commit

    report = verify_table(uri, acked, storage_options=s3)
    assert report.ok, report.problems
    assert report.acknowledged == 4 and report.rows == 4
    theirs = deltalake.DeltaTable(uri, storage_options=s3)
    assert theirs.version() == 5
    assert _rows(theirs.to_pyarrow_dataset().to_table()) == [(0, b) for b in range(4)]


def test_pinning_a_table_a_peer_created(s3_bucket: S3Bucket, moto_server: MotoServer) -> None:
    uri = f"{s3_bucket.uri}/peer"
    dyn = dynamo_options(s3_bucket, moto_server.endpoint, new_log_table(moto_server.endpoint))
    deltalake.write_deltalake(uri, batch(0, 0), storage_options=dyn)
    assert recorded_coordination(dc.DeltaTable(uri, storage_options=dyn).configuration) == {}
    result = set_coordination(uri, storage_options=dyn, new_storage_options=dyn)
    assert result is not None
    recorded = coordination_status(uri, dyn).recorded
    assert recorded["deltacommit.coordination"] == "dynamodb"
    assert recorded["deltacommit.coordination.dynamodbTable"] == dyn["DELTA_DYNAMO_TABLE_NAME"]
    with pytest.raises(CoordinationMismatchError):
        dc.write(dc.DeltaTable(uri, storage_options=dict(s3_bucket.storage_options)), batch(1, 0))
    dc.write(dc.DeltaTable(uri, storage_options=dyn), batch(1, 0))
    # deltalake still writes through its DynamoDB log store beside us.
    deltalake.write_deltalake(uri, batch(2, 0), mode="append", storage_options=dyn)
    assert _rows(dc.DeltaTable(uri, storage_options=dyn).to_arrow()) == [(0, 0), (1, 0), (2, 0)]


def test_cli_show_and_set(s3_bucket: S3Bucket, moto_server: MotoServer,
                          capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"{s3_bucket.uri}/cli"
    dyn = dynamo_options(s3_bucket, moto_server.endpoint, new_log_table(moto_server.endpoint))
    dc.DeltaTable.create(uri, SCHEMA, storage_options=dyn)
    opts = [a for k, v in dyn.items() for a in ("-o", f"{k}={v}")]
    assert main(["coordination", "show", uri, *opts]) == 0
    out = capsys.readouterr().out
    assert "recorded    deltacommit.coordination = dynamodb" in out and "may commit  yes" in out
    assert main(["coordination", "set", uri, *opts, "--to", "conditional"]) == 0
    assert "new mechanism recorded at version 1" in capsys.readouterr().out
    assert main(["coordination", "show", uri, *opts]) == 0
    assert "may commit  NO" in capsys.readouterr().out
    assert main(["coordination", "set", uri, *opts, "--to", "conditional"]) == 1
    assert "must be committed through the one" in capsys.readouterr().err


def test_conditional_to_dynamodb(s3_bucket: S3Bucket, moto_server: MotoServer) -> None:
    """The move the other way: the commits before the switch have no DynamoDB entries, which a
    DynamoDB writer otherwise takes as a sign of another mechanism; the switch commit vouches."""
    uri = f"{s3_bucket.uri}/up"
    dyn = dynamo_options(s3_bucket, moto_server.endpoint, new_log_table(moto_server.endpoint))
    s3 = dict(s3_bucket.storage_options)
    table = dc.DeltaTable.create(uri, SCHEMA, storage_options=s3)
    dc.write(table, batch(0, 0))
    # Unswitched, a DynamoDB writer refuses: the table records conditional writes.
    with pytest.raises(CoordinationMismatchError, match=r"records deltacommit\.coordination='conditional'"):
        dc.write(dc.DeltaTable(uri, storage_options=dyn), batch(9, 0))
    result = set_coordination(uri, storage_options=s3, new_storage_options=dyn)
    assert result is not None and result.version == 2
    assert dc.write(dc.DeltaTable(uri, storage_options=dyn), batch(0, 1)).version == 3
    with pytest.raises(CoordinationMismatchError, match=r"records deltacommit\.coordination='dynamodb'"):
        dc.write(dc.DeltaTable(uri, storage_options=s3), batch(9, 1))
    assert sorted(_rows(dc.DeltaTable(uri, storage_options=dyn).to_arrow())) == [(0, 0), (0, 1)]
