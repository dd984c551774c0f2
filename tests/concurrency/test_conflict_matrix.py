"""Delta's conflict matrix, run as pairs of real concurrent transactions on local tables.

Each case: a table with one file in partition 'a' and one in 'b' (version 1).  Two writers,
each with its own ``DeltaTable`` on its own thread, both read version 1 and stage their
actions; then the winner commits (version 2) and only after that the other one commits.  The
other must either land at version 3 with the table equal to a serial execution of the two, or
raise exactly the exception the table names, leaving the table as the winner left it.

The transaction kinds (``ops.py``), all on partition 'a' for the winner and on 'a' (same) or
'b' (disjoint) for the other:

- append:    reads its partition, then adds a file to it (an INSERT ... SELECT from the table)
- blind:     adds a file without reading (a plain INSERT; commitInfo.isBlindAppend = true)
- overwrite: reads its partition, removes its files, adds a new one (overwrite with predicate)
- delete:    reads its partition, removes its files (DELETE WHERE p = ...)
- compact:   reads its partition, rewrites its files with dataChange=false (OPTIMIZE)
- metadata:  changes a table property, reads nothing (SET TBLPROPERTIES)
- protocol:  upgrades the protocol to writer version 7 with the same features (1, 2) implies
- txn:       reads and sets the version of app id 'app-1', adds a file (an idempotent write)

The expectations follow from Delta's checks, in Spark's order (conflicts.py):
1. a winning protocol change fails only a transaction that also changes the protocol (PC);
2. a winning metadata change fails everyone (MC);
3. a winning txn action fails a transaction that read the same app id (CT);
4. files the winner added in a partition the other transaction read fail it (CA), except that
   blind appenders (blind, txn, metadata, protocol) read nothing, compaction runs at snapshot
   isolation and ignores added files, and under WriteSerializable the adds of a *blind* winner
   (blind, txn) are ignored.  A compaction winner's adds count although dataChange=false;
5. a file the other transaction read that the winner removed fails it (DR), with dataChange=false
   removes (compaction) included.
Scan-based removes always read what they remove, so check 6 (delete-delete) cannot be reached in
this matrix; test_conflict_checker.py covers it.

Codes: ok = commits at the next version; CA ConcurrentAppendException; DR
ConcurrentDeleteReadException; MC MetadataChangedException; CT ConcurrentTransactionException;
PC ProtocolChangedException.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

import deltacommit as dc
from deltacommit.errors import ConcurrentModificationException

from .ops import KINDS, OPERATIONS, Model, Op, Running, begin, create_table, new_op, observe, stage

# Rows: the winner (commits first).  Columns: the other transaction, in this order:
#                 append blind overwrite delete compact metadata protocol txn
SERIALIZABLE_SAME_PARTITION = """
    append        CA     ok    CA        CA     ok      ok       ok       ok
    blind         CA     ok    CA        CA     ok      ok       ok       ok
    overwrite     CA     ok    CA        CA     DR      ok       ok       ok
    delete        DR     ok    DR        DR     DR      ok       ok       ok
    compact       CA     ok    CA        CA     DR      ok       ok       ok
    metadata      MC     MC    MC        MC     MC      MC       MC       MC
    protocol      ok     ok    ok        ok     ok      ok       PC       ok
    txn           CA     ok    CA        CA     ok      ok       ok       CT
"""

# WriteSerializable differs from Serializable in one place only: the adds of a blind winner
# (blind, txn) do not fail readers of their partition, which serialise before the append.
WRITE_SERIALIZABLE_SAME_PARTITION = """
    append        CA     ok    CA        CA     ok      ok       ok       ok
    blind         ok     ok    ok        ok     ok      ok       ok       ok
    overwrite     CA     ok    CA        CA     DR      ok       ok       ok
    delete        DR     ok    DR        DR     DR      ok       ok       ok
    compact       CA     ok    CA        CA     DR      ok       ok       ok
    metadata      MC     MC    MC        MC     MC      MC       MC       MC
    protocol      ok     ok    ok        ok     ok      ok       PC       ok
    txn           ok     ok    ok        ok     ok      ok       ok       CT
"""

# On disjoint partitions only the table-wide changes and the shared app id conflict, at both
# isolation levels.
DISJOINT_PARTITIONS = """
    append        ok     ok    ok        ok     ok      ok       ok       ok
    blind         ok     ok    ok        ok     ok      ok       ok       ok
    overwrite     ok     ok    ok        ok     ok      ok       ok       ok
    delete        ok     ok    ok        ok     ok      ok       ok       ok
    compact       ok     ok    ok        ok     ok      ok       ok       ok
    metadata      MC     MC    MC        MC     MC      MC       MC       MC
    protocol      ok     ok    ok        ok     ok      ok       PC       ok
    txn           ok     ok    ok        ok     ok      ok       ok       CT
