"""Row-level concurrency: N processes x M row-level updates of disjoint keys that share every
data file, beside an appender whose rows match no update and a compaction every second, with
row-level conflict checks (deletion vectors and row tracking) and with Spark's file-level
rules (row tracking off).  One JSON line per run: aborted operations (each run again until it
commits), what the updates were rebased over, and whether the final table equals the serial
result (``deltacommit.testing.rowlevel``).

    .venv/bin/python bench/rowlevel_concurrency.py
    .venv/bin/python bench/rowlevel_concurrency.py --workers 4 --operations 8 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from deltacommit.testing.rowlevel import Layout, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--operations", type=int, default=8)
    parser.add_argument("--keys", type=int, default=10, help="keys each update changes")
    parser.add_argument("--compaction-interval", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--modes", default="row-level,file-level")
    parser.add_argument("--kinds", default="update,merge,delete-insert",
                        help="update: DeltaTable.update; merge: an upsert of the keys by "
                             "DeltaTable.merge; delete-insert: a DELETE by deletion vectors "
                             "writing the rows again in the same transaction")
    args = parser.parse_args()
    layout = Layout(args.workers, args.operations, args.keys)
    for _ in range(args.rounds):
        for kind in args.kinds.split(","):
            for mode in args.modes.split(","):
                with tempfile.TemporaryDirectory() as tmp:
                    figures = run(str(Path(tmp) / "t"), row_level=mode == "row-level",
                                  layout=layout, compaction_interval=args.compaction_interval,
                                  kind=kind)
                print(json.dumps({"bench": "rowlevel_concurrency", "mode": mode, **figures}),
                      flush=True)


if __name__ == "__main__":
    main()
