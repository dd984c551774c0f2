"""``dc.write`` uploads its data files in the background and its commit waits for them.

On S3 every request is a round trip, so the DynamoDB log store writes its temp file while the
data file is still uploading; the version is claimed only once the upload has succeeded.
These tests hold the upload with a fault store's ``hang`` (ordering by events, not sleeps),
and fail it, on moto's S3 and on DynamoDB (moto and dynalite).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import threading

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.group.threads import GroupCommitPolicy
from deltacommit.errors import StorageError
from deltacommit.io.aws.resolve import resolve_aws_config
from deltacommit.io.datafiles import delete_files
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore
from deltacommit.io.storage import open_store
from deltacommit.io.storage.faults import FaultPlan, FaultyStore
from deltacommit.protocol.actions import Add
from deltacommit.protocol.partitions import decode_add_path
from deltacommit.testing import S3Bucket

from .helpers import SCHEMA, DynamoSetup

DATA = "part-*.parquet"


def batch(writer: int, n: int) -> pa.Table:
    return pa.table({"writer": [writer], "batch": [n]}, schema=SCHEMA)


def rows(table: dc.DeltaTable) -> list[tuple[int, int]]:
    t = table.to_arrow()
    return sorted(zip(t.column("writer").to_pylist(), t.column("batch").to_pylist(), strict=True))


def dynamo_table(dynamo: DynamoSetup, plan: FaultPlan) -> tuple[dc.DeltaTable, FaultyStore]:
    dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=dynamo.options)
    store = FaultyStore(open_store(dynamo.uri(), dynamo.options), plan)
    ls = DynamoDBLogStore(store, resolve_aws_config(dynamo.options))
    return dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options, log_store=ls), store


def test_the_temp_file_is_written_while_the_data_file_uploads(dynamo: DynamoSetup) -> None:
    """The data file's put is held until the temp file exists: written one after the other,
    the write could never finish.  The entry is put only after the upload is released."""
    plan = FaultPlan()
    upload = plan.hang("put", DATA, limit=30)
    temp = plan.hang("put", "_delta_log/.tmp/*", after=True, limit=30)
    table, store = dynamo_table(dynamo, plan)
    ls = table.log_store
    assert isinstance(ls, DynamoDBLogStore)
    result: list[int] = []
    writer = threading.Thread(target=lambda: result.append(dc.write(table, batch(1, 0)).version))
    writer.start()
    upload.wait_reached()
    temp.wait_reached()        # the temp file is written while the upload is still held
    temp.release()
    assert [e.version for e in ls.entries()] == [0]   # nothing claimed before the upload ends
    upload.release()
    writer.join(30)
    assert result == [1]
    assert [(e.version, e.complete) for e in ls.entries()] == [(0, True), (1, True)]
    assert rows(dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)) == [(1, 0)]
    assert store._pending_puts() == {}


def test_a_failed_upload_claims_no_version(dynamo: DynamoSetup) -> None:
    plan = FaultPlan()
    plan.fail("put", DATA)
    table, store = dynamo_table(dynamo, plan)
    ls = table.log_store
    assert isinstance(ls, DynamoDBLogStore)
    with pytest.raises(StorageError, match=r"part-.*\.parquet"):
        dc.write(table, batch(1, 0))
    assert plan.count("fail", "put") == 1
    assert [e.version for e in ls.entries()] == [0]
    assert not store.exists("_delta_log/00000000000000000001.json")
    assert store._pending_puts() == {}       # the failure is not kept once the write gave up
    # The next write commits version 1 with its own file only.
    assert dc.write(table, batch(1, 1)).version == 1
    assert rows(dc.DeltaTable(dynamo.uri(), storage_options=dynamo.options)) == [(1, 1)]


def test_a_failed_upload_is_never_committed_by_conditional_put(s3_bucket: S3Bucket) -> None:
    uri = f"{s3_bucket.uri}/t"
    options = s3_bucket.storage_options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    plan = FaultPlan()
    plan.fail("put", DATA)
    store = FaultyStore(open_store(uri, options), plan)
    table = dc.DeltaTable(uri, storage_options=options,
                          log_store=ConditionalPutLogStore(store))
    with pytest.raises(StorageError, match=r"part-.*\.parquet"):
        dc.write(table, batch(2, 0))
    assert dc.DeltaTable(uri, storage_options=options).version == 0
    assert dc.write(table, batch(2, 1)).version == 1
    assert rows(dc.DeltaTable(uri, storage_options=options)) == [(2, 1)]


def test_a_failed_upload_stays_failed_until_forgotten(s3_bucket: S3Bucket) -> None:
    """``make_durable`` raises the failure each time it is asked, so no retry of the same
    commit can name the missing file; ``forget`` drops it."""
    plan = FaultPlan()
    plan.fail("put", "a/*")
    store = FaultyStore(open_store(f"{s3_bucket.uri}/bg", s3_bucket.storage_options), plan)
    store.put_soon("a/x.parquet", b"x")
    for _ in range(2):
        with pytest.raises(StorageError, match=r"a/x\.parquet"):
            store.make_durable(["a/x.parquet"])
    assert store.awaits_durable("a/x.parquet")
    store.await_puts(["a/x.parquet"], forget=True)
    assert not store.awaits_durable("a/x.parquet")
    store.make_durable(["a/x.parquet"])


def test_deleting_a_file_waits_for_its_upload(s3_bucket: S3Bucket) -> None:
    """A write that gives up deletes its files: the delete must not be overtaken by the upload
    still in flight, or the file would reappear after it."""
    plan = FaultPlan()
    upload = plan.hang("put", "d/*", limit=30)
    store = FaultyStore(open_store(f"{s3_bucket.uri}/bg", s3_bucket.storage_options), plan)
    store.put_soon("d/f.parquet", b"data")
    upload.wait_reached()
    add = Add(path="d/f.parquet", partition_values={}, size=4, modification_time=0,
              data_change=True)
    deleter = threading.Thread(target=delete_files, args=(store, [add]))
    deleter.start()
    # The delete is still waiting for the held upload: it cannot finish before the release.
    deleter.join(1.0)
    assert deleter.is_alive()
    upload.release()
    deleter.join(30)
    assert not store.exists(decode_add_path(add.path))
    assert store._pending_puts() == {}


def test_a_rewrite_reads_back_its_files_once_their_upload_ended(s3_bucket: S3Bucket) -> None:
    """UPDATE, MERGE and copy-on-write DELETE upload their files in the background and read
    them back to prove them before committing: the read-back must wait for the upload, or its
    GET can overtake the PUT, find no file and fail the operation (a busy S3 endpoint made
    this happen beside other writers)."""
    uri = f"{s3_bucket.uri}/t"
    options = s3_bucket.storage_options
    dc.write(uri, pa.table({"writer": [1, 2, 3], "batch": [0, 0, 0]}, schema=SCHEMA),
             storage_options=options)
    plan = FaultPlan()
    upload = plan.hang("put", DATA, limit=30)
    store = FaultyStore(open_store(uri, options), plan)
    table = dc.DeltaTable(uri, storage_options=options, log_store=ConditionalPutLogStore(store))
    outcome: list[object] = []

    def update() -> None:
        try:
            outcome.append(table.update({"batch": "batch + 10"}, predicate="writer = 2"))
        except Exception as e:
            outcome.append(e)

    updater = threading.Thread(target=update)
    updater.start()
    upload.wait_reached()
    # The rewrite's file is still uploading: its proof waits for it instead of failing.
    updater.join(1.0)
    assert updater.is_alive(), outcome
    upload.release()
    updater.join(30)
    assert isinstance(outcome[0], dict) and outcome[0]["num_updated_rows"] == 1, outcome
    assert rows(dc.DeltaTable(uri, storage_options=options)) == [(1, 0), (2, 10), (3, 0)]


# A process that sends its write to this host's committer (another process), with its data
# file's upload failing.
_SENDER = """
import json, sys
import pyarrow as pa
import deltacommit as dc
from deltacommit.engine.group.threads import GroupCommitPolicy
from deltacommit.errors import StorageError
uri, sockets, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
table = dc.DeltaTable(uri, storage_options=options,
                      group_commit=GroupCommitPolicy(processes=True, socket_dir=sockets))
