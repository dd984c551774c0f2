"""Arguments and output helpers shared by the subcommand modules."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Protocol

from deltacommit.errors import InvalidArgumentError


class Subcommands(Protocol):
    """What ``ArgumentParser.add_subparsers()`` returns, as far as the command modules use it
    (argparse names its class privately)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


def add_storage_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--storage-option", action="append", default=[], metavar="KEY=VALUE",
                   help="storage option (as in deltalake: AWS_ENDPOINT_URL, AWS_S3_LOCKING_PROVIDER, "
                        "...); the environment supplies any not given")


def storage_options(args: argparse.Namespace) -> dict[str, str]:
    return parse_pairs(args.storage_option, "--storage-option")


def parse_pairs(items: list[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidArgumentError(f"{flag} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value
    return out


def emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
