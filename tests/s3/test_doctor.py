"""``deltacommit doctor``: what stops a table's writers, named from its storage.

Each case is made the way it happens in a fleet: a deltalake writer keyed ``s3://`` beside one
keyed ``s3a://`` (a split fleet), a writer process that dies between its claim and its copy
(an incomplete entry), options that select another mechanism than the table records (a pin
they cannot honour), and healthy tables on each mechanism.  The same facts must reach
``coordination show``, ``dynamodb status`` and ``verify``.  (deltalake 1.6.6 writing a table
pinned to DynamoDB: ``tests/compat/test_deltalake_latest.py``.)
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import deltalake
import pytest

import deltacommit as dc
from deltacommit.cli import main
from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore
from deltacommit.ops.doctor import describe_writer, diagnose
from deltacommit.protocol.actions import CommitInfo
from deltacommit.protocol.log.names import LOG_DIR, commit_name
from deltacommit.runtime.clock import ManualClock
from deltacommit.testing import S3Bucket

from .helpers import CRASH_EXIT, SCHEMA, DynamoSetup, batch, run_crashing_commit


def _doctor(uri: str, options: dict[str, str], capsys: pytest.CaptureFixture[str],
            *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["doctor", uri, *extra, *(a for k, v in options.items() for a in ("-o", f"{k}={v}"))])
    out = capsys.readouterr().out
    print(out)  # the report, for whoever reads the test's output
    return code, out


def _flags(options: dict[str, str]) -> list[str]:
    return [a for k, v in options.items() for a in ("-o", f"{k}={v}")]


# --------------------------------------------------------------------------- a split fleet


def test_a_fleet_split_between_s3_and_s3a_is_named_and_stops_writers(
        dynamo: DynamoSetup, capsys: pytest.CaptureFixture[str]) -> None:
    options = dict(dynamo.options)
    bucket = dynamo.bucket.name
    deltalake.write_deltalake(f"s3a://{bucket}/t", batch(0, 0), storage_options=options)
    # A deltalake writer given s3:// never saw the s3a:// entries: a second fleet key.
    deltalake.write_deltalake(dynamo.uri(), batch(0, 1), mode="append", storage_options=options)
    deltalake.write_deltalake(dynamo.uri(), batch(0, 2), mode="append", storage_options=options)

    code, out = _doctor(dynamo.uri(), options, capsys)
    assert code == 1
    assert (f"has entries for this table under 2 tablePath spellings: s3://{bucket}/t: 2 entries "
            f"(versions 1-2); s3a://{bucket}/t: 1 entry (versions 0)") in out
    assert "Writers using different spellings do not exclude each other" in out
    assert "result      writers with these options cannot commit" in out

    assert main(["coordination", "show", dynamo.uri(), *_flags(options)]) == 0
    shown = capsys.readouterr().out
    assert "may commit  NO: entries under several tablePath spellings" in shown
    assert main(["verify", "--no-data", dynamo.uri(), *_flags(options)]) == 1
    verified = capsys.readouterr().out
    assert "under 2 tablePath spellings" in verified and "result      1 problem(s)" in verified


# --------------------------------------------------------------------------- a crashed writer


def test_a_crashed_writers_incomplete_entry_is_repairable_until_its_temp_file_is_gone(
        dynamo: DynamoSetup, capsys: pytest.CaptureFixture[str]) -> None:
    uri, options = dynamo.uri(), dynamo.options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    dc.write(uri, batch(0, 0), storage_options=options)
    assert run_crashing_commit(uri, options, "after_put_entry") == CRASH_EXIT
    entry = dynamo.entries(uri)[-1]
    assert (entry.version, entry.complete) == (2, False)

    code, out = _doctor(uri, options, capsys)
    assert code == 0  # the next reader or writer repairs it before going on
    assert (f"DynamoDB entry {uri} / {commit_name(2)} is incomplete: its writer stopped after "
            "claiming version 2") in out
    assert f"Repairable: its temp file {entry.temp_key} holds the commit" in out
    assert f"`deltacommit dynamodb repair {uri}`" in out
    assert "result      writers with these options can commit (1 warning)" in out
    assert not dynamo.entries(uri)[-1].complete  # the doctor repairs nothing

    # The temp file gone (a lifecycle rule, a hand), the commit is lost and blocks everyone.
    DynamoDBLogStore.open(uri, options).store.delete(entry.temp_key)
    code, out = _doctor(uri, options, capsys)
    assert code == 1
    assert f"/ {commit_name(2)} is incomplete and unrepairable" in out
    assert "every writer of this protocol is blocked at version 2" in out
    assert f"`deltacommit dynamodb repair {uri} --drop-unrecoverable`" in out
    assert main(["dynamodb", "status", uri, *_flags(options)]) == 0
    assert "ERROR: DynamoDB entry" in capsys.readouterr().out


# --------------------------------------------------------------------------- the pin


def test_a_pin_these_options_cannot_honour_is_named(dynamo: DynamoSetup,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    uri = dynamo.uri()
    dc.DeltaTable.create(uri, SCHEMA, storage_options=dynamo.options)
    plain = dict(dynamo.bucket.storage_options)  # conditional put: no DynamoDB options
    code, out = _doctor(uri, plain, capsys)
    assert code == 1
    assert "the table records deltacommit.coordination='dynamodb'" in out
    assert "these options select deltacommit.coordination='conditional'" in out
    assert f"DELTA_DYNAMO_TABLE_NAME={dynamo.table}" in out
    with pytest.raises(dc.CoordinationMismatchError):  # what the doctor predicted
        dc.write(uri, batch(0, 0), storage_options=plain)
    assert main(["coordination", "show", uri, *_flags(plain)]) == 0
    assert "may commit  NO: these options select another mechanism" in capsys.readouterr().out


# --------------------------------------------------------------------------- healthy tables


def test_a_healthy_dynamodb_table_is_called_healthy(dynamo: DynamoSetup,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    uri, options = dynamo.uri(), dynamo.options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    for b in range(3):
        dc.write(uri, batch(0, b), storage_options=options)
    deltalake.write_deltalake(uri, batch(1, 0), mode="append", storage_options=options)
    code, out = _doctor(uri, options, capsys)
    assert code == 0
    assert (f"result      healthy: versions 0-4; every commit that can still have a DynamoDB "
            f"entry has one (tablePath {uri}), no incomplete entries; no stale temp files; "
            "writers with these options (dynamodb) can commit") in out
    assert main(["coordination", "show", uri, *_flags(options)]) == 0
    assert "may commit  yes" in capsys.readouterr().out


def test_a_healthy_conditional_table_is_called_healthy(s3_bucket: S3Bucket,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    uri, options = f"{s3_bucket.uri}/t", s3_bucket.storage_options
    dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    dc.write(uri, batch(0, 0), storage_options=options)
    code, out = _doctor(uri, options, capsys)
    assert code == 0
    assert ("result      healthy: versions 0-1; no stale temp files; writers with these options "
            "(conditional) can commit") in out
    code, out = _doctor(uri, options, capsys, "--json")
    report = json.loads(out)
    assert (report["healthy"], report["can_commit"], report["findings"]) == (True, True, [])


def test_stale_temp_files_are_a_note_not_an_error(dynamo: DynamoSetup) -> None:
    uri, options = dynamo.uri(), dynamo.options
    table = dc.DeltaTable.create(uri, SCHEMA, storage_options=options)
    store = table.log_store.store
    store.put(f"{LOG_DIR}/.tmp/{commit_name(0)}.{uuid.uuid4()}", b"{}")  # as Spark leaves them
    store.put(f"{LOG_DIR}/_commit_{uuid.uuid4()}.json.tmp", b"{}")       # as delta-rs may
    now = diagnose(uri, options)
    assert now.healthy and now.temp_files == 2
    later = ManualClock(start=now_s() + 2 * 3600)
    report = diagnose(uri, options, clock=later)
    assert report.can_commit and report.healthy  # a note only
    (note,) = report.findings
    assert note.kind == "stale-temp-files"
    assert note.message.startswith("2 temp files older than 1 h")
    assert f"`deltacommit cleanup {uri}`" in note.message


def now_s() -> float:
    import time

    return time.time()


def test_a_missing_table_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", str(tmp_path / "nothing")]) == 1
    assert "no Delta table at" in capsys.readouterr().err


# --------------------------------------------------------------------------- who wrote it


@pytest.mark.parametrize(("values", "label", "why", "fix"), [
    ({"engineInfo": "delta-rs:py-1.6.6", "clientVersion": "delta-rs.py-1.6.6"},
     "deltalake 1.6.6 (delta-rs)", "ignores AWS_S3_LOCKING_PROVIDER=dynamodb since 1.6.1",
     "run deltalake<=1.6.0"),
    ({"clientVersion": "delta-rs.py-1.6.0"}, "deltalake 1.6.0 (delta-rs)",
     "commits through DynamoDB only when configured for it", "DELTA_DYNAMO_TABLE_NAME"),
    ({"engineInfo": "Apache-Spark/3.5.1 Delta-Lake/3.2.0"},
     "Spark (Delta Lake 3.2.0, Apache-Spark/3.5.1)", "not configured for this DynamoDB table",
     "spark.io.delta.storage.S3DynamoDBLogStore.ddb.tableName"),
    ({"engineInfo": "deltacommit/0.1.0"}, "deltacommit 0.1.0", "another commit mechanism",
     "coordination show"),
    ({"engineInfo": "my-engine 2"}, '"my-engine 2"', "did not commit through this DynamoDB",
     "configure it"),
    ({"operation": "WRITE"}, "a writer that records no engineInfo", "did not commit",
     "configure it"),
])
def test_the_writer_is_named_from_its_commit_info(values: dict[str, str], label: str,
                                                  why: str, fix: str) -> None:
    writer = describe_writer(CommitInfo(dict(values)))
    assert writer.label == label
    assert why in writer.why
    assert fix in writer.fix
