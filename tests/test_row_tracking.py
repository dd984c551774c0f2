"""Row tracking: fresh row ids above the high-water mark, stamped on every commit attempt.

The pure assignment is checked against its definition (hypothesis); racing writers prove by
counting that ids never overlap and the mark ends at total rows - 1, whatever the
interleaving; deltalake 1.6.0 reads every row of such tables (it cannot write them: it refuses
the rowTracking and domainMetadata features, which the last test records); and a table
Databricks created with row tracking takes appends.
"""

from __future__ import annotations

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
from deltacommit.errors import CorruptLogError, InvalidArgumentError
from deltacommit.protocol.actions import Add, CommitInfo, DomainMetadata, Protocol, parse_commit
from deltacommit.protocol.features import row_tracking
from deltacommit.protocol.log.names import commit_path
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.protocol.table_config.properties import (
    ROW_COMMIT_VERSION_COLUMN,
    ROW_ID_COLUMN,
    ROW_TRACKING_SUSPENDED,
)

SCHEMA = pa.schema([("p", pa.string()), ("id", pa.int64())])
ENABLED = {"delta.enableRowTracking": "true"}
DATA = Path(__file__).parent / "data"


def rows(part: str, ids: list[int]) -> pa.Table:
    return pa.table({"p": [part] * len(ids), "id": ids}, schema=SCHEMA)


def add(path: str, n: int | None, base: int | None = None, version: int | None = None) -> Add:
    stats = None if n is None else json.dumps({"numRecords": n})
    return Add(path, {}, 1, 1, stats=stats, base_row_id=base, default_row_commit_version=version)


def id_ranges(table: dc.DeltaTable) -> list[tuple[int, int, int]]:
    """(first id, row count, defaultRowCommitVersion) of every live file, by first id."""
    out = []
    for a in table.files():
        assert a.base_row_id is not None and a.default_row_commit_version is not None, a.path
        n = a.num_records()
        assert n is not None
        out.append((a.base_row_id, n, a.default_row_commit_version))
    return sorted(out)


def assert_ids_dense(table: dc.DeltaTable) -> int:
    """Live files' ids are disjoint and cover 0..total-1 exactly; the mark is total - 1."""
    expected = 0
    for first, n, _ in id_ranges(table):
        assert first == expected, f"ids overlap or leave a gap at {first} (expected {expected})"
        expected += n
    mark = table.snapshot.domain_metadata(row_tracking.DOMAIN)
    assert mark is not None
    assert json.loads(mark) == {"rowIdHighWaterMark": expected - 1}
    return expected


def assert_each_acknowledged_once(uri: str, results: list[dc.WriteResult]) -> None:
    """Every acknowledged transaction is in the log exactly once, at the version it was told."""
    from deltacommit.engine.commit.commit_info import committed_txn_ids

    seen: dict[str, list[int]] = {}
    for v, info in dc.DeltaTable(uri).snapshot.commit_infos():
        for tid in committed_txn_ids(info):
            seen.setdefault(tid, []).append(v)
    for r in results:
        assert seen.get(r.txn_id) == [r.version], (r, seen.get(r.txn_id))


# --------------------------------------------------------------------------- pure


@given(st.integers(-1, 10**12), st.integers(0, 10**9),
       st.lists(st.tuples(st.integers(0, 1000), st.booleans()), max_size=20))
def test_assign_takes_consecutive_ids_above_the_mark_and_keeps_recommitted_files(
        mark: int, version: int, files: list[tuple[int, bool]]) -> None:
    adds = [add(f"f{i}", n, base=7 if kept else None, version=3 if kept else None)
            for i, (n, kept) in enumerate(files)]
    out, new_mark = row_tracking.assign(adds, mark, version, "t")
    nxt = mark + 1
    for a, (n, kept) in zip(out, files, strict=True):
        if kept:
            assert (a.base_row_id, a.default_row_commit_version) == (7, 3)
        else:
            assert (a.base_row_id, a.default_row_commit_version) == (nxt, version)
            nxt += n
    assert new_mark == nxt - 1 == mark + sum(n for n, kept in files if not kept)


def test_a_file_without_a_row_count_cannot_get_ids() -> None:
    with pytest.raises(InvalidArgumentError, match=r"f0.*numRecords"):
        row_tracking.assign([add("f0", None)], -1, 1, "t")


