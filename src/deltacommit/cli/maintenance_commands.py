"""``checkpoint``, ``cleanup``, ``optimize`` and ``vacuum``: keeping a table cheap to load and
read, and its storage bounded."""

from __future__ import annotations

import argparse
from typing import Any

from deltacommit.cli.common import Subcommands, add_storage_options, emit_json, storage_options
from deltacommit.protocol.table_config.properties import parse_size
from deltacommit.table import DeltaTable


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

    p = sub.add_parser("optimize", help="compact small data files (dataChange=false: concurrent "
                                        "appends never conflict with it)")
    p.add_argument("uri")
    p.add_argument("--where", default=None,
                   help="only partitions matching this predicate on partition columns")
    p.add_argument("--target-size", default=None,
                   help="bytes per rewritten file, e.g. 134217728 or 128mb (default: the "
                        "table's delta.targetFileSize, else 100mb)")
    p.add_argument("--min-commit-interval", type=float, default=None,
                   help="commit the bins rewritten so far every this many seconds")
    p.add_argument("--max-concurrent-tasks", type=int, default=None,
                   help="bins rewritten at once (default: 1 on local disk, 8 elsewhere)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_storage_options(p)
    p.set_defaults(func=cmd_optimize)

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


def cmd_optimize(args: argparse.Namespace) -> int:
    import sys


    t = _open(args)
    size = None if args.target_size is None else parse_size(args.target_size, "--target-size")
    tty = sys.stderr.isatty() and not args.json

    def progress(done: int, total: int) -> None:
        if tty:
            width = 30
            filled = width * done // total
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} bins")
            if done == total:
                sys.stderr.write("\n")
            sys.stderr.flush()

    metrics = t.optimize.compact(predicate=args.where, target_size=size,
                                 min_commit_interval=args.min_commit_interval,
                                 max_concurrent_tasks=args.max_concurrent_tasks,
                                 progress=progress)
    if args.json:
        emit_json({"uri": t.uri, **metrics})
        return 0
    if not metrics["versions"]:
        print(f"nothing to compact in {t.uri} ({metrics['totalConsideredFiles']} files "
              f"considered, {metrics['totalFilesSkipped']} skipped)")
        return 0
    versions = ", ".join(str(v) for v in metrics["versions"])
    print(f"compacted {metrics['numFilesRemoved']} files into {metrics['numFilesAdded']} in "
          f"{metrics['partitionsOptimized']} partition(s) of {t.uri}: version(s) {versions}")
    if metrics["binsLostToConcurrentRemoves"]:
        print(f"  {metrics['binsLostToConcurrentRemoves']} bin(s) left for the next run: a "
              "concurrent delete or overwrite removed some of their files")
    return 0
