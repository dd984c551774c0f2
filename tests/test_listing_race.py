"""A log listing that misses a commit created while it ran does not fail a reader.

readdir(3) gives no snapshot of a directory that changes under it: with commits being
created, a listing can return ``N+1.json`` and miss the ``N.json`` created just before (the
torture run on local disk showed it).  The reader asks for a version the listing missed
before calling it a gap; a version that is really gone is still an error.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.snapshot import state_cache
from deltacommit.errors import MissingVersionError
from deltacommit.io.logstore import ConditionalPutLogStore
from deltacommit.io.storage.base import ObjectMeta
from deltacommit.io.storage.local import LocalStore
from deltacommit.protocol.log.names import commit_path

SCHEMA = pa.schema([pa.field("id", pa.int64())])


class _ListingMisses(LocalStore):
    """A local store whose listings leave out one path, as a listing racing a create can."""

    def __init__(self, root: str, hidden: str) -> None:
        super().__init__(root)
        self.hidden = hidden

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectMeta]:
        return (m for m in super().list(prefix, start_after) if m.path != self.hidden)


def test_a_version_the_listing_missed_is_read(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)
    for i in range(3):
        dc.write(uri, pa.table({"id": [i]}, schema=SCHEMA))
    store = _ListingMisses(uri, commit_path(2))
    table = dc.DeltaTable(uri, log_store=ConditionalPutLogStore(store))
    assert table.version == 3
    assert sorted(table.to_arrow().column("id").to_pylist()) == [0, 1, 2]


def test_a_version_that_is_gone_is_still_a_gap(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)
    for i in range(3):
        dc.write(uri, pa.table({"id": [i]}, schema=SCHEMA))
    (Path(uri) / commit_path(2)).unlink()
    state_cache.clear()  # a new process opens the damaged table
    with pytest.raises(MissingVersionError, match=r"lacks version\(s\) 2"):
        dc.DeltaTable(uri)
