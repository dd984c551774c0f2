"""Parquet data files with Delta statistics: the one place data files are written.

``dc.write``, group commit, the Appender and Spark tasks all write data through here, so every
file gets the same Parquet settings, statistics, naming and durability.  A data file has a
fresh unique name and stays invisible until a commit references it, so it is written straight
to its final name: a crash leaves at most an unreferenced file (vacuum removes it).  On a local
disk it is fsynced before its add action is returned, so a commit never outlives its data;
unless the writer asks for ``durable=False`` because its commit makes the files durable itself
(``ObjectStore.make_durable``, called by the commit loop for a group's files at once); a remote
file is then uploaded in the background meanwhile.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import wait
from dataclasses import dataclass
from typing import Any, Protocol, cast

import pyarrow as pa
import pyarrow.parquet as pq

from deltacommit.errors import SchemaMismatchError
from deltacommit.io.dictionary_columns import (
    decoded,
    plain_schema,
    plain_table,
    referenced_only,
)
from deltacommit.io.integer_encodings import writer_options
from deltacommit.io.storage import open_store
from deltacommit.io.storage.base import ObjectStore
from deltacommit.io.storage.local import storage_error
from deltacommit.protocol.actions import Add
from deltacommit.protocol.expressions.declarations import (
    check_partition_not_null,
    generated_columns,
    table_constraints,
)
from deltacommit.protocol.features.identity import fill_identity, identity_columns
from deltacommit.protocol.log.paths import ResolvedPath
from deltacommit.protocol.partitions import (
    decode_add_path,
    encode_add_path,
    partition_path,
    split_by_partition,
)
from deltacommit.protocol.schema.arrow import cast_to_table_schema, check_write_compatible
from deltacommit.protocol.schema.column_mapping import physical_names, physical_values, to_physical
from deltacommit.protocol.schema.nested import enforce_nested_not_null, has_nested_required
from deltacommit.protocol.stats.compute import compute_stats
from deltacommit.protocol.stats.footer import footer_bounds
from deltacommit.protocol.table_config.config import TableConfig
from deltacommit.runtime.clock import Clock, RandomSource
from deltacommit.runtime.threads import CallThreads

#: Parquet settings of data files.  Snappy, as Spark writes.  Dictionary pages are capped at
#: 256 KiB instead of pyarrow's 1 MiB: a high-cardinality column (ids, measurements) then falls
#: back to plain encoding after 32k values instead of 128k, which makes such files about 15%
#: smaller and several times faster to write; columns with few distinct values keep their
#: dictionaries.
PARQUET_OPTIONS: dict[str, Any] = {"compression": "snappy", "dictionary_pagesize_limit": 256 * 1024}


def data_file_name(random: RandomSource, index: int) -> str:
    """Spark's naming: ``part-<index>-<uuid>-c000.snappy.parquet``."""
    return f"part-{index:05d}-{random.uuid()}-c000.snappy.parquet"


#: The folder of change data files (PROTOCOL.md "Change Data Files"), and their column
#: saying what each row is (``insert``, ``delete``, ``update_preimage``, ``update_postimage``).
CHANGE_DATA_DIR = "_change_data"
CHANGE_TYPE_COLUMN = "_change_type"


