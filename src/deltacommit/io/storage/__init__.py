"""Object stores: bytes in and out of local directories, memory and S3.

``open_store`` opens a location with the factory registered for its URI scheme
(``storage.registry``); ``register_store`` adds or overrides one.
"""

from __future__ import annotations

from deltacommit.io.storage.base import ObjectMeta, ObjectStore, PutMode
from deltacommit.io.storage.local import LocalStore
from deltacommit.io.storage.memory import MemoryStore
from deltacommit.io.storage.registry import (
    StoreFactory,
    open_store,
    register_store,
    registered_schemes,
    unregister_store,
)

__all__ = ["SUPPORTED_SCHEMES", "LocalStore", "MemoryStore", "ObjectMeta", "ObjectStore", "PutMode",
           "StoreFactory", "open_store", "register_store", "registered_schemes", "unregister_store"]

#: The built-in schemes (``registered_schemes()`` also has those registered since).
SUPPORTED_SCHEMES = registered_schemes()
