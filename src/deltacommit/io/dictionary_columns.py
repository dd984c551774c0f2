"""String and binary columns carried as the dictionaries Parquet stores them in.

A column of few distinct strings (a status, a country, a category) is stored in a Parquet
file as a dictionary page of its values and data pages of small integers.  Decoding every
value while reading, and hashing every value again to encode the dictionary while writing,
costs more than the rest of reading and writing such a column.  A reader that only decodes
what it evaluates, and a rewrite that carries the dictionary from the files it reads to the
file it writes, do neither; and no reader of the file written can tell (``datafiles``
records the values' Arrow schema, not the dictionaries').

Only top-level columns, and only where every row group's chunk is wholly dictionary-encoded
(``dictionary_columns``): a chunk whose pages fell back to plain encoding would be hashed
value by value into a dictionary by the reader, which costs more than decoding it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from deltacommit.protocol.stats.footer import leaf_count


def leaf_columns(schema: pa.Schema, names: Sequence[str]) -> dict[str, int]:
    """Where each of the top-level columns ``names`` of a Parquet file of Arrow schema
    ``schema`` is among its leaf columns (``leaf_count``); none past a column whose leaves
    cannot be counted."""
    at: dict[str, int] = {}
    leaf = 0
    for f in schema:
        at[f.name] = leaf
        n = leaf_count(f.type)
        if n is None:
            break
        leaf += n
    return {n: at[n] for n in names if n in at}


def dictionary_columns(pf: pq.ParquetFile, wanted: Sequence[str],
                       leaves: Mapping[str, int] | None = None,
                       types: pa.Schema | None = None) -> dict[str, pa.Field[Any]]:
    """The ``wanted`` top-level string and binary columns of ``pf`` that are dictionary-encoded
    in every row group, with their Arrow types: worth reading as dictionaries.

    Pyarrow decodes a dictionary page's strings one value at a time; taking them from the
    dictionary after the read costs half as much, and after a deletion vector's filter only
    the kept rows are decoded.  A column chunk whose pages fell back to plain encoding holds
    at least 4 bytes per value (each value's length); such a column is read as it is.

    ``leaves``: where the columns are among the file's leaf columns (``leaf_columns`` of the
    file's Arrow schema), when known already.  They only say which chunks' encodings to look
    at: a wrong one costs time (a column read as a dictionary that is not one is hashed into
    one), never a value, since the columns are read by name.  ``types``:
    ``pf.schema_arrow``, when the caller has it."""
    types = pf.schema_arrow if types is None else types
    meta = pf.metadata
    given = leaves is not None
    if leaves is None:
        leaves = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    out: dict[str, pa.Field[Any]] = {}
    for name in wanted:
        i = leaves.get(name)
        if i is None or "." in name or i >= meta.num_columns or (
                not given and (meta.schema.column(i).path != name
                               or types.get_field_index(name) < 0)):
            continue
        f = types.field(name)
        if pa.types.is_dictionary(f.type):  # opened reading it so, or stored so
            f = f.with_type(f.type.value_type)
        if not (pa.types.is_string(f.type) or pa.types.is_binary(f.type)):
            continue
        chunks = [meta.row_group(r).column(i) for r in range(meta.num_row_groups)]
        if chunks and all(c.has_dictionary_page and c.total_uncompressed_size < 4 * c.num_values
                          for c in chunks):
            out[name] = f
    return out


def decoded(data: pa.Table, encoded: Mapping[str, pa.Field[Any]]) -> pa.Table:
    """``data`` with its dictionary-read columns (``dictionary_columns``) back in their types."""
    for name, f in encoded.items():
        i = data.schema.get_field_index(name)
        col = data.column(i)
        if pa.types.is_dictionary(col.type):
            pieces = [p for c in col.chunks for p in plain_pieces(c, f.type)]
            data = data.set_column(i, data.schema.field(i).with_type(f.type),
                                   pa.chunked_array(pieces, type=f.type))
    return data


def plain_pieces(chunk: pa.Array[Any], t: pa.DataType, max_bytes: int = 2**31 - 1
                 ) -> list[pa.Array[Any]]:
    """A dictionary array's values as plain arrays of type ``t``, as many as keep each one's
    values within ``max_bytes`` (a plain array's 32-bit offsets reach 2 GiB)."""
    encoded = cast("pa.DictionaryArray[Any, Any]", chunk)
    values = cast("pa.StringArray | pa.BinaryArray", encoded.dictionary)
    if len(chunk) * max(values.nbytes, 1) <= max_bytes:
        # No value is longer than the dictionary's bytes: within bounds without a look.
        plain = values.take(encoded.indices)
        return [plain if plain.type == t else plain.cast(t)]
    longest = pc.max(pc.binary_length(values)).as_py() if len(values) else None
    per_piece = max(1, max_bytes // max(longest or 1, 1))
    if len(chunk) <= per_piece:
        return [chunk.cast(t)]
    return [chunk.slice(s, per_piece).cast(t) for s in range(0, len(chunk), per_piece)]


def plain_schema(schema: pa.Schema, names: Sequence[str] | None = None) -> pa.Schema:
    """``schema`` with each top-level dictionary type (of the columns ``names``, or every
    one) replaced by its value type."""
    def plain(f: pa.Field[Any]) -> bool:
        return pa.types.is_dictionary(f.type) and (names is None or f.name in names)

    if not any(plain(f) for f in schema):
        return schema
    return pa.schema([f.with_type(f.type.value_type) if plain(f) else f for f in schema],
                     metadata=cast(Any, schema.metadata))


def plain_columns(data: pa.Table, names: Iterable[str]) -> pa.Table:
    """``data`` with the dictionary columns an expression over the columns ``names`` may read
    decoded (each whose name is in one of ``names``, ignoring case as the expressions resolve
    names: ``a`` for ``a.b`` and ``A`` too), the others as they are: what a verb evaluates
    its predicate over before it reads a few rows whole."""
    wanted = [n.lower() for n in names]
    return decoded(data, {f.name: f.with_type(f.type.value_type) for f in data.schema
                          if pa.types.is_dictionary(f.type)
                          and any(f.name.lower() in n for n in wanted)})


def plain_table(data: pa.Table) -> pa.Table:
    """``data`` with each top-level dictionary column decoded to its value type."""
    return decoded(data, {f.name: f.with_type(f.type.value_type) for f in data.schema
                          if pa.types.is_dictionary(f.type)})


def concatenated(tables: Sequence[pa.Table]) -> pa.Table:
    """``tables`` (at least one, read by one scan) one after the other; a column some of them
    hold as a dictionary and others not (files of other encodings) is decoded in each."""
    first = tables[0].schema
    if any(not t.schema.equals(first) for t in tables[1:]):
        mixed = {f.name: f.with_type(f.type.value_type if pa.types.is_dictionary(f.type)
                                     else f.type)
                 for i, f in enumerate(first)
                 if any(t.schema.field(i).type != f.type for t in tables[1:])}
        tables = [decoded(t, mixed) for t in tables]
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def joined(tables: Sequence[pa.Table]) -> pa.Table:
    """``concatenated``, each dictionary column with one dictionary for all its chunks."""
    out = concatenated(tables)
    if any(pa.types.is_dictionary(f.type) for f in out.schema):
        out = out.unify_dictionaries()
    return out


def in_one_dictionary(column: pa.ChunkedArray[Any], values: pa.Array[Any]
                      ) -> tuple[pa.ChunkedArray[Any], pa.DictionaryArray[Any, Any]]:
    """``column`` (a dictionary column) and ``values`` (of its value type, or a dictionary of
    them) over one dictionary: the column's (unified), with the values it lacks appended, so
    that the column's indices stay as they are.  Nulls are null indices, not entries."""
    t = column.type
    if pa.types.is_dictionary(values.type):
        values = pa.concat_arrays(plain_pieces(values, t.value_type)) if len(values) else \
            pa.array([], t.value_type)
    chunks = column.unify_dictionaries().chunks if column.num_chunks > 1 else column.chunks
    dictionary = (cast("pa.DictionaryArray[Any, Any]", chunks[0]).dictionary if chunks
                  else pa.array([], t.value_type))
    absent = pc.drop_null(values.filter(pc.invert(pc.is_in(values, value_set=dictionary))))
    if len(absent):
        dictionary = pa.concat_arrays([dictionary, pc.unique(absent)])
        chunks = [pa.DictionaryArray.from_arrays(cast("pa.DictionaryArray[Any, Any]", c).indices,
                                                 dictionary) for c in chunks]
    indices = pc.index_in(values, value_set=dictionary).cast(t.index_type)
    if indices.null_count != values.null_count:
        raise ValueError("in_one_dictionary: a value is missing from the dictionary made for it")
    return (pa.chunked_array(chunks, type=t),
            pa.DictionaryArray.from_arrays(indices, dictionary))


def dictionaries_within(data: pa.Table, max_bytes: int) -> pa.Table:
    """``data`` with each dictionary column that a Parquet writer would not keep as one
    dictionary page (more than ``max_bytes`` of values, or several dictionaries) decoded."""
    for i, f in enumerate(data.schema):
        if not pa.types.is_dictionary(f.type):
            continue
        chunks = data.column(i).chunks
        dictionaries = [cast("pa.DictionaryArray[Any, Any]", c).dictionary for c in chunks]
        if (dictionaries and dictionaries[0].nbytes > max_bytes) or any(
                d is not dictionaries[0] and not d.equals(dictionaries[0])
                for d in dictionaries[1:]):
            data = decoded(data, {f.name: f.with_type(f.type.value_type)})
    return data


def referenced_only(data: pa.Table) -> pa.Table:
    """``data`` with each dictionary column that holds a null cut to the dictionary values
    its rows hold (one dictionary for chunks that shared one), where the dictionary holds
    others (the values of rows a rewrite deleted or changed).

    Arrow's Parquet writer takes the bounds of each batch of a dictionary column from the
    values its indices reference, except where those distinct indices, the null counted
    among them, are as many as the dictionary's values: it then takes the whole dictionary,
    and a value no row holds becomes the file's least or greatest.  Without a null, or with
    every value referenced, the bounds are those of the rows."""
    for i, f in enumerate(data.schema):
        column = data.column(i)
        if not pa.types.is_dictionary(f.type) or not column.null_count:
            continue
        chunks = [cast("pa.DictionaryArray[Any, Any]", c) for c in column.chunks]
        first = chunks[0].dictionary
        shared = all(c.dictionary is first or c.dictionary.equals(first) for c in chunks[1:])
        groups = [chunks] if shared else [[c] for c in chunks]
        out: list[pa.Array[Any]] = []
        for group in groups:
            dictionary = group[0].dictionary
            used = np.zeros(len(dictionary), np.bool_)
            for c in group:
                used[pc.drop_null(pc.unique(c.indices)).to_numpy()] = True
            if used.all():
                out.extend(group)
                continue
            # Each index moved to where its value is among the values kept.
            moved = pa.array(np.cumsum(used, dtype=np.int64) - 1).cast(f.type.index_type)
            kept = dictionary.filter(pa.array(used))
            out.extend(pa.DictionaryArray.from_arrays(pc.take(moved, c.indices), kept)
                       for c in group)
        data = data.set_column(i, f, pa.chunked_array(out, type=cast(Any, f.type)))
    return data


__all__ = ["concatenated", "decoded", "dictionaries_within", "dictionary_columns",
           "in_one_dictionary", "joined", "leaf_columns", "plain_columns", "plain_pieces",
           "plain_schema", "plain_table", "referenced_only"]
