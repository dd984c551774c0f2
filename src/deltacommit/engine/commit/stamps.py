"""What a version's actions owe to the version itself: in-commit timestamps and row ids.

Most of a commit is decided when its transaction stages it.  Two table features add values
that depend on where the commit lands, so the commit loop stamps them on every attempt, from
the state of the table just before that attempt's version:

* ``inCommitTimestamp`` (``protocol/features/in_commit_timestamps.py``): the later of the clock and one
  millisecond after the previous version's; and, in the commit that turns the feature on for
  a table with history, the version and timestamp it starts at, in the metadata.
* row ids (``protocol/features/row_tracking.py``): each new file's ``baseRowId`` above the table's
  high-water mark and its ``defaultRowCommitVersion``, and the raised mark as a
  ``delta.rowTracking`` domain action.

A rebased attempt is stamped again from the newer state, so ids never overlap a concurrent
winner's and timestamps keep increasing.  The features that apply are those of the protocol
and metadata the version commits under: its own, else the newest the loop knows (a
concurrent winner may have turned row tracking on without conflicting).
"""

from __future__ import annotations

from collections.abc import Sequence

from deltacommit.engine.snapshot.snapshot import Snapshot
from deltacommit.protocol.actions import Action, Add, CommitInfo, Metadata, Protocol
from deltacommit.protocol.features import in_commit_timestamps as ict
from deltacommit.protocol.features import row_tracking
from deltacommit.protocol.table_config.config import TableConfig


def stamp(actions: Sequence[Action], before: Snapshot, version: int, now_ms: int
          ) -> tuple[list[Action], bool]:
    """``actions`` (commitInfo first) as version ``version`` after ``before`` writes them, and
    whether anything but the ``commitInfo`` depends on the version (the loop then serializes
    the whole version again for each attempt).  Version 0 is stamped after the empty state
    before it, from the protocol and metadata it creates."""
    out = list(actions)
    state = before.state
    protocol: Protocol | None = state.protocol
    config = before.table_config
    meta_at: int | None = None
    for i, a in enumerate(out):
        if isinstance(a, Protocol):
            protocol = a
        elif isinstance(a, Metadata):
            config, meta_at = TableConfig.of(a, config.table), i
    assert protocol is not None, "a version before the table's first carries its protocol"
    dependent = False
    table = before.log_store.table_uri
    if config.in_commit_timestamps_enabled(protocol):
        info = out[0]
        assert isinstance(info, CommitInfo)
        turned_on = version > 0 and not before.table_config.in_commit_timestamps_enabled(
            before.protocol)
        # The commit turning the feature on must be later than the previous commit file
        # (PROTOCOL.md), whose time another machine's clock or the store set.
        previous = before.commit_file_time() if turned_on else before.in_commit_timestamp()
        if previous is None and not turned_on:
            previous = before.table_config.in_commit_timestamp_floor
        ts = ict.next_timestamp(now_ms, previous)
        values = {ict.FIELD: ts, **info.values}
        values["timestamp"] = ts
        values[ict.FIELD] = ts
        out[0] = CommitInfo(values)
        if turned_on and meta_at is not None:
            metadata = out[meta_at]
            assert isinstance(metadata, Metadata)
            out[meta_at] = ict.with_enablement(metadata, version, ts)
            dependent = True
    if config.row_tracking_enabled(protocol):
        # Every commit this writer makes keeps the stable ids of the rows it copies
        # (compaction materializes them) and updates none in place.
        info = out[0]
        assert isinstance(info, CommitInfo)
        tags = info.values.get("tags")
        tags = dict(tags) if isinstance(tags, dict) else {}
        tags[row_tracking.PRESERVED_TAG] = "true"
        out[0] = CommitInfo({**info.values, "tags": tags})
    if config.row_tracking_supported(protocol):
        positions = [i for i, a in enumerate(out) if isinstance(a, Add)]
        if positions:
            mark = row_tracking.high_water_mark(state.domains, table)
            adds: list[Add] = []
            for i in positions:
                a = out[i]
                assert isinstance(a, Add)
                adds.append(a)
            assigned, new_mark = row_tracking.assign(adds, mark, version, table)
            for i, a in zip(positions, assigned, strict=True):
                out[i] = a
            if new_mark > mark:
                out.insert(positions[0], row_tracking.mark_action(new_mark))
            dependent = True
    return out, dependent
