"""Read every Delta table under a directory with deltacommit and with deltalake 1.6.0.

Prints one line per table: ``read`` (deltacommit's rows equal deltalake's), ``read-differs``,
``read(peer failed)`` (deltalake could not read it), ``refused`` (UnsupportedProtocolError),
``error`` (another deltacommit error: corrupt or incomplete test fixtures) or ``crashed`` (any
other exception), with the table features it uses; the last line is a JSON summary per feature.
deltalake's pyarrow dataset refuses deletion vectors, so its query engine is used for those.

    .venv/bin/python bench/real_tables.py tests/data
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import deltalake
import pyarrow as pa

import deltacommit as dc
from deltacommit.errors import DeltaCommitError, UnsupportedProtocolError

FEATURES = {"deletionVectors", "columnMapping", "v2Checkpoint", "typeWidening",
            "typeWidening-preview", "variantType", "variantType-preview", "rowTracking",
            "inCommitTimestamp", "domainMetadata", "changeDataFeed", "timestampNtz",
            "catalogManaged", "geospatial"}


def features(table: Path) -> str:
    found: set[str] = set()
    for f in sorted((table / "_delta_log").glob("*.json")):
        for line in f.read_text(errors="replace").splitlines():
            try:
                p = json.loads(line).get("protocol") if line.strip() else None
            except ValueError:
                continue
            if p:
                found |= set(p.get("readerFeatures") or []) | set(p.get("writerFeatures") or [])
    return ",".join(sorted(found & FEATURES)) or "none"


def peer(table: Path) -> pa.Table:
    t = deltalake.DeltaTable(str(table))
    try:
        return t.to_pyarrow_table()
    except Exception:  # deletion vectors: the query engine applies them
        return pa.table(deltalake.QueryBuilder().register("t", t).execute("select * from t")
                        .read_all())


def rows(t: pa.Table) -> list[str]:
    return sorted(json.dumps(r, default=str, sort_keys=True) for r in t.to_pylist())


def main() -> None:
    root = Path(sys.argv[1])
    tables = sorted({p.parent for p in root.rglob("_delta_log") if p.is_dir()})
    counts: dict[str, dict[str, int]] = {}
    for t in tables:
        label = features(t)
        try:
            ours = dc.DeltaTable(str(t)).to_arrow()
        except UnsupportedProtocolError as e:
            result, detail = "refused", str(e)[-120:]
        except DeltaCommitError as e:
            result, detail = "error", f"{type(e).__name__}: {str(e)[:150]}"
        except Exception as e:
            result, detail = "crashed", f"{type(e).__name__}: {str(e)[:150]}"
        else:
            detail = f"{ours.num_rows} rows"
            try:
                theirs = peer(t)
            except Exception:
                result = "read(peer failed)"
            else:
                same = rows(ours.select(theirs.column_names)) == rows(theirs)
                result = "read" if same else "read-differs"
        counts.setdefault(label, {}).setdefault(result, 0)
        counts[label][result] += 1
        print(f"{t.relative_to(root)}: {result} [{label}] {detail}", flush=True)
    total: dict[str, int] = {}
    for per in counts.values():
        for k, n in per.items():
            total[k] = total.get(k, 0) + n
    print(json.dumps({"tables": len(tables), "total": total, "per_feature": counts}))


if __name__ == "__main__":
    main()
