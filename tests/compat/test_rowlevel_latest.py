"""MERGE, UPDATE and DELETE between deltacommit and the newest deltalake (1.6.6), both ways.

Users run the newest deltalake beside deltacommit, on the same tables:

* tables deltacommit changed by MERGE, UPDATE and DELETE (copy-on-write and by deletion
  vectors, partitioned or not, with change data feed, row tracking, column mapping; several
  files, a checkpoint, then another MERGE) read the same in deltalake 1.6.6: the same rows, the
  change data ``load_cdf`` gives is what each version changed, and ``history()`` shows the
  metrics deltacommit wrote; deltalake then appends, merges, compacts and vacuums them, and
  deltacommit reads what it reads;
* tables deltalake 1.6.6 changed by its MERGE, UPDATE, DELETE and Z-order read the same in
  deltacommit, which changes them further by its own MERGE, UPDATE and DELETE, and deltalake
  then reads the rows deltacommit reads.  deltalake 1.6.6 names the ``variantType`` feature in
  every table-features protocol it writes (a table with deletion vectors has one).

Each round of deltalake's work is one process (``rowlevel_peer.py``), so that the whole
module costs three interpreter starts.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import deltacommit as dc
from tests.compat.rowlevel_peer import SCHEMA, rows_of

PEER = Path(__file__).with_name("rowlevel_peer.py")
COLUMNS = tuple(SCHEMA.names)
DV = {"delta.enableDeletionVectors": "true"}
CDF = {"delta.enableChangeDataFeed": "true"}
ROWS = {"delta.enableRowTracking": "true"}
NAMES = {"delta.columnMapping.mode": "name"}

#: deltacommit's tables: name -> (configuration, partition columns).
OURS: dict[str, tuple[dict[str, str], list[str] | None]] = {
    "copy_on_write": ({}, None),
    "copy_on_write_by_p": ({}, ["p"]),
    "dv_by_p": (DV, ["p"]),
    "cdf": (CDF, None),
    "cdf_dv_by_p": ({**CDF, **DV}, ["p"]),
    "row_tracking_cdf": ({**ROWS, **CDF}, None),
    "row_tracking_dv_by_p": ({**ROWS, **DV}, ["p"]),
    "names_cdf_dv": ({**NAMES, **CDF, **DV}, None),
    "names_by_p": (NAMES, ["p"]),
}
#: deltalake's tables: name -> (configuration, partition columns, seed).
THEIRS: dict[str, tuple[dict[str, str], list[str] | None, int]] = {
    "theirs": ({}, None, 1),
    "theirs_cdf_by_p": (CDF, ["p"], 2),
    "theirs_dv": (DV, None, 3),
    "theirs_dv_cdf_by_p": ({**DV, **CDF}, ["p"], 4),
}


def peer(python: Path, **spec: Any) -> dict[str, Any]:
    done = subprocess.run([str(python), str(PEER), json.dumps(spec)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def ok(report: dict[str, Any]) -> dict[str, Any]:
    assert "error" not in report, report["error"]
    return report


def our_rows(uri: str, version: int | None = None) -> list[dict[str, Any]]:
    return sorted(dc.DeltaTable(uri, version=version).to_arrow().select(COLUMNS).to_pylist(),
                  key=lambda r: r["id"])


def snapshots(uri: str, first: int, last: int) -> dict[int, list[dict[str, Any]]]:
    """deltacommit's rows of versions ``first``..``last``."""
    return {v: our_rows(uri, v) for v in range(first, last + 1)}


#: The versions (table, version) whose change data deltalake 1.6.6 reads wrong.  A version that removes
#: whole files carrying deletion vectors, without change data files (a DELETE by partition
#: values: deltacommit writes it as Spark does), is to be read as the deletion of each file's
#: live rows; 1.6.6 returns the rows the deletion vectors had removed instead.
PEER_MISREADS = {("cdf_dv_by_p", 7), ("theirs_dv_cdf_by_p", 10)}


