"""A conflicting member never fails an innocent one.

Members are submitted in a known order (each thread starts after the previous one has been
handed to the committer) to a leader that lingers for exactly that many, so the group's
content is known in advance and no test depends on timing.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import deltacommit as dc
from deltacommit.engine.group.threads import GroupCommitPolicy, committed_txn_ids
from deltacommit.io.storage.local import LocalStore

from .common import SCHEMA, actions_of, added, commit_info, data_files, ids_in, rows, txns


def submit_in_order(table: dc.DeltaTable, jobs: list[object]) -> list[object]:
    """Run each callable on its own thread, starting the next only once the previous one's
    transaction has been submitted; return results or exceptions in job order."""
    committer = table.group_committer
    assert committer is not None
    out: list[object] = [None] * len(jobs)
    threads = []
    start = committer.stats.submitted
    for i, job in enumerate(jobs):
        def run(i: int = i, job: object = job) -> None:
            try:
                out[i] = job()  # type: ignore[operator]
            except BaseException as e:
                out[i] = e
        t = threading.Thread(target=run)
        t.start()
        threads.append(t)
        assert committer.wait_submitted(start + i + 1, 60)
    for t in threads:
        t.join(60)
    return out


def two_partitions(uri: str, group: int) -> tuple[dc.DeltaTable, int]:
    """A table with one file in partition 'a' (ids 1) and one in 'b' (ids 2)."""
    t = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    dc.write(t, rows("a", [1]))
    dc.write(t, rows("b", [2]))
    table = dc.DeltaTable(uri, group_commit=GroupCommitPolicy(max_members=group, max_wait=60))
    return table, table.version


def test_a_member_conflicting_with_an_earlier_member_waits_and_fails_alone(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table, v = two_partitions(uri, 3)

    # A rewrites partition 'a'; B appends to 'a' after reading it (so A invalidates B's read);
    # C appends blindly to 'b'.  All three read version v and share operation "WRITE".
    a = table.transaction()
    a.remove(a.scan(predicate="p = 'a'"))
    a.add(data_files(table, "a", [10]))
    b = table.transaction()
    b.scan(predicate="p = 'a'")
    b.add(data_files(table, "a", [11]))
    c = table.transaction()
    c.add(data_files(table, "b", [12]))

    ra, rb, rc = submit_in_order(table, [a.commit, b.commit, c.commit])
    assert isinstance(ra, dc.CommitResult) and isinstance(rc, dc.CommitResult)
    # A and C share the next version; B was moved out of the group, not failed by it, and then
    # failed against A as committed history (A added a file where B read, checked before A's
    # remove of the file B read, in Spark's order).
    assert ra.version == rc.version == v + 1 and ra.group_size == rc.group_size == 2
    assert isinstance(rb, dc.ConcurrentAppendException)
    assert rb.winning_version == v + 1
    stats = table.group_committer.stats  # type: ignore[union-attr]
    assert stats.deferred == 1 and stats.failed == 1
    assert set(committed_txn_ids(commit_info(actions_of(uri, v + 1)))) == {a.txn_id, c.txn_id}
    assert dc.DeltaTable(uri).version == v + 1
    assert ids_in(table) == [2, 10, 12]


def test_members_of_other_operations_wait_for_the_next_version(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table, v = two_partitions(uri, 3)
    w1 = table.transaction()
    w1.add(data_files(table, "a", [20]))
    d = table.transaction("DELETE")
    d.remove(d.scan(predicate="p = 'b'"))
    w2 = table.transaction()
    w2.add(data_files(table, "a", [21]))
    r1, rd, r2 = submit_in_order(table, [w1.commit, d.commit, w2.commit])
    assert isinstance(r1, dc.CommitResult) and isinstance(rd, dc.CommitResult)
    assert isinstance(r2, dc.CommitResult)
    # One commitInfo per version describes all its members: the DELETE gets its own version.
    assert r1.version == r2.version == v + 1 and rd.version == v + 2
    history = {h["version"]: h["operation"] for h in dc.DeltaTable(uri).history(2)}
    assert history == {v + 1: "WRITE", v + 2: "DELETE"}
    assert ids_in(table) == [1, 20, 21]


def test_a_member_conflicting_with_another_process_fails_alone_and_the_rest_rebase(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table, v = two_partitions(uri, 2)
    other = dc.DeltaTable(uri)  # another process, as far as `table` knows

    x = table.transaction()
    x.scan(predicate="p = 'a'")
    x.add(data_files(table, "a", [30]))
    y = table.transaction()
    y.add(data_files(table, "b", [31]))
    other.delete("p = 'a'")  # version v + 1, unknown to `table`

    rx, ry = submit_in_order(table, [x.commit, y.commit])
    assert isinstance(rx, dc.ConcurrentDeleteReadException) and rx.winning_version == v + 1
    assert isinstance(ry, dc.CommitResult)
    assert (ry.version, ry.winners, ry.group_size, ry.attempts) == (v + 2, (v + 1,), 1, 2)
    assert ids_in(table) == [2, 31]


def test_coalesced_rows_are_rewritten_without_a_member_that_fails(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table, v = two_partitions(uri, 2)
    other = dc.DeltaTable(uri)
    dc.write(other, rows("b", [40]), app_id="app", app_version=5)  # unknown to `table`

    r_dup, r_new = submit_in_order(table, [
        lambda: dc.append(table, rows("a", [41]), app_id="app", app_version=5),
        lambda: dc.append(table, rows("a", [42]))])
    # The first append's app version was recorded by the other writer: it is skipped, and the
    # group's file was written again holding only the second append's row.
    assert isinstance(r_dup, dc.WriteResult) and r_dup.skipped
    assert isinstance(r_new, dc.WriteResult) and r_new.version == v + 2 and not r_new.skipped
    assert ids_in(table) == [1, 2, 40, 42]
    actions = actions_of(uri, v + 2)
    assert txns(actions) == {} and len(added(actions)) == 1
    # The discarded file was deleted: every data file on disk is referenced by the log.
    on_disk = {m.path for m in LocalStore(uri).list("p=")}
    live = {f.path for f in dc.DeltaTable(uri).files()}
    assert on_disk == live


def test_same_app_id_in_one_group_commits_once_and_the_rest_are_skipped(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table, v = two_partitions(uri, 6)
    jobs = [lambda i=i: dc.append(table, rows("a", [100 + i]), app_id="ingest", app_version=7)
            for i in range(6)]
    results = submit_in_order(table, jobs)
    assert all(isinstance(r, dc.WriteResult) for r in results), results
    landed = [r for r in results if not r.skipped]  # type: ignore[union-attr]
    assert len(landed) == 1
    table.update()
    assert table.app_version("ingest") == 7
    assert ids_in(table) == [1, 2, 100 + results.index(landed[0])]
    # Exactly one version carries the app id; replays of it later are skipped without a commit.
    carriers = [n for n in range(v + 1, table.version + 1) if "ingest" in txns(actions_of(uri, n))]
    assert len(carriers) == 1
    before = table.version
    again = dc.append(table, rows("a", [999]), app_id="ingest", app_version=7)
    older = dc.write(table, rows("a", [998]), app_id="ingest", app_version=3)
    assert again.skipped and older.skipped and dc.DeltaTable(uri).version == before


def test_distinct_app_ids_share_a_version_each_recorded_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table, v = two_partitions(uri, 4)
    jobs = [lambda i=i: dc.append(table, rows("b", [200 + i]), app_id=f"app-{i}", app_version=1)
            for i in range(4)]
    results = submit_in_order(table, jobs)
    assert {r.version for r in results} == {v + 1}  # type: ignore[union-attr]
    assert txns(actions_of(uri, v + 1)) == {f"app-{i}": 1 for i in range(4)}
    # Next round in a later group: versions 2 for each app, written by `write` (each with its
    # own file), share a version too; replays of version 1 are skipped without submitting.
    table2 = dc.DeltaTable(uri, group_commit=GroupCommitPolicy(max_members=4, max_wait=60))
    jobs = [lambda i=i: dc.write(table2, rows("b", [300 + i]), app_id=f"app-{i}", app_version=2)
            for i in range(4)]
    results = submit_in_order(table2, jobs)
    assert {(r.version, r.skipped) for r in results} == {(v + 2, False)}  # type: ignore[union-attr]
    replays = [dc.append(table2, rows("b", [400 + i]), app_id=f"app-{i}", app_version=1)
               for i in range(4)]
    assert all(r.skipped for r in replays) and dc.DeltaTable(uri).version == v + 2
    assert all(table2.app_version(f"app-{i}") == 2 for i in range(4))
    assert ids_in(table2) == [1, 2, 200, 201, 202, 203, 300, 301, 302, 303]


def test_write_with_the_same_app_id_on_two_threads_lands_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table, _ = two_partitions(uri, 2)
    results = submit_in_order(table, [
        lambda: dc.write(table, rows("a", [50]), app_id="w", app_version=1),
        lambda: dc.write(table, rows("a", [51]), app_id="w", app_version=1)])
    assert [r.skipped for r in results] == [False, True]  # type: ignore[union-attr]
    assert ids_in(table) == [1, 2, 50]
    on_disk = {m.path for m in LocalStore(uri).list("p=")}
    assert on_disk == {f.path for f in dc.DeltaTable(uri).files()}


def test_a_storage_error_reaches_every_member_of_its_group(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)

    class Broken(LocalStore):
        def put_if_absent(self, path: str, data: bytes) -> object:  # type: ignore[override]
            raise dc.StorageError("put-if-absent", path, "disk on fire")

    from deltacommit.io.logstore.conditional import ConditionalPutLogStore

    table = dc.DeltaTable(uri, log_store=ConditionalPutLogStore(Broken(uri)),
                          group_commit=GroupCommitPolicy(max_members=3, max_wait=60))
    results = submit_in_order(table, [lambda i=i: dc.append(table, rows("x", [i]))
                                      for i in range(3)])
    assert all(isinstance(r, dc.StorageError) and "disk on fire" in str(r) for r in results)
    alone = dc.DeltaTable(uri, log_store=ConditionalPutLogStore(Broken(uri)), group_commit=True)
    with pytest.raises(dc.StorageError, match="disk on fire"):
        dc.append(alone, rows("x", [9]))
    assert dc.DeltaTable(uri).version == 0
