"""``LazyActionMap`` behaves exactly like the dict it stands for, whatever is done to it."""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from deltacommit.protocol.actions import Add
from deltacommit.protocol.checkpoint.encode import adds_to_arrow, live_add_chunks
from deltacommit.protocol.checkpoint.schema import STRING_MAP
from deltacommit.protocol.files.action_rows import ActionRows
from deltacommit.protocol.files.from_arrow import (
    _all_plain,
    _clearly_plain,
    adds_from_arrow,
    map_dicts,
)
from deltacommit.protocol.files.lazy_files import (
    LazyActionMap,
    carried_over,
    copy_file_map,
    discard,
    rebased_map,
)
from deltacommit.protocol.log.paths import is_plain_relative
from deltacommit.protocol.replay import TableState, file_key


def add(name: str, size: int = 1) -> Add:
    return Add(name, {"p": name[:1]}, size, 0, True, None)


def lazy(adds: list[Add]) -> LazyActionMap[Add]:
    return LazyActionMap(ActionRows(adds_to_arrow(adds), adds_from_arrow))


# Plain relative paths, escaped ones, and absolute ones in two spellings: only the first are
# their own keys (``log.paths.canonical_key``).
NAMES = [f"{c}{i}.parquet" for c in "ab%" for i in range(4)] + [
    f"/abs/c{i}.parquet" for i in range(2)] + [f"file:/abs/d{i}.parquet" for i in range(2)]

ops = st.lists(st.one_of(
    st.tuples(st.just("set"), st.sampled_from(NAMES), st.integers(1, 9)),
    st.tuples(st.just("pop"), st.sampled_from(NAMES), st.none()),
    st.tuples(st.just("get"), st.sampled_from(NAMES), st.none()),
    st.tuples(st.just("in"), st.sampled_from(NAMES), st.none()),
    st.tuples(st.just("len"), st.none(), st.none()),
    st.tuples(st.just("copy"), st.none(), st.none()),
    st.tuples(st.just("items"), st.none(), st.none()),
), max_size=30)


@settings(max_examples=300, deadline=None)
@given(base=st.lists(st.sampled_from(NAMES), unique=True), script=ops)
def test_lazy_map_matches_a_plain_dict(base: list[str], script: list[tuple[str, Any, Any]]) -> None:
    adds = [add(n) for n in base]
    ref: dict[str, Add] = {file_key(a.path): a for a in adds}
    m: dict[str, Add] = lazy(adds)
    for op, name, arg in script:
        key = file_key(name) if name else None
        if op == "set":
            a = add(name, arg)
            ref[key] = a
            m[key] = a
        elif op == "pop":
            assert m.pop(key, None) == ref.pop(key, None)
        elif op == "get":
            assert m.get(key) == ref.get(key)
            if key in ref:
                assert key in m and m[key] == ref[key]
        elif op == "in":
            assert (key in m) == (key in ref)
        elif op == "len":
            assert len(m) == len(ref)
        elif op == "copy":
            m = copy_file_map(m)
        elif op == "items":
            assert sorted(m.items(), key=lambda kv: kv[0]) == sorted(ref.items(), key=lambda kv: kv[0])
    assert m == ref
    assert dict(m) == ref
    assert len(m) == len(ref)


def test_copies_share_rows_but_not_changes() -> None:
    m = lazy([add("a.parquet"), add("b.parquet")])
    c = m.lazy_copy()
    d = m.lazy_copy()
    c["c.parquet"] = add("c.parquet")
    del c["a.parquet"]
    assert sorted(m) == ["a.parquet", "b.parquet"]
    assert sorted(c) == ["b.parquet", "c.parquet"]
    # Materialising one copy leaves the other lazy, and all reuse one set of objects.
    assert d.is_lazy and not m.is_lazy
    assert d["b.parquet"] is m["b.parquet"]


def test_state_replay_on_a_lazy_map_never_materialises() -> None:
    s = TableState(version=5, files=lazy([add("a.parquet"), add("b.parquet")]),
                   tombstones={})
    s.apply(6, [add("c.parquet"), add("a.parquet", 5).to_remove(1)])
    s.apply(7, [add("a.parquet", 6)])
    files = s.files
    assert isinstance(files, LazyActionMap) and files.is_lazy
    assert len(files) == 3
    assert files.is_lazy
    assert {k: v.size for k, v in files.items()} == {"a.parquet": 6, "b.parquet": 1,
                                                      "c.parquet": 1}
    assert not files.is_lazy