def net_changes(snaps: dict[int, list[dict[str, Any]]], feed: list[dict[str, Any]],
                skip: frozenset[int] = frozenset()) -> list[str]:
    """The versions (all of ``snaps`` but the first) whose change data is not what the
    version changed.

    A version's change data must hold what tells its snapshot (``snaps``) from the one before:
    ``delete`` for each id gone, ``insert`` for each new one, an ``update_preimage`` and
    ``update_postimage`` pair for each changed row.  Pairs of images equal to each other (a
    MERGE updating a row to its own values) are allowed and left out; so are the versions
    ``skip`` (``PEER_MISREADS``)."""
    bad = []
    for v in sorted(set(snaps) - skip)[1:]:
        before = {r["id"]: tuple(r.values()) for r in snaps[v - 1]}
        after = {r["id"]: tuple(r.values()) for r in snaps[v]}
        want: Counter[tuple[str, tuple[Any, ...]]] = Counter()
        want.update(("delete", before[i]) for i in before.keys() - after.keys())
        want.update(("insert", after[i]) for i in after.keys() - before.keys())
        for i in before.keys() & after.keys():
            if before[i] != after[i]:
                want.update([("update_preimage", before[i]), ("update_postimage", after[i])])
        rows = [r for r in feed if r["_commit_version"] == v]
        images = {kind: {r["id"]: tuple(r[c] for c in COLUMNS) for r in rows
                         if r["_change_type"] == kind}
                  for kind in ("update_preimage", "update_postimage")}
        got: Counter[tuple[str, tuple[Any, ...]]] = Counter(
            (r["_change_type"], tuple(r[c] for c in COLUMNS)) for r in rows
            if not (r["_change_type"].startswith("update")
                    and images["update_preimage"].get(r["id"])
                    == images["update_postimage"].get(r["id"])))
        if got != want or images["update_preimage"].keys() != images["update_postimage"].keys():
            bad.append(f"version {v}: missing {dict(want - got)}, extra {dict(got - want)}")
    return bad


def refusals(configuration: dict[str, str]) -> dict[str, Any]:
    """The steps of ``rowlevel_peer.change`` deltalake 1.6.6 refuses on a table, by its own
    rules: it writes no row tracking and compacts no table with column mapping."""
    if ROWS.items() <= configuration.items():
        features = r"Unsupported table features required: \[(RowTracking|DomainMetadata|, )+\]"
        return {step: Matches(features) for step in ("append", "merge", "optimize", "vacuum")}
    if NAMES.items() <= configuration.items():
        return {"optimize": "Column mapping is not supported for write operation 'OPTIMIZE' yet"}
    return {}


