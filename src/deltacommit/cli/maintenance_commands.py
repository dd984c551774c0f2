"""``checkpoint``, ``cleanup`` and ``vacuum``: keeping a table cheap to load and its storage bounded."""

from __future__ import annotations

import argparse
from typing import Any

from deltacommit.cli.common import Subcommands, add_storage_options, emit_json, storage_options


def register(sub: Subcommands) -> None:
    p = sub.add_parser("checkpoint", help="write a checkpoint at the latest version")
    p.add_argument("uri")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_storage_options(p)
    p.set_defaults(func=cmd_checkpoint)

    p = sub.add_parser("cleanup", help="delete log files older than delta.logRetentionDuration "
                                       "that no retained checkpoint needs")
    p.add_argument("uri")
    p.add_argument("--dry-run", action="store_true", help="list the files without deleting them")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_storage_options(p)
    p.set_defaults(func=cmd_cleanup)

    p = sub.add_parser("vacuum", help="list (or delete) data files the table no longer references")
    p.add_argument("uri")
    p.add_argument("--retention-hours", type=float, default=None,
                   help="keep unreferenced files younger than this (default: the table's "
                        "delta.deletedFileRetentionDuration, one week)")
    p.add_argument("--execute", action="store_true",
                   help="delete the files; without it vacuum only lists them (a dry run)")
    p.add_argument("--no-enforce-retention", action="store_true",
                   help="allow a retention shorter than the table's delta.deletedFileRetentionDuration")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_storage_options(p)
    p.set_defaults(func=cmd_vacuum)


def _open(args: argparse.Namespace) -> Any:
    from deltacommit.table import DeltaTable

    return DeltaTable(args.uri, storage_options=storage_options(args))


def cmd_checkpoint(args: argparse.Namespace) -> int:
    info = _open(args).checkpoint()
    if args.json:
        emit_json(info.to_json())
        return 0
    if info.created:
        print(f"checkpoint at version {info.version} written: {info.num_actions} actions, "
              f"{info.num_add_files} files, {info.size_in_bytes} bytes ({info.path})")
    else:
        print(f"checkpoint at version {info.version} already present ({info.path})")
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    t = _open(args)
    deleted = t.cleanup_log(dry_run=args.dry_run)
    if args.json:
        emit_json({"uri": t.uri, "dry_run": args.dry_run, "files": deleted})
        return 0
    verb = "would delete" if args.dry_run else "deleted"
    print(f"{verb} {len(deleted)} expired log file{'s' if len(deleted) != 1 else ''} of {t.uri}")
    for path in deleted:
        print(f"  {path}")
    return 0


def cmd_vacuum(args: argparse.Namespace) -> int:
    t = _open(args)
    files = t.vacuum(retention_hours=args.retention_hours, dry_run=not args.execute,
                     enforce_retention_duration=not args.no_enforce_retention)
    if args.json:
        emit_json({"uri": t.uri, "dry_run": not args.execute, "files": files})
        return 0
    verb = "deleted" if args.execute else "would delete"
    print(f"{verb} {len(files)} unreferenced data file{'s' if len(files) != 1 else ''} of {t.uri}")
    for path in files:
        print(f"  {path}")
    return 0
