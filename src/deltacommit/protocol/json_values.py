"""Decoding JSON read from a table (log lines, statistics, hints, schema metadata).  Pure.

``json.loads`` raises RecursionError, not ValueError, on text nested deeper than the
interpreter's recursion limit allows; every caller that handles bad JSON catches ValueError,
so a few kilobytes of brackets in a commit, a ``_last_checkpoint`` or an ``add.stats`` would
escape as a crash.  ``loads`` turns that case into the ValueError those callers expect.
"""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``; every failure, nesting too deep included, is a ValueError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to decode") from None
