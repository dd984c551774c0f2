"""The ``deltacommit`` command.

Each area (tables, DynamoDB, maintenance, verification) registers its subcommands from its own
module, so the command grows without one file knowing every feature.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from deltacommit.cli import (
    coordination_commands,
    doctor_commands,
    dynamodb_commands,
    maintenance_commands,
    stress_commands,
    table_commands,
    verify_commands,
)
from deltacommit.errors import AccessDeniedError, DeltaCommitError

MODULES = [table_commands, maintenance_commands, dynamodb_commands, coordination_commands,
           verify_commands, doctor_commands, stress_commands]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="deltacommit",
        description="Create, write, inspect and maintain Delta Lake tables with exactly-once commits.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in MODULES:
        module.register(sub)
    return parser


#: Exit status of a command the store refused to this user (sysexits' EX_NOPERM), so that a
#: script can tell "run it as the table's owner" from every other failure (1).
EXIT_ACCESS_DENIED = 77


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except AccessDeniedError as e:
        print(f"deltacommit: error: {e}", file=sys.stderr)
        return EXIT_ACCESS_DENIED
    except DeltaCommitError as e:
        print(f"deltacommit: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        # An input file, or a path the library did not expect to fail, refused by the
        # system: the operator needs the path and the reason, not a traceback.
        print(f"deltacommit: error: {e}", file=sys.stderr)
        return EXIT_ACCESS_DENIED if isinstance(e, PermissionError) else 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
