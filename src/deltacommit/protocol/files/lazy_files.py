"""File sets loaded from a checkpoint, kept as Arrow until someone asks for Python objects.  Pure.

A checkpoint of a large table holds hundreds of thousands of ``add`` rows.  Turning each into an
``Add`` object costs more than reading the whole Parquet file, yet most users of a snapshot
never look at the file list: a blind append needs only the protocol, the metadata and the
commits it raced with.  So a snapshot loaded from a checkpoint keeps the ``add`` and ``remove``
rows as Arrow arrays and builds Python objects only when the file list is enumerated, once per
checkpoint (the objects are shared by every snapshot derived from it).

``LazyActionMap`` is a ``dict`` (``TableState.files`` and ``tombstones`` are dicts keyed by
``file_key``) whose own storage holds only what changed after the checkpoint: replaying a commit
(``map[key] = add``, ``map.pop(key, None)``) never touches the Arrow rows.  Any operation that
enumerates the map first merges the rows in ("materialises"), after which it is a plain dict.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from _collections_abc import dict_items, dict_keys, dict_values
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.protocol.actions import Add, Remove
from deltacommit.protocol.log.paths import canonical_key, file_key
from deltacommit.runtime.threads import CallThreads

V = TypeVar("V")
T = TypeVar("T")

_MISSING: Any = object()


# --------------------------------------------------------------------------- Arrow -> Python


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many objects at once.

    Every few hundred allocations CPython scans young objects, and the full collections this
    triggers rescan everything already built: decoding 100,000 ``add`` rows spends more time in
    the collector than in decoding.  The objects built form no cycles, so nothing is missed.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def map_dicts(arr: pa.Array[Any]) -> list[dict[str, str | None] | None]:
    """A ``map<string,string>`` array as one dict per row (None for a null map).

    Partition values are the common case and have the same keys in every row, so that shape
    is decoded column-wise instead of slicing each row's entries.
    """
    n = len(arr)
    if n == 0:
        return []
    m: Any = arr
    offsets = m.offsets
    first = offsets[0].as_py()
    last = offsets[n].as_py()
    total = last - first
    keys = m.keys.slice(first, total)
    items = m.items.slice(first, total)
    if m.null_count == 0:
        if total == 0:
            return [{} for _ in range(n)]
        width, rest = divmod(total, n)
        if rest == 0:
            widths = pc.subtract(offsets.slice(1), offsets.slice(0, n))
            if pc.all(pc.equal(widths, width)).as_py():
                names = keys.slice(0, width).to_pylist()
                if len(set(names)) == width:
                    if width == 1:
                        same = pc.all(pc.equal(keys, names[0])).as_py()
                    else:
                        same = keys.to_pylist() == names * n
                    if same:
                        vals = items.to_pylist()
                        if width == 1:
                            k0 = names[0]
                            return [{k0: v} for v in vals]
                        cols = [vals[j::width] for j in range(width)]
                        return [dict(zip(names, t, strict=True)) for t in zip(*cols, strict=True)]
    ks = keys.to_pylist()
    vs = items.to_pylist()
    offs = [o - first for o in offsets.to_pylist()]
    valid = m.is_valid().to_pylist()
    out: list[dict[str, str | None] | None] = []
    for i in range(n):
        if not valid[i]:
            out.append(None)
        else:
            a, b = offs[i], offs[i + 1]
            out.append(dict(zip(ks[a:b], vs[a:b], strict=True)))
    return out


def _child(arr: pa.StructArray, name: str) -> Any:
    """A child array (typed loosely: pyarrow's stubs cannot follow struct children)."""
    return arr.field(name)


def _all_null(a: Any) -> bool:
    return bool(a.null_count == len(a))


def _dv_dicts(arr: Any) -> list[dict[str, Any] | None]:
    """Deletion vector descriptors as the JSON codec would produce them (no null fields), so
    that ``file_key`` gives the same key for a file whether it came from JSON or a checkpoint."""
    out: list[dict[str, Any] | None] = []
    for d in arr.to_pylist():
        out.append(None if d is None else {k: v for k, v in d.items() if v is not None})
    return out


def adds_from_arrow(arr: pa.StructArray) -> list[Add]:
    """``Add`` objects from non-null rows of the canonical ``add`` struct."""
    n = len(arr)
    if n == 0:
        return []
    path = _child(arr, "path").to_pylist()
    size = _child(arr, "size").to_pylist()
    mtime_arr = _child(arr, "modificationTime")
    mtime = (mtime_arr.to_pylist() if mtime_arr.null_count == 0
             else [0 if x is None else x for x in mtime_arr.to_pylist()])
    dc_arr = _child(arr, "dataChange")
    data_change = (dc_arr.to_pylist() if dc_arr.null_count == 0
                   else [True if x is None else x for x in dc_arr.to_pylist()])
    stats = _child(arr, "stats").to_pylist()
    pvs = [{} if d is None else d for d in map_dicts(_child(arr, "partitionValues"))]
    optional = ("tags", "deletionVector", "baseRowId", "defaultRowCommitVersion",
                "clusteringProvider")
    present = [name for name in optional if not _all_null(_child(arr, name))]
    if not present:
        return list(map(Add, path, pvs, size, mtime, data_change, stats))
    tags = map_dicts(_child(arr, "tags")) if "tags" in present else [None] * n
    dvs = _dv_dicts(_child(arr, "deletionVector")) if "deletionVector" in present else [None] * n
    base_row = _child(arr, "baseRowId").to_pylist()
    drcv = _child(arr, "defaultRowCommitVersion").to_pylist()
    cprov = _child(arr, "clusteringProvider").to_pylist()
    return [Add(path[i], pvs[i], size[i], mtime[i], data_change[i], stats[i], tags[i], dvs[i],
                base_row[i], drcv[i], cprov[i]) for i in range(n)]


def removes_from_arrow(arr: pa.StructArray) -> list[Remove]:
    """``Remove`` objects from non-null rows of the canonical ``remove`` struct."""
    n = len(arr)
    if n == 0:
        return []
    path = _child(arr, "path").to_pylist()
    ts = _child(arr, "deletionTimestamp").to_pylist()
    data_change = [True if x is None else x for x in _child(arr, "dataChange").to_pylist()]
    efm = _child(arr, "extendedFileMetadata").to_pylist()
    pvs = map_dicts(_child(arr, "partitionValues"))
    size = _child(arr, "size").to_pylist()
    dv_arr = _child(arr, "deletionVector")
    dvs = [None] * n if _all_null(dv_arr) else _dv_dicts(dv_arr)
    base_row = _child(arr, "baseRowId").to_pylist()
    drcv = _child(arr, "defaultRowCommitVersion").to_pylist()
    return [Remove(path[i], ts[i], data_change[i], efm[i], pvs[i], size[i], None, None, dvs[i],
                   base_row[i], drcv[i]) for i in range(n)]


# Paths ``canonical_key`` may change (see ``log.paths.is_plain_relative``): an escape, a scheme
# or drive colon, a leading or trailing slash, an empty segment, or a ``.``/``..`` segment.
_NOT_PLAIN = r"%|:|^/|/$|//|(^|/)\.\.?(/|$)"


def row_keys(arr: pa.StructArray, are_paths: bool | None = None) -> list[str]:
    """``file_key`` of every row, computed column-wise when no row has a deletion vector.
    ``are_paths``: ``_keys_are_paths(arr)`` if the caller has decided it already."""
    paths: list[str] = _child(arr, "path").to_pylist()
    if are_paths if are_paths is not None else _keys_are_paths(arr):
        return paths
    dv_arr = _child(arr, "deletionVector")
    if _all_null(dv_arr):
        return [canonical_key(p) for p in paths]
    dvs = _dv_dicts(dv_arr)
    return [file_key(p, d) for p, d in zip(paths, dvs, strict=True)]


def _all_plain(paths: Any) -> bool:
    """Whether every path is its own key (``log.paths.is_plain_relative``), so the path column
    can stand for the keys without building them in Python."""
    if not len(paths) or _clearly_plain(paths):
        return True
    return not pc.any(pc.match_substring_regex(paths, _NOT_PLAIN)).as_py()


def _clearly_plain(paths: Any) -> bool:
    """A scan of the column's bytes (in place, no copy) that finds none of what could make a
    path not plain: no escape or colon, no ``//`` or ``/.`` (a false alarm from ``x/.name``
    only costs the exact check), none empty, starting with ``/`` or ``.``, or ending with
    ``/``.  About 4 ms per 100,000 paths, a quarter of the regular expression's time."""
    wide = pa.types.is_large_string(paths.type)
    if paths.null_count or not (wide or pa.types.is_string(paths.type)):
        return False
    _, offsets_buf, data_buf = paths.buffers()
    if data_buf is None:
        return False
    offsets = np.frombuffer(offsets_buf, dtype=np.int64 if wide else np.int32)[
        paths.offset:paths.offset + len(paths) + 1]
    first, last = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(data_buf, dtype=np.uint8)[first:last]
    starts: Any = offsets[:-1] - first
    ends: Any = offsets[1:] - first
    if (ends <= starts).any():
        return False
    heads, tails = data[starts], data[ends - 1]
    if (heads == 0x2F).any() or (heads == 0x2E).any() or (tails == 0x2F).any():
        return False
    # What follows each slash: paths are full of slashes, so this beats searching for "//".
    after = data[np.flatnonzero(data[:-1] == 0x2F) + 1]
    if ((after == 0x2F) | (after == 0x2E)).any():
        return False
    return not (np.count_nonzero(data == 0x25) or np.count_nonzero(data == 0x3A))


def _keys_are_paths(arrow: pa.StructArray) -> bool:
    """Whether each row's key (``file_key``) is its path: no deletion vector, plain paths."""
    return _all_null(_child(arrow, "deletionVector")) and _all_plain(_child(arrow, "path"))


# --------------------------------------------------------------------------- checkpoint rows


#: What loading a checkpoint's rows gives: the canonical rows, or the rows and the checkpoint's
#: typed statistics of each (``add.stats_parsed``; None when it has none).
Loaded = pa.StructArray | tuple[pa.StructArray, Any]


class ActionRows(Generic[V]):
    """The ``add`` or ``remove`` rows of one checkpoint, read and decoded on demand, then cached.

    ``arrow`` is either given or produced by ``load`` on first use: a snapshot that never
    looks at files (a blind append) never even reads those columns of the checkpoint.
    Immutable once built, so every snapshot derived from the same checkpoint shares it.

    ``stats_parsed`` (given, loaded with the rows, or read when first asked for by
    ``load_stats_parsed``, which may give None) is the checkpoint's typed
    statistics, row for row: kept beside the canonical rows rather than in them, so that the
    file list as a table (``log.add_actions``) need not parse the JSON texts and everything
    else sees the one ``add`` shape.

    ``load_light`` reads the rows without their JSON statistics, most of a checkpoint's
    ``add`` bytes, for a reader that has the typed ones (``light``: the file list as a table).
    Should the whole rows be needed later, ``complete`` (if given) adds the texts to the rows
    already read (reading only that column); without it, or when it gives None, ``load``
    reads them all.
    """

    def __init__(self, arrow: pa.StructArray | None, decode: Callable[[pa.StructArray], list[V]],
                 load: Callable[[], Loaded] | None = None, *,
                 stats_parsed: Any = None,
                 load_stats_parsed: Callable[[], Any] | None = None,
                 keys: list[str] | None = None, objects: list[V] | None = None,
                 load_light: Callable[[], pa.StructArray] | None = None,
                 complete: Callable[[pa.StructArray], pa.StructArray | None] | None = None
                 ) -> None:
        if arrow is None and load is None:
            raise ValueError("ActionRows needs the rows or a way to load them")
        if stats_parsed is not None and arrow is not None and len(stats_parsed) != len(arrow):
            raise ValueError("stats_parsed must have a value for each row")
        for given in (keys, objects):
            if given is not None and (arrow is None or len(given) != len(arrow)):
                raise ValueError("keys and objects must have one entry for each row")
        self._arrow = arrow
        self._stats_parsed = stats_parsed
        self._load_stats_parsed = load_stats_parsed
        self._load = load
        self._load_light = load_light
        self._complete = complete
        self._light: pa.StructArray | None = None
        self._decode = decode
        self._keys: list[str] | None = keys
        #: ``_keys_are_paths`` of these rows, once decided (the rows never change).
        self._are_paths: bool | None = None
        self._index: dict[str, int] | None = None
        self._objects: list[V] | None = objects
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._parsed_lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._arrow is not None

    @property
    def arrow(self) -> pa.StructArray:
        arrow = self._arrow
        if arrow is None:
            with self._load_lock:
                if self._arrow is None:
                    light, complete = self._light, self._complete
                    loaded: Loaded | None = (complete(light) if light is not None
                                             and complete is not None else None)
                    if loaded is None:
                        load = self._load
                        assert load is not None
                        loaded = load()
                    if isinstance(loaded, tuple):
                        rows, parsed = loaded
                        if parsed is not None and len(parsed) != len(rows):
                            raise ValueError("stats_parsed must have a value for each row")
                        self._stats_parsed = parsed
                        if parsed is not None:
                            self._load_stats_parsed = None  # the rows brought them
                    else:
                        rows = loaded
                    self._arrow = rows
                    # Release the file they were read from, and the rows read without texts.
                    self._load = self._load_light = self._complete = None
                    self._light = None
                arrow = self._arrow
        return arrow

    def light(self) -> pa.StructArray:
        """The rows, or, while they are not read and may be read without their JSON
        statistics (``load_light``), the rows without them: for readers that take the
        statistics from ``stats_parsed`` only."""
        if self._arrow is not None or self._load_light is None:
            return self.arrow
        with self._load_lock:
            if self._arrow is not None:
                return self._arrow
            if self._light is None:
                load = self._load_light
                assert load is not None
                self._light = load()
            return self._light

    def _read_rows(self) -> pa.StructArray:
        """Whichever rows are read already (path and deletion vector are in both), else the
        whole rows."""
        arrow = self._arrow
        if arrow is not None:
            return arrow
        light = self._light
        return light if light is not None else self.arrow

    @property
    def stats_parsed(self) -> Any:
        """The checkpoint's typed statistics of each row, or None (loads the rows, and the
        statistics if they are read apart: both at once when neither is read yet)."""
        return self._with_parsed(lambda: self.arrow)[1]

    def _with_parsed(self, rows_of: Callable[[], pa.StructArray]) -> tuple[pa.StructArray, Any]:
        """The rows ``rows_of`` gives and ``stats_parsed``, read at once when neither is."""
        if self._load_stats_parsed is None:
            return rows_of(), self._stats_parsed
        with self._parsed_lock:
            load = self._load_stats_parsed
            if load is None:
                return rows_of(), self._stats_parsed
            if self._arrow is None and self._light is None:
                with CallThreads(max_workers=1) as pool:
                    future = pool.submit(load)
                    rows = rows_of()
                    parsed = future.result()
            else:
                rows = rows_of()
                parsed = None if self._load_stats_parsed is None else load()
            if self._load_stats_parsed is None:  # the rows brought them (read whole)
                return rows, self._stats_parsed
            self._stats_parsed = (parsed if parsed is not None
                                  and len(parsed) == len(rows) else None)
            self._load_stats_parsed = None
            return rows, self._stats_parsed

    def __len__(self) -> int:
        return len(self._read_rows())

    def keys(self) -> list[str]:
        if self._keys is None:
            with gc_paused():
                rows = self._read_rows()
                self._keys = row_keys(rows, self._keys_are_paths(rows))
        return self._keys

    def _keys_are_paths(self, rows: pa.StructArray) -> bool:
        """``_keys_are_paths`` of these rows (``rows``: them, whole or light), decided once:
        a scan of every path, and on a table with other spellings a regular expression too."""
        if self._are_paths is None:
            self._are_paths = _keys_are_paths(rows)
        return self._are_paths

    def index(self) -> dict[str, int]:
        if self._index is None:
            keys = self.keys()
            with gc_paused():
                self._index = dict(zip(keys, range(len(keys)), strict=True))
        return self._index

    def objects(self) -> list[V]:
        with self._lock:
            if self._objects is None:
                with gc_paused():
                    self._objects = self._decode(self.arrow)
            return self._objects

    def row(self, i: int) -> V:
        if self._objects is not None:
            return self._objects[i]
        return self._decode(self.arrow.slice(i, 1))[0]

    def _kept(self, hidden: set[str], arrow: pa.StructArray) -> Any:
        """Which of the rows ``arrow`` (these rows, whole or light) have a key not in
        ``hidden`` (None: all of them)."""
        if not hidden or not len(arrow):
            return None
        # Where the keys are the paths, the column serves without building them in Python.
        keys = _child(arrow, "path") if self._keys_are_paths(arrow) \
            else pa.array(self.keys(), pa.string())
        found = pc.is_in(keys, value_set=pa.array(list(hidden), pa.string()))
        if not pc.any(found).as_py():
            return None
        return pc.invert(found)

    def without(self, hidden: set[str]) -> pa.StructArray:
        """The rows whose key is not in ``hidden``, still as Arrow (the rows themselves, not
        a copy, when none is hidden: keys set after a checkpoint are mostly new files)."""
        arrow = self.arrow
        kept = self._kept(hidden, arrow)
        return arrow if kept is None else arrow.filter(kept)

    def without_parsed(self, hidden: set[str], *, texts: bool = True
                       ) -> tuple[pa.StructArray, Any]:
        """``without(hidden)`` and the ``stats_parsed`` of the same rows (or None); without
        ``texts``, the rows may lack their JSON statistics (see ``light``)."""
        rows, parsed = self._with_parsed(self.light if not texts else lambda: self.arrow)
        kept = self._kept(hidden, rows)
        if kept is None:
            return rows, parsed
        return rows.filter(kept), None if parsed is None else parsed.filter(kept)


class LazyActionMap(dict[str, V]):
    """A dict of file actions whose checkpoint part stays in Arrow until enumerated.

    Own storage holds the actions set after the checkpoint; ``_shadow`` holds every key set or
    removed after it, which hides that key's checkpoint row.  Lookups, sets and pops work on
    that overlay; enumeration (iteration, ``values()``, ``len()``, ``==``, copying into a plain
    dict) merges the unshadowed checkpoint rows in first.  Materialising takes a lock, because
    snapshots are shared between threads that only read.
    """

    __slots__ = ("_base", "_lock", "_shadow")

    def __init__(self, base: ActionRows[V]) -> None:
        super().__init__()
        self._base: ActionRows[V] | None = base
        self._shadow: set[str] = set()
        self._lock = threading.RLock()

    # -- state

    @property
    def is_lazy(self) -> bool:
        return self._base is not None

    def read_rows(self) -> int:
        """Read the checkpoint rows (as Arrow, no objects) if not yet read; how many there are.

        For callers that must know the rows are readable before relying on them.
        """
        base = self._base
        return 0 if base is None else len(base.arrow)

    def lazy_copy(self) -> LazyActionMap[V]:
        """A copy sharing the checkpoint rows (cheap: only the overlay is copied)."""
        with self._lock:
            base = self._base
            if base is None:
                out: LazyActionMap[V] = LazyActionMap.__new__(LazyActionMap)
                dict.__init__(out)
                out._base = None
                out._shadow = set()
                out._lock = threading.RLock()
                dict.update(out, dict.items(self))
                return out
            out = LazyActionMap(base)
            dict.update(out, dict.items(self))
            out._shadow = set(self._shadow)
            return out

    def rebased(self, rows: pa.StructArray, stats_parsed: Any,
                decode: Callable[[pa.StructArray], list[V]]) -> LazyActionMap[V] | None:
        """The same map over ``rows``, the Arrow rows of its live actions in the order
        ``parsed_chunks`` gives them (as a checkpoint of it just encoded them), with the
        objects it already has; None when it lacks the objects of some row.

        A state copied for every version copies its whole map unless the map is backed by rows
        (``lazy_copy`` copies only what changed since), and a checkpoint converts to Arrow only
        the actions that no rows back.  So a writer that checkpoints a state it built itself,
        or enumerated, keeps the rows just encoded: its next copies and its next checkpoint
        cost the commits since, not the table.  No object is decoded or rebuilt."""
        with self._lock:
            base = self._base
            if base is None:
                keys = list(dict.keys(self))
                objects = list(dict.values(self))
            else:
                base_keys, base_objects = base._keys, base._objects
                if base_keys is None or base_objects is None:
                    return None
                shadow = self._shadow
                kept = [i for i, k in enumerate(base_keys) if k not in shadow]
                keys = [base_keys[i] for i in kept] + list(dict.keys(self))
                objects = [base_objects[i] for i in kept] + list(dict.values(self))
        return _backed(rows, stats_parsed, decode, keys, objects)

    def arrow_rows(self, to_arrow: Callable[[list[V]], pa.StructArray]) -> pa.StructArray:
        """Every live action as Arrow, without building objects for the checkpoint rows."""
        chunks = self.arrow_chunks(to_arrow)
        return chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)

    def arrow_chunks(self, to_arrow: Callable[[list[V]], pa.StructArray]
                     ) -> list[pa.StructArray]:
        """``arrow_rows`` as the checkpoint rows kept and the actions set after them, not
        concatenated (which would copy every checkpoint row)."""
        return [rows for rows, _ in self._chunks(to_arrow, with_parsed=False)]

    def parsed_chunks(self, to_arrow: Callable[[list[V]], pa.StructArray], *,
                      texts: bool = True) -> list[tuple[pa.StructArray, Any]]:
        """``arrow_chunks``, each with the checkpoint's ``stats_parsed`` of its rows (None for
        the actions set after the checkpoint, or when it has none).  Without ``texts``, the
        checkpoint rows may lack their JSON statistics (``ActionRows.light``)."""
        return self._chunks(to_arrow, with_parsed=True, texts=texts)

    def _chunks(self, to_arrow: Callable[[list[V]], pa.StructArray], *, with_parsed: bool,
                texts: bool = True) -> list[tuple[pa.StructArray, Any]]:
        """The chunks of both, ``stats_parsed`` read only ``with_parsed`` (None otherwise):
        reading it may open the checkpoint again."""
        with self._lock:
            base = self._base
            if base is None:
                return [(to_arrow(list(dict.values(self))), None)]
            kept, parsed = (base.without_parsed(self._shadow, texts=texts) if with_parsed
                            else (base.without(self._shadow), None))
            extra = list(dict.values(self))
        return [(kept, parsed), (to_arrow(extra), None)] if extra else [(kept, parsed)]

    def select(self, rows_mask: Callable[[pa.StructArray], Any],
               keep: Callable[[V], bool]) -> list[V]:
        """The live actions a filter accepts, in enumeration order: checkpoint rows are judged
        as Arrow (``rows_mask`` gives a boolean per row) and only those accepted are decoded;
        the actions set after the checkpoint are judged one by one (``keep``).  Selecting a few
        partitions of a large table builds no object for the files it leaves out."""
        with self._lock:
            base = self._base
            if base is None:
                return [v for v in dict.values(self) if keep(v)]
            kept = base.without(self._shadow)
            extra = list(dict.values(self))
            decode = base._decode
        out: list[V] = []
        if len(kept):
            mask = rows_mask(kept)
            if pc.all(mask).as_py():
                out = decode(kept)
            elif pc.any(mask).as_py():
                out = decode(kept.filter(mask))
        out.extend(v for v in extra if keep(v))
        return out

    def _materialise(self) -> None:
        with self._lock:
            base = self._base
            if base is None:
                return
            keys = base.keys()
            objects = base.objects()
            overlay = list(dict.items(self))
            dict.clear(self)
            shadow = self._shadow
            with gc_paused():
                dict.update(self, zip(keys, objects, strict=True))
                # Shadowed rows go, then the overlay comes after the rows (a key set again
                # since the checkpoint moves to the end, as in the file's enumeration order).
                for k in shadow:
                    dict.pop(self, k, None)
                dict.update(self, overlay)
            self._shadow = set()
            self._base = None

    def _base_lookup(self, key: str) -> V:
        """The checkpoint row for ``key`` (caller holds the lock and knows it is unshadowed)."""
        base = self._base
        assert base is not None
        i = base.index().get(key)
        if i is None:
            raise KeyError(key)
        return base.row(i)

    # -- lookups and updates that work on the overlay

    def __getitem__(self, key: str) -> V:
        if self._base is None:
            return dict.__getitem__(self, key)
        with self._lock:
            if self._base is None or dict.__contains__(self, key):
                return dict.__getitem__(self, key)
            if key in self._shadow:
                raise KeyError(key)
            value = self._base_lookup(key)
            # Pin the object so repeated lookups return the same one.
            dict.__setitem__(self, key, value)
            self._shadow.add(key)
            return value

    def __contains__(self, key: object) -> bool:
        if self._base is None:
            return dict.__contains__(self, key)
        with self._lock:
            if self._base is None or dict.__contains__(self, key):
                return dict.__contains__(self, key)
            if not isinstance(key, str) or key in self._shadow:
                return False
            return key in self._base.index()

    @overload
    def get(self, key: str, default: None = None, /) -> V | None: ...
    @overload
    def get(self, key: str, default: V, /) -> V: ...
    @overload
    def get(self, key: str, default: T, /) -> V | T: ...

    def get(self, key: str, default: Any = None, /) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __setitem__(self, key: str, value: V) -> None:
        if self._base is None:
            dict.__setitem__(self, key, value)
            return
        with self._lock:
            if self._base is not None:
                self._shadow.add(key)
            dict.__setitem__(self, key, value)

    @overload
    def pop(self, key: str, /) -> V: ...
    @overload
    def pop(self, key: str, default: V | T, /) -> V | T: ...

    def pop(self, key: str, default: Any = _MISSING, /) -> Any:
        if self._base is None:
            if default is _MISSING:
                return dict.pop(self, key)
            return dict.pop(self, key, default)
        with self._lock:
            if self._base is None:
                return self.pop(key) if default is _MISSING else self.pop(key, default)
            if dict.__contains__(self, key):
                return dict.pop(self, key)
            if key in self._shadow:
                if default is _MISSING:
                    raise KeyError(key)
                return default
            self._shadow.add(key)
            try:
                return self._base_lookup(key)
            except KeyError:
                if default is _MISSING:
                    raise
                return default

    def __delitem__(self, key: str) -> None:
        self.pop(key)

    def discard(self, key: str) -> None:
        """``pop(key, None)`` for a caller that does not want the value: the key is hidden
        without reading the checkpoint rows to look it up."""
        if self._base is None:
            dict.pop(self, key, None)
            return
        with self._lock:
            dict.pop(self, key, None)
            if self._base is not None:
                self._shadow.add(key)

    def __len__(self) -> int:
        if self._base is None:
            return dict.__len__(self)
        with self._lock:
            base = self._base
            if base is None:
                return dict.__len__(self)
            index = base.index()
            hidden = sum(1 for k in self._shadow if k in index)
            return len(index) - hidden + dict.__len__(self)

    def __bool__(self) -> bool:
        return len(self) > 0

    # -- everything that enumerates materialises first

    def __iter__(self) -> Iterator[str]:
        self._materialise()
        return dict.__iter__(self)

    def __reversed__(self) -> Iterator[str]:
        self._materialise()
        return dict.__reversed__(self)

    def keys(self) -> dict_keys[str, V]:
        self._materialise()
        return dict.keys(self)

    def values(self) -> dict_values[str, V]:
        self._materialise()
        return dict.values(self)

    def items(self) -> dict_items[str, V]:
        self._materialise()
        return dict.items(self)

    def copy(self) -> dict[str, V]:
        return self.lazy_copy()

    def __eq__(self, other: object) -> bool:
        self._materialise()
        if isinstance(other, LazyActionMap):
            other._materialise()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __repr__(self) -> str:
        self._materialise()
        return dict.__repr__(self)

    def setdefault(self, key: str, default: V = None, /) -> V:  # type: ignore[assignment]
        self._materialise()
        return dict.setdefault(self, key, default)

    def update(self, *args: Any, **kwargs: V) -> None:
        self._materialise()
        dict.update(self, *args, **kwargs)

    def popitem(self) -> tuple[str, V]:
        self._materialise()
        return dict.popitem(self)

    def clear(self) -> None:
        with self._lock:
            dict.clear(self)
            self._shadow = set()
            self._base = None

    def __or__(self, other: Any) -> dict[str, V]:  # type: ignore[override]
        self._materialise()
        return dict(dict.items(self)) | other  # type: ignore[no-any-return]

    def __ror__(self, other: Any) -> dict[str, V]:  # type: ignore[override]
        self._materialise()
        return other | dict(dict.items(self))  # type: ignore[no-any-return]

    def __ior__(self, other: Any) -> LazyActionMap[V]:  # type: ignore[override]
        self.update(other)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        self._materialise()
        return (dict, (dict(dict.items(self)),))


