"""Object stores: bytes in and out of local directories, memory and S3."""

from __future__ import annotations

from collections.abc import Mapping

from deltacommit.errors import StorageConfigError
from deltacommit.storage.base import ObjectMeta, ObjectStore
from deltacommit.storage.local import LocalStore
from deltacommit.storage.memory import MemoryStore

__all__ = ["SUPPORTED_SCHEMES", "LocalStore", "MemoryStore", "ObjectMeta", "ObjectStore", "open_store"]

SUPPORTED_SCHEMES = ("file", "memory", "s3", "s3a", "s3n")


def open_store(uri: str, storage_options: Mapping[str, str] | None = None) -> ObjectStore:
    """The store for a table URI: local paths and ``file://``, ``memory://``, ``s3://``.

    ``s3a://`` and ``s3n://`` (Hadoop's names, which Spark tables carry) open S3 too and keep
    their scheme in the store's URI.  boto3 is imported only for S3 locations, so local use
    needs no AWS packages.
    """
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if scheme in ("", "file"):
        return LocalStore(uri)
    if scheme == "memory":
        rest = uri.split("://", 1)[1]
        name, _, prefix = rest.partition("/")
        return MemoryStore(name, prefix)
    if scheme in ("s3", "s3a", "s3n"):
        try:
            from deltacommit.storage.s3 import S3Store
        except ImportError as e:
            raise StorageConfigError(
                f"{uri!r} is an S3 location, which needs boto3: pip install 'deltacommit[s3]' "
                f"({e})") from e
        return S3Store.from_uri(uri, storage_options)
    raise StorageConfigError(
        f"unsupported location {uri!r}: the supported schemes are local paths, "
        + ", ".join(f"{s}://" for s in SUPPORTED_SCHEMES))

