"""``create``, ``append``, ``show``, ``history`` and ``delete``: everyday table commands."""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa

from deltacommit.cli.common import (
    Subcommands,
    add_storage_options,
    emit_json,
    parse_pairs,
    storage_options,
)
from deltacommit.engine.commit.commit_info import committed_txn_ids
from deltacommit.errors import InvalidArgumentError, SchemaMismatchError, TableNotFoundError
from deltacommit.protocol.fleet.record import FLEET_DIR, txn_id_of, version_of_round
from deltacommit.protocol.json_values import loads
from deltacommit.protocol.schema.arrow import delta_schema_dict, delta_to_arrow_type, schema_from_json
from deltacommit.protocol.schema.column_mapping import logical_values, partition_physical_names
from deltacommit.table import DeltaTable, write

INPUT_FORMATS = ("parquet", "csv", "json")


def register(sub: Subcommands) -> None:
    p = sub.add_parser("create", help="create an empty table")
    p.add_argument("uri")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--schema", help="columns as 'name:type,...' (Delta type names, e.g. "
                                    "'id:long,day:date,amount:decimal(10,2)') or a schemaString JSON")
    g.add_argument("--like", metavar="FILE", help="take the schema from a Parquet, CSV or JSON-lines file")
    p.add_argument("--partition-by", default="", help="comma-separated partition columns")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="table property, e.g. delta.checkpointInterval=10")
    p.add_argument("--name")
    p.add_argument("--description")
    add_storage_options(p)
    p.set_defaults(func=cmd_create)

    p = sub.add_parser("append", help="append Parquet, CSV or JSON-lines files as one commit")
    p.add_argument("uri")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--format", choices=INPUT_FORMATS, help="input format (default: by extension)")
    p.add_argument("--partition-by", default=None,
                   help="partition columns if the table is created by this append")
    p.add_argument("--app-id", help="application id for an idempotent write")
    p.add_argument("--app-version", type=int, help="version of that application's write")
    add_storage_options(p)
    p.set_defaults(func=cmd_append)

    p = sub.add_parser("show", help="schema, version, files, partitions and configuration")
    p.add_argument("uri")
    p.add_argument("--version", type=int, default=None)
    p.add_argument("--files", action="store_true", help="list every data file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_storage_options(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("history", help="commit history, newest first")
    p.add_argument("uri")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--json", action="store_true")
    add_storage_options(p)
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("delete", help="delete the partitions matching a predicate")
    p.add_argument("uri")
    p.add_argument("--where", required=True,
                   help="predicate over partition columns, e.g. \"day = '2026-11-22'\"")
    add_storage_options(p)
    p.set_defaults(func=cmd_delete)


_DECIMAL = re.compile(r"^decimal\(\s*\d+\s*,\s*\d+\s*\)$", re.IGNORECASE)


def parse_schema_spec(spec: str) -> pa.Schema:
    """``id:long,name:string`` or a Delta schemaString into an Arrow schema."""

    text = spec.strip()
    if text.startswith("{"):
        return schema_from_json(text)
    fields: list[pa.Field[Any]] = []
    # Split on commas that are not inside decimal(p,s).
    for part in re.split(r",(?![^(]*\))", text):
        name, sep, type_name = part.partition(":")
        name, type_name = name.strip(), type_name.strip()
        if not sep or not name or not type_name:
            raise InvalidArgumentError(f"schema entry {part!r} must look like name:type")
        delta_type: Any = type_name.lower().replace(" ", "") if _DECIMAL.match(type_name) else type_name
        fields.append(pa.field(name, delta_to_arrow_type(delta_type, name)))
    return pa.schema(fields)


def read_input(path: str, fmt: str | None, schema: pa.Schema | None = None,
               table_uri: str | None = None) -> pa.Table:
    """Read one input file, choosing the reader by ``--format`` or the file's extension.

    CSV and JSON lines carry no types, and pyarrow's guesses differ between the two (a date-like
    string is a ``date32`` in CSV and a ``timestamp`` in JSON): given the table's ``schema``, the
    columns it knows are parsed as the table declares them, so text reaches a string column as
    text and both formats agree."""
    p = Path(path)
    if p.is_dir():
        raise InvalidArgumentError(
            f"input {path} is a directory; name the data files in it (for example "
            f"{path.rstrip('/')}/*.parquet)")
    if not p.is_file():
        raise InvalidArgumentError(f"input file {path} does not exist")
    kind = fmt or {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json",
                   ".ndjson": "json"}.get(p.suffix.lower())
    if kind is None:
        raise InvalidArgumentError(
            f"cannot tell the format of {path} from its extension; pass --format "
            f"({', '.join(INPUT_FORMATS)})")
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(p)
        if kind == "csv":
            import pyarrow.csv as pcsv

            types = {f.name: f.type for f in schema} if schema is not None else None
            return pcsv.read_csv(p, convert_options=pcsv.ConvertOptions(column_types=types))
        import pyarrow.json as pjson

        if schema is None:
            return pjson.read_json(p)
        # Declared columns that a file lacks are left out, not added as nulls: the write then
        # applies the table's own rules for missing columns.
        table = pjson.read_json(p, parse_options=pjson.ParseOptions(
            explicit_schema=schema, unexpected_field_behavior="infer"))
        present = _json_keys(p)
        return table.select([n for n in table.column_names if n in present])
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as e:
        if schema is not None and kind != "parquet":
            declared = ", ".join(f"{f.name} {f.type}" for f in schema)
            raise SchemaMismatchError(
                f"cannot read {path} as {kind} with the columns of table {table_uri} "
                f"({declared}): {e}") from None
        raise InvalidArgumentError(f"cannot read {path} as {kind}: {e}") from None


def _json_keys(path: Path) -> set[str]:
    """Top-level keys used anywhere in a JSON-lines file."""
    keys: set[str] = set()
    with path.open("rb") as f:
        for line in f:
            if line.strip():
                obj = loads(line)
                if isinstance(obj, dict):
                    keys.update(obj)
    return keys


def _existing_table(uri: str, options: dict[str, str]) -> DeltaTable | None:
    """The table at ``uri``, or None when there is no table yet (the append creates it)."""

    try:
        return DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        return None


def cmd_create(args: argparse.Namespace) -> int:
    schema = parse_schema_spec(args.schema) if args.schema else read_input(args.like, None).schema
    partition_by = [c.strip() for c in args.partition_by.split(",") if c.strip()]
    t = DeltaTable.create(args.uri, schema, partition_by=partition_by,
                          configuration=parse_pairs(args.property, "--property"),
                          storage_options=storage_options(args), name=args.name,
                          description=args.description)
    print(f"created {t.uri} at version {t.version}")
    return 0


def cmd_append(args: argparse.Namespace) -> int:
    options = storage_options(args)
    # Opened once: its schema types the inputs, and the write commits through it.
    table = _existing_table(args.uri, options)
    tables = [read_input(f, args.format, table.schema if table else None,
                         table.uri if table else None) for f in args.files]
    try:
        data = pa.concat_tables(tables, promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise SchemaMismatchError(
            f"input files {', '.join(args.files)} have incompatible schemas: {e}") from None
    partition_by = ([c.strip() for c in args.partition_by.split(",") if c.strip()]
                    if args.partition_by is not None else None)
    try:
        result = write(table if table is not None else args.uri, data, mode="append",
                       partition_by=partition_by, app_id=args.app_id, app_version=args.app_version,
                       storage_options=options)
    except SchemaMismatchError as e:
        # The schema was inferred from the files (CSV and JSON lines have no declared types),
        # so a bad value shows up as a wrong column type: name the files it came from.
        raise SchemaMismatchError(f"{e} (read from {', '.join(args.files)})") from None
    if result.skipped:
        print(f"skipped: {args.app_id} version {args.app_version} is already committed "
              f"(table at version {result.version})")
    else:
        print(f"appended {result.num_rows} rows in {result.num_files} files as version "
              f"{result.version} ({result.attempts} attempt{'s' if result.attempts != 1 else ''})")
    return 0


def _describe(t: DeltaTable, list_files: bool) -> dict[str, Any]:
    files = t.files()
    physical = partition_physical_names(t.schema, t.partition_columns, t.configuration)
    partitions: Counter[str] = Counter()
    for a in files:
        values = logical_values(a.partition_values, physical)
        key = "/".join(f"{c}={values.get(c)}" for c in t.partition_columns)
        partitions[key] += 1
    info: dict[str, Any] = {
        "uri": t.uri,
        "version": t.version,
        "protocol": t.protocol.to_json(),
        "id": t.metadata.id,
        "name": t.metadata.name,
        "schema": delta_schema_dict(t.metadata.schema_string),
        "partition_columns": t.partition_columns,
        "configuration": t.configuration,
        "log_store": dict(t.log_store.describe()),
        "num_files": len(files),
        "size_bytes": sum(a.size for a in files),
        "num_records": sum(a.num_records() or 0 for a in files),
    }
    if t.partition_columns:
        info["partitions"] = dict(sorted(partitions.items()))
    if list_files:
        info["files"] = [{"path": a.path, "size": a.size, "partition_values": a.partition_values,
                          "num_records": a.num_records()} for a in files]
    info["recent_versions"] = _recent_versions(t)
    if t.table_config.group_commit_fleet:
        info["fleet"] = _fleet_folder(t)
    return info


#: How many of the newest versions ``show`` describes.
RECENT_VERSIONS = 10


def _recent_versions(t: DeltaTable) -> list[dict[str, Any]]:
    """The newest versions and how many transactions each carried (a group's or a fleet
    round's version lists its members in ``commitInfo``'s ``deltacommit.memberTxnIds``)."""

    out = []
    for e in t.history(RECENT_VERSIONS):
        out.append({"version": e.get("version"), "operation": e.get("operation"),
                    "transactions": max(1, len(committed_txn_ids(e)))})
    return out


def _fleet_folder(t: DeltaTable) -> dict[str, Any]:
    """What fleet-wide group commit has in the table's folder: transactions published and
    not yet landed or expired, and round keys (one listing)."""

    listed = list(t.store.list(f"{FLEET_DIR}/"))
    return {"folder": FLEET_DIR,
            "published": sum(1 for m in listed if txn_id_of(m.path) is not None),
            "round_keys": sum(1 for m in listed if version_of_round(m.path) is not None)}


def cmd_show(args: argparse.Namespace) -> int:
    t = DeltaTable(args.uri, version=args.version, storage_options=storage_options(args))
    info = _describe(t, args.files)
    if args.json:
        emit_json(info)
        return 0
    print(f"table      {info['uri']}")
    print(f"version    {info['version']}")
    p = info["protocol"]
    print(f"protocol   reader {p['minReaderVersion']}, writer {p['minWriterVersion']}")
    for k, v in info["log_store"].items():
        print(f"{k:<10} {v}")
    print("schema")
    for f in t.schema:
        print(f"  {f.name}: {f.type}{'' if f.nullable else ' not null'}")
    print(f"partitions {', '.join(info['partition_columns']) or '(none)'}")
    for key, n in info.get("partitions", {}).items():
        print(f"  {key}: {n} file{'s' if n != 1 else ''}")
    print(f"files      {info['num_files']} ({info['size_bytes']} bytes, {info['num_records']} records)")
    if info["configuration"]:
        print("configuration")
        for k, v in sorted(info["configuration"].items()):
            print(f"  {k} = {v}")
    for f in info.get("files", []):
        print(f"  {f['path']}  {f['size']} bytes  {f['num_records']} records")
    print("recent versions (transactions carried)")
    for r in info["recent_versions"]:
        n = r["transactions"]
        print(f"  {r['version']:>6}  {r['operation'] or '?':<14} {n} transaction"
              f"{'s' if n != 1 else ''}")
    if "fleet" in info:
        f = info["fleet"]
        print(f"fleet      {f['published']} published, {f['round_keys']} round keys in "
              f"{f['folder']}/")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    t = DeltaTable(args.uri, storage_options=storage_options(args))
    entries = t.history(args.limit)
    if args.json:
        emit_json(entries)
        return 0
    for e in entries:
        params = e.get("operationParameters") or {}
        print(f"{e['version']:>6}  {e.get('timestamp', '')}  {e.get('operation', '?'):<14} "
              f"{json.dumps(params, separators=(',', ':'))}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    t = DeltaTable(args.uri, storage_options=storage_options(args))
    result = t.delete(args.where)
    if not result["num_deleted_rows"]:
        print(f"no row matches; nothing committed (table at version {result['version']})")
        return 0
    print(f"deleted {result['num_deleted_rows']} rows as version {result['version']}")
    return 0
