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


def mapped_change_data(uri: str, start: int, end: int | None = None) -> pa.Table:
    """The change data of versions ``start`` to ``end`` (the newest) of a column-mapping table, read from its
    ``cdc`` files by the physical names its schema gives, as logical columns (partition values
    as the strings the log holds) with ``_change_type``: no peer here reads the change data of
    such tables (deltalake 1.6.0's ``load_cdf`` gives nulls or fails, 1.6.6 refuses)."""
    import json

    import pyarrow.parquet as pq

    import deltacommit as dc
    from deltacommit.protocol.schema.column_mapping import physical_names

    t = dc.DeltaTable(uri)
    mode = t.configuration["delta.columnMapping.mode"]
    assert mode in ("name", "id"), mode
    logical = {p: n for n, p in physical_names(t.schema, mode).items()}
    parts = []
    for version in range(start, (t.version if end is None else end) + 1):
        log = Path(uri) / "_delta_log" / f"{version:020d}.json"
        for c in (json.loads(line)["cdc"] for line in log.read_text().splitlines()
                  if '"cdc"' in line):
            rows = pq.read_table(Path(uri) / c["path"])
            assert set(rows.column_names) <= set(logical) | {"_change_type"}, rows.schema
            rows = rows.rename_columns([logical.get(n, n) for n in rows.column_names])
            for key, value in sorted(c["partitionValues"].items()):
                rows = rows.append_column(logical[key], pa.array([value] * rows.num_rows,
                                                                 pa.string()))
            parts.append(rows.select(sorted(rows.column_names)))
    assert parts, f"{uri}: no change data from version {start}"
    return pa.concat_tables(parts)
