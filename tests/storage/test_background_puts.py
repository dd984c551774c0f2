"""Background puts (``ObjectStore.put_soon``): awaited by ``make_durable``, and usable in a
process forked from one that had started some (a Spark Python worker forked by its daemon)."""

from __future__ import annotations

import multiprocessing

from deltacommit.storage.memory import MemoryStore
from deltacommit.testing import unique_name


def test_make_durable_waits_for_the_put() -> None:
    store = MemoryStore(unique_name("bg"))
    store.put_soon("p/a.parquet", b"a")
    store.make_durable(["p/a.parquet"])
    assert store.get("p/a.parquet") == b"a"
    assert not store.awaits_durable("p/a.parquet")


def _child(name: str) -> None:
    store = MemoryStore(name)
    store.put_soon("child.parquet", b"c")
    store.make_durable(["child.parquet"])
    assert store.get("child.parquet") == b"c"


def test_a_forked_child_gets_its_own_threads() -> None:
    """The parent's pool threads do not exist in a forked child: a put queued to them would
    never run, and the child's commit would wait for it forever."""
    name = unique_name("bg-fork")
    parent = MemoryStore(name)
    parent.put_soon("parent.parquet", b"p")
    parent.make_durable(["parent.parquet"])
    child = multiprocessing.get_context("fork").Process(target=_child, args=(name,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
