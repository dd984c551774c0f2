"""The one data-file reader: an add action in, the rows it holds in the table's schema out.

``DeltaTable.to_arrow``, row-level deletes and Spark's read tasks all read data files through
``FileScan``, so locating a file (the one path rule, ``log/paths``), opening it (local, S3 or an
external location), dropping the rows its deletion vector marks, restoring partition columns
and conforming foreign column types happen in one place.  A table feature that changes how
files are read (column mapping, type widening) plugs in here.

``FileScan`` is a plain picklable value, so Spark ships it to executors with a read task; its
store is opened where it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltacommit.errors import (
    CorruptLogError,
    InvalidArgumentError,
    NotARegularFileError,
    ObjectNotFoundError,
    StorageError,
)
from deltacommit.io.datafiles import open_data_file
from deltacommit.io.deletion_vectors import kept_rows
from deltacommit.io.dictionary_columns import (
    concatenated,
    decoded,
    dictionary_columns,
    leaf_columns,
    plain_schema,
)
from deltacommit.io.storage import open_store
from deltacommit.io.storage.base import ObjectStore
from deltacommit.io.storage.local import open_for_reader
from deltacommit.protocol.actions import Add
from deltacommit.protocol.add_actions import (
    TextsNeeded,
    add_actions_table,
    partition_mask,
    partition_strings,
)
from deltacommit.protocol.expressions.evaluator import names_top_level_columns
from deltacommit.protocol.expressions.predicates import TRUE, Predicate
from deltacommit.protocol.file_pruning import may_match
from deltacommit.protocol.log.paths import ResolvedPath, locate_data_file, parse_location
from deltacommit.protocol.partitions import partition_column_arrays
from deltacommit.protocol.schema.column_mapping import (
    file_columns,
    logical_values,
    partition_physical_names,
    physical_name,
    to_logical,
)
from deltacommit.protocol.schema.nested import conform

if TYPE_CHECKING:
    from deltacommit.engine.snapshot.snapshot import Snapshot


def decided_by_partition_values(predicate: Predicate, schema: pa.Schema,
                                partition_columns: Sequence[str]) -> bool:
    """Whether ``predicate`` is decided for a whole file by its partition values alone: it
    reads partition columns only, in the forms their values decide (``partition_values``: a
    column compared with a literal, ``IN``, ``IS NULL``, ``AND``/``OR``/``NOT``, constants).
    A predicate that is not (``p % 2 = 0``, ``lower(p) = 'a'``, ``p = q``) needs the rows, or
    the evaluator on each file's values (``file_pruning``): a DELETE must not take it for one
    that removes whole files, nor a transaction record it as the partitions it read."""
    if not predicate.columns() <= set(partition_columns) \
            or not names_top_level_columns(predicate, schema):
        return False
    try:
        predicate.compile({c: schema.field(c).type for c in partition_columns})
    except InvalidArgumentError:
        return False
    return True


def select_files(snapshot: Snapshot, predicate: Predicate) -> list[Add]:
    """The files of ``snapshot`` whose partition values may satisfy ``predicate``.

    The checkpoint's files are judged column-wise, the predicate evaluated once per distinct
    combination of partition values, so reading one partition of a large table builds no
    ``Add`` for the files of the others.  On an unpartitioned table a predicate without
    columns (``FALSE``, ``NULL``) is a constant that selects every file or none."""
    if predicate is TRUE:
        return snapshot.files()
    if not snapshot.partition_columns:
        if not predicate.columns() and not predicate.evaluate({}, {}):
            return []
        return snapshot.files()
    schema = snapshot.schema
    pcols = list(snapshot.partition_columns)
    types = {c: schema.field(c).type for c in pcols}
    physical = partition_physical_names(schema, pcols, snapshot.configuration)
    keys = [physical.get(c, c) for c in pcols]

    def accepts(values: Mapping[str, str | None]) -> bool:
        return predicate.evaluate(values, types)

    def rows_mask(rows: pa.StructArray) -> Any:
        return partition_mask(partition_strings(rows.field("partitionValues"), keys), pcols,
                              accepts)

    if not physical:
        return snapshot.files_where(rows_mask, lambda a: accepts(a.partition_values))
    return snapshot.files_where(
        rows_mask, lambda a: accepts(logical_values(a.partition_values, physical)))


def prune_files(snapshot: Snapshot, predicate: Predicate) -> list[Add]:
    """The files of ``snapshot`` that may hold a live row where ``predicate`` (over any
    columns) is TRUE, by partition values and file statistics (``file_pruning``).

    What readers with a filter and row-level operations (DELETE, UPDATE, MERGE) open: a few
    keys of a large table touch the few files whose bounds admit them.  A predicate over
    partition columns alone takes ``select_files``; otherwise the file list is judged as Arrow
    columns (statistics from the checkpoint's ``stats_parsed`` where it has them) and an
    ``Add`` is built only for a file kept."""
    if predicate is TRUE:
        return snapshot.files()
    pcols = snapshot.partition_columns
    schema = snapshot.schema
    if predicate.columns() <= set(pcols) and names_top_level_columns(predicate, schema):
        try:
            return select_files(snapshot, predicate)
        except InvalidArgumentError:
            pass  # not decidable from partition values alone (a function): statistics below
    dvs = "deletionVectors" in (snapshot.protocol.reader_features or ())

    def listing(texts: bool) -> pa.Table:
        chunks = snapshot.add_rows_parsed(texts=texts)
        return add_actions_table([rows for rows, _ in chunks], schema, pcols,
                                 snapshot.configuration, deletion_vectors=dvs,
                                 table=snapshot.log_store.table_uri,
                                 stats_parsed=[parsed for _, parsed in chunks], tight_bounds=True)

    try:
        try:
            files = listing(texts=False)
        except TextsNeeded:
            files = listing(texts=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # A file entry Arrow cannot hold (a forged deletion-vector size): nothing is pruned,
        # and reading that file says what is wrong with it.
        return snapshot.files()
    keep = may_match(predicate, files, schema)
    if keep.all():
        return snapshot.files()
    kept = files.column("path").combine_chunks().filter(pa.array(keep))
    wanted = set(kept.to_pylist())

    def rows_mask(rows: pa.StructArray) -> Any:
        return pc.is_in(rows.field("path"), value_set=kept)

    return snapshot.files_where(rows_mask, lambda a: a.path in wanted)


#: What reading and conforming one data file raises when the file is missing, not a regular
#: file, not Parquet, or holds columns that contradict the table (the same name twice: a
#: KeyError from Arrow; a type that cannot become the table's): named, with the table and
#: the file, as a CorruptLogError or a StorageError (``FileScan._unreadable``).
UNREADABLE: tuple[type[Exception], ...] = (
    ObjectNotFoundError, FileNotFoundError, NotARegularFileError, pa.ArrowInvalid,
    pa.ArrowTypeError, pa.ArrowNotImplementedError, KeyError, OSError)
UNREADABLE_OR_STORAGE: tuple[type[Exception], ...] = (*UNREADABLE, StorageError)

#: File schemas a scan remembers what it makes of (``FileScan._plan``): a table's files
#: have a few schemas at most (one per schema change they span); past this many, each
#: further file's plan is worked out anew.
PLANS_KEPT = 8


@dataclass(frozen=True, slots=True)
class FilePlan:
    """What a file of one schema makes of a scan's output: output column -> the file's column
    holding it (``FileScan._sources``), the file's columns to read, and whether what is read
    already is the output (every column there, of the output's type, no partition column and
    no column mapping), so that nothing is conformed."""

    sources: dict[str, str]
    wanted: list[str]
    as_read: bool
    #: The top-level string and binary columns of the file (those ``dictionary_columns`` may
    #: name): read as dictionaries at once by a scan that keeps them (``keep_dictionaries``).
    dictionary_candidates: list[str] = field(default_factory=list)
    #: Where each candidate is among the file's leaf columns (``leaf_columns``).
    leaves: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class FileScan:
    """Reads data files of one table version into ``out_schema``."""

    table_uri: str
    version: int
    out_schema: pa.Schema
    partition_columns: Sequence[str]
    storage_options: Mapping[str, str] = field(default_factory=dict)
    #: Whether files outside the table location may be read (shallow clones).
    allow_external_paths: bool = False
    #: Rows per batch when streaming (``batches``); None reads each file whole.
    batch_rows: int | None = None
    #: Keep every physical row, deleted ones too (deletes index rows by their position).
    physical_rows: bool = False
    #: ``delta.columnMapping.mode`` (``none``, ``name`` or ``id``): how ``out_schema``'s
    #: fields (their column mapping metadata) are found in files and ``partitionValues``.
    column_mapping: str = "none"
    #: Whether pyarrow's threads decode a file's columns; a caller reading many files at
    #: once in its own threads turns them off (they cost more than they save on small files).
    file_threads: bool = True
    #: Keep the low-cardinality string and binary columns of files read whole as the
    #: dictionaries Parquet stores them in (``dictionary_columns``), where the file's schema
    #: is the output's (``FilePlan.as_read``): a rewrite that carries them to the writer
    #: neither decodes nor hashes those values again.  The caller decodes what it evaluates.
    keep_dictionaries: bool = False
    #: The table's store, where the caller has it open; else opened from the URI on first use.
    given_store: ObjectStore | None = field(default=None, repr=False, compare=False)
    #: What each file schema met so far makes of a file (``_plan``): worked out once, not per
    #: file, since a table's files nearly always share one schema.
    plans: list[tuple[pa.Schema, FilePlan]] = field(default_factory=list, init=False,
                                                    repr=False, compare=False)
    #: The same for files opened reading some columns as dictionaries (``_guessed_plan``).
    guessed_plans: list[tuple[pa.Schema, FilePlan]] = field(default_factory=list, init=False,
                                                            repr=False, compare=False)
    #: The output schema of each plan's files whose dictionary columns are kept, by the
    #: plan's ``id`` (plans live as long as the scan) and the columns kept.
    kept_schemas: dict[tuple[int, tuple[str, ...]], pa.Schema] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        # The store is opened again where the scan runs (a Spark executor).
        return {k: getattr(self, k) for k in self.__slots__
                if k not in ("given_store", "plans", "guessed_plans", "kept_schemas")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)
        self.given_store = None
        self.plans = []
        self.guessed_plans = []
        self.kept_schemas = {}

    @property
    def store(self) -> ObjectStore:
        if self.given_store is None:
            self.given_store = open_store(self.table_uri, self.storage_options)
        return self.given_store

    def read(self, add: Add) -> pa.Table:
        """The rows of one file, whole."""
        return self.read_file(add.path, add.partition_values, add.deletion_vector)

    def read_many(self, adds: Sequence[Add],
                  pool_map: Callable[[Callable[[Add], pa.Table], Sequence[Add]],
                                     Iterable[pa.Table]] | None = None) -> pa.Table:
        """The rows of several files of one partition, in order.

        Local files without deletion vectors (compaction's usual input: many small files
        of one partition) are read by a lean loop (``_read_local``); going through ``read``
        for each costs more than the bytes in a small file.  Each file is read in its own
        Parquet schema, and every run of files with one schema is conformed to the table's
        schema as ``read`` conforms a file alone: a file written before a type widening or
        before a nested field was added reads widened, and one written after it is never
        narrowed to an older file's types.  Anything else, or files the loop cannot read, is
        read file by file (through ``pool_map``, a thread pool's ``map``, when given), with
        the same result and the same errors."""
        if self._one_dataset(adds):
            root = parse_location(self.table_uri)
            paths: list[str] = []
            for a in adds:
                resolved = locate_data_file(root, a.path, table=self.table_uri,
                                            allow_external=self.allow_external_paths)
                local = (self.store.local_path(resolved.relative)
                         if resolved.relative is not None else None)
                if local is None:
                    paths = []
                    break
                paths.append(local)
            if paths:
                try:
                    return self._read_local(paths, adds[0].partition_values)
                except UNREADABLE_OR_STORAGE:
                    pass  # read file by file below, which names the file at fault
        if not adds:
            return self.out_schema.empty_table()
        # Dictionaries may be kept in some files only.
        return concatenated(list((pool_map or map)(self.read, adds)))

    def _read_local(self, paths: Sequence[str], partition_values: Mapping[str, str | None]
                    ) -> pa.Table:
        """The rows of local files of one partition, without deletion vectors, in order:
        one after the other (pyarrow's own threads cost more than they save on small
        files), each in its own schema, conformed per run of files sharing a schema."""
        pcols = [c for c in self.partition_columns if c in self.out_schema.names]
        runs: list[tuple[pa.Schema, FilePlan, list[pa.Table]]] = []
        for path in paths:
            pf = pq.ParquetFile(open_for_reader(path, follow_link=True))
            schema = pf.schema_arrow
            if not runs or not runs[-1][0].equals(schema):
                runs.append((schema, self._plan(schema), []))
            _, plan, parts = runs[-1]
            parts.append(pf.read(columns=plan.wanted, use_threads=False))
        out = []
        for _, plan, parts in runs:
            data = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
            out.append(self._conformed(data, data.num_rows, plan.sources, pcols,
                                       partition_values))
        return out[0] if len(out) == 1 else pa.concat_tables(out)

    def _one_dataset(self, adds: Sequence[Add]) -> bool:
        return (len(adds) > 1 and self.column_mapping == "none" and not self.physical_rows
                and self.batch_rows is None and not any(a.deletion_vector for a in adds)
                and all(a.partition_values == adds[0].partition_values for a in adds))

    def read_file(self, path: str, partition_values: Mapping[str, str | None],
                  deletion_vector: Mapping[str, Any] | None) -> pa.Table:
        if self.physical_rows and self.batch_rows is None:
            return self._read_physical(path, partition_values)
        parts = list(self.iter_file(path, partition_values, deletion_vector))
        if not parts:
            return self.out_schema.empty_table()
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def batches(self, path: str, partition_values: Mapping[str, str | None],
                deletion_vector: Mapping[str, Any] | None) -> Iterator[pa.RecordBatch]:
        """The rows of one file as record batches of at most ``batch_rows`` rows."""
        for part in self.iter_file(path, partition_values, deletion_vector):
            yield from part.to_batches()

    def iter_file(self, path: str, partition_values: Mapping[str, str | None],
                  deletion_vector: Mapping[str, Any] | None) -> Iterator[pa.Table]:
        """The rows of one file in pieces (one, unless ``batch_rows`` is set)."""
        resolved, rel = self._resolved(path)
        try:
            source, rel = self._source(resolved)
            pf = pq.ParquetFile(source)
            plan = self._plan(pf.schema_arrow)
            wanted = plan.wanted
            # Every physical row wanted (a row-level rewrite's read of many small files):
            # no filter to decode after, and a second open costs more than it saves; unless
            # the dictionaries are kept (``keep_dictionaries``).
            kept = self._kept(plan)
            encoded = dictionary_columns(pf, wanted) if kept or not self.physical_rows else {}
            if encoded:
                # Decoding a dictionary column's values after the deletion vector's filter
                # costs less than half of decoding every value while reading.
                pf = pq.ParquetFile(source, metadata=pf.metadata,
                                    read_dictionary=list(encoded))
            keep = (self._keep_mask(deletion_vector, rel, pf.metadata.num_rows)
                    if deletion_vector and not self.physical_rows else None)
            start = 0
            for n, data in self._chunks(pf, wanted):
                if keep is not None and n:
                    part_keep = keep.slice(start, n)
                    start += n
                    data = (without_views(data).filter(part_keep) if data is not None
                            else None)
                    n = part_keep.true_count
                if not n and self.batch_rows is not None:
                    continue
                yield self._output(data, n, plan, partition_values, encoded if kept else {},
                                   decode=encoded)
        except UNREADABLE as e:
            raise self._unreadable(e, resolved, rel) from None

    def _read_physical(self, path: str, partition_values: Mapping[str, str | None]
                       ) -> pa.Table:
        """Every physical row of one file, whole (``iter_file``'s result for
        ``physical_rows``): what a row-level operation reads of each of many small files, so
        the per-file work is kept to opening, decoding and, only where the file's schema
        differs from the output's, conforming (``FilePlan``)."""
        resolved, rel = self._resolved(path)
        try:
            source, rel = self._source(resolved)
            if self.plans and self._kept(self.plans[0][1]):
                # Opened reading the first schema's string columns as dictionaries, since a
                # table's files mostly share it; opened again below for a file that differs.
                guess = self.plans[0][1].dictionary_candidates
                try:
                    pf = pq.ParquetFile(source, read_dictionary=guess)
                except KeyError:  # the file lacks one of them: its own read below
                    guess, pf = [], pq.ParquetFile(source)
            else:
                guess, pf = [], pq.ParquetFile(source)
            file_schema = pf.schema_arrow
            plan = self._guessed_plan(file_schema, guess) if guess else self._plan(file_schema)
            kept = (dictionary_columns(pf, plan.dictionary_candidates, plan.leaves, file_schema)
                    if self._kept(plan) else {})
            if list(kept) != guess:
                pf = pq.ParquetFile(source, metadata=pf.metadata, read_dictionary=list(kept))
            if not plan.wanted:
                n, data = pf.metadata.num_rows, None
            else:
                data = pf.read(columns=plan.wanted, use_threads=self.file_threads)
                n = data.num_rows
            return self._output(data, n, plan, partition_values, kept, decode=kept)
        except UNREADABLE as e:
            raise self._unreadable(e, resolved, rel) from None

    def _guessed_plan(self, file_schema: pa.Schema, guess: Sequence[str]) -> FilePlan:
        """The plan of a file opened reading the columns ``guess`` as dictionaries (its
        ``file_schema`` has their dictionary types): the plan of its schema as a plain open
        reads it (their own types), remembered under the schema as opened."""
        for schema, known in self.guessed_plans:
            if schema.equals(file_schema):
                return known
        plan = self._plan(plain_schema(file_schema, guess))
        if len(self.guessed_plans) < PLANS_KEPT:
            self.guessed_plans.append((file_schema, plan))
        return plan

    def _kept_schema(self, plan: FilePlan, kept: Mapping[str, pa.Field[Any]],
                     read: pa.Schema) -> pa.Schema:
        """The output schema with the columns ``kept`` of the types ``read`` has them in."""
        key = (id(plan), tuple(kept))
        known = self.kept_schemas.get(key)
        if known is None:
            known = pa.schema([f.with_type(read.field(f.name).type) if f.name in kept else f
                               for f in self.out_schema],
                              metadata=cast(Any, self.out_schema.metadata))
            self.kept_schemas[key] = known
        return known

    def _kept(self, plan: FilePlan) -> bool:
        """Whether a file of ``plan`` keeps its dictionary columns (``keep_dictionaries``)."""
        return self.keep_dictionaries and plan.as_read and bool(plan.dictionary_candidates)

    def _output(self, data: pa.Table | None, n: int, plan: FilePlan,
                partition_values: Mapping[str, str | None], kept: Mapping[str, pa.Field[Any]],
                *, decode: Mapping[str, pa.Field[Any]]) -> pa.Table:
        """What was read of a file (``n`` rows, ``data`` its ``plan.wanted`` columns, those of
        ``decode`` read as dictionaries) in the output schema; the columns of ``kept`` (as
        read, where the file is the output as it is: ``plan.as_read``) stay dictionaries,
        the others are decoded and conformed."""
        if data is not None and decode:
            data = decoded(data, {k: f for k, f in decode.items() if k not in kept})
        if data is not None and plan.as_read and data.num_columns == len(self.out_schema):
            schema = self._kept_schema(plan, kept, data.schema) if kept else self.out_schema
            if data.schema.equals(schema, check_metadata=True):
                return data
            if all(a.type == b.type for a, b in zip(data.schema, schema, strict=True)):
                return pa.Table.from_arrays(data.columns, schema=schema)
        if data is not None and kept:
            data = decoded(data, kept)
        pcols = [c for c in self.partition_columns if c in self.out_schema.names]
        return self._conformed(data, n, plan.sources, pcols, partition_values)

    def _resolved(self, path: str) -> tuple[ResolvedPath, str]:
        """What the log's ``path`` names (a file outside the table refused unless allowed),
        and its name in errors until it is opened."""
        uri = self.table_uri
        resolved = locate_data_file(parse_location(uri), path, table=uri,
                                    allow_external=self.allow_external_paths)
        return resolved, (resolved.relative if resolved.relative is not None
                          else resolved.location.uri())

    def _source(self, resolved: ResolvedPath) -> tuple[Any, str]:
        """The data file ``resolved`` opened for Parquet's reader, and its name in errors."""
        source, rel = open_data_file(self.store, resolved, self.storage_options)
        if isinstance(source, str):
            source = open_for_reader(source, follow_link=True)
        return source, rel

    def _unreadable(self, e: Exception, resolved: ResolvedPath, rel: str) -> Exception:
        """The error a reader sees for a data file that could not be read (``e``)."""
        uri = self.table_uri
        if isinstance(e, (ObjectNotFoundError, FileNotFoundError)):
            where = f"{uri}/{resolved.relative}" if resolved.relative is not None else rel
            return StorageError("read", where, f"data file of version {self.version} is missing")
        if isinstance(e, NotARegularFileError):
            return CorruptLogError(f"table {uri}: cannot read data file {rel} of version "
                                   f"{self.version}: {e.detail}")
        return CorruptLogError(f"table {uri}: cannot read data file {rel}: {e}")

    def _plan(self, file_schema: pa.Schema) -> FilePlan:
        """What a file of ``file_schema`` makes of the output.  Remembered in ``plans``
        (compared, not hashed: hashing a schema walks its fields in Python) without column
        mapping only: schemas that compare equal may differ in their fields' metadata, where
        a mapped column's physical name and id are."""
        cached = self.column_mapping == "none"
        if cached:
            for schema, known in self.plans:
                if schema.equals(file_schema):
                    return known
        pset = set(self.partition_columns)
        sources = self._sources(file_schema, pset)
        as_read = (cached and not pset.intersection(self.out_schema.names)
                   and all(f.name in sources and file_schema.field(f.name).type == f.type
                           for f in self.out_schema))
        candidates = [c for c in dict.fromkeys(sources.values()) if "." not in c
                      and (pa.types.is_string(file_schema.field(c).type)
                           or pa.types.is_binary(file_schema.field(c).type))]
        plan = FilePlan(sources, list(dict.fromkeys(sources.values())), as_read, candidates,
                        leaf_columns(file_schema, candidates))
        if cached and len(self.plans) < PLANS_KEPT:
            self.plans.append((file_schema, plan))
        return plan

    def _chunks(self, pf: pq.ParquetFile, wanted: list[str]
                ) -> Iterator[tuple[int, pa.Table | None]]:
        """(rows, data) pieces of the file; data None when no data column is wanted."""
        if not wanted:
            if self.batch_rows is None:
                yield pf.metadata.num_rows, None
            else:
                for i in range(pf.metadata.num_row_groups):
                    yield pf.metadata.row_group(i).num_rows, None
            return
        if self.batch_rows is None:
            data = pf.read(columns=wanted, use_threads=self.file_threads)
            yield data.num_rows, data
            return
        for b in pf.iter_batches(batch_size=self.batch_rows, columns=wanted,
                                 use_threads=self.file_threads):
            yield b.num_rows, pa.Table.from_batches([b])

    def _sources(self, file_schema: pa.Schema, partition_columns: set[str]) -> dict[str, str]:
        """Output column -> the file's column holding it (by name, or through the column
        mapping); columns the file lacks are left out and read as nulls."""
        mode = self.column_mapping
        if mode == "none":
            present = set(file_schema.names)
            return {f.name: f.name for f in self.out_schema
                    if f.name not in partition_columns and f.name in present}
        return file_columns(file_schema,
                            (f for f in self.out_schema if f.name not in partition_columns), mode)

    def _conformed(self, data: pa.Table | None, n: int, sources: Mapping[str, str],
                   pcols: list[str], partition_values: Mapping[str, str | None]) -> pa.Table:
        """``data`` in the output schema: partition columns restored from the add's values,
        foreign types conformed (other timestamp units, large strings, nullability of nested
        fields: Spark leaves nulls below null structs; the narrower types of files written
        before a type widening), physical names mapped to logical ones, absent columns null."""
        mode = self.column_mapping
        if mode == "none":
            values = {c: partition_values.get(c) for c in pcols}
        else:
            values = {c: partition_values.get(physical_name(self.out_schema.field(c), mode))
                      for c in pcols}
        parts = partition_column_arrays(values, self.out_schema, n)
        arrays: list[pa.Array[Any] | pa.ChunkedArray[Any]] = []
        for f in self.out_schema:
            if f.name in parts:
                arrays.append(parts[f.name])
            elif data is not None and f.name in sources:
                col = data.column(sources[f.name])
                if col.type != f.type:
                    col = pa.chunked_array([self._to_table_type(c, f.type) for c in col.chunks],
                                           type=f.type)
                arrays.append(col)
            else:
                arrays.append(pa.nulls(n, f.type))
        return pa.Table.from_arrays(arrays, schema=self.out_schema)

    def _to_table_type(self, arr: pa.Array[Any], t: pa.DataType) -> pa.Array[Any]:
        mode = self.column_mapping
        if mode != "none":
            return to_logical(arr, t, mode)
        try:
            return conform(arr, t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            if not pa.types.is_nested(t):
                raise
            # A nested field whose type was widened: matched field by field.
            return to_logical(arr, t, mode)

    def _keep_mask(self, deletion_vector: Mapping[str, Any], rel: str,
                   num_rows: int) -> pa.BooleanArray:
        """False at each row of the file its deletion vector deletes."""

        return kept_rows(self.store, parse_location(self.table_uri), self.table_uri,
                         deletion_vector, data_file=rel, num_rows=num_rows,
                         storage_options=self.storage_options,
                         allow_external=self.allow_external_paths)


def _plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` with every string or binary view type in it, however nested, as the plain type."""
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_plain_type(f.type)) for f in t])
    if pa.types.is_map(t):
        m = cast("pa.MapType[Any, Any]", t)
        plain: pa.DataType = pa.map_(  # type: ignore[call-overload]
            m.key_field.with_type(_plain_type(m.key_type)),
            m.item_field.with_type(_plain_type(m.item_type)))
        return plain
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = t.value_field.with_type(_plain_type(t.value_type))
        return pa.list_(item) if pa.types.is_list(t) else pa.large_list(item)
    return t


def without_views(data: pa.Table) -> pa.Table:
    """``data`` with its string and binary view columns (deltalake 1.6.6's MERGE writes them)
    cast to the plain types: pyarrow filters and takes no view type, and a deletion vector's
    rows are removed by a filter.  The output schema holds the plain types anyway."""
    plain = pa.schema([f.with_type(_plain_type(f.type)) for f in data.schema],
                      metadata=cast(Any, data.schema.metadata))
    return data if plain.equals(data.schema) else data.cast(plain)

