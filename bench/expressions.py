"""Evaluating generation expressions and CHECK constraints over a batch of rows.

Every write computes or verifies each generated column and checks each constraint before a
file is written, so the cost per row of the expression evaluators is the cost of those writes'
first stage.  One run builds ``--rows`` rows (``id`` int64, ``x`` float64, ``m``
decimal(12, 4), ``ts`` timestamp, ``name`` string, ``--non-ascii`` of them with non-ASCII
text) and times, for each expression, ``--runs`` evaluations through the functions the write
path calls (``generated.evaluate``, ``constraints.check_constraints``).

Each measurement is one JSON line: the expression, its kind, the best and median seconds and
rows per second of the best run.  The script uses only functions main has had, so the same
command run against another checkout's ``src`` (``PYTHONPATH=<checkout>/src``) compares them:

    .venv/bin/python bench/expressions.py
    PYTHONPATH=/work/main/src .venv/bin/python bench/expressions.py
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import time
from collections.abc import Callable
from decimal import Decimal

import numpy as np
import pyarrow as pa

from deltacommit.protocol.expressions.constraints import Constraint, check_constraints
from deltacommit.protocol.expressions.generated import GeneratedColumn, evaluate

GENERATED = [
    ("year(ts)", pa.int32()),
    ("CAST(ts AS DATE)", pa.date32()),
    ("date_format(ts, 'yyyy-MM-dd')", pa.string()),
    ("concat(upper(substring(name, 1, 2)), '-', id)", pa.string()),
    ("id * 2 + 1", pa.int64()),
    ("x / 3", pa.float64()),
    ("CAST(x AS DECIMAL(10, 2))", pa.decimal128(10, 2)),
    ("CAST(m AS DECIMAL(10, 2))", pa.decimal128(10, 2)),
    ("upper(name)", pa.string()),
]
CHECKS = ["id >= 0", "x != x OR x < 2", "NOT (x > 100)", "id * 2 < 100000000000",
          "id >= 0 AND name IS NOT NULL"]


def rows(n: int, non_ascii: float, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(n, dtype=np.int64)
    names = np.char.add("name", (ids % 1000).astype(str)).astype(object)
    accented = rng.random(n) < non_ascii
    names[accented] = np.char.add("straße", (ids[accented] % 1000).astype(str))
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    return pa.table({
        "id": ids, "x": rng.random(n),
        "m": pa.array([Decimal(int(v)).scaleb(-4) for v in rng.integers(0, 10**8, n)],
                      pa.decimal128(12, 4)),
        "ts": pa.array((np.datetime64(start.replace(tzinfo=None), "us")
                        + rng.integers(0, 10**13, n).astype("timedelta64[us]")),
                       pa.timestamp("us", tz="UTC")),
        "name": pa.array(names.tolist(), pa.string())})


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--non-ascii", type=float, default=0.01,
                        help="fraction of names with non-ASCII text")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    data = rows(args.rows, args.non_ascii, args.seed)
    cases: list[tuple[str, str, Callable[[], object]]] = []
    for expression, to in GENERATED:
        column = GeneratedColumn("g", expression)
        cases.append(("generated", expression,
                      lambda c=column, t=to: evaluate(c, data, t, "bench")))
    for check in CHECKS:
        constraint = [Constraint("check", "c", check)]
        cases.append(("check", check, lambda c=constraint: check_constraints(data, c, "bench")))
    for kind, expression, fn in cases:
        try:
            seconds = timed(fn, args.runs)
        except Exception as e:  # a checkout that refuses it: say so, go on
            print(json.dumps({"kind": kind, "expression": expression,
                              "error": f"{type(e).__name__}: {str(e)[:200]}"}), flush=True)
            continue
        print(json.dumps({"kind": kind, "expression": expression, "rows": args.rows,
                          "best_s": round(min(seconds), 4),
                          "median_s": round(statistics.median(seconds), 4),
                          "rows_per_s": round(args.rows / min(seconds))}), flush=True)


if __name__ == "__main__":
    main()
