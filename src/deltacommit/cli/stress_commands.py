"""The ``deltacommit stress`` command: a torture run against a table, then the history checker."""

from __future__ import annotations

import argparse

from deltacommit.cli.common import Subcommands, add_storage_options, emit_json, storage_options
from deltacommit.testing.stress import run_stress


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "stress", help="torture a table with concurrent writers and random kill -9, then verify",
        description="Start N writer processes appending to URI, kill random writers with "
                    "SIGKILL at --kill-rate per second and restart them, stop after --seconds, "
                    "then check with the history checker that every acknowledged write is in "
                    "the log exactly once. Creates the table if absent. Exit status 0 when the "
                    "history checks out, 1 otherwise.")
    p.add_argument("uri")
    p.add_argument("--writers", type=int, default=8, help="writer processes (default 8)")
    p.add_argument("--seconds", type=float, default=60.0, help="how long to run (default 60)")
    p.add_argument("--kill-rate", type=float, default=0.0,
                   help="SIGKILLs per second across all writers (default 0: no kills)")
    p.add_argument("--rows-per-commit", type=int, default=10)
    p.add_argument("--journal-dir", help="where journals and writer logs go (default: a new "
                                         "temporary directory, printed)")
    p.add_argument("--seed", type=int, help="seed of the kill schedule and the data")
    p.add_argument("--peer", action="append", default=[], choices=["deltalake", "spark-emulator"],
                   help="also run a writer process of another engine (repeatable): deltalake "
                        "1.6.0's write_deltalake, or the emulator of Spark's "
                        "S3DynamoDBLogStore; with --writers 0 the peers run alone (a baseline)")
    p.add_argument("--fleet", action="store_true",
                   help="fleet-wide group commit: set deltacommit.groupCommit.fleet=true on the "
                        "table (creating it so, or in one commit) and run every writer as a "
                        "host of its own (--as-hosts)")
    p.add_argument("--as-hosts", action="store_true",
                   help="every writer stands for a host: its own turn folder, so no two "
                        "writers take turns (without --fleet: the racing fleet of hosts)")
    p.add_argument("--json", action="store_true", help="machine-readable summary")
    add_storage_options(p)
    p.set_defaults(func=_stress)


def _stress(args: argparse.Namespace) -> int:
    report = run_stress(args.uri, writers=args.writers, seconds=args.seconds,
                        kill_rate=args.kill_rate, storage_options=storage_options(args),
                        rows_per_commit=args.rows_per_commit, journal_dir=args.journal_dir,
                        seed=args.seed, on_progress=None if args.json else print,
                        peers=args.peer, fleet=args.fleet,
                        as_hosts=True if args.as_hosts else None)
    if args.json:
        emit_json(report.to_json())
        return 0 if report.ok else 1
    v = report.verify
    rate = report.commits / report.elapsed if report.elapsed else 0.0
    print(f"commits     {report.commits} acknowledged ({rate:.1f}/s), "
          f"{report.transient_errors} transient errors")
    print(f"kills       {report.kills} (SIGKILL), {report.restarts} restarts")
    if v is not None:
        print(f"log         versions {v.first_version}..{v.last_version}, "
              f"{v.transactions} transactions, {v.rows} rows read back")
        if report.fleet or report.as_hosts:
            print(f"versions    {report.transactions_per_version} transactions per version, "
                  f"at most {v.largest_group} in one")
        if report.fleet_records_left:
            print(f"fleet       {report.fleet_records_left} published records left in the fleet's "
                  "folder")
        for problem in v.problems:
            print(f"PROBLEM     {problem}")
    if report.peers is not None:
        pr = report.peers
        for kind, n in sorted(pr.acknowledged.items()):
            errors = dict(pr.errors.get(kind, {}))
            print(f"peer        {kind}: {n} writes acknowledged, {pr.lost.get(kind, 0)} rows lost, "
                  f"errors {errors or 'none'}")
        print(f"rows        {pr.duplicated_rows} duplicated")
    for failure in report.failed_writers:
        print(f"FAILED      {failure}")
    print("result      " + ("ok: every acknowledged write is in the log exactly once"
                            if report.ok else "FAILED"))
    return 0 if report.ok else 1
