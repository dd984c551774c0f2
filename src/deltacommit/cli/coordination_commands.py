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
    from deltacommit.ops.coordination import coordination_status

    st = coordination_status(args.uri, storage_options(args))
    if args.json:
        emit_json({"table": st.table_uri, "version": st.version, "recorded": st.recorded,
                   "writer": st.writer, "writer_may_commit": st.writer_may_commit})
        return 0
    print(f"table       {st.table_uri} (version {st.version})")
    if st.recorded:
        for k, v in sorted(st.recorded.items()):
            print(f"recorded    {k} = {v}")
    else:
        print("recorded    nothing (not pinned: any mechanism's writers may commit; pin it with "
              "`deltacommit coordination set`)")
    for k, v in sorted(st.writer.items()):
        print(f"these options  {k} = {v}")
    print("may commit  " + ("yes" if st.writer_may_commit else
                            "NO: these options select another mechanism than the table records"))
    return 0


_MECHANISM_OPTIONS = ("AWS_S3_LOCKING_PROVIDER", "conditional_put", "DELTA_DYNAMO_TABLE_NAME",
                      "AWS_ENDPOINT_URL_DYNAMODB")


def _set(args: argparse.Namespace) -> int:
    from deltacommit.ops.coordination import set_coordination

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
