"""Integer columns of close, mostly distinct values are written DELTA_BINARY_PACKED
(``io.integer_encodings``), and ``deltacommit.parquet.deltaEncodedIntegers=false`` keeps
PLAIN and dictionaries only.

The files written read back as the rows written (Arrow, deltalake 1.6.0, and deltacommit's
own reader after UPDATE, DELETE, MERGE and compaction); the choice is checked against an
exact computation of the encoding's block widths."""

from __future__ import annotations

import datetime as dt
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.errors import InvalidArgumentError
from deltacommit.io.datafiles import _encode_parquet
from deltacommit.io.integer_encodings import (
    BLOCK_VALUES,
    MIN_ROWS,
    SAMPLE_VALUES,
    SAMPLE_WINDOWS,
    block_widths,
    delta_encoded_columns,
    writer_options,
)
from deltacommit.protocol.partitions import decode_add_path
from tests.delta_tables import peer_read

DELTA = "DELTA_BINARY_PACKED"
N = 3 * MIN_ROWS


def encodings(path: str | pa.Buffer) -> dict[str, set[str]]:
    """Each column's encodings over the row groups of a Parquet file."""
    meta = pq.read_metadata(pa.BufferReader(path) if isinstance(path, pa.Buffer) else path)
    out: dict[str, set[str]] = {}
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            col = meta.row_group(g).column(c)
            out.setdefault(col.path_in_schema, set()).update(col.encodings)
    return out


def mixed_table(n: int = N) -> pa.Table:
    rng = np.random.default_rng(7)
    ids = np.arange(10**12, 10**12 + n, dtype=np.int64)
    return pa.table({
        "id": ids,
        "random": rng.integers(-2**62, 2**62, n),
        "few": rng.integers(0, 10, n).astype(np.int32),
        "day": pa.array((np.arange(n) // 500).astype(np.int32)).cast(pa.date32()),
        "at": pa.array(1_700_000_000_000_000 + np.arange(n) * 1_003, pa.timestamp("us", "UTC")),
        "x": np.arange(n) * 0.5,
        "s": pa.array([f"s{i % 7}" for i in range(n)]),
        "gappy": pa.array([None if i % 3 == 0 else i * 10 for i in range(n)], pa.int64()),
    })


# --------------------------------------------------------------------------- the choice (pure)

def test_close_distinct_integers_are_chosen_and_others_keep_their_dictionaries() -> None:
    t = mixed_table()
    assert delta_encoded_columns(t) == ["id", "at", "gappy"]
    options = writer_options(t)
    assert options["column_encoding"] == dict.fromkeys(["id", "at", "gappy"], DELTA)
    assert options["use_dictionary"] == ["random", "few", "day", "x", "s"]
    # Unsigned values are taken as Parquet stores them (reinterpreted, wrapping).
    unsigned = pa.table({"u": pa.array(np.arange(N, dtype=np.uint64) + np.uint64(2**63 - 5))})
    assert delta_encoded_columns(unsigned) == ["u"]
    body, _ = _encode_parquet(unsigned)
    assert pq.read_table(pa.BufferReader(body)).equals(unsigned)


def test_small_nested_and_non_integer_tables_keep_arrows_encodings() -> None:
    assert delta_encoded_columns(mixed_table(MIN_ROWS - 1)) == []
    nested = mixed_table().append_column("st", pa.array([{"a": 1}] * N))
    assert delta_encoded_columns(nested) == []
    assert writer_options(pa.table({"x": np.arange(N) * 1.0, "b": [True] * N})) == {}
    assert delta_encoded_columns(pa.table({"n": pa.nulls(N, pa.int64())})) == []


def reference_widths(values: list[int]) -> list[int]:
    """The encoding's block widths computed on Python integers, wrapping as 64-bit."""
    def wrap(v: int) -> int:
        return (v + 2**63) % 2**64 - 2**63
    diffs = [wrap(b - a) for a, b in itertools.pairwise(values)]
    return [(max(block) - min(block)).bit_length()
            for block in (diffs[i:i + BLOCK_VALUES] for i in range(0, len(diffs), BLOCK_VALUES))]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1), min_size=1, max_size=600))
