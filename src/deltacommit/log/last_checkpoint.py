"""The ``_last_checkpoint`` hint: its fields and its JSON codec with PROTOCOL.md's checksum.  Pure.

The hint names a recent checkpoint so that a reader lists the log from there on, and records
that checkpoint's size so that a partial one can be recognised.  It is only a hint: a reader
that cannot parse it, or whose checksum does not match, lists the whole log instead.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote


def _canonical_value(v: Any) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int | float):
        return json.dumps(v)
    return '"' + quote(str(v), safe="") + '"'


def _canonical_pairs(v: Any, path: str, out: list[tuple[str, str]]) -> None:
    if isinstance(v, dict):
        for k, x in v.items():
            _canonical_pairs(x, (path + "+" if path else "") + '"' + quote(str(k), safe="") + '"', out)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _canonical_pairs(x, (path + "+" if path else "") + str(i), out)
    else:
        out.append((path, _canonical_value(v)))


def last_checkpoint_checksum(obj: dict[str, Any]) -> str:
    """MD5 of the canonical form PROTOCOL.md defines ("JSON checksum"); ``checksum`` excluded."""
    pairs: list[tuple[str, str]] = []
    _canonical_pairs({k: v for k, v in obj.items() if k != "checksum"}, "", pairs)
    pairs.sort(key=lambda p: p[0].encode("utf-8"))
    text = ",".join(f"{p}={v}" for p, v in pairs)
    return hashlib.md5(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class LastCheckpoint:
    """The content of ``_delta_log/_last_checkpoint``."""

    version: int
    size: int
    parts: int | None = None
    size_in_bytes: int | None = None
    num_of_add_files: int | None = None

    @classmethod
    def from_bytes(cls, data: bytes) -> LastCheckpoint:
        try:
            obj = json.loads(data)
        except ValueError as e:
            raise ValueError(f"not JSON: {e}") from None
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")

        def opt_int(key: str) -> int | None:
            v = obj.get(key)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{key} must be a non-negative integer, got {v!r}")
            return v

        version = opt_int("version")
        if version is None:
            raise ValueError("lacks version")
        checksum = obj.get("checksum")
        if isinstance(checksum, str) and checksum != last_checkpoint_checksum(obj):
            raise ValueError("checksum does not match its content")
        return cls(version=version, size=opt_int("size") or 0, parts=opt_int("parts"),
                   size_in_bytes=opt_int("sizeInBytes"), num_of_add_files=opt_int("numOfAddFiles"))

    def to_bytes(self) -> bytes:
        obj: dict[str, Any] = {"version": self.version, "size": self.size}
        if self.parts is not None:
            obj["parts"] = self.parts
        if self.size_in_bytes is not None:
            obj["sizeInBytes"] = self.size_in_bytes
        if self.num_of_add_files is not None:
            obj["numOfAddFiles"] = self.num_of_add_files
        obj["checksum"] = last_checkpoint_checksum(obj)
        return json.dumps(obj, separators=(",", ":")).encode()