def discard(m: dict[str, V], key: str) -> None:
    """Remove ``key`` from a file map if present; a lazy map reads no checkpoint rows for it."""
    if isinstance(m, LazyActionMap):
        m.discard(key)
    else:
        m.pop(key, None)


def rebased_map(m: dict[str, V], rows: pa.StructArray, stats_parsed: Any,
                decode: Callable[[pa.StructArray], list[V]]) -> LazyActionMap[V] | None:
    """``m`` backed by ``rows``, its live actions as Arrow in enumeration order (see
    ``LazyActionMap.rebased``); None when that cannot be had without decoding rows."""
    if isinstance(m, LazyActionMap):
        return m.rebased(rows, stats_parsed, decode)
    return _backed(rows, stats_parsed, decode, list(m), list(m.values()))


def carried_over(live: dict[str, V], before: dict[str, V],
                 after: LazyActionMap[V]) -> LazyActionMap[V] | None:
    """``live`` over the rows of ``after``: the same actions, with ``after`` (a map backed by
    the rows a checkpoint just encoded, holding what ``before`` holds) in place of the part
    ``live`` shares with ``before``; None where telling the two apart would enumerate a lazy
    map.

    A writer whose later versions were committed while a checkpoint was being encoded (group
    commit) derived their states from the map before it was rebased (``rebased_map``).  Without
    this, those states and every one after them keep copying and converting every action since
    an older checkpoint, and each checkpoint costs the whole table again instead of the
    commits since.  ``live`` must descend from ``before`` by copies and updates (a later
    version's map): an action it holds as the very object ``before`` holds is unchanged.
    """
    if isinstance(live, LazyActionMap) != isinstance(before, LazyActionMap):
        return None
    if isinstance(live, LazyActionMap) and isinstance(before, LazyActionMap):
        with live._lock, before._lock:
            if live._base is not before._base:
                return None
            live_shadow, before_shadow = set(live._shadow), before._shadow
            own_live, own_before = dict(dict.items(live)), dict(dict.items(before))
        if before_shadow - live_shadow:
            return None  # not a descendant: a key hidden before is visible again
        # Hidden since: a checkpoint row of ``before`` (or an action it set) that ``live`` no
        # longer holds.
        gone = [k for k in live_shadow if k not in own_live
                and (k not in before_shadow or k in own_before)]
        gone += [k for k in own_before if k not in live_shadow and k not in own_live]
    else:
        own_live, own_before = live, before
        gone = [k for k in own_before if k not in own_live]
    changed = [(k, v) for k, v in own_live.items() if own_before.get(k, _MISSING) is not v]
    out = after.lazy_copy()
    for k in gone:
        out.discard(k)
    for k, v in changed:
        out[k] = v
    return out


def _backed(rows: pa.StructArray, stats_parsed: Any, decode: Callable[[pa.StructArray], list[V]],
            keys: list[str], objects: list[V]) -> LazyActionMap[V] | None:
    """A map of ``keys`` to ``objects`` backed by ``rows`` (theirs, in order); None if the
    rows are not one per key."""
    if len(keys) != len(rows):
        return None
    return LazyActionMap(ActionRows(rows, decode, stats_parsed=stats_parsed, keys=keys,
                                    objects=objects))


def copy_file_map(m: dict[str, V]) -> dict[str, V]:
    """Copy a file map, keeping a lazy one lazy."""
    if isinstance(m, LazyActionMap):
        return m.lazy_copy()
    return dict(m)
