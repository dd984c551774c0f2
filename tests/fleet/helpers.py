"""Helpers for the fleet tests: published transactions made without contending, writer
processes standing for hosts (each with its own turn folder, so host turns never order them:
only the fleet's rounds do)."""

from __future__ import annotations

import os
import signal
import traceback
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

import deltacommit as dc
from deltacommit.engine.group.fleet import round as fleet_round
from deltacommit.engine.group.fleet.policy import FleetPolicy
from deltacommit.io.datafiles import WriteTarget, write_rows
from deltacommit.protocol.fleet.record import record_path

SCHEMA = pa.schema([("writer", pa.int64()), ("batch", pa.int64())])
FLEET = {"deltacommit.groupCommit.fleet": "true"}


def rows(writer: int, b: int) -> pa.Table:
    return pa.table({"writer": [writer], "batch": [b]}, schema=SCHEMA)


def staged_append(table: dc.DeltaTable, data: pa.Table, *, whole_table: bool = False,
                  app: tuple[str, int] | None = None) -> Any:
    """A transaction of ``table`` adding ``data`` in a file of its own, staged (not
    committed); ``whole_table``: it read the whole table (so any concurrent add conflicts)."""
    target = WriteTarget.of(table.uri, table.snapshot)
    adds = write_rows(table.store, target, data, clock=table.clock, random=table.random)
    # The parameters ``dc.write`` gives an append: members share one commitInfo.
    txn = table.transaction("WRITE", {"mode": "Append", "partitionBy": "[]"})
    if whole_table:
        txn.read_whole_table()
    if app is not None:
        txn.set_app_version(*app)
    txn.add(adds)
    return txn.staged()


def publish_only(table: dc.DeltaTable, staged: Any, fleet: FleetPolicy | None = None) -> Any:
    """Publish ``staged`` for the fleet as its writer would, without taking part in a round:
    the writer object, whose ``run`` later carries on as its owner."""
    w = fleet_round._Writer(table.log, staged, table.policy, table.clock, table.random,
                            fleet or FleetPolicy())
    w.read_digest = w._read_digest()
    w._publish(table.log.version)
    return w


def fleet_writer(uri: str, options: Mapping[str, str], writer: int, appends: int,
                 turn_dir: str, start: Any, out: Any) -> None:
    """A host: append ``appends`` one-row batches by URI (each ``dc.write`` opens the table
    anew, as a Lambda function does), journaling (batch, version, txnId) of each acknowledged
    one; app id ``w<writer>`` version ``batch`` makes a retry idempotent."""
    os.environ["DELTACOMMIT_TURN_DIR"] = turn_dir
    try:
        start.wait()
        acked = []
        for b in range(appends):
            r = dc.write(uri, rows(writer, b), storage_options=dict(options),
                         app_id=f"w{writer}", app_version=b)
            acked.append((b, r.version, r.txn_id))
        out.put((writer, acked))
    except BaseException as e:
        out.put((writer, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def killed_after_publishing(uri: str, options: Mapping[str, str], turn_dir: str) -> None:
    """Append one batch (writer 99, batch 0, app id w99 version 0) and die by SIGKILL the
    moment its record is published, before taking part in any round."""
    os.environ["DELTACOMMIT_TURN_DIR"] = turn_dir
    from deltacommit.engine.group.fleet import records

    publish = records.publish

    def publish_and_die(store: Any, record: Any) -> None:
        publish(store, record)
        os.kill(os.getpid(), signal.SIGKILL)

    records.publish = publish_and_die  # type: ignore[assignment]
    dc.write(uri, rows(99, 0), storage_options=dict(options), app_id="w99", app_version=0)


def winner_interrupted(uri: str, options: Mapping[str, str], turn_dir: str, point: str,
                       won: Any) -> None:
    """Append one batch (writer 98, batch 0, app id w98 version 0) and, having won its
    round's key, stop there: ``point`` "kill-round" dies by SIGKILL before its claim of the
    version, "stop-round" stops itself (SIGSTOP) there, "kill-landed" dies by SIGKILL after
    its version landed, before it deletes the records it landed.  ``won`` is set first."""
    os.environ["DELTACOMMIT_TURN_DIR"] = turn_dir
    from deltacommit.engine.group.fleet import records

    lead = fleet_round._Writer._lead
    delete = records.delete
    txn_id: list[str] = []

    def lead_and_stop(self: Any, version: int) -> Any:
        txn_id.append(self.staged.txn_id)
        if point in ("kill-round", "stop-round"):
            won.set()
            os.kill(os.getpid(), signal.SIGKILL if point == "kill-round" else signal.SIGSTOP)
        return lead(self, version)

    def delete_or_die(store: Any, paths: Any) -> None:
        if point == "kill-landed" and record_path(txn_id[0]) in paths:
            won.set()
            os.kill(os.getpid(), signal.SIGKILL)
        delete(store, paths)

    fleet_round._Writer._lead = lead_and_stop  # type: ignore[method-assign]
    records.delete = delete_or_die  # type: ignore[assignment]
    dc.write(uri, rows(98, 0), storage_options=dict(options), app_id="w98", app_version=0)
