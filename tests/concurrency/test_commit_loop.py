"""The commit loop: attempt limit, what a lost race reads, what a retry writes, self-commits."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

import deltacommit as dc
from deltacommit.engine.commit.loop import CATCH_UP_AFTER
from deltacommit.engine.transaction.transaction import CommitPolicy
from deltacommit.errors import VersionExistsError
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.storage import LocalStore
from deltacommit.protocol.log.names import commit_path
from deltacommit.runtime.clock import ManualClock, RandomSource

from .hooks import CountingStore, HookedLogStore
from .ops import BLIND, create_table, data_files, ids


def commit_blind(table: dc.DeltaTable, part: str) -> dc.CommitResult:
    table.update()
    with table.transaction() as txn:
        txn.add(data_files(table, [(part, next(ids), BLIND)]))
    assert txn.result is not None
    return txn.result


def competing_table(uri: str, competitor: dc.DeltaTable, part: str = "b", *, times: int | None = None,
                    **kw: object) -> tuple[dc.DeltaTable, HookedLogStore]:
    """A table whose every commit attempt (or the first ``times``) is preceded by a competing
    blind append to ``part`` from ``competitor``: each of those attempts loses the race."""
    count = [0]

    def compete(version: int) -> None:
        if times is None or count[0] < times:
            count[0] += 1
            commit_blind(competitor, part)

    log_store = HookedLogStore(LocalStore(uri), compete)
    table = dc.DeltaTable(uri, log_store=log_store, clock=kw.pop("clock", ManualClock()),
                          random=RandomSource(7), **kw)  # type: ignore[arg-type]
    return table, log_store


def test_attempt_limit_ends_in_commit_failed_error(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    create_table(uri, "Serializable")
    clock = ManualClock()
    table, log_store = competing_table(uri, dc.DeltaTable(uri), clock=clock,
                                       policy=CommitPolicy(max_attempts=3))
    txn = table.transaction()
    txn.scan(predicate="p = 'a'")
    txn.add(data_files(table, [("a", 99, 1)]))
    before = clock.monotonic()
    with pytest.raises(dc.CommitFailedError) as info:
        txn.commit()
    message = str(info.value)
    assert "after 3 attempts" in message and uri in message and "max_attempts" in message
    assert "rebased over 3 concurrent commits, none conflicting" in message
    # Three attempts at three successive versions, each beaten by a competitor (who do not
    # conflict: they append to partition 'b', this transaction read 'a').
    assert log_store.attempts == [2, 3, 4]
    fresh = dc.DeltaTable(uri)
    assert fresh.version == 4
    assert all(h.get("txnId") != txn.txn_id for h in fresh.history())
    # It backed off between attempts, on the injected clock (the test never sleeps).
    assert clock.monotonic() > before
    with pytest.raises(dc.InvalidArgumentError, match="max_attempts"):
        CommitPolicy(max_attempts=0)


def test_a_conflicting_competitor_fails_the_first_retry(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    create_table(uri, "Serializable")
    other = dc.DeltaTable(uri)

    def delete_a(version: int) -> None:
        other.update()
        other.delete("p = 'a'")

    table = dc.DeltaTable(uri, log_store=HookedLogStore(LocalStore(uri), delete_a),
                          clock=ManualClock(), policy=CommitPolicy(max_attempts=3))
    with pytest.raises(dc.ConcurrentDeleteReadException, match=r"version 2 \(DELETE\)"), \
            table.transaction("DELETE") as txn:
        txn.remove(txn.scan(predicate="p = 'a'"))


def test_a_lost_race_reads_only_the_commits_since_the_last_version_seen(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    create_table(uri, "Serializable")
    other = dc.DeltaTable(uri)
    for _ in range(20):
        commit_blind(other, "b")
    counting = CountingStore(LocalStore(uri))
    table = dc.DeltaTable(uri, log_store=ConditionalPutLogStore(counting))
    assert table.version == 21
    txn = table.transaction()
    txn.scan(predicate="p = 'a'")
    txn.add(data_files(table, [("a", 99, 1)]))
    for _ in range(3):
        commit_blind(other, "b")
    counting.calls.clear()
    result = txn.commit()
    # The first loss reads 22 alone and claims 23 at once; losing that as well (a writer this
    # far behind), it reads what came since.  One GET per missed commit and one that finds the
    # end of the log: no listing, no checkpoint, no replay from the start.
    assert (result.version, result.attempts, result.winners) == (25, 3, (22, 23, 24))
    assert counting.calls == [("get", commit_path(v)) for v in (22, 23, 24, 25)]


def test_a_retry_regenerates_commit_info_but_keeps_read_version(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    create_table(uri, "Serializable")
    table, log_store = competing_table(uri, dc.DeltaTable(uri), times=2)
    txn = table.transaction()
    txn.add(data_files(table, [("a", 99, BLIND)]))
    result = txn.commit()
    assert (result.version, result.attempts, result.read_version) == (4, 3, 1)
    infos = [json.loads(data.splitlines()[0])["commitInfo"] for data in log_store.written]
    assert len(infos) == 3
    assert {i["readVersion"] for i in infos} == {1}
    assert {i["txnId"] for i in infos} == {result.txn_id}
    assert {i["isBlindAppend"] for i in infos} == {True}
    stamps = [i["timestamp"] for i in infos]
    assert stamps == sorted(stamps) and stamps[0] < stamps[-1]
    landed = dc.DeltaTable(uri).history(1)[0]
    assert landed["timestamp"] == stamps[-1] and landed["readVersion"] == 1


class _AckLostLogStore(ConditionalPutLogStore):
    """Writes the first commit, then reports the version as taken: what a request retried
    after a lost response sees."""

    def __init__(self, store: LocalStore) -> None:
        super().__init__(store)
        self.calls = 0

    def write_commit(self, version: int, data: bytes) -> None:
        self.calls += 1
        super().write_commit(version, data)
        if self.calls == 1:
            raise VersionExistsError(self.table_uri, version)


def test_an_own_commit_reported_as_taken_is_not_made_twice(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    create_table(uri, "Serializable")
    log_store = _AckLostLogStore(LocalStore(uri))
    table = dc.DeltaTable(uri, log_store=log_store, clock=ManualClock())
    with table.transaction() as txn:
        txn.add(data_files(table, [("a", 99, BLIND)]))
    assert txn.result is not None
    assert (txn.result.version, txn.result.attempts) == (2, 1)
    assert log_store.calls == 1
    fresh = dc.DeltaTable(uri)
    assert fresh.version == 2
    body = (Path(uri) / commit_path(2)).read_bytes()
    assert hashlib.sha256(body).hexdigest() == txn.result.digest
    assert sorted(fresh.to_arrow().column("id").to_pylist()) == [1, 2, 99]


def test_backoff_is_full_jitter_under_a_capped_exponential_ceiling() -> None:
    policy = CommitPolicy(backoff_base=0.01, backoff_cap=0.1)
    assert policy.backoff(1, 0.0) == 0.0
    assert policy.backoff(1, 0.5) == pytest.approx(0.005)
    assert policy.backoff(3, 1.0) == pytest.approx(0.04)
    assert policy.backoff(50, 1.0) == pytest.approx(0.1)
    with pytest.raises(dc.InvalidArgumentError, match="backoff"):
        CommitPolicy(backoff_base=1.0, backoff_cap=0.5)


def test_a_transaction_may_override_the_isolation_level_but_not_to_snapshot(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table, _ = create_table(uri, "Serializable")
    assert table.transaction().summary().isolation_level is dc.IsolationLevel.SERIALIZABLE
    txn = table.transaction(isolation_level="writeSerializable")
    assert txn.summary().isolation_level is dc.IsolationLevel.WRITE_SERIALIZABLE
    with pytest.raises(dc.InvalidArgumentError, match=r"SnapshotIsolation.*Serializable"):
        table.transaction(isolation_level="SnapshotIsolation")


class _Pauses(ManualClock):
    """A manual clock on which ``during_pause`` runs in the first sleep."""

    def __init__(self, during_pause: Callable[[], object]) -> None:
        super().__init__()
        self.during_pause = during_pause
        self.pauses: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        if len(self.pauses) == 1:
            self.during_pause()
        super().sleep(seconds)


class _HalfDraws(RandomSource):
    """Every jitter draw is one half: each backoff is half its ceiling."""

    def uniform(self, low: float, high: float) -> float:
        return (low + high) / 2


@pytest.mark.parametrize("ceiling", [0.2, 0.004])
def test_a_lost_race_reads_the_versions_that_beat_it_once_after_a_long_pause(
        tmp_path: Path, ceiling: float) -> None:
    uri = str(tmp_path / "t")
    create_table(uri, "Serializable")
    other = dc.DeltaTable(uri)
    counting = CountingStore(LocalStore(uri))
    attempts = []

    def beaten(version: int) -> None:  # the first attempt, at version 2, loses to 2
        attempts.append(version)
        if len(attempts) == 1:
            commit_blind(other, "b")

    clock = _Pauses(lambda: commit_blind(other, "b"))  # and 3 lands during the first pause
    table = dc.DeltaTable(uri, log_store=HookedLogStore(counting, beaten), clock=clock,
                          random=_HalfDraws(7),
                          policy=CommitPolicy(backoff_base=ceiling, backoff_cap=ceiling))
    txn = table.transaction()
    txn.add(data_files(table, [("a", next(ids), BLIND)]))
    counting.calls.clear()
    result = txn.commit()
    gets = [int(p[len("_delta_log/"):][:20]) for op, p in counting.calls
            if op == "get" and p.endswith(".json") and p.startswith("_delta_log/0")]
    if ceiling / 2 >= CATCH_UP_AFTER:
        # The pause comes first: 2 and 3 are each read once, after it (and 4 found absent),
        # and the next attempt lands at 4.
        assert clock.pauses == [ceiling / 2]
        assert (result.version, result.attempts, result.winners) == (4, 2, (2, 3))
        assert attempts == [2, 4] and gets == [2, 3, 4]
    else:
        # A pause too short for others to commit much: 2 alone is read at once (the next
        # attempt is the probe for 3), and the attempt after the pause loses to 3, committed
        # during it after all; that second loss in a row reads 3 and finds 4 absent.
        assert clock.pauses == [ceiling / 2] * 2
        assert (result.version, result.attempts, result.winners) == (4, 3, (2, 3))
        assert attempts == [2, 3, 4] and gets == [2, 3, 4]
