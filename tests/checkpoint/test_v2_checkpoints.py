"""V2 checkpoints (UUID-named, checkpointMetadata, sidecars) and statistics held as structs in
checkpoints (``stats_parsed``), read from the tables Spark and the kernels wrote and written by
deltacommit.

Oracles: Spark's expected rows where the golden tables ship them; else deltalake 1.6.0, which
reads struct statistics but refuses every table with the ``v2Checkpoint`` feature; for those, the
table's JSON commits alone (a copy without checkpoints), which every such table keeps from
version 0.  A checkpoint is shown to suffice by deleting the commits it covers in a copy.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import shutil
import uuid
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.engine.hooks.checkpoint import write_checkpoint
from deltacommit.engine.hooks.log_cleanup import cleanup_expired_log
from deltacommit.errors import CorruptLogError
from deltacommit.protocol.actions import Add, Metadata, Protocol, Remove, Txn
from deltacommit.protocol.checkpoint.decode import decode_checkpoint
from deltacommit.protocol.checkpoint.encode import CheckpointOptions, encode_checkpoint
from deltacommit.protocol.checkpoint.v2 import json_checkpoint_table, v2_sidecars
from deltacommit.protocol.log.last_checkpoint import LastCheckpoint, SidecarRef, V2CheckpointInfo
from deltacommit.protocol.log.names import (
    LOG_DIR,
    SIDECAR_DIR,
    LogFile,
    checkpoint_path,
    parse_log_name,
    sidecar_path,
    v2_checkpoint_name,
)
from deltacommit.protocol.log.segment import LogListing, checkpoint_candidates
from deltacommit.protocol.replay import TableState
from deltacommit.protocol.stats.parsed import (
    stats_json_from_struct,
    stats_struct_array,
    stats_struct_type,
)
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.runtime.clock import ManualClock

from ..compat.corpus import log_only_read, rows
from .helpers import SCHEMA, memory_table
from .helpers import rows as id_rows

DATA = Path(__file__).resolve().parent.parent / "data"
EXPECTED = DATA / "delta-golden-expected"

V2_TABLES = [
    "delta-golden/v2-checkpoint-json",
    "delta-golden/v2-checkpoint-parquet",
    "delta-kernel-java/kernel-pagination-v2-checkpoint-json",
    "delta-kernel-java/kernel-pagination-v2-checkpoint-parquet",
    "kernel/v2-checkpoints-json-with-last-checkpoint",
    "kernel/v2-checkpoints-json-with-sidecars",
    "kernel/v2-checkpoints-json-without-sidecars",
    "kernel/v2-checkpoints-parquet-with-last-checkpoint",
    "kernel/v2-checkpoints-parquet-with-sidecars",
    "kernel/v2-checkpoints-parquet-without-sidecars",
    "kernel/v2-classic-checkpoint-json",
    "kernel/v2-classic-checkpoint-parquet",
    "kernel/v2-classic-parquet-struct-stats-only",
    "kernel/v2-json-sidecars-struct-stats-only",
    "kernel/v2-parquet-sidecars-struct-stats-only",
]
STRUCT_STATS_TABLES = [
    "kernel/v1-multi-part-partitioned-struct-stats-only",
    "kernel/v1-multi-part-struct-stats-only",
    "kernel/v1-single-part-struct-stats-only",
    "kernel/parsed-stats",
]


def peer_read(path: Path | str) -> pa.Table:
    """deltalake's rows, through its query engine (which applies deletion vectors)."""
    table = deltalake.DeltaTable(str(path))
    return pa.table(deltalake.QueryBuilder().register("t", table).execute("select * from t")
                    .read_all())


def oracle(name: str) -> pa.Table:
    path = DATA / name
    expected = EXPECTED / f"{path.name}.parquet"
    if name.startswith("delta-golden/") and expected.exists():
        return pq.read_table(expected)
    if name in V2_TABLES:
        return log_only_read(path)
    return peer_read(path)


