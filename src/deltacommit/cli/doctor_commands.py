"""``deltacommit doctor``: why a table's writers cannot commit, named from its storage."""

from __future__ import annotations

import argparse
from typing import Any

from deltacommit.cli.common import Subcommands, add_storage_options, emit_json, storage_options
from deltacommit.ops.doctor import diagnose

_LABELS = {"error": "ERROR", "warning": "WARNING", "note": "note"}


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "doctor", help="read the log and the coordination store and say what stops writers",
        description="Read a table's log and its coordination store (the DynamoDB entries on "
                    "Spark's protocol) as writers with these options would, and name what stops "
                    "them or splits the fleet: versions without DynamoDB entries and the writer "
                    "that made them, entries under several tablePath spellings, a pin these "
                    "options cannot honour, incomplete entries (repairable or not) and stale "
                    "temp files. Never writes. Exit status 0 when writers with these options "
                    "can commit, 1 otherwise.")
    p.add_argument("uri")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_storage_options(p)
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    report = diagnose(args.uri, storage_options(args))
    if args.json:
        emit_json(report.to_json())
    else:
        print_report(report)
    return 0 if report.can_commit else 1


def print_report(report: Any) -> None:
    """The report as ``doctor`` prints it (``coordination show`` and ``verify`` print its
    findings the same way)."""
    version = "no readable version" if report.version is None else f"version {report.version}"
    print(f"table       {report.table_uri} ({version})")
    mechanism = report.writer.get("deltacommit.coordination", report.mechanism)
    print(f"options     commit through {mechanism}")
    dyn = report.dynamodb
    if dyn is not None:
        latest = "none" if dyn.latest_entry is None else f"version {dyn.latest_entry}"
        print(f"dynamodb    table {dyn.table_name} at {dyn.endpoint}, tablePath {dyn.table_path}: "
              f"{dyn.entries} entries, latest {latest}")
    if report.recorded:
        print("recorded    " + ", ".join(f"{k}={v}" for k, v in sorted(report.recorded.items())))
    else:
        print("recorded    no commit mechanism (not pinned)")
    fleet = report.fleet
    if fleet is not None:
        print(f"fleet       {fleet.live} published, {fleet.stale} stale, {fleet.unreadable} "
              f"unreadable records; {fleet.round_keys} round keys ({fleet.stale_round_keys} "
              "of versions that exist)")
    print_findings(report.findings)
    print(f"result      {report.summary()}")


def print_findings(findings: Any) -> None:
    for f in findings:
        print(f"{_LABELS[f.severity]:<11} {f.message}")