def test_block_widths_are_the_encodings_for_any_values(values: list[int]) -> None:
    assert block_widths(np.array(values, dtype=np.int64)) == reference_widths(values)


@settings(max_examples=60, deadline=None)
@given(start=st.integers(-2**62, 2**62), step=st.integers(-2**40, 2**40),
       jitter=st.integers(0, 2**12), seed=st.integers(0, 2**32 - 1))
def test_a_choice_is_delta_only_where_the_sample_is_distinct_and_narrow(
        start: int, step: int, jitter: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = start + step * np.arange(N, dtype=np.int64) + rng.integers(0, jitter + 1, N)
    chosen = delta_encoded_columns(pa.table({"v": values})) == ["v"]
    widths = block_widths(values)
    distinct = len(np.unique(values))
    # The sample is a part of the column: where every value differs and every block is
    # narrow, or where the values are few or every block wide, the choice follows.
    if distinct == N and max(widths) * 4 <= 64:
        assert chosen
    if distinct * 2 < SAMPLE_VALUES or min(widths) * 4 > 64:
        assert not chosen


def reference_choice(column: pa.ChunkedArray[Any], bits: int) -> bool:
    """The rule of the module docstring, computed plainly: over the sampled windows (nulls
    left out), at least half the values distinct within their window, and the blocks'
    widths (``reference_widths``) at most a quarter of ``bits`` on average."""
    n = len(column)
    span = min(SAMPLE_VALUES, n)
    count = min(SAMPLE_WINDOWS, max(n // span, 1))
    # Evenly spread: the first window at the start, the last at the end.
    starts = [(n - span) * i // (count - 1) for i in range(count)] if count > 1 else [0]
    sampled = distinct = 0
    widths: list[int] = []
    for start in starts:
        values = [v for v in column.slice(start, span).cast(
            pa.int64() if bits == 64 else pa.int32(), safe=False).to_pylist() if v is not None]
        if len(values) < 2:
            continue
        sampled += len(values)
        distinct += len(set(values))
        widths += reference_widths(values)
    return bool(widths) and distinct * 2 >= sampled and sum(widths) * 4 <= bits * len(widths)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(MIN_ROWS, 3 * MIN_ROWS),
       step=st.sampled_from([1, 3, 2**10, 2**20, 2**40]), repeat=st.integers(1, 4),
       null_share=st.sampled_from([0.0, 0.3, 0.97]), chunks=st.integers(1, 40))
def test_the_choice_is_the_documented_rule(seed: int, n: int, step: int, repeat: int,
                                            null_share: float, chunks: int) -> None:
    rng = np.random.default_rng(seed)
    walk = np.cumsum(rng.integers(0, step + 1, n)) // repeat  # repeats make values less distinct
    nulls = rng.random(n) < null_share
    cuts = sorted(set(rng.integers(0, n, chunks - 1).tolist()) | {0, n})

    def chunked(a: pa.Array[Any]) -> pa.ChunkedArray[Any]:
        return pa.chunked_array([a.slice(s, e - s) for s, e in itertools.pairwise(cuts)], a.type)

    t = pa.table({
        "i64": chunked(pa.array(walk, pa.int64(), mask=nulls)),
        "i32": chunked(pa.array((walk % 2**31).astype(np.int32), mask=nulls)),
        "wide": chunked(pa.array(rng.integers(-2**62, 2**62, n), mask=nulls)),
        "at": chunked(pa.array(walk * 1000, pa.timestamp("us", "UTC"), mask=nulls)),
    })
    bits = {"i64": 64, "i32": 32, "wide": 64, "at": 64}
    assert delta_encoded_columns(t) == [c for c in t.column_names
                                        if reference_choice(t.column(c), bits[c])]


# --------------------------------------------------------------------------- the files

@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(MIN_ROWS, 3 * MIN_ROWS),
       null_every=st.integers(0, 9))
def test_a_file_written_delta_encoded_reads_back_as_its_rows(seed: int, n: int,
                                                               null_every: int) -> None:
    rng = np.random.default_rng(seed)
    base = np.cumsum(rng.integers(0, 50, n)) + int(rng.integers(-2**40, 2**40))
    mask = (np.arange(n) % null_every == 0) if null_every else None
    t = pa.table({
        "i64": pa.array(base, pa.int64(), mask=mask),
        "i32": pa.array((base % 2**31).astype(np.int32)),
        "i16": pa.array((np.arange(n) % 30000).astype(np.int16)),
        "u32": pa.array(np.arange(n, dtype=np.uint32) + np.uint32(2**32 - n)),
        "t": pa.array(base, pa.timestamp("ns")),
        "tm": pa.array(np.arange(n) * 1000, pa.time64("us")),
        "d": pa.array((np.arange(n) % 20000).astype(np.int32)).cast(pa.date32()),
    })
    body, _ = _encode_parquet(t)
    back = pq.read_table(pa.BufferReader(body))
    assert back.equals(t)
    used = encodings(body)
    for name in delta_encoded_columns(t):
        assert DELTA in used[name]


def peer_rows(uri: str, schema: pa.Schema) -> pa.Table:
    """deltalake 1.6.0's read of the table, in ``schema`` (it reads strings as views), by id."""
    return peer_read(uri).select(schema.names).cast(schema).sort_by("id")


def write_sorted(uri: str, properties: dict[str, str] | None = None) -> pa.Table:
    t = mixed_table()
    dc.write(uri, t, configuration=properties)
    return t


def data_files(uri: str) -> list[str]:
    return [str(Path(uri) / decode_add_path(a.path)) for a in dc.DeltaTable(uri).files()]


def test_a_table_writes_ids_and_times_delta_encoded_and_peers_read_them(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = write_sorted(uri)
    (path,) = data_files(uri)
    used = encodings(path)
    assert {DELTA} <= used["id"] and {DELTA} <= used["at"]
    assert DELTA not in used["few"] and "RLE_DICTIONARY" in used["few"]
    # Statistics come from the footer as before.
    raw = dc.DeltaTable(uri).files()[0].stats
    assert raw is not None
    stats = json.loads(raw)
    assert stats["minValues"]["id"] == 10**12
    assert stats["maxValues"]["id"] == 10**12 + N - 1
    assert dc.DeltaTable(uri).to_arrow().sort_by("id").equals(t)
    assert peer_rows(uri, t.schema).equals(t)


def test_the_property_off_writes_plain_and_dictionaries_only(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = write_sorted(uri, {"deltacommit.parquet.deltaEncodedIntegers": "false"})
    dc.DeltaTable(uri).update({"x": "x + 1"}, predicate="id % 10 = 3")
    dc.DeltaTable(uri).optimize.compact()
    for path in data_files(uri):
        assert not any(DELTA in e for e in encodings(path).values()), path
    assert dc.DeltaTable(uri).to_arrow().num_rows == t.num_rows


def test_the_property_takes_only_a_boolean(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_sorted(uri)
    with pytest.raises(InvalidArgumentError,
                       match=r"deltacommit\.parquet\.deltaEncodedIntegers.*maybe"):
        dc.DeltaTable(uri).set_properties({"deltacommit.parquet.deltaEncodedIntegers": "maybe"})
    dc.DeltaTable(uri).set_properties({"deltacommit.parquet.deltaEncodedIntegers": "false"})
    dc.write(uri, mixed_table(), mode="append")
    newest = max(dc.DeltaTable(uri).files(), key=lambda a: a.modification_time)
    assert not any(DELTA in e for e in
                   encodings(str(Path(uri) / decode_add_path(newest.path))).values())


@pytest.mark.parametrize("key", ["deltacommit.parquet.deltaEncodedInteger",
                                 "deltacommit.parquet.DeltaEncodedIntegers",
                                 "Deltacommit.parquet.deltaEncodedIntegers"])
def test_a_misspelt_property_is_refused_naming_the_one_meant(tmp_path: Path, key: str) -> None:
    """A property stored but never read would leave the files delta-encoded, and the reader
    it was set for failing, without a word: both at creation and later it is refused."""
    uri = str(tmp_path / "t")
    hint = r"did you mean deltacommit\.parquet\.deltaEncodedIntegers"
    with pytest.raises(InvalidArgumentError, match=rf"{uri}.*{key}.*{hint}"):
        write_sorted(uri, {key: "false"})
    write_sorted(uri)
    with pytest.raises(InvalidArgumentError, match=rf"{uri}.*{key}.*{hint}"):
        dc.DeltaTable(uri).set_properties({key: "false"})
    assert key not in dc.DeltaTable(uri).configuration


def extremes_table(n: int = 10 * MIN_ROWS) -> pa.Table:
    """Columns whose sampled windows are close, consecutive values, chosen DELTA_BINARY_PACKED,
    and whose rows between the windows alternate their type's extremes (and the calendar's,
    for dates and times): the encoding's widest differences, which wrap, where no sample looks."""
    span = min(SAMPLE_VALUES, n)
    sampled = np.zeros(n, dtype=bool)
    for start in np.linspace(0, n - span, SAMPLE_WINDOWS, dtype=np.int64).tolist():
        sampled[start:start + span] = True
    outside = np.flatnonzero(~sampled)

    def column(dtype: Any, lo: int, hi: int) -> Any:
        values = (np.arange(n) % 1000).astype(dtype)
        for k, v in enumerate((lo, hi, lo + 1, hi - 1)):
            values[outside[k::4]] = v
        return values

    first, last = dt.date(1, 1, 1), dt.date(9999, 12, 31)
    epoch = dt.date(1970, 1, 1)
    day_lo, day_hi = (first - epoch).days, (last - epoch).days
    us_lo, us_hi = day_lo * 86_400_000_000, (day_hi + 1) * 86_400_000_000 - 1
    i64, i32, i16 = np.iinfo(np.int64), np.iinfo(np.int32), np.iinfo(np.int16)
    return pa.table({
        "id": np.arange(n, dtype=np.int64),
        "i64": column(np.int64, int(i64.min), int(i64.max)),
        "i32": column(np.int32, int(i32.min), int(i32.max)),
        "i16": column(np.int16, int(i16.min), int(i16.max)),
        "day": pa.array(column(np.int32, day_lo, day_hi)).cast(pa.date32()),
        "at": pa.array(column(np.int64, us_lo, us_hi), pa.timestamp("us", "UTC")),
        "local": pa.array(column(np.int64, us_lo, us_hi), pa.timestamp("us")),
    })


def test_extremes_beyond_the_sample_read_back_from_every_reader(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = extremes_table()
    assert delta_encoded_columns(t) == t.column_names
    dc.write(uri, t)
    (path,) = data_files(uri)
    assert all(DELTA in e for e in encodings(path).values())
    assert pq.read_table(path).equals(t)
    assert dc.DeltaTable(uri).to_arrow().sort_by("id").equals(t)
    assert peer_rows(uri, t.schema).equals(t)
    # Statistics and pruning see the extremes the sample did not.
    stats = json.loads(dc.DeltaTable(uri).files()[0].stats or "{}")
    assert stats["minValues"]["i64"] == -2**63 and stats["maxValues"]["i64"] == 2**63 - 1
    assert stats["minValues"]["day"] == "0001-01-01" and stats["maxValues"]["day"] == "9999-12-31"
    hits = dc.DeltaTable(uri).to_arrow(filter="i32 = 2147483647 AND i16 = 32767")
    assert hits.num_rows == sum(1 for a, b in zip(t["i32"].to_pylist(), t["i16"].to_pylist(),
                                                  strict=True)
                                if a == 2**31 - 1 and b == 2**15 - 1) > 0


def test_every_writer_keeps_plain_encodings_with_the_property_off(tmp_path: Path) -> None:
    """Each way rows reach a file (append, the Appender, a group commit, DELETE, MERGE,
    Z-order, change data files) writes no DELTA_BINARY_PACKED column in a table that turns
    it off, though the files' rows are ones the choice would encode."""
    uri = str(tmp_path / "t")
    t = write_sorted(uri, {"deltacommit.parquet.deltaEncodedIntegers": "false",
                           "delta.enableChangeDataFeed": "true"})

    def shifted(k: int) -> pa.Table:
        return t.set_column(0, "id", pa.array(np.arange(N, dtype=np.int64) + k * 10**13))

    with dc.Appender(uri, "ingest", flush_interval=None) as appender:
        appender.append(shifted(1), 0)
    dc.append(dc.DeltaTable(uri, group_commit=True), shifted(2))
    dc.DeltaTable(uri).update({"x": "x + 1"}, predicate="id % 2 = 0")
    dc.DeltaTable(uri).delete("id % 9 = 4")
    source = t.filter(pa.compute.equal(pa.compute.bit_wise_and(t["id"], 1), 1))
    (dc.DeltaTable(uri).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
     .when_matched_update({"x": "s.x - 1"}).execute())
    dc.DeltaTable(uri).optimize.z_order(["id"])
    written = [str(p) for p in Path(uri).rglob("*.parquet")]
    chosen = [p for p in written if delta_encoded_columns(pq.read_table(p))]
    assert sum("_change_data" in p for p in chosen) >= 3 and len(chosen) >= 9
    for path in written:
        assert not any(DELTA in e for e in encodings(path).values()), path


def test_row_level_rewrites_of_delta_encoded_files_are_proven_and_read_by_the_peer(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = write_sorted(uri)
    table = dc.DeltaTable(uri)
    table.update({"x": "x + 1", "s": "'u'"}, predicate="id % 100 = 7")
    dc.DeltaTable(uri).delete("id % 9 = 4")
    source = pa.table({"id": pa.array([10**12 + 5, 10**12 + N + 1], pa.int64()),
                       "x": [-1.0, -2.0]})
    (dc.DeltaTable(uri).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
     .when_matched_update({"x": "s.x"})
     .when_not_matched_insert({"id": "s.id", "x": "s.x"}).execute())
    dc.DeltaTable(uri).optimize.compact()
    rows = {r["id"]: r for r in t.to_pylist()}
    for i, r in rows.items():
        if i % 100 == 7:
            r["x"] += 1
            r["s"] = "u"
    rows = {i: r for i, r in rows.items() if i % 9 != 4}
    rows[10**12 + 5]["x"] = -1.0
    rows[10**12 + N + 1] = {c: None for c in t.column_names} | {"id": 10**12 + N + 1, "x": -2.0}
    expected = pa.Table.from_pylist(sorted(rows.values(), key=lambda r: r["id"]),
                                    schema=t.schema)
    assert dc.DeltaTable(uri).to_arrow().sort_by("id").equals(expected)
    assert peer_rows(uri, t.schema).equals(expected)
    assert any(DELTA in encodings(p)["id"] for p in data_files(uri))


def test_a_partitioned_write_chooses_per_file(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    n = 2 * N
    t = pa.table({"p": pa.array(["a", "b"] * (n // 2)),
                  "id": np.arange(n, dtype=np.int64),
                  "when": pa.array([dt.datetime(2026, 1, 1) + dt.timedelta(seconds=i)
                                    for i in range(n)], pa.timestamp("us"))})
    dc.write(uri, t, partition_by=["p"])
    for path in data_files(uri):
        used: Any = encodings(path)
        assert DELTA in used["id"] and DELTA in used["when"]
    assert dc.DeltaTable(uri).to_arrow().select(["p", "id", "when"]).sort_by("id").equals(t)