"""

CODES: dict[str, type[ConcurrentModificationException] | None] = {
    "ok": None,
    "CA": dc.ConcurrentAppendException,
    "DR": dc.ConcurrentDeleteReadException,
    "MC": dc.MetadataChangedException,
    "CT": dc.ConcurrentTransactionException,
    "PC": dc.ProtocolChangedException,
}


def parse(table: str) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    rows = [line.split() for line in table.strip().splitlines()]
    assert [r[0] for r in rows] == list(KINDS)
    for winner, *cells in rows:
        assert len(cells) == len(KINDS) and all(c in CODES for c in cells)
        for other, code in zip(KINDS, cells, strict=True):
            out[winner, other] = code
    return out


MATRIX = {
    ("Serializable", "same"): parse(SERIALIZABLE_SAME_PARTITION),
    ("WriteSerializable", "same"): parse(WRITE_SERIALIZABLE_SAME_PARTITION),
    ("Serializable", "disjoint"): parse(DISJOINT_PARTITIONS),
    ("WriteSerializable", "disjoint"): parse(DISJOINT_PARTITIONS),
}
CASES = [(level, where, w, o) for (level, where) in MATRIX for w in KINDS for o in KINDS]


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Model]]:
    """One freshly created table per isolation level, copied for each case."""
    out = {}
    for level in ("Serializable", "WriteSerializable"):
        path = tmp_path_factory.mktemp("template") / level
        _, model = create_table(str(path), level)
        out[level] = (path, model)
    return out


def run_pair(uri: str, winner_op: Op, other_op: Op) -> tuple[object, object]:
    """Both transactions read and stage concurrently; the winner commits; then the other."""
    staged = threading.Barrier(2, timeout=60)
    winner_done = threading.Event()
    results: dict[str, object] = {}

    def run(name: str, op: Op) -> None:
        try:
            table = dc.DeltaTable(uri)
            running: Running = begin(table, op)
            stage(table, running)
            staged.wait()
            if name == "other":
                assert winner_done.wait(60), "the winner never finished"
            try:
                results[name] = running.txn.commit()
            except ConcurrentModificationException as e:
                results[name] = e
        except BaseException as e:  # reported by the main thread
            results[name] = e
            staged.abort()
        finally:
            if name == "winner":
                winner_done.set()

    threads = [threading.Thread(target=run, args=("winner", winner_op)),
               threading.Thread(target=run, args=("other", other_op))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive()
    return results["winner"], results["other"]


@pytest.mark.parametrize(("level", "where", "winner", "other"), CASES,
                         ids=[f"{lv}-{wh}-{w}-then-{o}" for lv, wh, w, o in CASES])
def test_conflict_matrix(templates: dict[str, tuple[Path, Model]], tmp_path: Path, level: str,
                         where: str, winner: str, other: str) -> None:
    template, start = templates[level]
    uri = str(tmp_path / "t")
    shutil.copytree(template, uri)
    winner_op = new_op(winner, "a")
    other_op = new_op(other, "a" if where == "same" else "b")

    won, result = run_pair(uri, winner_op, other_op)

    assert isinstance(won, dc.CommitResult), won
    assert (won.version, won.attempts) == (2, 1)
    expected = CODES[MATRIX[level, where][winner, other]]
    table = dc.DeltaTable(uri)
    after_winner = winner_op.apply(start)
    if expected is None:
        assert isinstance(result, dc.CommitResult), f"expected a commit, got {result!r}"
        assert (result.version, result.attempts, result.winners) == (3, 2, (2,))
        assert table.version == 3
        info = table.history(1)[0]
        assert info["readVersion"] == 1 and info["txnId"] == result.txn_id
        assert info["operation"] == OPERATIONS[other]
        # Equal to a serial execution of the two, in one order or the other (WriteSerializable
        # and snapshot isolation may serialise the later commit first).
        final = observe(table)
        serial = {other_op.apply(after_winner), winner_op.apply(other_op.apply(start))}
        assert final in serial, (final, serial)
    else:
        assert type(result) is expected, f"expected {expected.__name__}, got {result!r}"
        assert isinstance(result, ConcurrentModificationException)
        message = str(result)
        assert f"version 2 ({OPERATIONS[winner]})" in message and uri in message, message
        if expected in (dc.ConcurrentAppendException, dc.ConcurrentDeleteReadException):
            assert "partition p='a'" in message, message
        if expected is dc.ConcurrentTransactionException:
            assert "'app-1'" in message, message
        assert table.version == 2
        assert observe(table) == after_winner
