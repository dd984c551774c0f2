"""docs/ARCHITECTURE.md names only what exists: every path and every module it names.

Paths (a name with a ``/`` or ending in ``.py``) are relative to ``src/deltacommit/``, or to the
repository for ``src/``, ``tests/``, ``bench/``, ``docs/`` and ``examples/``, so a bare file name that
no longer says where it lives (``writer.py``, ``log/``) fails.  A dotted name that starts with
a layer's package (``engine.commit.loop.CommitLoop``) must import, attribute by attribute.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "deltacommit"
DOC = ROOT / "docs" / "ARCHITECTURE.md"
REPOSITORY_FOLDERS = ("src/", "tests/", "bench/", "docs/", "examples/")
PACKAGES = ("runtime", "protocol", "io", "engine", "ops", "spark", "cli", "testing")
DOTTED = re.compile(r"^[a-z_]+(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def _names() -> list[str]:
    return re.findall(r"`([^`\n]+)`", DOC.read_text())


def _is_path(name: str) -> bool:
    return " " not in name and ("/" in name or name.endswith(".py")) and not name.startswith(
        ("_delta_log", "<"))


def test_every_path_named_exists() -> None:
    missing = []
    for name in filter(_is_path, _names()):
        base = ROOT if name.startswith(REPOSITORY_FOLDERS) else SRC
        if not (base / name).exists():
            missing.append(name)
    assert missing == []


def _resolves(name: str) -> bool:
    """Whether the longest prefix of ``name`` that is a module of the package imports and the
    rest are its attributes."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module("deltacommit." + ".".join(parts[:i]))
        except ImportError:
            continue
        for attribute in parts[i:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def test_every_module_named_imports() -> None:
    named = [n for n in _names() if DOTTED.match(n) and n.split(".")[0] in PACKAGES]
    assert named, "the page names modules"
    assert [n for n in named if not _resolves(n)] == []