def test_concurrent_readers_materialise_once() -> None:
    m = lazy([add(f"f{i}.parquet") for i in range(2000)])
    m["x.parquet"] = add("x.parquet")
    barrier = threading.Barrier(4)
    results: list[int] = []

    def read() -> None:
        barrier.wait()
        results.append(len(list(m.values())))

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [2001] * 4


def test_map_dicts_shapes() -> None:
    cases: list[list[Any]] = [
        [[("a", "1")], [("a", None)], [("a", "3")]],              # one key everywhere
        [[("a", "1"), ("b", "2")], [("a", "3"), ("b", None)]],    # two keys, same order
        [[("a", "1"), ("b", "2")], [("b", "3"), ("a", "4")]],     # two keys, other order
        [[], [("a", "1")], None, [("b", "2"), ("c", "3")]],       # ragged, with a null map
        [[], []],
        [[("a", "1")], [("b", "1")]],                             # same width, other keys
    ]
    for rows in cases:
        arr = pa.array(rows, STRING_MAP)
        expected = [None if r is None else dict(r) for r in rows]
        assert map_dicts(arr) == expected
        assert map_dicts(arr.slice(1)) == expected[1:]


@settings(max_examples=100, deadline=None)
@given(base=st.lists(st.sampled_from(NAMES), unique=True, min_size=1),
       gone=st.lists(st.sampled_from(NAMES)), new=st.lists(st.sampled_from(NAMES)),
       loaded=st.booleans(), replayed=st.booleans())
def test_stats_parsed_follows_the_rows_kept(base: list[str], gone: list[str], new: list[str],
                                            loaded: bool, replayed: bool) -> None:
    """The checkpoint's typed statistics stay row for row with the checkpoint rows a map
    still holds, and the actions set after the checkpoint have none.  ``replayed``: files
    removed as replay removes them (``discard``, which reads no row), whatever their path's
    spelling."""
    adds = [add(n, size=i + 1) for i, n in enumerate(base)]
    rows = adds_to_arrow(adds)
    parsed = pa.array([{"numRecords": a.size} for a in adds],
                      pa.struct([("numRecords", pa.int64())]))
    m = LazyActionMap(ActionRows(rows, adds_from_arrow, stats_parsed=parsed) if loaded
                      else ActionRows(None, adds_from_arrow, lambda: (rows, parsed)))
    for name in gone:
        if replayed:
            discard(m, file_key(name))
        else:
            m.pop(file_key(name), None)
    for name in new:
        m[file_key(name)] = add(name, size=100)
    chunks = m.parsed_chunks(adds_to_arrow)
    kept, kept_parsed = chunks[0]
    assert kept_parsed is not None
    assert kept_parsed.field("numRecords").to_pylist() == kept.field("size").to_pylist()
    assert all(p is None for _, p in chunks[1:])
    assert [r for r, _ in chunks] == m.arrow_chunks(adds_to_arrow)
    assert sorted(r["path"] for c, _ in chunks for r in c.to_pylist()) == sorted(
        a.path for a in m.values())


def _rows_of(m: dict[str, Add]) -> pa.StructArray:
    """The map's live adds as one Arrow array, in the order a checkpoint encodes them."""
    chunks = [r for r, _ in live_add_chunks(m)]
    return chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)


@settings(max_examples=200, deadline=None)
@given(base=st.lists(st.sampled_from(NAMES), unique=True), before=ops, after=ops,
       plain=st.booleans())
