"""Log cleanup and VACUUM, driven by a manual clock (the in-memory store stamps objects with it)."""

from __future__ import annotations

import logging
import os
import time
import uuid
from pathlib import Path

import deltalake
import pytest

import deltacommit as dc
from deltacommit.errors import InvalidArgumentError
from deltacommit.ops.maintenance import cutoff_commit, is_hidden
from deltacommit.ops.verify import verify_table
from deltacommit.protocol.log.names import LOG_DIR, checkpoint_path, commit_path
from deltacommit.runtime.clock import ManualClock

from .helpers import ids_of, local_table, log_names, memory_table, open_table, rows

DAY = 86_400.0
START = 1_800_000_000.0  # 2027-01-15, a few hours after midnight UTC


def fresh_name() -> str:
    return f"maint-{uuid.uuid4().hex[:12]}"


def log_listing(t: dc.DeltaTable) -> list[str]:
    return sorted(m.path.split("/", 1)[1] for m in t.log_store.store.list(f"{LOG_DIR}/"))


def names(versions: range | list[int], kind: str = "json") -> list[str]:
    if kind == "json":
        return [commit_path(v) for v in versions]
    return [checkpoint_path(v) for v in versions]


# --------------------------------------------------------------------------- cleanup


def test_cleanup_keeps_the_newest_checkpoint_before_the_cutoff_and_everything_after() -> None:
    clock = ManualClock(START)
    t = memory_table(fresh_name(), clock, {"delta.checkpointInterval": "5",
                                           "delta.enableExpiredLogCleanup": "false"})
    for i in range(12):
        dc.write(t, rows([i]))
    clock.advance(31 * DAY)
    expected = names(range(10)) + names([5], "checkpoint")
    assert t.cleanup_log(dry_run=True) == sorted(expected, key=lambda p: (p[11:31], p))
    assert len(log_listing(t)) == 13 + 2 + 1
    deleted = t.cleanup_log()
    assert sorted(deleted) == sorted(expected)
    assert log_listing(t) == sorted(
        [p.split("/")[1] for p in names(range(10, 13)) + names([10], "checkpoint")]
        + ["_last_checkpoint"])
    again = dc.DeltaTable(t.uri, log_store=t.log_store)
    assert again.version == 12 and ids_of(again.to_arrow()) == list(range(12))
    assert [h["version"] for h in again.history()] == [12, 11, 10]
    assert t.cleanup_log() == []


def test_cleanup_deletes_temporary_commit_files_older_than_what_it_keeps() -> None:
    clock = ManualClock(START)
    t = memory_table(fresh_name(), clock, {"delta.checkpointInterval": "5",
                                           "delta.enableExpiredLogCleanup": "false"})
    store = t.log_store.store
    old_temps = [f"{LOG_DIR}/.tmp/{commit_path(1)[11:]}.{uuid.uuid4()}",
                 f"{LOG_DIR}/_commit_{uuid.uuid4()}.json.tmp"]
    for p in old_temps:
        store.put(p, b"{}")
    clock.advance(60)
    for i in range(12):
        dc.write(t, rows([i]))
    clock.advance(31 * DAY)
    fresh_temp = f"{LOG_DIR}/.tmp/{commit_path(13)[11:]}.{uuid.uuid4()}"
    store.put(fresh_temp, b"{}")  # an entry that may still need repair
    deleted = t.cleanup_log()
    assert set(old_temps) <= set(deleted)
    assert fresh_temp not in deleted and store.exists(fresh_temp)
    assert not any(store.exists(p) for p in old_temps)


def test_cutoff_is_midnight_utc_and_commits_after_it_stay() -> None:
    clock = ManualClock(START)
    t = memory_table(fresh_name(), clock, {"delta.checkpointInterval": "5",
                                           "delta.enableExpiredLogCleanup": "false"})
    for i in range(6):  # versions 1..6 on day 0; checkpoint 5
        dc.write(t, rows([i]))
    clock.advance(20 * DAY)
    for i in range(6, 12):  # versions 7..12 on day 20; checkpoint 10
        dc.write(t, rows([i]))
    clock.advance(20 * DAY)  # day 40: the cutoff is midnight of day 10
    # The newest commit before the cutoff is 6, the newest checkpoint not after it is 5.
    assert sorted(t.cleanup_log()) == sorted(names(range(5)))
    assert ids_of(dc.DeltaTable(t.uri, log_store=t.log_store, version=6).to_arrow()) == \
        list(range(6))


