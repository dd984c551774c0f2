"""File statistics as typed Arrow structs, a column at a time.  Pure.

Two sources give a file's statistics: the JSON ``stats`` text every ``add`` carries, and the
``stats_parsed`` struct a checkpoint written with ``delta.checkpoint.writeStatsAsStruct`` carries
beside it (Spark's default).  Both are needed for a million files at once (listing them as a
table, writing a checkpoint's ``stats_parsed``), where a Python object per file costs more than
everything else together.  So:

- ``parse_stats`` reads the texts with Arrow's JSON reader, in parts on parallel threads; a part
  the reader refuses (a bound that does not fit its type, such as ``"NaN"`` for a float or a
  decimal with too many places; a malformed text) is parsed row by row by ``parsed_stats``,
  which leaves just the misfits null;
- ``stats_from_struct`` takes the values from a typed struct instead, matching fields by name
  and casting where that cannot change a value, and parses the text only for the rows the
  struct cannot answer exactly as the text would (no struct, a sub-millisecond timestamp); when
  a whole column does not fit (another type, a column the struct lacks) every row is parsed.

Either way the result is what parsing the text gives: the struct is a faster route to the same
values, never a second opinion.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from deltacommit.protocol.stats.parsed import stats_struct_array
from deltacommit.runtime.threads import CallThreads

# --------------------------------------------------------------------------- JSON texts


def _json_read_type(t: pa.DataType) -> pa.DataType:
    """``t`` as Arrow's JSON reader can fill it: it reads no dates from strings, so dates are
    read as text and cast afterwards."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _json_read_type(f.type)) for f in t])
    if pa.types.is_date(t):
        return pa.string()
    return t


