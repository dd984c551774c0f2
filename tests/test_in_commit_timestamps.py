"""In-commit timestamps: strictly increasing commit times stamped on every attempt.

The pure rules (next timestamp, commit time of a version, timestamp time travel across the
enablement point) are checked directly and with hypothesis; racing writers with clocks that
disagree prove by counting that every acknowledged commit lands once and the timestamps
increase with the version; a rebased commit takes a timestamp after its winner's even when its
clock is behind; a table Spark wrote with in-commit timestamps takes appends; deltalake 1.6.0
reads every row (it cannot write such tables, as the last test records).
"""

from __future__ import annotations

import itertools
import json
import shutil
import threading
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.engine.commit.commit_info import committed_txn_ids
from deltacommit.errors import InvalidArgumentError
from deltacommit.protocol.actions import CommitInfo, parse_commit
from deltacommit.protocol.features import in_commit_timestamps as ict
from deltacommit.protocol.table_config.properties import (
    ICT_ENABLEMENT_TIMESTAMP,
    ICT_ENABLEMENT_VERSION,
)
from deltacommit.runtime.clock import ManualClock

SCHEMA = pa.schema([("p", pa.string()), ("id", pa.int64())])
ENABLED = {"delta.enableInCommitTimestamps": "true"}
DATA = Path(__file__).parent / "data"


def rows(ids: list[int], part: str = "a") -> pa.Table:
    return pa.table({"p": [part] * len(ids), "id": ids}, schema=SCHEMA)


def commit_infos(uri: str) -> list[tuple[int, dict[str, object], str]]:
    """(version, commitInfo, first line) of every commit file, ascending."""
    out = []
    log = Path(uri) / "_delta_log"
    for f in sorted(log.glob("*.json")):
        data = f.read_bytes()
        info = next(a for a in parse_commit(data, f.name) if isinstance(a, CommitInfo))
        out.append((int(f.stem), info.values, data.decode().split("\n")[0]))
    return out


def assert_strictly_increasing(uri: str, from_version: int = 0) -> list[int]:
    """Every commit from ``from_version`` on has an in-commit timestamp, on its first line,
    each later than the one before; returns them."""
    stamps = []
    for v, info, first in commit_infos(uri):
        if v < from_version:
            assert "inCommitTimestamp" not in info
            continue
        assert first.startswith('{"commitInfo":{"inCommitTimestamp":'), first
        ts = info["inCommitTimestamp"]
        assert isinstance(ts, int)
        stamps.append(ts)
    assert all(a < b for a, b in itertools.pairwise(stamps)), stamps
    return stamps


# --------------------------------------------------------------------------- pure


@given(st.integers(0, 2**40), st.lists(st.integers(-10**6, 10**6), max_size=50))
def test_timestamps_increase_strictly_whatever_the_clock_does(start: int, steps: list[int]
                                                               ) -> None:
    previous: int | None = None
    now = start
    for step in steps:
        now += step  # the clock may stand still or go back
        ts = ict.next_timestamp(now, previous)
        assert ts >= now
        assert previous is None or ts == max(now, previous + 1)
        previous = ts


def test_commit_time_is_the_in_commit_timestamp_from_the_enablement_version_on() -> None:
    info = CommitInfo({"inCommitTimestamp": 500, "timestamp": 400})
    assert ict.commit_timestamp(5, info, 900, ict_from=3) == 500
    assert ict.commit_timestamp(2, info, 900, ict_from=3) == 900
    assert ict.commit_timestamp(5, info, 900, ict_from=None) == 900


@given(st.lists(st.integers(0, 50), min_size=1, max_size=30), st.integers(0, 2000))
def test_version_at_is_the_newest_version_at_or_before_the_time(gaps: list[int], probe: int
                                                                ) -> None:
    times, t = [], 100
    for v, g in enumerate(gaps):
        t += g + 1
        times.append((v, t))
    if probe < times[0][1]:
        with pytest.raises(InvalidArgumentError, match="no version committed"):
            ict.version_at(probe, times, "t")
    else:
        assert ict.version_at(probe, times, "t") == max(v for v, x in times if x <= probe)


def test_version_at_compares_only_times_of_one_kind() -> None:
    # Versions 0-2 have file times, from 3 on in-commit timestamps (enabled at 3, time 1000);
    # a file time of version 2 later than the enablement must not win a time after it.
    times = [(0, 10), (1, 20), (2, 5000), (3, 1000), (4, 1010)]
    assert ict.version_at(1005, times, "t", enabled_at=(3, 1000)) == 3
    assert ict.version_at(999, times, "t", enabled_at=(3, 1000)) == 1
    assert ict.version_at(15, times, "t", enabled_at=(3, 1000)) == 0


