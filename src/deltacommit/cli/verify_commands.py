"""The ``deltacommit verify`` command: the history checker for operators and torture runs."""

from __future__ import annotations

import argparse

from deltacommit.cli.common import Subcommands, add_storage_options, emit_json, storage_options
from deltacommit.io.journal import read_journals
from deltacommit.ops.verify import verify_table


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "verify", help="check a table's history against journals of acknowledged writes",
        description="Check that the log has contiguous versions, that every acknowledged write "
                    "(listed in the journals) is in it exactly once and unchanged, that DynamoDB "
                    "entries are complete or repairable, and that the table reads back. Never "
                    "writes. Exit status 0 when every check passes, 1 otherwise.")
    p.add_argument("uri")
    p.add_argument("--journal", action="append", default=[], metavar="FILE_OR_DIR",
                   help="a journal of acknowledged writes (JSON lines: txn_id, version, digest); "
                        "a directory stands for every *.jsonl file in it; repeatable")
    p.add_argument("--no-data", action="store_true",
                   help="check the log only; do not read the data files back")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_storage_options(p)
    p.set_defaults(func=_verify)


def _verify(args: argparse.Namespace) -> int:
    entries = read_journals(args.journal)
    report = verify_table(args.uri, entries, storage_options=storage_options(args),
                          read_data=not args.no_data)
    if args.json:
        emit_json(report.to_json())
    else:
        print(f"table       {report.table_uri} ({report.mechanism})")
        print(f"versions    {report.first_version}..{report.last_version} "
              f"({report.commits} commit files, {report.checkpoints} checkpoints checked)")
        print(f"writes      {report.transactions} transactions in the log, "
              f"{report.acknowledged} acknowledged in journals"
              + (f", {report.unverifiable} older than the retained log" if report.unverifiable
                 else ""))
        if report.dynamodb_entries:
            print(f"dynamodb    {report.dynamodb_entries} entries, "
                  f"{report.incomplete_entries} incomplete (repairable)")
        if not args.no_data:
            print(f"data        {report.files} live files, {report.rows} rows read back")
        for note in report.notes:
            print(f"note        {note}")
        for problem in report.problems:
            print(f"PROBLEM     {problem}")
        if report.problems_omitted:
            print(f"PROBLEM     ... and {report.problems_omitted} more")
        count = len(report.problems) + report.problems_omitted
        print("result      " + ("ok" if report.ok else f"{count} problem(s)"))
    return 0 if report.ok else 1