def test_cleanup_needs_a_checkpoint() -> None:
    clock = ManualClock(START)
    t = memory_table(fresh_name(), clock, {"delta.checkpointInterval": "100"})
    for i in range(4):
        dc.write(t, rows([i]))
    clock.advance(100 * DAY)
    assert t.cleanup_log() == []
    assert len(log_listing(t)) == 5


def test_cleanup_never_relies_on_a_torn_checkpoint(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock(START)
    t = memory_table(fresh_name(), clock, {"delta.checkpointInterval": "5",
                                           "delta.enableExpiredLogCleanup": "false"})
    for i in range(12):
        dc.write(t, rows([i]))
    store = t.log_store.store
    data = store.get(checkpoint_path(10))
    store.put(checkpoint_path(10), data[: len(data) // 2])
    clock.advance(31 * DAY)
    with caplog.at_level(logging.WARNING, logger="deltacommit.maintenance"):
        deleted = t.cleanup_log()
    assert sorted(deleted) == sorted(names(range(5)))  # kept from checkpoint 5 instead
    assert "unusable" in caplog.text
    assert ids_of(dc.DeltaTable(t.uri, log_store=t.log_store).to_arrow()) == list(range(12))


def test_expired_log_cleanup_runs_after_a_checkpoint() -> None:
    clock = ManualClock(START)
    t = memory_table(fresh_name(), clock, {"delta.checkpointInterval": "5",
                                           "delta.logRetentionDuration": "interval 1 day"})
    for i in range(6):
        dc.write(t, rows([i]))  # checkpoint 5 on day 0
    clock.advance(3 * DAY)
    for i in range(6, 10):
        dc.write(t, rows([i]))  # version 10 checkpoints, then cleans up before checkpoint 5
    listing = log_listing(t)
    assert commit_path(4).split("/")[1] not in listing
    assert commit_path(5).split("/")[1] in listing
    off = memory_table(fresh_name(), clock, {"delta.checkpointInterval": "5",
                                             "delta.logRetentionDuration": "interval 1 day",
                                             "delta.enableExpiredLogCleanup": "false"})
    for i in range(6):
        dc.write(off, rows([i]))
    clock.advance(3 * DAY)
    for i in range(6, 10):
        dc.write(off, rows([i]))
    assert commit_path(0).split("/")[1] in log_listing(off)


def test_cutoff_commit_uses_monotonic_times() -> None:
    from deltacommit.protocol.log.names import parse_log_name

    def f(v: int, t: int) -> object:
        return parse_log_name(f"{v:020d}.json", 1, t)

    files = [f(0, 100), f(1, 300), f(2, 200), f(3, 400)]  # 2's clock ran behind
    assert cutoff_commit(files, 250) == 0  # type: ignore[arg-type]
    assert cutoff_commit(files, 301) == 2  # type: ignore[arg-type]
    assert cutoff_commit(files, 50) is None  # type: ignore[arg-type]


def test_deltalake_reads_after_our_cleanup(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, _ = local_table(root, configuration={"delta.checkpointInterval": "4",
                                            "delta.enableExpiredLogCleanup": "false"})
    for i in range(9):
        dc.write(t, rows([i]))
    old = time.time() - 40 * DAY
    for p in (root / LOG_DIR).iterdir():
        os.utime(p, (old, old))
    deleted = open_table(root).cleanup_log()
    assert sorted(deleted) == sorted(names(range(8)) + names([4], "checkpoint"))
    theirs = deltalake.DeltaTable(str(root))
    assert theirs.version() == 9
    assert sorted(theirs.to_pyarrow_table().column("id").to_pylist()) == list(range(9))


# --------------------------------------------------------------------------- vacuum


def test_vacuum_deletes_only_old_unreferenced_visible_files() -> None:
    clock = ManualClock(START)
    t = memory_table(fresh_name(), clock, partition_by=["day"])
    dc.write(t, rows([1], day="a"))
    dc.write(t, rows([2], day="b"))
    store = t.log_store.store
    for orphan in ("orphan.parquet", "day=a/orphan.parquet"):
        store.put(orphan, b"x")
    for hidden in ("_tmp/x.parquet", ".hidden.parquet", "day=a/.part.crc", "_change_data/c"):
        store.put(hidden, b"x")
    removed = [a.path for a in t.files() if a.partition_values["day"] == "a"]
    t.delete("day = 'a'")
    assert t.vacuum() == []  # nothing is a week old yet
    clock.advance(8 * DAY)
    dc.write(t, rows([3], day="c"))  # young: kept however unreferenced it would be
    live = {a.path for a in t.files()}
    listed = t.vacuum()
    assert listed == sorted(["day=a/orphan.parquet", "orphan.parquet", *removed])
    assert t.vacuum(dry_run=True) == listed and store.exists("orphan.parquet")
    assert t.vacuum(dry_run=False) == listed
    assert not store.exists("orphan.parquet")
    for path in live:
        assert store.exists(path)
    for hidden in ("_tmp/x.parquet", ".hidden.parquet", "day=a/.part.crc", "_change_data/c"):
        assert store.exists(hidden)
    assert ids_of(t.to_arrow()) == [2, 3]
    assert t.vacuum(dry_run=False) == []


def test_recent_tombstones_protect_old_files() -> None:
    clock = ManualClock(START)
    t = memory_table(fresh_name(), clock)
    dc.write(t, rows([1]))
    clock.advance(10 * DAY)  # the data file is now 10 days old ...
    t.delete()  # ... but removed just now
    assert t.vacuum() == []
    clock.advance(7 * DAY + 1)
    assert len(t.vacuum()) == 1


def test_vacuum_retention_is_enforced() -> None:
    clock = ManualClock(START)
    t = memory_table(fresh_name(), clock, {"delta.deletedFileRetentionDuration": "interval 2 days"})
    dc.write(t, rows([1]))
    t.delete()
    clock.advance(DAY)
    with pytest.raises(InvalidArgumentError, match=r"shorter than the table's "
                                                   r"delta.deletedFileRetentionDuration \(48 hours\)"):
        t.vacuum(retention_hours=1)
    assert len(t.vacuum(retention_hours=1, enforce_retention_duration=False)) == 1
    assert t.vacuum(retention_hours=72) == []
    with pytest.raises(InvalidArgumentError, match="must be a finite number of hours from 0"):
        t.vacuum(retention_hours=-1, enforce_retention_duration=False)
    pinned = dc.DeltaTable(t.uri, log_store=t.log_store, version=1)
    with pytest.raises(InvalidArgumentError, match="opened at version 1"):
        pinned.vacuum()


def test_hidden_paths() -> None:
    pcols = ["_p", "day"]
    assert is_hidden("_delta_log/0.json", pcols)
    assert is_hidden(".x.parquet", pcols)
    assert is_hidden("day=a/_SUCCESS", pcols)
    assert is_hidden("_q=1/f.parquet", pcols)
    assert not is_hidden("_p=1/f.parquet", pcols)
    assert not is_hidden("day=a/f.parquet", pcols)
    assert not is_hidden("f.parquet", pcols)


def _drop_one_add(path: Path) -> None:
    """Rewrite a checkpoint parquet without its first add row: a checkpoint that lost a file."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    adds = pc.is_valid(table.column("add")).to_pylist()
    drop = adds.index(True)
    keep = [i for i in range(table.num_rows) if i != drop]
    pq.write_table(table.take(keep), path)


@pytest.mark.parametrize("hint", ["kept", "rewritten", "deleted"])
def test_cleanup_never_deletes_commits_below_a_checkpoint_that_lost_a_file(
        tmp_path: Path, hint: str, caplog: pytest.LogCaptureFixture) -> None:
    """A checkpoint missing an add: with ``_last_checkpoint`` recording more actions the reader
    itself rejects it; with a hint that agrees (or none) only the commits show the file.  Either
    way cleanup keeps every commit below it (and says why), so the file is not lost: our reader
    falls back to the commits where it can tell, and ``verify`` names the bad checkpoint."""
    import json as _json

    root = tmp_path / "t"
    t, _ = local_table(root, configuration={"delta.checkpointInterval": "5",
                                            "delta.enableExpiredLogCleanup": "false"})
    for i in range(7):
        dc.write(t, rows([i]))
    _drop_one_add(root / checkpoint_path(5))
    last = root / LOG_DIR / "_last_checkpoint"
    if hint == "rewritten":
        obj = _json.loads(last.read_text())
        obj["size"] -= 1
        obj.pop("numOfAddFiles", None)
        obj.pop("checksum", None)
        last.write_text(_json.dumps(obj))
    elif hint == "deleted":
        last.unlink()
    old = time.time() - 40 * DAY
    for p in (root / LOG_DIR).iterdir():
        os.utime(p, (old, old))
    before = log_names(root)
    with caplog.at_level(logging.WARNING, logger="deltacommit.maintenance"):
        assert open_table(root).cleanup_log() == []
    assert "unusable" in caplog.text and "keeping the commits before it" in caplog.text
    assert log_names(root) == before
    if hint == "kept":
        assert ids_of(open_table(root).to_arrow()) == list(range(7))
    report = verify_table(str(root))
    assert not report.ok
    assert any("00000000000000000005.checkpoint.parquet" in p for p in report.problems)
