"""Writing checkpoints after commits, and loading snapshots from them and the log after them."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import deltacommit as dc
from deltacommit.engine.snapshot.snapshot import Snapshot
from deltacommit.errors import MissingVersionError, TableNotFoundError
from deltacommit.protocol.files.lazy_files import LazyActionMap
from deltacommit.protocol.log.names import LAST_CHECKPOINT, LOG_DIR, checkpoint_path, commit_path

from .helpers import file_set, ids_of, local_table, log_names, open_table, rows


def checkpoints(root: Path) -> list[int]:
    return [int(n[:20]) for n in log_names(root) if ".checkpoint." in n]


def test_checkpoint_every_interval_by_the_committing_writer(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, _ = local_table(root)
    for i in range(21):
        dc.write(t, rows([i]))
    assert t.version == 21
    assert checkpoints(root) == [10, 20]
    last = json.loads((root / LAST_CHECKPOINT).read_text())
    assert last["version"] == 20 and last["size"] == 2 + 20 and last["numOfAddFiles"] == 20


def test_interval_from_table_property(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, _ = local_table(root, configuration={"delta.checkpointInterval": "3"})
    for i in range(7):
        dc.write(t, rows([i]))
    assert checkpoints(root) == [3, 6]


def test_explicit_checkpoint_and_idempotence(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, _ = local_table(root)
    dc.write(t, rows([1, 2]))
    info = t.checkpoint()
    assert (info.version, info.created, info.num_add_files, info.num_actions) == (1, True, 1, 3)
    again = t.checkpoint()
    assert again.created is False and again.version == 1
    assert checkpoints(root) == [1]


def test_snapshot_loads_from_checkpoint_without_the_log_before_it(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, _ = local_table(root, configuration={"delta.checkpointInterval": "5"}, partition_by=["day"])
    for i in range(8):
        dc.write(t, rows([i], day=f"2026-11-{20 + i % 3}"))
    t.delete("day = '2026-11-20'")
    dc.write(t, rows([100], day="2026-11-20"))
    expected_files = file_set(t)
    expected = ids_of(t.to_arrow())
    for v in range(0, 10):
        (root / commit_path(v)).unlink()
    (root / checkpoint_path(5)).unlink()
    fresh = open_table(root)
    assert fresh.version == 10
    assert isinstance(fresh.snapshot.state.files, LazyActionMap)
    assert file_set(fresh) == expected_files
    assert ids_of(fresh.to_arrow()) == expected == [1, 2, 4, 5, 7, 100]
    # Time travel before the checkpoint needs the deleted commits.
    with pytest.raises(MissingVersionError, match="lacks version"):
        open_table(root, version=7)


def test_time_travel_uses_an_older_checkpoint_or_the_log(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, _ = local_table(root, configuration={"delta.checkpointInterval": "4"})
    for i in range(10):
        dc.write(t, rows([i]))
    for v in range(11):
        old = open_table(root, version=v)
        assert old.version == v
        assert ids_of(old.to_arrow()) == list(range(v))
    with pytest.raises(TableNotFoundError, match="versions up to 10"):
        open_table(root, version=11)


def test_last_checkpoint_is_only_a_hint(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "t"
    t, _ = local_table(root, configuration={"delta.checkpointInterval": "3"})
    for i in range(7):
        dc.write(t, rows([i]))
    want = list(range(7))
    hint = root / LAST_CHECKPOINT
    # Stale (points at an older checkpoint): the newer one is still found by listing.
    hint.write_text(json.dumps({"version": 3, "size": 5}))
    assert ids_of(open_table(root).to_arrow()) == want
    # Points at a checkpoint that does not exist, or past the end of the log.
    for bogus in (4, 999):
        hint.write_text(json.dumps({"version": bogus, "size": 5}))
        assert ids_of(open_table(root).to_arrow()) == want
    # Garbage: ignored with a warning.
    hint.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="deltacommit.checkpoint"):
        assert ids_of(open_table(root).to_arrow()) == want
    assert "_last_checkpoint" in caplog.text
    hint.unlink()
    assert ids_of(open_table(root).to_arrow()) == want


def test_loading_lists_only_from_the_hinted_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, store = local_table(root, wrap=True)
    for i in range(13):
        dc.write(t, rows([i]))
    assert store is not None
    fresh = open_table(root, store)
    store.reset()
    Snapshot.load(fresh.log_store)
    assert store.lists == [(f"{LOG_DIR}/", f"{LOG_DIR}/{9:020d}.z")]
    reads = sorted(store.reads)
    assert reads == sorted([LAST_CHECKPOINT, checkpoint_path(10)]
                           + [commit_path(v) for v in (11, 12, 13)])


def test_update_reads_only_newer_commits(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, store = local_table(root, wrap=True, configuration={"delta.checkpointInterval": "100"})
    dc.write(t, rows([0]))
    assert store is not None
    reader = open_table(root, store)
    writer = open_table(root)
    for i in range(1, 4):
        dc.write(writer, rows([i]))
    store.reset()
    assert reader.update() == 4
    assert set(store.reads) == {commit_path(v) for v in (2, 3, 4, 5)}  # 5: the probe that misses
    assert ids_of(reader.to_arrow()) == [0, 1, 2, 3]
    store.reset()
    assert reader.update() == 4
    # Nothing new: one probe.  The snapshot was the newest version moments ago, so no commit
    # after it can have expired, and the hint that tells "nothing new" from "cleaned up" is
    # not needed (test_stale_writers.py covers a snapshot older than the retention).
    assert store.reads == [commit_path(5)]


def test_commit_retry_reads_only_the_missed_commits(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, store = local_table(root, wrap=True, configuration={"delta.checkpointInterval": "5"})
    for i in range(6):
        dc.write(t, rows([i]))  # checkpoint at 5
    assert store is not None
    stale = open_table(root, store)
    other = open_table(root)
    dc.write(other, rows([100]))
    dc.write(other, rows([101]))
    store.reset()
    result = dc.write(stale, rows([200]))
    # Losing 7, it reads 7 alone and claims 8; losing that too, it reads 8 and claims 9.
    assert result.version == 9 and result.attempts == 3
    assert not any(".checkpoint." in p for p in store.reads)
    assert {commit_path(7), commit_path(8)} <= set(store.reads)
    assert all(p.startswith(f"{LOG_DIR}/000") or p == LAST_CHECKPOINT for p in store.reads)
    assert isinstance(stale.snapshot.state.files, LazyActionMap)
    assert stale.snapshot.state.files.is_lazy  # a blind append never needed the file list


def test_failed_checkpoint_never_fails_the_commit(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "t"
    t, store = local_table(root, wrap=True, configuration={"delta.checkpointInterval": "2"})
    assert store is not None
    store.fail_put = lambda path: ".checkpoint." in path
    with caplog.at_level(logging.WARNING, logger="deltacommit.checkpoint"):
        r1 = dc.write(t, rows([1]))
        r2 = dc.write(t, rows([2]))
    assert (r1.version, r2.version) == (1, 2)
    assert checkpoints(root) == []
    assert not (root / LAST_CHECKPOINT).exists()
    assert "checkpoint of" in caplog.text and "the commit itself succeeded" in caplog.text
    store.fail_put = lambda path: False
    dc.write(t, rows([3]))
    dc.write(t, rows([4]))
    assert checkpoints(root) == [4]
    assert ids_of(open_table(root).to_arrow()) == [1, 2, 3, 4]


def test_checkpoint_of_a_snapshot_that_moved_past_the_version(tmp_path: Path) -> None:
    """The hook checkpoints exactly the committed version even if the table object has
    already seen a newer one (another thread committed in between)."""
    from deltacommit.engine.hooks.checkpoint import after_commit

    root = tmp_path / "t"
    t, _ = local_table(root, configuration={"delta.checkpointInterval": "2"})
    dc.write(t, rows([1]))
    other = open_table(root)
    dc.write(other, rows([2]))  # version 2, checkpointed by `other`
    (root / checkpoint_path(2)).unlink()
    dc.write(other, rows([3]))
    t.update()
    assert t.version == 3
    after_commit(t.log_store, t.snapshot, t.clock, 2)
    cp = open_table(root, version=2)
    assert ids_of(cp.to_arrow()) == [1, 2]
    assert checkpoints(root) == [2]


def test_update_of_a_snapshot_older_than_the_cleaned_log(tmp_path: Path) -> None:
    """Cleanup deleted the commits right after a stale snapshot: probing finds nothing, but the
    newer checkpoint shows the table moved on, so the snapshot is reloaded from it."""
    import os
    import time

    root = tmp_path / "t"
    t, _ = local_table(root, configuration={"delta.checkpointInterval": "3",
                                            "delta.enableExpiredLogCleanup": "false"})
    dc.write(t, rows([0]))
    stale = open_table(root).snapshot
    for i in range(1, 8):
        dc.write(t, rows([i]))
    old = time.time() - 40 * 86_400
    for p in (root / LOG_DIR).glob("*.json"):
        os.utime(p, (old, old))
    assert commit_path(2) in open_table(root).cleanup_log()
    fresh, new = stale.updated()
    assert new == [] and fresh.version == 8
    assert sorted(a.path for a in fresh.files()) == sorted(a.path for a in t.files())
    assert stale.version == 1
    again, new = stale.updated()  # a snapshot never changes: asking again reloads again
    assert new == [] and again.version == 8 and stale.version == 1
    # Nothing new and nothing cleaned up: the same snapshot comes back.
    assert fresh.updated() == (fresh, [])


def test_file_columns_are_read_only_when_needed(tmp_path: Path) -> None:
    """Opening a table and appending to it never reads the checkpoint's add and remove rows;
    they are read on first use, even if cleanup has deleted the checkpoint by then."""
    root = tmp_path / "t"
    t, _ = local_table(root, configuration={"delta.checkpointInterval": "3"})
    for i in range(4):
        dc.write(t, rows([i]))
    fresh = open_table(root)
    files = fresh.snapshot.state.files
    assert isinstance(files, LazyActionMap)
    base = files._base
    assert base is not None and not base.loaded
    dc.write(fresh, rows([10]))
    assert not base.loaded
    (root / checkpoint_path(3)).unlink()
    assert ids_of(fresh.to_arrow()) == [0, 1, 2, 3, 10]
    assert base.loaded


def test_add_count_differing_from_last_checkpoint_is_caught(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, _ = local_table(root, configuration={"delta.checkpointInterval": "3"})
    for i in range(3):
        dc.write(t, rows([i]))
    hint = json.loads((root / LAST_CHECKPOINT).read_text())
    assert hint["numOfAddFiles"] == 3
    (root / LAST_CHECKPOINT).write_text(json.dumps({**{k: v for k, v in hint.items()
                                                       if k != "checksum"},
                                                    "numOfAddFiles": 4}))
    for v in range(3):
        (root / commit_path(v)).unlink()
    with pytest.raises(MissingVersionError, match="could not be used"):
        open_table(root)