def test_high_water_mark_is_read_from_its_domain_and_a_bad_one_is_named() -> None:
    assert row_tracking.high_water_mark({}, "t") == row_tracking.NO_ROWS
    good = row_tracking.mark_action(41).to_json()
    assert good == {"domain": "delta.rowTracking", "configuration": '{"rowIdHighWaterMark":41}',
                    "removed": False}
    assert row_tracking.high_water_mark({row_tracking.DOMAIN: good}, "t") == 41
    for bad in ('{"x":1}', "nope", '{"rowIdHighWaterMark":"3"}', '{"rowIdHighWaterMark":-2}'):
        with pytest.raises(CorruptLogError, match=r"delta\.rowTracking"):
            row_tracking.high_water_mark({row_tracking.DOMAIN: {"configuration": bad}}, "t")


def test_support_needs_the_feature_and_no_suspension() -> None:
    from deltacommit.protocol.actions import Metadata

    p = Protocol(1, 7, None, ["domainMetadata", "rowTracking"])
    m = TableConfig.of(Metadata("i", "{}", [], {}))
    assert m.row_tracking_supported(p) and not m.row_tracking_enabled(p)
    m_on = TableConfig.of(Metadata("i", "{}", [], ENABLED))
    assert m_on.row_tracking_enabled(p)
    suspended = TableConfig.of(Metadata("i", "{}", [], {ROW_TRACKING_SUSPENDED: "true"}))
    assert not suspended.row_tracking_supported(p)
    assert not m_on.row_tracking_supported(Protocol(1, 7, None, ["domainMetadata"]))


# --------------------------------------------------------------------------- one writer


def test_new_table_with_row_tracking_assigns_ids_to_each_append(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], configuration=ENABLED)
    assert t.protocol.writer_features == ["domainMetadata", "rowTracking"]
    assert t.configuration[ROW_ID_COLUMN].startswith("_row-id-col-")
    assert t.configuration[ROW_COMMIT_VERSION_COLUMN].startswith(
        "_row-commit-version-col-")
    r1 = dc.append(uri, rows("a", [1, 2, 3]))
    r2 = dc.append(uri, pa.concat_tables([rows("a", [4]), rows("b", [5, 6])]))
    t = dc.DeltaTable(uri)
    assert assert_ids_dense(t) == 6
    assert {v for _, _, v in id_ranges(t)} == {r1.version, r2.version}
    # The mark and the ids are in the commit itself, as Spark writes them.
    actions = parse_commit((tmp_path / "t" / commit_path(r2.version)).read_bytes(), "v2")
    assert DomainMetadata("delta.rowTracking", '{"rowIdHighWaterMark":5}') in actions
    info = next(a for a in actions if isinstance(a, CommitInfo))
    assert info.values["tags"] == {"delta.rowTracking.preserved": "true"}


def test_ids_survive_a_checkpoint_and_a_deletion_vector(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, configuration={**ENABLED,
                                                      "delta.enableDeletionVectors": "true"})
    dc.append(uri, rows("a", [1, 2, 3, 4]))
    dc.append(uri, rows("a", [5, 6]))
    before = id_ranges(dc.DeltaTable(uri))
    dc.DeltaTable(uri).delete("id = 2")
    t = dc.DeltaTable(uri)
    assert any(a.deletion_vector for a in t.files())
    assert id_ranges(t) == before  # the file committed again keeps its ids and version
    t.checkpoint()
    assert id_ranges(dc.DeltaTable(uri)) == before
    assert dc.DeltaTable(uri).snapshot.domain_metadata(row_tracking.DOMAIN) == \
        '{"rowIdHighWaterMark":5}'
    dc.append(uri, rows("a", [7]))
    assert id_ranges(dc.DeltaTable(uri))[-1][0] == 6


def test_overwrite_and_empty_appends_never_reuse_ids(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, configuration=ENABLED)
    dc.append(uri, rows("a", [1, 2]))
    dc.write(uri, rows("a", [3]), mode="overwrite")
    t = dc.DeltaTable(uri)
    assert [first for first, _, _ in id_ranges(t)] == [2]
    assert json.loads(t.snapshot.domain_metadata(row_tracking.DOMAIN) or "") == \
        {"rowIdHighWaterMark": 2}