def same_rows(a: pa.Table, b: pa.Table) -> bool:
    cols = [c for c in b.column_names if c in a.column_names]
    return len(cols) == len(b.column_names) and rows(a, cols) == rows(b, cols)


def checkpoint_versions(log: Path) -> list[int]:
    return sorted({f.version for p in log.iterdir()
                   if (f := parse_log_name(p.name)) and f.kind.startswith("checkpoint")})


def copy_table(name: str, tmp_path: Path) -> Path:
    root = tmp_path / Path(name).name
    shutil.copytree(DATA / name, root)
    return root


def drop_commits_through(root: Path, version: int) -> None:
    for v in range(version + 1):
        (root / LOG_DIR / f"{v:020d}.json").unlink(missing_ok=True)


# --------------------------------------------------------------------------- reading the corpus


@pytest.mark.parametrize("name", V2_TABLES + STRUCT_STATS_TABLES)
def test_reads_the_rows_engines_wrote(name: str, tmp_path: Path,
                                      caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="deltacommit"):
        table = dc.DeltaTable(str(DATA / name))
        got = table.to_arrow()
    assert same_rows(got, oracle(name))
    assert not [r for r in caplog.records if "skipping checkpoint" in r.getMessage()]
    # Row counts survive checkpoints that hold statistics only as stats_parsed.
    assert all(a.num_records() is not None for a in table.files())
    # The newest checkpoint (with its sidecars) alone gives the same rows.
    root = copy_table(name, tmp_path)
    newest = checkpoint_versions(root / LOG_DIR)[-1]
    drop_commits_through(root, newest)
    assert same_rows(dc.DeltaTable(str(root)).to_arrow(), got)


@pytest.mark.parametrize("name", ["kernel/v2-checkpoints-json-with-sidecars",
                                  "kernel/v2-checkpoints-parquet-with-last-checkpoint",
                                  "kernel/v2-classic-checkpoint-json"])
def test_reads_without_last_checkpoint(name: str, tmp_path: Path) -> None:
    root = copy_table(name, tmp_path)
    (root / LOG_DIR / "_last_checkpoint").unlink(missing_ok=True)
    newest = checkpoint_versions(root / LOG_DIR)[-1]
    drop_commits_through(root, newest)
    assert same_rows(dc.DeltaTable(str(root)).to_arrow(), oracle(name))


def test_a_uuid_checkpoint_with_a_missing_sidecar_falls_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    name = "kernel/v2-checkpoints-json-with-sidecars"
    root = copy_table(name, tmp_path)
    log = root / LOG_DIR
    newest = checkpoint_versions(log)[-1]
    [cp] = [p for p in log.iterdir() if p.name.startswith(f"{newest:020d}.checkpoint.")]
    first = json.loads(next(line for line in cp.read_text().splitlines() if "sidecar" in line))
    (log / "_sidecars" / first["sidecar"]["path"]).unlink()
    with caplog.at_level(logging.WARNING, logger="deltacommit.checkpoint"):
        got = dc.DeltaTable(str(root)).to_arrow()
    assert same_rows(got, oracle(name))
    assert any(cp.name in r.getMessage() for r in caplog.records)


def test_several_checkpoints_of_one_version_and_a_torn_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Version 6 gets a second, torn UUID-named checkpoint that _last_checkpoint prefers, and a
    # classic checkpoint holding the same state as the UUID-named one: the torn one is skipped
    # and the classic one (same version) is used, not an older one.
    name = "kernel/v2-checkpoints-parquet-with-sidecars"
    root = copy_table(name, tmp_path)
    log = root / LOG_DIR
    newest = checkpoint_versions(log)[-1]
    [good] = [p for p in log.iterdir() if p.name.startswith(f"{newest:020d}.checkpoint.")]
    torn = log / v2_checkpoint_name(newest, str(uuid.uuid4()))
    torn.write_bytes(good.read_bytes()[:100])
    shutil.copy(good, log / checkpoint_path(newest).split("/")[1])
    hint = LastCheckpoint(newest, 0, v2=V2CheckpointInfo(torn.name))
    (log / "_last_checkpoint").write_bytes(hint.to_bytes())
    drop_commits_through(root, newest)
    with caplog.at_level(logging.WARNING, logger="deltacommit.checkpoint"):
        got = dc.DeltaTable(str(root)).to_arrow()
    assert same_rows(got, oracle(name))
    assert [r.getMessage().split(" of ")[0] for r in caplog.records] == [
        f"skipping checkpoint {torn.name}"]


