"""Log stores: how ``N.json`` comes to exist exactly once, per coordination mechanism.

``open_log_store`` chooses the mechanism a location's options select from the registry of
mechanisms (``logstore.registry``); ``register_log_store`` adds or overrides one.
"""

from __future__ import annotations

from deltacommit.io.logstore.base import COORDINATION_KEY, LogStore
from deltacommit.io.logstore.conditional import ConditionalPutLogStore
from deltacommit.io.logstore.registry import (
    DEFAULT_MECHANISM,
    LogStoreFactory,
    Selector,
    log_store_factory,
    log_store_for,
    open_log_store,
    register_log_store,
    registered_mechanisms,
    unregister_log_store,
)

__all__ = ["COORDINATION_KEY", "DEFAULT_MECHANISM", "ConditionalPutLogStore", "LogStore",
           "LogStoreFactory", "Selector", "log_store_factory", "log_store_for", "open_log_store",
           "register_log_store", "registered_mechanisms", "unregister_log_store"]