def test_turning_row_tracking_on_backfills_ids_for_existing_files(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)
    dc.append(uri, rows("a", [1, 2]))
    deltalake.write_deltalake(uri, rows("b", [3, 4, 5]), mode="append")  # a peer's file
    r = dc.DeltaTable(uri).set_properties(ENABLED)
    t = dc.DeltaTable(uri)
    assert {"domainMetadata", "rowTracking"} <= set(t.protocol.writer_features or [])
    assert {v for _, _, v in id_ranges(t)} == {r.version}
    assert all(not a.data_change for a in t.files())
    dc.append(uri, rows("c", [6]))
    t = dc.DeltaTable(uri)
    assert assert_ids_dense(t) == 6
    assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table()["id"].to_pylist()) == \
        [1, 2, 3, 4, 5, 6]


def test_compaction_assigns_fresh_ids_when_row_tracking_is_only_supported(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "s")
    dc.DeltaTable.create(uri, SCHEMA, configuration={"delta.feature.rowTracking": "supported"})
    for i in range(3):
        dc.append(uri, rows("a", [i, i + 10]))
    dc.DeltaTable(uri).optimize.compact()
    t = dc.DeltaTable(uri)
    assert len(t.files()) == 1 and id_ranges(t)[0][0] == 6  # above every earlier id
    assert sorted(t.to_arrow()["id"].to_pylist()) == [0, 1, 2, 10, 11, 12]


def stable_ids(uri: str) -> dict[int, tuple[int, int]]:
    """Each live row's ``id`` column -> (stable row id, stable row commit version), as a
    reader reconstructs them: the hidden materialized columns where set, else the defaults.
    Rows a deletion vector deletes are left out (an updated row's old copy among them)."""
    import pyarrow.parquet as pq

    from deltacommit.engine.commit.row_rebase import deleted_positions
    from deltacommit.io.storage.local import LocalStore
    from deltacommit.protocol.partitions import decode_add_path
    from deltacommit.protocol.schema.column_mapping import physical_name

    t = dc.DeltaTable(uri)
    names = (t.configuration[ROW_ID_COLUMN] or "",
             t.configuration[ROW_COMMIT_VERSION_COLUMN] or "")
    id_column = physical_name(t.schema.field("id"),
                              t.configuration.get("delta.columnMapping.mode") or "none")
    out: dict[int, tuple[int, int]] = {}
    for a in t.files():
        data = pq.read_table(Path(uri) / decode_add_path(a.path))
        n = data.num_rows
        hidden = [data.column(c) if c in data.column_names else pa.nulls(n, pa.int64())
                  for c in names]
        ids, versions = row_tracking.stable_ids(a, hidden[0], hidden[1], uri)
        gone = set(deleted_positions(LocalStore(uri), uri, a, n).tolist())
        for p, (key, i, v) in enumerate(zip(data.column(id_column).to_pylist(), ids.to_pylist(),
                                            versions.to_pylist(), strict=True)):
            if p not in gone:
                assert key not in out, f"row {key} is live twice"
                out[key] = (i, v)
    live = set(t.to_arrow()["id"].to_pylist())
    assert set(out) == live
    return out


def test_compaction_keeps_stable_row_ids_in_the_materialized_columns(tmp_path: Path) -> None:
    uri = str(tmp_path / "e")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"],
                         configuration={**ENABLED, "delta.enableDeletionVectors": "true"})
    for i in range(3):
        dc.append(uri, pa.concat_tables([rows("a", [i * 10, i * 10 + 1, i * 10 + 2]),
                                         rows("b", [100 + i])]))
    dc.DeltaTable(uri).delete("id = 11")  # a deletion vector: its row must not come back
    before = stable_ids(uri)
    assert sorted(v[0] for v in before.values()) == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    dc.DeltaTable(uri).optimize.compact()
    t = dc.DeltaTable(uri)
    assert len(t.files()) == 2
    assert stable_ids(uri) == before
    first_mark = assert_ids_dense_above(t, 12)
    # Appended rows get fresh ids; a second compaction reads the materialized ids back.
    dc.append(uri, rows("a", [50, 51]))
    expected = {**before, 50: (first_mark + 1, t.version + 1), 51: (first_mark + 2, t.version + 1)}
    assert stable_ids(uri) == expected
    dc.DeltaTable(uri).optimize.compact()
    assert stable_ids(uri) == expected
    peer = deltalake.DeltaTable(uri)  # its query engine applies deletion vectors
    got = pa.table(deltalake.QueryBuilder().register("t", peer).execute("select id from t")
                   .read_all())
    assert sorted(got["id"].to_pylist()) == sorted(expected)


