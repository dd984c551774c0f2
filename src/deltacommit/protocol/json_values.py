"""Decoding JSON read from a table (log lines, statistics, hints, schema metadata).  Pure.

``json.loads`` raises RecursionError, not ValueError, on text nested deeper than the
interpreter's recursion limit allows; every caller that handles bad JSON catches ValueError,
so a few kilobytes of brackets in a commit, a ``_last_checkpoint`` or an ``add.stats`` would
escape as a crash.  ``loads`` turns that case into the ValueError those callers expect.

Floats are written as JSON numbers the same way everywhere (statistics and partition values):
``float32_text`` gives the shortest text that reads back as the same FLOAT, and
``json_float_text`` keeps a float's look (``5.0``, not ``5``).
"""

from __future__ import annotations

import json
import struct
from typing import Any


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``; every failure, nesting too deep included, is a ValueError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to decode") from None


def float32_text(v: float) -> str:
    """The shortest decimal text that reads back as the same float32 (finite ``v``)."""
    packed = struct.pack("<f", v)
    for digits in range(6, 10):
        text = f"{v:.{digits}g}"
        if struct.pack("<f", float(text)) == packed:
            return json_float_text(text)
    return repr(v)


def json_float_text(text: str) -> str:
    """A float's text as a JSON number that still reads as a float."""
    # "%g" may give "1e+20" or "5": valid JSON numbers, but keep a float look for readers that
    # type numbers by their spelling.
    if "e" not in text and "." not in text and "n" not in text:
        return text + ".0"
    return text
