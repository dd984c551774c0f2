"""Names of the files in ``_delta_log`` and how to recognise them.  Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

from deltacommit.errors import CorruptLogError

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = f"{LOG_DIR}/_last_checkpoint"
#: Where V2 checkpoints keep the files holding their add and remove actions.
SIDECAR_DIR = f"{LOG_DIR}/_sidecars"

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT_CLASSIC = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_CHECKPOINT_MULTI = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_CHECKPOINT_V2 = re.compile(
    r"^(\d{20})\.checkpoint\.([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
    r"[0-9a-fA-F]{12})\.(json|parquet)$")
_CRC = re.compile(r"^(\d{20})\.crc$")
_COMPACTED = re.compile(r"^(\d{20})\.(\d{20})\.compacted\.json$")

LogFileKind = Literal["commit", "checkpoint", "checkpoint_part", "checkpoint_v2", "crc", "compacted"]


def commit_name(version: int) -> str:
    """``00000000000000000042.json`` (20 digits, as every Delta implementation writes)."""
    return f"{version:020d}.json"


def commit_path(version: int) -> str:
    return f"{LOG_DIR}/{version:020d}.json"


def checkpoint_path(version: int) -> str:
    return f"{LOG_DIR}/{version:020d}.checkpoint.parquet"


def v2_checkpoint_name(version: int, uuid: str, fmt: Literal["json", "parquet"] = "parquet"
                       ) -> str:
    """``n.checkpoint.<uuid>.parquet`` (or ``.json``): a UUID-named (V2) checkpoint."""
    return f"{version:020d}.checkpoint.{uuid}.{fmt}"


def sidecar_path(reference: str, source: str) -> str:
    """The store path of the sidecar a ``sidecar`` action's ``path`` names.

    PROTOCOL.md keeps every sidecar in ``_delta_log/_sidecars`` and has writers record only the
    (URI-encoded) file name; a full path or URI is accepted when it ends in that directory.
    Anything else would let a checkpoint point outside its table's log: CorruptLogError naming
    ``source``.
    """
    text = reference
    marker = f"{SIDECAR_DIR}/"
    if "/" in text:
        at = text.rfind(marker)
        if at < 0 or (at > 0 and text[at - 1] != "/"):
            raise CorruptLogError(f"{source}: sidecar path {reference!r} is not a file in "
                                  f"{SIDECAR_DIR}")
        text = text[at + len(marker):]
    name = unquote(text)
    if not name or "/" in name or name in (".", ".."):
        raise CorruptLogError(f"{source}: sidecar path {reference!r} does not name a file in "
                              f"{SIDECAR_DIR}")
    return f"{marker}{name}"


@dataclass(frozen=True, slots=True)
class LogFile:
    """A recognised file in ``_delta_log`` (``name`` without the directory)."""

    name: str
    kind: LogFileKind
    version: int
    part: int | None = None
    parts: int | None = None
    size: int | None = None
    last_modified_ms: int | None = None

    @property
    def path(self) -> str:
        return f"{LOG_DIR}/{self.name}"

    @property
    def is_json(self) -> bool:
        """A UUID-named checkpoint written as JSON lines rather than Parquet."""
        return self.kind == "checkpoint_v2" and self.name.endswith(".json")


MAX_VERSION = 2**63 - 1  # versions are signed 64-bit numbers (Spark's and delta-rs's Long/i64)


def parse_log_name(name: str, size: int | None = None, last_modified_ms: int | None = None
                   ) -> LogFile | None:
    """Classify a file name in ``_delta_log``; ``None`` for anything that is not a log file.

    A name whose version does not fit in a signed 64-bit number is no log file any writer
    could have made, and is ignored like any other stray name.
    """
    lf = _parse_log_name(name, size, last_modified_ms)
    if lf is not None and lf.version > MAX_VERSION:
        return None
    return lf


def version_gaps(versions: list[int], first: int, last: int, limit: int = 8
                 ) -> list[tuple[int, int]]:
    """Up to ``limit`` inclusive ranges of ``first..last`` absent from the sorted, distinct
    ``versions``.  Pure; costs the length of ``versions``, never the width of the range, so a
    stray commit a trillion versions ahead is found as one gap at once."""
    out: list[tuple[int, int]] = []
    expect = first
    for v in versions:
        if v < first:
            continue
        if v > last:
            break
        if v > expect:
            out.append((expect, v - 1))
            if len(out) >= limit:
                return out
        expect = v + 1
    if expect <= last and len(out) < limit:
        out.append((expect, last))
    return out


def format_gaps(gaps: list[tuple[int, int]]) -> str:
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in gaps)


def _parse_log_name(name: str, size: int | None, last_modified_ms: int | None) -> LogFile | None:
    if m := _COMMIT.match(name):
        return LogFile(name, "commit", int(m.group(1)), size=size, last_modified_ms=last_modified_ms)
    if m := _CHECKPOINT_CLASSIC.match(name):
        return LogFile(name, "checkpoint", int(m.group(1)), size=size,
                       last_modified_ms=last_modified_ms)
    if m := _CHECKPOINT_MULTI.match(name):
        return LogFile(name, "checkpoint_part", int(m.group(1)), part=int(m.group(2)),
                       parts=int(m.group(3)), size=size, last_modified_ms=last_modified_ms)
    if m := _CHECKPOINT_V2.match(name):
        return LogFile(name, "checkpoint_v2", int(m.group(1)), size=size,
                       last_modified_ms=last_modified_ms)
    if m := _CRC.match(name):
        return LogFile(name, "crc", int(m.group(1)), size=size, last_modified_ms=last_modified_ms)
    if m := _COMPACTED.match(name):
        return LogFile(name, "compacted", int(m.group(1)), part=int(m.group(2)), size=size,
                       last_modified_ms=last_modified_ms)
    return None
