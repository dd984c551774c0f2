"""Group commit across the processes of one host (``GroupCommitPolicy(processes=True)``).

Real processes on a real socket: one serves, the others send it their transactions.  The
serving process is killed (``os._exit``) before and after committing a sender's transaction;
the sender then finds out from the log and never commits twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import deltacommit as dc
from deltacommit.engine.group.threads import GroupCommitPolicy, committed_txn_ids
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.storage.faults import FaultPlan
from deltacommit.io.storage.local import LocalStore
from deltacommit.protocol.log.names import commit_path

from ..concurrency.hooks import HookedLogStore
from ..write_paths import POLICY, Rig
from .common import SCHEMA, actions_of, commit_info, ids_in, rows

SENDERS = 3

# A process that opens the table with host-wide group commit and commits one transaction
# (its own data file), then prints its result or error as JSON.
_SENDER = """
import json, sys
import pyarrow as pa
import deltacommit as dc
from deltacommit.engine.group.threads import GroupCommitPolicy
from deltacommit.io.datafiles import write_data_files
uri, sockets, ident, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
schema = pa.schema([("p", pa.string()), ("id", pa.int64())])
table = dc.DeltaTable(uri, group_commit=GroupCommitPolicy(processes=True, socket_dir=sockets))
txn = table.transaction()
if mode == "reads-a":
    txn.scan(predicate="p = 'a'")
print("ready", flush=True)
sys.stdin.readline()
data = pa.table({"p": ["a"], "id": [ident]}, schema=schema)
txn.add(write_data_files(table.log_store.store, data, table.partition_columns,
                         clock=table.clock, random=table.random))
try:
    r = txn.commit()
    out = {"version": r.version, "txn_id": r.txn_id, "group_size": r.group_size,
           "serving": table.group_committer.serving, "table_version": table.version}
except dc.DeltaCommitError as e:
    out = {"error": type(e).__name__, "message": str(e),
           "winning_version": getattr(e, "winning_version", None)}
print(json.dumps(out), flush=True)
"""

# A process that serves: it commits one transaction (so it holds the lock and listens), says
# so, and then dies at a chosen point of the next commit it makes for someone else.
_SERVER = """
import os, sys
import pyarrow as pa
import deltacommit as dc
from deltacommit.engine.group.threads import GroupCommitPolicy
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.storage.faults import FaultPlan
from deltacommit.io.storage.local import LocalStore
from deltacommit.protocol.log.names import commit_path
uri, sockets, when = sys.argv[1], sys.argv[2], sys.argv[3]
schema = pa.schema([("p", pa.string()), ("id", pa.int64())])

class Dying(ConditionalPutLogStore):
    def write_commit(self, version, data):
        if version >= 2 and when == "before":
            os._exit(17)
        super().write_commit(version, data)
        if version >= 2 and when == "after":
            os._exit(17)

table = dc.DeltaTable(uri, log_store=Dying(LocalStore(uri)),
                      group_commit=GroupCommitPolicy(processes=True, socket_dir=sockets))
dc.write(table, pa.table({"p": ["b"], "id": [1]}, schema=schema))
assert table.group_committer.serving
print("serving", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def sockets() -> Iterator[str]:
    """A short private directory for the sockets (Unix socket paths are limited in length)."""
    with tempfile.TemporaryDirectory(prefix="dc-") as d:
        yield d


def start(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def test_processes_send_their_transactions_to_one_committer(tmp_path: Path, sockets: str) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    holder: list[dc.DeltaTable] = []
    first = [True]

    def hold(version: int) -> None:
        # This process's own first commit waits until every sender's transaction has arrived.
        if first[0]:
            first[0] = False
            assert holder[0].group_committer.wait_submitted(1 + SENDERS, 60)  # type: ignore[union-attr]

    table = dc.DeltaTable(uri, log_store=HookedLogStore(LocalStore(uri), hold),
                          group_commit=GroupCommitPolicy(processes=True, socket_dir=sockets))
    holder.append(table)
    committer = table.group_committer
    assert committer is not None and committer.shares_processes
    senders = [start(_SENDER, uri, sockets, str(100 + i), "blind") for i in range(SENDERS)]
    for p in senders:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    own: list[dc.WriteResult] = []
    writer = threading.Thread(target=lambda: own.append(dc.write(table, rows("b", [1]))))
    writer.start()
    assert committer.wait_submitted(1, 60)
    assert committer.serving
    for p in senders:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    results = []
    for p in senders:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        results.append(json.loads(out.strip().splitlines()[-1]))
    writer.join(60)
    assert all("version" in r and not r["serving"] for r in results), results
    # Every sender's transaction is in exactly the version its result names; the senders'
    # tables were kept current by the answers, without reading the log.
    versions = {r["version"] for r in results} | {own[0].version}
    assert len(versions) <= 3 < 1 + SENDERS
    for r in results:
        assert r["txn_id"] in committed_txn_ids(commit_info(actions_of(uri, r["version"])))
        assert r["table_version"] >= r["version"]
    assert ids_in(table) == [1, 100, 101, 102]
    assert committer.stats.transactions == 1 + SENDERS
    committer.close()
    assert not committer.serving


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_sender_whose_committer_dies_commits_exactly_once(tmp_path: Path, sockets: str,
                                                           when: str) -> None:
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])  # version 0
    server = start(_SERVER, uri, sockets, when)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "serving"
        table = dc.DeltaTable(uri, group_commit=GroupCommitPolicy(processes=True,
                                                                   socket_dir=sockets))
        result = dc.write(table, rows("a", [7]))
    finally:
        server.wait(30)
    assert server.returncode == 17  # it died inside the commit it made for us
    # "after": the version it wrote holds our transaction, found in the log; "before": nothing
    # was written, so this process committed it.  Either way: version 2, once.
    assert result.version == 2 and dc.DeltaTable(uri).version == 2
    assert committed_txn_ids(commit_info(actions_of(uri, 2))) == (result.txn_id,)
    assert ids_in(table) == [1, 7]
    # With the dead committer's lock released, the next commit makes this process serve.
    dc.write(table, rows("a", [8]))
    committer = table.group_committer
    assert committer is not None and committer.serving
    assert ids_in(table) == [1, 7, 8]
    committer.close()


