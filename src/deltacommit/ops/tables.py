"""What the write verbs need of a table object, and of whoever opens one by location.

``DeltaTable`` is such a table, and the facade (``deltacommit.table``) opens and creates them:
the verbs type against these protocols and are handed the opener, so they sit below the
facade instead of importing it back (``tests/architecture/test_layers.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import pyarrow as pa

from deltacommit.engine.transaction.transaction import TransactionTable

if TYPE_CHECKING:
    from deltacommit.engine.transaction.transaction import Transaction
    from deltacommit.io.logstore.base import LogStore
    from deltacommit.io.storage.base import ObjectStore

__all__ = ["Tables", "WriteTable"]


class WriteTable(TransactionTable, Protocol):
    """A table object a write commits through (``DeltaTable`` is one)."""

    log_store: LogStore
    storage_options: dict[str, str]

    @property
    def store(self) -> ObjectStore:
        """The object store of the table's location (its log store's)."""
        ...

    @property
    def schema(self) -> pa.Schema: ...

    @property
    def partition_columns(self) -> list[str]: ...

    @property
    def configuration(self) -> dict[str, str | None]: ...

    @property
    def version(self) -> int: ...

    def app_version(self, app_id: str) -> int | None: ...

    def update(self) -> int: ...

    def transaction(self, operation: str = ..., operation_parameters: Mapping[str, Any] | None = ...,
                    isolation_level: Any = ...) -> Transaction: ...


T_co = TypeVar("T_co", bound=WriteTable, covariant=True)


class Tables(Protocol[T_co]):
    """Opens and creates the tables a verb is given by location (``deltacommit.table``'s
    ``TABLES`` opens ``DeltaTable`` objects)."""

    def open(self, uri: str, storage_options: Mapping[str, str] | None, *,
             blind: bool = False) -> T_co:
        """The table at ``uri`` (TableNotFoundError if none).  ``blind``: for a blind append,
        the process's cached state may be taken without updating it."""
        ...

    def create(self, uri: str, schema: pa.Schema, *, partition_by: Sequence[str] | None,
               configuration: Mapping[str, str] | None,
               storage_options: Mapping[str, str] | None) -> T_co:
        """A new table at ``uri`` (TableExistsError if one is there)."""
        ...