# --------------------------------------------------------------------------- writing


def append_until_checkpoint(root: Path) -> tuple[dc.DeltaTable, pa.Table]:
    """Appends with deltacommit until it writes a checkpoint (interval 10 in these tables);
    the table and every row it should hold."""
    table = dc.DeltaTable(str(root))
    want = [table.to_arrow()]
    schema = table.schema
    before = set(checkpoint_versions(root / LOG_DIR))
    n = 0
    while set(checkpoint_versions(root / LOG_DIR)) == before:
        batch = pa.table({f.name: pa.array(
            [1000 + n] if pa.types.is_integer(f.type) else [f"x{n}"], f.type) for f in schema},
            schema=schema)
        dc.write(table, batch)
        want.append(batch)
        n += 1
        assert n <= 10
    return table, pa.concat_tables(want)


@pytest.mark.parametrize("name", ["kernel/v2-checkpoints-parquet-with-sidecars",
                                  "kernel/v2-json-sidecars-struct-stats-only"])
def test_appends_to_a_v2_table_write_v2_checkpoints(name: str, tmp_path: Path) -> None:
    root = copy_table(name, tmp_path)
    table, want = append_until_checkpoint(root)
    log = root / LOG_DIR
    version = table.version
    [cp] = [p for p in log.iterdir() if p.name.startswith(f"{version:020d}.checkpoint.")]
    f = parse_log_name(cp.name)
    assert f is not None and f.kind == "checkpoint_v2" and cp.suffix == ".parquet"
    body = pq.read_table(cp)
    metas = [r for r in body.column("checkpointMetadata").to_pylist() if r is not None]
    assert metas == [{"version": version, "tags": None}]
    hint = json.loads((log / "_last_checkpoint").read_text())
    assert hint["version"] == version and hint["v2Checkpoint"]["path"] == cp.name
    assert LastCheckpoint.from_bytes((log / "_last_checkpoint").read_bytes()).v2 is not None
    config = table.snapshot.configuration
    add_fields = {f.name for f in body.schema.field("add").type}
    struct = (config.get("delta.checkpoint.writeStatsAsStruct") or "true").lower() == "true"
    assert ("stats_parsed" in add_fields) == struct
    assert ("stats" in add_fields) == ((config.get("delta.checkpoint.writeStatsAsJson")
                                        or "true").lower() == "true")
    assert same_rows(dc.DeltaTable(str(root)).to_arrow(), want)
    drop_commits_through(root, version)
    again = dc.DeltaTable(str(root))
    assert same_rows(again.to_arrow(), want)
    assert all(a.num_records() is not None for a in again.files())


def test_v2_checkpoint_with_a_sidecar(tmp_path: Path) -> None:
    root = copy_table("kernel/v2-checkpoints-json-without-sidecars", tmp_path)
    table = dc.DeltaTable(str(root))
    want = table.to_arrow()
    info = write_checkpoint(table.log_store, table.snapshot.state, table.clock,
                            sidecar_min_file_actions=1)
    log = root / LOG_DIR
    hint = LastCheckpoint.from_bytes((log / "_last_checkpoint").read_bytes())
    assert hint.v2 is not None and hint.v2.sidecar_files and len(hint.v2.sidecar_files) == 1
    sidecar = log / "_sidecars" / hint.v2.sidecar_files[0].path
    assert sidecar.stat().st_size == hint.v2.sidecar_files[0].size_in_bytes
    assert info.created and info.path.endswith(hint.v2.path)
    main = pq.read_table(log / hint.v2.path)
    assert main.column("add").null_count == main.num_rows
    assert pq.read_table(sidecar).column_names == ["add", "remove"]
    assert hint.size == main.num_rows + pq.read_metadata(sidecar).num_rows
    for older in checkpoint_versions(log)[:-1]:
        for p in log.iterdir():
            if p.name.startswith(f"{older:020d}.checkpoint."):
                p.unlink()
    drop_commits_through(root, table.version)
    assert same_rows(dc.DeltaTable(str(root)).to_arrow(), want)