def write_data_file(store: ObjectStore, values: Mapping[str, str | None],
                    partition_columns: Sequence[str], data: pa.Table, *, index: int,
                    random: RandomSource, clock: Clock, indexed_cols: int = 32,
                    column_mapping: str = "none", table_schema: pa.Schema | None = None,
                    durable: bool = True, change_data: bool = False,
                    delta_integers: bool = True) -> Add:
    """Write one file of one partition (``data`` holds the data columns only, in the table's
    schema).  NOT NULL fields below a null parent get their defaults first, as Spark writes
    them (``nested.py``), and a null where no parent explains it is refused.

    With column mapping (``column_mapping`` ``name`` or ``id``, ``table_schema`` the table's
    schema with its mapping metadata) the file, its directory, its partition values and its
    statistics use physical names and the Parquet columns carry their field ids.

    ``durable=False`` leaves a local file unsynced, and starts a remote file's upload in the
    background (``ObjectStore.put_soon``): the caller must pass it to ``store.make_durable``
    before any commit references it.

    ``change_data``: a change data file (``data`` has the ``_change_type`` column last),
    written as Spark writes them, ``_change_data/<partition>/cdc-<index>-<uuid>.c000.snappy
    .parquet``, without statistics; the caller turns the add into a ``cdc`` action.

    ``delta_integers`` (``deltacommit.parquet.deltaEncodedIntegers``): integer columns of
    close, mostly distinct values are written DELTA_BINARY_PACKED (``integer_encodings``)."""

    if has_nested_required(data.schema):
        data = enforce_nested_not_null(data, data.schema)
    # A void column is all nulls; Spark leaves it out of the file and readers fill it in.
    data = data.select([f.name for f in data.schema if not pa.types.is_null(f.type)])
    if column_mapping != "none":
        if table_schema is None:
            raise ValueError("write_data_file: column mapping needs the table schema")
        names = physical_names(table_schema, column_mapping)
        change_type = None
        if change_data:
            change_type = data.column(CHANGE_TYPE_COLUMN)
            data = data.drop_columns([CHANGE_TYPE_COLUMN])
        # Columns the table's schema lacks (the hidden materialized row-tracking columns a
        # rewrite keeps ids in) are stored under their own names.
        extra = [c for c in data.column_names if table_schema.get_field_index(c) < 0]
        kept = data.select(extra)
        data = data.drop_columns(extra)
        data = to_physical(data, pa.schema([table_schema.field(c) for c in data.column_names]),
                           column_mapping)
        for c in extra:
            data = data.append_column(kept.schema.field(c).remove_metadata(), kept.column(c))
        if change_type is not None:
            data = data.append_column(CHANGE_TYPE_COLUMN, change_type)
        partition_columns = [names[c] for c in partition_columns]
        values = physical_values(values, names)

    directory = partition_path([(c, values.get(c)) for c in partition_columns])
    if change_data:
        directory = CHANGE_DATA_DIR + ("/" + directory if directory else "")
        name = f"cdc-{index:05d}-{random.uuid()}.c000.snappy.parquet"
    else:
        name = data_file_name(random, index)
    rel = (directory + "/" if directory else "") + name
    local = store.local_path(rel)
    if local is not None:
        try:
            if directory:
                os.makedirs(os.path.dirname(local), exist_ok=True)
            size, mtime, footer = _write_local(local, data, durable, delta_integers)
        except OSError as e:
            raise storage_error("write data file", local, e) from None
    else:
        encoded, footer = _encode_parquet(data, delta_integers)
        body = encoded.to_pybytes()
        modified = None
        if durable:
            modified = store.put(rel, body).last_modified_ms
        else:
            # Uploaded in the background: the commit that names the file waits for it
            # (``make_durable``), after preparing its version meanwhile.
            store.put_soon(rel, body)
        size, mtime = len(body), modified or int(clock.time() * 1000)
    return Add(path=encode_add_path(rel), partition_values=dict(values), size=size,
               modification_time=mtime, data_change=not change_data,
               stats=None if change_data else compute_stats(
                   data, indexed_cols,
                   known_bounds=None if footer is None
                   else footer_bounds(footer, plain_schema(data.schema))))


#: Rows from which a data file's statistics take their bounds from the Parquet writer's
#: (``footer_bounds``) instead of computing them from the rows again: below, collecting and
#: reading the footer costs more than the pass over the rows (about 0.06 ms a file).
FOOTER_BOUNDS_FROM_ROWS = 16_384


