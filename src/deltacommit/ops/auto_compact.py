"""Auto-compaction: ``delta.autoOptimize.autoCompact=true`` compacts what writers just touched.

Delta's table property, as Databricks and Delta 3.x honour it: after a commit that added files,
each partition it touched whose small files (under ``maxFileSize``) number at least
``minNumFiles`` is compacted.  Here the compaction runs on a background thread of the writing
process, never in the writer's commit: the writer's result is returned first, and compaction
(``dataChange=false``, snapshot isolation) never conflicts with appends, so it cannot make a
writer fail either.  One compaction per table runs at a time in a process; commits made
meanwhile are looked at again when it finishes.

Settings (table properties): ``delta.autoOptimize.autoCompact`` (``true``/``auto``/``legacy``
turn it on), ``delta.autoOptimize.autoCompact.minNumFiles`` (default 50, Delta's
``autoCompact.minNumFiles``) and ``delta.autoOptimize.autoCompact.maxFileSize`` (default
128 MiB, Delta's ``autoCompact.maxFileSize``; also the target size).  The operator's switch:
``DELTACOMMIT_AUTO_COMPACT=off`` in the environment turns it off for the process, whatever the
tables say.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from deltacommit.protocol.actions import Add
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.properties import AUTO_COMPACT_MIN_NUM_FILES
from deltacommit.runtime.process_state import ForkSafeLock, process_wide

if TYPE_CHECKING:
    from deltacommit.engine.snapshot.snapshot import Commit, Snapshot


class CompactableTable(Protocol):
    """What auto-compaction needs of a freshly opened table (``DeltaTable`` is one)."""

    @property
    def table_config(self) -> TableConfig: ...

    @property
    def optimize(self) -> Any: ...

log = logging.getLogger(__name__)

SWITCH = "DELTACOMMIT_AUTO_COMPACT"
DEFAULT_MIN_NUM_FILES = 50
DEFAULT_MAX_FILE_SIZE = 128 * 1024 * 1024

_lock = ForkSafeLock()
#: Table URI -> partitions waiting for the compaction thread of that table.
_queued: dict[str, set[tuple[tuple[str, str | None], ...]]] = {}
_threads: dict[str, threading.Thread] = {}


def _forget_in_child() -> None:
    """The parent's compaction threads do not run in a forked child."""
    _queued.clear()
    _threads.clear()


process_wide("queued auto-compactions (ops.auto_compact)", _forget_in_child)


def enabled(config: TableConfig) -> bool:
    if (os.environ.get(SWITCH) or "").strip().lower() in ("off", "false", "0", "no"):
        return False
    return config.auto_compact


def _settings(config: TableConfig, uri: str) -> tuple[int, int]:
    min_files = config.auto_compact_min_num_files
    if min_files is None:
        min_files = DEFAULT_MIN_NUM_FILES
        raw = config.raw.get(AUTO_COMPACT_MIN_NUM_FILES)
        if raw:
            log.warning("table %s: %s=%r is not a number; using %d", uri,
                        AUTO_COMPACT_MIN_NUM_FILES, raw, min_files)
    max_size = config.auto_compact_max_file_size or DEFAULT_MAX_FILE_SIZE
    return max(min_files, 2), max_size


def due_partitions(commit: Commit, snapshot: Snapshot, min_files: int, max_size: int
                   ) -> set[tuple[tuple[str, str | None], ...]]:
    """Partitions the commit added files to that now hold ``min_files`` small files (pure)."""
    touched = {tuple(sorted(a.partition_values.items())) for a in commit.actions
               if isinstance(a, Add) and a.data_change}
    if not touched:
        return set()
    small: Counter[tuple[tuple[str, str | None], ...]] = Counter()
    for a in snapshot.iter_files():
        key = tuple(sorted(a.partition_values.items()))
        if key in touched and a.size < max_size:
            small[key] += 1
    return {k for k in touched if small[k] >= min_files}


class AutoCompactor:
    """The post-commit hook of one table object."""

    def __init__(self, uri: str, open_table: Callable[[], CompactableTable]) -> None:
        self.uri = uri
        #: Opens the table afresh for each compaction (a table object of its own).
        self.open_table = open_table

    def __call__(self, commit: Commit, snapshot: Snapshot) -> None:
        config = snapshot.table_config
        if not enabled(config):
            return
        info = commit.commit_info
        if info is not None and info.operation == "OPTIMIZE":
            return
        min_files, max_size = _settings(config, self.uri)
        due = due_partitions(commit, snapshot, min_files, max_size)
        if due:
            self._schedule(due)

    def _schedule(self, partitions: set[tuple[tuple[str, str | None], ...]]) -> None:
        with _lock:
            _queued.setdefault(self.uri, set()).update(partitions)
            running = _threads.get(self.uri)
            if running is not None and running.is_alive():
                return  # the running compaction picks the partitions up when it finishes
            thread = threading.Thread(target=self._run, name=f"auto-compact {self.uri}")
            _threads[self.uri] = thread
            thread.start()

    def _run(self) -> None:
        while True:
            with _lock:
                partitions = _queued.pop(self.uri, set())
                if not partitions:
                    _threads.pop(self.uri, None)
                    return
            try:
                table = self.open_table()
                _, max_size = _settings(table.table_config, self.uri)
                for part in sorted(partitions, key=repr):
                    if any(v is None for _, v in part):
                        continue  # a null partition value has no equality filter
                    table.optimize.compact([(c, "=", v) for c, v in part] or None,
                                           target_size=max_size, auto=True)
            except Exception:
                log.exception("auto-compaction of table %s failed; the data is unchanged and "
                              "the next commit tries again", self.uri)


def wait_idle(timeout: float | None = None) -> bool:
    """Wait for this process's auto-compactions to finish (tests, and processes about to exit
    that want their compaction done); True if none is running afterwards."""
    while True:
        with _lock:
            threads = [t for t in _threads.values() if t.is_alive()]
        if not threads:
            return True
        for t in threads:
            t.join(timeout)
            if t.is_alive():
                return False