def test_new_table_with_v2_policy_gets_the_feature_and_v2_checkpoints(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = dc.DeltaTable.create(str(root), SCHEMA, configuration={
        "delta.checkpointPolicy": "v2", "delta.checkpointInterval": "2"})
    p = t.snapshot.protocol
    assert "v2Checkpoint" in (p.reader_features or []) and "v2Checkpoint" in (p.writer_features or [])
    for i in range(4):
        dc.write(t, id_rows([i]))
    names = sorted(x.name for x in (root / LOG_DIR).iterdir())
    assert not any(n.endswith(".checkpoint.parquet") for n in names)
    assert sum(1 for n in names if (f := parse_log_name(n)) and f.kind == "checkpoint_v2") == 2
    drop_commits_through(root, 4)
    assert sorted(dc.DeltaTable(str(root)).to_arrow().column("id").to_pylist()) == [0, 1, 2, 3]
    with pytest.raises(dc.errors.InvalidArgumentError, match="checkpointPolicy"):
        dc.DeltaTable.create(str(tmp_path / "u"), SCHEMA,
                             configuration={"delta.checkpointPolicy": "v3"})


@pytest.mark.parametrize("as_json", ["true", "false"])
def test_struct_stats_checkpoints_read_by_deltalake(as_json: str, tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = dc.DeltaTable.create(str(root), SCHEMA, partition_by=["day"], configuration={
        "delta.checkpointInterval": "3", "delta.checkpoint.writeStatsAsStruct": "true",
        "delta.checkpoint.writeStatsAsJson": as_json})
    for i in range(3):
        dc.write(t, id_rows([i, i + 10], day=f"2026-11-2{i}"))
    cp = root / checkpoint_path(3)
    add = pq.read_schema(cp).field("add").type
    assert add.field("partitionValues_parsed").type == pa.struct([("day", pa.string())])
    assert add.field("stats_parsed").type.field("minValues").type == pa.struct(
        [("id", pa.int64()), ("v", pa.string())])
    assert (add.get_field_index("stats") >= 0) == (as_json == "true")
    parsed = [r["stats_parsed"] for r in pq.read_table(cp).column("add").to_pylist() if r]
    assert sorted(p["minValues"]["id"] for p in parsed) == [0, 1, 2]
    want = t.to_arrow()
    drop_commits_through(root, 3)
    assert same_rows(peer_read(root), want)
    assert same_rows(dc.DeltaTable(str(root)).to_arrow(), want)
    actions = deltalake.DeltaTable(str(root)).get_add_actions(flatten=True)
    assert actions.column("num_records").to_pylist() == [2, 2, 2]
    assert all(a.num_records() == 2 for a in dc.DeltaTable(str(root)).files())


# --------------------------------------------------------------------------- log cleanup


def test_cleanup_keeps_referenced_sidecars_and_deletes_old_orphans() -> None:
    day = 86_400.0
    clock = ManualClock(1_800_000_000.0)
    t = memory_table(f"v2-{uuid.uuid4().hex[:10]}", clock, {
        "delta.checkpointPolicy": "v2", "delta.checkpointInterval": "1000",
        "delta.enableExpiredLogCleanup": "false"})
    store = t.log_store.store
    store.put(f"{SIDECAR_DIR}/orphan-old.parquet", b"x")
    infos = []
    for i in range(6):
        dc.write(t, id_rows([i]))
        if i in (1, 3):
            infos.append(write_checkpoint(t.log_store, t.snapshot.state, clock,
                                          sidecar_min_file_actions=1))
    clock.advance(40 * day)
    store.put(f"{SIDECAR_DIR}/orphan-young.parquet", b"x")

    def sidecars() -> set[str]:
        return {m.path.rsplit("/", 1)[1] for m in store.list(f"{SIDECAR_DIR}/")}

    hint = LastCheckpoint.from_bytes(store.get(f"{LOG_DIR}/_last_checkpoint"))
    assert hint.v2 is not None and hint.v2.sidecar_files
    kept = hint.v2.sidecar_files[0].path
    assert len(sidecars()) == 4
    # A retained checkpoint that cannot be read leaves every sidecar in place.
    newest = f"{LOG_DIR}/{hint.v2.path}"
    good = store.get(newest)
    store.put(newest, good[:50])
    cleanup_expired_log(t.log_store, t.snapshot.table_config, clock)
    assert len(sidecars()) == 4
    store.put(newest, good)
    deleted = cleanup_expired_log(t.log_store, t.snapshot.table_config, clock)
    assert sidecars() == {kept, "orphan-young.parquet"}
    assert f"{SIDECAR_DIR}/orphan-old.parquet" in deleted
    again = dc.DeltaTable(t.uri, log_store=t.log_store)
    assert sorted(again.to_arrow().column("id").to_pylist()) == list(range(6))


# --------------------------------------------------------------------------- pure parts

uuids = st.uuids().map(str)
versions = st.integers(min_value=0, max_value=2**63 - 1)


@given(versions, uuids, st.sampled_from(["json", "parquet"]))
def test_v2_names_round_trip(version: int, u: str, fmt: str) -> None:
    name = v2_checkpoint_name(version, u, fmt)  # type: ignore[arg-type]
    f = parse_log_name(name)
    assert f is not None and f.kind == "checkpoint_v2" and f.version == version
    assert f.is_json == (fmt == "json")
    assert parse_log_name(name.replace(u, u[:-1])) is None


@given(st.text(st.characters(blacklist_characters="/%"), min_size=1, max_size=30))
def test_sidecar_paths_stay_in_the_sidecar_directory(name: str) -> None:
    if name in (".", ".."):
        with pytest.raises(CorruptLogError):
            sidecar_path(name, "cp")
        return
    assert sidecar_path(name, "cp") == f"{SIDECAR_DIR}/{name}"
    assert sidecar_path(f"s3://b/t/{SIDECAR_DIR}/{name}", "cp") == f"{SIDECAR_DIR}/{name}"
    for bad in (f"../{name}", f"/etc/{name}", f"{LOG_DIR}/{name}", "a%2Fb"):
        with pytest.raises(CorruptLogError):
            sidecar_path(bad, "cp")


def _files(version: int, kinds: list[str], u: list[str]) -> list[LogFile]:
    out: list[LogFile] = []
    for i, k in enumerate(kinds):
        if k == "classic":
            name = f"{version:020d}.checkpoint.parquet"
        elif k == "multi":
            out += [LogFile(f"{version:020d}.checkpoint.{p:010d}.0000000002.parquet",
                            "checkpoint_part", version, p, 2) for p in (1, 2)]
            continue
        else:
            name = v2_checkpoint_name(version, u[i], "json" if k == "json" else "parquet")
        f = parse_log_name(name)
        assert f is not None
        out.append(f)
    return out


@given(st.lists(st.tuples(st.integers(0, 30),
                          st.lists(st.sampled_from(["classic", "parquet", "json", "multi"]),
                                   min_size=1, max_size=4, unique=True)),
                min_size=1, max_size=5),
       st.lists(uuids, min_size=4, max_size=4, unique=True), st.data())
def test_checkpoint_choice(spec: list[tuple[int, list[str]]], u: list[str], data: st.DataObject
                           ) -> None:
    files = list({f.name: f for v, kinds in spec for f in _files(v, kinds, u)}.values())
    cands = checkpoint_candidates(files)
    assert [c.version for c in cands] == sorted((c.version for c in cands), reverse=True)
    rank = {"checkpoint": 0, "checkpoint_part": 3}
    for a, b in itertools.pairwise(cands):
        if a.version == b.version:
            ra = rank.get(a.kind, 2 if a.files[0].is_json else 1)
            rb = rank.get(b.kind, 2 if b.files[0].is_json else 1)
            assert ra <= rb
    preferred = data.draw(st.sampled_from(cands))
    top = [c for c in checkpoint_candidates(files, prefer=preferred.name)
           if c.version == preferred.version]
    assert top[0].name == preferred.name
    # The next choice after an unusable one is the next candidate, at the same version first.
    listing = LogListing.of(files + [LogFile(f"{v:020d}.json", "commit", v) for v in range(31)])
    seg = listing.segment(30, {cands[0].name})
    assert seg.checkpoint == (cands[1] if len(cands) > 1 else None)


@given(versions, st.integers(0, 10**9), uuids,
       st.lists(st.tuples(st.text(min_size=1, max_size=10), st.integers(0, 10**9),
                          st.integers(0, 10**13)), max_size=3))
def test_last_checkpoint_v2_round_trip(version: int, size: int, u: str,
                                       sidecars: list[tuple[str, int, int]]) -> None:
    info = V2CheckpointInfo(v2_checkpoint_name(version, u), 123, 456,
                            tuple(SidecarRef(*s) for s in sidecars))
    hint = LastCheckpoint(version, size, None, 789, 3, info)
    back = LastCheckpoint.from_bytes(hint.to_bytes())
    assert back == hint
    assert back.describes(version, info.path)
    assert not back.describes(version, f"{version:020d}.checkpoint.parquet")


STATS_SCHEMA = pa.schema([("i", pa.int32()), ("s", pa.string()), ("d", pa.date32()),
                          ("t", pa.timestamp("us", tz="UTC")), ("n", pa.timestamp("us")),
                          ("x", pa.float64()), ("b", pa.bool_()),
                          ("st", pa.struct([("k", pa.int64())]))])


@given(st.integers(-(2**31), 2**31 - 1), st.text(max_size=8), st.dates(),
       st.datetimes(), st.integers(0, 100))
def test_stats_struct_round_trip(i: int, s: str, d: object, t: object, nulls: int) -> None:
    assert isinstance(t, dt.datetime)
    stamp = (f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:"
             f"{t.second:02d}.{t.microsecond // 1000:03d}")
    stats = {"numRecords": 7,
             "minValues": {"i": i, "s": s, "d": str(d), "t": stamp + "Z", "n": stamp,
                           "x": 1.5, "st": {"k": 3}},
             "maxValues": {"i": i, "s": s, "d": str(d), "t": stamp + "Z", "n": stamp,
                           "x": 2.5, "st": {"k": 4}},
             "nullCount": {"i": nulls, "s": 0, "d": 0, "t": 0, "n": 0, "x": 0, "b": 1,
                           "st": {"k": 0}},
             "tightBounds": True}
    type_ = stats_struct_type(STATS_SCHEMA, [])
    [row] = stats_struct_array([json.dumps(stats)], type_).to_pylist()
    back = stats_json_from_struct(row, frozenset({("n",)}))
    assert back is not None and json.loads(back) == stats


def _v2_state() -> TableState:
    s = TableState()
    s.apply(0, [Protocol(3, 7, ["v2Checkpoint"], ["v2Checkpoint"]),
                Metadata(id="m", schema_string=SCHEMA_JSON, partition_columns=["day"],
                         configuration={"delta.checkpointPolicy": "v2",
                                        "delta.checkpoint.writeStatsAsStruct": "true"}),
                Txn("app", 3, 5)])
    s.apply(1, [Add(f"day=d{i}/f{i}.parquet", {"day": f"d{i}"}, 10 + i, 1, True,
                    f'{{"numRecords":{i},"minValues":{{"id":{i}}},"maxValues":{{"id":{i}}},'
                    f'"nullCount":{{"id":0,"v":0}}}}') for i in range(5)])
    s.apply(2, [Remove("day=d0/f0.parquet", 10**15, True, True, {"day": "d0"}, 10)])
    return s


SCHEMA_JSON = ('{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,'
               '"metadata":{}},{"name":"day","type":"string","nullable":true,"metadata":{}},'
               '{"name":"v","type":"string","nullable":true,"metadata":{}}]}')


def _same_state(a: TableState, b: TableState) -> None:
    assert a.protocol == b.protocol and a.metadata == b.metadata
    assert dict(a.files.items()) == dict(b.files.items())
    assert set(a.tombstones) == set(b.tombstones)
    assert {k: t.version for k, t in a.app_txns.items()} == {
        k: t.version for k, t in b.app_txns.items()}


@given(st.permutations(list(range(9))), st.booleans())
def test_v2_checkpoints_decode_in_any_row_order(order: list[int], as_json: bool) -> None:
    state = _v2_state()
    options = CheckpointOptions.of(state.protocol, TableConfig.of(state.metadata))  # type: ignore[arg-type]
    table = encode_checkpoint(state, 0, None, options).table
    assert table.num_rows == 9 and options.v2 and options.stats_struct
    shuffled = table.take(pa.array(order))
    if as_json:
        lines = [json.dumps({k: v for k, v in row.items() if v is not None}, default=str)
                 for row in _json_rows(shuffled)]
        shuffled = json_checkpoint_table("\n".join(lines).encode(), "cp.json")
    assert v2_sidecars(shuffled, 2, "cp", uuid_named=True) == []
    _same_state(decode_checkpoint(shuffled, 2, "cp"), state)


def _json_rows(table: pa.Table) -> list[dict[str, object]]:
    """Rows as a JSON checkpoint holds them: maps as objects, no parsed statistics."""
    out = []
    for row in table.to_pylist():
        for v in row.values():
            if isinstance(v, dict):
                for k in list(v):
                    if isinstance(v[k], list) and v[k] and isinstance(v[k][0], tuple):
                        v[k] = dict(v[k])
                    elif k in ("partitionValues", "configuration", "options") and v[k] == []:
                        v[k] = {}
                v.pop("stats_parsed", None)
                v.pop("partitionValues_parsed", None)
                if isinstance(v.get("format"), dict):
                    v["format"]["options"] = dict(v["format"].get("options") or [])
        out.append(row)
    return out


def test_a_protocol_without_feature_lists_and_a_torn_json_checkpoint() -> None:
    state = _v2_state()
    state.protocol = Protocol(1, 2)
    table = encode_checkpoint(state, 0, None, CheckpointOptions(v2=True)).table
    assert table.column("protocol").to_pylist()[1] == {
        "minReaderVersion": 1, "minWriterVersion": 2, "readerFeatures": None,
        "writerFeatures": None}
    _same_state(decode_checkpoint(table.take(pa.array(list(range(9))[::-1])), 2, "cp"), state)
    good = b'{"checkpointMetadata":{"version":2}}\n{"protocol":{"minReaderVersion":1,'
    with pytest.raises(CorruptLogError, match="line 2 is not JSON"):
        json_checkpoint_table(good, "cp.json")


def test_struct_stats_of_typed_columns_read_by_deltalake(tmp_path: Path) -> None:
    import decimal

    schema = pa.schema([("id", pa.int64()), ("day", pa.date32()), ("n", pa.int32()),
                        ("ts", pa.timestamp("us", tz="UTC")), ("ntz", pa.timestamp("us")),
                        ("dec", pa.decimal128(10, 2)), ("s", pa.struct([("a", pa.int64())])),
                        ("f", pa.float32())])
    root = tmp_path / "t"
    t = dc.DeltaTable.create(str(root), schema, partition_by=["day", "n"], configuration={
        "delta.checkpointInterval": "2", "delta.checkpoint.writeStatsAsStruct": "true",
        "delta.checkpoint.writeStatsAsJson": "false"})
    stamp = dt.datetime(2020, 1, 1, 1, 2, 3, 456789)
    for i in range(2):
        dc.write(t, pa.table({
            "id": [i, i + 10], "day": [dt.date(2020, 1, 1 + i)] * 2, "n": [i, i],
            "ts": [stamp.replace(tzinfo=dt.UTC)] * 2, "ntz": [stamp] * 2,
            "dec": [decimal.Decimal("1.25"), None], "s": [{"a": 1}, None], "f": [0.1, 2.5]},
            schema=schema))
    cp = root / checkpoint_path(2)
    add = pq.read_schema(cp).field("add").type
    assert add.field("partitionValues_parsed").type == pa.struct([("day", pa.date32()),
                                                                 ("n", pa.int32())])
    parsed = [r["stats_parsed"] for r in pq.read_table(cp).column("add").to_pylist() if r]
    assert {p["minValues"]["ntz"] for p in parsed} == {stamp.replace(microsecond=456000)}
    assert {p["maxValues"]["ntz"] for p in parsed} == {stamp.replace(microsecond=457000)}
    want = t.to_arrow()
    drop_commits_through(root, 2)
    assert same_rows(peer_read(root), want)
    ours = dc.DeltaTable(str(root))
    assert same_rows(ours.to_arrow(), want)
    stats = [json.loads(a.stats or "{}") for a in ours.files()]
    assert {s["minValues"]["ntz"] for s in stats} == {"2020-01-01T01:02:03.456"}
    assert {s["maxValues"]["ts"] for s in stats} == {"2020-01-01T01:02:03.457Z"}
    assert {s["nullCount"]["dec"] for s in stats} == {1}


@pytest.mark.parametrize("name", ["kernel/v2-checkpoints-json-with-sidecars",
                                  "kernel/v2-checkpoints-parquet-with-sidecars"])
def test_cleanup_of_a_spark_table_keeps_the_sidecars_of_the_kept_checkpoint(
        name: str, tmp_path: Path) -> None:
    import os
    import time

    root = copy_table(name, tmp_path)
    log = root / LOG_DIR
    old = time.time() - 90 * 86_400
    for p in [*log.iterdir(), *(log / "_sidecars").iterdir()]:
        os.utime(p, (old, old))
    table = dc.DeltaTable(str(root))
    want = table.to_arrow()
    newest = checkpoint_versions(log)[-1]
    [kept] = [p for p in log.iterdir() if p.name.startswith(f"{newest:020d}.checkpoint.")
              and parse_log_name(p.name)]
    named = referenced(kept)
    before = {p.name for p in (log / "_sidecars").iterdir() if not p.name.startswith(".")}
    assert named < before
    deleted = cleanup_expired_log(table.log_store, table.snapshot.table_config,
                                  ManualClock(time.time()))
    after = {p.name for p in (log / "_sidecars").iterdir() if not p.name.startswith(".")}
    assert after == named
    # Hadoop's checksum files are not sidecars: left alone.
    assert (log / "_sidecars" / f".{next(iter(named))}.crc").exists()
    assert {f"{SIDECAR_DIR}/{n}" for n in before - named} <= set(deleted)
    assert checkpoint_versions(log) == [newest]
    assert same_rows(dc.DeltaTable(str(root)).to_arrow(), want)


def referenced(checkpoint: Path) -> set[str]:
    if checkpoint.suffix == ".json":
        lines = [json.loads(line) for line in checkpoint.read_text().splitlines()]
        return {x["sidecar"]["path"] for x in lines if "sidecar" in x}
    return {r["path"] for r in pq.read_table(checkpoint).column("sidecar").to_pylist() if r}
