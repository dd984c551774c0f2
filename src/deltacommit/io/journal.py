"""Journals of acknowledged writes: the evidence a history checker holds the log to.

A writer appends one line per commit it was told succeeded, and only after being told: the
journal is the set of promises the system made.  ``deltacommit verify`` then proves each promise
kept (the transaction is in the log exactly once, at the version it was given, in the very
bytes it wrote).  A line is flushed and fsynced before ``append`` returns, so a writer killed
right after a commit has either recorded it whole or not at all; a kill in the middle of a
line leaves a torn last line, which readers ignore (that promise was never fully made).
One journal file belongs to one writer process: two processes appending to one file could
interleave their lines.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Protocol

from deltacommit.errors import InvalidArgumentError


class Acknowledged(Protocol):
    """What a commit's acknowledgement carries: ``CommitResult`` and ``WriteResult`` both."""

    @property
    def txn_id(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def digest(self) -> str: ...

#: File names a directory given as a journal is searched for.
JOURNAL_SUFFIX = ".jsonl"


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One acknowledged write: what the writer was promised."""

    txn_id: str
    version: int
    #: SHA-256 (hex) of the commit file as written; empty when the writer did not know it.
    digest: str = ""
    #: Rows the write added (0 when unknown or not an append).
    rows: int = 0
    writer: str = ""

    @classmethod
    def from_result(cls, result: Acknowledged, *, rows: int = 0, writer: str = "") -> JournalEntry:
        return cls(result.txn_id, result.version, result.digest, rows, writer)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: Any, where: str) -> JournalEntry:
        if not isinstance(obj, dict):
            raise InvalidArgumentError(f"{where}: expected a JSON object, got {obj!r}")
        txn_id, version = obj.get("txn_id"), obj.get("version")
        digest, rows, writer = obj.get("digest", ""), obj.get("rows", 0), obj.get("writer", "")
        if not isinstance(txn_id, str) or not txn_id:
            raise InvalidArgumentError(f"{where}: expected a non-empty string txn_id, got {txn_id!r}")
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise InvalidArgumentError(f"{where}: expected a version >= 0, got {version!r}")
        if not isinstance(digest, str) or not isinstance(writer, str):
            raise InvalidArgumentError(f"{where}: digest and writer must be strings")
        if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
            raise InvalidArgumentError(f"{where}: expected rows >= 0, got {rows!r}")
        return cls(txn_id, version, digest, rows, writer)


class Journal:
    """An append-only journal file for one writer process."""

    def __init__(self, path: str | os.PathLike[str], writer: str = "") -> None:
        self.path = Path(path)
        self.writer = writer
        self.count = 0
        self._file: IO[str] | None = None

    def _open(self) -> IO[str]:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept open)
        return self._file

    def append(self, result: Acknowledged, *, rows: int = 0) -> JournalEntry:
        """Record an acknowledged commit durably (written, flushed and fsynced)."""
        entry = JournalEntry.from_result(result, rows=rows, writer=self.writer)
        self.write(entry)
        return entry

    def write(self, entry: JournalEntry) -> None:
        f = self._open()
        f.write(json.dumps(entry.to_json(), separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())
        self.count += 1

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def read_journal(path: str | os.PathLike[str]) -> list[JournalEntry]:
    """The entries of one journal file; a torn last line (a writer killed mid-append) is ignored.

    Any other unreadable line is an error naming the file and line: a journal damaged in the
    middle cannot be trusted to list every promise.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidArgumentError(f"journal {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(f"journal {p} cannot be read: {e}") from None
    lines = text.split("\n")
    torn_last = not text.endswith("\n")
    out: list[JournalEntry] = []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"journal {p} line {i}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            if torn_last and i == len(lines):
                break
            raise InvalidArgumentError(f"{where}: not a JSON line ({e.msg})") from None
        out.append(JournalEntry.from_json(obj, where))
    return out


def journal_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Files named, with a directory standing for every ``*.jsonl`` file in it."""
    out: list[Path] = []
    for item in paths:
        p = Path(item)
        if p.is_dir():
            out.extend(sorted(p.glob(f"*{JOURNAL_SUFFIX}")))
        else:
            out.append(p)
    return out


def read_journals(paths: Iterable[str | os.PathLike[str]]) -> list[JournalEntry]:
    """Every entry of the journal files (directories: every ``*.jsonl`` file in them)."""
    out: list[JournalEntry] = []
    for p in journal_files(paths):
        out.extend(read_journal(p))
    return out
