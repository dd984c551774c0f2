"""``deltacommit coordination``: what commit mechanism a table expects, and moving it."""

from __future__ import annotations

import argparse

from deltacommit.cli.common import (
    Subcommands,
    add_storage_options,
    emit_json,
    parse_pairs,
    storage_options,
)
from deltacommit.cli.doctor_commands import print_findings
from deltacommit.ops.coordination import set_coordination
from deltacommit.ops.doctor import diagnose


def register(sub: Subcommands) -> None:
    p = sub.add_parser("coordination", help="show or change the commit mechanism a table records")
    csub = p.add_subparsers(dest="coordination_command", required=True, metavar="ACTION")

    show = csub.add_parser("show", help="the mechanism the table records, and what these "
                                        "options would use")
    show.add_argument("uri")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    add_storage_options(show)
    show.set_defaults(func=_show)

    put = csub.add_parser(
        "set", help="record a new mechanism, committed through the current one",
        description="Commit the table's new commit mechanism through its current one (-o gives "
                    "the current mechanism's options, --to-option the new one's; --to "
                    "conditional means the same S3 options without AWS_S3_LOCKING_PROVIDER and "
                    "conditional_put). Run it once every writer of the old mechanism has been "
                    "moved: from the next version on, deltacommit writers configured for the "
                    "old mechanism refuse to commit.")
    put.add_argument("uri")
    put.add_argument("--to", choices=["conditional"],
                     help="shorthand for the new mechanism's options")
    put.add_argument("--to-option", action="append", default=[], metavar="KEY=VALUE",
                     help="a storage option of the new mechanism (repeatable)")
    add_storage_options(put)
    put.set_defaults(func=_set)


def _show(args: argparse.Namespace) -> int:
    """What the table records and these options select, and whether writers with them may
    commit: not only the pin, but everything ``deltacommit doctor`` finds that stops them (a
    version another mechanism wrote, a split fleet, an unrepairable entry)."""

    report = diagnose(args.uri, storage_options(args))
    shown = [f for f in report.findings if f.severity != "note"]
    if args.json:
        emit_json({"table": report.table_uri, "version": report.version,
                   "recorded": report.recorded, "writer": report.writer,
                   "writer_may_commit": report.can_commit,
                   "findings": [f.to_json() for f in shown]})
        return 0
    print(f"table       {report.table_uri} (version {report.version})")
    if report.recorded:
        for k, v in sorted(report.recorded.items()):
            print(f"recorded    {k} = {v}")
    else:
        print("recorded    nothing (not pinned: any mechanism's writers may commit; pin it with "
              "`deltacommit coordination set`)")
    for k, v in sorted(report.writer.items()):
        print(f"these options  {k} = {v}")
    print("may commit  " + ("yes" if report.can_commit else
                            "NO: " + "; ".join(sorted({_reason(f.kind) for f in report.errors()}))))
    print_findings(shown)
    return 0


def _reason(kind: str) -> str:
    return {
        "pin-not-honoured": "these options select another mechanism than the table records",
        "unpinned-dynamodb-fleet": "the table's writers commit through DynamoDB",
        "tablepath-not-joined": "these options configure another tablePath than the fleet's",
        "unentried-versions": "versions without DynamoDB entries (another mechanism writes the "
                              "table)",
        "split-tablepath": "entries under several tablePath spellings",
        "unrecoverable-entry": "an incomplete entry that cannot be repaired",
        "entry-without-commit": "an entry whose commit file is missing",
    }.get(kind, kind)


_MECHANISM_OPTIONS = ("AWS_S3_LOCKING_PROVIDER", "conditional_put", "DELTA_DYNAMO_TABLE_NAME",
                      "AWS_ENDPOINT_URL_DYNAMODB")


def _set(args: argparse.Namespace) -> int:
    current = storage_options(args)
    if args.to == "conditional":
        target = {k: v for k, v in current.items()
                  if k not in _MECHANISM_OPTIONS and k.upper() not in _MECHANISM_OPTIONS}
    else:
        target = dict(current)
    target.update(parse_pairs(args.to_option, "--to-option"))
    result = set_coordination(args.uri, storage_options=current, new_storage_options=target)
    if result is None:
        print(f"{args.uri} already records that mechanism; nothing committed")
    else:
        print(f"{args.uri}: new mechanism recorded at version {result.version}")
    return 0
