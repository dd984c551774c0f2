"""``dynamodb create-table``, ``dynamodb status`` and ``dynamodb repair``: the commit tables.

``create-table`` makes the table the way Spark's and delta-rs's documentation recommends
(PAY_PER_REQUEST, TTL on ``expireTime``) and waits until it is usable, so a first commit right
after it cannot fail on a table still being created.  ``--schema dynamo-commit`` makes
object_store's DynamoCommit lease table instead (keys ``path``/``etag``).
"""

from __future__ import annotations

import argparse
from typing import Any

from deltacommit.cli.common import Subcommands, add_storage_options, emit_json, storage_options
from deltacommit.errors import InvalidArgumentError
from deltacommit.io.aws.resolve import resolve_aws_config
from deltacommit.ops.doctor import diagnose

SCHEMAS = ("delta-log", "dynamo-commit")


def register(sub: Subcommands) -> None:
    p = sub.add_parser("dynamodb", help="DynamoDB tables that coordinate commits on S3")
    dsub = p.add_subparsers(dest="dynamodb_command", required=True, metavar="SUBCOMMAND")

    c = dsub.add_parser("create-table", help="create the DynamoDB table (PAY_PER_REQUEST, TTL on "
                                             "expireTime) and wait until it is active")
    c.add_argument("--table-name", default=None,
                   help="table name (default: DELTA_DYNAMO_TABLE_NAME, else delta_log; for "
                        "--schema dynamo-commit the table of conditional_put=dynamo:<table>)")
    c.add_argument("--schema", choices=SCHEMAS, default="delta-log",
                   help="delta-log: Spark's S3DynamoDBLogStore entries (tablePath, fileName), "
                        "used with AWS_S3_LOCKING_PROVIDER=dynamodb; dynamo-commit: object_store's "
                        "DynamoCommit leases (path, etag), used with conditional_put=dynamo:<table>")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    add_storage_options(c)
    c.set_defaults(func=cmd_create_table)

    s = dsub.add_parser("status", help="latest entry, incomplete entries and TTL state of a table's "
                                       "commit entries")
    s.add_argument("uri")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    add_storage_options(s)
    s.set_defaults(func=cmd_status)

    r = dsub.add_parser("repair", help="complete the incomplete commit entries of a table")
    r.add_argument("uri")
    r.add_argument("--drop-unrecoverable", action="store_true",
                   help="delete incomplete entries whose temp file and commit file are both gone "
                        "(their commit is lost; the entry would block every writer)")
    r.add_argument("--drop-stale-entries", action="store_true",
                   help="delete all entries of a table that no longer has commit files (deleted "
                        "and about to be re-created at the same location)")
    r.add_argument("--restore-entry", action="store_true",
                   help="write a complete entry for the newest commit if it has none (the "
                        "DynamoDB table was re-created or emptied while every writer committed "
                        "through it; writers otherwise refuse for half the entries' TTL)")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    add_storage_options(r)
    r.set_defaults(func=cmd_repair)


def _config(args: argparse.Namespace) -> Any:
    return resolve_aws_config(storage_options(args))


def cmd_create_table(args: argparse.Namespace) -> int:
    from deltacommit.io.logstore.s3_dynamodb.admin import create_log_table

    config = _config(args)
    client = config.dynamodb_client()
    if args.schema == "dynamo-commit":
        name = args.table_name or config.conditional_put.dynamo_table
        if not name:
            raise InvalidArgumentError("--schema dynamo-commit needs --table-name (or "
                                       "conditional_put=dynamo:<table> in the options)")
        from deltacommit.io.logstore.dynamo_commit.log_store import create_lease_table

        lease = create_lease_table(client, name, billing_mode=config.dynamo_billing_mode)
        if args.json:
            emit_json({"table": name, "schema": args.schema, "created": lease.created,
                       "ttl_enabled": lease.ttl_enabled})
        else:
            print(lease.describe())
        return 0
    name = args.table_name or config.dynamo_table_name
    result = create_log_table(client, name, billing_mode=config.dynamo_billing_mode)
    if args.json:
        emit_json({"table": name, "schema": args.schema, "created": result.created,
                   "status": result.status, "ttl": result.ttl, "endpoint": result.endpoint})
        return 0
    verb = "created" if result.created else "already exists"
    print(f"DynamoDB table {name} {verb} at {result.endpoint}: {result.status}, TTL {result.ttl}")
    if result.ttl_warning:
        print(f"warning: {result.ttl_warning}")
    return 0


def _log_store(args: argparse.Namespace) -> Any:
    from deltacommit.io.logstore.s3_dynamodb.log_store import DynamoDBLogStore

    return DynamoDBLogStore.open(args.uri, storage_options(args))


def _entry_json(entry: Any) -> dict[str, Any] | None:
    if entry is None:
        return None
    return {"version": entry.version, "fileName": entry.file_name, "tempPath": entry.temp_path,
            "complete": entry.complete, "expireTime": entry.expire_time}