class Matches(str):
    """A string equal to every string its pattern matches from the start."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and re.match(str(self), other) is not None

    __hash__ = str.__hash__


def change_ours(uri: str) -> None:
    """deltacommit's row-level work: MERGE (update, delete, insert), UPDATE to NULL, DELETE by
    data and by partition values, a checkpoint, then a MERGE with a not-matched-by-source
    delete."""
    (dc.DeltaTable(uri).merge(rows_of([5, 6, 7, 8, 200, 201, 77], 3), "t.id = s.id", "s", "t")
     .when_matched_update_all(predicate="s.id <> 8").when_matched_delete(predicate="s.id = 8")
     .when_not_matched_insert_all().execute())
    dc.DeltaTable(uri).update({"v": "v * 2", "s": "NULL"}, predicate="id % 4 = 1")
    dc.DeltaTable(uri).delete("s = 's1' or id > 110")
    dc.DeltaTable(uri).delete("p is null")
    dc.DeltaTable(uri).checkpoint()
    (dc.DeltaTable(uri).merge(rows_of([1, 2, 300], 5), "t.id = s.id", "s", "t")
     .when_matched_update({"s": "'m'"}).when_not_matched_insert_all()
     .when_not_matched_by_source_delete("t.id = 3").execute())


def test_tables_deltacommit_changed_read_and_change_alike_in_the_newest_deltalake(
        tmp_path: Path, deltalake_latest: Path) -> None:
    uris = {}
    for name, (configuration, partition_by) in OURS.items():
        uri = uris[name] = str(tmp_path / name)
        dc.DeltaTable.create(uri, SCHEMA, partition_by=partition_by, configuration=configuration)
        for k in range(3):
            dc.write(uri, rows_of(list(range(k * 40, (k + 1) * 40)), 0))
        change_ours(uri)
    # deltacommit's view of every version, before deltalake's vacuum removes old files.
    snaps = {name: snapshots(uri, 0, 8) for name, uri in uris.items()}
    history = {name: [{k: h.get(k) for k in ("version", "operation", "operationMetrics")}
                      for h in dc.DeltaTable(uri).history()] for name, uri in uris.items()}
    report = peer(deltalake_latest, read=list(uris.values()), change=list(uris.values()))
    for name, uri in uris.items():
        theirs = ok(report["read"][uri])
        assert theirs["version"] == 8, name
        assert theirs["rows"] == snaps[name][8], name
        assert theirs.get("pyarrow_rows", theirs["rows"]) == theirs["rows"], name
        assert theirs["history"] == history[name], name
        if NAMES.items() <= OURS[name][0].items() and CDF.items() <= OURS[name][0].items():
            assert "Column mapping is not supported for read operation 'CHANGE DATA FEED " \
                "scans' yet" in theirs["cdf_error"]
        else:
            assert ("cdf" in theirs) == (CDF.items() <= OURS[name][0].items()), name
        if "cdf" in theirs:
            misread = frozenset(v for n, v in PEER_MISREADS if n == name)
            assert net_changes(snaps[name], theirs["cdf"], misread) == [], name
        # deltalake's append, MERGE, compaction and vacuum on the table: deltacommit reads the
        # rows it reads, and a row-level change of deltacommit's on top loses none of them.
        changed = ok(report["change"][uri])
        assert changed["refused"] == refusals(OURS[name][0]), name
        if "append" in changed["refused"]:
            continue
        # (On a table with deletion vectors deltalake names the files it deleted by their full
        # path, some twice.)
        vacuumed = {f.removeprefix(uri + "/") for f in changed["vacuumed"]}
        assert set(changed["dry"]) == vacuumed and vacuumed, name
        assert our_rows(uri) == changed["rows"], name
        assert {r["id"] for r in changed["rows"]} >= {2, 300, 500, 501, 502, 600}, name
        dc.DeltaTable(uri).update({"s": "'after'"}, predicate="id >= 500")
        assert our_rows(uri) == [{**r, "s": "after"} if r["id"] >= 500 else r
                                 for r in changed["rows"]], name
    assert report["deltalake"] == "1.6.6"


def test_tables_the_newest_deltalake_changed_read_and_change_alike_in_deltacommit(
        tmp_path: Path, deltalake_latest: Path) -> None:
    uris = {name: str(tmp_path / name) for name in THEIRS}
    created = peer(deltalake_latest,
                   create={uris[n]: list(spec) for n, spec in THEIRS.items()})["create"]
    for name, uri in uris.items():
        theirs = ok(created[uri])
        assert our_rows(uri) == theirs["rows"], name
        if "cdf" in theirs:
            assert net_changes(snapshots(uri, 0, theirs["version"]), theirs["cdf"]) == [], name
        change_ours(uri)
    assert "variantType" in (dc.DeltaTable(uris["theirs_dv"]).protocol.reader_features or [])
    report = peer(deltalake_latest, read=list(uris.values()))["read"]
    for name, uri in uris.items():
        theirs = ok(report[uri])
        assert theirs["version"] == dc.DeltaTable(uri).version, name
        assert theirs["rows"] == our_rows(uri), name
        assert theirs.get("pyarrow_rows", theirs["rows"]) == theirs["rows"], name
        if "cdf" in theirs:
            misread = frozenset(v for n, v in PEER_MISREADS if n == name)
            assert net_changes(snapshots(uri, created[uri]["version"], theirs["version"]),
                               theirs["cdf"], misread) == [], name
