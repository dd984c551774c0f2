"""Checkpoints: the table state at a version, so loading need not replay the whole log."""

from __future__ import annotations

from typing import TYPE_CHECKING

from deltacommit.log.names import LogFile
from deltacommit.log.replay import TableState

if TYPE_CHECKING:
    from deltacommit.logstore.base import LogStore


def load_checkpoint_base(log_store: LogStore, files: list[LogFile], target: int) -> TableState | None:
    """The state of the newest usable checkpoint at or before ``target``, or None."""
    del log_store, files, target
    return None


def after_commit(table: object, version: int) -> None:
    """Post-commit hook: write a checkpoint when the table's interval says so."""
    del table, version
