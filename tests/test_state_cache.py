"""The process's cached table states: opening a table by URI again costs an update, not a
load, and never returns another table's state (deleted and re-created at the same path), a
state older than what another process committed, or anything when switched off."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.snapshot import state_cache
from deltacommit.testing import S3Bucket


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    state_cache.clear()


def _opened_requests(uri: str, options: dict[str, str]) -> dict[str, int]:
    t = dc.DeltaTable(uri, storage_options=options)
    return dict(t.log_store.store.requests)


def test_reopening_by_uri_reads_two_small_objects_instead_of_the_log(s3_bucket: S3Bucket) -> None:
    uri, options = f"{s3_bucket.uri}/t", s3_bucket.storage_options
    for i in range(12):
        dc.write(uri, pa.table({"id": [i]}), storage_options=options)
    state_cache.clear()
    cold = _opened_requests(uri, options)
    # _last_checkpoint, the checkpoint at 10 and commits 11 and 12, each read once: the load's
    # own decoding of commit 12 is the cached state's proof of identity, not a second GET.
    assert cold == {"ListObjectsV2": 1, "GetObject": 4}
    warm = _opened_requests(uri, options)
    # The commit at the cached version (identity) and the next version (a miss): two GETs.
    assert warm == {"GetObject": 2}
    assert dc.DeltaTable(uri, storage_options=options).to_arrow().num_rows == 12


def test_a_large_commit_at_the_checkpoint_is_not_decoded_to_cache_the_state(
        s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    """A state loaded from a checkpoint at its version has no decoded commit to prove its
    identity with; a commit too large to decode cheaply leaves it uncached (the next open
    loads again), a small one is read and decoded once.  (The limit is lowered here so that
    a commit of 60 files exceeds it, as one of about 700 files exceeds the real one.)"""
    from deltacommit.engine.commit import table_log
    from deltacommit.protocol.log.names import commit_path

    monkeypatch.setattr(table_log, "LARGEST_DECODED_ANCHOR", 8 * 1024)
    uri, options = f"{s3_bucket.uri}/t", s3_bucket.storage_options
    for i in range(9):
        dc.write(uri, pa.table({"id": [i]}), storage_options=options)
    big = pa.table({"id": list(range(600))})
    dc.write(uri, big, storage_options=options, target_file_rows=10)  # version 10
    t = dc.DeltaTable(uri, storage_options=options)
    assert t.version == 10 and len(t.files()) == 69
    assert len(t.log_store.store.get(commit_path(10))) > table_log.LARGEST_DECODED_ANCHOR
    state_cache.clear()
    for _ in range(2):
        assert _opened_requests(uri, options).get("ListObjectsV2") == 1  # loaded, not reopened
    dc.write(uri, pa.table({"id": [-1]}), storage_options=options)  # version 11, small
    state_cache.clear()
    assert _opened_requests(uri, options).get("ListObjectsV2") == 1
    assert len(t.log_store.store.get(commit_path(11))) <= table_log.LARGEST_DECODED_ANCHOR
    assert _opened_requests(uri, options) == {"GetObject": 2}
    assert dc.DeltaTable(uri, storage_options=options).to_arrow().num_rows == 9 + 600 + 1


def test_a_table_deleted_and_created_again_is_not_mistaken_for_the_old_one(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for i in range(5):
        dc.write(uri, pa.table({"id": [i]}))
    assert dc.DeltaTable(uri).version == 5
    shutil.rmtree(uri)
    dc.write(uri, pa.table({"name": ["a"]}))
    dc.write(uri, pa.table({"name": ["b"]}))
    # Same path, same number of versions as a prefix of the old table's: another table.
    for i in range(3, 6):
        dc.write(uri, pa.table({"name": [str(i)]}))
    t = dc.DeltaTable(uri)
    assert t.schema.names == ["name"] and t.version == 5
    assert sorted(t.to_arrow().column("name").to_pylist()) == ["3", "4", "5", "a", "b"]


def test_deleted_table_is_not_found(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [1]}))
    dc.DeltaTable(uri)
    shutil.rmtree(uri)
    with pytest.raises(dc.TableNotFoundError):
        dc.DeltaTable(uri)


def test_commits_of_another_process_are_seen(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [0]}))
    assert dc.DeltaTable(uri).version == 1
    code = ("import deltacommit as dc, pyarrow as pa, sys\n"
            "for i in range(1, 4): dc.write(sys.argv[1], pa.table({'id': [i]}))")
    subprocess.run([sys.executable, "-c", code, uri], check=True)
    t = dc.DeltaTable(uri)
    assert t.version == 4 and sorted(t.to_arrow().column("id").to_pylist()) == [0, 1, 2, 3]


def test_switched_off_every_open_loads(tmp_path: Path, s3_bucket: S3Bucket,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    uri, options = f"{s3_bucket.uri}/t", s3_bucket.storage_options
    dc.write(uri, pa.table({"id": [0]}), storage_options=options)
    monkeypatch.setenv(state_cache.SWITCH, "off")
    assert _opened_requests(uri, options).get("ListObjectsV2", 0) >= 1
    assert _opened_requests(uri, options).get("ListObjectsV2", 0) >= 1


def test_the_cache_is_bounded(tmp_path: Path) -> None:
    for i in range(state_cache.CAPACITY + 6):
        dc.write(str(tmp_path / f"t{i}"), pa.table({"id": [i]}))
        dc.DeltaTable(str(tmp_path / f"t{i}"))
    assert len(state_cache._entries) == state_cache.CAPACITY


def test_a_pinned_version_is_never_served_from_the_cache(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for i in range(3):
        dc.write(uri, pa.table({"id": [i]}))
    dc.DeltaTable(uri)
    assert dc.DeltaTable(uri, version=1).to_arrow().column("id").to_pylist() == [0]


# --------------------------------------------------------------------------- blind appends
#
# ``dc.write(uri, data)`` appending without an app id takes the cached state as it is and reads
# the proof of identity while its data is written; whatever a fresh read would decide otherwise
# must still be decided as a fresh read decides it.


def _in_another_process(code: str, uri: str, options: dict[str, str] | None = None) -> None:
    program = ("import json, sys, deltacommit as dc, pyarrow as pa\n"
               "uri, options = sys.argv[1], json.loads(sys.argv[2])\n" + code)
    subprocess.run([sys.executable, "-c", program, uri, json.dumps(options or {})], check=True)


def _unreferenced_data_files(table: dc.DeltaTable) -> set[str]:
    store = table.log_store.store
    on_disk = {m.path for m in store.list("") if m.path.endswith(".parquet")}
    return on_disk - {f.path for f in table.files()}


def test_a_blind_append_to_a_replaced_remote_table_commits_to_the_new_one(
        s3_bucket: S3Bucket) -> None:
    uri, options = f"{s3_bucket.uri}/t", s3_bucket.storage_options
    for i in range(5):
        dc.write(uri, pa.table({"id": [i]}), storage_options=options)
    # Another process deletes the table and creates one of the same schema with two versions.
    _in_another_process(
        "t = dc.DeltaTable(uri, storage_options=options)\n"
        "for m in list(t.log_store.store.list('')): t.log_store.store.delete(m.path)\n"
        "dc.write(uri, pa.table({'id': [100]}), storage_options=options)\n"
        "dc.write(uri, pa.table({'id': [101]}), storage_options=options)\n", uri, options)
    r = dc.write(uri, pa.table({"id": [102]}), storage_options=options)
    state_cache.clear()
    t = dc.DeltaTable(uri, storage_options=options)
    # Created again (version 0) and appended to twice: the append is version 3 of the new table.
    assert r.version == t.version == 3
    assert sorted(t.to_arrow().column("id").to_pylist()) == [100, 101, 102]
    assert _unreferenced_data_files(t) == set()


def test_a_blind_append_honours_a_constraint_added_by_another_process(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [1]}))
    dc.write(uri, pa.table({"id": [2]}))
    _in_another_process("dc.DeltaTable(uri).set_properties({'delta.constraints.positive': 'id > 0'})",
                        uri)
    with pytest.raises(dc.ConstraintViolationError, match="positive"):
        dc.write(uri, pa.table({"id": [-1]}))
    t = dc.DeltaTable(uri)
    assert t.version == 3 and sorted(t.to_arrow().column("id").to_pylist()) == [1, 2]
    assert _unreferenced_data_files(t) == set()


def test_a_blind_append_after_another_process_changed_the_metadata_commits(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"id": [1]}))
    _in_another_process("dc.DeltaTable(uri).set_properties({'owner': 'someone'})\n"
                        "dc.write(uri, pa.table({'id': [2]}))", uri)
    r = dc.write(uri, pa.table({"id": [3]}))
    t = dc.DeltaTable(uri)
    assert r.version == t.version == 4 and t.configuration.get("owner") == "someone"
    assert sorted(t.to_arrow().column("id").to_pylist()) == [1, 2, 3]
    assert _unreferenced_data_files(t) == set()


# --------------------------------------------------------------------------- rolled back


@pytest.fixture(params=["local", "s3"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    if request.param == "local":
        return str(tmp_path / "t"), {}
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    return f"{bucket.uri}/t", dict(bucket.storage_options)


def _ids(uri: str, options: dict[str, str]) -> list[int]:
    state_cache.clear()
    return sorted(dc.DeltaTable(uri, storage_options=options).to_arrow().column("id").to_pylist())


def test_a_rolled_back_newest_commit_is_not_served_from_the_cache(
        where: tuple[str, dict[str, str]]) -> None:
    """A live service writing by URI has version 3 cached; an operator deletes 3.json."""
    uri, options = where
    for i in range(3):  # versions 1-3 (the table is created at 0)
        dc.write(uri, pa.table({"id": [i]}), storage_options=options)
    _in_another_process(
        "dc.DeltaTable(uri, storage_options=options).log_store.store.delete("
        "'_delta_log/' + '0' * 19 + '3.json')\n", uri, options)
    # A blind append by URI (which skips the update) lands at 3, not after a gap.
    assert dc.write(uri, pa.table({"id": [7]}), storage_options=options).version == 3
    assert _ids(uri, options) == [0, 1, 7]
    versions = [f.version for f in dc.DeltaTable(uri, storage_options=options).log_store
                .list_log() if f.kind == "commit"]
    assert versions == [0, 1, 2, 3]


def test_a_delete_committed_elsewhere_after_a_rollback_is_not_missed_by_the_cache(
        where: tuple[str, dict[str, str]]) -> None:
    uri, options = where
    for i in range(3):  # versions 1-3, id 0 in partition x
        dc.write(uri, pa.table({"p": ["x" if i == 0 else "y"], "id": [i]}), partition_by=["p"],
                 storage_options=options)
    _in_another_process(
        "t = dc.DeltaTable(uri, storage_options=options)\n"
        "t.log_store.store.delete('_delta_log/' + '0' * 19 + '3.json')\n"
        "t = dc.DeltaTable(uri, storage_options=options, "
        "policy=dc.CommitPolicy(host_turns=False))\n"
        "assert t.version == 2 and t.delete(\"p = 'x'\")['version'] == 3\n", uri, options)
    # Version 3 is another commit now: the cached state (which has id 2 at version 3) is
    # proven stale and the table read again, by every kind of call by URI.
    assert sorted(dc.DeltaTable(uri, storage_options=options).to_arrow()
                  .column("id").to_pylist()) == [1]
    assert dc.write(uri, pa.table({"p": ["x"], "id": [8]}), storage_options=options).version == 4
    assert dc.write(uri, pa.table({"p": ["y"], "id": [9]}), storage_options=options,
                    mode="overwrite").version == 5
    assert _ids(uri, options) == [9]
    history = [h.get("operation") for h in dc.DeltaTable(uri, storage_options=options).history()]
    assert history[:3] == ["WRITE", "WRITE", "DELETE"]


def test_a_writer_does_not_offer_what_it_read_on_an_unproven_state_to_other_opens(
        s3_bucket: S3Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    """A blind append by URI takes the cached state unproven and, through the host's turn,
    reads the versions another process recorded before its claim.  Where the table was
    created again meanwhile (its log deleted: the data files stay), those are the new
    table's, on top of the old table's files.  That mixture was offered to the process's
    cache at once, and another open of the table (which proves a cached state by its newest
    commit alone) took it for the table: here a DELETE of every row from 100 up removed
    only the two rows the mixture knew, and committed.  Now nothing read on a state is
    offered before the state is proven; the DELETE works on the table as it is."""
    from deltacommit.engine.commit.table_log import TableLog

    uri, options = f"{s3_bucket.uri}/t", s3_bucket.storage_options
    for i in range(5):  # versions 0-4
        dc.write(uri, pa.table({"id": [i]}), storage_options=options)
    _in_another_process(
        "t = dc.DeltaTable(uri, storage_options=options)\n"
        "for m in list(t.log_store.store.list('_delta_log/')): t.log_store.store.delete(m.path)\n"
        "for i in range(7): dc.write(uri, pa.table({'id': [100 + i]}), storage_options=options)\n",
        uri, options)
    at_claim, go_on = threading.Event(), threading.Event()
    real = TableLog.confirm_identity
    appender: list[threading.Thread] = []

    def confirm_identity(self: TableLog) -> None:
        # The append stops before its claim, where it awaits the proof.
        if threading.current_thread() in appender and not at_claim.is_set():
            at_claim.set()
            assert go_on.wait(60)
        real(self)

    monkeypatch.setattr(TableLog, "confirm_identity", confirm_identity)
    results: list[object] = []
    appender.append(threading.Thread(target=lambda: results.append(
        dc.write(uri, pa.table({"id": [200]}), storage_options=options))))
    appender[0].start()
    try:
        assert at_claim.wait(60)
        table = dc.DeltaTable(uri, storage_options=options)
        assert sorted(table.to_arrow().column("id").to_pylist()) == list(range(100, 107))
        table.delete("id >= 100")
    finally:
        go_on.set()
        appender[0].join(60)
    assert len(results) == 1
    assert _ids(uri, options) == [200]
