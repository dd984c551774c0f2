"""Racing creators of one table, counted: the helpers of ``test_create`` and
``s3/test_create_race``."""

from __future__ import annotations

import threading
from collections.abc import Callable

import deltacommit as dc
from deltacommit.engine.snapshot import state_cache


def race(n: int, create: Callable[[int], object]) -> tuple[list[object], list[BaseException]]:
    """Run ``create(i)`` on ``n`` threads released together by a barrier; what each returned
    and what each raised."""
    barrier = threading.Barrier(n)
    won: list[object] = []
    lost: list[BaseException] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        barrier.wait()
        try:
            result = create(i)
        except BaseException as e:  # counted below: every racer ends one way or the other
            with lock:
                lost.append(e)
            return
        with lock:
            won.append(result)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(won) + len(lost) == n
    return won, lost


def check_one_table(uri: str, won: list[object], lost: list[BaseException], n: int,
                    options: dict[str, str] | None = None) -> None:
    """Exactly one winner, ``n - 1`` TableExistsErrors naming the table, and the table at the
    location is the winner's (its version 0, by table id and description)."""
    assert len(won) == 1, f"{len(won)} creators won: {lost}"
    assert len(lost) == n - 1
    for e in lost:
        assert isinstance(e, dc.TableExistsError), repr(e)
        assert uri.rstrip("/").split("://")[-1] in str(e)
    [winner] = won
    assert isinstance(winner, dc.DeltaTable)
    state_cache.clear()
    table = dc.DeltaTable(uri, storage_options=options)
    assert table.version == 0
    assert table.metadata.id == winner.metadata.id
    assert [h["operation"] for h in table.history()] == ["CREATE TABLE"]
