"""Delta's own test tables as a corpus: what each should do, and how to tell it did.

Every table under tests/data (Delta's golden tables, the Java kernel's and delta-kernel-rs's test
tables) falls in one class:

- ``read``: a valid table; deltacommit must read the rows Spark recorded as expected
  (tests/data/delta-golden-expected) or, where no expected rows ship, the rows deltalake 1.6.0
  reads; every earlier version must match deltalake's time travel too.
- ``files``: a valid log whose data files the test suites never shipped (they test log replay
  only); deltacommit's file list must equal deltalake's.
- ``refused``: a table needing a feature deltacommit refuses on purpose (variant, geospatial,
  catalog-managed tables); it must fail with UnsupportedProtocolError naming the feature.
- ``invalid``: a table Delta's suites built to be rejected, or whose log lacks a field the
  protocol requires; it must fail with the named error, not crash.

``python -m tests.compat.corpus`` prints one JSON line per table feature with pass counts.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import json
import math
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq

import deltacommit as dc
from deltacommit.errors import (
    CorruptLogError,
    DeltaCommitError,
    MissingVersionError,
    TableNotFoundError,
    UnsupportedProtocolError,
)
from tests.delta_tables import DATA, peer_read

ROOTS = ("delta-golden", "delta-kernel-java", "kernel", "delta-spark")
EXPECTED = DATA / "delta-golden-expected"

# Features deltacommit refuses on purpose: reading them needs types it does not implement.
REFUSED = {"variantType", "variantType-preview", "variantShredding-preview", "geospatial",
           "catalogManaged", "catalogOwned-preview"}

# Tables Delta's suites build to be rejected, and logs lacking what the protocol requires.
INVALID: dict[str, type[DeltaCommitError]] = {
    "delta-golden/deltalog-invalid-protocol-version": UnsupportedProtocolError,
    "delta-golden/deltalog-state-reconstruction-without-metadata": CorruptLogError,
    "delta-golden/deltalog-state-reconstruction-without-protocol": CorruptLogError,
    "delta-golden/deltalog-state-reconstruction-from-checkpoint-missing-metadata": CorruptLogError,
    "delta-golden/deltalog-state-reconstruction-from-checkpoint-missing-protocol": CorruptLogError,
    "delta-golden/versions-not-contiguous": MissingVersionError,
    "kernel/crc-malformed": TableNotFoundError,
    # metaData without the required schemaString: Spark's log-only unit tests write these.
    "delta-golden/canonicalized-paths-normal-a": CorruptLogError,
    "delta-golden/canonicalized-paths-normal-b": CorruptLogError,
    "delta-golden/canonicalized-paths-special-a": CorruptLogError,
    "delta-golden/canonicalized-paths-special-b": CorruptLogError,
    "delta-golden/corrupted-last-checkpoint": CorruptLogError,
    "delta-golden/deltalog-commit-info": CorruptLogError,
    "delta-golden/update-deleted-directory": CorruptLogError,
    # No metaData action at all.
    "delta-golden/data-reader-absolute-paths-escaped-chars": CorruptLogError,
}

# Valid logs whose data files were never shipped with them.
FILES_ONLY = {
    "delta-golden/checkpoint",
    "delta-golden/delete-re-add-same-file-different-transactions",
    "delta-golden/log-replay-special-characters-b",
    "kernel/app-txn-with-last-updated",
    "kernel/with_checkpoint_no_last_checkpoint",
}


@dataclass(frozen=True)
class Case:
    name: str
    path: Path

    @property
    def uri(self) -> str:
        return str(self.path)

    @property
    def kind(self) -> str:
        if self.name in INVALID:
            return "invalid"
        if self.name in FILES_ONLY:
            return "files"
        if set(self.features()) & REFUSED:
            return "refused"
        return "read"

    def features(self) -> list[str]:
        """The protocol's features and column-mapping mode, read from the raw log (so tables
        deltacommit refuses are still classified)."""
        protocol: dict[str, Any] = {}
        config: dict[str, Any] = {}
        for f in sorted((self.path / "_delta_log").glob("*.json")):
            if not f.name[:20].isdigit():
                continue
            for line in f.read_text().splitlines():
                if not line.strip():
                    continue
                action = json.loads(line)
                protocol = action.get("protocol") or protocol
                config = (action.get("metaData") or {}).get("configuration") or config
        if not protocol:
            protocol, config = _checkpoint_protocol(self.path / "_delta_log")
        out = set(protocol.get("readerFeatures") or []) | set(protocol.get("writerFeatures") or [])
        mode = (config.get("delta.columnMapping.mode") or "none").lower()
        if mode != "none":
            out.add(f"columnMapping:{mode}")
        if protocol:
            out.add(f"protocol:{protocol.get('minReaderVersion')}/{protocol.get('minWriterVersion')}")
        return sorted(out)


def _checkpoint_protocol(log: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    for f in sorted(log.glob("*.checkpoint*.parquet"), reverse=True):
        try:
            t = pq.read_table(f, columns=["protocol", "metaData"]).to_pylist()
        except Exception:  # a deliberately damaged checkpoint: classify from what else there is
            continue
        protocol = next((r["protocol"] for r in t if r.get("protocol")), {})
        meta = next((r["metaData"] for r in t if r.get("metaData")), {})
        config = dict(meta.get("configuration") or {}) if meta else {}
        return protocol or {}, config
    return {}, {}


def cases() -> Iterator[Case]:
    for root in ROOTS:
        for log in sorted((DATA / root).rglob("_delta_log")):
            if "_delta_log" in log.parent.parts:
                continue
            table = log.parent
            yield Case(str(table.relative_to(DATA)), table)
    yield Case("delta-golden/no-delta-log-folder", DATA / "delta-golden" / "no-delta-log-folder")


INVALID["delta-golden/no-delta-log-folder"] = TableNotFoundError


# ---------------------------------------------------------------- comparing rows

def _norm(v: Any) -> Any:
    if isinstance(v, float):
        return "NaN" if math.isnan(v) else round(v, 6)
    if isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(datetime.UTC).replace(tzinfo=None)
        return v.isoformat()
    if isinstance(v, (datetime.date, decimal.Decimal)):
        return str(v)
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in sorted(v.items())}
    if isinstance(v, list):
        # maps arrive as lists of (key, value) pairs from Arrow
        if v and all(isinstance(x, tuple) and len(x) == 2 for x in v):
            return {str(k): _norm(x) for k, x in sorted(v, key=lambda kv: str(kv[0]))}
        return [_norm(x) for x in v]
    return v


def same_rows(ours: pa.Table, theirs: pa.Table, columns: list[str]) -> bool:
    """The same rows in any order, after normalising values (``rows``).  Tables of one schema
    that Arrow sorts into equal tables hold the same rows without it: a million-row table is
    not turned into Python rows to learn what Arrow already knows.  Otherwise (nested columns
    Arrow cannot sort, values equal only once normalised) the rows are compared one by one."""
    a, b = ours.select(columns), theirs.select(columns)
    if a.schema == b.schema:
        keys = [(c, "ascending") for c in columns]
        with contextlib.suppress(pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            if a.sort_by(keys).equals(b.sort_by(keys)):
                return True
    return rows(a, columns) == rows(b, columns)


def rows(t: pa.Table, columns: list[str]) -> list[str]:
    t = t.select(columns)
    return sorted(json.dumps([_norm(v) for v in r.values()], default=str)
                  for r in t.to_pylist())


# Expected rows Spark recorded wrongly: the timestamp partition value was rendered in the writing
# session's time zone (delta-kernel-rs skips this table's expected rows for the same reason).
EXPECTED_WRONG = {"delta-golden/data-reader-partition-values",
                  # Recorded from an older version of these tables: three columns fewer and
                  # array_of_structs of long with a null second element, where the tables' own
                  # files hold two equal structs (as deltalake also reads them).
                  "delta-golden/table-with-columnmapping-mode-name",
                  "delta-golden/table-with-columnmapping-mode-id"}

# Versions deltacommit and deltalake read differently, each with its reason.
DIVERGENT = {
    ("kernel/cdf-table-with-dv", 5):
        "the inline deletion vector's last Z85 block '##093' encodes a value beyond 32 bits, "
        "which Delta's encoder (Codec.scala encodeBytes) never writes; deltacommit refuses it "
        "as corrupt, deltalake reads row 3 as deleted",
}


# Rows delta-kernel-rs's own tests expect, for tables deltalake 1.6.0 cannot read
# (kernel/tests/integration/read/mod.rs, read_spark_table_with_void_column).
EXPECTED_INLINE = {
    "kernel/void-column": pa.table({"id": pa.array([1, 2, 3], pa.int64()),
                                    "void_col": pa.nulls(3)}),
}



def _type_widening_rows(byte_decimal: pa.DataType, short_decimal: pa.DataType) -> pa.Table:
    """The rows of the type-widening tables as Delta's Java kernel (DeltaTableReadsSuite.scala,
    "table with type widening ...") and delta-kernel-rs (read.rs, type_widening_basic and
    type_widening_decimal) expect them; deltalake 1.6.0 refuses typeWidening-preview."""
    big = 2**63 - 1
    d = decimal.Decimal
    return pa.table({
        "byte_long": pa.array([1, big], pa.int64()),
        "int_long": pa.array([2, big], pa.int64()),
        "float_double": pa.array([3.4000000953674316, 1.234567890123]),
        "byte_double": pa.array([5.0, 1.234567890123]),
        "short_double": pa.array([6.0, 1.234567890123]),
        "int_double": pa.array([7.0, 1.234567890123]),
        "decimal_decimal_same_scale": pa.array([d("123.45"), d("12345678901234.56")],
                                               pa.decimal128(20, 2)),
        "decimal_decimal_greater_scale": pa.array([d("67.89000"), d("12345678901.23456")],
                                                  pa.decimal128(20, 5)),
        "byte_decimal": pa.array([d("1.0"), d("123.4")], byte_decimal),
        "short_decimal": pa.array([d("2.0"), d("12345.6")], short_decimal),
        "int_decimal": pa.array([d("3.0"), d("1234567890.1")], pa.decimal128(11, 1)),
        "long_decimal": pa.array([d("4.0"), d("123456789012345678.9")], pa.decimal128(21, 1)),
        "date_timestamp_ntz": pa.array([datetime.datetime(2024, 9, 9),
                                        datetime.datetime(2024, 9, 9, 12, 34, 56, 123456)],
                                       pa.timestamp("us")),
    })


_LONG_MAP = pa.map_(pa.int64(), pa.int64())
EXPECTED_INLINE.update({
    "kernel/type-widening": _type_widening_rows(pa.decimal128(4, 1), pa.decimal128(6, 1)),
    "delta-golden/type-widening": _type_widening_rows(pa.decimal128(11, 1),
                                                      pa.decimal128(11, 1)),
    # DeltaTableReadsSuite.scala, "table with type widening to nested types".
    "delta-golden/type-widening-nested": pa.table({
        "struct": pa.array([{"a": 1}, {"a": 2**63 - 1}], pa.struct([("a", pa.int64())])),
        "map": pa.array([[(2, 3)], [(2**63 - 1, 2**63 - 1)]], _LONG_MAP),
        "array": pa.array([[4, 5], [2**63 - 1, -(2**63)]], pa.list_(pa.int64())),
    }),
})


def expected_rows(case: Case) -> pa.Table | None:
    if case.name in EXPECTED_INLINE:
        return EXPECTED_INLINE[case.name]
    f = EXPECTED / f"{case.path.name}.parquet"
    if case.name.startswith("delta-golden/") and f.exists() and case.name not in EXPECTED_WRONG:
        return pq.read_table(f)
    return None


# Features deltalake 1.6.0 refuses to read; without Spark's expected rows the oracle for such a
# table is its JSON commits alone (checkpoints, sidecars and _last_checkpoint left out of a copy),
# which every table of the corpus that has one still holds from version 0.
PEER_UNREADABLE = {"v2Checkpoint"}


def log_only_read(path: Path) -> pa.Table:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        shutil.copytree(path, copy)
        log = copy / "_delta_log"
        shutil.rmtree(log / "_sidecars", ignore_errors=True)
        for f in log.iterdir():
            if ".checkpoint." in f.name or f.name == "_last_checkpoint":
                f.unlink()
        return dc.DeltaTable(str(copy)).to_arrow()


def peer_files(uri: str) -> set[str]:
    return set(deltalake.DeltaTable(uri).file_uris())


# ---------------------------------------------------------------- one case

@dataclass
class Outcome:
    ok: bool
    detail: str


def check(case: Case, *, time_travel: bool = True) -> Outcome:
    kind = case.kind
    if kind == "invalid":
        want = INVALID[case.name]
        try:
            dc.DeltaTable(case.uri).to_arrow()
        except want as e:
            return Outcome(case.uri in str(e) or case.path.name in str(e),
                           f"{type(e).__name__}: {e}")
        except Exception as e:
            return Outcome(False, f"expected {want.__name__}, got {type(e).__name__}: {e}")
        return Outcome(False, f"expected {want.__name__}, but the table read")
    if kind == "refused":
        try:
            dc.DeltaTable(case.uri).to_arrow()
        except UnsupportedProtocolError as e:
            named = any(f in str(e) for f in set(case.features()) & REFUSED)
            return Outcome(named, f"refused: {e}")
        except Exception as e:
            return Outcome(False, f"expected a refusal, got {type(e).__name__}: {e}")
        return Outcome(False, "expected a refusal, but the table read")
    if kind == "files":
        ours = {u.removeprefix("file://") for u in dc.DeltaTable(case.uri).file_uris()}
        theirs = peer_files(case.uri)
        return Outcome(ours == theirs, f"{len(ours)} files; deltalake {len(theirs)}")
    table = dc.DeltaTable(case.uri)
    got = table.to_arrow()
    expected = expected_rows(case)
    oracle = "expected rows"
    if expected is None and set(case.features()) & PEER_UNREADABLE:
        oracle = "its JSON log alone"
        expected = log_only_read(case.path)
    if expected is None:
        oracle = "deltalake"
        expected = peer_read(case.uri)
    columns = [c for c in got.column_names if c in expected.column_names]
    if len(columns) != len(expected.column_names):
        return Outcome(False, f"columns {got.column_names}; {oracle} has {expected.column_names}")
    if not same_rows(got, expected, columns):
        return Outcome(False, f"{got.num_rows} rows differ from {oracle}'s {expected.num_rows}")
    detail = f"{got.num_rows} rows match {oracle}"
    if time_travel:
        versions = 0
        for v in range(table.version):
            if (case.name, v) in DIVERGENT:
                with contextlib.suppress(CorruptLogError):
                    dc.DeltaTable(case.uri, version=v).to_arrow()
                    return Outcome(False, f"version {v} read; expected {DIVERGENT[case.name, v]}")
                continue
            try:
                theirs = peer_read(case.uri, v)
            except Exception:
                continue
            ours = dc.DeltaTable(case.uri, version=v).to_arrow()
            cols = [c for c in theirs.column_names if c in ours.column_names]
            if len(cols) != len(theirs.column_names) or not same_rows(ours, theirs, cols):
                return Outcome(False, f"version {v} differs from deltalake's time travel")
            versions += 1
        detail += f"; {versions} earlier versions match deltalake"
    return Outcome(True, detail)


def main() -> int:
    per_feature: Counter[tuple[str, str, bool]] = Counter()
    totals: Counter[tuple[str, bool]] = Counter()
    for case in cases():
        try:
            outcome = check(case)
        except Exception as e:
            outcome = Outcome(False, f"crash: {type(e).__name__}: {e}")
        totals[(case.kind, outcome.ok)] += 1
        for f in case.features() or ["(none)"]:
            per_feature[(f, case.kind, outcome.ok)] += 1
        print(json.dumps({"table": case.name, "kind": case.kind, "ok": outcome.ok,
                          "detail": outcome.detail[:300], "features": case.features()}))
    features = sorted({f for f, _, _ in per_feature})
    for f in features:
        print(json.dumps({"feature": f, **{
            f"{kind}_{'pass' if ok else 'fail'}": n
            for (g, kind, ok), n in sorted(per_feature.items()) if g == f}}))
    print(json.dumps({"total": {f"{k}_{'pass' if ok else 'fail'}": n
                                for (k, ok), n in sorted(totals.items())}}))
    return 0 if not any(not ok for (_, ok) in totals) else 1


if __name__ == "__main__":
    sys.exit(main())
