"""Which commit mechanism a table expects, and moving a table from one to another.

Writers using different mechanisms do not exclude each other (a conditional put knows nothing of
a DynamoDB entry), so a table records its mechanism in its configuration
(``deltacommit.coordination`` and, per mechanism, the DynamoDB table and ``tablePath``) and a
writer configured otherwise refuses to commit (``Transaction._check_coordination``).

Moving a fleet, typically from Spark's DynamoDB protocol to S3 conditional writes once every
writer can use them, is one metaData commit made THROUGH THE CURRENT mechanism: every writer
still on it is excluded from that version as from any other, and from the next version on every
deltacommit writer of the old mechanism refuses while writers of the new one commit.  A
transaction that read the table before the switch and commits after it fails with
``MetadataChangedException``, as after any metadata change.  Writers that do not read the
configuration (Spark's own S3DynamoDBLogStore, delta-rs) must be moved first: that is the
operator's promise this command takes at its word.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from deltacommit.engine.transaction.log_table import open_table
from deltacommit.engine.transaction.transaction import CommitResult
from deltacommit.errors import CoordinationMismatchError
from deltacommit.io.logstore import open_log_store, registered_mechanisms
from deltacommit.protocol.table_config.config import TableConfig

#: The mechanisms a table can record: those of the log-store registry when this module was
#: imported (``registered_mechanisms()`` also has those registered since).
MECHANISMS = registered_mechanisms()


def recorded_coordination(configuration: Mapping[str, str | None]) -> dict[str, str]:
    """The ``deltacommit.coordination*`` keys a table's configuration records
    (``TableConfig.coordination``)."""
    return TableConfig(configuration).coordination


@dataclass(frozen=True)
class CoordinationStatus:
    """What a table records, and what a writer with the given options would use."""

    table_uri: str
    version: int
    recorded: dict[str, str]
    writer: dict[str, str]

    @property
    def pinned(self) -> bool:
        return bool(self.recorded)

    @property
    def writer_may_commit(self) -> bool:
        """Whether the table's guard lets a writer with these options commit."""
        return all(self.recorded.get(k, v) == v for k, v in self.writer.items())


def coordination_status(uri: str, storage_options: Mapping[str, str] | None = None
                        ) -> CoordinationStatus:
    table = open_table(uri, storage_options)
    return CoordinationStatus(table.uri, table.version,
                              table.table_config.coordination,
                              table.log_store.coordination_config())


def set_coordination(uri: str, *, storage_options: Mapping[str, str] | None = None,
                     new_storage_options: Mapping[str, str] | None = None) -> CommitResult | None:
    """Record the mechanism ``new_storage_options`` select, committing through the current one.

    ``storage_options`` must select the mechanism the table records now (any, on a table that
    records none, such as one created by Spark or delta-rs: pinning it).  Returns the commit, or
    None when the table already records exactly the new mechanism (nothing is written).
    """
    table = open_table(uri, storage_options)
    recorded = table.table_config.coordination
    current = table.log_store.coordination_config()
    mismatched = {k: v for k, v in current.items() if recorded.get(k, v) != v}
    if mismatched:
        raise CoordinationMismatchError(
            f"table {table.uri} records {_describe(recorded)}, but the current options select "
            f"{_describe(current)}: a change of mechanism must be committed through the one the "
            "table records now, so that its writers are excluded from that commit. Give the "
            "options of the table's current mechanism, and the new mechanism's as the target")
    target = open_log_store(table.uri, new_storage_options).coordination_config()
    if recorded == target:
        return None
    metadata = table.metadata
    configuration = {k: v for k, v in metadata.configuration.items() if k not in recorded}
    configuration.update(target)
    txn = table.transaction("SET TBLPROPERTIES", {
        "properties": ", ".join(f"{k}={v}" for k, v in sorted(target.items()))})
    txn.update_metadata(replace(metadata, configuration=configuration))
    txn.pinning = True
    return txn.commit()


def _describe(keys: Mapping[str, str]) -> str:
    if not keys:
        return "no commit mechanism"
    return ", ".join(f"{k}={v!r}" for k, v in sorted(keys.items()))
