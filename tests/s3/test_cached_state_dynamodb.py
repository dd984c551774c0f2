"""Writing by URI on the DynamoDB log store from the process's cached state of the table.

The proof that the table was not deleted and created again (a GET of the commit at the cached
version) is read while the data file uploads and the temp file is written: the entry is put
only once it holds.  A table replaced meanwhile still fails the proof, not the checks made
before it, and the write goes to the new table.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Mapping

import pyarrow as pa
import pytest

import deltacommit as dc
import deltacommit.table as table_module
from deltacommit.engine.snapshot import state_cache
from deltacommit.io.aws.resolve import resolve_aws_config
from deltacommit.io.logstore import knowledge as logstore_knowledge
from deltacommit.io.logstore.base import LogStore
from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore
from deltacommit.io.storage import open_store
from deltacommit.io.storage.faults import FaultPlan, FaultyStore
from deltacommit.protocol.log.names import commit_path

from .helpers import DynamoSetup


def ids(uri: str, options: Mapping[str, str]) -> list[int]:
    state_cache.clear()
    return sorted(dc.DeltaTable(uri, storage_options=options).to_arrow().column("id").to_pylist())


def test_the_proof_is_read_while_the_temp_file_is_written(
        dynamo: DynamoSetup, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GET proving the cached state is held until the temp file exists: awaited before
    the temp file, the write could never finish.  Nothing is claimed before it answers."""
    uri, options = dynamo.uri(), dynamo.options
    plan = FaultPlan()

    def faulty_log_store(u: str, o: Mapping[str, str] | None = None) -> LogStore:
        return DynamoDBLogStore(FaultyStore(open_store(u, o), plan), resolve_aws_config(o))

    monkeypatch.setattr(table_module, "open_log_store", faulty_log_store)
    for i in range(3):
        dc.write(uri, pa.table({"id": [i]}), storage_options=options)
    proof = plan.hang("get", commit_path(3), limit=30)
    temp = plan.hang("put", "_delta_log/.tmp/*", after=True, limit=30)
    result: list[int] = []
    writer = threading.Thread(target=lambda: result.append(
        dc.write(uri, pa.table({"id": [3]}), storage_options=options).version))
    writer.start()
    proof.wait_reached()
    temp.wait_reached()        # the temp file is written while the proof is still held
    temp.release()
    assert [e.version for e in dynamo.entries(uri)] == [0, 1, 2, 3]  # nothing claimed yet
    proof.release()
    writer.join(30)
    assert result == [4]
    assert [(e.version, e.complete) for e in dynamo.entries(uri)][-1] == (4, True)
    monkeypatch.undo()
    assert ids(uri, options) == [0, 1, 2, 3]


@pytest.mark.parametrize("knowledge", ["kept", "forgotten"])
def test_a_replaced_table_fails_the_proof_and_the_write_goes_to_the_new_table(
        dynamo: DynamoSetup, knowledge: str) -> None:
    """Another process deletes the table (its objects and its entries) and creates it again
    with two versions.  With this process's knowledge of the old table kept, the checks before
    the claim pass on it; forgotten, step 1 finds the previous version missing, which is the
    replacement showing, not a corrupt log.  Either way the proof fails, the temp file written
    meanwhile is named by no entry, and the write is made again on a fresh read: version 3 of
    the new table."""
    uri, options = dynamo.uri(), dynamo.options
    for i in range(5):
        dc.write(uri, pa.table({"id": [i]}), storage_options=options)
    if knowledge == "forgotten":
        logstore_knowledge.clear()  # the cached state stays; what the log stores knew goes
    program = (
        "import json, sys, deltacommit as dc, pyarrow as pa\n"
        "from deltacommit.io.logstore import open_log_store\n"
        "uri, options = sys.argv[1], json.loads(sys.argv[2])\n"
        "ls = open_log_store(uri, options)\n"
        "for m in list(ls.store.list('')): ls.store.delete(m.path)\n"
        "ls.drop_stale_entries()\n"
        "dc.write(uri, pa.table({'id': [100]}), storage_options=options)\n"
        "dc.write(uri, pa.table({'id': [101]}), storage_options=options)\n")
    subprocess.run([sys.executable, "-c", program, uri, json.dumps(options)], check=True)
    r = dc.write(uri, pa.table({"id": [102]}), storage_options=options)
    assert r.version == 3
    assert ids(uri, options) == [100, 101, 102]
    entries = dynamo.entries(uri)
    assert [(e.version, e.complete) for e in entries] == [(v, True) for v in range(4)]
    ls = dc.DeltaTable(uri, storage_options=options).log_store
    named = {e.temp_path for e in entries}
    temps = {m.path for m in ls.store.list("_delta_log/.tmp/")}
    assert not any(t.endswith(n) for t in temps for n in named)  # only unclaimed temp files


def test_a_rollback_and_a_delete_from_another_machine_are_seen_by_uri(
        dynamo: DynamoSetup) -> None:
    """This process has version 3 cached and knows its entries good up to 3; an operator
    rolls version 3 back (its commit file and its entry) and another machine deletes a
    partition at version 3 again.  Every call by URI sees the DELETE, and the log and the
    entries stay contiguous and complete."""
    uri, options = dynamo.uri(), dynamo.options
    for i in range(3):  # versions 1-3, id 0 in partition x
        dc.write(uri, pa.table({"p": ["x" if i == 0 else "y"], "id": [i]}), partition_by=["p"],
                 storage_options=options)
    program = (
        "import json, sys, deltacommit as dc\n"
        "from deltacommit.io.logstore import open_log_store\n"
        "uri, options, table = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]\n"
        "ls = open_log_store(uri, options)\n"
        "ls.store.delete('_delta_log/' + '0' * 19 + '3.json')\n"
        "ls._client.delete_item(TableName=table, Key={'tablePath': {'S': ls.table_path},\n"
        "                        'fileName': {'S': '0' * 19 + '3.json'}})\n"
        "t = dc.DeltaTable(uri, storage_options=options, policy=dc.CommitPolicy(host_turns=False))\n"
        "assert t.version == 2 and t.delete(\"p = 'x'\")['version'] == 3\n")
    subprocess.run([sys.executable, "-c", program, uri, json.dumps(options), dynamo.table],
                   check=True)
    assert sorted(dc.DeltaTable(uri, storage_options=options).to_arrow()
                  .column("id").to_pylist()) == [1]
    assert dc.write(uri, pa.table({"p": ["x"], "id": [8]}), storage_options=options).version == 4
    assert dc.write(uri, pa.table({"p": ["y"], "id": [9]}), storage_options=options,
                    mode="overwrite", predicate="p = 'y'").version == 5
    assert ids(uri, options) == [8, 9]
    assert [(e.version, e.complete) for e in dynamo.entries(uri)] == [(v, True) for v in range(6)]