def test_file_times_are_made_to_increase_with_the_version() -> None:
    entries = [(0, None, 100), (1, None, 90), (2, CommitInfo({"inCommitTimestamp": 95}), 80)]
    assert ict.commit_times(entries, ict_from=2) == [(0, 100), (1, 101), (2, 95)]


# --------------------------------------------------------------------------- one writer


def test_new_table_stamps_every_commit_first_and_increasing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    # A clock that never moves: each commit still gets a later timestamp than the last.
    clock = ManualClock(start=1_800_000_000.0)
    dc.DeltaTable.create(uri, SCHEMA, configuration=ENABLED, clock=clock)
    t = dc.DeltaTable(uri, clock=clock)
    assert t.protocol.writer_features == ["inCommitTimestamp"]
    for k in range(4):
        dc.append(t, rows([k]))
    stamps = assert_strictly_increasing(uri)
    assert stamps == [1_800_000_000_000 + k for k in range(5)]
    assert "delta.inCommitTimestampEnablementVersion" not in t.configuration
    history = dc.DeltaTable(uri).history()
    assert [h["timestamp"] for h in history] == stamps[::-1]


def test_turning_on_for_an_existing_table_records_where_it_starts(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)
    dc.append(uri, rows([1]))
    deltalake.write_deltalake(uri, rows([2]), mode="append")  # a peer's commit before
    r = dc.DeltaTable(uri).set_properties(ENABLED)
    dc.append(uri, rows([3]))
    t = dc.DeltaTable(uri)
    stamps = assert_strictly_increasing(uri, from_version=r.version)
    assert t.configuration[ICT_ENABLEMENT_VERSION] == str(r.version)
    assert t.configuration[ICT_ENABLEMENT_TIMESTAMP] == str(stamps[0])
    assert "inCommitTimestamp" in (t.protocol.writer_features or [])
    history = {h["version"]: h["timestamp"] for h in t.history()}
    log = Path(uri) / "_delta_log"
    for v in range(r.version):  # before the enablement: the commit files' times
        mtime = (log / f"{v:020d}.json").stat().st_mtime_ns // 1_000_000
        assert history[v] == mtime
    assert [history[v] for v in range(r.version, r.version + 2)] == stamps
    assert t.version_at(stamps[0]) == r.version
    assert t.version_at(stamps[1]) == r.version + 1
    assert t.version_at(stamps[0] - 1) == r.version - 1
    assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table()["id"].to_pylist()) == [1, 2, 3]


def test_version_at_takes_datetimes_and_refuses_naive_ones(tmp_path: Path) -> None:
    import datetime

    uri = str(tmp_path / "t")
    clock = ManualClock(start=1_800_000_000.0)
    t = dc.DeltaTable.create(uri, SCHEMA, configuration=ENABLED, clock=clock)
    clock.advance(10)
    dc.append(t, rows([1]))
    at = datetime.datetime.fromtimestamp(1_800_000_005, tz=datetime.UTC)
    assert t.version_at(at) == 0
    assert t.version_at(at + datetime.timedelta(seconds=5)) == 1
    with pytest.raises(InvalidArgumentError, match="timezone-aware"):
        t.version_at(at.replace(tzinfo=None))


def test_a_rebased_commit_is_stamped_after_its_winner_even_with_a_slow_clock(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, configuration=ENABLED)
    slow = dc.DeltaTable(uri, clock=ManualClock(start=1_000_000_000.0))  # 2001
    winner = dc.DeltaTable(uri)
    txn = slow.transaction()
    from deltacommit.io.datafiles import write_data_files

    txn.add(write_data_files(slow.store, rows([1]), [], clock=slow.clock, random=slow.random))
    won = dc.append(winner, rows([2]))
    r = txn.commit()
    assert r.winners == (won.version,)
    stamps = assert_strictly_increasing(uri)
    assert stamps[-1] == stamps[-2] + 1


# --------------------------------------------------------------------------- racing writers


WRITERS = 6
APPENDS = 5


@pytest.mark.parametrize("group_commit", [False, True], ids=["racing", "group-commit"])
def test_racing_writers_with_disagreeing_clocks_get_increasing_timestamps(
        tmp_path: Path, group_commit: bool) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, configuration=ENABLED)
    shared = dc.DeltaTable(uri, group_commit=True) if group_commit else None
    start = threading.Barrier(WRITERS)
    results: list[dc.WriteResult] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        try:
            # Each writer's clock is off by up to a few seconds either way.
            table = shared or dc.DeltaTable(uri, clock=_SkewedClock((w - WRITERS / 2) * 1.5))
            start.wait()
            for k in range(APPENDS):
                r = dc.append(table, rows([w * 100 + k]))
                with lock:
                    results.append(r)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert len(results) == WRITERS * APPENDS
    seen: dict[str, list[int]] = {}
    for v, info, _ in commit_infos(uri):
        for tid in committed_txn_ids(info):
            seen.setdefault(tid, []).append(v)
    for r in results:
        assert seen.get(r.txn_id) == [r.version]
    assert_strictly_increasing(uri)
    if not group_commit:
        assert any(r.attempts > 1 for r in results), "no commit lost a race"
    ids = sorted(deltalake.DeltaTable(uri).to_pyarrow_table()["id"].to_pylist())
    assert ids == sorted(w * 100 + k for w in range(WRITERS) for k in range(APPENDS))