def test_a_rebased_map_is_the_same_map_backed_by_its_rows(
        base: list[str], before: list[tuple[str, Any, Any]], after: list[tuple[str, Any, Any]],
        plain: bool) -> None:
    """Rebased onto the rows a checkpoint encodes, a map keeps its contents and its very
    objects, decodes nothing, copies only what changes after, and can be rebased again."""
    adds = [add(n) for n in base]
    m: dict[str, Add] = {file_key(a.path): a for a in adds} if plain else lazy(adds)
    for round_ in (before, after):
        for op, name, arg in round_:
            if op == "set":
                m[file_key(name)] = add(name, arg)
            elif op == "pop":
                m.pop(file_key(name), None)
        if isinstance(m, LazyActionMap) and m.is_lazy and m._base is not None \
                and m._base._objects is None:
            # Rows nobody decoded yet: rebasing would have to decode them, so it declines.
            assert rebased_map(m, _rows_of(m), None, adds_from_arrow) is None
            m = {k: v for k, v in m.items()}
        expected = dict(dict.items(m)) if not isinstance(m, LazyActionMap) else dict(m.items())
        r = rebased_map(m, _rows_of(m), None, adds_from_arrow)
        assert isinstance(r, LazyActionMap) and r.is_lazy
        c = r.lazy_copy()
        assert dict.__len__(c) == 0  # a copy holds none of the rows' actions itself
        assert len(r) == len(expected)
        assert all(r[k] is v for k, v in expected.items())
        assert r.is_lazy  # lookups and len() did not decode the rows
        assert dict(c.items()) == expected
        m = r


def test_a_writer_keeps_the_rows_of_the_checkpoint_it_wrote(tmp_path: Any) -> None:
    """A table built in this process is copied for each version; once it checkpoints, its
    state is backed by the rows just written, and the next checkpoint holds exactly what a
    fresh load of the table holds."""
    import deltacommit as dc
    from deltacommit.engine.snapshot import state_cache

    uri = str(tmp_path / "t")
    for i in range(10):
        dc.write(uri, pa.table({"x": [i]}))
    table = dc.DeltaTable(uri)
    files = table.snapshot.state.files
    assert isinstance(files, LazyActionMap) and files.is_lazy
    assert len(files) == 10 and files.is_lazy
    for i in range(10, 20):
        dc.write(table, pa.table({"x": [i]}))
    state_cache.clear()
    fresh = dc.DeltaTable(uri)
    assert fresh.version == 20
    assert sorted(fresh.to_arrow().column("x").to_pylist()) == list(range(20))
    assert {a.path for a in fresh.files()} == {a.path for a in table.files()}


def _apply(m: dict[str, Add], script: list[tuple[str, Any, Any]]) -> dict[str, Add]:
    for op, name, arg in script:
        if op == "set":
            m[file_key(name)] = add(name, arg)
        elif op == "pop":
            m.pop(file_key(name), None)
        elif op == "get":
            m.get(file_key(name))
        elif op == "copy":
            m = copy_file_map(m)
        elif op == "items":
            list(m.items())
    return m


@settings(max_examples=300, deadline=None)
@given(base=st.lists(st.sampled_from(NAMES), unique=True), before_ops=ops, since=ops,
       plain=st.booleans())
def test_a_later_version_carried_over_to_the_rows_of_a_checkpoint(
        base: list[str], before_ops: list[tuple[str, Any, Any]], since: list[tuple[str, Any, Any]],
        plain: bool) -> None:
    """A later version's map, moved onto the rows a checkpoint of an earlier version encoded,
    holds the same actions as the very same objects, and itself holds only what changed since
    (so copying it costs the commits since, not the table)."""
    adds = [add(n) for n in base]
    m: dict[str, Add] = {file_key(a.path): a for a in adds} if plain else lazy(adds)
    before = _apply(m, before_ops)
    if isinstance(before, LazyActionMap) and before._base is not None \
            and before._base._objects is None:
        before = {k: v for k, v in before.items()}  # rebasing undecoded rows declines
    live = _apply(copy_file_map(before), since)
    expected = dict(copy_file_map(live).items())
    after = rebased_map(before, _rows_of(before), None, adds_from_arrow)
    assert after is not None
    carried = carried_over(live, before, after)
    enumerated = isinstance(live, LazyActionMap) and isinstance(before, LazyActionMap) \
        and live._base is None and before._base is not None
    if enumerated:
        # Telling them apart would take the rows ``before`` still holds as Arrow.
        assert carried is None
        return
    assert isinstance(carried, LazyActionMap) and carried._base is after._base
    assert dict.__len__(carried) <= len(since)  # it holds only what changed since itself
    assert sorted(r["path"] for c in live_add_chunks(carried) for r in c[0].to_pylist()) == sorted(
        a.path for a in expected.values())
    assert len(carried) == len(expected)
    assert all(carried[k] is v for k, v in expected.items())
    assert dict(carried.items()) == expected


