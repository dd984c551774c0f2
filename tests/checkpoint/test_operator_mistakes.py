"""An operator deletes or truncates a checkpoint, its ``_sidecars`` folder or ``_last_checkpoint``
under a live table.  Readers and writers, live or new, fall back to the JSON commits where they
exist; where log cleanup has removed them, every reader and writer fails with an error that
names what is missing (the checkpoint ``_last_checkpoint`` names, the sidecar, the truncated
file), and no writer commits on a state it could not read."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.engine.snapshot import state_cache
from deltacommit.errors import MissingVersionError
from deltacommit.protocol.log.names import LOG_DIR
from tests.delta_tables import DATA

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string())])


def _classic(path: Path) -> tuple[str, list[int], Path]:
    """A table with a classic checkpoint at version 12 and a commit after it."""
    uri = str(path)
    dc.write(uri, pa.table({"id": [0], "day": ["a"]}, schema=SCHEMA), partition_by=["day"])
    for i in range(1, 12):
        dc.write(uri, pa.table({"id": [i], "day": ["ab"[i % 2]]}, schema=SCHEMA), mode="append")
    info = dc.DeltaTable(uri).checkpoint()
    dc.write(uri, pa.table({"id": [99], "day": ["a"]}, schema=SCHEMA), mode="append")
    return uri, [*range(12), 99], path / LOG_DIR / Path(info.path).name


def _with_sidecars(path: Path) -> tuple[str, list[int], Path]:
    """Spark's V2 checkpoint with two sidecars (Delta's golden table), version 2."""
    shutil.copytree(DATA / "delta-golden" / "v2-checkpoint-parquet", path)
    ids = sorted(dc.DeltaTable(str(path)).to_arrow().column("id").to_pylist())
    return str(path), ids, path / LOG_DIR / "_sidecars"


def _truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


DAMAGES: dict[str, tuple[Callable[[Path], tuple[str, list[int], Path]],
                         Callable[[Path], None], str]] = {
    # name: (table, damage to the checkpoint path it returns, what the error names)
    "checkpoint deleted": (_classic, lambda p: p.unlink(),
                           "_last_checkpoint names a checkpoint at version 12, which is not in"),
    "checkpoint truncated": (_classic, _truncate, "could not be read: "),
    "checkpoint emptied": (_classic, lambda p: p.write_bytes(b""), "could not be read: "),
    "_sidecars deleted": (_with_sidecars, shutil.rmtree, "_sidecars/"),
}


def _ids(uri: str) -> list[int]:
    return sorted(dc.DeltaTable(uri).to_arrow().column("id").to_pylist())


def _log(uri: str) -> list[str]:
    return sorted(p.name for p in (Path(uri) / LOG_DIR).iterdir())


def _rows(uri: str, ids: list[int]) -> pa.Table:
    """Rows of ``ids`` in the table's schema (partition ``day`` 'a' where it has one)."""
    schema = dc.DeltaTable(uri).schema
    columns = {"id": pa.array(ids, pa.int64())}
    if "day" in schema.names:
        columns["day"] = pa.array(["a"] * len(ids))
    return pa.table(columns, schema=schema)


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_readers_and_writers_fall_back_to_the_json_commits(damage: str, tmp_path: Path) -> None:
    make, spoil, _ = DAMAGES[damage]
    uri, ids, target = make(tmp_path / "t")
    live = dc.DeltaTable(uri)  # opened before the damage, from the checkpoint
    spoil(target)
    # The live object goes on: its state was read, newer commits are read incrementally.
    dc.write(live, _rows(uri, [1000]), mode="append")
    assert sorted(live.to_arrow().column("id").to_pylist()) == sorted([*ids, 1000])
    # A new process reads the JSON commits...
    state_cache.clear()
    assert _ids(uri) == sorted([*ids, 1000])
    # ...and an overwrite removes every file of the state it read, none left behind.
    state_cache.clear()
    dc.write(dc.DeltaTable(uri), _rows(uri, [1001]), mode="overwrite")
    state_cache.clear()
    assert _ids(uri) == [1001]


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_without_the_commits_every_reader_and_writer_names_what_is_missing(
        damage: str, tmp_path: Path) -> None:
    make, spoil, named = DAMAGES[damage]
    uri, _, target = make(tmp_path / "t")
    log = [p for p in (Path(uri) / LOG_DIR).iterdir() if p.name[:20].isdigit()]
    newest = max(int(p.name[:20]) for p in log if ".checkpoint." in p.name)
    for p in log:  # as log cleanup leaves it: the newest checkpoint and the commits after it
        if int(p.name[:20]) < newest or (int(p.name[:20]) == newest and p.suffix == ".crc"):
            p.unlink()
    spoil(target)
    before = _log(uri)
    rows = pa.table({"id": [5]})
    for attempt in (lambda: dc.DeltaTable(uri),
                    lambda: dc.write(uri, rows, mode="append"),
                    lambda: dc.write(uri, rows, mode="overwrite")):
        state_cache.clear()
        with pytest.raises(MissingVersionError) as e:
            attempt()
        message = str(e.value)
        assert f"table {Path(uri).as_uri()}" in message, message
        assert "cannot be replayed" in message and named in message, message
    assert _log(uri) == before  # nothing committed


@pytest.mark.parametrize("spoil", ["deleted", "truncated", "a JSON array"])
def test_a_damaged_last_checkpoint_is_ignored_and_the_log_listed(spoil: str,
                                                                 tmp_path: Path) -> None:
    uri, ids, _ = _classic(tmp_path / "t")
    hint = Path(uri) / LOG_DIR / "_last_checkpoint"
    if spoil == "deleted":
        hint.unlink()
    elif spoil == "truncated":
        _truncate(hint)
    else:
        hint.write_text(json.dumps([json.loads(hint.read_text())]))
    state_cache.clear()
    assert _ids(uri) == ids
    dc.write(uri, pa.table({"id": [7], "day": ["a"]}, schema=SCHEMA), mode="append")
    state_cache.clear()
    assert _ids(uri) == sorted([*ids, 7])
