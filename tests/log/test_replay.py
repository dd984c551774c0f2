"""Replay follows the protocol's reconciliation rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deltacommit.errors import CorruptLogError
from deltacommit.protocol.actions import Add, Metadata, Protocol, Remove, Txn, UnknownAction
from deltacommit.protocol.replay import TableState, replay


def add(path: str, **pv: str) -> Add:
    return Add(path=path, partition_values=dict(pv), size=1, modification_time=0)


def base() -> list[tuple[int, list[object]]]:
    return [(0, [Protocol(1, 2), Metadata("id", "{}", [])])]


def test_newest_action_per_file_wins() -> None:
    s = replay(base() + [  # type: ignore[arg-type]
        (1, [add("a"), add("b")]),
        (2, [Remove("a")]),
        (3, [add("a")]),
        (4, [Remove("b")]),
    ])
    assert sorted(s.files) == ["a"]
    assert sorted(s.tombstones) == ["b"]
    assert s.version == 4


def test_paths_compare_decoded() -> None:
    s = replay(base() + [(1, [add("d=a%20b/f.parquet")]), (2, [Remove("d=a b/f.parquet")])])  # type: ignore[arg-type]
    assert s.files == {}


def test_latest_metadata_protocol_and_txn_win() -> None:
    s = replay(base() + [  # type: ignore[arg-type]
        (1, [Txn("app", 1), Metadata("id", "{}", ["x"])]),
        (2, [Txn("app", 2), Txn("other", 7), Protocol(1, 3)]),
    ])
    assert s.app_txns["app"].version == 2 and s.app_txns["other"].version == 7
    assert s.metadata is not None and s.metadata.partition_columns == ["x"]
    assert s.protocol == Protocol(1, 3)


def test_gap_is_rejected() -> None:
    with pytest.raises(CorruptLogError, match="does not follow"):
        replay(base() + [(2, [add("a")])])  # type: ignore[arg-type]


def test_unknown_action_type_is_ignored_as_the_protocol_asks_of_readers() -> None:
    s = replay(base() + [(1, [UnknownAction("futureThing", {"x": 1}), add("a")])])  # type: ignore[arg-type]
    assert list(s.files) == ["a"] and s.version == 1


def test_cdc_and_domain_metadata_are_accepted() -> None:
    s = replay(base() + [(1, [UnknownAction("cdc", {"path": "x"}),  # type: ignore[arg-type]
                              UnknownAction("domainMetadata", {"domain": "d", "configuration": "{}",
                                                               "removed": False})])])
    assert "d" in s.domains


def test_validate_requires_protocol_and_metadata() -> None:
    s = TableState()
    s.apply(0, [add("a")])
    with pytest.raises(CorruptLogError, match="no protocol"):
        s.validate("t")


@given(st.lists(st.tuples(st.booleans(), st.sampled_from("abcde")), max_size=40))
def test_live_files_match_a_simple_model(ops: list[tuple[bool, str]]) -> None:
    commits: list[tuple[int, list[object]]] = base()
    live: set[str] = set()
    for i, (is_add, path) in enumerate(ops, start=1):
        commits.append((i, [add(path) if is_add else Remove(path)]))
        if is_add:
            live.add(path)
        else:
            live.discard(path)
    assert set(replay(commits).files) == live  # type: ignore[arg-type]


def test_files_are_keyed_by_path_and_deletion_vector_id() -> None:
    # PROTOCOL.md: a logical file is (path, deletionVector.uniqueId); replacing a file's DV is a
    # remove of the old pair and an add of the new one.
    d1 = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 1,
          "sizeInBytes": 36, "cardinality": 2}
    d2 = {**d1, "offset": 45}
    a1 = Add("f", {}, 1, 0, deletion_vector=d1)
    a2 = Add("f", {}, 1, 0, deletion_vector=d2)
    s = replay(base() + [(1, [add("f")]),  # type: ignore[arg-type]
                         (2, [add("f").to_remove(5), a1]),
                         (3, [a1.to_remove(6), a2])])
    assert list(s.files.values()) == [a2]
    assert {r.deletion_vector["offset"] if r.deletion_vector else None
            for r in s.tombstones.values()} == {None, 1}
    # A remove without the DV names another logical file and leaves the DV'd one live.
    s2 = replay(base() + [(1, [a1]), (2, [add("f").to_remove(5)])])  # type: ignore[arg-type]
    assert list(s2.files.values()) == [a1]
