"""The ``add`` or ``remove`` rows of one checkpoint, read and decoded on demand, then cached
(``ActionRows``), for the file maps of ``lazy_files``.  Pure.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.protocol.arrow_values import string_array
from deltacommit.protocol.files.from_arrow import gc_paused, keys_are_paths, row_keys
from deltacommit.runtime.threads import CallThreads

__all__ = ["ActionRows", "Loaded"]

V = TypeVar("V")


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
        #: ``keys_are_paths`` of these rows, once decided (the rows never change).
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
        """``keys_are_paths`` of these rows (``rows``: them, whole or light), decided once:
        a scan of every path, and on a table with other spellings a regular expression too."""
        if self._are_paths is None:
            self._are_paths = keys_are_paths(rows)
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
        keys = arrow.field("path") if self._keys_are_paths(arrow) \
            else pa.array(self.keys(), pa.string())
        found = pc.is_in(keys, value_set=string_array(list(hidden)))
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