def _encode_parquet(data: pa.Table, delta_integers: bool = True
                    ) -> tuple[pa.Buffer, pq.FileMetaData | None]:
    """A data file's bytes, encoded in Arrow's memory, and, from ``FOOTER_BOUNDS_FROM_ROWS``
    rows, its footer (whose column statistics give ``footer_bounds``).  Written through a
    Python file object instead, every page pyarrow writes would call back into Python, and
    with many writer threads each of those calls waits its turn for the interpreter.

    Columns may be dictionary arrays of the table's string or binary type (a rewrite keeps
    the dictionaries it read: ``io/dictionary_columns``); the file is then the one their values
    would make, its ``ARROW:schema`` included, so no reader sees a dictionary type.
    ``delta_integers``: see ``write_data_file``."""
    sink = pa.BufferOutputStream()
    footers: list[pq.FileMetaData] = []
    collect = data.num_rows >= FOOTER_BOUNDS_FROM_ROWS
    # A dictionary holding a null (a caller's data; a Parquet dictionary page holds values
    # only) is written as its values.
    data = decoded(data, {f.name: f.with_type(f.type.value_type) for i, f in enumerate(data.schema)
                          if pa.types.is_dictionary(f.type) and any(
                              cast("pa.DictionaryArray[Any, Any]", c).dictionary.null_count
                              for c in data.column(i).chunks)})
    # Dictionary values no row holds would be bounds (``referenced_only``).
    data = referenced_only(data)
    options = {**PARQUET_OPTIONS, **(writer_options(data) if delta_integers else {})}
    if not any(pa.types.is_dictionary(f.type) for f in data.schema):
        pq.write_table(data, sink, metadata_collector=footers if collect else None,
                       **options)
    elif not hasattr(pq.ParquetWriter, "add_key_value_metadata"):
        # An older pyarrow cannot record the values' schema in place of the dictionaries'.
        pq.write_table(plain_table(data), sink,
                       metadata_collector=footers if collect else None, **options)
    else:
        plain = plain_schema(data.schema)
        key_values = {**(plain.metadata or {}),
                      ARROW_SCHEMA_KEY: base64.b64encode(plain.serialize().to_pybytes())}
        # Arrow's writer takes a dictionary array's dictionary as the column chunk's
        # dictionary page and its indices as the data pages' (no string hashed again); the
        # Parquet schema of a dictionary of strings is that of strings.  The Arrow schema it
        # would store is the dictionaries', so it stores none and the values' is added.
        with pq.ParquetWriter(sink, data.schema, store_schema=False,
                              metadata_collector=footers if collect else None,
                              **options) as writer:
            writer.write_table(data)
            writer.add_key_value_metadata(cast(Any, key_values))
    return sink.getvalue(), footers[0] if collect else None


#: The key of the Arrow schema Arrow's Parquet writer stores in a file's key-value metadata.
ARROW_SCHEMA_KEY = b"ARROW:schema"


def _write_local(path: str, data: pa.Table, durable: bool, delta_integers: bool
                 ) -> tuple[int, int, pq.FileMetaData | None]:
    """Write a local data file with one system call (fsynced if ``durable``); its size,
    modification time (ms) and footer."""
    body, footer = _encode_parquet(data, delta_integers)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view):]
        if durable:
            os.fsync(fd)
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return st.st_size, st.st_mtime_ns // 1_000_000, footer


def write_data_files(store: ObjectStore, data: pa.Table, partition_columns: Sequence[str], *,
                     clock: Clock, random: RandomSource, indexed_cols: int = 32,
                     target_file_rows: int | None = None, column_mapping: str = "none",
                     table_schema: pa.Schema | None = None, durable: bool = True,
                     change_data: bool = False, delta_integers: bool = True) -> list[Add]:
    """Write ``data`` (already in the table schema) as Parquet files; return their add actions.
    ``change_data``, ``delta_integers``: as for ``write_data_file``.

    One file per partition value (or several, if ``target_file_rows`` splits it), in Hive-style
    directories; files go to remote stores in parallel.
    """

    groups = split_by_partition(data, partition_columns) if partition_columns else [({}, data)]
    jobs: list[tuple[dict[str, str | None], pa.Table]] = []
    for values, part in groups:
        if target_file_rows and part.num_rows > target_file_rows:
            for off in range(0, part.num_rows, target_file_rows):
                jobs.append((values, part.slice(off, target_file_rows)))
        else:
            jobs.append((values, part))

    def write_one(job: tuple[int, tuple[dict[str, str | None], pa.Table]]) -> Add:
        index, (values, part) = job
        return write_data_file(store, values, partition_columns, part, index=index,
                               random=random, clock=clock, indexed_cols=indexed_cols,
                               column_mapping=column_mapping, table_schema=table_schema,
                               durable=durable, change_data=change_data,
                               delta_integers=delta_integers)

    numbered = list(enumerate(jobs))
    written: list[Add] = []
    try:
        if len(numbered) > 1 and store.local_path("") is None:
            with CallThreads(max_workers=min(16, len(numbered))) as pool:
                futures = [pool.submit(write_one, j) for j in numbered]
                # Every file is waited for, so that none is still being written when the
                # others are deleted below.
                wait(futures)
                for f in futures:
                    if f.exception() is None:
                        written.append(f.result())
                for f in futures:
                    f.result()  # the first failure, raised
        else:
            for j in numbered:
                written.append(write_one(j))
    except BaseException:
        # A write that failed part way commits nothing: the files it did write are named by
        # nothing either, so they go (best effort: VACUUM removes any left).
        with contextlib.suppress(Exception):
            delete_files(store, written)
        raise
    return written


