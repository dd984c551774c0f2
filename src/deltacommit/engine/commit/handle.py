"""What the layers built on the engine need of a table object.

``DeltaTable`` is one; typing against this protocol instead of importing ``DeltaTable`` keeps
the transaction, the group committer and maintenance below the table API instead of tangled
with it.
"""

from __future__ import annotations

from typing import Protocol

from deltacommit.engine.commit.policy import CommitPolicy
from deltacommit.engine.commit.table_log import TableLog
from deltacommit.runtime.clock import Clock, RandomSource


class TableHandle(Protocol):
    """A table object: its log, how hard it commits, its clock and randomness."""

    log: TableLog
    policy: CommitPolicy
    clock: Clock
    random: RandomSource
