"""The history checker on the DynamoDB protocol: entries must be complete or repairable.

A writer crashed after its PutItem leaves an incomplete entry whose temp file still exists:
repairable, so the history is fine (and the checker, which never writes, leaves it as it is).
An incomplete entry whose temp file is gone, or a complete entry whose commit file is gone,
is a version nobody can read: the checker names it.
"""

from __future__ import annotations

import deltacommit as dc
from deltacommit.ops.verify import verify_table
from deltacommit.protocol.log.names import commit_path

from .helpers import CRASH_EXIT, SCHEMA, DynamoSetup, batch, run_crashing_commit


def test_crashed_commit_is_repairable_then_unrepairable_once_its_temp_file_is_gone(
        dynamo: DynamoSetup) -> None:
    table = dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=dynamo.options)
    dc.write(table, batch(0, 0))
    assert run_crashing_commit(dynamo.uri(), dynamo.options, "after_put_entry", rows=2) == CRASH_EXIT
    report = verify_table(dynamo.uri(), storage_options=dynamo.options)
    assert report.ok, report.problems
    assert (report.dynamodb_entries, report.incomplete_entries) == (3, 1)
    assert report.last_version == 1  # the checker did not repair version 2
    pending = dynamo.entries(dynamo.uri())[-1]
    assert not pending.complete
    store = table.log_store.store
    store.delete(pending.temp_key)
    report = verify_table(dynamo.uri(), storage_options=dynamo.options)
    assert any(f"{pending.file_name} is incomplete and unrepairable" in p
               for p in report.problems), report.problems


def test_complete_entry_without_its_commit_file_is_named(dynamo: DynamoSetup) -> None:
    table = dc.DeltaTable.create(dynamo.uri(), SCHEMA, storage_options=dynamo.options)
    r = dc.write(table, batch(0, 0))
    table.log_store.store.delete(commit_path(r.version))
    report = verify_table(dynamo.uri(), storage_options=dynamo.options, read_data=False)
    assert any("is complete but" in p and f"{r.version:020d}.json does not exist" in p
               for p in report.problems), report.problems