def open_data_file(store: ObjectStore, resolved: ResolvedPath,
                   storage_options: Mapping[str, str] | None = None) -> tuple[Any, str]:
    """A source pyarrow can read for a resolved data file, and the path to name in errors.

    Files inside the table are read through the table's own store; a file outside it (allowed
    only when the caller opted in) through a store opened on its directory.
    """
    if resolved.relative is not None:
        rel = resolved.relative
        local = store.local_path(rel)
        return (local if local is not None else store.open_input(rel)), rel
    loc = resolved.location
    parent, _, name = loc.path.rpartition("/")

    other = open_store(f"{loc.scheme}://{loc.authority}{parent or '/'}", storage_options)
    local = other.local_path(name)
    return (local if local is not None else other.open_input(name)), loc.uri()


# --------------------------------------------------------------------------- the write stages
# Every writer (``writer.write`` and ``writer.append``, the Appender, a group leader writing
# coalesced rows, Spark's write tasks on executors) runs its rows through ``conform_rows`` and
# writes them with ``write_rows`` (or, streaming, ``write_data_file``); ``writer.py`` commits.


class TableVersion(Protocol):
    """The parts of a snapshot the write stages read (``snapshot.Snapshot`` is one)."""

    @property
    def schema(self) -> pa.Schema: ...

    @property
    def partition_columns(self) -> list[str]: ...

    @property
    def configuration(self) -> dict[str, str | None]: ...

    @property
    def table_config(self) -> TableConfig: ...


@dataclass(frozen=True, slots=True)
class WriteTarget:
    """What the write stages need of a table version; small and picklable, so Spark ships it
    to executors with its write tasks."""

    uri: str
    schema: pa.Schema
    partition_columns: tuple[str, ...]
    #: Columns with statistics (``delta.dataSkippingNumIndexedCols``).
    indexed_cols: int
    #: The table's invariants and CHECK constraints (``constraints.Constraint``).
    constraints: tuple[Any, ...]
    #: ``delta.columnMapping.mode``: files name columns by ``schema``'s physical names.
    column_mapping: str = "none"
    #: Generated columns (``generated.GeneratedColumn``): computed or verified on every row.
    generated: tuple[Any, ...] = ()
    #: Identity columns (``identity.IdentityColumn``), with the high-water mark read.
    identity: tuple[Any, ...] = ()
    #: ``deltacommit.parquet.deltaEncodedIntegers`` (``write_data_file``).
    delta_integers: bool = True

    @classmethod
    def of(cls, uri: str, snapshot: TableVersion) -> WriteTarget:
        """The target of a table version; everything in it follows from the version's
        ``metaData`` action, so versions sharing one (most of a table's versions) share one
        target instead of parsing the schema, constraints and generated columns per write."""
        metadata = getattr(snapshot, "metadata", None)
        if metadata is not None:
            known = _TARGETS.get((uri, id(metadata)))
            if known is not None and known[0] is metadata:
                return known[1]
        schema = snapshot.schema
        target = cls(uri, schema, tuple(snapshot.partition_columns),
                     snapshot.table_config.data_skipping_num_indexed_cols,
                     tuple(table_constraints(schema, snapshot.configuration, uri)),
                     snapshot.table_config.column_mapping_mode.value,
                     tuple(generated_columns(schema)), tuple(identity_columns(schema, uri)),
                     snapshot.table_config.delta_encoded_integers)
        if metadata is not None:
            if len(_TARGETS) >= _TARGETS_KEPT:
                _TARGETS.clear()
            # The metadata object is kept with its target, so its id cannot be reused by
            # another object while the entry lives.
            _TARGETS[(uri, id(metadata))] = (metadata, target)
        return target


