"""A call running in a thread, for tests that need a writer stopped mid-way while they act."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Background:
    """A call running in a thread; ``join`` returns its result or raises its exception."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._result: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self._result = call()
        except BaseException as e:  # re-raised in join
            self._error = e

    def join(self, timeout: float = 120.0) -> Any:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the background call did not finish"
        if self._error is not None:
            raise self._error
        return self._result
