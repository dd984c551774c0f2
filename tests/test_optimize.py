"""Compaction: small files of each partition rewritten with dataChange=false, concurrent
appends never in conflict with it, a concurrent delete costing only the bins it touched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pytest

import deltacommit as dc
from deltacommit.errors import InvalidArgumentError
from deltacommit.ops.optimize import plan_bins
from deltacommit.protocol.actions import Add
from deltacommit.protocol.table_config.properties import parse_size


def _small_files(uri: str, per_partition: int = 5) -> None:
    for i in range(per_partition):
        for p in ("a", "b"):
            dc.write(uri, pa.table({"id": [i * 10 + (p == "b")], "p": [p]}), partition_by=["p"])


def _rows(uri: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in dc.DeltaTable(uri).to_arrow().to_pylist())


def _log(uri: str, version: int) -> list[dict[str, Any]]:
    text = (Path(uri) / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_small_files_become_one_file_per_partition(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _small_files(uri)
    before = _rows(uri)
    t = dc.DeltaTable(uri)
    metrics = t.optimize.compact()
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (10, 2)
    assert metrics["partitionsOptimized"] == 2 and metrics["totalConsideredFiles"] == 10
    assert json.loads(metrics["filesAdded"])["totalFiles"] == 2
    assert metrics["versions"] == [11] and metrics["version"] == 11
    assert _rows(uri) == before
    actions = _log(uri, 11)
    info = actions[0]["commitInfo"]
    assert info["operation"] == "OPTIMIZE" and info["isBlindAppend"] is False
    assert info["isolationLevel"] == "SnapshotIsolation"
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    assert len(adds) == 2 and len(removes) == 10
    assert not any(a["dataChange"] for a in adds) and not any(r["dataChange"] for r in removes)
    assert all(json.loads(a["stats"])["numRecords"] == 5 for a in adds)
    peer = deltalake.DeltaTable(uri).to_pyarrow_table()
    assert sorted(tuple(r.values()) for r in peer.select(["id", "p"]).to_pylist()) == before
    # Nothing left to do: a second run commits nothing.
    again = dc.DeltaTable(uri).optimize.compact()
    assert again["versions"] == [] and again["numFilesRemoved"] == 0


def test_partition_filters_and_target_size_choose_the_bins(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _small_files(uri)
    t = dc.DeltaTable(uri)
    one = t.optimize.compact(partition_filters=[("p", "=", "a")])
    assert one["numFilesRemoved"] == 5 and one["partitionsOptimized"] == 1
    sizes = [a.size for a in dc.DeltaTable(uri).files() if a.partition_values["p"] == "b"]
    # A target of two files' size: bins of two, the fifth file alone and left as it is.
    two = dc.DeltaTable(uri).optimize.compact(target_size=2 * max(sizes))
    assert two["numFilesRemoved"] == 4 and two["numFilesAdded"] == 2
    assert len(dc.DeltaTable(uri).files()) == 1 + 2 + 1


def test_an_append_between_rewrite_and_commit_conflicts_with_neither(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _small_files(uri)
    t = dc.DeltaTable(uri)
    appended: list[int] = []

    def append_meanwhile(done: int, total: int) -> None:
        # The rewritten files exist, the compaction has not committed: another writer
        # appends into the same partitions.
        if done == total:
            appended.append(dc.write(uri, pa.table({"id": [99, 98], "p": ["a", "b"]})).version)

    metrics = t.optimize.compact(progress=append_meanwhile)
    assert appended == [11] and metrics["versions"] == [12]
    assert metrics["numFilesRemoved"] == 10
    ids = [r[0] for r in _rows(uri)]
    assert sorted(ids) == sorted([i * 10 + k for i in range(5) for k in (0, 1)] + [98, 99])


def test_a_concurrent_delete_costs_only_the_bins_it_touched(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _small_files(uri)
    t = dc.DeltaTable(uri)

    def delete_meanwhile(done: int, total: int) -> None:
        if done == total:
            dc.DeltaTable(uri).delete("p = 'a'")

    metrics = t.optimize.compact(progress=delete_meanwhile)
    assert metrics["binsLostToConcurrentRemoves"] == 1
    assert metrics["numFilesRemoved"] == 5 and metrics["partitionsOptimized"] == 1
    assert [r[1] for r in _rows(uri)] == ["b"] * 5
    assert len(dc.DeltaTable(uri).files()) == 1
    # The lost bin's rewritten file was deleted; the five files the delete removed stay until
    # vacuum, as in every Delta table.
    assert len(list((Path(uri) / "p=a").iterdir())) == 5


def test_deletion_vectors_are_applied_by_the_rewrite(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, pa.schema([("id", pa.int64()), ("p", pa.string())]),
                         partition_by=["p"],
                         configuration={"delta.enableDeletionVectors": "true",
                                        "delta.minReaderVersion": "3",
                                        "delta.minWriterVersion": "7"})
    for i in range(3):
        dc.write(uri, pa.table({"id": [i, i + 100], "p": ["a", "a"]}))
    dc.DeltaTable(uri).delete("id >= 100")
    assert any(a.deletion_vector for a in dc.DeltaTable(uri).files())
    metrics = dc.DeltaTable(uri).optimize.compact()
    assert metrics["numFilesAdded"] == 1
    t = dc.DeltaTable(uri)
    assert not any(a.deletion_vector for a in t.files())
    assert sorted(t.to_arrow().column("id").to_pylist()) == [0, 1, 2]


def test_bad_arguments_are_refused_before_any_work(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    _small_files(uri, 1)
    t = dc.DeltaTable(uri)
    with pytest.raises(InvalidArgumentError, match="target_size"):
        t.optimize.compact(target_size=0)
    with pytest.raises(InvalidArgumentError, match="max_concurrent_tasks"):
        t.optimize.compact(max_concurrent_tasks=0)
    with pytest.raises(InvalidArgumentError, match="which is not a partition column"):
        t.optimize.compact(partition_filters=[("id", "=", "1")])
    with pytest.raises(InvalidArgumentError, match="compaction works on the latest version"):
        dc.DeltaTable(uri, version=0).optimize.compact()
    assert parse_size("128mb", "x") == 128 << 20 and parse_size("1024", "x") == 1024
    with pytest.raises(InvalidArgumentError, match=r"delta\.targetFileSize must be a positive size"):
        parse_size("lots", "delta.targetFileSize")


def test_plan_bins_packs_each_partition_greedily() -> None:
    files = [Add(f"p=a/{i}", {"p": "a"}, size, 0) for i, size in enumerate([4, 4, 4, 9, 1])]
    bins, considered, skipped = plan_bins(files, 8)
    # 9 is already as big as the target; the rest fill bins of at most 8 in their order.
    assert [[a.path for a in b.files] for b in bins] == [["p=a/0", "p=a/1"], ["p=a/2", "p=a/4"]]
    assert considered == 5 and skipped == 1
    lone, _, skipped = plan_bins([Add("p=b/0", {"p": "b"}, 1, 0)], 8)
    assert lone == [] and skipped == 1  # one small file alone: nothing to compact


def test_the_cli_compacts_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from deltacommit.cli import main

    uri = str(tmp_path / "t")
    _small_files(uri)
    assert main(["optimize", uri, "--where", "p = 'a'", "--target-size", "1mb"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"compacted 5 files into 1 in 1 partition(s) of file://{uri}: version(s) 11")
    assert main(["optimize", uri, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["numFilesRemoved"], report["versions"]) == (5, [12])
    assert main(["optimize", uri]) == 0
    assert capsys.readouterr().out.startswith("nothing to compact")
    assert main(["optimize", uri, "--target-size", "huge"]) != 0
    assert "--target-size must be a positive size" in capsys.readouterr().err


#: deltalake 1.6.0's keys of ``optimize.compact`` and ``optimize.z_order``, all of which
#: deltacommit answers too (then its own).
PEER_OPTIMIZE_KEYS = ["numFilesAdded", "numFilesRemoved", "filesAdded", "filesRemoved",
                      "partitionsOptimized", "numBatches", "totalConsideredFiles",
                      "totalFilesSkipped", "preserveInsertionOrder", "plannerStrategy",
                      "preservedStableOrder", "maxBinSpanFiles"]


@pytest.mark.parametrize("verb", ["compact", "z_order", "nothing"])
def test_optimize_answers_deltalakes_metrics_with_the_same_plan(tmp_path: Path, verb: str) -> None:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    _small_files(ours, per_partition=1 if verb == "nothing" else 4)
    if verb != "nothing":  # one file per partition leaves compaction nothing to do
        dc.write(ours, pa.table({"id": [99], "p": ["a"]}))  # partition a: 5 files
    shutil.copytree(ours, theirs)

    def run(t: Any) -> dict[str, Any]:
        m: dict[str, Any] = t.optimize.z_order(["id"]) if verb == "z_order" \
            else t.optimize.compact()
        return m

    mine, peer = run(dc.DeltaTable(ours)), run(deltalake.DeltaTable(theirs))
    assert list(peer) == PEER_OPTIMIZE_KEYS
    assert list(mine)[:len(PEER_OPTIMIZE_KEYS)] == PEER_OPTIMIZE_KEYS
    same = ["numFilesRemoved", "totalConsideredFiles", "totalFilesSkipped",
            "preserveInsertionOrder", "plannerStrategy", "preservedStableOrder",
            "maxBinSpanFiles"]
    assert {k: mine[k] for k in same} == {k: peer[k] for k in same}, (mine, peer)
    assert mine["maxBinSpanFiles"] == {"compact": 5, "z_order": 5, "nothing": 0}[verb], mine


def test_a_bin_spans_the_large_files_it_passes_over() -> None:
    """``maxBinSpanFiles`` counts a partition's files from a bin's first to its last in the
    log's order, so a bin that passes over a file too large to rewrite spans it too."""
    from deltacommit.ops.optimize import bin_span, partition_ordinals

    files = [Add(path=f"f{i}", partition_values={}, size=size, modification_time=0,
                 data_change=True) for i, size in enumerate([10, 1000, 10, 10])]
    bins, considered, skipped = plan_bins(files, 100)
    assert considered == 4 and skipped == 1 and [len(b.files) for b in bins] == [3]
    assert bin_span(bins[0], partition_ordinals(files)) == 4
    assert bin_span(bins[0], None) == 3
