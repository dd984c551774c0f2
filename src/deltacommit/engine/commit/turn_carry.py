"""The carry file of a host turn: the last commits handed on, by version, for the next holders.

A commit at most ``CARRIED_BYTES`` large travels with the turn's record (``<key>.carry``); the
next holder takes one only where a commit read from the log vouches for its bytes
(``engine.commit.host_turn``, ``TableLog.advance_to``).  Decoding is total: an empty, torn,
forged or truncated file holds nothing.
"""

from __future__ import annotations

import struct

#: A commit at most this large travels with its record (``<key>.carry``), for the next holders
#: to take once a commit read from the log vouches for it (``TableLog.advance_to``).  The carry
#: file holds the last ``CARRIED_COMMITS`` commits handed on, at most this many bytes of them.
CARRIED_BYTES = 256 * 1024
CARRIED_COMMITS = 16
# The carry file: magic and count, then each commit's version and length, and its bytes.
_CARRY_HEAD = struct.Struct("!4sI")
_CARRY_ENTRY = struct.Struct("!qI")
_CARRY_MAGIC = b"DCC1"
CARRY_FILE_SIZE = _CARRY_HEAD.size + CARRIED_COMMITS * _CARRY_ENTRY.size + CARRIED_BYTES


def encode_carried(commits: dict[int, bytes]) -> bytes:
    """The carry file holding ``commits`` (by version)."""
    parts = [_CARRY_HEAD.pack(_CARRY_MAGIC, len(commits))]
    for version, data in sorted(commits.items(), reverse=True):
        parts.append(_CARRY_ENTRY.pack(version, len(data)))
        parts.append(data)
    return b"".join(parts)


def decode_carried(data: bytes) -> dict[int, bytes]:
    """The commits a carry file holds, by version; none from anything else (an empty file, a
    torn, forged or truncated one: each commit taken is checked against the log anyway)."""
    if len(data) < _CARRY_HEAD.size:
        return {}
    magic, count = _CARRY_HEAD.unpack_from(data)
    if magic != _CARRY_MAGIC or count > CARRIED_COMMITS:
        return {}
    out: dict[int, bytes] = {}
    at = _CARRY_HEAD.size
    for _ in range(count):
        if at + _CARRY_ENTRY.size > len(data):
            return {}
        version, size = _CARRY_ENTRY.unpack_from(data, at)
        at += _CARRY_ENTRY.size
        if version < 0 or at + size > len(data):
            return {}
        out[version] = data[at:at + size]
        at += size
    return out


__all__ = ["CARRIED_BYTES", "CARRIED_COMMITS", "CARRY_FILE_SIZE", "decode_carried", "encode_carried"]
