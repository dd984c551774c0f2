"""Log cleanup after each checkpoint lists a log only when some commit may have expired.

The hook runs after every checkpoint; a table younger than its log retention has nothing to
delete, and listing its whole log each time (on S3: a LIST and thousands of parsed keys per
checkpoint) only costs.  Once a listing has found even the oldest commit too young, a HEAD of
that commit stands in for the listing while it is unchanged; a log whose files were rewritten
or backdated is listed, and cleaned, again.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import deltacommit as dc
from deltacommit.protocol.log.names import LOG_DIR

from .helpers import ids_of, local_table, open_table, rows

DAY = 86_400.0


def full_log_listings(lists: list[tuple[str, str | None]]) -> int:
    return sum(1 for prefix, start_after in lists
               if prefix == f"{LOG_DIR}/" and start_after is None)


def test_a_young_log_is_listed_once_then_again_when_its_commits_are_backdated(
        tmp_path: Path) -> None:
    root = tmp_path / "t"
    t, store = local_table(root, wrap=True, configuration={"delta.checkpointInterval": "4"})
    assert store is not None
    store.reset()
    for i in range(13):
        dc.write(t, rows([i]))  # checkpoints at 4, 8 and 12, each followed by a cleanup
    assert full_log_listings(store.lists) == 1
    assert t.cleanup_log() == []
    assert full_log_listings(store.lists) == 1
    old = time.time() - 40 * DAY
    for p in (root / LOG_DIR).iterdir():
        os.utime(p, (old, old))
    deleted = t.cleanup_log()
    assert full_log_listings(store.lists) == 2
    assert f"{LOG_DIR}/{0:020d}.json" in deleted
    assert ids_of(open_table(root).to_arrow()) == list(range(13))


def test_the_young_log_record_outlives_the_table_object(tmp_path: Path) -> None:
    """``dc.write(uri)`` opens a new log store on every call: what the last cleanup found is
    kept per table for the process, so a checkpoint after each such call lists nothing."""
    root = tmp_path / "t"
    _, store = local_table(root, wrap=True, configuration={"delta.checkpointInterval": "4"})
    assert store is not None
    for i in range(13):
        opened = open_table(root, store)  # a new table object and log store for each write
        before = full_log_listings(store.lists)
        dc.write(opened, rows([i]))
        if i == 3:  # the first checkpoint's cleanup lists the log once
            assert full_log_listings(store.lists) == before + 1
        else:
            assert full_log_listings(store.lists) == before, i
    assert ids_of(open_table(root).to_arrow()) == list(range(13))
