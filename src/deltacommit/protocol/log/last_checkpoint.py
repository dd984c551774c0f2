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

from deltacommit.protocol.json_values import loads


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
class SidecarRef:
    """A sidecar file as ``sidecar`` actions and ``_last_checkpoint`` record it."""

    path: str
    size_in_bytes: int
    modification_time: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sizeInBytes": self.size_in_bytes,
                "modificationTime": self.modification_time}


@dataclass(frozen=True, slots=True)
class V2CheckpointInfo:
    """``_last_checkpoint``'s ``v2Checkpoint``: which UUID-named checkpoint of the version the
    hint describes (several may share a version), and its sidecars."""

    path: str
    size_in_bytes: int | None = None
    modification_time: int | None = None
    sidecar_files: tuple[SidecarRef, ...] | None = None

    @classmethod
    def from_json(cls, obj: Any) -> V2CheckpointInfo:
        if not isinstance(obj, dict):
            raise ValueError(f"v2Checkpoint must be an object, got {obj!r}")
        path = obj.get("path")
        if not isinstance(path, str) or not path:
            raise ValueError(f"v2Checkpoint.path must be a file name, got {path!r}")
        sidecars = obj.get("sidecarFiles")
        refs: tuple[SidecarRef, ...] | None = None
        if sidecars is not None:
            if not isinstance(sidecars, list):
                raise ValueError("v2Checkpoint.sidecarFiles must be a list")
            refs = tuple(_sidecar_ref(x) for x in sidecars)
        return cls(path.rsplit("/", 1)[-1], _opt_int(obj, "sizeInBytes", "v2Checkpoint."),
                   _opt_int(obj, "modificationTime", "v2Checkpoint."), refs)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        if self.size_in_bytes is not None:
            out["sizeInBytes"] = self.size_in_bytes
        if self.modification_time is not None:
            out["modificationTime"] = self.modification_time
        if self.sidecar_files is not None:
            out["sidecarFiles"] = [r.to_json() for r in self.sidecar_files]
        return out


def _opt_int(obj: dict[str, Any], key: str, prefix: str = "") -> int | None:
    v = obj.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{prefix}{key} must be a non-negative integer, got {v!r}")
    return v


def _sidecar_ref(x: Any) -> SidecarRef:
    if not isinstance(x, dict) or not isinstance(x.get("path"), str):
        raise ValueError(f"v2Checkpoint.sidecarFiles holds {x!r}, not a sidecar")
    return SidecarRef(x["path"], _opt_int(x, "sizeInBytes", "sidecar.") or 0,
                      _opt_int(x, "modificationTime", "sidecar.") or 0)


@dataclass(frozen=True, slots=True)
class LastCheckpoint:
    """The content of ``_delta_log/_last_checkpoint``."""

    version: int
    size: int
    parts: int | None = None
    size_in_bytes: int | None = None
    num_of_add_files: int | None = None
    #: Set when the hint describes a UUID-named (V2) checkpoint.
    v2: V2CheckpointInfo | None = None

    def describes(self, version: int, name: str) -> bool:
        """Whether the hint's counts are those of checkpoint file(s) ``name`` at ``version``:
        a hint naming a V2 checkpoint says nothing about another file of the same version."""
        return self.version == version and (self.v2 is None or self.v2.path == name)

    @classmethod
    def from_bytes(cls, data: bytes) -> LastCheckpoint:
        try:
            obj = loads(data)
        except ValueError as e:
            raise ValueError(f"not JSON: {e}") from None
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")

        def opt_int(key: str) -> int | None:
            return _opt_int(obj, key)

        version = opt_int("version")
        if version is None:
            raise ValueError("lacks version")
        checksum = obj.get("checksum")
        if isinstance(checksum, str) and checksum != last_checkpoint_checksum(obj):
            raise ValueError("checksum does not match its content")
        v2 = obj.get("v2Checkpoint")
        return cls(version=version, size=opt_int("size") or 0, parts=opt_int("parts"),
                   size_in_bytes=opt_int("sizeInBytes"), num_of_add_files=opt_int("numOfAddFiles"),
                   v2=None if v2 is None else V2CheckpointInfo.from_json(v2))

    def to_bytes(self) -> bytes:
        obj: dict[str, Any] = {"version": self.version, "size": self.size}
        if self.parts is not None:
            obj["parts"] = self.parts
        if self.size_in_bytes is not None:
            obj["sizeInBytes"] = self.size_in_bytes
        if self.num_of_add_files is not None:
            obj["numOfAddFiles"] = self.num_of_add_files
        if self.v2 is not None:
            obj["v2Checkpoint"] = self.v2.to_json()
        obj["checksum"] = last_checkpoint_checksum(obj)
        return json.dumps(obj, separators=(",", ":")).encode()