def test_a_map_of_another_lineage_is_not_carried_over() -> None:
    """Maps over different rows cannot be told apart without enumerating them: left alone."""
    before = lazy([add("a.parquet")])
    live = lazy([add("a.parquet")])
    after = rebased_map(dict(before.items()), _rows_of(before), None, adds_from_arrow)
    assert after is not None
    assert carried_over(live, lazy([add("a.parquet")]), after) is None
    assert carried_over(live, {"a.parquet": add("a.parquet")}, after) is None


def test_versions_committed_while_a_checkpoint_is_written_move_onto_its_rows(
        tmp_path: Any, monkeypatch: Any) -> None:
    """Group commit lets the next versions commit while the last one's checkpoint is written.
    Once it is, the newest state holds only the actions since that checkpoint itself, the rest
    backed by the rows just written: copying it and the next checkpoint cost the commits since,
    not the table, and the table reads the same."""
    import deltacommit as dc
    from deltacommit.engine.commit import table_log
    from deltacommit.engine.snapshot import state_cache

    uri = str(tmp_path / "t")
    dc.write(uri, pa.table({"x": [0]}))
    table = dc.DeltaTable(uri, group_commit=True)
    real = table_log.after_commit
    checkpointed: list[Any] = []

    def others_commit_first(log_store: Any, snapshot: Any, clock: Any, version: int) -> None:
        if version == 10:
            for i in (11, 12):  # each leads its own group while version 10 is still here
                t = threading.Thread(target=dc.write, args=(table, pa.table({"x": [i]})))
                t.start()
                t.join()
            assert table.version == 12
            checkpointed.append(snapshot)
        real(log_store, snapshot, clock, version)

    monkeypatch.setattr(table_log, "after_commit", others_commit_first)
    for i in range(1, 10):  # versions 2 to 10 (creating the table took two)
        dc.write(table, pa.table({"x": [i]}))
    [at_10] = checkpointed
    rows = at_10.state.files
    assert isinstance(rows, LazyActionMap) and rows._base is not None
    newest = table.log.snapshot
    files = newest.state.files
    assert newest.version == 12
    assert isinstance(files, LazyActionMap) and files._base is rows._base
    # Only the files of versions 11 and 12, neither of them among the checkpoint's rows.
    assert dict.__len__(files) == 2 and not set(dict.keys(files)) & set(rows.keys())
    monkeypatch.setattr(table_log, "after_commit", real)
    for i in range(13, 21):  # versions 13 to 20
        dc.write(table, pa.table({"x": [i]}))
    assert table.version == 20
    x = [0, *range(1, 10), 11, 12, *range(13, 21)]
    assert sorted(table.to_arrow().column("x").to_pylist()) == x
    state_cache.clear()
    fresh = dc.DeltaTable(uri)
    assert fresh.snapshot.state.files._base is not None  # read from the checkpoint of 20
    assert sorted(fresh.to_arrow().column("x").to_pylist()) == x
    assert {a.path for a in fresh.files()} == {a.path for a in table.files()}


@settings(max_examples=1000, deadline=None)
@given(paths=st.lists(st.text(alphabet="ab/.%:", max_size=6), min_size=1, max_size=5),
       skipped=st.integers(0, 3), large=st.booleans())
def test_the_column_stands_for_the_keys_only_when_every_path_is_its_own_key(
        paths: list[str], skipped: int, large: bool) -> None:
    """The byte scan that lets a path column stand for its keys (a slice of it, too) never
    passes a path that ``canonical_key`` would change."""
    column = pa.array(["x"] * skipped + paths, pa.large_string() if large else pa.string())
    column = column.slice(skipped)
    if _clearly_plain(column):
        assert all(is_plain_relative(p) for p in paths), paths
    if _all_plain(column):
        assert all(file_key(p) == p for p in paths), paths