def test_a_conflict_reaches_the_sender_as_its_own_exception(tmp_path: Path, sockets: str) -> None:
    uri = str(tmp_path / "t")
    t = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    dc.write(t, rows("a", [1]))
    table = dc.DeltaTable(uri, group_commit=GroupCommitPolicy(processes=True, socket_dir=sockets))
    dc.write(table, rows("b", [2]))  # this process serves from now on
    assert table.group_committer.serving  # type: ignore[union-attr]
    sender = start(_SENDER, uri, sockets, "50", "reads-a")
    assert sender.stdout is not None and sender.stdout.readline().strip() == "ready"
    table.delete("p = 'a'")  # version 3 removes the file the sender read
    out, _ = sender.communicate("go\n", timeout=60)
    answer = json.loads(out.strip().splitlines()[-1])
    assert answer["error"] == "ConcurrentAppendException" or \
        answer["error"] == "ConcurrentDeleteReadException", answer
    assert answer["winning_version"] == 3 and uri in answer["message"]
    assert ids_in(table) == [2]
    table.group_committer.close()  # type: ignore[union-attr]


def test_a_sender_that_read_a_version_its_committer_has_not_read_commits(
        tmp_path: Path, sockets: str) -> None:
    """Another host's writer commits a version that the sending process reads and the
    serving process's table object has not: the sender read no rolled-back version, and its
    transaction commits after it (the committer reads what it had not yet)."""
    uri = str(tmp_path / "t")
    dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"])
    table = dc.DeltaTable(uri, group_commit=GroupCommitPolicy(processes=True, socket_dir=sockets))
    dc.write(table, rows("b", [2]))  # this process serves from now on
    assert table.group_committer.serving  # type: ignore[union-attr]
    # Another host's writer: it takes no turn of this host, so hands the serving process
    # nothing of version 2.
    dc.write(dc.DeltaTable(uri, policy=dc.CommitPolicy(host_turns=False)), rows("c", [3]))
    assert table.version == 1
    sender = start(_SENDER, uri, sockets, "50", "blind")
    assert sender.stdout is not None and sender.stdout.readline().strip() == "ready"
    out, _ = sender.communicate("go\n", timeout=60)
    answer = json.loads(out.strip().splitlines()[-1])
    assert answer.get("version") == 3 and answer["serving"] is False, answer
    assert ids_in(dc.DeltaTable(uri)) == [2, 3, 50]
    table.group_committer.close()  # type: ignore[union-attr]


# A process that upserts ``keys`` even ids (0, 2, 4, ...) into partition-less rows through the
# host's committer, stopping once staged until told to go on, then prints its outcome as JSON.
_MERGER = """
import json, sys
import pyarrow as pa
import deltacommit as dc
from deltacommit.engine.group.threads import GroupCommitPolicy
from deltacommit.engine.transaction.transaction import Transaction
uri, sockets, keys = sys.argv[1], sys.argv[2], int(sys.argv[3])
table = dc.DeltaTable(uri, group_commit=GroupCommitPolicy(processes=True, socket_dir=sockets))
real = Transaction.commit
def commit(txn):
    print("staged", flush=True)
    sys.stdin.readline()
    return real(txn)
Transaction.commit = commit
source = pa.table({"p": ["a"] * keys, "id": list(range(0, 2 * keys, 2))},
                  schema=pa.schema([("p", pa.string()), ("id", pa.int64())]))
try:
    (table.merge(source, "t.id = s.id", "s", "t").when_matched_update_all()
     .when_not_matched_insert_all().execute())
    out = {"version": table.version, "serving": table.group_committer.serving}
except dc.DeltaCommitError as e:
    out = {"error": type(e).__name__}
print(json.dumps(out), flush=True)
"""


