"""Fleet-wide group commit's hints, poisoned: every record is checked against the log before a
version is claimed on it, and a member that conflicts fails alone.

Local tables (the protocol is the store's; the S3 tests run it on moto for both mechanisms).
A published transaction is made with ``publish_only`` (its writer publishes and does not take
part in a round); another writer's commit then wins the round and decides what it includes."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pytest

import deltacommit as dc
from deltacommit.engine.commit.commit_info import committed_txn_ids
from deltacommit.engine.group.fleet import pace, records
from deltacommit.engine.group.fleet import round as fleet_round
from deltacommit.engine.group.fleet.pace import Pace
from deltacommit.engine.group.fleet.policy import FleetPolicy
from deltacommit.errors import ConcurrentAppendException
from deltacommit.protocol.fleet.record import FLEET_DIR, record_path, round_path

from .helpers import FLEET, SCHEMA, publish_only, rows, staged_append


def _table(tmp_path: Path, name: str = "t") -> dc.DeltaTable:
    return dc.DeltaTable.create(str(tmp_path / name), SCHEMA, configuration=FLEET)


def _root(table: dc.DeltaTable) -> Path:
    local = table.store.local_path("_delta_log")
    assert local is not None
    return Path(local).parent


def _carried(table: dc.DeltaTable, version: int) -> tuple[str, ...]:
    [c] = dc.DeltaTable(table.uri).log.known_commits(version, version)
    return committed_txn_ids(c.commit_info)


def _counts(table: dc.DeltaTable) -> Counter[tuple[int, int]]:
    return Counter((r["writer"], r["batch"]) for r in dc.DeltaTable(table.uri).to_arrow()
                   .to_pylist())


def test_a_published_transaction_lands_with_the_round_winner_and_its_owner_learns_it(
        tmp_path: Path) -> None:
    table = _table(tmp_path)
    staged = staged_append(table, rows(1, 0))
    publish_only(table, staged)
    r = dc.write(table.uri, rows(2, 0))
    assert set(_carried(table, r.version)) == {staged.txn_id, r.txn_id}
    # The owner carries on: it finds its transaction in the log, committed once.
    result, made = fleet_round.commit(table.log, staged, table.policy, table.clock,
                                      table.random, FleetPolicy())
    assert result.version == r.version and (made is None or made.version == r.version)
    assert _counts(table) == {(1, 0): 1, (2, 0): 1}
    # The records are deleted once landed; the round's key stays (the newest few do).
    assert records.settle()
    assert os.listdir(_root(table) / FLEET_DIR) == [round_path(r.version).split("/")[1]]


def test_a_conflicting_member_fails_alone(tmp_path: Path) -> None:
    table = _table(tmp_path)
    dc.write(table.uri, rows(0, 0))
    table.update()
    doomed = staged_append(table, rows(1, 0), whole_table=True)
    publish_only(table, doomed)
    innocent = staged_append(table, rows(3, 0))
    publish_only(table, innocent)
    # A writer outside the fleet appends: a winner the whole-table reader conflicts with.
    other = dc.DeltaTable(table.uri, policy=dc.CommitPolicy())
    with other.transaction("WRITE") as txn:
        txn.add(staged_append(other, rows(2, 0)).adds)
    r = dc.write(table.uri, rows(4, 0))
    carried = _carried(table, r.version)
    assert innocent.txn_id in carried and doomed.txn_id not in carried
    with pytest.raises(ConcurrentAppendException):
        fleet_round.commit(table.log, doomed, table.policy, table.clock, table.random,
                           FleetPolicy())
    assert _counts(table) == {(0, 0): 1, (2, 0): 1, (3, 0): 1, (4, 0): 1}
    assert not (_root(table) / record_path(doomed.txn_id)).exists()


def _poisoned_round(table: dc.DeltaTable) -> int:
    """A write whose round finds the poison beside a clean published transaction (which
    proves the round did include what it could); the version it landed in."""
    fresh = dc.DeltaTable(table.uri)
    clean = staged_append(fresh, rows(7, 7))
    publish_only(fresh, clean)
    r = dc.write(table.uri, rows(9, 9))
    assert set(_carried(table, r.version)) == {r.txn_id, clean.txn_id}
    return r.version


def _record(table: dc.DeltaTable, txn_id: str) -> Path:
    return _root(table) / record_path(txn_id)


def test_forged_records_are_skipped(tmp_path: Path) -> None:
    table = _table(tmp_path)
    folder = _root(table) / FLEET_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    (folder / "garbage.json").write_bytes(b"{not json")
    (folder / "deep.json").write_bytes(b"[" * 100_000)
    staged = staged_append(table, rows(1, 0))
    publish_only(table, staged)
    body = json.loads(_record(table, staged.txn_id).read_bytes())
    body["readDigest"] = "0" * 64  # a history this table never had
    _record(table, staged.txn_id).write_text(json.dumps(body))
    _poisoned_round(table)
    assert (1, 0) not in _counts(table)


def test_a_record_copied_from_another_table_is_skipped(tmp_path: Path) -> None:
    source = _table(tmp_path, "a")
    target = _table(tmp_path, "b")
    staged = staged_append(source, rows(1, 0))
    publish_only(source, staged)
    (_root(target) / FLEET_DIR).mkdir(mode=0o700, exist_ok=True)
    shutil.copy(_record(source, staged.txn_id), _record(target, staged.txn_id))
    _poisoned_round(target)
    assert (1, 0) not in _counts(target)


def test_another_users_record_is_skipped(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to give a file to another user")  # pragma: no cover
    table = _table(tmp_path)
    staged = staged_append(table, rows(1, 0))
    publish_only(table, staged)
    os.chown(_record(table, staged.txn_id), 4242, 4242)
    _poisoned_round(table)
    assert (1, 0) not in _counts(table)


def test_an_aged_record_is_skipped_and_deleted(tmp_path: Path) -> None:
    table = _table(tmp_path)
    staged = staged_append(table, rows(1, 0))
    publish_only(table, staged, FleetPolicy(bound_versions=1))
    dc.write(table.uri, rows(8, 8), configuration=None)  # may land it: its bound allows one
    table.update()
    late = staged_append(table, rows(2, 0))
    publish_only(table, late, FleetPolicy(bound_versions=1))
    body = json.loads(_record(table, late.txn_id).read_bytes())
    body["deadlineMs"] = 1  # long past
    _record(table, late.txn_id).write_text(json.dumps(body))
    os.chmod(_record(table, late.txn_id), 0o600)
    _poisoned_round(table)
    assert (2, 0) not in _counts(table)
    # Deleted after the round lands, off the committer's way (``records.delete_soon``).
    assert records.settle()
    assert not _record(table, late.txn_id).exists()  # past its deadline by the margin


def test_a_deleted_record_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(tmp_path)
    staged = staged_append(table, rows(1, 0))
    publish_only(table, staged)
    from deltacommit.engine.group.fleet import records

    listing = records.listing

    def listed_then_deleted(store: object) -> list[object]:
        out = listing(store)  # type: ignore[arg-type]
        _record(table, staged.txn_id).unlink()
        return out  # type: ignore[return-value]

    monkeypatch.setattr(records, "listing", listed_then_deleted)
    _poisoned_round(table)
    assert (1, 0) not in _counts(table)


def test_a_record_of_a_rolled_back_version_is_skipped(tmp_path: Path) -> None:
    table = _table(tmp_path)
    dc.write(table.uri, rows(0, 0))
    table.update()
    staged = staged_append(table, rows(1, 0))
    publish_only(table, staged)
    # Version 1 is rolled back and written again by someone else: the record's read version
    # names a history the table no longer has.
    log = _root(table) / "_delta_log"
    (log / f"{1:020d}.json").unlink()
    dc.DeltaTable(table.uri, policy=dc.CommitPolicy())  # reads version 0 only
    fresh = dc.DeltaTable(table.uri)
    with fresh.transaction("WRITE") as txn:
        txn.add(staged_append(fresh, rows(5, 5)).adds)
    _poisoned_round(table)
    assert (1, 0) not in _counts(table)


def test_with_the_property_off_nothing_is_published(tmp_path: Path) -> None:
    table = dc.DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    dc.write(table.uri, rows(1, 0))
    assert not (_root(table) / FLEET_DIR).exists()


def test_the_property_is_typed_and_settable(tmp_path: Path) -> None:
    table = dc.DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    with pytest.raises(dc.errors.InvalidArgumentError, match=r"groupCommit\.fleet"):
        table.set_properties({"deltacommit.groupCommit.fleet": "maybe"})
    table.set_properties({"deltacommit.groupCommit.fleet": "true"})
    assert dc.DeltaTable(table.uri).table_config.group_commit_fleet
    staged = staged_append(table, rows(1, 0))
    publish_only(table, staged)
    r = dc.write(table.uri, rows(2, 0))
    assert set(_carried(table, r.version)) == {staged.txn_id, r.txn_id}


def test_one_table_object_joins_with_group_commit_policy_fleet(tmp_path: Path) -> None:
    plain = dc.DeltaTable.create(str(tmp_path / "t"), SCHEMA)
    staged = staged_append(plain, rows(1, 0))
    publish_only(plain, staged)
    table = dc.DeltaTable(plain.uri, group_commit=dc.GroupCommitPolicy(fleet=True))
    r = dc.write(table, rows(2, 0))
    assert set(_carried(table, r.version)) == {staged.txn_id, r.txn_id}
    r = dc.append(table, rows(3, 0))
    assert _counts(table) == {(1, 0): 1, (2, 0): 1, (3, 0): 1}


def test_a_writer_behind_never_wins_the_round_of_a_version_that_exists(tmp_path: Path) -> None:
    """The newest round keys are kept: a writer that knows an older version finds the key of
    one that exists taken (and learns of the version) instead of leading a round whose claim
    must lose, beside the round that commits the next."""
    table = _table(tmp_path)
    behind = dc.DeltaTable(table.uri)
    staged = staged_append(behind, rows(1, 0))
    r = dc.write(table.uri, rows(2, 0))
    assert records.settle()
    assert behind.version == r.version - 1
    assert not behind.log_store.claim_fleet_round(r.version)
    result, _ = fleet_round.commit(behind.log, staged, behind.policy, behind.clock,
                                   behind.random, FleetPolicy())
    assert (result.version, result.attempts) == (r.version + 1, 1)
    assert _counts(table) == {(1, 0): 1, (2, 0): 1}


def test_the_pace_times_looks_and_lingering_only() -> None:
    """Before any round is seen a waiter looks at once; then shortly before the version is
    due.  A round's committer lingers only after a version of several transactions, from
    when the process learned of it (else from when the writer did)."""
    p = Pace()
    assert p.first_look(10.0) == 10.0
    assert p.linger_until(4, 6, 3.0, 1.0) == 0.0  # no round trip measured yet
    p.saw_round(0.2)
    p.saw_request(0.05)
    assert p.first_look(10.0) == pytest.approx(10.12)
    p.saw_round(2.0)  # a round waited out (a stopped winner) is not how rounds go
    assert p.round == pytest.approx(0.2)
    p.rtt = 0.01  # a look waits at most a few round trips
    assert p.first_look(10.0) == pytest.approx(10.06)
    p.rtt = 0.02
    p.learned(4, 5.0)
    p.learned(3, 7.0)  # an older version learned later changes nothing
    assert p.linger_until(4, 1, 3.0, 1.0) == 0.0  # a version of one: no fan-in to wait for
    assert p.linger_until(4, 6, 3.0, 1.0) == pytest.approx(5.06)
    assert p.linger_until(5, 6, 3.0, 1.0) == pytest.approx(1.06)
    assert p.linger_until(4, 6, 0.0, 1.0) == 0.0


def test_a_writer_that_learned_the_version_before_a_round_ago_waits_for_the_next() -> None:
    """Storing its data and publishing its record take a writer most of a round after it
    learned of the newest version: losing the next round's key then, it is current (its first
    look waits until the version is due), not behind (looking at once, it would find nothing
    several times over).  One that learned of it rounds ago is behind."""
    p = Pace()
    assert not p.current(10.0, 10.0)  # no round seen yet: look at once
    p.saw_round(0.2)
    assert p.current(10.15, 10.0)  # three quarters of a round after learning of it
    assert p.current(10.25, 10.0)
    assert not p.current(10.4, 10.0)  # two rounds after: the round may be long over


def test_a_forged_pace_delays_a_waiter_by_the_patience_at_most(tmp_path: Path) -> None:
    """The pace is timing only: with its round trips forged to days, a waiter whose round's
    winner stopped (the key taken, no version) still looks last at the patience, finds
    nothing, and commits its transaction itself, once."""
    table = _table(tmp_path)
    dc.write(table.uri, rows(0, 0))
    writer = dc.DeltaTable(table.uri,
                           policy=dc.CommitPolicy(turn_patience=0.3, host_turns=False))
    staged = staged_append(writer, rows(1, 0))
    forged = pace.of(writer.uri)
    forged.rtt = forged.round = 86_400.0
    forged.learned(writer.version, writer.clock.monotonic())
    version = writer.version + 1
    assert writer.log_store.claim_fleet_round(version)  # a winner that stopped
    result, _ = fleet_round.commit(writer.log, staged, writer.policy, writer.clock,
                                   writer.random, FleetPolicy())
    assert result.version == version
    assert _counts(table) == {(0, 0): 1, (1, 0): 1}
