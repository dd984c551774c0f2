"""Auto-compaction (delta.autoOptimize.autoCompact): after commits leave enough small files in
a partition, a background compaction of that partition; never in a writer's way, and off when
the operator says so."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.ops import auto_compact

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string())])


def _table(tmp_path: Path, **config: str) -> str:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["day"], configuration={
        "delta.autoOptimize.autoCompact": "true",
        "delta.autoOptimize.autoCompact.minNumFiles": "4", **config})
    return uri


def _append(uri: str, first: int, day: str = "a") -> None:
    dc.write(uri, pa.table({"id": [first, first + 1], "day": [day, day]}, schema=SCHEMA))


def _operations(uri: str) -> list[tuple[str, dict[str, str]]]:
    out = []
    for f in sorted((Path(uri) / "_delta_log").glob("*.json")):
        info = json.loads(f.read_text().splitlines()[0]).get("commitInfo", {})
        out.append((info.get("operation"), info.get("operationParameters", {})))
    return out


def test_compacts_a_partition_once_it_holds_enough_small_files(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    for i in range(3):
        _append(uri, 10 * i)
    _append(uri, 100, day="b")
    assert auto_compact.wait_idle(60)
    assert len(dc.DeltaTable(uri).files()) == 4  # three in day=a: below the threshold
    _append(uri, 30)  # the fourth small file of day=a
    assert auto_compact.wait_idle(60)
    t = dc.DeltaTable(uri)
    by_day = Counter(a.partition_values["day"] for a in t.files())
    assert by_day == Counter({"a": 1, "b": 1})
    ops = _operations(uri)
    assert ops[-1][0] == "OPTIMIZE" and ops[-1][1]["auto"] == "true"
    assert [op for op, _ in ops].count("OPTIMIZE") == 1
    ids = Counter(t.to_arrow().column("id").to_pylist())
    assert ids == Counter([0, 1, 10, 11, 20, 21, 30, 31, 100, 101])
    assert Counter(deltalake.DeltaTable(uri).to_pyarrow_table().column("id").to_pylist()) == ids


def test_writers_beside_it_never_fail_and_nothing_is_lost(tmp_path: Path) -> None:
    uri = _table(tmp_path)
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            start.wait()
            for i in range(15):
                _append(uri, w * 1000 + 2 * i)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert auto_compact.wait_idle(120)
    assert errors == []
    t = dc.DeltaTable(uri)
    expected = Counter(w * 1000 + k for w in range(4) for k in range(30))
    assert Counter(t.to_arrow().column("id").to_pylist()) == expected
    assert "OPTIMIZE" in [op for op, _ in _operations(uri)]
    assert len(t.files()) < 60


def test_the_operator_switch_turns_it_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(auto_compact.SWITCH, "off")
    uri = _table(tmp_path)
    for i in range(6):
        _append(uri, 10 * i)
    assert auto_compact.wait_idle(60)
    assert "OPTIMIZE" not in [op for op, _ in _operations(uri)]
    assert len(dc.DeltaTable(uri).files()) == 6


def test_tables_without_the_property_are_left_alone(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for i in range(60):
        dc.write(uri, pa.table({"id": [i]}))
    assert auto_compact.wait_idle(60)
    assert len(dc.DeltaTable(uri).files()) == 60


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("delta.autoOptimize.autoCompact", "sometimes", "true, false, auto or legacy"),
    ("delta.autoOptimize.autoCompact.minNumFiles", "0", "positive integer"),
    ("delta.autoOptimize.autoCompact.maxFileSize", "big", "size in bytes"),
])
def test_bad_settings_are_refused_at_create(tmp_path: Path, key: str, value: str,
                                            needle: str) -> None:
    uri = str(tmp_path / "t")
    with pytest.raises(dc.InvalidArgumentError, match=needle):
        dc.DeltaTable.create(uri, SCHEMA, configuration={key: value})
    assert not (Path(uri) / "_delta_log").exists()