def cmd_status(args: argparse.Namespace) -> int:
    from deltacommit.io.logstore.s3_dynamodb.admin import ttl_status

    ls = _log_store(args)
    keys = ls.fleet_keys()
    if len(keys) == 1:
        ls.table_path = next(iter(keys))  # show the key the fleet uses, as a writer would join it
    latest = ls.latest_entry()
    incomplete = list(ls.entries(incomplete_only=True))
    ttl = ttl_status(ls.client, ls.table_name)
    # What the entries do not show by themselves: newer versions without entries (another
    # mechanism writes the table), an entry whose commit file is gone, an unrepairable entry.
    findings = [f for f in _diagnose(args, ls).findings if f.kind in _STATUS_FINDINGS]
    out = {"table": ls.table_name, "endpoint": ls.endpoint, "tablePath": ls.table_path,
           "tablePaths": keys,
           "latest": _entry_json(latest), "incomplete": [_entry_json(e) for e in incomplete],
           "ttl": ttl, "findings": [f.to_json() for f in findings]}
    if args.json:
        emit_json(out)
        return 0
    print(f"DynamoDB table {ls.table_name} at {ls.endpoint}, tablePath {ls.table_path}")
    print(f"TTL: {ttl}")
    if len(keys) > 1:
        print("WARNING: entries under several tablePath spellings (writers using different ones "
              "do not exclude each other): "
              + ", ".join(f"{k} (newest version {v})" for k, v in sorted(keys.items())))
    elif not keys:
        print("tablePath spellings with entries: none")
    if latest is None:
        print("latest entry: none (no commits through DynamoDB, or all expired)")
    else:
        state = "complete" if latest.complete else "INCOMPLETE"
        expires = f", expireTime {latest.expire_time}" if latest.expire_time is not None else ""
        print(f"latest entry: version {latest.version} ({state}{expires}), tempPath {latest.temp_path}")
    if incomplete:
        print(f"incomplete entries: {len(incomplete)}")
        for e in incomplete:
            print(f"  version {e.version}: tempPath {e.temp_path}")
        print(f"complete them with `deltacommit dynamodb repair {args.uri}`")
    else:
        print("incomplete entries: none")
    for f in findings:
        print(f"{f.severity.upper()}: {f.message}")
    return 0


#: Doctor findings ``dynamodb status`` adds to what it lists itself (spellings, incomplete
#: entries).
_STATUS_FINDINGS = frozenset({"unentried-versions", "entry-without-commit", "unrecoverable-entry"})


def _diagnose(args: argparse.Namespace, ls: Any) -> Any:
    return diagnose(args.uri, storage_options(args), log_store=ls)


def cmd_repair(args: argparse.Namespace) -> int:
    ls = _log_store(args)
    if args.drop_stale_entries:
        count = ls.drop_stale_entries()
        if args.json:
            emit_json({"tablePath": ls.table_path, "dropped": count})
        else:
            print(f"deleted {count} stale entr{'y' if count == 1 else 'ies'} of {ls.table_path} "
                  f"from DynamoDB table {ls.table_name}")
        return 0
    if args.restore_entry:
        _check_recorded(ls)
        version, written = ls.restore_newest_entry()
        if args.json:
            emit_json({"tablePath": ls.table_path, "version": version, "restored": written})
        elif written:
            print(f"restored the complete entry of version {version} of {ls.table_path} in "
                  f"DynamoDB table {ls.table_name} at {ls.endpoint}")
        else:
            print(f"version {version} of {ls.table_path} already has an entry in DynamoDB table "
                  f"{ls.table_name}; nothing written")
        return 0
    reports = ls.repair(drop_unrecoverable=args.drop_unrecoverable)
    failed = [r for r in reports if r.action == "unrecoverable"]
    if args.json:
        emit_json({"tablePath": ls.table_path,
                   "entries": [{"version": r.version, "tempPath": r.temp_path, "action": r.action,
                                "detail": r.detail} for r in reports]})
        return 1 if failed else 0
    if not reports:
        print(f"no incomplete entries for {ls.table_path} in DynamoDB table {ls.table_name}")
    for r in reports:
        print(f"version {r.version}: {r.action}" + (f": {r.detail}" if r.detail else ""))
    return 1 if failed else 0


def _check_recorded(ls: Any) -> None:
    """Refuse to restore an entry where the table records another DynamoDB table or
    ``tablePath`` than these options give (a writer with them follows the recorded spelling
    where it can, and so does the restore): the entry would split the fleet, not rejoin it."""
    from deltacommit.engine.snapshot.snapshot import Snapshot
    from deltacommit.errors import CoordinationMismatchError
    from deltacommit.io.logstore import ConditionalPutLogStore
    from deltacommit.ops.coordination import recorded_coordination

    recorded = recorded_coordination(Snapshot.load(ConditionalPutLogStore(ls.store)).configuration)
    for key, mine in ls.coordination_config(recorded).items():
        if key in recorded and recorded[key] != mine:
            raise CoordinationMismatchError(
                f"table {ls.table_uri} records {key}={recorded[key]!r} but these options give "
                f"{mine!r}; nothing was restored. Run it with the options of the table's "
                "writers (`deltacommit coordination show`)")
