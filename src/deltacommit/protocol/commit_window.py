"""How long a writer's files, written but not yet committed, are safe from VACUUM.  Pure.

A writer writes its data files first and commits them afterwards; until the commit lands, the
log names them nowhere, and to VACUUM they look like the leftovers of a failed write.  With
the table's retention (a week) that does not matter.  With a short one (``retention_hours=0``,
``enforce_retention_duration=False``) a vacuum landing between a compaction's writes and its
commit would delete the files the compaction then commits: a version naming files that do
not exist.  Two rules, kept by both sides, exclude that without any lock between them:

* **VACUUM** never deletes a file the log does not name (untracked) that is younger than
  ``UNCOMMITTED_FLOOR_MS`` (an hour), whatever its retention, unless the operator says no
  writer is running (``protect_uncommitted=False``).  It reads its clock *before* it reads
  the snapshot, and lists the files after.
* **A writer** starts a commit attempt for files only within ``COMMIT_WINDOW_MS`` (25
  minutes) of reading its clock before it began writing them (``may_commit``).  Compaction
  deletes an older bin's files and leaves the bin for the next run.  A plain write, whose
  work cannot be redone silently, checks past the window that every file it wrote still
  exists, and deletes them and fails cleanly if one is gone; a whole one still commits, which
  only a VACUUM whose retention the operator set below the write's duration can race.

Why no file can be lost: let two clocks (the writer's, vacuum's, the store's modification
times) differ by at most e = ``MAX_CLOCK_SKEW_MS``; F is the floor, W = F/2 - e the window.
The writer reads its clock at t0, writes the file (stamped by the store at t_m >= t0) and
starts its commit attempt at t1 < t0 + W; the version lands at t_c.  A vacuum reads its clock
at t_v, then the snapshot at t_s >= t_v, then lists; it deletes the file only if the snapshot
lacks it (t_c > t_s >= t_v) and the stamp is older than its clock less F, so
t_v > t_m + F - e >= t0 + F - e.  A loss therefore needs t_c - t1 > F - e - W = F/2: a commit
attempt taking more than half an hour to land.  The commit loop's attempts take seconds; a
writer stopped for longer is the case no window covers, as the table's retention cannot cover
a writer stopped for a week.
"""

from __future__ import annotations

#: VACUUM keeps every untracked file younger than this, whatever the retention.
UNCOMMITTED_FLOOR_MS = 3_600_000
#: The largest difference assumed between two clocks: a writer's, vacuum's, the store's.
MAX_CLOCK_SKEW_MS = 300_000
#: A writer starts committing files only within this time of starting to write them.
COMMIT_WINDOW_MS = UNCOMMITTED_FLOOR_MS // 2 - MAX_CLOCK_SKEW_MS


def may_commit(started_ms: int, now_ms: int) -> bool:
    """Whether files whose writing began at ``started_ms`` (the writer's clock, read before
    the first byte) may still be committed at ``now_ms``: a vacuum cannot have deleted them,
    nor delete them before a commit attempt starting now lands (module docstring)."""
    return now_ms - started_ms < COMMIT_WINDOW_MS


def untracked_deletable(modified_ms: int, vacuum_started_ms: int) -> bool:
    """Whether VACUUM may delete a file no version names, last modified at ``modified_ms``
    (the store's clock), when it read its clock at ``vacuum_started_ms`` before its snapshot."""
    return modified_ms < vacuum_started_ms - UNCOMMITTED_FLOOR_MS


__all__ = ["COMMIT_WINDOW_MS", "MAX_CLOCK_SKEW_MS", "UNCOMMITTED_FLOOR_MS", "may_commit",
           "untracked_deletable"]