class _SkewedClock:
    """The system clock, off by ``skew`` seconds (sleeps are real)."""

    def __init__(self, skew: float) -> None:
        import time

        self._time = time
        self.skew = skew

    def time(self) -> float:
        return self._time.time() + self.skew

    def monotonic(self) -> float:
        return self._time.monotonic()

    def sleep(self, seconds: float) -> None:
        self._time.sleep(seconds)


# --------------------------------------------------------------------------- peers


def _published_copy(tmp_path: Path) -> Path:
    """delta-kernel-java/catalog-owned-preview, written by Spark 4.0 with in-commit
    timestamps, as a filesystem table: its staged commits published as ``N.json`` and the
    catalogManaged feature (which deltacommit does not implement) dropped from the protocol."""
    uri = tmp_path / "ict"
    shutil.copytree(DATA / "delta-kernel-java" / "catalog-owned-preview", uri)
    log = uri / "_delta_log"
    for staged in sorted((log / "_staged_commits").glob("*.json")):
        staged.rename(log / f"{staged.name.split('.')[0]}.json")
    (log / "_staged_commits").rmdir()
    zero = log / "00000000000000000000.json"
    lines = []
    for line in zero.read_text().splitlines():
        obj = json.loads(line)
        if "protocol" in obj:
            obj["protocol"] = {"minReaderVersion": 1, "minWriterVersion": 7,
                               "writerFeatures": [f for f in obj["protocol"]["writerFeatures"]
                                                  if f != "catalogManaged"]}
        lines.append(json.dumps(obj, separators=(",", ":")))
    zero.write_text("\n".join(lines) + "\n")
    return uri


def test_appends_to_a_spark_in_commit_timestamp_table(tmp_path: Path) -> None:
    uri = str(_published_copy(tmp_path))
    spark_last = commit_infos(uri)[-1][1]["inCommitTimestamp"]
    assert isinstance(spark_last, int)
    # A writer whose clock is behind Spark's last commit still stamps after it.
    t = dc.DeltaTable(uri, clock=ManualClock(start=spark_last / 1000 - 3600))
    before = t.to_arrow().num_rows
    r = dc.append(t, pa.table({"part1": [5, 5], "col1": [1000, 1001]},
                              schema=pa.schema([("part1", pa.int32()), ("col1", pa.int32())])))
    stamps = assert_strictly_increasing(uri)
    assert stamps[-1] == spark_last + 1
    assert dc.DeltaTable(uri).version_at(spark_last) == r.version - 1
    assert dc.DeltaTable(uri).to_arrow().num_rows == before + 2
    assert deltalake.DeltaTable(uri).to_pyarrow_table().num_rows == before + 2


def test_deltalake_reads_every_row_but_cannot_append(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, configuration=ENABLED)
    dc.append(uri, rows([1, 2]))
    assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table()["id"].to_pylist()) == [1, 2]
    with pytest.raises(Exception, match="InCommitTimestamp"):
        deltalake.write_deltalake(uri, rows([3]), mode="append")


def test_a_writer_opening_the_table_at_a_checkpoint_reads_the_previous_timestamp(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    clock = ManualClock(start=1_800_000_000.0)  # never moves
    t = dc.DeltaTable.create(uri, SCHEMA, configuration=ENABLED, clock=clock)
    dc.append(t, rows([1]))
    t.checkpoint()
    reopened = dc.DeltaTable(uri, clock=clock)  # its state comes from the checkpoint alone
    assert reopened.snapshot.state.in_commit_timestamp is None
    dc.append(reopened, rows([2]))
    assert assert_strictly_increasing(uri) == [1_800_000_000_000 + k for k in range(3)]


def test_the_enabling_commit_is_later_than_the_previous_commit_file(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)
    dc.append(uri, rows([1]))
    mtime = (Path(uri) / "_delta_log" / f"{1:020d}.json").stat().st_mtime_ns // 1_000_000
    slow = dc.DeltaTable(uri, clock=ManualClock(start=1_000_000_000.0))  # 2001
    r = slow.set_properties(ENABLED)
    assert assert_strictly_increasing(uri, from_version=r.version) == [mtime + 1]