@pytest.mark.parametrize(("appended", "conflict"), [(1001, False), (1000, True)])
def test_an_upsert_of_many_keys_is_sent_to_the_host_s_committer_and_checked_there(
        tmp_path: Path, sockets: str, appended: int, conflict: bool) -> None:
    """An upsert of more keys than prune its files as a list (``KEYS_PRUNED_BY``) records the
    function that builds its read as that list: it travels to the serving process with the
    transaction, which checks it there against a winner's new row (an odd key between the
    upsert's: no conflict; one of its keys: a conflict reaching the sender)."""
    from deltacommit.ops.rowlevel import KEYS_PRUNED_BY

    uri = str(tmp_path / "t")
    keys = KEYS_PRUNED_BY + 1
    dc.DeltaTable.create(uri, SCHEMA, configuration={"delta.enableDeletionVectors": "true",
                                                     "delta.enableRowTracking": "true"})
    table = dc.DeltaTable(uri, group_commit=GroupCommitPolicy(processes=True, socket_dir=sockets))
    dc.write(table, rows("b", list(range(40))))  # this process serves from now on
    assert table.group_committer.serving  # type: ignore[union-attr]
    sender = start(_MERGER, uri, sockets, str(keys))
    assert sender.stdout is not None and sender.stdout.readline().strip() == "staged"
    dc.write(table, rows("c", [appended]))
    out, _ = sender.communicate("go\n", timeout=120)
    assert sender.returncode == 0, out
    answer = json.loads(out.strip().splitlines()[-1])
    if conflict:
        assert answer == {"error": "ConcurrentAppendException"}
        assert ids_in(table) == [*range(40), appended]
    else:
        assert answer.get("serving") is False, answer
        assert ids_in(table) == sorted([*range(40), *range(40, 2 * keys, 2), appended])
    table.group_committer.close()  # type: ignore[union-attr]


# A process that writes with dc.write through the host's committer (another process): an
# overwrite of partition a, one file per row, then prints its result or error as JSON.
_DC_WRITER = """
import json, sys
import pyarrow as pa
import deltacommit as dc
from deltacommit.engine.group.threads import GroupCommitPolicy
uri, sockets = sys.argv[1], sys.argv[2]
schema = pa.schema([("p", pa.string()), ("id", pa.int64())])
table = dc.DeltaTable(uri, group_commit=GroupCommitPolicy(processes=True, socket_dir=sockets))
try:
    r = dc.write(table, pa.table({"p": ["a"] * 3, "id": [10, 11, 12]}, schema=schema),
                 mode="overwrite", predicate="p = 'a'", target_file_rows=1)
    out = {"version": r.version, "files": r.num_files}
except dc.DeltaCommitError as e:
    out = {"error": type(e).__name__, "message": str(e)}
print(json.dumps(out), flush=True)
"""


class _PlannedLogStore(ConditionalPutLogStore):
    """Conditional put whose claims the plan's rules fault (as a ``FaultyStore`` would)."""

    def __init__(self, store: LocalStore, plan: FaultPlan) -> None:
        super().__init__(store)
        self.plan = plan

    def write_commit(self, version: int, data: bytes) -> None:
        self.plan.run("put_if_absent", commit_path(version),
                      lambda: super(_PlannedLogStore, self).write_commit(version, data))


@pytest.mark.parametrize("fault", ["landed", "conflict", "refused", "unknown"])
def test_a_sender_keeps_its_files_only_if_the_host_committer_may_have_committed_them(
        tmp_path: Path, sockets: str, fault: str) -> None:
    """The sender's write driver judges the error its committer (another process) answers
    with as it judges its own (``engine.commit.outcome``): a conflict or a refused claim
    deletes the files it wrote, a lost answer keeps them (the version names them)."""
    uri = str(tmp_path / "t")
    rig = Rig(uri, LocalStore(uri))
    rig.create()
    # (Faulted in the log store, not a wrapper of the store: the host's committer is keyed by
    # the store, and the sender opens a plain one.)
    server = dc.DeltaTable(uri, policy=POLICY, log_store=_PlannedLogStore(rig.store, rig.plan),
                           group_commit=GroupCommitPolicy(processes=True, socket_dir=sockets))
    dc.write(server, rows("a", [1]))  # this process serves from now on
    committer = server.group_committer
    assert committer is not None and committer.serving
    try:
        gate = {"conflict": rig.hold_claim, "refused": rig.refuse_claim,
                "unknown": rig.lose_answer}.get(fault, lambda: None)()
        sender = start(_DC_WRITER, uri, sockets)
        if fault == "conflict":
            assert gate is not None
            gate.wait_reached()
            dc.write(rig.other(), rows("a", [2]))  # the sender read partition a
            gate.release()
        out, _ = sender.communicate(timeout=120)
        answer = json.loads(out.strip().splitlines()[-1])
    finally:
        committer.close()
    expected = {"landed": None, "conflict": "ConcurrentAppendException",
                "refused": "CoordinationMismatchError", "unknown": "StorageError"}[fault]
    assert answer.get("error") == expected, answer
    if fault in ("landed", "unknown"):
        assert {10, 11, 12} <= set(rig.ids())
        assert len(rig.data_files()) == 4  # the sender's three files and the first one
    else:
        assert not {10, 11, 12} & set(rig.ids())
    rig.check()
