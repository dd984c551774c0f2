"""Group commit: concurrent transactions of one process share versions, each with its own result.

Proved by counting: every transaction's actions are in exactly the version its result names,
every version holds exactly the actions of the transactions that name it, and no action is
anywhere else.  Groups are made to form by holding the first commit until everyone has
submitted (no sleeps), or by a policy that lingers for a known number of members.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

import deltacommit as dc
from deltacommit.engine.group.threads import MEMBERS_KEY, GroupCommitPolicy, committed_txn_ids
from deltacommit.io.storage.local import LocalStore

from ..concurrency.hooks import HookedLogStore
from .common import (
    SCHEMA,
    actions_of,
    added,
    commit_file,
    commit_info,
    data_files,
    ids_in,
    rows,
    run_threads,
    sha256,
)

N = 16


def gated_table(uri: str, submitted: int, **kw: object) -> dc.DeltaTable:
    """A group-commit table whose first commit attempt waits until ``submitted`` transactions
    have been handed to its committer: everyone else arrives while a commit is in flight."""
    holder: list[dc.DeltaTable] = []
    first = [True]

    def hold(version: int) -> None:
        if first[0]:
            first[0] = False
            committer = holder[0].group_committer
            assert committer is not None
            assert committer.wait_submitted(submitted, 60), "members never arrived"

    table = dc.DeltaTable(uri, log_store=HookedLogStore(LocalStore(uri), hold), group_commit=True,
                          **kw)  # type: ignore[arg-type]
    holder.append(table)
    return table


def check_versions_hold_exactly_their_members(uri: str, results: list[dc.CommitResult],
                                              files: dict[str, set[str]]) -> dict[int, int]:
    """Every version holds exactly the files of the transactions whose results name it."""
    by_version: dict[int, list[dc.CommitResult]] = {}
    for r in results:
        by_version.setdefault(r.version, []).append(r)
    everywhere: Counter[str] = Counter()
    table = dc.DeltaTable(uri)
    for v in range(1, table.version + 1):
        actions = actions_of(uri, v)
        info = commit_info(actions)
        members = by_version.get(v, [])
        assert set(committed_txn_ids(info)) == {r.txn_id for r in members}
        assert added(actions) == set().union(*(files[r.txn_id] for r in members))
        everywhere.update(added(actions))
        for r in members:
            assert r.group_size == len(members)
            assert r.digest == sha256(commit_file(uri, v))
        if len(members) == 1:
            # A group of one is written as the lone transaction writes it.
            assert info["txnId"] == members[0].txn_id and MEMBERS_KEY not in info
        else:
            assert info[MEMBERS_KEY] == [r.txn_id for r in members] or \
                set(info[MEMBERS_KEY]) == {r.txn_id for r in members}
            assert info["txnId"] not in {r.txn_id for r in members}
            assert info["readVersion"] == min(r.read_version for r in members)
            assert info["operationMetrics"]["numFiles"] == str(len(added(actions)))
    assert all(n == 1 for n in everywhere.values())
    assert set(everywhere) == set().union(*files.values())
    return {v: len(m) for v, m in by_version.items()}


def test_transactions_released_together_share_versions_and_each_result_names_its_own(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    table = gated_table(uri, N)
    files: dict[str, set[str]] = {}

    def work(i: int) -> dc.CommitResult:
        adds = data_files(table, f"p{i % 4}", [i])
        with table.transaction() as txn:
            txn.add(adds)
        files[txn.txn_id] = {a.path for a in adds}
        assert txn.result is not None
        return txn.result

    results = run_threads(N, work)
    assert all(isinstance(r, dc.CommitResult) for r in results), results
    sizes = check_versions_hold_exactly_their_members(uri, results, files)
    # The first commit was held until all N had arrived: after it, at most two more groups
    # (the one its successor took at once, and everyone queued behind that) carry the rest.
    assert len(sizes) <= 3 and max(sizes.values()) > 1
    assert sorted(sizes) == list(range(1, 1 + len(sizes)))
    assert ids_in(table) == list(range(N))
    stats = table.group_committer.stats  # type: ignore[union-attr]
    assert (stats.versions, stats.transactions, stats.failed) == (len(sizes), N, 0)


def test_a_lingering_leader_gathers_a_known_number_of_members_into_one_version(
        tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    table = dc.DeltaTable(uri, group_commit=GroupCommitPolicy(max_members=N, max_wait=60))
    files: dict[str, set[str]] = {}

    def work(i: int) -> dc.CommitResult:
        adds = data_files(table, f"p{i % 3}", [i])
        txn = table.transaction()
        txn.add(adds)
        files[txn.txn_id] = {a.path for a in adds}
        return txn.commit()

    results = run_threads(N, work)
    assert {r.version for r in results} == {1}
    assert check_versions_hold_exactly_their_members(uri, results, files) == {1: N}
    info = dc.DeltaTable(uri).history(1)[0]
    assert info["operation"] == "WRITE" and info["isBlindAppend"] is True
    assert info["operationMetrics"]["numOutputRows"] == str(N)


def test_coalesced_appends_share_one_file_and_one_version(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)
    table = dc.DeltaTable(uri, group_commit=GroupCommitPolicy(max_members=N, max_wait=60))
    results = run_threads(N, lambda i: dc.append(table, rows("x", [i, 100 + i])))
    assert all(isinstance(r, dc.WriteResult) for r in results), results
    assert {(r.version, r.num_files, r.num_rows, r.skipped) for r in results} == {(1, 1, 2, False)}
    actions = actions_of(uri, 1)
    assert len(added(actions)) == 1
    assert set(committed_txn_ids(commit_info(actions))) == {r.txn_id for r in results}
    assert ids_in(table) == sorted([*range(N), *range(100, 100 + N)])


def test_many_threads_many_appends_every_row_exactly_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    table = dc.DeltaTable(uri, group_commit=True)
    appends = 20

    def work(i: int) -> list[dc.WriteResult]:
        out = []
        for k in range(appends):
            if k % 2:
                out.append(dc.append(table, rows(f"p{i % 3}", [i * 1000 + k])))
            else:
                out.append(dc.write(table, rows(f"p{i % 3}", [i * 1000 + k])))
        return out

    results = run_threads(N, work)
    flat = [r for rs in results for r in rs]
    assert len(flat) == N * appends and all(isinstance(r, dc.WriteResult) for r in flat)
    assert ids_in(table) == sorted(i * 1000 + k for i in range(N) for k in range(appends))
    fresh = dc.DeltaTable(uri)
    assert fresh.version == max(r.version for r in flat)
    stats = table.group_committer.stats  # type: ignore[union-attr]
    assert stats.transactions == N * appends and stats.versions == fresh.version
    # Every acknowledged write maps to the version whose commitInfo lists it.
    listed = {t: v for v in range(1, fresh.version + 1)
              for t in committed_txn_ids(commit_info(actions_of(uri, v)))}
    assert all(listed[r.txn_id] == r.version for r in flat)


def test_asyncio_callers_group_through_threads(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)
    # Four callers: asyncio's default thread pool has at least five threads.
    table = dc.DeltaTable(uri, group_commit=GroupCommitPolicy(max_members=4, max_wait=60))

    async def main() -> list[dc.WriteResult]:
        return await asyncio.gather(*(asyncio.to_thread(dc.append, table, rows("x", [i]))
                                      for i in range(4)))

    results = asyncio.run(main())
    assert {r.version for r in results} == {1}
    assert ids_in(table) == list(range(4))


def test_group_commit_options_are_checked(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA)
    with pytest.raises(dc.InvalidArgumentError, match="max_members"):
        GroupCommitPolicy(max_members=0)
    with pytest.raises(dc.InvalidArgumentError, match="max_wait"):
        GroupCommitPolicy(max_wait=-1)
    with pytest.raises(dc.InvalidArgumentError, match="GroupCommitPolicy"):
        dc.DeltaTable(uri, group_commit="yes")  # type: ignore[arg-type]
    with pytest.raises(dc.InvalidArgumentError, match="read-only"):
        dc.DeltaTable(uri, version=0, group_commit=True)
    assert dc.DeltaTable(uri).group_committer is None
