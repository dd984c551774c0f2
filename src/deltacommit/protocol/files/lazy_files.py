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

import threading
from _collections_abc import dict_items, dict_keys, dict_values
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, overload

import pyarrow as pa
import pyarrow.compute as pc

from deltacommit.protocol.files.action_rows import ActionRows
from deltacommit.protocol.files.from_arrow import gc_paused

__all__ = ["LazyActionMap", "carried_over", "copy_file_map", "discard", "rebased_map"]

V = TypeVar("V")
T = TypeVar("T")


_MISSING: Any = object()


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
