"""Counting the file statistics parsed from their JSON text, for tests that prove typed
statistics (``stats_parsed``) spare that parsing."""

from __future__ import annotations

from typing import Any

import pytest

from deltacommit.protocol.stats import arrays as stats_arrays


def json_parsed_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the rows whose JSON statistics are parsed from now on (one entry per call)."""
    parsed: list[int] = []
    original = stats_arrays.parse_stats

    def counted(texts: Any, logical: Any, physical: Any) -> Any:
        parsed.append(len(texts))
        return original(texts, logical, physical)

    monkeypatch.setattr(stats_arrays, "parse_stats", counted)
    return parsed
