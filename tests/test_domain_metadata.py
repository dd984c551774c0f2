"""Domain metadata: replayed newest-wins per domain, checkpointed, set by transactions, and a
conflict between two concurrent writers of one domain.

Replay is checked against a plain model (hypothesis); checkpoints carry the live domains;
racing writers of one domain prove by counting that exactly one of them commits (each on its
own table object, or through one group committer), while writers of distinct domains all do.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import deltacommit as dc
from deltacommit.errors import ConcurrentModificationException, InvalidArgumentError
from deltacommit.protocol.actions import DomainMetadata, Metadata, Protocol, parse_commit
from deltacommit.protocol.conflicts import (
    IsolationLevel,
    TransactionSummary,
    WinningCommit,
    check_conflicts,
)
from deltacommit.protocol.log.names import commit_path
from deltacommit.protocol.replay import replay

SCHEMA = pa.schema([("id", pa.int64())])
FEATURE = {"delta.feature.domainMetadata": "supported"}


def base() -> list[tuple[int, list[object]]]:
    return [(0, [Protocol(1, 7, None, ["domainMetadata"]), Metadata("i", "{}", [])])]


# --------------------------------------------------------------------------- pure


ops = st.lists(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "delta.x"]),
                                  st.text(max_size=5), st.booleans()), max_size=4), max_size=10)


@given(ops)
def test_replay_keeps_the_newest_action_of_each_domain(commits: list[list[tuple[str, str, bool]]]
                                                        ) -> None:
    model: dict[str, str] = {}
    log = base()
    for v, commit in enumerate(commits, start=1):
        log.append((v, [DomainMetadata(d, c, removed=r) for d, c, r in commit]))
        for d, c, r in commit:
            if r:
                model.pop(d, None)
            else:
                model[d] = c
    state = replay(log)  # type: ignore[arg-type]
    assert {d: str(x["configuration"]) for d, x in state.domains.items()} == model


def summary(domains: set[str]) -> TransactionSummary:
    return TransactionSummary(operation="WRITE", partition_columns=(), partition_types={},
                              isolation_level=IsolationLevel.SERIALIZABLE,
                              domains=frozenset(domains))


def test_two_writers_of_one_domain_conflict_and_of_different_ones_do_not() -> None:
    winner = WinningCommit.from_actions(7, [DomainMetadata("app.a", "1")])
    with pytest.raises(ConcurrentModificationException, match=r"version 7.*\['app\.a'\]"):
        check_conflicts(summary({"app.a"}), winner, "t")
    check_conflicts(summary({"app.b"}), winner, "t")
    check_conflicts(summary(set()), winner, "t")
    # The row-id high-water mark is reassigned on rebase, never a conflict.
    marks = WinningCommit.from_actions(8, [DomainMetadata("delta.rowTracking", "{}")])
    check_conflicts(summary({"delta.rowTracking"}), marks, "t")


# --------------------------------------------------------------------------- one writer


def test_transactions_set_and_remove_domains_and_checkpoints_keep_them(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = dc.DeltaTable.create(uri, SCHEMA, configuration=FEATURE)
    assert t.protocol.writer_features == ["domainMetadata"]
    assert "delta.feature.domainMetadata" not in t.configuration
    with t.transaction() as txn:
        txn.set_domain_metadata("com.example.a", '{"v":1}')
        txn.set_domain_metadata("com.example.b", "plain text")
    with t.transaction() as txn:
        txn.set_domain_metadata("com.example.a", '{"v":2}')
        txn.remove_domain_metadata("com.example.b")
        txn.remove_domain_metadata("com.example.never")  # nothing to remove: no action
    removed = [a for a in parse_commit((tmp_path / "t" / commit_path(2)).read_bytes(), "v2")
               if isinstance(a, DomainMetadata)]
    # A tombstone keeps the configuration it deletes, as the protocol asks.
    assert removed == [DomainMetadata("com.example.a", '{"v":2}'),
                       DomainMetadata("com.example.b", "plain text", removed=True)]
    assert t.snapshot.domains() == {"com.example.a": '{"v":2}'}
    dc.append(uri, pa.table({"id": [1, 2]}))  # appends keep every domain
    dc.DeltaTable(uri).checkpoint()
    (tmp_path / "t" / commit_path(2)).unlink()  # the checkpoint at 3 must carry them
    reloaded = dc.DeltaTable(uri)
    assert reloaded.snapshot.domains() == {"com.example.a": '{"v":2}'}
    assert reloaded.snapshot.domain_metadata("com.example.b") is None
    assert deltalake.DeltaTable(uri).to_pyarrow_table()["id"].to_pylist() == [1, 2]


def test_bad_domain_requests_are_refused_with_the_reason(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = dc.DeltaTable.create(uri, SCHEMA, configuration=FEATURE)
    txn = t.transaction()
    with pytest.raises(InvalidArgumentError, match="system-controlled"):
        txn.set_domain_metadata("delta.rowTracking", '{"rowIdHighWaterMark":99}')
    with pytest.raises(InvalidArgumentError, match="non-empty string"):
        txn.set_domain_metadata("", "x")
    with pytest.raises(InvalidArgumentError, match="must be a string"):
        txn.set_domain_metadata("app.a", {"v": 1})  # type: ignore[arg-type]
    plain = dc.DeltaTable.create(str(tmp_path / "plain"), SCHEMA)
    with pytest.raises(InvalidArgumentError, match="lacks the writer feature domainMetadata"):
        plain.transaction().set_domain_metadata("app.a", "1")
    with pytest.raises(InvalidArgumentError, match=r"delta\.feature\.rowTrackin"):
        dc.DeltaTable.create(str(tmp_path / "bad"), SCHEMA,
                             configuration={"delta.feature.rowTrackin": "supported"})


def test_a_table_gains_the_feature_through_set_properties(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)
    deltalake.write_deltalake(uri, pa.table({"id": [1]}), mode="append")
    t = dc.DeltaTable(uri)
    t.set_properties(FEATURE)
    assert t.protocol.min_writer_version == 7
    assert set(t.protocol.writer_features or []) == {"appendOnly", "invariants", "domainMetadata"}
    with t.transaction() as txn:
        txn.set_domain_metadata("app.a", "1")
    assert dc.DeltaTable(uri).snapshot.domains() == {"app.a": "1"}


# --------------------------------------------------------------------------- racing writers


WRITERS = 6


def _race(uri: str, domain_of: list[str], group_commit: bool
          ) -> tuple[list[dc.CommitResult], list[BaseException]]:
    """WRITERS transactions, all opened on the same version before any commits, released
    together to set their domain."""
    shared = dc.DeltaTable(uri, group_commit=True) if group_commit else None
    tables = [shared or dc.DeltaTable(uri) for _ in range(WRITERS)]
    txns = [t.transaction() for t in tables]
    start = threading.Barrier(WRITERS)
    done: list[dc.CommitResult] = []
    failed: list[BaseException] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        txn = txns[w]
        txn.set_domain_metadata(domain_of[w], f"writer {w}")
        start.wait()
        try:
            r = txn.commit()
        except ConcurrentModificationException as e:
            with lock:
                failed.append(e)
        else:
            with lock:
                done.append(r)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(done) + len(failed) == WRITERS
    return done, failed


@pytest.mark.parametrize("group_commit", [False, True], ids=["racing", "group-commit"])
def test_of_writers_racing_for_one_domain_exactly_one_commits(tmp_path: Path,
                                                              group_commit: bool) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, configuration=FEATURE)
    done, failed = _race(uri, ["app.shared"] * WRITERS, group_commit)
    assert len(done) == 1 and len(failed) == WRITERS - 1
    t = dc.DeltaTable(uri)
    assert t.version == 1 == done[0].version
    winner = parse_commit((tmp_path / "t" / commit_path(1)).read_bytes(), "v1")
    (dm,) = [a for a in winner if isinstance(a, DomainMetadata)]
    assert t.snapshot.domains() == {"app.shared": dm.configuration}
    assert all("app.shared" in str(e) for e in failed)


@pytest.mark.parametrize("group_commit", [False, True], ids=["racing", "group-commit"])
def test_writers_of_distinct_domains_all_commit(tmp_path: Path, group_commit: bool) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, configuration=FEATURE)
    done, failed = _race(uri, [f"app.{w}" for w in range(WRITERS)], group_commit)
    assert not failed and len(done) == WRITERS
    t = dc.DeltaTable(uri)
    assert t.snapshot.domains() == {f"app.{w}": f"writer {w}" for w in range(WRITERS)}
    if not group_commit:
        assert sorted(r.version for r in done) == list(range(1, WRITERS + 1))


@pytest.mark.parametrize("name", ["delta-golden/collations-table", "kernel/crc-full",
                                  "delta-kernel-java/catalog-owned-preview"])
def test_corpus_tables_with_these_features_are_refused_only_for_other_features(
        name: str) -> None:
    """Every corpus table listing domainMetadata, inCommitTimestamp or rowTracking also uses
    a feature deltacommit does not write (collations, clustering, catalogManaged): the refusal
    names that feature alone.  (Copies without it take appends: test_row_tracking.py and
    test_in_commit_timestamps.py.)"""
    from deltacommit.errors import UnsupportedProtocolError
    from deltacommit.protocol.table_config.features import WRITER_FEATURES, check_writable

    log = Path(__file__).parent / "data" / name / "_delta_log" / "00000000000000000000.json"
    protocol = next(Protocol.from_json(json.loads(line)["protocol"])
                    for line in log.read_text().splitlines() if '"protocol"' in line)
    ours = {"domainMetadata", "inCommitTimestamp", "rowTracking"}
    assert ours & set(protocol.writer_features or [])
    with pytest.raises(UnsupportedProtocolError) as e:
        check_writable(name, protocol, None)
    refused = set(protocol.writer_features or []) - WRITER_FEATURES
    assert refused and not refused & ours
    assert all(f in str(e.value) for f in refused)
