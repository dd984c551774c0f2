"""The transaction kinds the concurrency tests run, on real tables, and a model of each.

Every row written carries a unique ``id`` and the number of rows its transaction ``seen`` in
its partition when it read, so a table's content records what each transaction read: a serial
replay of the model reproduces it only if each committed transaction's reads were valid in the
serial order.  The model state is a plain value (rows per partition, app versions, table
properties, protocol), compared with the real table after the run.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.parquet as pq

import deltacommit as dc
from deltacommit.engine.transaction.transaction import Transaction
from deltacommit.io.datafiles import write_data_files
from deltacommit.protocol.actions import Add, Protocol
from deltacommit.protocol.partitions import decode_add_path

SCHEMA = pa.schema([("p", pa.string()), ("id", pa.int64()), ("seen", pa.int64())])
APP = "app-1"
UPGRADED = Protocol(1, 7, None, ["appendOnly", "invariants"])
# The ``seen`` of rows written by transactions that do not read the table.
BLIND = -1
KINDS = ("append", "blind", "overwrite", "delete", "compact", "metadata", "protocol", "txn")


@dataclass(frozen=True)
class Model:
    """What a table holds, as far as these tests care."""

    rows: frozenset[tuple[str, int, int]] = frozenset()
    apps: tuple[tuple[str, int], ...] = ()
    properties: tuple[tuple[str, str], ...] = ()
    protocol: tuple[int, int] = (1, 2)

    def partition(self, p: str) -> frozenset[tuple[str, int, int]]:
        return frozenset(r for r in self.rows if r[0] == p)

    def app_version(self, app: str) -> int | None:
        return dict(self.apps).get(app)


@dataclass
class Op:
    """One transaction: a kind, a partition, the ids of the rows it writes."""

    kind: str
    part: str
    ids: tuple[int, ...] = ()
    #: For app-id writes: the version it records.
    app_version: int = 0

    def apply(self, m: Model) -> Model:
        """The transaction run alone against ``m`` (its serial semantics)."""
        p = self.part
        seen = len(m.partition(p)) if self.kind in ("append", "overwrite") else BLIND
        new = frozenset((p, i, seen) for i in self.ids)
        if self.kind in ("append", "blind"):
            return replace(m, rows=m.rows | new)
        if self.kind == "overwrite":
            return replace(m, rows=(m.rows - m.partition(p)) | new)
        if self.kind == "delete":
            return replace(m, rows=m.rows - m.partition(p))
        if self.kind == "compact":
            return m
        if self.kind == "metadata":
            return replace(m, properties=tuple(sorted({**dict(m.properties), "team": p}.items())))
        if self.kind == "protocol":
            return replace(m, protocol=(UPGRADED.min_reader_version, UPGRADED.min_writer_version))
        if self.kind == "txn":
            done = m.app_version(APP)
            if done is not None and done >= self.app_version:
                return m
            apps = {**dict(m.apps), APP: self.app_version}
            return replace(m, rows=m.rows | new, apps=tuple(sorted(apps.items())))
        raise AssertionError(self.kind)


OPERATIONS = {"append": "WRITE", "blind": "WRITE", "overwrite": "WRITE", "delete": "DELETE",
              "compact": "OPTIMIZE", "metadata": "SET TBLPROPERTIES",
              "protocol": "UPGRADE PROTOCOL", "txn": "WRITE"}


@dataclass
class Running:
    """An open transaction of ``op`` and the files it scanned."""

    op: Op
    txn: Transaction
    files: list[Add]
    #: An app-id write that found its version already recorded: it skips, as ``write`` does.
    skip: bool = False


def data_files(table: dc.DeltaTable, rows: list[tuple[str, int, int]],
               data_change: bool = True) -> list[Add]:
    data = pa.table({"p": [r[0] for r in rows], "id": [r[1] for r in rows],
                     "seen": [r[2] for r in rows]}, schema=SCHEMA)
    adds = write_data_files(table.log_store.store, data, table.partition_columns,
                            clock=table.clock, random=table.random)
    for a in adds:
        a.data_change = data_change
    return adds


def begin(table: dc.DeltaTable, op: Op) -> Running:
    """Start ``op``'s transaction: read what it reads.  Nothing is written yet."""
    txn = table.transaction(OPERATIONS[op.kind])
    run = Running(op, txn, [])
    if op.kind in ("append", "overwrite", "delete", "compact"):
        run.files = txn.scan(predicate=f"p = '{op.part}'")
    elif op.kind == "txn":
        done = txn.app_version(APP)
        run.skip = done is not None and done >= op.app_version
    return run


def stage(table: dc.DeltaTable, run: Running) -> None:
    """Write the data files and stage the actions of the transaction."""
    op, txn, files = run.op, run.txn, run.files
    p = op.part
    if op.kind in ("append", "overwrite"):
        seen = sum(a.num_records() or 0 for a in files)
        txn.add(data_files(table, [(p, i, seen) for i in op.ids]))
    if op.kind in ("blind", "txn"):
        txn.add(data_files(table, [(p, i, BLIND) for i in op.ids]))
    if op.kind in ("overwrite", "delete"):
        txn.remove(files)
    if op.kind == "compact" and files:
        rows = _rows_of(table, files)
        txn.remove(files, data_change=False)
        txn.add(data_files(table, rows, data_change=False))
    if op.kind == "metadata":
        md = txn.snapshot.metadata
        txn.update_metadata(replace(md, configuration={**md.configuration, "team": p}))
    if op.kind == "protocol":
        txn.update_protocol(UPGRADED)
    if op.kind == "txn":
        txn.set_app_version(APP, op.app_version)


def _rows_of(table: dc.DeltaTable, files: list[Add]) -> list[tuple[str, int, int]]:
    out: list[tuple[str, int, int]] = []
    store = table.log_store.store
    for a in files:
        data = pq.read_table(store.open_input(decode_add_path(a.path)))
        p = a.partition_values["p"]
        assert p is not None
        out.extend((p, i, s) for i, s in zip(data.column("id").to_pylist(),
                                              data.column("seen").to_pylist(), strict=True))
    return out


def observe(table: dc.DeltaTable) -> Model:
    """The model of a real table at its current snapshot."""
    data = table.to_arrow()
    rows = frozenset(zip(data.column("p").to_pylist(), data.column("id").to_pylist(),
                         data.column("seen").to_pylist(), strict=True))
    snap = table.snapshot
    apps = tuple(sorted((k, v.version) for k, v in snap.state.app_txns.items()))
    props = tuple(sorted((k, v) for k, v in table.configuration.items()
                         if k == "team" and v is not None))
    proto = (snap.protocol.min_reader_version, snap.protocol.min_writer_version)
    return Model(frozenset(rows), apps, props, proto)


def create_table(uri: str, level: str, *, log_store: object = None,
                 **kw: object) -> tuple[dc.DeltaTable, Model]:
    """A table partitioned by ``p`` with one file in each of partitions 'a' and 'b'."""
    t = dc.DeltaTable.create(uri, SCHEMA, partition_by=["p"],
                             configuration={"delta.isolationLevel": level},
                             log_store=log_store, **kw)  # type: ignore[arg-type]
    rows = [("a", 1, 0), ("b", 2, 0)]
    with t.transaction("WRITE") as txn:
        txn.add(data_files(t, rows))
    return t, Model(frozenset(rows))


ids = itertools.count(1000)


def new_op(kind: str, part: str, app_version: int = 1) -> Op:
    return Op(kind, part, (next(ids),) if kind in ("append", "blind", "overwrite", "txn") else (),
              app_version=app_version)