def _retyped(arr: Any, t: pa.DataType) -> Any:
    """``arr`` (read with ``_json_read_type(t)``, or with physical names) as type ``t``:
    same shape, ``t``'s names, dates cast from their text."""
    if pa.types.is_struct(t):
        children = [_retyped(arr.field(i), t.field(i).type) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(
            children, fields=[pa.field(f.name, f.type) for f in t],
            mask=arr.is_null() if arr.null_count else None)
    if arr.type != t:
        if pa.types.is_date(t) and pa.types.is_string(arr.type):
            # Only the date part counts (a writer may add a time); a bad one fails the cast.
            arr = pc.utf8_slice_codeunits(arr, 0, 10)
        return arr.cast(t)
    return arr


#: Bytes of JSON text each task of the statistics parser gets: smaller parts cost more CPU
#: (each is a reader of its own) for no more parallelism on a few cores, and a part the
#: reader refuses is parsed row by row.
_PART_BYTES = 4 << 20


def _offsets(strings: Any) -> Any:
    """The offsets of a string array, as numpy, for its rows only (it may be a slice)."""
    return np.frombuffer(strings.buffers()[1], dtype=np.int32)[
        strings.offset:strings.offset + len(strings) + 1]


def _row_cuts(offsets: Any) -> list[tuple[int, int]]:
    """Row ranges holding about ``_PART_BYTES`` of text each (at least one range)."""
    n = len(offsets) - 1
    first, total = int(offsets[0]), int(offsets[-1]) - int(offsets[0])
    n_parts = max(1, min(total // _PART_BYTES, 256))
    cuts = np.searchsorted(offsets, first + np.arange(n_parts + 1) * total // n_parts)
    cuts[0], cuts[-1] = 0, n
    return [(int(a), int(b)) for a, b in itertools.pairwise(cuts) if b > a] or [(0, n)]


def _in_parallel(tasks: list[Callable[[], Any]]) -> list[Any]:
    if len(tasks) <= 1:
        return [t() for t in tasks]
    with CallThreads(max_workers=min(len(tasks), os.cpu_count() or 1)) as pool:
        return list(pool.map(lambda t: t(), tasks))


def _read_json(data: pa.Buffer, schema: pa.Schema) -> pa.Table | None:
    """The JSON objects of ``data`` (one after another), or None if the reader refuses them.

    Arrow's JSON reader would split a text into blocks itself, but only at newlines: feeding it
    the string array's own character buffer, cut at row boundaries, saves a copy of every text.
    """
    read_json: Any = pa_json.read_json
    parse = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    options = pa_json.ReadOptions(use_threads=False, block_size=max(len(data) + 1, 1 << 16))
    try:
        table: pa.Table = read_json(pa.BufferReader(data), parse_options=parse,
                                    read_options=options)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    return table


def _parse_part(texts: Any, present: Any, offsets: Any, rows: tuple[int, int],
                read_type: Any, logical: Any, physical: Any) -> Any:
    """Rows ``rows`` of ``texts`` parsed: by Arrow's reader, or row by row if it refuses."""
    a, b = rows
    start, end = int(offsets[a]), int(offsets[b])
    if end == start:
        return _retyped(pa.nulls(b - a, logical), logical)  # typed as the other parts
    table = _read_json(texts.buffers()[2].slice(start, end - start), pa.schema(list(read_type)))
    here = present[a:b]
    if table is not None and table.num_rows == int(here.sum()):
        children: list[Any] = [c.combine_chunks() if c.num_chunks != 1 else c.chunk(0)
                               for c in table.columns]
        parsed = pa.StructArray.from_arrays(children, fields=list(read_type))
        try:
            typed = _retyped(parsed, logical)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # a date that is not one
        else:
            if table.num_rows == b - a:
                return typed
            # Rows without statistics are null: pick each row's object by its rank.
            rank = np.cumsum(here) - 1
            return typed.take(pa.array(rank, pa.int64(), mask=~here))
    return _retyped(stats_struct_array(texts.slice(a, b - a).to_pylist(), physical), logical)


def parse_stats(texts: Any, logical: pa.StructType, physical: pa.StructType) -> Any:
    """The JSON ``stats`` texts as structs of type ``logical`` (null where a file has none).

    ``physical`` is the same type keyed as the texts are.  Arrow's JSON reader parses the
    texts in parts of about ``_PART_BYTES``; a part it refuses is parsed by ``parsed_stats``
    instead, which leaves just the misfits null (see the module docstring).
    """
    if len(texts) == 0:
        return pa.array([], logical)
    present: Any = np.diff(_offsets(texts)) > 0
    if texts.null_count:
        valid = texts.is_valid().to_numpy(zero_copy_only=False)
        if (present & ~valid).any():
            # Character data under null rows: start again from an array without any.
            texts = pc.if_else(valid, texts, pa.scalar("", pa.string()))
        present &= valid
    offsets = _offsets(texts)
    read_type: Any = _json_read_type(physical)
    tasks: list[Callable[[], Any]] = [
        functools.partial(_parse_part, texts, present, offsets, rows, read_type, logical, physical)
        for rows in _row_cuts(offsets)]
    parts = _in_parallel(tasks)
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


# --------------------------------------------------------------------------- typed structs


class _Misfit(Exception):
    """A column of the struct cannot give the text's values (another type, or absent)."""


def _whole_ms(arr: Any) -> Any:
    """Which timestamps of ``arr`` are whole milliseconds, as JSON bounds are (true for nulls;
    None: all)."""
    unit = arr.type.unit
    if unit in ("s", "ms"):
        return None
    ticks = arr.cast(pa.int64())
    per_ms = 1_000 if unit == "us" else 1_000_000
    return pc.fill_null(pc.equal(pc.multiply(pc.divide(ticks, per_ms), per_ms), ticks), True)


def _exact_cast(src: Any, t: Any) -> bool:
    """Whether every value of type ``src`` is the same value as type ``t`` (so a bound typed
    ``src`` reads as the JSON text of it would): wider integers, strings, dates, decimals of
    the same scale and more digits.  Not floats to doubles: the text of a float read as a
    double is not the float made wider."""
    types = pa.types
    if types.is_integer(src) and types.is_integer(t):
        if types.is_signed_integer(src) == types.is_signed_integer(t):
            return bool(src.bit_width <= t.bit_width)
        return bool(types.is_unsigned_integer(src) and src.bit_width < t.bit_width)
    strings = (types.is_string, types.is_large_string)
    if any(f(src) for f in strings) and any(f(t) for f in strings):
        return True
    if types.is_date(src) and types.is_date(t):
        return True
    return bool(types.is_decimal(src) and types.is_decimal(t) and src.scale == t.scale
                and src.precision - src.scale <= t.precision - t.scale)


def _leaf(arr: Any, t: pa.DataType) -> tuple[Any, Any]:
    """A leaf column of the struct as type ``t``, and which rows it answers (None: all)."""
    src = arr.type
    types = pa.types
    if types.is_timestamp(src) and types.is_timestamp(t) and (src.tz is None) == (t.tz is None):
        # Checked before the cast, which would drop what is finer than ``t``'s unit.
        fits = _whole_ms(arr)
        return (arr if src == t else arr.cast(t, safe=False)), fits
    if src == t:
        out = arr
    elif _exact_cast(src, t):
        out = arr.cast(t)
    else:
        raise _Misfit
    if types.is_floating(t) and len(out) and not pc.all(
            pc.fill_null(pc.is_finite(out), True)).as_py():
        # JSON has no NaN or infinity: parsing such a bound leaves it null.
        out = pc.if_else(pc.is_finite(out), out, pa.scalar(None, t))
    return out, None


def _both(a: Any, b: Any) -> Any:
    if a is None:
        return b
    return a if b is None else pc.and_(a, b)


def _conformed(arr: Any, physical: pa.StructType, logical: pa.StructType,
               absent: list[tuple[str, pa.DataType]]) -> tuple[Any, Any]:
    """``arr`` (a struct, its nulls applied to its children) as ``logical``, its fields
    matched by the names of ``physical``; which rows it answers (None: all).  Leaves it lacks
    are null and listed in ``absent``."""
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    children: list[Any] = []
    fits = None
    for p, f in zip(physical, logical, strict=True):
        if p.name not in names:
            absent.extend(_leaves(p))
            children.append(pa.nulls(len(arr), f.type))
            continue
        child = pc.struct_field(arr, [names.index(p.name)])
        if pa.types.is_struct(p.type):
            if not pa.types.is_struct(child.type):
                raise _Misfit
            out, ok = _conformed(child, p.type, f.type, absent)
        else:
            out, ok = _leaf(child, f.type)
        children.append(out)
        fits = _both(fits, ok)
    return pa.StructArray.from_arrays(children, fields=[pa.field(f.name, f.type)
                                                        for f in logical],
                                      mask=arr.is_null() if arr.null_count else None), fits


def _leaves(f: pa.Field[Any]) -> Iterator[tuple[str, pa.DataType]]:
    if pa.types.is_struct(f.type):
        for child in f.type:
            yield from _leaves(child)
    else:
        yield f.name, f.type


def _may_hold(texts: Any, absent: list[tuple[str, pa.DataType]]) -> bool:
    """Whether any text may hold a value for a column the struct lacks.

    Only booleans are looked for (deltalake lists their bounds, ``stats_parsed`` has none, and
    few writers record them: a text holding one is parsed); any other absent column is
    presumed present.
    """
    if any(not pa.types.is_boolean(t) for _, t in absent):
        return True
    names = "|".join(re.escape(name) for name, _ in absent)
    pattern = f'"(?:{names})"\\s*:\\s*[tf]'
    return bool(len(texts) and pc.any(pc.match_substring_regex(texts, pattern)).as_py())


def _merged(base: Any, use: Any, others: Any) -> Any:
    """``base`` where ``use`` (numpy bool) holds, ``others`` (the rest, in order) elsewhere."""
    n = len(base)
    rank = np.cumsum(~use) - 1
    idx = np.where(use, np.arange(n), n + rank)
    return pa.concat_arrays([base, others]).take(pa.array(idx, pa.int64()))


def _struct_answer(parsed: Any, logical: pa.StructType, physical: pa.StructType
                   ) -> tuple[Any, Any, list[tuple[str, pa.DataType]]] | None:
    """The statistics ``parsed`` gives as ``logical``, which of its rows give them (a valid
    struct that gives what the text would), and the columns it lacks; None if it cannot be
    read as them at all."""
    if parsed is None or not pa.types.is_struct(parsed.type):
        return None
    absent: list[tuple[str, pa.DataType]] = []
    try:
        base, fits = _conformed(parsed, physical, logical, absent)
    except (_Misfit, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    use: Any = parsed.is_valid()
    if fits is not None:
        use = pc.and_(use, fits)
    return base, use, absent


def stats_from_struct(parsed: Any, texts: Any, logical: pa.StructType,
                      physical: pa.StructType) -> Any:
    """``parse_stats(texts, logical, physical)``, taking the values from ``parsed`` (a
    checkpoint's ``stats_parsed``, row for row with ``texts``) wherever it gives the same
    (see the module docstring)."""
    answer = _struct_answer(parsed, logical, physical) if len(texts) else None
    if answer is None:
        return parse_stats(texts, logical, physical)
    base, use, absent = answer
    if absent and _may_hold(texts, absent):
        return parse_stats(texts, logical, physical)
    # A row without text has no statistics, whatever the struct says (a reader fills in the
    # text of every row the struct alone describes).
    has_text = pc.greater(pc.binary_length(texts), pa.scalar(0, pa.int32()))
    use = pc.and_(use, pc.fill_null(has_text, False))
    use_np = use.to_numpy(zero_copy_only=False)
    if use_np.all():
        return base
    # Rows the struct cannot answer: parse their text (null where there is none).
    rest = parse_stats(texts.filter(pa.array(~use_np)), logical, physical)
    return _merged(base, use_np, rest)


def struct_only_stats(parsed: Any, logical: pa.StructType, physical: pa.StructType) -> Any:
    """What ``stats_from_struct`` gives for rows that all have a (non-empty) JSON text, taken
    from ``parsed`` alone; None when some row would need its text: its struct is null or
    does not give what the text would, or the struct lacks a column the text may hold."""
    answer = _struct_answer(parsed, logical, physical) if parsed is not None and len(parsed) \
        else None
    if answer is None or answer[2]:
        return None
    base, use, _ = answer
    # Every row usable: no null and no false.  Not ``to_numpy``, which makes pyarrow import
    # pandas (0.2 s on a process's first listing; protocol.arrow_values).
    return base if use.null_count == 0 and pc.all(use).as_py() else None


__all__ = ["parse_stats", "stats_from_struct", "struct_only_stats"]