def assert_ids_dense_above(table: dc.DeltaTable, start: int) -> int:
    """Live files' fresh ids are disjoint and start at ``start``; returns the mark."""
    expected = start
    for first, n, _ in id_ranges(table):
        assert first == expected
        expected += n
    mark = json.loads(table.snapshot.domain_metadata(row_tracking.DOMAIN) or "")
    assert mark == {"rowIdHighWaterMark": expected - 1}
    return expected - 1


# --------------------------------------------------------------------------- racing writers


WRITERS = 6
APPENDS = 5


def _race(uri: str, group_commit: bool) -> list[dc.WriteResult]:
    """WRITERS threads released together, each appending APPENDS times (w + 1 rows each)
    through its own table object (own snapshot cache: they race for versions) or one shared
    group-committing object."""
    shared = dc.DeltaTable(uri, group_commit=True) if group_commit else None
    start = threading.Barrier(WRITERS)
    results: list[dc.WriteResult] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        try:
            table = shared or dc.DeltaTable(uri)
            start.wait()
            for k in range(APPENDS):
                ids = [w * 1000 + k * 10 + j for j in range(w + 1)]
                r = dc.append(table, rows(f"p{w % 2}", ids))
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
    return results


@pytest.mark.parametrize("group_commit", [False, True], ids=["racing", "group-commit"])
def test_racing_appenders_never_share_a_row_id(tmp_path: Path, group_commit: bool) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"], configuration=ENABLED)
    results = _race(uri, group_commit)
    total = sum((w + 1) * APPENDS for w in range(WRITERS))
    assert len(results) == WRITERS * APPENDS
    assert_each_acknowledged_once(uri, results)
    t = dc.DeltaTable(uri)
    ids = t.to_arrow()["id"].to_pylist()
    assert len(ids) == len(set(ids)) == total
    assert assert_ids_dense(t) == total
    # Each file's row commit version is the version its add landed in.
    for a in t.files():
        actions = parse_commit((tmp_path / "t" / commit_path(a.default_row_commit_version or 0)
                                ).read_bytes(), "v")
        assert any(isinstance(x, Add) and x.path == a.path for x in actions)
    if not group_commit:
        assert any(r.attempts > 1 for r in results), "no commit lost a race: nothing was rebased"
    assert sorted(deltalake.DeltaTable(uri).to_pyarrow_table()["id"].to_pylist()) == sorted(ids)


def test_a_rebased_commit_takes_ids_above_the_winners_mark(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, configuration=ENABLED)
    loser, winner = dc.DeltaTable(uri), dc.DeltaTable(uri)
    txn = loser.transaction()
    from deltacommit.io.datafiles import write_data_files

    txn.add(write_data_files(loser.store, rows("a", [1, 2]), [], clock=loser.clock,
                             random=loser.random))
    won = dc.append(winner, rows("a", [3, 4, 5]))
    r = txn.commit()
    assert r.version == won.version + 1 and r.winners == (won.version,)
    t = dc.DeltaTable(uri)
    assert id_ranges(t) == [(0, 3, won.version), (3, 2, r.version)]
    assert assert_ids_dense(t) == 5


# --------------------------------------------------------------------------- peers


def test_deltalake_reads_every_row_but_cannot_append(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, configuration=ENABLED)
    dc.append(uri, rows("a", [1, 2, 3]))
    peer = deltalake.DeltaTable(uri)
    assert set(peer.protocol().writer_features or []) == {"domainMetadata", "rowTracking"}
    assert sorted(peer.to_pyarrow_table()["id"].to_pylist()) == [1, 2, 3]
    # deltalake 1.6.0 does not implement the writer features; it refuses rather than
    # committing files without ids (if a later version accepts, it must assign them).
    with pytest.raises(Exception, match="RowTracking"):
        deltalake.write_deltalake(uri, rows("a", [4]), mode="append")