# The data file's upload fails (the store itself, unwrapped, so that this process finds the
# host's committer: a wrapped store would be another store to it).
store = table.log_store.store
plain_put = store.put
def put(path, data, **kw):
    if path.startswith("part-"):
        raise StorageError("put", path, "injected upload failure")
    return plain_put(path, data, **kw)
store.put = put
try:
    dc.write(table, pa.table({"writer": [9], "batch": [0]}))
    out = {"committed": True, "serving": table.group_committer.serving}
except dc.DeltaCommitError as e:
    out = {"error": type(e).__name__, "message": str(e), "serving": table.group_committer.serving}
print(json.dumps(out), flush=True)
"""


def test_a_sender_waits_for_its_upload_before_another_process_commits_it(
        s3_bucket: S3Bucket) -> None:
    """Group commit across processes: the committer is another process, which cannot wait for
    this one's uploads, so the sender waits for them before sending; a failed upload fails its
    write there and nothing names the missing file."""
    uri = f"{s3_bucket.uri}/t"
    options = s3_bucket.storage_options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    with tempfile.TemporaryDirectory(prefix="dc-") as sockets:
        host = dc.DeltaTable(uri, storage_options=options,
                             group_commit=GroupCommitPolicy(processes=True, socket_dir=sockets))
        try:
            assert dc.write(host, batch(1, 0)).version == 1
            assert host.group_committer is not None and host.group_committer.serving
            done = subprocess.run([sys.executable, "-c", _SENDER, uri, sockets,
                                   json.dumps(options)], capture_output=True, text=True,
                                  timeout=120)
            assert done.returncode == 0, done.stderr
            out = json.loads(done.stdout)
            assert out["serving"] is False
            assert out.get("error") == "StorageError", out
            assert re.search(r"part-.*\.parquet", out["message"])
        finally:
            host.group_committer.close()
    reader = dc.DeltaTable(uri, storage_options=options)
    assert reader.version == 1
    assert rows(reader) == [(1, 0)]


def test_a_group_member_whose_upload_failed_fails_alone(s3_bucket: S3Bucket) -> None:
    """Group commit in one process: the member whose upload failed fails alone; the others
    commit, with their rows only."""
    uri = f"{s3_bucket.uri}/t"
    options = s3_bucket.storage_options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    plan = FaultPlan()
    plan.fail("put", DATA, times=1)
    table = dc.DeltaTable(uri, storage_options=options, group_commit=True,
                          log_store=ConditionalPutLogStore(
                              FaultyStore(open_store(uri, options), plan)))
    writers = 4
    start = threading.Barrier(writers)
    outcomes: dict[int, str] = {}

    def write(w: int) -> None:
        start.wait()
        try:
            dc.write(table, batch(w, 0))
            outcomes[w] = "committed"
        except StorageError:
            outcomes[w] = "failed"

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert plan.count("fail", "put") == 1
    assert sorted(outcomes.values()) == ["committed"] * (writers - 1) + ["failed"]
    committed = sorted((w, 0) for w, o in outcomes.items() if o == "committed")
    assert rows(dc.DeltaTable(uri, storage_options=options)) == committed
