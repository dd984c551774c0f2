"""The history checker finds each kind of broken history, and passes an intact one.

Each test breaks a real table the way a faulty system would (a lost commit, a duplicated
transaction, a rewritten file, a gap, a deleted data file, a wrong checkpoint) and asserts the
report names it; the intact tables pass.  A checker that passed everything would fail here.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.cli import main
from deltacommit.errors import InvalidArgumentError, TableNotFoundError
from deltacommit.io.journal import Journal, JournalEntry, read_journal, read_journals
from deltacommit.ops.verify import verify_table
from deltacommit.protocol.log.names import commit_path

SCHEMA = pa.schema([("writer", pa.int32()), ("seq", pa.int32())])


def _table_with_writes(tmp_path: Path, writers: int = 4, each: int = 5,
                       checkpoint_interval: int | None = None) -> tuple[str, list[JournalEntry]]:
    uri = str(tmp_path / "t")
    config = {"delta.checkpointInterval": str(checkpoint_interval)} if checkpoint_interval else None
    dc.DeltaTable.create(uri, SCHEMA, configuration=config)
    entries: list[JournalEntry] = []
    lock = threading.Lock()
    start = threading.Barrier(writers)

    def run(w: int) -> None:
        table = dc.DeltaTable(uri)
        start.wait()
        for i in range(each):
            r = dc.write(table, pa.table({"writer": [w], "seq": [i]}, schema=SCHEMA))
            with lock:
                entries.append(JournalEntry.from_result(r, rows=1, writer=f"w{w}"))

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(entries) == writers * each
    return uri, entries


def _path(uri: str, version: int) -> Path:
    return Path(uri) / commit_path(version)


def test_intact_history_passes_with_every_count(tmp_path: Path) -> None:
    uri, entries = _table_with_writes(tmp_path, checkpoint_interval=5)
    report = verify_table(uri, entries)
    assert report.ok, report.problems
    assert report.acknowledged == 20
    assert report.transactions == 21  # the creation's commit has a txnId too
    assert (report.first_version, report.last_version) == (0, 20)
    assert report.commits == 21
    assert report.checkpoints == 4  # versions 5, 10, 15, 20
    assert report.rows == 20 and report.files == 20


def test_lost_acknowledged_write_is_named(tmp_path: Path) -> None:
    uri, entries = _table_with_writes(tmp_path, writers=2, each=2)
    ghost = JournalEntry("ghost-txn", entries[0].version, "", 1, "w9")
    report = verify_table(uri, [*entries, ghost])
    assert not report.ok
    assert any("ghost-txn" in p and "lost write" in p for p in report.problems), report.problems


def test_duplicated_transaction_is_named(tmp_path: Path) -> None:
    uri, entries = _table_with_writes(tmp_path, writers=2, each=2)
    last = max(e.version for e in entries)
    # A retry that committed the same transaction again at the next version.
    _path(uri, last + 1).write_bytes(_path(uri, last).read_bytes())
    report = verify_table(uri, entries)
    dup = next(e for e in entries if e.version == last)
    assert any(dup.txn_id in p and "committed 2 times" in p for p in report.problems), \
        report.problems


def test_rewritten_commit_file_is_named(tmp_path: Path) -> None:
    uri, entries = _table_with_writes(tmp_path, writers=2, each=2)
    victim = entries[1]
    path = _path(uri, victim.version)
    lines = path.read_bytes().splitlines()
    path.write_bytes(b"\n".join(reversed(lines)) + b"\n")  # same actions, other bytes
    report = verify_table(uri, entries)
    assert any(f"version {victim.version}: the commit file was rewritten" in p
               for p in report.problems), report.problems


def test_acknowledged_at_another_version_is_named(tmp_path: Path) -> None:
    uri, entries = _table_with_writes(tmp_path, writers=2, each=2)
    e = entries[0]
    wrong = JournalEntry(e.txn_id, e.version + 100, "", 1, e.writer)
    report = verify_table(uri, [wrong])
    assert any(f"was told version {e.version + 100} but is in version {e.version}" in p
               for p in report.problems), report.problems


def test_gap_in_the_log_is_named(tmp_path: Path) -> None:
    uri, entries = _table_with_writes(tmp_path, writers=2, each=3)
    _path(uri, 3).unlink()
    report = verify_table(uri, entries)
    assert any("no commit file for version(s) 3" in p for p in report.problems), report.problems
    assert any("lost write" in p for p in report.problems)


def test_deleted_data_file_fails_read_back(tmp_path: Path) -> None:
    uri, entries = _table_with_writes(tmp_path, writers=2, each=2)
    victim = dc.DeltaTable(uri).files()[0].path
    (Path(uri) / victim).unlink()
    report = verify_table(uri, entries)
    assert any("does not read back" in p for p in report.problems), report.problems
    assert verify_table(uri, entries, read_data=False).ok


def test_checkpoint_disagreeing_with_the_log_is_named(tmp_path: Path) -> None:
    uri, _ = _table_with_writes(tmp_path, writers=2, each=3)
    table = dc.DeltaTable(uri)
    table.checkpoint()
    # Replace a commit covered by the checkpoint with one that adds a different file:
    # the checkpoint no longer equals a replay of the JSON commits.
    path = _path(uri, 2)
    actions = [json.loads(line) for line in path.read_text().splitlines()]
    for a in actions:
        if "add" in a:
            a["add"]["path"] = "renamed-" + a["add"]["path"]
    path.write_text("".join(json.dumps(a) + "\n" for a in actions))
    report = verify_table(uri, [], read_data=False)
    assert any("checkpoint" in p and "differs from a replay" in p for p in report.problems), \
        report.problems


def test_no_table_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError, match="no Delta table"):
        verify_table(str(tmp_path / "missing"))


def test_journal_round_trip_ignores_a_torn_last_line(tmp_path: Path) -> None:
    _, entries = _table_with_writes(tmp_path, writers=1, each=3)
    path = tmp_path / "j" / "w0.jsonl"
    with Journal(path, writer="w0") as j:
        for e in entries:
            j.write(e)
    with open(path, "a") as f:
        f.write('{"txn_id": "half-writ')  # killed in the middle of a line
    assert read_journal(path) == entries
    assert read_journals([tmp_path / "j"]) == entries


def test_damaged_journal_line_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"txn_id": "a", "version": 1}\nnot json\n{"txn_id": "b", "version": 2}\n')
    with pytest.raises(InvalidArgumentError, match=r"bad.jsonl line 2: not a JSON line"):
        read_journal(path)
    path.write_text('{"txn_id": "a", "version": -1}\n')
    with pytest.raises(InvalidArgumentError, match=r"line 1: expected a version >= 0"):
        read_journal(path)


def test_cli_verify_exit_status_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    uri, entries = _table_with_writes(tmp_path, writers=2, each=2)
    jdir = tmp_path / "journals"
    with Journal(jdir / "all.jsonl") as j:
        for e in entries:
            j.write(e)
    assert main(["verify", uri, "--journal", str(jdir)]) == 0
    out = capsys.readouterr().out
    assert "4 acknowledged in journals" in out and "result      ok" in out
    with Journal(jdir / "ghost.jsonl") as j:
        j.write(JournalEntry("ghost", 1))
    assert main(["verify", uri, "--journal", str(jdir), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["acknowledged"] == 5
    assert any("ghost" in p for p in doc["problems"])


def _rewrite_commit_info(path: Path, **fields: object) -> None:
    lines = path.read_bytes().splitlines()
    out = []
    for line in lines:
        doc = json.loads(line)
        if "commitInfo" in doc:
            doc["commitInfo"].update(fields)
            line = json.dumps(doc).encode()
        out.append(line)
    path.write_bytes(b"\n".join(out) + b"\n")


def test_members_of_a_shared_version_are_transactions_and_one_in_two_versions_is_named(
        tmp_path: Path) -> None:
    """A version another host committed for several writers lists their txnIds in
    ``deltacommit.memberTxnIds`` (fleet-wide and in-process group commit alike): each member
    counts as a transaction of that version, and a member listed by two versions (an includer
    that landed a transaction its owner had landed already) is named as a duplicate."""
    from deltacommit.engine.commit.commit_info import MEMBERS_KEY

    uri, entries = _table_with_writes(tmp_path, writers=2, each=3)
    by_version = {e.version: e for e in entries}
    last = max(by_version)
    # Version `last` carried two members: its own transaction and a published one.
    members = [by_version[last].txn_id, "published-by-another-host"]
    _rewrite_commit_info(_path(uri, last), **{MEMBERS_KEY: members})
    report = verify_table(uri, [e for e in entries if e.version != last])
    assert report.ok, report.problems
    assert report.largest_group == 2
    assert report.transactions == len(entries) + 2  # + the creation's, + the published one
    assert report.versions_with_txn_ids == report.commits
    # The same member listed again by an earlier version: committed twice.
    _rewrite_commit_info(_path(uri, last - 1), **{
        MEMBERS_KEY: [by_version[last - 1].txn_id, "published-by-another-host"]})
    report = verify_table(uri)
    assert any("published-by-another-host was committed 2 times" in p
               for p in report.problems), report.problems


def test_two_txn_actions_of_one_app_id_in_a_version_are_named(tmp_path: Path) -> None:
    """Members touching the same app id must land in different versions: a version recording
    two versions of one application is named."""
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)
    r = dc.write(uri, pa.table({"writer": [1], "seq": [1]}, schema=SCHEMA), app_id="app",
                 app_version=7)
    assert verify_table(uri).ok
    path = _path(uri, r.version)
    lines = path.read_bytes().splitlines()
    txn = next(line for line in lines if b'"txn"' in line)
    other = json.loads(txn)
    other["txn"]["version"] = 8
    path.write_bytes(b"\n".join([*lines, json.dumps(other).encode()]) + b"\n")
    report = verify_table(uri)
    assert any(f"version {r.version} holds several txn actions of app id(s) ['app']" in p
               for p in report.problems), report.problems