def test_appends_to_a_databricks_row_tracking_table(tmp_path: Path) -> None:
    """kernel/crc-full was created by Databricks Runtime with row tracking, deletion vectors
    and liquid clustering.  deltacommit does not write clustered tables, so the copy drops the
    clustering feature (and nothing else) from its protocol."""
    uri = tmp_path / "crc-full"
    shutil.copytree(DATA / "kernel" / "crc-full", uri)
    log = uri / "_delta_log" / "00000000000000000000.json"
    lines = log.read_text().splitlines()
    lines = [line.replace('"clustering",', "") if '"protocol"' in line else line
             for line in lines]
    log.write_text("\n".join(lines) + "\n")
    (uri / "_delta_log" / "00000000000000000000.crc").unlink()
    t = dc.DeltaTable(str(uri))
    assert t.table_config.row_tracking_enabled(t.protocol)
    for k in range(3):
        dc.append(str(uri), pa.table({"id": [10 * k + j for j in range(k + 2)]}))
    t = dc.DeltaTable(str(uri))
    assert assert_ids_dense(t) == 2 + 3 + 4
    peer = deltalake.DeltaTable(str(uri))  # its query engine applies deletion vectors
    got = pa.table(deltalake.QueryBuilder().register("t", peer).execute("select id from t")
                   .read_all())
    assert sorted(got["id"].to_pylist()) == sorted(t.to_arrow()["id"].to_pylist()) == \
        [0, 1, 10, 11, 12, 20, 21, 22, 23]


def test_a_rewrite_keeps_ids_only_in_two_named_columns_apart_from_the_schema() -> None:
    """The columns compaction and row-level operations keep row ids in: none without row
    tracking; a clear error naming the rewrite when the table names no column, or names one
    its schema already has."""
    from deltacommit.errors import InvalidArgumentError
    from deltacommit.protocol.actions import Protocol
    from deltacommit.protocol.features.row_tracking import rewrite_columns
    from deltacommit.protocol.table_config.config import TableConfig
    from deltacommit.protocol.table_config.properties import (
        ENABLE_ROW_TRACKING,
        ROW_COMMIT_VERSION_COLUMN,
        ROW_ID_COLUMN,
    )

    protocol = Protocol(3, 7, [], ["rowTracking", "domainMetadata"])
    schema = pa.schema([("id", pa.int64()), ("v", pa.float64())])
    named = {ENABLE_ROW_TRACKING: "true", ROW_ID_COLUMN: "_rid", ROW_COMMIT_VERSION_COLUMN: "_ver"}
    assert rewrite_columns(TableConfig({}), protocol, schema, "x") is None
    assert rewrite_columns(TableConfig(named), protocol, schema, "x") == ("_rid", "_ver")
    with pytest.raises(InvalidArgumentError, match=f"UPDATE of t: .*no {ROW_ID_COLUMN}"):
        rewrite_columns(TableConfig({ENABLE_ROW_TRACKING: "true"}), protocol, schema,
                        "UPDATE of t")
    with pytest.raises(InvalidArgumentError, match=r"compaction of t: .*\['v'\] collide"):
        rewrite_columns(TableConfig({**named, ROW_ID_COLUMN: "v"}), protocol, schema,
                        "compaction of t")


@pytest.mark.parametrize("mode", ["name", "id"])
def test_row_level_operations_and_compaction_keep_ids_on_a_column_mapping_table(
        tmp_path: Path, mode: str) -> None:
    """The hidden id columns are named as they are stored: a table with column mapping reads
    and writes them by that name, not by a physical name the schema does not give them."""
    uri = str(tmp_path / "cm")
    dc.DeltaTable.create(uri, SCHEMA, configuration={
        **ENABLED, "delta.enableDeletionVectors": "true", "delta.columnMapping.mode": mode})
    for i in range(2):
        dc.append(uri, rows("a", [i * 10, i * 10 + 1, i * 10 + 2]))
    before = stable_ids(uri)
    updated = dc.DeltaTable(uri).update({"p": "'u'"}, "id = 1")["version"]
    merged = (dc.DeltaTable(uri).merge(rows("m", [2, 99]), "t.id = s.id", "s", "t")
              .when_matched_update({"p": "s.p"}).when_not_matched_insert_all().execute())
    dc.DeltaTable(uri).delete("id = 10")
    after = stable_ids(uri)
    assert after[1] == (before[1][0], updated)
    assert after[2] == (before[2][0], merged["version"])
    assert {k: after[k] for k in (0, 11, 12)} == {k: before[k] for k in (0, 11, 12)}
    dc.DeltaTable(uri).optimize.compact()
    assert len(dc.DeltaTable(uri).files()) == 1
    assert stable_ids(uri) == after
    got = sorted((r["p"], r["id"]) for r in dc.DeltaTable(uri).to_arrow().to_pylist())
    assert got == [("a", 0), ("a", 11), ("a", 12), ("m", 2), ("m", 99), ("u", 1)]
    peer = pa.table(deltalake.QueryBuilder().register("t", deltalake.DeltaTable(uri))
                    .execute("select p, id from t").read_all())
    assert sorted((r["p"], r["id"]) for r in peer.to_pylist()) == got
