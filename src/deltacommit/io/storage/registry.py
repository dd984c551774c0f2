"""Which object store opens a location: one registry of store factories by URI scheme.

Built in: local paths and ``file://`` (``LocalStore``), ``memory://`` (``MemoryStore``) and
``s3://`` with Hadoop's ``s3a://`` and ``s3n://`` (``S3Store``, which keeps the scheme in its
URI).  ``register_store`` adds a scheme or overrides a built-in one, as pyiceberg's FileIO
registry and delta-rs's object store factories allow: a test can serve ``s3://`` from memory, a
deployment can add a scheme, without any caller changing.  Factories import what they need when
called, so the S3 factory is the only place boto3 is imported, and local use needs no AWS
packages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from deltacommit.errors import StorageConfigError
from deltacommit.io.storage.base import ObjectStore
from deltacommit.io.storage.local import LocalStore
from deltacommit.io.storage.memory import MemoryStore
from deltacommit.runtime.process_state import ForkSafeLock

#: ``factory(uri, storage_options)``: the store rooted at ``uri``.
StoreFactory = Callable[[str, Mapping[str, str] | None], ObjectStore]

_FACTORIES: dict[str, StoreFactory] = {}
#: The registrations are the process's by design (the extension points); a forked child keeps
#: them, with a lock of its own.
_LOCK = ForkSafeLock()



def register_store(scheme: str, factory: StoreFactory) -> StoreFactory | None:
    """Open locations of ``scheme`` (``s3``, without ``://``; ``file`` also serves plain paths)
    with ``factory`` from now on; returns the factory it replaces, if any."""
    key = scheme.lower()
    if not key or "://" in key:
        raise ValueError(f"a URI scheme such as 's3' is expected, got {scheme!r}")
    with _LOCK:
        previous = _FACTORIES.get(key)
        _FACTORIES[key] = factory
    return previous


def unregister_store(scheme: str) -> StoreFactory | None:
    """Forget the factory of ``scheme``; returns it (None if there was none)."""
    with _LOCK:
        return _FACTORIES.pop(scheme.lower(), None)


def registered_schemes() -> tuple[str, ...]:
    """The schemes that open a store, in the order they were first registered."""
    with _LOCK:
        return tuple(_FACTORIES)


def uri_scheme(uri: str) -> str:
    """The scheme of a location, lower case; ``file`` for a plain path."""
    return uri.split("://", 1)[0].lower() if "://" in uri else "file"


def open_store(uri: str, storage_options: Mapping[str, str] | None = None) -> ObjectStore:
    """The store for a table URI, by the factory registered for its scheme."""
    with _LOCK:
        factory = _FACTORIES.get(uri_scheme(uri))
    if factory is None:
        raise StorageConfigError(
            f"unsupported location {uri!r}: the supported schemes are local paths, "
            + ", ".join(f"{s}://" for s in registered_schemes()))
    return factory(uri, storage_options)


# --------------------------------------------------------------------------- the built-in stores


def _open_local(uri: str, storage_options: Mapping[str, str] | None) -> ObjectStore:
    return LocalStore(uri)


def _open_memory(uri: str, storage_options: Mapping[str, str] | None) -> ObjectStore:
    name, _, prefix = uri.split("://", 1)[1].partition("/")
    return MemoryStore(name, prefix)


def _open_s3(uri: str, storage_options: Mapping[str, str] | None) -> ObjectStore:
    try:
        from deltacommit.io.storage.s3 import S3Store
    except ImportError:
        # No boto3 (a Spark executor, say): pyarrow's S3 reads and writes data files; a
        # commit's conditional write then fails naming the fix.
        from deltacommit.io.storage.arrow_s3 import ArrowS3Store

        return ArrowS3Store.from_uri(uri, storage_options)
    return S3Store.from_uri(uri, storage_options)


register_store("file", _open_local)
register_store("memory", _open_memory)
for _scheme in ("s3", "s3a", "s3n"):
    register_store(_scheme, _open_s3)
