"""The test tables of Delta's suites (tests/data) and deltalake 1.6.0's reading of a table,
for every test that compares deltacommit with the peer."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import deltalake
import pyarrow as pa

DATA = Path(__file__).resolve().parent / "data"


def copy_table(name: str, tmp_path: Path) -> str:
    """A private copy of ``tests/data/<name>`` to write to."""
    dest = tmp_path / name.replace("/", "_")
    shutil.copytree(DATA / name, dest)
    return str(dest)


def peer_read(uri: str, version: int | None = None,
              storage_options: Mapping[str, str] | None = None) -> pa.Table:
    """deltalake 1.6.0's read through its query engine: its pyarrow dataset refuses deletion
    vectors and column mapping, the engine (delta-kernel-rs underneath) applies them."""
    table = deltalake.DeltaTable(uri, version=version,
                                 storage_options=dict(storage_options) if storage_options
                                 else None)
    return pa.table(deltalake.QueryBuilder().register("t", table).execute("select * from t")
                    .read_all())