#: Targets already built, by table and ``metaData`` object (see ``WriteTarget.of``).
_TARGETS: dict[tuple[str, int], tuple[Any, WriteTarget]] = {}
_TARGETS_KEPT = 256


def conform_rows(target: WriteTarget, data: pa.Table,
                 identity: Mapping[str, Any] | None = None) -> pa.Table:
    """``data`` in the table's schema, every rule on its rows checked (stage 1).

    Identity columns the data lacks take the values of ``identity`` (``identity.allocate``,
    by a writer that commits the new high-water mark); generated columns the data lacks are
    computed, those it supplies verified."""

    schema, uri = target.schema, target.uri
    supplied = set(data.column_names)
    for f in schema:
        if pa.types.is_null(f.type) and f.name not in data.column_names:
            data = data.append_column(f, pa.nulls(data.num_rows))  # void: nothing to supply
    if target.identity or target.generated:
        data = _complete_columns(target, data, identity or {})
    if not data.schema.equals(schema):
        check_write_compatible(schema, data.schema, uri)
        data = cast_to_table_schema(data, schema)
    check_not_null(data, schema, uri)
    check_partition_not_null(data, schema, list(target.partition_columns), uri)
    # The expression parser and evaluator load only for a table that declares something to
    # evaluate: an append to any other table (a cold Lambda's one write) never imports them.
    if target.generated:
        from deltacommit.protocol.expressions.generated import check_generated

        check_generated(data, [g for g in target.generated if g.name in supplied], uri)
    if target.constraints:
        from deltacommit.protocol.expressions.constraints import check_constraints

        check_constraints(data, list(target.constraints), uri)
    return data


def _complete_columns(target: WriteTarget, data: pa.Table, identity: Mapping[str, Any]
                      ) -> pa.Table:
    """``data`` with the identity and generated columns it lacks filled in: the other columns
    are conformed first, so expressions see the table's types."""

    schema, uri = target.schema, target.uri
    data = fill_identity(data, list(target.identity), identity, schema, uri)
    missing = [g for g in target.generated if g.name not in data.column_names]
    if not missing:
        return data
    names = {g.name for g in missing}
    given = pa.schema([f for f in schema if f.name not in names])
    if not data.schema.equals(given):
        check_write_compatible(given, data.schema, uri)
        data = cast_to_table_schema(data, given)
    # Loaded only here, for a table with generated columns (see ``conform_rows``).
    from deltacommit.protocol.expressions.generated import fill_generated

    return fill_generated(data, missing, schema, uri).select(schema.names)


def write_rows(store: ObjectStore, target: WriteTarget, rows: pa.Table, *, clock: Clock,
               random: RandomSource, target_file_rows: int | None = None,
               durable: bool = True) -> list[Add]:
    """Conformed rows as data files of the table; their add actions (stage 2).  With
    ``durable=False`` files are left for the commit to make durable (``write_data_file``)."""
    return write_data_files(store, rows, list(target.partition_columns), clock=clock,
                            random=random, indexed_cols=target.indexed_cols,
                            target_file_rows=target_file_rows,
                            column_mapping=target.column_mapping, table_schema=target.schema,
                            durable=durable, delta_integers=target.delta_integers)


def check_not_null(data: pa.Table, schema: pa.Schema, uri: str) -> None:
    """Top-level NOT NULL columns; nested ones are checked while writing (``nested.py``)."""
    for f in schema:
        if not f.nullable and data.column(f.name).null_count:
            raise SchemaMismatchError(
                f"table {uri}: column {f.name!r} is not nullable but the data has "
                f"{data.column(f.name).null_count} null value(s)")


def delete_files(store: ObjectStore, adds: Sequence[Add]) -> None:
    """Delete data files that no commit references (a write that did not commit), in one
    ``delete_many`` (one request on S3 where a write spans partitions).  Uploads still in
    flight end first: a delete must not be overtaken by the put it undoes."""

    paths = [decode_add_path(a.path) for a in adds]
    store.await_puts(paths, forget=True)
    store.delete_many(paths)
